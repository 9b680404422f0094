"""Reads on streaming replicas, with read-your-writes (issue 36).

PostgreSQL's own streaming replication keeps standbys of the primary; `ReadRouter` sends a search or
a catalog read to one of them and everything else to the primary.

- **Read-your-writes.** After each write the service acknowledges, it asks the primary for its WAL
  position (`wrote`: ``pg_current_wal_lsn()``, at or past that write's commit record). A read then
  goes to a replica only once the replica has *replayed* that far (``pg_last_wal_replay_lsn()``) —
  waiting for it at most ``wait_seconds`` — else to the primary. So a search after an acknowledged
  ingest finds the document, and after an acknowledged delete never returns its passages, whatever
  a replica's lag. (Another service's writes reach this one's reads as the replicas replay them.)
- **Health.** `watch` asks every replica, every ``check_seconds``, whether it is a standby and how
  far it has replayed. A replica that cannot be reached, is not in recovery, or has not caught up
  to where the primary was for longer than ``max_lag_seconds`` is skipped; it is used again as
  soon as a check finds it healthy. A read that fails on a replica for a connection fault marks it
  down and is repeated on the primary (reads write nothing: safe to repeat).
- **Rotation.** Healthy replicas take reads in turn.

Nothing here writes; a replica is opened with ``min_size=0`` so an unreachable one does not stop the
service from opening.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import anyio

from knowledge.store.db import Database, is_transient

_log = logging.getLogger(__name__)

T = TypeVar("T")

# The primary's WAL position now (at or past every commit acknowledged so far). No parameters.
CURRENT_LSN = "SELECT pg_current_wal_lsn()::text"
# A standby's state: in recovery, and how far it has replayed. No parameters.
REPLAYED = "SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn()::text AS replayed"


def shown(dsn: str) -> str:
    """A DSN as logs and reports may show it: without its credentials."""
    return re.sub(r"//[^@/]*@", "//", dsn)


def lsn(text: str | None) -> int:
    """A ``pg_lsn`` (``16/B374D848``) as a number; None (nothing replayed) as 0."""
    if not text:
        return 0
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass
class Replica:
    """One standby's pool and what the last look at it found."""

    name: str  # its DSN without credentials: for logs and the health report
    db: Database
    healthy: bool = False
    replayed: int = 0
    behind_since: float | None = None  # when it last fell behind where the primary was
    why: str | None = "not checked yet"
    reads: int = 0


@dataclass
class ReadRouter:
    """Where a read goes: a replica that has replayed this service's writes, else the primary."""

    primary: Database
    replicas: Sequence[Replica] = ()
    max_lag_seconds: float = 5.0
    wait_seconds: float = 0.5
    check_seconds: float = 1.0
    #: The primary's WAL position after this service's last acknowledged write.
    written: int = 0
    primary_reads: int = 0
    #: A write was acknowledged whose position could not be read: reads take the primary until one is.
    _unknown: bool = False
    _turn: int = 0
    _primary_at_last_check: int = 0

    async def wrote(self) -> None:
        """Record that a write was acknowledged: reads after this see it. Never raises (the write
        stands): a position it cannot read sends reads to the primary until one is read."""
        if not self.replicas:
            return
        try:
            self.written = max(self.written, lsn(await self.primary.fetchval(CURRENT_LSN)))
            self._unknown = False
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._unknown = True

    async def read(self, run: Callable[[Database], Awaitable[T]]) -> T:
        """``run`` on a replica that has replayed this service's writes (waiting for one at most
        ``wait_seconds``), else on the primary; a replica failing under it is marked down and
        ``run`` repeated on the primary."""
        if not self.replicas:
            return await run(self.primary)
        replica = await self._choose()
        if replica is None:
            self.primary_reads += 1
            return await run(self.primary)
        try:
            result = await run(replica.db)
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._down(replica, f"a read failed: {type(exc).__name__}")
            self.primary_reads += 1
            return await run(self.primary)
        replica.reads += 1
        return result

    async def _choose(self) -> Replica | None:
        healthy = [r for r in self.replicas if r.healthy]
        if not healthy or self._unknown:
            return None
        self._turn += 1
        ordered = healthy[self._turn % len(healthy):] + healthy[:self._turn % len(healthy)]
        known = next((r for r in ordered if r.replayed >= self.written), None)  # replayed it: no query
        if known is not None:
            return known
        deadline = anyio.current_time() + self.wait_seconds
        while any(r.healthy for r in ordered):  # (a check marking them all down ends the wait)
            for replica in ordered:
                if replica.healthy and await self._replayed(replica) >= self.written:
                    return replica
            if anyio.current_time() >= deadline:
                return None
            await anyio.sleep(0.005)
        return None

    async def _replayed(self, replica: Replica) -> int:
        try:
            row = await replica.db.fetchrow(REPLAYED)
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._down(replica, f"unreachable: {type(exc).__name__}")
            return -1
        assert row is not None
        replica.replayed = max(replica.replayed, lsn(row["replayed"]))
        return replica.replayed

    def _down(self, replica: Replica, why: str) -> None:
        if replica.healthy:
            _log.warning("replica %s skipped: %s", replica.name, why)
        replica.healthy, replica.why = False, why

    async def check(self) -> None:
        """Look at every replica once (see the module docstring)."""
        primary = lsn(await self.primary.fetchval(CURRENT_LSN))
        now = time.monotonic()
        for replica in self.replicas:
            try:
                with anyio.fail_after(max(self.check_seconds, 1.0)):
                    row = await replica.db.fetchrow(REPLAYED)
            except Exception as exc:  # unreachable, refused, too slow, misnamed: skipped until a check finds it well
                self._down(replica, f"unreachable: {type(exc).__name__}: {exc}"[:300])
                continue
            assert row is not None
            if not row["standby"]:
                self._down(replica, "not a standby (promoted, or a primary)")
                continue
            replica.replayed = max(replica.replayed, lsn(row["replayed"]))
            if replica.replayed >= self._primary_at_last_check:
                replica.behind_since = None
            elif replica.behind_since is None:
                replica.behind_since = now
            if replica.behind_since is not None and now - replica.behind_since > self.max_lag_seconds:
                self._down(replica, f"behind the primary for {now - replica.behind_since:.1f} s")
            elif not replica.healthy:
                _log.info("replica %s serves reads", replica.name)
                replica.healthy, replica.why = True, None
        self._primary_at_last_check = primary

    async def watch(self) -> None:
        """`check` every ``check_seconds``, for as long as the service runs."""
        while True:
            try:
                await self.check()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                _log.warning("replica check skipped: the primary is unavailable (%s)", type(exc).__name__)
            await anyio.sleep(self.check_seconds)
