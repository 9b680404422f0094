"""The database bridge: the one module that imports asyncpg.

asyncpg speaks asyncio only. Everything above this module is written against anyio and
runs unchanged under asyncio (asyncpg is awaited directly, on the host's own loop) and trio (every
call goes through one trio-asyncio loop, opened here when none is running; trio-asyncio is
imported only then, since importing it changes how asyncio makes loops in the whole process).
Cleanup — releasing a connection, rolling back, closing the pool — runs shielded from
cancellation and bounded in time, because a cancelled release leaves ``pool.close()`` waiting on
it.

Cancellation of a query: the awaiting task sees the cancellation at once; asyncpg sends the
server a cancel request and the connection is reset (or, failing that, terminated) when it is
released, so the pool stays usable.
"""

from __future__ import annotations

import contextlib
import logging
import re
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Literal, Self, TypeVar

import anyio
import asyncpg
import sniffio

from knowledge.errors import DatabaseMissing, DatabaseUnavailable
from knowledge.structured import HeldError

_log = logging.getLogger(__name__)

T = TypeVar("T")
IsolationLevel = Literal["read_committed", "repeatable_read", "serializable"]
Record = asyncpg.Record

# Re-exported so code above the bridge can catch them without importing asyncpg.
PostgresError = asyncpg.PostgresError
UniqueViolation = asyncpg.UniqueViolationError
SerializationFailure = asyncpg.SerializationError
DeadlockDetected = asyncpg.DeadlockDetectedError
QueryCanceled = asyncpg.QueryCanceledError

#: Errors after which the same operation may succeed if retried on a fresh connection.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.InterfaceError,
    # A backend terminated while its connection sat idle in the pool leaves asyncpg's protocol
    # consuming the unsolicited error: the next query raises this. The connection is dead.
    asyncpg.InternalClientError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.SerializationError,
    asyncpg.DeadlockDetectedError,
    asyncpg.TooManyConnectionsError,
    DatabaseUnavailable,
)

#: The transient errors that mean the connection itself is gone (not a conflict between transactions).
_CONNECTION_LOST: tuple[type[BaseException], ...] = tuple(
    e for e in TRANSIENT_ERRORS
    if e not in (asyncpg.SerializationError, asyncpg.DeadlockDetectedError, asyncpg.TooManyConnectionsError,
                 DatabaseUnavailable))

_CLEANUP_SECONDS = 10.0
#: How long a (shielded) COMMIT may take before the connection is given up as lost.
_COMMIT_SECONDS = 30.0
_DB_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _quiet() -> contextlib.suppress:
    """Cleanup after a failure must not mask the failure."""
    return contextlib.suppress(Exception)


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, TRANSIENT_ERRORS)


