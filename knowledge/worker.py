"""The maintenance worker: attachment workers and the artifact sweeper, each under a supervisor.

- **`AttachmentWorker`** drains the attachment queue (`knowledge.attachments.AttachmentQueue`):
  it claims the first claimable attachment in upload order, keeps its lease alive while it works,
  and calls the same ingest as ``knowledge.ingest`` with ``USER`` origin trust (the owner sending
  the file is the human admission) and the fixed request: the file name as the title, ``principal``
  visibility, ``principal_supplied`` authority, ``internal`` sensitivity, and the name-based
  document id (`attachment_document_id`). A refusal is recorded ``refused`` with its reason and
  never retried; a transient failure (database unavailable, parser killed, a timeout) is retried
  at most ``max_retries`` times with backoff, then recorded ``failed`` with its last reason; every
  attempt is kept on the attachment. Nothing of it reaches the conversation.
- **`Supervisor`** runs each actor until cancelled and restarts one that crashed after a backoff
  (doubling per consecutive crash, reset by the actor's progress), logging why at ERROR with the
  traceback. Its counters (`ActorStatus`: crashes, consecutive crashes, last error, next restart,
  ``crash_looping``) are what `KnowledgeService.worker_status` and ``health`` report.
- **`MaintenanceWorker`** is one supervisor over N attachment workers and the sweeper. The service
  runs it in its task group when ``Settings.attachment_workers`` > 0; ``python -m knowledge.worker``
  runs it as a process of its own, stopped cleanly by SIGINT or SIGTERM.

Many workers, one result: claims skip each other (``FOR UPDATE SKIP LOCKED``), a lease that is not
renewed (its worker died) expires and the attachment is taken over, and the same file is the same
document id, so a takeover after the dead worker had committed finds the document instead of
making a second. Stopping a worker mid-job (closing the service, cancelling its scope) rolls the
ingest back and releases the attachment, pending again, this attempt not counted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from pydantic import BaseModel

from knowledge.attachments import TRANSIENT_REFUSALS, WRITE_SCOPE, AttachmentQueue, Claim, Outcome, Settled
from knowledge.config import Settings
from knowledge.errors import KnowledgeError
from knowledge.ingest import IngestRefused, IngestRequest
from knowledge.models import Authority, KnowledgeDocument, Principal, Sensitivity, TrustLevel, Visibility
from knowledge.store.artifacts import ArtifactStore
from knowledge.store.db import Database, QueryCanceled, is_transient

_log = logging.getLogger(__name__)

#: The ingest the worker calls: `Ingestor.ingest`, the same one ``knowledge.ingest`` runs.
IngestFn = Callable[[IngestRequest], Awaitable[KnowledgeDocument]]
#: An actor calls its pulse when it has made progress: the supervisor then forgets earlier crashes.
Pulse = Callable[[], None]
#: How long releasing a claim may take while the worker stops (shielded).
_RELEASE_SECONDS = 5.0
#: The shortest idle wait, so a row due now but being claimed by another worker is not spun on.
_MIN_IDLE_SECONDS = 0.02


def _now() -> datetime:
    return datetime.now(UTC)


def _no_pulse() -> None:
    return None


def new_worker_id(index: int = 0, process: str | None = None) -> str:
    """``host:pid:random/index`` — unique per worker, readable in a lease column."""
    return f"{process or process_id()}/{index}"


def process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class WorkerOptions:
    """How attachment workers claim, retry and time out (defaults: `Settings`)."""

    lease_seconds: float = 60.0
    poll_seconds: float = 2.0
    max_retries: int = 3
    retry_base_seconds: float = 5.0
    retry_max_seconds: float = 300.0
    job_timeout_seconds: float = 300.0
    tenant_id: str | None = None  # a worker dedicated to one tenant; None: every tenant

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> WorkerOptions:
        values: dict[str, Any] = {
            "lease_seconds": settings.attachment_lease_seconds,
            "poll_seconds": settings.attachment_poll_seconds,
            "max_retries": settings.attachment_max_retries,
            "retry_base_seconds": settings.attachment_retry_base_seconds,
            "retry_max_seconds": settings.attachment_retry_max_seconds,
            "job_timeout_seconds": settings.attachment_job_timeout_seconds,
        }
        values.update(overrides)
        return cls(**values)

    @property
    def max_attempts(self) -> int:
        return 1 + self.max_retries

    def backoff(self, attempt: int) -> float:
        """Seconds before the retry that follows failed attempt ``attempt`` (1-based): the base,
        doubled per attempt, capped, with jitter so that many retries spread out."""
        delay = min(self.retry_max_seconds, self.retry_base_seconds * 2.0 ** max(0, attempt - 1))
        return float(delay * random.uniform(0.8, 1.0))


class Doorbell:
    """Wakes idle workers of this process when attachments are marked (other processes' marks are
    found by polling)."""

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def ring(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self, seconds: float) -> None:
        """Return when rung or after ``seconds``. Cancellation: propagates."""
        if self._event is None:
            self._event = anyio.Event()
        event = self._event
        with anyio.move_on_after(seconds):
            await event.wait()


def transient_reason(exc: BaseException) -> str | None:
    """The reason code of a failure that a retry may cure, or None if it is not one: database
    unavailable (or a connection lost, a serialization failure, a deadlock), a query cancelled
    by a timeout, the parser killed or out of time, this attempt's own timeout. An exception group
    is transient if every exception in it is."""
    if isinstance(exc, BaseExceptionGroup):
        reasons = [transient_reason(e) for e in exc.exceptions]
        return reasons[0] if reasons and all(reasons) else None
    if isinstance(exc, IngestRefused):
        return exc.reason if exc.reason in TRANSIENT_REFUSALS else None
    if isinstance(exc, KnowledgeError) and getattr(exc, "transient", False):  # ParserFailure
        return exc.reason
    if isinstance(exc, TimeoutError | QueryCanceled):
        return "timeout"
    if is_transient(exc):
        return exc.reason if isinstance(exc, KnowledgeError) else "database_unavailable"
    return None


class WorkerStats(BaseModel):
    """One attachment worker's counters since it started."""

    worker_id: str
    claimed: int = 0
    ingested: int = 0
    refused: int = 0
    retried: int = 0  # attempts that failed transiently and were put back for a retry
    failed: int = 0
    taken_over: int = 0  # claims of attachments whose previous worker's lease had expired
    released: int = 0  # claims given back unfinished because this worker stopped
    lease_lost: int = 0  # claims that turned out to be another worker's (this one stalled)
    withdrawn: int = 0  # attachments whose conversation was deleted while they were being ingested


