"""A cancellation is never lost, whichever loop the host runs and however it cancels (issue 37).

asyncio's ``Task.cancel()`` is one-shot: ``asyncio.timeout``, a ``TaskGroup`` and Ctrl-C under
``asyncio.run`` deliver one ``CancelledError`` and rely on it reaching them. trio's and anyio's cancel
scopes stay cancelled until they exit. The property, over cancellations at random moments around
``ingest``, ``ingest_many``, ``search`` and ``turn``:

- **observed**: a one-shot cancellation requested before the call returned is raised to its caller
  (``TimeoutError`` out of ``asyncio.timeout``, a cancelled task); a scope's is caught by the scope;
- **nothing half-written**: every document in the tenant is whole (its chunk set, chunks, source,
  event), every trace is one row;
- **knowable**: what is in the database is exactly what the caller was told took effect — the
  returned result, ``on_done``'s committed documents, or `took_effect` of the raised cancellation.

The moments are fractions (0 to 2) of the operation's own median duration, measured at the start of
the same run: the draw adapts to the machine's speed, and nothing here asserts a time.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from knowledge.config import Settings
from knowledge.core.prepare import IngestRequest
from knowledge.core.turn import TurnRequest
from knowledge.models import ArtifactOrigin, KnowledgeDocument, KnowledgeQuery, Principal, TrustLevel, Visibility
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.structured import took_effect
from tests.conftest import open_sql

OPS = ("ingest", "ingest_many", "search", "turn")
ROUNDS = 30  # per (op, canceller): 8 asyncio cases x 30 = 240 one-shot cancellations, and the scope cases


def owner(tenant: str) -> Principal:
    return Principal(tenant_id=tenant, principal_id="alice", scopes=frozenset({"knowledge.write"}))


def text(n: int) -> bytes:
    body = " ".join(f"The pelican step {i} of guide {n} checks the harbour before it continues." for i in range(40))
    return f"# Guide {n} {uuid.uuid4().hex}\n\n## Pelicans\n\n{body}\n\n## Harbour\n\n{body}\n".encode()


@dataclass
class Round:
    """One call of one operation, made ready (its sources stored) before the clock starts."""

    svc: KnowledgeService
    db: Database  # the test's own pool on the service's database: what is there, read behind the service's back
    tenant: str
    op: str
    requests: list[IngestRequest] = field(default_factory=list)
    committed: list[KnowledgeDocument] = field(default_factory=list)  # what on_done reported

    @classmethod
    async def ready(cls, svc: KnowledgeService, db: Database, tenant: str, op: str) -> Round:
        r = cls(svc, db, tenant, op)
        for n in range({"ingest": 1, "ingest_many": 3}.get(op, 0)):
            ref = await svc.put_artifact(tenant, text(n), media_type="text/markdown", origin=ArtifactOrigin.UPLOAD,
                                          trust=TrustLevel.USER, file_name=f"{n}.md")
            r.requests.append(IngestRequest(source=ref, title=f"{n}.md", visibility=Visibility.TENANT,
                                            principal=owner(tenant), origin_trust=TrustLevel.USER))
        return r

    def call(self) -> Awaitable[Any]:
        query = KnowledgeQuery(tenant_id=self.tenant, principal_id="alice", text="pelican harbour")
        if self.op == "ingest":
            q = self.requests[0]
            return self.svc.ingest(q.source, q.title, q.visibility, q.principal, origin_trust=q.origin_trust)
        if self.op == "ingest_many":
            return self.svc.ingest_many(self.requests, on_done=self._on_done)
        if self.op == "search":
            return self.svc.search(query)
        return self.svc.turn(TurnRequest(query=query, region_tokens=4000, session_id="s", turn_id="t", retrieve=True))

    def _on_done(self, index: int, outcome: object) -> None:
        if isinstance(outcome, KnowledgeDocument):
            self.committed.append(outcome)

    def told(self, result: tuple[Any] | None) -> tuple[set[uuid.UUID], int]:
        """What the caller was told took effect: documents, and traces (0 or 1)."""
        if result is None:
            return {d.document_id for d in self.committed}, 0
        value = result[0]
        if self.op == "ingest":
            return {value.document_id}, 0
        if self.op == "ingest_many":
            return {o.document_id for o in value if isinstance(o, KnowledgeDocument)}, 0
        return set(), int(self.op == "turn")


async def snapshot(db: Database, tenant: str) -> tuple[set[uuid.UUID], int]:
    """The tenant's documents (each checked whole) and its traces."""
    rows = await db.fetch(
        """SELECT d.document_id,
                  (SELECT count(*) FROM knowledge_chunk_sets s WHERE s.tenant_id = d.tenant_id
                     AND s.document_id = d.document_id) AS sets,
                  (SELECT count(*) FROM knowledge_chunks c WHERE c.tenant_id = d.tenant_id
                     AND c.document_id = d.document_id) AS chunks,
                  (SELECT count(*) FROM knowledge_events e WHERE e.tenant_id = d.tenant_id
                     AND e.document_id = d.document_id) AS events,
                  (SELECT count(*) FROM artifacts a WHERE a.tenant_id = d.tenant_id
                     AND a.artifact_id = d.source_artifact_id) AS sources
           FROM knowledge_documents d WHERE d.tenant_id = $1""", tenant)
    for r in rows:
        assert (r["sets"], r["events"], r["sources"]) == (1, 1, 1) and r["chunks"] > 0, dict(r)  # whole
    traces = await db.fetchval("SELECT count(*) FROM knowledge_traces WHERE tenant_id = $1", tenant)
    return {r["document_id"] for r in rows}, int(traces)


