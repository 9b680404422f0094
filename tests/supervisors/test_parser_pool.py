"""The parser pool's supervision, with real child processes: slots, deadlines, kill and reap."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import anyio
import psutil
import pytest
from anyio.abc import Process

from knowledge.errors import ExtractionRefused, ParserFailure
from knowledge.supervisors.parser_pool import EXTRACTION_OWNER, JobRecord, ParserPool, loop_slots
from tests.helpers.progress import hang_detector

FAKE = (sys.executable, "-m", "tests.helpers.fake_child")


def fake_pool(**kwargs: object) -> ParserPool:
    return ParserPool(command=FAKE, **kwargs)  # type: ignore[arg-type]


def running(process: psutil.Process) -> bool:
    """Alive and not a zombie (False if it exited between a listing and this look)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def live_children(process: psutil.Process) -> int:
    return sum(running(child) for child in process.children())


def gone(pid: int | None) -> bool:
    """True when no process with ``pid`` exists: dead and reaped (a zombie still exists)."""
    assert pid is not None
    return not psutil.pid_exists(pid)


@pytest.mark.anyio
async def test_a_job_runs_in_a_child_and_leaves_nothing(anyio_backend_name: str) -> None:
    pool = fake_pool()
    assert await pool.extract(b"ok") == "done ok"
    assert await pool.inspect(b"ok") == {"pages": 1}
    assert pool.live == set() and all(gone(r.pid) for r in pool.history)


@pytest.mark.anyio
async def test_never_more_than_two_children_per_loop(anyio_backend_name: str) -> None:
    concurrent: list[int] = []
    pool = fake_pool()
    pool.on_spawn = lambda record: concurrent.append(len(pool.live))
    me = psutil.Process()
    os_counts: list[int] = []

    async def sample() -> None:
        while True:
            os_counts.append(live_children(me))
            await anyio.sleep(0.02)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        async with anyio.create_task_group() as jobs:
            for _ in range(5):
                jobs.start_soon(pool.extract, b"sleep 0.4")
        tg.cancel_scope.cancel()
    assert len(pool.history) == 5 and all(r.outcome == "ok" for r in pool.history)
    assert max(concurrent) <= 2 and max(os_counts) <= 2 and max(os_counts) == 2
    assert pool.live == set()


@pytest.mark.anyio
async def test_cancelling_a_job_kills_and_reaps_its_child_before_the_next_starts(anyio_backend_name: str) -> None:
    seen: list[tuple[int | None, bool]] = []  # at each spawn: (the cancelled job's pid, is it gone?)
    victim: list[JobRecord] = []
    pool = fake_pool()
    pool.on_spawn = lambda record: seen.append((victim[0].pid, gone(victim[0].pid)) if victim else (None, True))

    victim_scope = anyio.CancelScope()

    async def first() -> None:
        with victim_scope:
            await pool.extract(b"sleep 30")

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await anyio.sleep(0.3)
        victim.append(pool.history[0])
        tg.start_soon(pool.extract, b"sleep 30")  # takes the second slot
        await anyio.sleep(0.3)
        tg.start_soon(pool.extract, b"ok")  # queued behind both
        await anyio.sleep(0.3)
        assert len(pool.live) == 2 and victim[0].pid in pool.live
        victim_scope.cancel()
        await anyio.sleep(1.0)
        tg.cancel_scope.cancel()
    assert victim[0].outcome == "cancelled" and gone(victim[0].pid)
    # The queued job's child started only after the cancelled child was dead and reaped.
    third_spawn = seen[2]
    assert third_spawn == (victim[0].pid, True)
    assert pool.history[2].outcome == "ok"
    assert victim[0].reaped_at is not None and pool.history[2].spawned_at is not None
    assert victim[0].reaped_at <= pool.history[2].spawned_at
    assert pool.live == set()


async def wait_until(condition: Callable[[], bool]) -> None:
    """Poll until ``condition()`` holds; the hang detector only catches a hang."""
    with hang_detector():
        while not condition():  # noqa: ASYNC110 - polling the pool's state, not an event
            await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_the_deadline_counts_time_queued_for_a_slot(anyio_backend_name: str) -> None:
    """The spec: inspection's 10 s and extraction's 60 s include queue waiting. Two jobs hold both
    slots until they are cancelled; a job asked for behind them ends ``pdf_timeout`` when its
    deadline passes in the queue — saying so — and no child is ever started for it."""
    pool = fake_pool()
    spawned: list[JobRecord] = []
    pool.on_spawn = spawned.append
    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.extract, b"sleep 600")
        tg.start_soon(pool.extract, b"sleep 600")
        await wait_until(lambda: len(pool.live) == 2)
        with pytest.raises(ParserFailure) as queued:
            await pool.extract(b"ok", deadline=0.5)
        with pytest.raises(ParserFailure) as inspected:
            await pool.inspect(b"ok", deadline=0.5)
        tg.cancel_scope.cancel()
    for failed, record in ((queued, pool.history[2]), (inspected, pool.history[3])):
        assert failed.value.reason == "pdf_timeout" and "waited" in failed.value.message
        assert "for a parser slot" in failed.value.message
        assert record.stopped == "queue" and record.pid is None and record.spawned_at is None
        assert record.waited > 0
    assert len(spawned) == 2  # only the two holders ever had a child
    # A budget already spent (a document's, shared by its jobs) queues for nothing and starts nothing.
    with pytest.raises(ParserFailure) as spent:
        await pool.extract(b"ok", due=anyio.current_time() - 1.0)
    assert spent.value.reason == "pdf_timeout" and pool.history[-1].pid is None and len(spawned) == 2
    with pytest.raises(ParserFailure) as failed:  # the deadline still bounds the child's own run
        await pool.extract(b"sleep 600", deadline=1.0)
    assert failed.value.reason == "pdf_timeout" and "deadline" in failed.value.message
    assert pool.history[-1].stopped == "deadline"
    assert gone(pool.history[-1].pid) and pool.live == set()


