"""The actors' timing on trio's virtual clock (`trio.testing.MockClock` with ``autojump_threshold=0``,
pytest-trio's ``autojump_clock``): the supervisor's restart backoff, an attachment worker's idle poll
and lease renewal, the sweeper's and the trace pruner's intervals — minutes of schedule checked to
the virtual second, without real waiting.

Autojump advances the clock whenever every task is blocked, which is right only while nothing waits
on real I/O: a real PostgreSQL answers in real time, and the clock would jump past every timeout
meanwhile. So these tests run the actors' own loops around fakes of the one call each loop makes
(the supervised actor itself; the queue's ``claim``/``next_due``/``renew``; ``sweep``;
``prune_traces``), never a database. What does need the database stays in real time elsewhere:
lease expiry and takeover, and the retry backoff's ``next_attempt_at``, are computed by the server's
``clock_timestamp()`` (tests/test_worker.py, with short real leases and backoffs).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import types
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import pytest
import trio
import trio.testing

from knowledge.ingest.attachments import AttachmentQueue, Claim, Outcome
from knowledge.maintenance import worker as worker_module
from knowledge.maintenance.worker import _MIN_IDLE_SECONDS, AttachmentWorker, MaintenanceWorker, WorkerOptions
from knowledge.models import ArtifactRef
from knowledge.store.faults import Faults
from knowledge.supervisors.actors import Pulse, Supervisor
from knowledge.vocabulary import ArtifactOrigin, TrustLevel


def now() -> float:
    return trio.current_time()


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 9) for a, b in itertools.pairwise(times)]


# --- The supervisor: restart backoff -----------------------------------------------------------------------


class Crashing:
    """An actor that records when it starts and then crashes (``pulse_on``: the runs, 0-based, that
    report progress first)."""

    def __init__(self, pulse_on: frozenset[int] = frozenset()) -> None:
        self.starts: list[float] = []
        self.pulse_on = pulse_on

    async def __call__(self, pulse: Pulse) -> None:
        self.starts.append(now())
        if len(self.starts) - 1 in self.pulse_on:
            pulse()
        await trio.lowlevel.checkpoint()
        raise RuntimeError(f"crash {len(self.starts)}")


async def supervise_for(seconds: float, supervisor: Supervisor, name: str, actor: Callable[[Pulse], Any]) -> None:
    """Supervise ``actor`` for ``seconds`` of virtual time, then cancel the supervision."""
    with trio.move_on_after(seconds):
        await supervisor.supervise(name, actor)


@pytest.mark.trio
async def test_a_crashing_actor_is_restarted_after_1_2_4_8_seconds_then_the_cap(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="knowledge.maintenance.worker")
    supervisor = Supervisor(restart_base_seconds=1.0, restart_max_seconds=10.0, crash_loop_after=3)
    actor = Crashing()
    await supervise_for(35.5, supervisor, "crasher", actor)
    assert actor.starts == pytest.approx([0, 1, 3, 7, 15, 25, 35], abs=1e-6)  # waits 1, 2, 4, 8, then the cap
    [status] = supervisor.snapshot()
    assert (status.name, status.crashes, status.consecutive_crashes, status.restarts) == ("crasher", 7, 7, 6)
    assert status.crash_looping and not status.running
    assert status.last_error == "RuntimeError: crash 7"
    looping = [r for r in caplog.records if "CRASH LOOP" in r.getMessage()]
    assert len(looping) == 5 and all(r.exc_info for r in looping)  # from the 3rd crash in a row on


@pytest.mark.trio
async def test_progress_resets_the_backoff(autojump_clock: trio.testing.MockClock) -> None:
    """The fourth run reports progress before it crashes: the next restart waits 1 s again."""
    supervisor = Supervisor(restart_base_seconds=1.0, restart_max_seconds=60.0)
    actor = Crashing(pulse_on=frozenset({3}))
    await supervise_for(14.5, supervisor, "flaky", actor)
    assert gaps(actor.starts) == pytest.approx([1, 2, 4, 1, 2, 4], abs=1e-6)
    [status] = supervisor.snapshot()
    assert status.crashes == 7 and status.consecutive_crashes == 4


@pytest.mark.trio
async def test_an_actor_that_returns_is_restarted_like_one_that_crashed(autojump_clock: trio.testing.MockClock) -> None:
    supervisor = Supervisor(restart_base_seconds=0.5, restart_max_seconds=60.0)
    starts: list[float] = []

    async def returns(pulse: Pulse) -> None:
        starts.append(now())

    await supervise_for(3.75, supervisor, "quitter", returns)
    assert gaps(starts) == pytest.approx([0.5, 1.0, 2.0], abs=1e-6)
    assert supervisor.snapshot()[0].last_error == "returned (actors run until cancelled)"


@pytest.mark.trio
async def test_while_it_waits_the_status_says_when_it_restarts_and_cancel_ends_the_wait(
        autojump_clock: trio.testing.MockClock) -> None:
    supervisor = Supervisor(restart_base_seconds=30.0, restart_max_seconds=60.0)
    actor = Crashing()
    with trio.move_on_after(10):  # inside the first 30 s backoff
        await supervisor.supervise("slow-restart", actor)
    assert now() == pytest.approx(10.0)  # cancelled mid-wait: ends at once, no restart
    [status] = supervisor.snapshot()
    assert len(actor.starts) == 1 and status.restarts == 0 and not status.running
    assert status.next_restart_at is not None and status.last_crash_at is not None
    assert (status.next_restart_at - status.last_crash_at).total_seconds() == pytest.approx(30.0)


@pytest.mark.trio
async def test_a_long_lived_actor_is_left_alone(autojump_clock: trio.testing.MockClock) -> None:
    """An actor that runs (and pulses) for a virtual day is never restarted."""
    supervisor = Supervisor()
    beats: list[float] = []

    async def steady(pulse: Pulse) -> None:
        while True:
            await trio.sleep(3600)
            beats.append(now())
            pulse()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(supervisor.supervise, "steady", steady)
        await trio.sleep(24 * 3600 + 0.5)
        [status] = supervisor.snapshot()
        nursery.cancel_scope.cancel()
    assert status.running and status.crashes == 0 and status.restarts == 0
    assert gaps(beats) == pytest.approx([3600] * 23)


def test_retry_backoff_doubles_per_attempt_up_to_the_cap_with_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    """`WorkerOptions.backoff` (an attachment's retry delay, stored by the queue as ``next_attempt_at``):
    the base doubled per failed attempt, capped, times a jitter in [0.8, 1.0]."""
    options = WorkerOptions(retry_base_seconds=5.0, retry_max_seconds=300.0)
    for jitter in (0.8, 1.0):
        monkeypatch.setattr("knowledge.maintenance.worker.random.uniform", lambda low, high, j=jitter: j)
        assert [options.backoff(a) for a in range(1, 9)] == pytest.approx(
            [jitter * d for d in (5, 10, 20, 40, 80, 160, 300, 300)])
        assert options.backoff(0) == pytest.approx(jitter * 5)  # never below the base
    monkeypatch.undo()
    delays = [options.backoff(3) for _ in range(200)]
    assert all(16.0 <= d <= 20.0 for d in delays) and len(set(delays)) > 1  # spread, within bounds


# --- An attachment worker: the idle poll and its leases ---------------------------------------------------


class IdleQueue:
    """The queue as an idle worker sees it: nothing to claim; ``next_due`` says when something is."""

    def __init__(self, due: Callable[[], float | None] = lambda: None) -> None:
        self.claims: list[float] = []
        self.due = due

    async def claim(self, worker_id: str, lease_seconds: float, tenant_id: str | None = None, *,
                    max_attempts: int = 4, limit: int = 1) -> list[Claim]:
        self.claims.append(now())
        await trio.lowlevel.checkpoint()
        return []

    async def next_due(self, tenant_id: str | None = None) -> float | None:
        await trio.lowlevel.checkpoint()
        return self.due()


def idle_worker(queue: object, **options: Any) -> AttachmentWorker:
    ingestor: Any = None  # never reached: nothing is claimed
    return AttachmentWorker(cast(AttachmentQueue, queue), ingestor, WorkerOptions(**options), worker_id="w",
                            faults=Faults())


@pytest.mark.trio
async def test_an_idle_worker_polls_once_per_poll_interval(autojump_clock: trio.testing.MockClock) -> None:
    queue = IdleQueue()
    worker = idle_worker(queue, poll_seconds=2.0)
    pulses: list[float] = []
    with trio.move_on_after(20.5):
        await worker.run(lambda: pulses.append(now()))
    assert queue.claims[0] == pytest.approx(0.0, abs=0.01)
    assert gaps(queue.claims) == pytest.approx([2.0] * 10, abs=1e-6)
    assert len(pulses) == len(queue.claims)  # every successful look at the queue is progress


@pytest.mark.trio
async def test_an_idle_worker_wakes_when_the_next_retry_is_due_but_never_spins(
        autojump_clock: trio.testing.MockClock) -> None:
    """Due in 0.5 s: it looks again in 0.5 s, not at the poll interval; due now (another worker is
    claiming it): it waits the minimum, not zero."""
    dues = iter([0.5, 0.0, -3.0, None])
    queue = IdleQueue(lambda: next(dues, None))
    worker = idle_worker(queue, poll_seconds=2.0)
    with trio.move_on_after(4.6):
        await worker.run()
    assert gaps(queue.claims) == pytest.approx([0.5, _MIN_IDLE_SECONDS, _MIN_IDLE_SECONDS, 2.0, 2.0], abs=1e-6)


@pytest.mark.trio
async def test_the_doorbell_wakes_an_idle_worker_at_once(autojump_clock: trio.testing.MockClock) -> None:
    queue = IdleQueue()
    worker = idle_worker(queue, poll_seconds=60.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run)
        await trio.sleep(7.25)
        worker.doorbell.ring()  # attachments were marked in this process
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert gaps(queue.claims) == pytest.approx([7.25])


def a_claim(n: int) -> Claim:
    source = ArtifactRef(tenant_id="t-timing", artifact_id=uuid.uuid4(), origin=ArtifactOrigin.UPLOAD,
                         trust=TrustLevel.EXTERNAL_UNTRUSTED, sha256=hashlib.sha256(bytes([n])).hexdigest(),
                         size_bytes=1, media_type="text/markdown", file_name=f"{n}.md", created_at=datetime.now(UTC))
    return Claim(source=source, worker_id="w", attempt=1, principal_id="owner", document_id=uuid.uuid4(),
                 document_exists=False, conversation_id="c1", upload_seq=n, taken_over_from=None)


class LeaseQueue:
    """``renew`` as the database answers it: the leases still held, per renewal in ``held``
    (a callable of the claims asked for); an exception is a failed renewal."""

    def __init__(self, held: list[Callable[[list[Claim]], set[uuid.UUID]]]) -> None:
        self.renewals: list[tuple[float, int]] = []
        self.held = held

    async def renew(self, claims: list[Claim], lease_seconds: float) -> set[uuid.UUID]:
        self.renewals.append((now(), len(claims)))
        await trio.lowlevel.checkpoint()
        answer = self.held[min(len(self.renewals), len(self.held)) - 1]
        return answer(claims)


def all_held(claims: list[Claim]) -> set[uuid.UUID]:
    return {c.artifact_id for c in claims}


def none_held(claims: list[Claim]) -> set[uuid.UUID]:
    return set()


def unreachable(claims: list[Claim]) -> set[uuid.UUID]:
    raise ConnectionError("the database is away")


@pytest.mark.trio
async def test_leases_are_renewed_every_third_of_their_length_while_the_batch_runs(
        autojump_clock: trio.testing.MockClock) -> None:
    queue = LeaseQueue([all_held])
    worker = idle_worker(queue, lease_seconds=30.0)
    claims = [a_claim(1), a_claim(2)]

    async def attempt(batch: list[Claim], outcomes: dict[uuid.UUID, Outcome]) -> None:  # a 95 s ingest
        await trio.sleep(95)
        outcomes.update((c.artifact_id, Outcome("ingested")) for c in batch)

    worker._attempt = attempt  # type: ignore[method-assign]
    outcomes = await worker._attempt_holding_leases(claims)
    assert now() == pytest.approx(95.0)  # the attempt's end stops the renewals at once
    assert [t for t, _ in queue.renewals] == pytest.approx([10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0])
    assert {n for _, n in queue.renewals} == {2}
    assert set(outcomes) == {c.artifact_id for c in claims}


@pytest.mark.trio
async def test_a_batch_whose_leases_are_all_lost_is_cancelled_at_the_renewal_that_finds_it(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    """Renewal 1 fails (the database is away: retried next time), renewal 2 keeps one of the two
    leases (the other's attachment is still attempted), renewal 3 keeps none: the hung attempt is
    cancelled then, 30 s in, with no outcome."""
    first, second = a_claim(1), a_claim(2)
    queue = LeaseQueue([unreachable, lambda claims: {first.artifact_id}, none_held])
    worker = idle_worker(queue, lease_seconds=30.0)

    async def hangs(batch: list[Claim], outcomes: dict[uuid.UUID, Outcome]) -> None:
        await trio.sleep_forever()

    worker._attempt = hangs  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING, logger="knowledge.maintenance.worker")
    assert await worker._attempt_holding_leases([first, second]) == {}
    assert now() == pytest.approx(30.0)
    assert [t for t, _ in queue.renewals] == pytest.approx([10.0, 20.0, 30.0])
    assert [n for _, n in queue.renewals] == [2, 2, 1]  # renewing only what is still held
    assert any("could not renew its leases" in r.getMessage() for r in caplog.records)


# --- The sweeper (expired artifacts, then trace retention): once per interval ------------------------------


class Sweeps:
    """``sweep``/``prune_traces`` as a loop calls them: records when; ``fail_on``: the calls (1-based)
    that raise."""

    def __init__(self, result: Callable[[int], Any], fail_on: frozenset[int] = frozenset()) -> None:
        self.calls: list[float] = []
        self.result = result
        self.fail_on = fail_on

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(now())
        await trio.lowlevel.checkpoint()
        if len(self.calls) in self.fail_on:
            raise ConnectionError("the database is away")
        return self.result(len(self.calls))


def maintenance(sweep: Sweeps, interval: float, supervisor: Supervisor | None = None) -> MaintenanceWorker:
    db: Any = None  # the queue is built but never used (no attachment workers); prune_traces is faked
    artifacts: Any = types.SimpleNamespace(sweep=sweep)
    ingestor: Any = None
    return MaintenanceWorker(db, artifacts, ingestor, workers=0, sweep_interval_seconds=interval,
                             supervisor=supervisor)


@pytest.mark.trio
async def test_the_maintenance_sweeper_sweeps_and_prunes_once_per_interval(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = Sweeps(lambda n: n % 2)  # something expired every other time
    prune = Sweeps(lambda n: types.SimpleNamespace(reduced=n % 3, deleted=0))
    monkeypatch.setattr(worker_module, "prune_traces", prune)
    worker = maintenance(sweep, 300.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run)
        await trio.sleep(3000.5)  # 50 virtual minutes
        [status] = worker.snapshot().actors
        nursery.cancel_scope.cancel()
    assert sweep.calls[0] == pytest.approx(0.0, abs=0.01)
    assert gaps(sweep.calls) == pytest.approx([300.0] * 10, abs=1e-6)
    assert worker.swept == 6  # calls 1, 3, 5, 7, 9, 11
    assert gaps(prune.calls) == pytest.approx([300.0] * 10, abs=1e-6)  # the traces' retention, each time too
    assert status.name == "sweeper" and status.running and status.crashes == 0


@pytest.mark.trio
async def test_a_failing_maintenance_sweep_is_restarted_by_the_supervisor_after_its_backoff(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervised sweeper does not catch: a failed sweep crashes it, the supervisor restarts it
    1 s later, and its next success (a pulse) clears the crash count."""
    sweep = Sweeps(lambda n: 0, fail_on=frozenset({2, 3}))
    monkeypatch.setattr(worker_module, "prune_traces", Sweeps(lambda n: types.SimpleNamespace(reduced=0, deleted=0)))
    worker = maintenance(sweep, 300.0, Supervisor(restart_base_seconds=1.0))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run)
        await trio.sleep(700)
        [status] = worker.snapshot().actors
        nursery.cancel_scope.cancel()
    assert gaps(sweep.calls) == pytest.approx([300.0, 1.0, 2.0, 300.0], abs=1e-6)
    assert status.crashes == 2 and status.consecutive_crashes == 0 and status.running