async def one_shot(r: Round, canceller: str, delay: float) -> str:
    """Call once under asyncio's one-shot cancellation after ``delay``; check the property."""
    before_docs, before_traces = await snapshot(r.db, r.tenant)
    result: tuple[Any] | None = None
    requested = False
    outcome = "completed"
    if canceller == "timeout":
        try:
            async with asyncio.timeout(delay) as cm:
                result = (await r.call(),)
            assert not cm.expired(), "asyncio.timeout expired and the call returned: the cancellation was lost"
        except TimeoutError as exc:
            outcome, result = "cancelled", took_effect(exc)
    else:
        async with asyncio.TaskGroup() as tg:  # the host's pattern: a task cancelled from outside
            task = tg.create_task(r.call())
            await asyncio.sleep(delay)
            requested = task.cancel()  # False: it had already finished
        if task.cancelled():
            try:
                task.result()
            except asyncio.CancelledError as exc:
                outcome, result = "cancelled", took_effect(exc)
        else:
            assert not requested, "task.cancel() was accepted and the task finished: the cancellation was lost"
            result = (task.result(),)
    after_docs, after_traces = await snapshot(r.db, r.tenant)
    told_docs, told_traces = r.told(result)
    assert after_docs - before_docs == told_docs and before_docs <= after_docs
    assert after_traces - before_traces == told_traces
    return outcome if result is None or outcome == "completed" else "cancelled after its effect"


async def in_scope(r: Round, delay: float) -> str:
    """Call once in a cancel scope whose deadline passes after ``delay`` (trio's and anyio's
    level-triggered cancellation), then checkpoint inside the scope: a call that raises the
    cancellation took no effect, one that returns did, and the scope always catches it."""
    before_docs, before_traces = await snapshot(r.db, r.tenant)
    result: tuple[Any] | None = None
    with anyio.CancelScope(deadline=anyio.current_time() + delay) as scope:
        result = (await r.call(),)
        await anyio.sleep(2 * delay + 0.05)  # the deadline passes here if it did not during the call
    assert scope.cancelled_caught
    after_docs, after_traces = await snapshot(r.db, r.tenant)
    told_docs, told_traces = r.told(result)
    assert after_docs - before_docs == told_docs and before_docs <= after_docs
    assert after_traces - before_traces == told_traces
    return "completed" if result is not None else "cancelled"