def stalled_helpers() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] and
            "time.sleep(600)" in " ".join(p.info["cmdline"]) and running(p)]


@pytest.mark.anyio
async def test_a_stalled_child_is_killed_within_the_stall_limit_and_its_group_reaped(anyio_backend_name: str) -> None:
    pool = fake_pool(stall_seconds=1.0)
    with pytest.raises(ParserFailure) as failed:
        await pool.extract(b"stall 600", deadline=600.0)
    assert failed.value.reason == "pdf_timeout" and not failed.value.transient
    assert "stalled" in failed.value.message
    record = pool.history[0]
    assert record.stalled and record.outcome == "pdf_timeout" and record.pages == 1 and record.progress == 1
    assert record.stopped == "stall"  # the stall limit ended it, not its 600 s deadline
    assert gone(record.pid) and not stalled_helpers() and pool.live == set()


@pytest.mark.anyio
async def test_a_child_that_keeps_reporting_progress_is_not_killed_as_stalled(anyio_backend_name: str) -> None:
    pool = fake_pool(stall_seconds=1.0)
    # 3 s of work, a page every 0.4 s: three times the stall limit, never a 1 s gap.
    assert await pool.extract(b"progress 8 0.4", deadline=20.0) == "done progress"
    record = pool.history[0]
    assert record.outcome == "ok" and record.progress == 8 and not record.stalled
    with pytest.raises(ParserFailure) as failed:  # progress does not extend the deadline itself
        await pool.extract(b"progress 20 0.3", deadline=2.0)
    assert failed.value.reason == "pdf_timeout" and "deadline" in failed.value.message
    assert not pool.history[-1].stalled and pool.live == set()


@pytest.mark.anyio
async def test_inspection_is_not_watched_for_progress(anyio_backend_name: str) -> None:
    pool = fake_pool(stall_seconds=0.5)
    assert await pool.inspect(b"sleep 1.2") == {"pages": 1}  # no progress lines, longer than the stall limit


@pytest.mark.anyio
async def test_stalled_children_give_their_slots_back_and_the_cap_holds(anyio_backend_name: str) -> None:
    """Four stalling children and six honest ones at once: the honest ones all finish, at most two
    children ever exist, and each stalled one held its slot until the stall limit, not its deadline."""
    pool = fake_pool(stall_seconds=1.0)
    me = psutil.Process()
    os_counts: list[int] = []
    results: list[str] = []
    pool.on_spawn = lambda record: os_counts.append(len(pool.live))

    async def sample() -> None:
        while True:
            os_counts.append(live_children(me))
            await anyio.sleep(0.02)

    async def one(payload: bytes) -> None:
        try:
            results.append(await pool.extract(payload, deadline=600.0))
        except ParserFailure as failure:
            results.append(failure.reason)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        async with anyio.create_task_group() as jobs:
            for _ in range(4):
                jobs.start_soon(one, b"stall 600")
            for _ in range(6):
                jobs.start_soon(one, b"progress 3 0.1")
        tg.cancel_scope.cancel()
    assert sorted(results) == ["done progress"] * 6 + ["pdf_timeout"] * 4
    assert max(os_counts) <= 2
    # Each stalled one gave its slot back at the stall limit, not at its 600 s deadline.
    assert sorted(str(r.stopped) for r in pool.history) == ["None"] * 6 + ["stall"] * 4
    assert pool.live == set() and not stalled_helpers()


@pytest.mark.anyio
async def test_timeout_kills_the_child_and_its_group(anyio_backend_name: str) -> None:
    pool = fake_pool()
    with pytest.raises(ParserFailure) as failed:
        await pool.extract(b"grandchild 30", deadline=1.0)
    assert failed.value.reason == "pdf_timeout" and not failed.value.transient
    record = pool.history[0]
    assert gone(record.pid)
    assert not [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] and
                "time.sleep(600)" in " ".join(p.info["cmdline"]) and running(p)]


