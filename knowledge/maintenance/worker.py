"""The maintenance worker: attachment workers and the sweeper (expired artifacts, trace retention), each
under a supervisor.

- **`AttachmentWorker`** drains the attachment queue (`knowledge.ingest.attachments.AttachmentQueue`):
  it claims a batch of the first claimable attachments in upload order (``batch``, default 32),
  keeps their leases alive while it works, and ingests them together through the bulk path
  (`knowledge.ingest.bulk.ingest_many`: the same seven steps as ``knowledge.ingest``, each file
  prepared while the previous group is written, each still all-or-nothing) with ``USER`` origin
  trust (the owner sending the file is the human admission) and the fixed request: the file name as
  the title, ``principal`` visibility, ``principal_supplied`` authority, ``internal`` sensitivity,
  and the name-based document id (`attachment_document_id`). Each attachment is settled on its own:
  a refusal is recorded ``refused`` with its reason and never retried; a transient failure
  (database unavailable, parser killed, a timeout) is retried at most ``max_retries`` times with
  backoff, then recorded ``failed`` with its last reason; every attempt is kept on the attachment.
  Nothing of it reaches the conversation.
- **`MaintenanceWorker`** is one supervisor (`knowledge.supervisors.actors.Supervisor`: restarts a
  crashed actor after a backoff) over N attachment workers (N may be 0) and **the sweeper**, the
  service's one periodic maintenance actor: every ``sweep_interval_seconds`` it deletes expired
  artifacts and applies the traces' two-tier retention (`knowledge.store.traces.prune_traces`). The
  service runs it in its task group when it sweeps or has attachment workers; ``knowledge worker``
  (``python -m knowledge worker``) runs it as a process of its own, stopped cleanly by SIGINT or
  SIGTERM.

Many workers, one result: claims skip each other (``FOR UPDATE SKIP LOCKED``), a lease that is not
renewed (its worker died) expires and the attachment is taken over, and the same file is the same
document id, so a takeover after the dead worker had committed finds the document instead of
making a second. Stopping a worker mid-batch (closing the service, cancelling its scope) rolls back
what it had not committed and releases every attachment it had not settled, pending again, this
attempt not counted (one whose document committed is found by the next claim).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
from pydantic import BaseModel

from knowledge.config import Settings
from knowledge.core.prepare import IngestRequest
from knowledge.errors import IngestRefused, KnowledgeError
from knowledge.ingest.attachments import TRANSIENT_REFUSALS, AttachmentQueue, Claim, Outcome, Settled
from knowledge.ingest.bulk import Outcome as BulkOutcome
from knowledge.ingest.bulk import ingest_many
from knowledge.ingest.ingestor import Ingestor
from knowledge.models import Authority, KnowledgeDocument, Principal, Sensitivity, TrustLevel, Visibility
from knowledge.store.artifacts import ArtifactStore
from knowledge.store.db import Database, QueryCanceled, is_transient
from knowledge.store.faults import Faults
from knowledge.store.traces import prune_traces
from knowledge.supervisors.actors import ActorStatus, Pulse, Supervisor
from knowledge.vocabulary import WRITE_SCOPE

_log = logging.getLogger(__name__)

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
    batch: int = 32  # attachments claimed at once and ingested together (`knowledge.ingest.bulk`)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> WorkerOptions:
        values: dict[str, Any] = {
            "lease_seconds": settings.attachment_lease_seconds,
            "poll_seconds": settings.attachment_poll_seconds,
            "max_retries": settings.attachment_max_retries,
            "retry_base_seconds": settings.attachment_retry_base_seconds,
            "retry_max_seconds": settings.attachment_retry_max_seconds,
            "job_timeout_seconds": settings.attachment_job_timeout_seconds,
            "batch": settings.attachment_batch,
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

    def __init__(self, queue: AttachmentQueue, ingestor: Ingestor, options: WorkerOptions | None = None, *,
                 worker_id: str | None = None, doorbell: Doorbell | None = None, faults: Faults | None = None
                 ) -> None:
        self.queue = queue
        self._ingestor = ingestor
        #: The fault-injection seam's claim hook (``worker_step``): the ingest's own, unless given.
        self._faults = faults if faults is not None else ingestor.faults
        self.options = options or WorkerOptions()
        self.worker_id = worker_id or new_worker_id()
        self.doorbell = doorbell or Doorbell()
        self.stats = WorkerStats(worker_id=self.worker_id)

    async def run(self, pulse: Pulse = _no_pulse) -> None:
        """Work until cancelled: claim in upload order, and when nothing is claimable wait for a
        mark in this process, the next retry or lease expiry, or the poll interval. Calls ``pulse``
        after every successful look at the queue. Database errors outside a job propagate (the
        supervisor restarts the worker). Cancellation: the batch in flight stops (what it had not
        committed rolls back) and its unsettled attachments are released, then the cancellation
        propagates."""
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
            claimed = await self.step()
            if claimed:
                done += claimed
                continue
            due = await self.queue.next_due(self.options.tenant_id)
            if due is None:
                return done
            await self._idle(due)

    async def step(self) -> int:
        """Claim a batch (up to ``batch`` attachments) and see it through; return how many were
        claimed (0: nothing was claimable). Cancellation: as `run`."""
        await self._faults.worker("claim")
        claims = await self.queue.claim(self.worker_id, self.options.lease_seconds, self.options.tenant_id,
                                        max_attempts=self.options.max_attempts, limit=self.options.batch)
        for claim in claims:
            self.stats.claimed += 1
            if claim.taken_over_from is not None:
                self.stats.taken_over += 1
                _log.warning("attachment %s (tenant %s): lease of worker %s expired; %s takes it over (attempt %d)",
                             claim.artifact_id, claim.tenant_id, claim.taken_over_from, self.worker_id, claim.attempt)
        if claims:
            await self._process(claims)
        return len(claims)

    async def _idle(self, due: float | None) -> None:
        wait = self.options.poll_seconds if due is None else min(max(due, 0.0), self.options.poll_seconds)
        await self.doorbell.wait(max(wait, _MIN_IDLE_SECONDS))

    async def _process(self, claims: list[Claim]) -> None:
        """Attempt the batch, then settle each claim with its outcome. Whatever is not settled — the
        attempt stopped because every lease was lost, the worker is stopping (cancellation), or the
        database failed while settling — is released (`_release_unsettled`)."""
        settled: set[uuid.UUID] = set()
        try:
            outcomes = await self._attempt_holding_leases(claims)
            finished = [c for c in claims if c.artifact_id in outcomes]
            results = await self.queue.settle(finished, [outcomes[c.artifact_id] for c in finished],
                                              max_attempts=self.options.max_attempts, backoff=self.options.backoff)
            settled.update(c.artifact_id for c in finished)
            for claim, result in zip(finished, results, strict=True):
                self._count(claim, outcomes[claim.artifact_id], result)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_SECONDS):
                await self._release_unsettled([c for c in claims if c.artifact_id not in settled])

    async def _release_unsettled(self, claims: list[Claim]) -> None:
        """Give each claim back, pending again (a document already committed is found by the next
        claim), counting what the release found: ``released``, or ``lease_lost``/``withdrawn`` when
        it was no longer this worker's. A release that fails is logged: its lease expires and
        another worker takes the attachment."""
        for claim in claims:
            try:
                self._count(claim, None, await self.queue.release(claim))
            except Exception:
                _log.warning("attachment %s: could not release the claim; its lease will expire",
                             claim.artifact_id, exc_info=True)

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

    async def _attempt_holding_leases(self, claims: list[Claim]) -> dict[uuid.UUID, Outcome]:
        """One attempt of the batch while a sibling task renews its leases; the outcome of every
        claim it reached. Once every lease is lost, the attempt is cancelled (what it had not
        committed rolls back); a claim whose lease alone is lost is still attempted (its document
        id is the same whoever ingests it, and settling it finds it is no longer this worker's)."""
        outcomes: dict[uuid.UUID, Outcome] = {}
        async with anyio.create_task_group() as tg:

            async def attempt() -> None:
                await self._attempt(claims, outcomes)
                tg.cancel_scope.cancel()

            async def keep_leases() -> None:
                if not await self._keep_leases(claims):
                    tg.cancel_scope.cancel()

            tg.start_soon(keep_leases)
            tg.start_soon(attempt)
        return outcomes

    async def _keep_leases(self, claims: list[Claim]) -> bool:
        """Renew the leases every third of their length until cancelled; False once all are lost."""
        held = {c.artifact_id for c in claims}
        while True:
            await anyio.sleep(self.options.lease_seconds / 3)
            try:
                held &= await self.queue.renew([c for c in claims if c.artifact_id in held],
                                               self.options.lease_seconds)
            except Exception:
                _log.warning("%s: could not renew its leases; retrying", self.worker_id, exc_info=True)
                continue
            if not held:
                return False

    async def _attempt(self, claims: list[Claim], outcomes: dict[uuid.UUID, Outcome]) -> None:
        """Ingest the claimed attachments once, in one `ingest_many` (the bulk path), recording how
        each ended in ``outcomes`` as soon as it does; never raises but for cancellation. Each
        attachment's steps 1-5 are bounded by ``job_timeout_seconds`` (passing it is that attachment's
        transient ``timeout``), and the whole batch by that times its size plus one: the claims it has
        not finished by then are each a transient ``timeout`` too."""
        runnable: list[Claim] = []
        for claim in claims:
            if not claim.principal_id:
                outcomes[claim.artifact_id] = Outcome("refused", "invalid_request")
            elif claim.exhausted:  # the last allowed attempt's worker died mid-job
                outcomes[claim.artifact_id] = Outcome("failed", "lease_expired")
            elif claim.document_exists:  # the same file, sent before (settling checks it is still there)
                outcomes[claim.artifact_id] = Outcome("ingested")
            else:
                runnable.append(claim)
        if not runnable:
            return
        requests = [IngestRequest(
            source=claim.source, title=claim.title, visibility=Visibility.PRINCIPAL,
            principal=Principal(tenant_id=claim.tenant_id, principal_id=claim.principal_id,
                                scopes=frozenset({WRITE_SCOPE})),
            origin_trust=TrustLevel.USER, authority=Authority.PRINCIPAL_SUPPLIED,
            sensitivity=Sensitivity.INTERNAL, document_id=claim.document_id,
        ) for claim in runnable]

        def done(index: int, result: BulkOutcome) -> None:
            outcomes[runnable[index].artifact_id] = classify(runnable[index], result)

        seconds = self.options.job_timeout_seconds
        # Preparing is sequential and each one bounded: only writes that hang reach the batch's bound.
        with anyio.move_on_after(seconds * (len(runnable) + 1)) as batch:
            await ingest_many(self._ingestor, requests, done, prepare_seconds=seconds)
        if batch.cancelled_caught:
            unfinished = [c for c in runnable if c.artifact_id not in outcomes]
            _log.warning("%s: a batch of %d attachments ran out of time; %d unfinished", self.worker_id,
                         len(runnable), len(unfinished))
            outcomes.update((c.artifact_id, Outcome("retry", "timeout")) for c in unfinished)


def classify(claim: Claim, result: BulkOutcome) -> Outcome:
    """How one attachment's ingest ended: its document (or the same file's, ingested by another
    worker meanwhile) is ``ingested``; a transient failure is ``retry``; any other refusal is
    ``refused``; anything else ``failed`` (logged with its traceback)."""
    if isinstance(result, KnowledgeDocument):
        return Outcome("ingested")
    if isinstance(result, IngestRefused):
        if result.reason == "document_exists":
            return Outcome("ingested")
        if result.reason in TRANSIENT_REFUSALS:
            return Outcome("retry", result.reason)
        return Outcome("refused", result.reason)
    transient = transient_reason(result)
    if transient is not None:
        return Outcome("retry", transient)
    _log.error("attachment %s: ingest failed unexpectedly", claim.artifact_id, exc_info=result)
    return Outcome("failed", result.reason if isinstance(result, KnowledgeError) else f"error:{type(result).__name__}")


class MaintenanceStatus(BaseModel):
    """The maintenance worker as an operator sees it (`KnowledgeService.worker_status`)."""

    process: str
    actors: list[ActorStatus]
    workers: list[WorkerStats]
    swept: int  # expired artifacts this worker's sweeper deleted
    crash_looping: bool  # some actor is crash-looping
    queue: dict[str, int] | None = None  # live attachments by state (None in `snapshot`)


class MaintenanceWorker:
    """N attachment workers and the sweeper, each supervised; see the module docstring."""

    def __init__(self, db: Database, artifacts: ArtifactStore, ingestor: Ingestor, options: WorkerOptions | None = None,
                 *, workers: int = 1, sweep_interval_seconds: float | None = None,
                 supervisor: Supervisor | None = None) -> None:
        self.db = db
        self.queue = AttachmentQueue(db)
        self.artifacts = artifacts
        self.options = options or WorkerOptions()
        self.process = process_id()
        self.doorbell = Doorbell()
        self.workers = [AttachmentWorker(self.queue, ingestor, self.options, worker_id=new_worker_id(i, self.process),
                                         doorbell=self.doorbell) for i in range(workers)]
        self.sweep_interval_seconds = sweep_interval_seconds
        self.supervisor = supervisor or Supervisor()
        self.swept = 0

    @classmethod
    def from_settings(cls, settings: Settings, db: Database, artifacts: ArtifactStore,
                      ingestor: Ingestor) -> MaintenanceWorker:
        return cls(db, artifacts, ingestor, WorkerOptions.from_settings(settings, tenant_id=settings.attachment_tenant),
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
                tg.start_soon(self.supervisor.supervise, "sweeper", self._sweep, name="sweeper")

    def wake(self) -> None:
        """Attachments were marked: wake this process's idle workers."""
        self.doorbell.ring()

    async def _sweep(self, pulse: Pulse) -> None:
        """Each interval: delete expired artifacts, then apply the traces' retention schedule."""
        assert self.sweep_interval_seconds
        while True:
            swept = await self.artifacts.sweep()
            if swept:
                self.swept += swept
                _log.info("swept %d expired artifacts", swept)
            pruned = await prune_traces(self.db)
            if pruned.reduced or pruned.deleted:
                _log.info("traces: %d reduced, %d deleted", pruned.reduced, pruned.deleted)
            pulse()
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