async def median_seconds(svc: KnowledgeService, db: Database, tenant: str, op: str) -> float:
    times = []
    for _ in range(5):
        r = await Round.ready(svc, db, tenant, op)
        began = time.perf_counter()
        await r.call()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def run_rounds(portal: BlockingPortal, svc: KnowledgeService, db: Database, op: str,
               check: Callable[[Round, float], Awaitable[str]]) -> dict[str, int]:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    typical = portal.call(median_seconds, svc, db, tenant, op)
    seen: dict[str, int] = {}

    @hypothesis_settings(max_examples=ROUNDS, deadline=None, database=None,
                         suppress_health_check=[HealthCheck.too_slow])
    @given(fraction=st.floats(0.0, 2.0))
    def round_(fraction: float) -> None:
        async def go() -> str:
            return await check(await Round.ready(svc, db, tenant, op), fraction * typical)

        outcome = portal.call(go)
        seen[outcome] = seen.get(outcome, 0) + 1

    round_()
    print(op, seen)
    return seen


def settings_for(dsn: str) -> Settings:
    return Settings(dsn=dsn, pool_min_size=1, pool_max_size=4, sweep_interval_seconds=None, relevance_floor=False,
                    application_name=f"kt-{uuid.uuid4().hex[:10]}")


@pytest.mark.parametrize("canceller", ["timeout", "task.cancel"])
def test_asyncio_one_shot_cancellation_is_never_lost(database_dsn: str, canceller: str) -> None:
    """asyncio.timeout and task.cancel() at random moments around each operation (ROUNDS each): every
    cancellation is observed, nothing is half-written, and what took effect is what the caller was told."""
    options = {"loop_factory": asyncio.SelectorEventLoop, "debug": True}
    with start_blocking_portal("asyncio", options) as portal, portal.wrap_async_context_manager(
            KnowledgeService.open(settings_for(database_dsn))) as svc, portal.wrap_async_context_manager(
            open_sql(database_dsn)) as db:
        for op in OPS:
            seen = run_rounds(portal, svc, db, op, lambda r, d: one_shot(r, canceller, d))
            assert sum(seen.values()) == ROUNDS
            assert seen.get("cancelled", 0) + seen.get("cancelled after its effect", 0) > 0  # it was exercised


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_cancel_scope_at_random_moments_is_always_caught_and_raises_only_without_effect(
        database_dsn: str, backend: str) -> None:
    with start_blocking_portal(backend) as portal, portal.wrap_async_context_manager(
            KnowledgeService.open(settings_for(database_dsn))) as svc, portal.wrap_async_context_manager(
            open_sql(database_dsn)) as db:
        for op in OPS:
            seen = run_rounds(portal, svc, db, op, in_scope)
            assert seen.get("cancelled", 0) > 0


@pytest.mark.parametrize("moment", ["before_commit", "commit"])
def test_asyncio_task_cancelled_at_the_commit_raises_and_says_what_took_effect(database_dsn: str,
                                                                                moment: str) -> None:
    """The race made certain with the ingest's fault hooks: the caller's task is cancelled (one-shot)
    before COMMIT — the cancellation is raised and nothing took effect — or while COMMIT is in flight
    (shielded: it commits) — the cancellation is still raised, and `took_effect` holds the document."""
    tenant = f"t-{uuid.uuid4().hex[:10]}"

    async def go(svc: KnowledgeService, db: Database) -> None:
        r = await Round.ready(svc, db, tenant, "ingest")
        holder: list[asyncio.Task[Any]] = []

        async def hook(at: str, conn: object) -> None:
            if at == moment:
                holder[0].cancel()
                await anyio.wait_all_tasks_blocked()  # the caller has taken its cancellation by now
                if moment == "before_commit":
                    await anyio.sleep_forever()  # the ingest is cancelled here, by the caller

        svc.faults.ingest_step = hook
        try:
            async with asyncio.TaskGroup() as tg:
                holder.append(tg.create_task(r.call()))
        finally:
            svc.faults.ingest_step = None
        task = holder[0]
        assert task.cancelled()
        with pytest.raises(asyncio.CancelledError) as raised:
            task.result()
        docs, _ = await snapshot(db, tenant)
        effect = took_effect(raised.value)
        if moment == "before_commit":
            assert effect is None and docs == set()
        else:
            assert effect is not None and docs == {effect[0].document_id}

    options = {"loop_factory": asyncio.SelectorEventLoop, "debug": True}
    with start_blocking_portal("asyncio", options) as portal, portal.wrap_async_context_manager(
            KnowledgeService.open(settings_for(database_dsn))) as svc, portal.wrap_async_context_manager(
            open_sql(database_dsn)) as db:
        portal.call(go, svc, db)