@pytest.mark.anyio
async def test_a_child_that_dies_is_pdf_killed(anyio_backend_name: str) -> None:
    pool = fake_pool()
    with pytest.raises(ParserFailure) as failed:
        await pool.extract(b"crash")
    assert failed.value.reason == "pdf_killed" and "signal 9" in failed.value.message
    with pytest.raises(ParserFailure) as limited:
        await pool.extract(b"spin", deadline=1.5)  # its 2 s CPU limit or the 1.5 s deadline, whichever first
    assert limited.value.reason in {"pdf_killed", "pdf_timeout"}
    assert pool.live == set()


@pytest.mark.anyio
async def test_oversized_input_is_refused_without_a_child(anyio_backend_name: str) -> None:
    pool = fake_pool()
    with pytest.raises(ExtractionRefused) as refused:
        await pool.extract(b"x" * (32 * 1024 * 1024 + 1))
    assert refused.value.reason == "pdf_too_large" and pool.history == []


def test_two_event_loops_in_two_threads_get_two_slots_each() -> None:
    lock = threading.Lock()
    running = {"now": 0, "max": 0}
    per_loop_max: list[int] = []

    def loop_main() -> None:
        pool = fake_pool()
        peak = [0]

        def spawned(record: JobRecord) -> None:
            peak[0] = max(peak[0], len(pool.live))
            with lock:
                running["now"] += 1
                running["max"] = max(running["max"], running["now"])

        pool.on_spawn = spawned

        async def jobs() -> None:
            async def one() -> None:
                await pool.extract(b"sleep 0.8")
                with lock:
                    running["now"] -= 1

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(one)

        anyio.run(jobs, backend="trio")
        per_loop_max.append(peak[0])

    threads = [threading.Thread(target=loop_main) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert per_loop_max == [2, 2]
    assert running["max"] == 4  # two loops, two slots each, at the same time


@pytest.mark.anyio
async def test_spares_serve_jobs_within_the_cap_and_die_with_their_keeper(anyio_backend_name: str) -> None:
    pool = fake_pool()
    me = psutil.Process()
    counts: list[int] = []

    def alive() -> int:
        return live_children(me)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.keep_spares)
        await anyio.sleep(0.3)
        assert alive() == 0  # no spare before this loop parses anything
        assert await pool.extract(b"ok") == "done ok"
        with hang_detector():
            while alive() < 2:  # noqa: ASYNC110 - polling the OS, not an event
                await anyio.sleep(0.05)
        spare_pids = {c.pid for c in me.children()}
        async with anyio.create_task_group() as jobs:
            for _ in range(5):
                jobs.start_soon(pool.extract, b"sleep 0.3")
            for _ in range(20):
                counts.append(alive())
                await anyio.sleep(0.05)
        assert spare_pids & {r.pid for r in pool.history}  # jobs ran in the spares
        tg.cancel_scope.cancel()
    assert max(counts) <= 2
    await anyio.sleep(0.1)
    assert alive() == 0 and pool.live == set()


@pytest.mark.anyio
async def test_a_spare_starting_when_its_keeper_is_cancelled_is_killed_and_reaped(anyio_backend_name: str) -> None:
    """The service closes while a spare is starting: the spare is killed and reaped with its pipes
    closed (not left running, then a zombie, and a ResourceWarning), and its slot given back."""
    pool = fake_pool()
    spawn = pool._spawn
    started: list[int] = []
    async with anyio.create_task_group() as tg:

        async def spawn_then_close(*extra: str) -> Process:
            process = await spawn(*extra)
            started.append(process.pid)
            tg.cancel_scope.cancel()  # delivered at the keeper's next checkpoint
            return process

        pool._spawn = spawn_then_close  # type: ignore[method-assign]
        loop_slots().used.set()
        tg.start_soon(pool.keep_spares)
    assert started and all(gone(pid) for pid in started)
    slots = loop_slots()
    assert slots.free == slots.size and not slots.spares


@pytest.mark.anyio
async def test_waiting_jobs_are_served_in_turn_by_tenant(anyio_backend_name: str) -> None:
    """One tenant queues six PDFs, another one a moment later: the second tenant's job takes the
    next slot that frees, not the seventh (`EXTRACTION_OWNER`, set by the ingestor per extraction)."""
    pool = fake_pool()
    slots = loop_slots()
    taken: list[str | None] = []  # owners in the order they got a slot
    take = slots.take

    async def recording(owner: str | None = None) -> Process | None:
        got = await take(owner)
        taken.append(owner)
        return got

    slots.take = recording  # type: ignore[method-assign]

    async def job(owner: str) -> None:
        EXTRACTION_OWNER.set(owner)  # (this task's own context)
        await pool.extract(b"sleep 0.5")

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(job, "big-tenant")
        await anyio.sleep(0.2)
        tg.start_soon(job, "small-tenant")
    assert taken == ["big-tenant"] * 2 + ["small-tenant"] + ["big-tenant"] * 4, taken
    assert all(r.outcome == "ok" for r in pool.history) and pool.live == set()
