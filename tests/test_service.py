"""KnowledgeService: opens under trio and asyncio, and leaves nothing behind however it closes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from knowledge.config import Settings
from knowledge.models import Principal, TrustLevel
from knowledge.service import KnowledgeService
from knowledge.store.db import Database, open_bridge
from knowledge.store.locks import lock_document
from tests.conftest import child_processes, open_sql
from tests.helpers.progress import hang_detector


async def _connections_of(dsn: str, app: str) -> int:
    async with open_bridge() as bridge, Database.open(dsn, bridge=bridge, min_size=1, max_size=1) as probe:
        return int(await probe.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app))


@pytest.mark.anyio
async def test_service_open_close_leaves_no_connection_or_child(settings: Settings, anyio_backend_name: str) -> None:
    assert settings.dsn is not None
    before = {p.pid for p in child_processes()}
    async with KnowledgeService.open(settings) as svc:
        health = await svc.health()
        assert health.ok, health
        assert health.backend == anyio_backend_name
        assert health.schema_version == health.schema_expected >= 1
        assert health.server_version and health.server_version.startswith("18")
        assert await _connections_of(settings.dsn, settings.application_name) >= 1
    assert await _connections_of(settings.dsn, settings.application_name) == 0
    assert {p.pid for p in child_processes()} - before == set()


@pytest.mark.anyio
async def test_background_tasks_are_cancelled_and_awaited_on_close(settings: Settings) -> None:
    finished: list[str] = []

    async def forever(tag: str) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            finished.append(tag)

    async with KnowledgeService.open(settings) as svc:
        svc.start_background("a", forever, "a")
        svc.start_background("b", forever, "b")
        await anyio.sleep(0.05)
        assert finished == []
    assert sorted(finished) == ["a", "b"]


@pytest.mark.anyio
async def test_exception_inside_the_block_closes_everything(settings: Settings) -> None:
    assert settings.dsn is not None
    with pytest.raises(RuntimeError, match="host failure"):
        async with KnowledgeService.open(settings) as svc, open_sql(svc.dsn) as db, db.transaction() as tx:
            await tx.execute("SELECT 1")
            raise RuntimeError("host failure")
    assert await _connections_of(settings.dsn, settings.application_name) == 0


@pytest.mark.anyio
async def test_cancellation_mid_query_closes_everything(settings: Settings, tenant: str) -> None:
    """Cancelled while a call of the block and one of a background task wait in the service's
    connections (on a document's lock, held by the test's own pool)."""
    assert settings.dsn is not None
    owner = Principal(tenant_id=tenant, principal_id="alice", scopes=frozenset({"knowledge.write"}))

    async def cancel_once_both_wait(db: Database, scope: anyio.CancelScope) -> None:
        while await db.fetchval(  # noqa: ASYNC110 - polling the database, not an event
                """SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                   WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()""") < 2:
            await anyio.sleep(0.01)
        scope.cancel()

    with hang_detector():  # hang detector
        with anyio.CancelScope() as scope:
            async with KnowledgeService.open(settings) as svc, open_sql(svc.dsn) as db:
                ref = await svc.put_artifact(tenant, b"# Doc\n\nThe release is tagged weekly.\n",
                                             media_type="text/markdown")
                doc = (await svc.ingest(ref, "Doc", "tenant", owner, origin_trust=TrustLevel.USER)).document_id
                async with db.transaction() as holder, anyio.create_task_group() as tg:
                    await lock_document(holder, tenant, doc)
                    svc.start_background("deleter", svc.delete, doc, owner)
                    tg.start_soon(cancel_once_both_wait, db, scope)
                    await svc.delete(doc, owner)
        assert scope.cancelled_caught
    assert await _connections_of(settings.dsn, settings.application_name) == 0


@pytest.mark.anyio
async def test_health_reports_a_broken_database_without_raising(settings: Settings) -> None:
    async with KnowledgeService.open(settings) as svc:
        async with open_sql(svc.dsn) as db:
            # Kill every backend of this service's pool (from a pool of the test's own), then use the pool.
            await db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = $1 AND pid <> pg_backend_pid()", settings.application_name)
        health = await svc.health()
        # asyncpg reconnects a terminated idle connection on next use, or health says why not.
        assert health.ok or health.error


@pytest.mark.anyio
async def test_sweeper_runs_in_the_service_task_group(settings: Settings, tenant: str) -> None:
    from knowledge.errors import ArtifactNotFound

    settings = settings.model_copy(update={"sweep_interval_seconds": 0.05})
    async with KnowledgeService.open(settings) as svc, open_sql(svc.dsn) as db:
        ref = await svc.put_artifact(tenant, b"bye", media_type="text/plain")
        await svc.expire_artifacts(tenant, [ref.artifact_id])
        with hang_detector():
            while await db.fetchval(  # noqa: ASYNC110 - polling the database, not an event
                    "SELECT count(*) FROM artifacts WHERE tenant_id = $1", tenant):
                await anyio.sleep(0.05)
        with pytest.raises(ArtifactNotFound):
            await svc.artifact_ref(tenant, ref.artifact_id)


@pytest.mark.anyio
async def test_a_cancelled_block_can_still_use_the_service_in_its_cleanup(settings: Settings) -> None:
    """The service lives in a task of its own and closes after the host's block, never beside it: a
    cancellation of the scope around the block reaches the block, whose shielded cleanup still finds
    the pool open (issue 37: the CLI's last write after an interrupt found it closing)."""
    cleaned_up = []
    with anyio.CancelScope() as outer:
        async with KnowledgeService.open(settings) as svc:
            try:
                outer.cancel()
                await anyio.sleep_forever()
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.wait_all_tasks_blocked()  # the service's own tasks have seen the cancellation
                    health = await svc.health()  # a round trip through the service's pool
                    cleaned_up.append((health.ok, health.error))
    assert outer.cancelled_caught and cleaned_up == [(True, None)]


@pytest.mark.anyio
async def test_a_background_task_that_fails_ends_the_block_with_its_error(settings: Settings) -> None:
    class Boom(Exception):
        pass

    async def fails() -> None:
        raise Boom("a background actor failed")

    with pytest.raises(Boom):
        async with KnowledgeService.open(settings) as svc:
            svc.start_background("fails", fails)
            await anyio.sleep_forever()  # cancelled by the failure, which then leaves the block as itself


@pytest.mark.anyio
async def test_an_interruption_as_the_service_finishes_opening_closes_it_and_propagates(settings: Settings) -> None:
    """The host's scope is cancelled (trio delivers Ctrl-C the same way) in the last step of opening,
    before the host's task has the service: the service closes and the cancellation propagates.
    Handed over with ``task_group.start``, this deadlocked — trio's ``started()`` into a cancelled
    start keeps the service's task in the start, which waits for it, while the task waits, shielded,
    for the block that never begins to end (the trio host's rare hang on an early Ctrl-C)."""
    assert settings.dsn is not None

    class Watched:
        """The service's ``closing`` event, telling whether the service's task waits on it."""

        def __init__(self, event: anyio.Event) -> None:
            self.event, self.waiting = event, False

        def is_set(self) -> bool:
            return self.event.is_set()

        def set(self) -> None:
            self.event.set()

        async def wait(self) -> None:
            self.waiting = True
            await self.event.wait()

    closings: list[Watched] = []

    class InterruptedAsItOpens(KnowledgeService):
        @classmethod
        async def _serve(cls, settings: Settings, given: Any, closing: anyio.Event, *rest: Any, **named: Any) -> None:
            closings.append(Watched(closing))
            await super()._serve(settings, given, closings[-1], *rest, **named)  # type: ignore[arg-type]

        @classmethod
        @contextlib.asynccontextmanager
        async def _opened(cls, settings: Settings, *given: Any) -> AsyncIterator[KnowledgeService]:
            async with super()._opened(settings, *given) as svc:
                outer.cancel()
                yield svc

    hung, entered = [], []

    async def deadlock_detector() -> None:
        """Progress, not a clock: every task blocked while the service's task waits for a ``closing``
        nobody has set is the deadlock; setting it is the only way out."""
        while True:
            await anyio.wait_all_tasks_blocked()
            if closings and closings[0].waiting and not closings[0].is_set():
                hung.append(True)
                closings[0].set()
                return
            await anyio.sleep(0.01)  # (the other tasks run on; look again)

    async with anyio.create_task_group() as tg:
        tg.start_soon(deadlock_detector)
        with anyio.CancelScope() as outer:
            async with InterruptedAsItOpens.open(settings):
                entered.append(True)
        tg.cancel_scope.cancel()
    assert hung == [] and outer.cancelled_caught and entered == []
    assert await _connections_of(settings.dsn, settings.application_name) == 0
