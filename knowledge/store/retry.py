"""Retrying what is transient and safe to repeat; a typed error for the rest.

A database fault — a backend terminated mid-transaction, a pooled connection left dead by a server
restart, the server not accepting connections for a moment — surfaces from asyncpg as one of
`knowledge.store.db.TRANSIENT_ERRORS`. Operations that are safe to repeat are retried on a fresh
connection with short backoff (`RETRY_DELAYS`, about 4 s in all: long enough to ride out a fast
restart of the embedded server); when the retries are spent, or for operations that are not safe to
repeat, the caller gets `DatabaseUnavailable` (reason ``database_unavailable``), never a bare driver
exception.

What is retried, and why that is safe:

- **Reads** (search, citations, the catalog): they write nothing.
- **Ingest**: the transaction either rolled back (the failure came before COMMIT) — then nothing of
  it exists and the same request runs again with the same document id — or the failure came during
  COMMIT and the outcome is unknown. Then `knowledge.ingest` looks for the document version it was
  writing (same id, same version, same source SHA-256, same principal): found, the ingest succeeded
  and its document is returned; not found, it rolled back and runs again.
- **Artifact puts and attachment uploads**: the same new artifact id every attempt; a retry that
  finds it taken returns the artifact an earlier attempt committed.
- **Attachment marking**: idempotent by design (a mark that took effect reads ``already_marked``).
- **Delete**: after an unknown COMMIT outcome, a retry that finds the document gone and this
  principal's deletion event written reports that deletion.

Not retried, but typed: a turn (its trace commit would count budget pressure twice) and a re-chunk
(a second attempt after an unknown COMMIT would be refused ``already_chunked``).

Never retried: refusals (`IngestRefused`, `DeleteRefused` …), which are answers, not faults.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from knowledge.errors import DatabaseUnavailable
from knowledge.store.db import is_transient

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: Backoff between attempts; len + 1 attempts in all.
RETRY_DELAYS: tuple[float, ...] = (0.05, 0.2, 0.5, 1.0, 2.0)


def interruption(exc: BaseException) -> BaseException | None:
    """The ``KeyboardInterrupt`` or ``SystemExit`` that ``exc`` was raised while unwinding (its
    ``__context__`` chain), if any. A cleanup that fails during Ctrl-C (a driver refusing a call on a
    connection it already took back) raises an ordinary error in place of the interrupt; retrying
    that error, or turning it into `DatabaseUnavailable`, would swallow the Ctrl-C."""
    seen: set[int] = set()
    current = exc.__context__
    while current is not None and id(current) not in seen:
        if isinstance(current, (KeyboardInterrupt, SystemExit)):
            return current
        seen.add(id(current))
        current = current.__context__
    return None


def unavailable(what: str, exc: BaseException) -> DatabaseUnavailable:
    """The typed error for a transient fault that is not (or no longer) retried."""
    error = DatabaseUnavailable(message=f"{what}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


async def typed_faults(what: str, op: Callable[[], Awaitable[T]]) -> T:
    """Run ``op()`` once (it is not safe to repeat); a transient database fault becomes
    `DatabaseUnavailable`. Cancellation: propagates."""
    try:
        return await op()
    except Exception as exc:
        if (interrupted := interruption(exc)) is not None:
            raise interrupted  # noqa: B904 - the interrupt, whose unwinding raised exc
        if is_transient(exc) and not isinstance(exc, DatabaseUnavailable):
            raise unavailable(what, exc) from exc
        raise


async def retry_transient(what: str, op: Callable[[], Awaitable[T]],
                          delays: tuple[float, ...] | None = None) -> T:
    """Run ``op()``; on a transient database fault wait and run it again, up to ``len(delays)``
    more times, then raise `DatabaseUnavailable`. Other exceptions pass through at once.
    ``op`` must be safe to repeat; ``delays`` defaults to `RETRY_DELAYS`. Cancellation: propagates,
    from the operation or the backoff."""
    for delay in (*(RETRY_DELAYS if delays is None else delays), None):
        try:
            return await op()
        except Exception as exc:
            if (interrupted := interruption(exc)) is not None:
                raise interrupted  # noqa: B904 - the interrupt, whose unwinding raised exc
            if not is_transient(exc) or (isinstance(exc, DatabaseUnavailable) and delay is None):
                raise
            if delay is None:
                raise unavailable(what, exc) from exc
            _log.info("%s: transient %s (%s); retrying in %.2f s", what, type(exc).__name__, exc, delay)
        await anyio.sleep(delay)
    raise AssertionError("unreachable")