class AttachmentWorker:
    """One claim loop over the attachment queue; see the module docstring."""

    def __init__(self, queue: AttachmentQueue, ingest: IngestFn, options: WorkerOptions | None = None, *,
                 worker_id: str | None = None, doorbell: Doorbell | None = None) -> None:
        self.queue = queue
        self._ingest = ingest
        self.options = options or WorkerOptions()
        self.worker_id = worker_id or new_worker_id()
        self.doorbell = doorbell or Doorbell()
        self.stats = WorkerStats(worker_id=self.worker_id)

    async def run(self, pulse: Pulse = _no_pulse) -> None:
        """Work until cancelled: claim in upload order, and when nothing is claimable wait for a
        mark in this process, the next retry or lease expiry, or the poll interval. Calls ``pulse``
        after every successful look at the queue. Database errors outside a job propagate (the
        supervisor restarts the worker). Cancellation: a job in flight rolls back and its
        attachment is released, then the cancellation propagates."""
        while True:
            worked = await self.step()
            pulse()
            if worked:
                continue
            due = await self.queue.next_due(self.options.tenant_id)
            await self._idle(due)

    async def drain(self) -> int:
        """Work until no attachment (of this worker's tenant, if it has one) is pending or being
        ingested — waiting for retries' backoffs and for other workers' jobs, including their
        leases to expire — and return how many claims this worker saw through. Cancellation: as
        `run`."""
        done = 0
        while True:
            if await self.step():
                done += 1
                continue
            due = await self.queue.next_due(self.options.tenant_id)
            if due is None:
                return done
            await self._idle(due)

    async def step(self) -> bool:
        """Claim one attachment and see it through; False if nothing was claimable.
        Cancellation: as `run`."""
        claim = await self.queue.claim(self.worker_id, self.options.lease_seconds, self.options.tenant_id,
                                       max_attempts=self.options.max_attempts)
        if claim is None:
            return False
        self.stats.claimed += 1
        if claim.taken_over_from is not None:
            self.stats.taken_over += 1
            _log.warning("attachment %s (tenant %s): lease of worker %s expired; %s takes it over (attempt %d)",
                         claim.artifact_id, claim.tenant_id, claim.taken_over_from, self.worker_id, claim.attempt)
        await self._process(claim)
        return True

    async def _idle(self, due: float | None) -> None:
        wait = self.options.poll_seconds if due is None else min(max(due, 0.0), self.options.poll_seconds)
        await self.doorbell.wait(max(wait, _MIN_IDLE_SECONDS))

    async def _process(self, claim: Claim) -> None:
        outcome: Outcome | None = None
        try:
            if not claim.principal_id:
                outcome = Outcome("refused", "invalid_request")
            elif claim.exhausted:  # the last allowed attempt's worker died mid-job
                outcome = Outcome("failed", "lease_expired")
            else:
                outcome = await self._attempt_holding_lease(claim)
            if outcome is None:  # the lease was lost (taken over, or the conversation was deleted)
                settled = await self.queue.release(claim)
            else:
                settled = await self.queue.settle(claim, outcome, max_attempts=self.options.max_attempts,
                                                  backoff=self.options.backoff)
        except BaseException:
            # Stopping (cancellation) or a database failure while settling: give the attachment
            # back, pending again; if even that fails, its lease expires and another worker takes it.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_SECONDS):
                try:
                    if await self.queue.release(claim) == "released":
                        self.stats.released += 1
                except Exception:
                    _log.warning("attachment %s: could not release the claim; its lease will expire",
                                 claim.artifact_id, exc_info=True)
            raise
        self._count(claim, outcome, settled)

    def _count(self, claim: Claim, outcome: Outcome | None, settled: Settled) -> None:
        where = f"attachment {claim.artifact_id} ({claim.source.file_name!r}, tenant {claim.tenant_id})"
        reason = outcome.reason if outcome else None
        if settled == "ingested":
            self.stats.ingested += 1
            _log.info("%s ingested as document %s (attempt %d)", where, claim.document_id, claim.attempt)
        elif settled == "refused":
            self.stats.refused += 1
            _log.info("%s refused: %s", where, reason)
        elif settled == "pending":
            self.stats.retried += 1
            _log.warning("%s: attempt %d failed (%s); will retry", where, claim.attempt, reason)
        elif settled == "failed":
            self.stats.failed += 1
            _log.warning("%s failed after %d attempts: %s", where, claim.attempt, reason)
        elif settled == "withdrawn":
            self.stats.withdrawn += 1
            _log.info("%s was withdrawn (its conversation was deleted) while being ingested", where)
        elif settled == "lease_lost":
            self.stats.lease_lost += 1
            _log.warning("%s: %s lost its lease; another worker has it", where, self.worker_id)
        elif settled == "released":
            self.stats.released += 1

    async def _attempt_holding_lease(self, claim: Claim) -> Outcome | None:
        """One attempt while a sibling task renews the lease; None if the lease is lost meanwhile
        (the attempt is then cancelled: its ingest rolls back)."""
        outcome: Outcome | None = None
        async with anyio.create_task_group() as tg:

            async def attempt() -> None:
                nonlocal outcome
                outcome = await self._attempt(claim)
                tg.cancel_scope.cancel()

            async def keep_lease() -> None:
                if not await self._keep_lease(claim):
                    tg.cancel_scope.cancel()

            tg.start_soon(keep_lease)
            tg.start_soon(attempt)
        return outcome

    async def _keep_lease(self, claim: Claim) -> bool:
        """Renew the lease every third of its length until cancelled; False once it is lost."""
        while True:
            await anyio.sleep(self.options.lease_seconds / 3)
            try:
                if not await self.queue.renew(claim, self.options.lease_seconds):
                    return False
            except Exception:
                _log.warning("attachment %s: could not renew the lease; retrying", claim.artifact_id, exc_info=True)

    async def _attempt(self, claim: Claim) -> Outcome:
        """Ingest the claimed attachment once; classify how that ended. Never raises but for
        cancellation."""
        if claim.document_exists:
            return Outcome("ingested")  # the same file, sent before (settling checks it is still there)
        try:
            with anyio.fail_after(self.options.job_timeout_seconds):
                await self._ingest(IngestRequest(
                    source=claim.source, title=claim.title, visibility=Visibility.PRINCIPAL,
                    principal=Principal(tenant_id=claim.tenant_id, principal_id=claim.principal_id,
                                        scopes=frozenset({WRITE_SCOPE})),
                    origin_trust=TrustLevel.USER, authority=Authority.PRINCIPAL_SUPPLIED,
                    sensitivity=Sensitivity.INTERNAL, document_id=claim.document_id,
                ))
            return Outcome("ingested")
        except IngestRefused as refusal:
            if refusal.reason == "document_exists":  # the same file, ingested by another worker meanwhile
                return Outcome("ingested")
            if refusal.reason in TRANSIENT_REFUSALS:
                return Outcome("retry", refusal.reason)
            return Outcome("refused", refusal.reason)
        except Exception as exc:
            transient = transient_reason(exc)
            if transient is not None:
                return Outcome("retry", transient)
            _log.exception("attachment %s: ingest failed unexpectedly", claim.artifact_id)
            return Outcome("failed", exc.reason if isinstance(exc, KnowledgeError) else f"error:{type(exc).__name__}")


