"""Searches on a read replica, for real (issue 36): a primary and a streaming standby started from the
embedded server's own binaries (`tests.helpers.standby`), the service opened on the primary with
the standby as its replica (`Settings.replica_dsns`), under both loops.

- reads go to the replica, and read-your-writes holds: after each acknowledged ingest a search finds
  the document, after each acknowledged delete it never returns its passages;
- the replica's replay paused (a replica lagging without bound): reads go to the primary, a deleted
  passage never comes back, the lag past its bound marks the replica skipped, and it serves again
  once replay resumes;
- the replica stopped: reads go to the primary, and the replica serves again once it is back.

Waits are bounded by progress (the router's own checks), never asserted in seconds."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from knowledge.config import Settings
from knowledge.models import KnowledgeQuery, Principal, TrustLevel, Visibility
from knowledge.retrieval.search import LexicalArm
from knowledge.service import KnowledgeService
from knowledge.service.status import Health
from knowledge.store.db import open_pool
from tests.conftest import create_database, new_database, open_sql
from tests.gates.test_visibility_isolation import VisibilityMachine, share
from tests.helpers.progress import hang_detector
from tests.helpers.standby import Pair, primary_and_standby
from tests.ingest.test_ingest import put


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with primary_and_standby() as started:
        yield started


@pytest.fixture
async def replicated(pair: Pair, request: pytest.FixtureRequest) -> AsyncIterator[tuple[KnowledgeService, str]]:
    """A service on a fresh database of the primary, the standby's copy of it as its replica. Its
    bounds are far above what a busy machine's replay takes (a read waits for replay, not for a
    clock), except where a test marks ``lag_bound`` to see a lagging replica skipped."""
    dsn = await create_database(pair.primary_dsn("postgres"))
    database = dsn.split("?")[0].rsplit("/", 1)[1]
    marked = request.node.get_closest_marker("lag_bound")
    settings = Settings(dsn=dsn, replica_dsns=(pair.standby_dsn(database),), pool_min_size=1, pool_max_size=4,
                        sweep_interval_seconds=None, replica_max_lag_seconds=marked.args[0] if marked else 120.0,
                        replica_check_seconds=0.1, replica_wait_seconds=120.0,
                        application_name=f"kt-replica-{uuid.uuid4().hex[:8]}")
    async with KnowledgeService.open(settings) as svc:
        await _until(svc, lambda h: h.replicas[0].healthy)  # the standby has replayed the new database
        yield svc, pair.standby_dsn(database)


async def _until(svc: KnowledgeService, condition: Callable[[Health], bool]) -> None:
    with hang_detector():
        while not condition(await svc.health()):  # noqa: ASYNC110 - the read router's state, polled
            await anyio.sleep(0.05)


def _owner(tenant: str) -> Principal:
    return Principal(tenant_id=tenant, principal_id="alice", scopes=frozenset({"knowledge.write"}))


async def _round(svc: KnowledgeService, tenant: str, word: str) -> None:
    """Ingest a document naming ``word``, search for it (found: read-your-writes), delete it, search
    again (gone: the deletion gate, with a replica in the path)."""
    text = f"# {word}\n\nThe {word} runbook says to drain the {word} queue before a restart.\n"
    doc = await svc.ingest(await put(svc, tenant, text), word, Visibility.TENANT, _owner(tenant),
                           origin_trust=TrustLevel.USER)
    query = KnowledgeQuery(tenant_id=tenant, principal_id="alice", text=f"drain the {word} queue")
    assert [p.document_id for p in await svc.search(query)] == [doc.document_id], word
    await svc.delete(doc.document_id, _owner(tenant))
    assert await svc.search(query) == [], word


@pytest.mark.anyio
async def test_replica_serves_searches_and_reads_your_writes(replicated: tuple[KnowledgeService, str],
                                                             tenant: str) -> None:
    svc, _ = replicated
    for i in range(12):
        await _round(svc, tenant, f"zeta{i}x")
    health = await svc.health()
    assert health.replicas[0].healthy and health.replicas[0].reads >= 12, health  # the searches took the replica
    assert (await svc.corpus_size(tenant)).documents == 0


@pytest.mark.anyio
@pytest.mark.lag_bound(0.5)
async def test_replica_lagging_is_skipped_and_a_deleted_passage_never_comes_back(
        replicated: tuple[KnowledgeService, str], tenant: str) -> None:
    svc, standby = replicated
    async with open_pool(standby, min_size=1, max_size=1, application_name="kt-replica-control") as control:
        await control.execute("SELECT pg_wal_replay_pause()")
        try:
            before = (await svc.health()).primary_reads
            for i in range(4):  # the replica has not replayed these: the primary answers, and never stale
                await _round(svc, tenant, f"omega{i}x")
            assert (await svc.health()).primary_reads >= before + 8
            await _until(svc, lambda h: not h.replicas[0].healthy)  # lagging past its bound: skipped
            assert "behind the primary" in ((await svc.health()).replicas[0].why or "")
        finally:
            await control.execute("SELECT pg_wal_replay_resume()")
    await _until(svc, lambda h: h.replicas[0].healthy)  # caught up: it serves again
    served = (await svc.health()).replicas[0].reads
    await _round(svc, tenant, "omegaback")
    assert (await svc.health()).replicas[0].reads > served


@pytest.mark.anyio
async def test_replica_down_is_skipped_and_comes_back(replicated: tuple[KnowledgeService, str], pair: Pair,
                                                      tenant: str) -> None:
    svc, _ = replicated
    await anyio.to_thread.run_sync(pair.stop_standby)
    try:
        await _until(svc, lambda h: not h.replicas[0].healthy)
        before = (await svc.health()).primary_reads
        await _round(svc, tenant, "sigmadown")
        assert (await svc.health()).primary_reads >= before + 2
    finally:
        await anyio.to_thread.run_sync(pair.start_standby)
    await _until(svc, lambda h: h.replicas[0].healthy)
    served = (await svc.health()).replicas[0].reads
    await _round(svc, tenant, "sigmaback")
    assert (await svc.health()).replicas[0].reads > served


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gate_visibility_isolation_with_a_replica_in_the_path(pair: Pair, backend: str) -> None:
    """The visibility gate's state machine (ingests, searches, citations, turns, tool calls and
    traces across tenants, principals, projects and ceilings) against a service whose searches and
    citation reads go to the replica: nothing it returns may be inadmissible, and nothing admissible
    that was acknowledged may be missing."""
    dsn = new_database(pair.primary_dsn("postgres"))
    database = dsn.split("?")[0].rsplit("/", 1)[1]
    cfg = Settings(dsn=dsn, replica_dsns=(pair.standby_dsn(database),), sweep_interval_seconds=None, pool_max_size=4,
                   replica_check_seconds=0.1)
    with start_blocking_portal(backend) as portal, portal.wrap_async_context_manager(
            KnowledgeService.open(cfg)) as svc, portal.wrap_async_context_manager(open_sql(dsn)) as db:
        portal.call(_until, svc, lambda h: h.replicas[0].healthy)
        share(VisibilityMachine, portal, svc, db, [LexicalArm()])
        run_state_machine_as_test(VisibilityMachine, settings=settings(
            max_examples=6, stateful_step_count=25, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
        health = portal.call(svc.health)
    assert health.replicas[0].reads > 0, health  # the replica was in the path