async def _defer(fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    return await fn(*args, **kwargs)


class Bridge:
    """Runs asyncpg's coroutines from whichever event loop anyio is running on."""

    def __init__(self, aio_loop: Any | None) -> None:
        self._aio_loop = aio_loop  # a trio-asyncio loop under trio, None under asyncio

    @property
    def backend(self) -> str:
        return "trio" if self._aio_loop is not None else "asyncio"

    async def __call__(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        if self._aio_loop is None:
            return await fn(*args, **kwargs)
        result: T = await self._aio_loop.run_aio_coroutine(_defer(fn, args, kwargs))
        return result


@contextlib.asynccontextmanager
async def open_bridge() -> AsyncIterator[Bridge]:
    """A `Bridge` for the running loop. Under trio, reuses the host's trio-asyncio loop or opens
    one for the duration of the block (and closes it, cancelling what runs in it, on exit)."""
    library = sniffio.current_async_library()
    if library == "asyncio":
        yield Bridge(None)
        return
    if library != "trio":
        raise RuntimeError(f"unsupported async library {library!r}")
    # Imported here, under trio only: trio-asyncio patches asyncio's loop functions process-wide
    # when imported (``asyncio.new_event_loop`` then makes its own loops), and an asyncio host
    # that embeds this library must keep its plain loop (`tests/test_host_loop.py`).
    import trio_asyncio

    loop = trio_asyncio.current_loop.get()
    if loop is not None:
        yield Bridge(loop)
        return
    held = HeldError()  # the block's own exception leaves unwrapped by the loop's nurseries
    async with trio_asyncio.open_loop() as loop:
        loop.set_exception_handler(log_loop_error)
        with held:
            yield Bridge(loop)
    held.reraise()


#: What asyncpg reports to the loop when a connection released mid-transaction (its task was
#: cancelled during a statement) is rolled back: the expected course of a cancellation.
_EXPECTED_LOOP_MESSAGES = ("Resetting connection with an active transaction",)


def log_loop_error(loop: Any, context: dict[str, Any]) -> None:
    """The exception handler of the trio-asyncio loop this module opens (and of the CLI's own asyncio
    loop). trio-asyncio's default raises whatever reaches the handler into the loop's nursery, which
    would take the whole service down — and asyncpg reports there what is only worth a log line:
    "Resetting connection with an active transaction" when a connection is released after its task
    was cancelled mid-statement (it is rolled back: logged at DEBUG), or a release that failed after
    its caller stopped waiting.
    Logged, as plain asyncio would."""
    message = context.get("message") or "unhandled error"
    exception = context.get("exception")
    level = logging.DEBUG if message.startswith(_EXPECTED_LOOP_MESSAGES) else logging.WARNING
    _log.log(level, "asyncio loop: %s", message,
             exc_info=(type(exception), exception, exception.__traceback__) if exception else None)


class Connection:
    """One checked-out connection. Every method may be cancelled; see the module docstring."""

    def __init__(self, raw: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy, run: Bridge) -> None:
        self._raw = raw
        self._run = run

    async def execute(self, sql: str, *args: Any) -> str:
        return await self._run(self._raw.execute, sql, *args)

    async def executemany(self, sql: str, args: Iterable[Sequence[Any]]) -> None:
        await self._run(self._raw.executemany, sql, args)

    async def fetch(self, sql: str, *args: Any) -> list[Record]:
        return await self._run(self._raw.fetch, sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> Record | None:
        return await self._run(self._raw.fetchrow, sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self._run(self._raw.fetchval, sql, *args)

    async def copy_records(self, table: str, records: Iterable[Sequence[Any]], columns: Sequence[str]) -> None:
        """Bulk insert with COPY (the fast path for chunk and index rows)."""
        await self._run(self._raw.copy_records_to_table, table, records=list(records), columns=list(columns))

    @property
    def backend_pid(self) -> int:
        return int(self._raw.get_server_pid())

    @contextlib.asynccontextmanager
    async def transaction(self, isolation: IsolationLevel | None = None, *,
                          on_commit: Callable[[], Awaitable[None]] | None = None) -> AsyncIterator[Self]:
        """BEGIN … COMMIT. Any exception — cancellation included — rolls back (shielded), so a
        transaction is all or nothing whatever interrupts it.

        COMMIT itself is shielded: once the block has ended normally, a cancellation can no longer
        leave the outcome undecided (a COMMIT cancelled in flight may or may not have taken effect).
        The cancellation is delivered at the caller's next checkpoint, after the commit. ``on_commit``
        runs inside that shield just before COMMIT is sent (a hook for tests of exactly that moment)."""
        tx = self._raw.transaction(isolation=isolation) if isolation else self._raw.transaction()
        # Entered as asyncpg's managed transaction (``async with``'s own protocol, ended below): a
        # BEGIN cancelled in flight leaves the connection in a transaction that only the pool's
        # release can roll back, and asyncpg does that silently for a managed one (for a bare
        # ``start()`` it reports "Resetting connection with an active transaction" to the loop).
        await self._run(tx.__aenter__)
        try:
            yield self
        except BaseException as exc:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_SECONDS), _quiet():
                if not self._raw.is_closed():
                    await self._run(tx.__aexit__, type(exc), exc, exc.__traceback__)  # ROLLBACK
            raise
        with anyio.CancelScope(shield=True):
            if on_commit is not None:
                await on_commit()
            with anyio.move_on_after(_COMMIT_SECONDS):
                await self._run(tx.__aexit__, None, None, None)  # COMMIT
                return
        self._raw.terminate()
        raise DatabaseUnavailable(message=f"COMMIT had no answer in {_COMMIT_SECONDS:.0f} s; its outcome is unknown")


async def _keep_session(raw: asyncpg.Connection) -> None:
    """The pool's reset on release. asyncpg has already rolled back an open transaction; its
    default reset would add a round trip (``RESET ALL``, ``UNLISTEN *``, unlock advisory locks) to
    every release. Pooled connections never change session state — no SET, LISTEN, cursor or
    session-level advisory lock (the migration lock uses `Database.dedicated`) — so nothing is left
    to reset."""


class Database:
    """The connection pool, opened with `Database.open` and closed when its block exits."""

    def __init__(self, pool: asyncpg.Pool, run: Bridge, dsn: str) -> None:
        self._pool = pool
        self._run = run
        self.dsn = dsn

    @property
    def backend(self) -> str:
        return self._run.backend

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        dsn: str,
        *,
        bridge: Bridge,
        min_size: int = 1,
        max_size: int = 10,
        application_name: str = "knowledge",
    ) -> AsyncIterator[Database]:
        """Open a pool on ``dsn``. On exit (normal, error or cancellation) every connection is
        closed: gracefully within 10 s, then terminated."""
        try:
            pool = await bridge(
                asyncpg.create_pool,
                dsn,
                min_size=min_size,
                max_size=max_size,
                server_settings={"application_name": application_name},
                reset=_keep_session,
            )
        except TRANSIENT_ERRORS as exc:
            raise DatabaseUnavailable(message=f"cannot connect: {exc}") from exc
        except asyncpg.InvalidCatalogNameError as exc:
            raise DatabaseMissing(message=str(exc)) from exc
        try:
            yield cls(pool, bridge, dsn)
        finally:
            with anyio.CancelScope(shield=True):
                closed = False
                with anyio.move_on_after(_CLEANUP_SECONDS):
                    await bridge(pool.close)
                    closed = True
                if not closed:
                    _log.warning("pool did not close within %ss; terminating", _CLEANUP_SECONDS)
                    pool.terminate()

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """Check a connection out of the pool; it is released (shielded) however the block ends."""
        try:
            raw = await self._run(self._pool.acquire)
        except TRANSIENT_ERRORS as exc:
            raise DatabaseUnavailable(message=f"cannot acquire a connection: {exc}") from exc
        try:
            yield Connection(raw, self._run)
        except Exception as exc:
            if isinstance(exc, _CONNECTION_LOST):
                with _quiet():  # the pool may have detached it already
                    raw.terminate()  # never hand a connection that failed this way to the next caller
            raise
        finally:
            released = False
            try:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_SECONDS), \
                        contextlib.suppress(Exception):
                    await self._run(self._pool.release, raw)
                    released = True
            finally:  # (also when the release itself is interrupted: KeyboardInterrupt, asyncio's Task.cancel)
                if not released:
                    # Quietly: asyncpg's own release goes on (shielded) after our wait for it is
                    # interrupted, and once it has returned the connection to the pool the proxy
                    # refuses every call with InterfaceError — which, raised here, would replace the
                    # interruption (a KeyboardInterrupt turned into a transient fault and retried).
                    with _quiet():
                        raw.terminate()

    @contextlib.asynccontextmanager
    async def transaction(self, isolation: IsolationLevel | None = None, *,
                          on_commit: Callable[[], Awaitable[None]] | None = None) -> AsyncIterator[Connection]:
        """A connection inside one transaction: committed (shielded, `Connection.transaction`) if the
        block ends normally."""
        async with self.connection() as conn, conn.transaction(isolation, on_commit=on_commit) as tx:
            yield tx

    def dedicated(self) -> contextlib.AbstractAsyncContextManager[Connection]:
        """A connection of its own, outside the pool, closed at the end of the block: for session
        state (a session-level advisory lock) that must never reach a pooled connection."""
        return connect_once(self.dsn, self._run)

    async def fetch(self, sql: str, *args: Any) -> list[Record]:
        async with self.connection() as conn:
            return await conn.fetch(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> Record | None:
        async with self.connection() as conn:
            return await conn.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        async with self.connection() as conn:
            return await conn.fetchval(sql, *args)

    async def execute(self, sql: str, *args: Any) -> str:
        async with self.connection() as conn:
            return await conn.execute(sql, *args)

    def pool_stats(self) -> dict[str, int]:
        return {
            "size": self._pool.get_size(),
            "idle": self._pool.get_idle_size(),
            "max": self._pool.get_max_size(),
        }


@contextlib.asynccontextmanager
async def open_pool(dsn: str, **options: Any) -> AsyncIterator[Database]:
    """`Database.open` over the running loop's bridge (`open_bridge`): a pool of the caller's own on
    ``dsn`` for one block (an auditor beside a service, a command's one-off read)."""
    async with open_bridge() as bridge, Database.open(dsn, bridge=bridge, **options) as db:
        yield db


@contextlib.asynccontextmanager
async def connect_once(dsn: str, bridge: Bridge) -> AsyncIterator[Connection]:
    """A single connection outside any pool (administration: creating the database)."""
    try:
        raw = await bridge(asyncpg.connect, dsn)
    except TRANSIENT_ERRORS as exc:
        raise DatabaseUnavailable(message=f"cannot connect: {exc}") from exc
    try:
        yield Connection(raw, bridge)
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_SECONDS), _quiet():
            await bridge(raw.close)
        if not raw.is_closed():
            raw.terminate()


async def ensure_database(admin_dsn: str, name: str, bridge: Bridge) -> bool:
    """Create database ``name`` unless it exists; True if this call created it. Safe to race."""
    if not _DB_NAME.fullmatch(name):
        raise ValueError(f"invalid database name {name!r}")
    async with connect_once(admin_dsn, bridge) as conn:
        if await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            return False
        try:
            # An identifier cannot be a bind parameter; `name` was checked against _DB_NAME.
            await conn.execute(f'CREATE DATABASE "{name}"')
        except asyncpg.DuplicateDatabaseError:
            return False
        except asyncpg.UniqueViolationError:  # two creators racing on pg_database's index
            return False
        return True


@contextlib.asynccontextmanager
async def open_creating(dsn: str, *, bridge: Bridge, **options: Any) -> AsyncIterator[Database]:
    """`Database.open`, first creating the DSN's database if the server lacks it and the role may
    create databases; if it may not, `DatabaseUnavailable` says exactly what an administrator runs."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            db = await stack.enter_async_context(Database.open(dsn, bridge=bridge, **options))
        except DatabaseMissing:
            await _create_missing(dsn, bridge)
            db = await stack.enter_async_context(Database.open(dsn, bridge=bridge, **options))
        yield db


async def _create_missing(dsn: str, bridge: Bridge) -> None:
    parts = urllib.parse.urlsplit(dsn)
    query = urllib.parse.parse_qs(parts.query)
    user = parts.username or (query.get("user") or [""])[0] or "the DSN's user"
    name = parts.path.lstrip("/") or (query.get("dbname") or [""])[0] or user
    hint = (f'database "{name}" does not exist on this server and this role ({user}) may not create it: have an '
            f'administrator run  CREATE DATABASE "{name}" OWNER "{user}";  (or: createdb -O {user} {name}), '
            "then try again")
    if not _DB_NAME.fullmatch(name):
        raise DatabaseUnavailable(message=hint)
    for maintenance in ("postgres", "template1"):
        try:
            created = await ensure_database(dsn_with_database(dsn, maintenance), name, bridge)
        except asyncpg.InvalidCatalogNameError:
            continue  # no such maintenance database here: the next
        except asyncpg.InsufficientPrivilegeError as exc:
            raise DatabaseUnavailable(message=hint) from exc
        if created:
            _log.warning('created database "%s" (the DSN named it; it did not exist)', name)
        return
    raise DatabaseUnavailable(message=hint)


def dsn_with_database(dsn: str, database: str) -> str:
    """``dsn`` pointed at another database on the same server (keeps host, socket and options)."""
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))
