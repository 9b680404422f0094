"""The supervisor of in-process actors: it runs each long-lived actor (an attachment worker, the
sweeper) until cancelled, and restarts one that crashed after a backoff — doubling per consecutive
crash, reset by the actor's progress (its pulse) — logging why at ERROR with the traceback. Its
counters (`ActorStatus`) are what ``health`` and the worker status report."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

import anyio
from pydantic import BaseModel

_log = logging.getLogger(__name__)

#: An actor calls its pulse when it has made progress: the supervisor then forgets earlier crashes.
Pulse = Callable[[], None]


def _now() -> datetime:
    return datetime.now(UTC)


class ActorStatus(BaseModel):
    """A supervised actor as an operator sees it."""

    name: str
    running: bool
    started_at: datetime | None
    crashes: int  # since the supervisor started
    consecutive_crashes: int  # since the actor last made progress
    restarts: int
    last_error: str | None
    last_crash_at: datetime | None
    next_restart_at: datetime | None  # set while it waits to be restarted
    crash_looping: bool  # crash_loop_after or more consecutive crashes


@dataclass
class _Actor:
    name: str
    running: bool = False
    started_at: datetime | None = None
    crashes: int = 0
    consecutive_crashes: int = 0
    restarts: int = 0
    last_error: str | None = None
    last_crash_at: datetime | None = None
    next_restart_at: datetime | None = None


@dataclass
class Supervisor:
    """Restarts crashed actors with backoff; see the module docstring."""

    restart_base_seconds: float = 1.0
    restart_max_seconds: float = 60.0
    crash_loop_after: int = 3
    _actors: dict[str, _Actor] = field(default_factory=dict, init=False, repr=False)

    async def supervise(self, name: str, actor: Callable[[Pulse], Awaitable[None]]) -> None:
        """Run ``actor(pulse)`` until cancelled. When it raises (or returns: actors are meant to run
        until cancelled), log why with the traceback, wait ``restart_base_seconds`` doubled per
        consecutive crash (capped at ``restart_max_seconds``), and start it again. The actor's
        ``pulse()`` marks progress and resets the consecutive count. Cancellation: the actor is
        cancelled (and finishes its own cleanup) and the supervision ends."""
        state = self._actors.setdefault(name, _Actor(name))

        def pulse() -> None:
            state.consecutive_crashes = 0

        while True:
            state.running, state.started_at, state.next_restart_at = True, _now(), None
            error: BaseException | None = None
            try:
                await actor(pulse)
                why = "returned (actors run until cancelled)"
            except Exception as exc:
                error = exc
                why = f"{type(exc).__name__}: {exc}"
            finally:
                state.running = False
            state.crashes += 1
            state.consecutive_crashes += 1
            state.last_error = why[:1000]
            state.last_crash_at = _now()
            delay = min(self.restart_max_seconds, self.restart_base_seconds * 2 ** (state.consecutive_crashes - 1))
            state.next_restart_at = state.last_crash_at + timedelta(seconds=delay)
            looping = state.consecutive_crashes >= self.crash_loop_after
            _log.error("%s%s crashed: %s (%d in a row, %d in all); restarting in %.3g s", "CRASH LOOP: " if looping
                       else "", name, why, state.consecutive_crashes, state.crashes, delay, exc_info=error)
            await anyio.sleep(delay)
            state.restarts += 1

    def snapshot(self) -> list[ActorStatus]:
        return [ActorStatus(**asdict(a), crash_looping=a.consecutive_crashes >= self.crash_loop_after)
                for a in self._actors.values()]
