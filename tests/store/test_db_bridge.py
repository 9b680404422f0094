"""The asyncpg bridge under both event loops: queries, transactions, cancellation."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import anyio
import pytest
import trio

from knowledge.store.db import Database, open_bridge
from knowledge.store.retry import retry_transient, typed_faults
from tests.helpers.progress import hang_detector


async def _active_sleeps(dsn: str, app: str) -> int:
    async with open_bridge() as bridge, Database.open(dsn, bridge=bridge, min_size=1, max_size=1) as probe:
        return int(await probe.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%pg_sleep%' "
            "AND state = 'active'", app))


@pytest.mark.anyio
async def test_round_trip_and_backend(database_dsn: str, anyio_backend_name: str) -> None:
    async with open_bridge() as bridge, Database.open(database_dsn, bridge=bridge) as db:
        assert db.backend == anyio_backend_name
        if anyio_backend_name == "asyncio":  # a plain loop, as a host makes it, even after trio tests ran
            assert type(asyncio.get_running_loop()).__module__ == "asyncio.unix_events"
        assert await db.fetchval("SELECT $1::int + 1", 41) == 42
        rows = await db.fetch("SELECT g FROM generate_series(1, 3) AS g")
        assert [r["g"] for r in rows] == [1, 2, 3]


@pytest.mark.anyio
async def test_transaction_rolls_back_on_error_and_on_cancel(database_dsn: str) -> None:
    table = f"tx_{uuid.uuid4().hex[:8]}"
    async with open_bridge() as bridge, Database.open(database_dsn, bridge=bridge, max_size=2) as db:
        await db.execute(f"CREATE TABLE {table} (x int)")
        with pytest.raises(RuntimeError):
            async with db.transaction() as tx:
                await tx.execute(f"INSERT INTO {table} VALUES (1)")
                raise RuntimeError("boom")
        with anyio.move_on_after(0.5) as scope:
            async with db.transaction() as tx:
                await tx.execute(f"INSERT INTO {table} VALUES (2)")
                await tx.execute("SELECT pg_sleep(30)")
        assert scope.cancelled_caught
        async with db.transaction() as tx:
            await tx.execute(f"INSERT INTO {table} VALUES (3)")
        assert [r["x"] for r in await db.fetch(f"SELECT x FROM {table}")] == [3]
        await db.execute(f"DROP TABLE {table}")


@pytest.mark.anyio
async def test_cancelled_query_leaves_pool_usable(database_dsn: str) -> None:
    app = f"cancel-{uuid.uuid4().hex[:8]}"
    async with open_bridge() as bridge:
        with hang_detector():  # a hang detector, not a timing assertion
            async with Database.open(database_dsn, bridge=bridge, min_size=1, max_size=1,
                                     application_name=app) as db:
                with anyio.move_on_after(0.3) as scope:
                    await db.fetchval("SELECT pg_sleep(60)")
                assert scope.cancelled_caught
                # The only connection was the cancelled one: it must have come back usable.
                assert await db.fetchval("SELECT 7") == 7
                assert await _active_sleeps(database_dsn, app) == 0


@pytest.mark.trio
async def test_trio_move_on_after_cancels_pg_sleep_and_pool_closes(database_dsn: str) -> None:
    """The foundation issue's case: trio, move_on_after around pg_sleep, then a prompt close."""
    app = f"trio-cancel-{uuid.uuid4().hex[:8]}"
    with trio.fail_after(30):  # a hang detector: a cancelled release used to hang close for 60 s
        async with open_bridge() as bridge:
            async with Database.open(database_dsn, bridge=bridge, min_size=2, max_size=2,
                                     application_name=app) as db:
                async with trio.open_nursery() as nursery:
                    for _ in range(2):
                        async def sleeper() -> None:
                            with trio.move_on_after(0.3):
                                await db.fetchval("SELECT pg_sleep(60)")
                        nursery.start_soon(sleeper)
                assert await db.fetchval("SELECT 1") == 1
                assert db.pool_stats()["size"] == 2
            assert await _active_sleeps(database_dsn, app) == 0


@pytest.mark.anyio
async def test_ctrl_c_as_the_pool_takes_a_connection_back_stays_a_ctrl_c(database_dsn: str) -> None:
    """Issue 37's last hang: Ctrl-C reached a trio host while it waited for ``pool.release``, just
    as asyncpg's (shielded) release returned the connection to the pool. The cleanup then terminated
    the proxy, which refuses every call once released (InterfaceError) — an ordinary, *transient*
    error raised in place of the KeyboardInterrupt, so the artifact put around it retried and the
    host worked on with its Ctrl-C lost."""
    async with open_bridge() as bridge, Database.open(database_dsn, bridge=bridge, max_size=1) as db:
        bridged = db._run

        async def interrupted_as_released(fn: Any, *args: Any) -> Any:
            result = await bridged(fn, *args)
            if fn == db._pool.release:
                raise KeyboardInterrupt  # as trio delivers it: once the release has completed
            return result

        db._run = interrupted_as_released  # type: ignore[assignment]
        attempts = 0

        async def put() -> int:
            nonlocal attempts
            attempts += 1
            async with db.connection() as conn:
                return int(await conn.fetchval("SELECT 1"))

        with pytest.raises(KeyboardInterrupt):  # the connection's own cleanup keeps it a Ctrl-C
            async with db.connection() as conn:
                await conn.fetchval("SELECT 1")
        with pytest.raises(KeyboardInterrupt):
            await retry_transient("a put", put)
        assert attempts == 1
        db._run = bridged
        assert await db.fetchval("SELECT 7") == 7  # the one connection came back to the pool


@pytest.mark.anyio
async def test_an_error_raised_while_ctrl_c_unwinds_is_not_retried_nor_typed() -> None:
    """Whatever cleanup raises in place of a Ctrl-C (its ``__context__``), the retry and the typing of
    faults raise the Ctrl-C, once."""
    calls = 0

    async def cleanup_fails() -> None:
        nonlocal calls
        calls += 1
        try:
            raise KeyboardInterrupt
        finally:
            raise ConnectionResetError("the connection is gone")

    with pytest.raises(KeyboardInterrupt):
        await retry_transient("a read", cleanup_fails)
    with pytest.raises(KeyboardInterrupt):
        await typed_faults("a turn", cleanup_fails)
    assert calls == 2