# --- Supervision ------------------------------------------------------------------------------------------


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


class MaintenanceStatus(BaseModel):
    """The maintenance worker as an operator sees it (`KnowledgeService.worker_status`)."""

    process: str
    actors: list[ActorStatus]
    workers: list[WorkerStats]
    swept: int  # expired artifacts this worker's sweeper deleted
    crash_looping: bool  # some actor is crash-looping
    queue: dict[str, int] | None = None  # live attachments by state (None in `snapshot`)


class MaintenanceWorker:
    """N attachment workers and the artifact sweeper, each supervised; see the module docstring."""

    def __init__(self, db: Database, artifacts: ArtifactStore, ingest: IngestFn, options: WorkerOptions | None = None,
                 *, workers: int = 1, sweep_interval_seconds: float | None = None,
                 supervisor: Supervisor | None = None) -> None:
        self.queue = AttachmentQueue(db)
        self.artifacts = artifacts
        self.options = options or WorkerOptions()
        self.process = process_id()
        self.doorbell = Doorbell()
        self.workers = [AttachmentWorker(self.queue, ingest, self.options, worker_id=new_worker_id(i, self.process),
                                         doorbell=self.doorbell) for i in range(workers)]
        self.sweep_interval_seconds = sweep_interval_seconds
        self.supervisor = supervisor or Supervisor()
        self.swept = 0

    @classmethod
    def from_settings(cls, settings: Settings, db: Database, artifacts: ArtifactStore,
                      ingest: IngestFn) -> MaintenanceWorker:
        return cls(db, artifacts, ingest, WorkerOptions.from_settings(settings, tenant_id=settings.attachment_tenant),
                   workers=settings.attachment_workers, sweep_interval_seconds=settings.sweep_interval_seconds,
                   supervisor=Supervisor(settings.worker_restart_base_seconds, settings.worker_restart_max_seconds))

    async def run(self) -> None:
        """Run every attachment worker and the sweeper, each supervised, until cancelled.
        Cancellation: every job in flight rolls back and its attachment is released (pending again)
        before this returns; the cancellation propagates."""
        async with anyio.create_task_group() as tg:
            for index, worker in enumerate(self.workers):
                tg.start_soon(self.supervisor.supervise, f"attachment-worker-{index}", worker.run,
                              name=f"attachment-worker-{index}")
            if self.sweep_interval_seconds:
                tg.start_soon(self.supervisor.supervise, "artifact-sweeper", self._sweep, name="artifact-sweeper")

    def wake(self) -> None:
        """Attachments were marked: wake this process's idle workers."""
        self.doorbell.ring()

    async def _sweep(self, pulse: Pulse) -> None:
        assert self.sweep_interval_seconds
        while True:
            swept = await self.artifacts.sweep()
            pulse()
            if swept:
                self.swept += swept
                _log.info("swept %d expired artifacts", swept)
            await anyio.sleep(self.sweep_interval_seconds)

    def snapshot(self) -> MaintenanceStatus:
        """Counters only, no database round trip (for ``health``)."""
        actors = self.supervisor.snapshot()
        return MaintenanceStatus(process=self.process, actors=actors,
                                 workers=[w.stats.model_copy() for w in self.workers],
                                 swept=self.swept, crash_looping=any(a.crash_looping for a in actors))

    async def status(self) -> MaintenanceStatus:
        """`snapshot` plus the queue's depth by state (one query). Cancellation: propagates."""
        return self.snapshot().model_copy(update={"queue": await self.queue.counts(self.options.tenant_id)})


