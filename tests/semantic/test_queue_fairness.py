"""The embedding queue serves tenants in turn, and a command's drain serves its own tenant (issue 37:
``knowledge ingest --wait-embedded 900`` saw 0 of 672 chunks embedded in 15 minutes, its tenant's sets
queued behind other tenants' backlog). Claims are read with the arm queueing only (no model loaded)."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest

from knowledge.semantic import queue
from knowledge.semantic.encoder import available
from knowledge.semantic.queue import EmbeddingDrain
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from tests.conftest import create_database, open_sql
from tests.ingest.test_ingest import put, writer
from tests.semantic.test_semantic import semantic_settings

pytestmark = pytest.mark.skipif(not available(), reason="the semantic extra is not installed")


async def queue_documents(svc: KnowledgeService, tenant: str, n: int) -> None:
    for i in range(n):
        ref = await put(svc, tenant, f"# Doc {i}\n\nThe pelican {uuid.uuid4().hex} crosses the harbour.\n")
        await svc.ingest(ref, f"doc {i}", "tenant", writer(tenant), origin_trust="user")  # type: ignore[arg-type]


def drain(db: Database, version: str, **kw: Any) -> EmbeddingDrain:
    return EmbeddingDrain(db, None, version, **kw)  # type: ignore[arg-type]  # claims only: no embedder


@pytest.mark.anyio
async def test_a_tenants_new_sets_are_claimed_before_another_tenants_backlog(admin_dsn: str) -> None:
    busy, newcomer = f"t-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
    dsn = await create_database(admin_dsn)  # a queue of its own: no other test's rows in the turn order
    async with KnowledgeService.open(semantic_settings(dsn, semantic_model=False)) as svc, open_sql(dsn) as db:
        version = svc.semantic_version
        assert version is not None and "semantic" not in svc.retrieval().arms  # queued for another's drain
        await queue_documents(svc, busy, 6)
        await queue_documents(svc, newcomer, 2)
        # A drain for every tenant: each tenant's oldest set first, then each one's second.
        first = await drain(db, version, claim_rows=2)._claim()
        assert sorted(r.tenant_id for r in first) == sorted([busy, newcomer])
        # A command's drain for one tenant claims that tenant's sets only, and all of them.
        own = await drain(db, version, claim_rows=8, tenant=newcomer)._claim()
        assert [r.tenant_id for r in own] == [newcomer]  # its second set; the first is leased above
        assert await drain(db, version, claim_rows=8, tenant=newcomer)._claim() == []
        again = await drain(db, version, claim_rows=8, tenant=busy)._claim()
        assert {r.tenant_id for r in again} == {busy} and len(again) == 5


@pytest.mark.anyio
async def test_a_failed_batchs_rows_go_back_as_the_database_returns_not_after_their_lease(
        admin_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch fails most often because the database went away (a restart, a terminated connection);
    handing its rows back is retried while it returns, so another claim takes them at once — rows left
    leased waited out the two-minute lease (a stress run's queue drained 113 s after its load)."""
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    dsn = await create_database(admin_dsn)
    async with KnowledgeService.open(semantic_settings(dsn, semantic_model=False)) as svc, open_sql(dsn) as db:
        version = svc.semantic_version
        assert version is not None
        await queue_documents(svc, tenant, 1)
        claimed = await drain(db, version, claim_rows=1)._claim()
        assert len(claimed) == 1 and await drain(db, version, claim_rows=1)._claim() == []  # leased
        real, calls = queue.release_claim, []

        async def down_twice(*args: Any, **kwargs: Any) -> None:
            calls.append(1)
            if len(calls) <= 2:
                raise asyncpg.ConnectionDoesNotExistError("the server restarted")
            await real(*args, **kwargs)

        monkeypatch.setattr(queue, "release_claim", down_twice)
        await drain(db, version)._release(claimed, failed=True)
        assert len(calls) == 3
        again = await drain(db, version, claim_rows=1)._claim()
        assert [(r.document_id, r.seq) for r in again] == [(r.document_id, r.seq) for r in claimed]
