"""Database faults: what is transient and safe to repeat is retried; the rest is a typed error.

See `knowledge.store.retry` for which operations are retried and why that is safe."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import asyncpg
import pytest

import knowledge.store.deletion as lifecycle
import knowledge.store.retry as retry
from knowledge.errors import CommitUnknown, DatabaseUnavailable, IngestRefused
from knowledge.models import KnowledgeQuery, TrustLevel, Visibility
from knowledge.service import KnowledgeService
from knowledge.store.db import Connection
from tests.conftest import open_sql
from tests.ingest.test_ingest import DOC, footprint, put, writer

pytestmark = pytest.mark.anyio

FAST = (0.01, 0.02, 0.05)


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch, service: KnowledgeService) -> None:
    monkeypatch.setattr(retry, "RETRY_DELAYS", FAST)
    service.faults.retry_delays = FAST


async def _terminate_pool(svc: KnowledgeService) -> int:
    """Terminate every idle backend of the service's pool from a pool of the test's own."""
    async with open_sql(svc.dsn) as db:
        return int(await db.fetchval(
            """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
               WHERE application_name = $1 AND pid <> pg_backend_pid()""", svc.settings.application_name))


async def test_ingest_retries_a_dropped_connection_and_writes_one_document(service: KnowledgeService,
                                                                           tenant: str) -> None:
    drops = 0

    async def hook(at: str, conn: Connection) -> None:
        nonlocal drops
        if at == "before_commit" and drops < 2:
            drops += 1
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    service.faults.ingest_step = hook
    ref = await put(service, tenant, DOC)
    doc = await service.ingest(ref, "G", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
    assert drops == 2
    found = await footprint(service, tenant)
    assert (found["documents"], found["events"]) == (1, 1) and found["chunks"] > 0
    assert (await service.ingest_stats(tenant)).accepted == 1
    passages = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="rollback"))
    assert {p.document_id for p in passages} == {doc.document_id}


async def test_a_commit_whose_reply_was_lost_is_resolved_not_repeated(service: KnowledgeService,
                                                                       tenant: str) -> None:
    """COMMIT took effect but the caller saw a dropped connection: the retry finds the version it wrote
    and returns it, rather than ingesting again or refusing ``document_exists``."""
    lost = 0

    async def hook(at: str, conn: Connection) -> None:
        nonlocal lost
        if at == "after_commit" and not lost:
            lost += 1
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")

    service.faults.ingest_step = hook
    ref = await put(service, tenant, DOC)
    doc = await service.ingest(ref, "G", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
    assert lost == 1
    stored = await service.document(doc.document_id, tenant_id=tenant)
    assert stored is not None and stored.document.version == doc.version == 1
    assert stored.source.artifact_id == doc.source_ref.artifact_id and stored.source.sha256 == doc.source_ref.sha256
    assert (await footprint(service, tenant))["documents"] == 1

    # A new version through the same lost reply: version 2, once.
    lost = 0
    v2 = await service.ingest(await put(service, tenant, DOC + "\nMore.\n"), "G", "tenant", writer(tenant),
                              origin_trust=TrustLevel.USER, replaces=doc.document_id)
    assert (lost, v2.version) == (1, 2)
    versions = await service.document_versions(doc.document_id, tenant_id=tenant)
    assert [v.document.version for v in versions] == [1, 2]


async def test_a_lost_commit_the_database_cannot_be_asked_about_is_commit_unknown(service: KnowledgeService,
                                                                                   tenant: str) -> None:
    """COMMIT took effect, its answer was lost, and every attempt to ask the database since fails:
    the caller is told `CommitUnknown` (a `DatabaseUnavailable`: in, or nothing of it) — not a
    plain "unavailable" that reads as "not written" — and it is not counted as a failure. The same
    request again, the database back, is ``document_exists``: it was in."""
    lost, asked, reachable = 0, 0, False

    async def hook(at: str, conn: Connection | None) -> None:
        nonlocal lost, asked
        if at == "after_commit" and not lost:
            lost += 1
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")
        if at == "resolve" and not reachable:  # whether it took effect: every question fails
            asked += 1
            raise asyncpg.ConnectionDoesNotExistError("the server is gone")

    service.faults.ingest_step = hook
    ref = await put(service, tenant, DOC)
    document_id = uuid.uuid4()

    async def ingest() -> None:
        await service.ingest(ref, "G", Visibility.TENANT, writer(tenant), origin_trust=TrustLevel.USER,
                             document_id=document_id)

    with pytest.raises(CommitUnknown) as raised:
        await ingest()
    assert isinstance(raised.value, DatabaseUnavailable) and raised.value.reason == "commit_unknown"
    assert str(document_id) in raised.value.message
    assert (lost, asked) == (1, len(FAST) + 1)
    assert (await footprint(service, tenant))["documents"] == 1  # it was in
    stats = await service.ingest_stats(tenant)
    assert (stats.accepted, stats.failed) == (1, {})
    reachable = True
    with pytest.raises(IngestRefused) as again:
        await ingest()
    assert again.value.reason == "document_exists"


async def test_ingest_that_keeps_failing_is_database_unavailable_and_leaves_nothing(service: KnowledgeService,
                                                                                    tenant: str) -> None:
    async def hook(at: str, conn: Connection) -> None:
        if at == "before_write":
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    service.faults.ingest_step = hook
    ref = await put(service, tenant, DOC)
    with pytest.raises(DatabaseUnavailable) as raised:
        await service.ingest(ref, "G", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
    assert raised.value.reason == "database_unavailable"
    found = await footprint(service, tenant)
    assert (found["documents"], found["chunks"], found["events"], found["sources"]) == (0, 0, 0, 0)
    assert (await service.ingest_stats(tenant)).failed == {"DatabaseUnavailable": 1}


async def test_reads_ride_out_a_terminated_pool(service: KnowledgeService, tenant: str) -> None:
    doc = await service.ingest(await put(service, tenant, DOC), "G", "tenant", writer(tenant),
                               origin_trust=TrustLevel.USER)
    query = KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="rollback")
    expected = await service.search(query)
    for read in (lambda: service.search(query),
                 lambda: service.operator_get_chunk(expected[0].chunk_id, tenant_id=tenant),
                 lambda: service.documents(tenant),
                 lambda: service.corpus_size(tenant)):
        assert await _terminate_pool(service) >= 1
        assert await read()
    assert [p.chunk_id for p in await service.search(query)] == [p.chunk_id for p in expected]
    assert doc.document_id in {d.document_id for d in await service.documents(tenant)}


async def test_a_search_that_keeps_failing_is_a_typed_error(service: KnowledgeService, tenant: str) -> None:
    calls = 0

    async def broken(at: str, query: Any) -> None:
        nonlocal calls
        if at == "before":
            calls += 1
            raise asyncpg.ConnectionDoesNotExistError("injected")

    service.faults.search_step = broken
    with pytest.raises(DatabaseUnavailable, match="search"):
        await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="rollback"))
    assert calls == len(FAST) + 1


async def test_a_delete_whose_commit_reply_was_lost_reports_the_deletion(service: KnowledgeService, tenant: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    doc = await service.ingest(await put(service, tenant, DOC), "G", "tenant", writer(tenant),
                               origin_trust=TrustLevel.USER)
    chunks = (await footprint(service, tenant))["chunks"]
    real = lifecycle._delete_once
    lost = 0

    async def once(*args: Any) -> int:
        nonlocal lost
        deleted = await real(*args)
        if not lost:
            lost += 1
            raise asyncpg.ConnectionDoesNotExistError("reply lost")
        return deleted

    monkeypatch.setattr(lifecycle, "_delete_once", once)
    assert await service.delete(doc.document_id, writer(tenant)) == chunks
    assert lost == 1 and (await footprint(service, tenant))["documents"] == 0


async def test_cancelling_during_backoff_leaves_nothing(service: KnowledgeService, tenant: str) -> None:
    service.faults.retry_delays = (30.0,)

    async def hook(at: str, conn: Connection) -> None:
        if at == "before_commit":
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    service.faults.ingest_step = hook
    ref = await put(service, tenant, DOC)
    with anyio.move_on_after(1.0) as scope:
        await service.ingest(ref, "G", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
    assert scope.cancelled_caught
    assert (await footprint(service, tenant))["documents"] == 0