# --- As a process of its own: python -m knowledge.worker -------------------------------------------------------


async def serve(settings: Settings, *, announce: Callable[[dict[str, Any]], None]) -> None:
    """Open a service that runs the maintenance worker, call ``announce`` with its facts, and run
    until SIGINT or SIGTERM; then close it (jobs in flight roll back and are released) and return.
    Cancellation: the same close, then it propagates."""
    from knowledge.service import KnowledgeService  # the service imports this module

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with KnowledgeService.open(settings) as svc:
            maintenance: MaintenanceWorker | None = svc.maintenance
            assert maintenance is not None
            announce({"ready": True, "pid": os.getpid(), "process": maintenance.process,
                      "workers": [w.worker_id for w in maintenance.workers]})
            async for signum in signals:
                _log.info("signal %d: stopping the maintenance worker", signum)
                break
        status = maintenance.snapshot()  # after the close: jobs in flight are released by now
        announce({"stopped": True, "workers": [w.model_dump() for w in status.workers]})


def main(argv: list[str] | None = None) -> int:
    """``python -m knowledge.worker``: the maintenance worker as a process (settings from the
    environment, as `Settings.from_env`); prints one JSON line when ready and one when stopped."""
    parser = argparse.ArgumentParser(prog="python -m knowledge.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, help="attachment workers (default $KNOWLEDGE_ATTACHMENT_WORKERS or 1)")
    parser.add_argument("--tenant", help="only this tenant's attachments")
    parser.add_argument("--lease-seconds", type=float)
    parser.add_argument("--poll-seconds", type=float)
    parser.add_argument("--retry-base-seconds", type=float)
    parser.add_argument("--sweep-interval-seconds", type=float)
    parser.add_argument("--dsn", help="PostgreSQL DSN (default $KNOWLEDGE_DSN, else the embedded server)")
    parser.add_argument("--backend", choices=["trio", "asyncio"], default="trio")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings.from_env(dsn=args.dsn)
    overrides: dict[str, Any] = {
        "attachment_workers": args.workers or settings.attachment_workers or 1,
        "attachment_tenant": args.tenant,
        "attachment_lease_seconds": args.lease_seconds,
        "attachment_poll_seconds": args.poll_seconds,
        "attachment_retry_base_seconds": args.retry_base_seconds,
        "sweep_interval_seconds": args.sweep_interval_seconds,
    }
    settings = Settings.model_validate({**settings.model_dump(), **{k: v for k, v in overrides.items() if v}})

    def announce(facts: dict[str, Any]) -> None:
        print(json.dumps(facts), flush=True)

    anyio.run(lambda: serve(settings, announce=announce), backend=args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
