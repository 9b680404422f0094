"""The PDF parser pool: disposable, rlimit-bounded child processes, at most two per event loop.

Each job runs ``python -m knowledge.parsers.child`` in its own session (process group), hands it the PDF
on stdin (at most 32 MiB) and reads one JSON result from stdout (at most 32 MiB). The child sets
its own CPU, address-space (Linux), core and file-size limits before it reads a byte.

- **Two slots per event loop**, shared by every pool on that loop (an anyio ``RunVar``): two
  loops in one process get two each. A slot is free, runs a job, or holds a *spare*: a child
  already started with its libraries imported (``keep_spares``, run by the service), so a job
  need not wait for an interpreter's start-up; a spare still serves exactly one job.
- **Deadlines include queue waiting** (the spec): inspection has 10 s and extraction 60 s from the
  moment the job is *asked for*. A job whose deadline passes while it still waits for a slot is
  refused ``pdf_timeout`` ("waited N s for a parser slot") without a child ever starting. A caller
  may give several jobs one budget (``due``): a PDF's inspection and its page ranges share the
  document's 60 s (`knowledge.parsers.pdf`). The child's CPU limit is the time left plus one second.
- **No file holds a slot for long.** The extracting child reports progress on stdout (``~pages N``,
  ``~document``, ``~page`` per page; `knowledge.parsers.child`); the pool looks at each running
  extraction every `CHECK_SECONDS` and stops it as ``pdf_timeout`` (with a message saying why) when:

  - it *stalled*: no progress line for `STALL_SECONDS` (a page that never ends, a document that is
    never read);
  - its *projection* passes its budget: once it has done `GRACE_PAGES` pages (or used
    `GRACE_PROJECTION_CPU_SECONDS` of CPU on them), the pages left at the rate observed so far need
    more than `CPU_PROJECTION_MARGIN` times the time left, in CPU seconds of the child — which uses
    one core at most, so it cannot finish in time. It gives its slot back then, not at its deadline;
  - it is *too slow while others wait*: while any job waits for a slot of the loop, one whose pages
    come slower than `FLOOR_PAGES_PER_CPU_SECOND` per CPU second, once they have used
    `GRACE_FLOOR_CPU_SECONDS`, is stopped.

  Rates count the page in progress as done (never too harsh) and are in CPU seconds of the child
  (``psutil``; wall seconds where they cannot be read): a busy host slows an honest file and a
  hostile one alike, but moves neither across the floor, and a projection in wall seconds would
  follow the host's load (its error on honest files reached 5x while the load swung).

  Inspection reports no progress (it reads no content stream) and is bounded by its deadline alone.
- **In turn by tenant.** Jobs waiting for a slot are served in turn by owner — the tenant the
  ingestor sets in `EXTRACTION_OWNER` around each extraction: the next slot goes to the
  waiting job whose owner was served least recently (`LoopSlots`), first come, first served within
  an owner and for jobs with none.
- **Kill and reap before release.** On timeout, cancellation or any error the child's whole process
  group gets SIGKILL and the child is waited for (no zombie) inside the slot, so the next job's
  child never starts while a dead one still exists. Waiting is shielded and bounded.
- Nothing runs in a thread executor, and the event loop never blocks on a child.

Failures: the child's own refusals (``pdf_encrypted``, ``pdf_unreadable``, ``pdf_too_large``,
``no_text``) are `ExtractionRefused`; a deadline, a stall, a projection or the floor is ``pdf_timeout``
and a child that died, was killed by a limit or could not start is ``pdf_killed`` — both
`ParserFailure` (``html_timeout``/``html_killed``, ``docx_timeout``/``docx_killed`` for HTML and
DOCX jobs). A timeout is the file's answer (the attachment worker does not retry it); a killed
child may be the host's memory pressure, which a retry may not meet again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import anyio
import psutil
from anyio.abc import Process
from anyio.lowlevel import RunVar

from knowledge.errors import ExtractionRefused, ParserFailure
from knowledge.models import Extracted

#: Who an extraction is for — the tenant, set by the ingestor around each extraction: the PDF parser
#: pool serves the jobs waiting for its slots in turn by owner (`knowledge.supervisors.parser_pool.LoopSlots`).
#: A context variable, so the Extractor port keeps its signature; tasks an extractor starts inherit it.
EXTRACTION_OWNER: ContextVar[str | None] = ContextVar("knowledge_extraction_owner", default=None)
MAX_IO_BYTES = 32 * 1024 * 1024
SLOTS_PER_LOOP = 2
#: The spec's deadlines, each counted from the moment the job is asked for (its queue included).
INSPECT_SECONDS = 10.0
EXTRACT_SECONDS = 60.0
#: An extracting child that reports no progress (a page done, the document read) for this long is
#: killed. Measured over the corpus through the real child: the longest gap between two progress
#: lines is 0.7 s for an honest file (a page of pdfjs__tracemonkey.pdf) and 6.5 s for the slow bomb
#: (pdfminer reading the broken xref of pdfjs__bug1978317.pdf, which still ends as before), unloaded.
STALL_SECONDS = 10.0
#: How often a running extraction is looked at (stall, projection, floor).
CHECK_SECONDS = 0.2
#: The measurements behind the rules below, over the corpus's honest files through the real child
#: on a 2-core machine loaded by other work (load 3-5), then with more processes spinning besides
#: (load 6-8): a page costs at most 0.52 CPU seconds (one of pdfjs__tracemonkey.pdf); the slowest file
#: does 9.5-10.6 pages per CPU second (pdfjs__tracemonkey.pdf; 25-35 the others) while its wall rate
#: fell from 10 pages/s to 2 with the load; a projection from the rate seen so far overshot by at
#: most 2.24x in CPU seconds (the 412-page manual's first pages are its costliest), and by up to 5.3x
#: in wall seconds.
#:
#: A projection is made once this many pages are done, or this much CPU is spent on them: a costly
#: first page (a cover) does not make a document look hopeless.
GRACE_PAGES = 8
GRACE_PROJECTION_CPU_SECONDS = 4.0
#: A document is stopped when its pages left need more CPU seconds than this times the time left.
CPU_PROJECTION_MARGIN = 2.5
#: While jobs wait for a slot, an extraction doing fewer pages than this per CPU second (after
#: `GRACE_FLOOR_CPU_SECONDS` of them) is stopped: 3.8x below the slowest honest file (9.5 pages per
#: CPU second); a page costing a CPU second (a hostile file of tiny text operations or nested forms)
#: is 2.5x below it. The grace lets a single page of up to ~1.4 CPU seconds through (2.7x the
#: costliest honest page) before the floor can hold, and is what a hostile file costs the others.
FLOOR_PAGES_PER_CPU_SECOND = 2.5
GRACE_FLOOR_CPU_SECONDS = 1.5
#: One progress line on the child's stdout (``~`` … ``\n``); a longer one is not a progress line.
MAX_PROGRESS_BYTES = 64
ADDRESS_SPACE_BYTES = 512 * 1024 * 1024
CHILD_COMMAND = (sys.executable, "-m", "knowledge.parsers.child")
_REAP_SECONDS = 10.0
_STDERR_KEEP = 16 * 1024

_SLOTS: RunVar[LoopSlots] = RunVar("knowledge_parser_slots")


class LoopSlots:
    """One event loop's parser slots. A slot is free, holds a spare child (started, its libraries
    imported, waiting for a job), or runs a job; so at most ``size`` children exist on the loop.

    Waiting jobs are served in turn by owner (the tenant an extraction is for): the next slot goes
    to the waiting job whose owner was served least recently, in arrival order within an owner —
    a tenant that queued a hundred PDFs delays another tenant's one by one job, not a hundred."""

    def __init__(self, size: int = SLOTS_PER_LOOP) -> None:
        self.size = size
        self.free = size
        self.spares: list[Process] = []
        self.spare_commands: dict[int, tuple[str, ...]] = {}  # a spare's pid -> the command that started it
        self.changed = anyio.Condition()
        self.used = anyio.Event()  # spares are kept only once this loop has parsed something
        self.waiting: dict[int, str | None] = {}  # ticket (arrival order) -> owner
        self.served: dict[str | None, int] = {}  # owner -> the turn it last got a slot
        self._tickets = itertools.count()
        self._turns = itertools.count(1)

    def _next(self) -> int:
        """The waiting ticket the next slot goes to."""
        return min(self.waiting, key=lambda t: (self.served.get(self.waiting[t], 0), t))

    async def take(self, owner: str | None = None) -> Process | None:
        """Wait for a slot, in turn by owner (see the class docstring); return its spare child, or
        None when the slot is free (spawn into it). Cancellation while waiting takes nothing."""
        async with self.changed:
            ticket = next(self._tickets)
            self.waiting[ticket] = owner
            try:
                while not ((self.spares or self.free) and self._next() == ticket):
                    await self.changed.wait()
            finally:
                del self.waiting[ticket]
                self.changed.notify_all()  # the next in turn may take another slot, or its turn moved
            self.served[owner] = next(self._turns)
            if self.spares:
                return self.spares.pop(0)
            self.free -= 1
            return None

    async def give_back(self) -> None:
        async with self.changed:
            self.free += 1
            self.changed.notify_all()


def loop_slots() -> LoopSlots:
    """This event loop's parser slots (created on first use, two by default)."""
    try:
        return _SLOTS.get()
    except LookupError:
        slots = LoopSlots()
        _SLOTS.set(slots)
        return slots


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _group_gone(pgid: int, bound: float = 2.0) -> None:
    """Wait (bounded) until no process of the group remains: SIGKILL is delivered asynchronously.
    A member that its new parent has not reaped yet still counts, hence the bound."""
    with anyio.move_on_after(bound):
        while True:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            await anyio.sleep(0.01)


class _CpuClock:
    """A child's CPU seconds (user and system) as the kernel counts them (``/proc`` on Linux: no
    blocking I/O), or None where they cannot be read; the pool then judges rates in wall seconds."""

    def __init__(self, pid: int) -> None:
        try:
            self._process: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self._process = None

    def __call__(self) -> float | None:
        if self._process is None:
            return None
        try:
            used = self._process.cpu_times()
        except psutil.Error:
            return None
        return float(used.user + used.system)


def verdict(record: JobRecord, now: float, cpu: float | None, waiting: int) -> str | None:
    """Why the pool stops a running extraction now (its projection or the floor; see the module
    docstring), or None. ``now`` is ``anyio.current_time()``, ``cpu`` the child's CPU seconds (None:
    unknown, its rates are judged in wall seconds), ``waiting`` the jobs waiting for a slot of the
    loop. Sets ``record.stopped`` to ``"projection"`` or ``"floor"`` and returns the message."""
    pages, started = record.pages, record.document_at
    if pages is None or started is None or record.pages_done >= pages:
        return None
    done, left_pages, left = record.pages_done, pages - record.pages_done, record.due - now
    used = cpu - record.document_cpu if cpu is not None and record.document_cpu is not None else now - started
    rate = (done + 1) / max(used, 1e-3)  # pages per CPU second, the page in progress counted as done
    judged = done >= GRACE_PAGES or used >= GRACE_PROJECTION_CPU_SECONDS
    if judged and left_pages / rate > CPU_PROJECTION_MARGIN * left:
        record.stopped = "projection"
        return (f"{record.op} stopped early: at {rate:.1f} pages per CPU second its {pages} pages need "
                f"~{now - record.asked + left_pages / rate:.0f} s, past its {record.deadline:.0f} s budget "
                f"({done} done, {max(left, 0):.0f} s left)")
    if waiting and used >= GRACE_FLOOR_CPU_SECONDS and rate < FLOOR_PAGES_PER_CPU_SECOND:
        record.stopped = "floor"
        return (f"{record.op} too slow while {waiting} {'job waits' if waiting == 1 else 'jobs wait'} for a slot: "
                f"{rate:.2f} pages per CPU second ({done} of {pages} pages), below the floor of "
                f"{FLOOR_PAGES_PER_CPU_SECOND}")
    return None


async def _watch(record: JobRecord, stall: float | None, cpu: Callable[[], float | None],
                 scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` (the child's conversation) once the extraction stalls, its projection passes
    its budget or it is too slow while others wait (`verdict`); the caller then kills and reaps the
    child as for any other end."""
    slots = loop_slots()
    while True:
        now = anyio.current_time()
        if stall is not None and now - record.last_progress >= stall:
            record.stopped, record.stalled = "stall", True
            record.why = (f"{record.op} stalled: no progress from the parser child within {stall:.0f} s "
                          f"(after {record.progress} progress lines)")
            scope.cancel()
            return
        why = verdict(record, now, cpu(), len(slots.waiting))
        if why is not None:
            record.why = why
            scope.cancel()
            return
        pause = CHECK_SECONDS if stall is None else min(CHECK_SECONDS, record.last_progress + stall - now)
        await anyio.sleep(max(pause, 0.0))


class _Output:
    """The child's stdout as it arrives: progress lines (``~event``), each noted on the job's record
    as it completes, then the result, kept up to one byte past `MAX_IO_BYTES` (so that an oversized
    result is seen). A ``~`` line longer than `MAX_PROGRESS_BYTES` is no progress line: it and all
    after it are taken as the result (which then fails to parse: ``pdf_killed``)."""

    def __init__(self, record: JobRecord, cpu: Callable[[], float | None] = lambda: None) -> None:
        self.record = record
        self.cpu = cpu
        self.line = bytearray()  # a progress line not yet complete
        self.kept = bytearray()
        self.in_result = False

    def feed(self, chunk: bytes) -> None:
        while chunk and not self.in_result:
            if not self.line and not chunk.startswith(b"~"):
                self.in_result = True
                break
            end = chunk.find(b"\n")
            self.line += chunk if end < 0 else chunk[:end]
            chunk = b"" if end < 0 else chunk[end + 1:]
            if len(self.line) >= MAX_PROGRESS_BYTES:
                chunk, self.in_result = bytes(self.line) + chunk, True
            elif end >= 0:
                self._note(bytes(self.line[1:]))
            if end >= 0 or self.in_result:
                self.line.clear()
        if chunk:
            self.kept.extend(chunk[: MAX_IO_BYTES + 1 - len(self.kept)])

    def _note(self, event: bytes) -> None:
        record = self.record
        record.progress += 1
        record.last_progress = anyio.current_time()
        words = event.split()
        if event == b"page":
            record.pages_done += 1
        elif event == b"document":
            record.document_at, record.document_cpu = record.last_progress, self.cpu()
        elif len(words) == 2 and words[0] == b"pages" and words[1].isdigit():
            # (again after a repair: the pages start over)
            record.pages, record.pages_done, record.document_at = int(words[1]), 0, None

    def result(self) -> bytes:
        """What followed the progress lines (an incomplete progress line counts as the result)."""
        return bytes(self.kept or self.line)


@dataclass
class JobRecord:
    """What the pool observed of one job (kept for tests, stress runs and the audit). Times in
    ``anyio.current_time()`` but for ``spawned_at`` and ``reaped_at`` (``time.monotonic()``)."""

    op: str
    deadline: float  # the job's budget in seconds (a document's, for its jobs), the queue included
    format: str = "pdf"  # pdf | html | docx
    due: float = 0.0  # when the budget ends
    asked: float = 0.0  # when the job was asked for
    waited: float = 0.0  # seconds spent queued for a slot (counted by the deadline)
    pid: int | None = None  # None: no child ever started for it
    progress: int = 0  # progress lines the child wrote
    pages: int | None = None  # the pages it said it would extract (``~pages N``)
    pages_done: int = 0  # ``~page`` lines since
    document_at: float | None = None  # when it said ``~document`` (its pages start)
    document_cpu: float | None = None  # the child's CPU seconds then
    last_progress: float = 0.0  # its start or its last progress line
    stalled: bool = False  # killed by the stall limit
    stopped: str | None = None  # why the pool ended it: queue | deadline | stall | projection | floor
    why: str = ""  # the message of that
    outcome: str = "pending"  # ok | <refusal reason> | pdf_timeout | pdf_killed | cancelled
    returncode: int | None = None
    reaped_at: float | None = None
    spawned_at: float | None = None


@dataclass
class ParserPool:
    """Runs parser jobs in child processes; see the module docstring."""

    command: tuple[str, ...] = CHILD_COMMAND
    address_space_bytes: int | None = ADDRESS_SPACE_BYTES
    stall_seconds: float | None = STALL_SECONDS  # None: no stall limit (the projection and floor still hold)
    on_spawn: Callable[[JobRecord], None] | None = None
    live: set[int] = field(default_factory=set)  # pids of children not yet reaped
    history: list[JobRecord] = field(default_factory=list)
    keep_history: int = 1000

    def spares(self) -> int:
        """Warm spare children this event loop's slots hold (shared by every pool on the loop)."""
        return len(loop_slots().spares)

    def waiting(self) -> int:
        """Jobs waiting for a slot of this event loop (of every pool on the loop)."""
        return len(loop_slots().waiting)

    async def inspect(self, data: bytes, deadline: float = INSPECT_SECONDS, *, due: float | None = None,
                      limit: float | None = None) -> dict[str, Any]:
        """Upload inspection: page count, encryption, outline. Raises `ExtractionRefused`
        (``pdf_encrypted``/``pdf_unreadable``/``pdf_too_large``) or `ParserFailure`.
        ``deadline``, ``due`` and ``limit``: as for `run`.

        Cancellation: the child is killed and reaped before the cancellation propagates."""
        result = await self.run("inspect", data, deadline, due=due, limit=limit)
        inspection: dict[str, Any] = result["inspection"]
        return inspection

    async def extract(self, data: bytes, deadline: float = EXTRACT_SECONDS,
                      pages: tuple[int, int] | None = None, fmt: str = "pdf", *, due: float | None = None
                      ) -> Extracted:
        """The PDF's text (or that of the 0-based, end-exclusive page range ``pages``), with Markdown
        headings from its outline or font sizes, and the date the PDF states of itself (`Extracted`;
        read with the first range). Raises `ExtractionRefused` (``no_text`` among them)
        or `ParserFailure`. ``deadline`` and ``due``: as for `run`.

        Cancellation: the child is killed and reaped before the cancellation propagates."""
        result = await self.run("extract", data, deadline, pages, fmt, due=due)
        stated, title = result.get("date"), result.get("title")
        return Extracted(result["text"], date.fromisoformat(stated) if isinstance(stated, str) else None,
                         title if isinstance(title, str) and title.strip() else None)

    async def run(self, op: str, data: bytes, deadline: float, pages: tuple[int, int] | None = None,
                  fmt: str = "pdf", *, due: float | None = None, limit: float | None = None) -> dict[str, Any]:
        """One job: queue for a slot, then spawn, feed, read, reap — all within ``deadline`` seconds
        of this call, the queue included, or by ``due`` (an ``anyio.current_time()``: a budget several
        jobs share, ``deadline`` its length); and, with ``limit``, within that many seconds of getting
        its slot. A job still queued at its end is refused without a child; an extraction that
        stalls, cannot finish in time or is too slow while others wait ends sooner (see the module
        docstring)."""
        if len(data) > MAX_IO_BYTES:
            raise ExtractionRefused(f"{fmt}_too_large",
                                    f"{len(data)} bytes is above the {MAX_IO_BYTES}-byte input bound")
        asked = anyio.current_time()
        record = JobRecord(op, deadline, fmt, due=asked + deadline if due is None else due, asked=asked)
        self.history.append(record)
        del self.history[: -self.keep_history]
        slots = loop_slots()
        slots.used.set()
        spare, taken = None, False
        if asked < record.due:  # (a budget already spent queues for nothing)
            try:
                with anyio.CancelScope(deadline=record.due):
                    spare = await slots.take(EXTRACTION_OWNER.get())
                    taken = True  # (no checkpoint between the slot taken and this)
            except BaseException:
                record.outcome = "cancelled"  # the caller's cancellation, while queued
                raise
        record.waited = anyio.current_time() - asked
        capped = limit is not None and asked + record.waited + limit < record.due
        if capped:
            assert limit is not None
            record.due = asked + record.waited + limit  # (the job's own run, from its slot)
        if not taken:
            record.outcome, record.stopped = f"{fmt}_timeout", "queue"
            record.why = (f"{op} waited {record.waited:.0f} s for a parser slot: its {deadline:.0f} s deadline "
                          f"(the queue included) passed before it could start")
            raise ParserFailure(record.outcome, record.why)
        try:
            with anyio.CancelScope(deadline=record.due) as scope:
                return await self._run_child(record, data, pages, spare)
        finally:
            with anyio.CancelScope(shield=True):
                await slots.give_back()  # only now: the child is dead and reaped
        record.outcome, record.stopped = f"{fmt}_timeout", "deadline"
        record.why = (f"{op} ran past its {limit:.0f} s limit" if capped and limit is not None else
                      f"{op} passed its {deadline:.0f} s deadline ({record.waited:.0f} s of it queued for a slot)")
        if scope.cancelled_caught:
            raise ParserFailure(record.outcome, record.why)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_child(self, record: JobRecord, data: bytes, pages: tuple[int, int] | None,
                         spare: Process | None = None) -> dict[str, Any]:
        remaining = record.due - anyio.current_time()
        header = json.dumps({"op": record.op, "format": record.format,
                             "cpu_seconds": max(1, math.ceil(remaining)) + 1,
                             "address_space_bytes": self.address_space_bytes,
                             "pages": list(pages) if pages else None}).encode() + b"\n"
        if spare is not None:
            command = loop_slots().spare_commands.pop(spare.pid, self.command)
            if spare.returncode is not None or command != self.command:
                # A spare that died idle, or another pool's kind of child (a test's stand-in beside the
                # service's): reap it and spawn this pool's own into the slot.
                await self._kill_and_reap(spare, JobRecord("spare", 0.0))
                spare = None
        try:
            with anyio.CancelScope(shield=True):  # a child started is always reaped below, never left mid-spawn
                process = spare or await self._spawn()
        except OSError as exc:  # no process to be had (EAGAIN, ENOMEM, EMFILE): this job's failure
            record.outcome = f"{record.format}_killed"
            raise ParserFailure(record.outcome, f"the parser child could not start: {exc}") from exc
        record.pid = process.pid
        record.spawned_at = time.monotonic()
        self.live.add(process.pid)
        record.last_progress = anyio.current_time()
        if self.on_spawn is not None:
            self.on_spawn(record)
        try:
            out, err = await self._converse(process, header + data, record)
            returncode = await process.wait()
        except BaseException:
            if record.outcome == "pending":
                record.outcome = "cancelled"
            raise
        finally:
            await self._kill_and_reap(process, record)
        return self._result(record, returncode, out, err)

    async def _spawn(self, *extra: str) -> Process:
        return await anyio.open_process([*self.command, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True)

    async def keep_spares(self) -> None:
        """Until cancelled (run it in the service's task group): fill every free slot of this loop with a
        spare child whose libraries are already imported, so a job does not wait for a child's start-up.
        A spare serves one job and exits like any child; slots stay the only bound on children.

        Cancellation: every spare not taken by a job is killed and reaped, and its slot freed."""
        slots = loop_slots()
        mine: list[Process] = []
        await slots.used.wait()  # a service that never parses a PDF never starts a spare
        try:
            while True:
                async with slots.changed:
                    while not slots.free or len(slots.spares) >= slots.size:
                        await slots.changed.wait()
                    slots.free -= 1
                try:
                    spare = await self._spawn("--warm")
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await slots.give_back()
                    raise
                mine.append(spare)
                slots.spares.append(spare)  # before the next checkpoint: a cancellation there kills it below
                slots.spare_commands[spare.pid] = self.command
                async with slots.changed:
                    slots.changed.notify_all()
                mine = [p for p in mine if p in slots.spares]
        finally:
            with anyio.CancelScope(shield=True):
                for spare in [p for p in mine if p in slots.spares]:
                    slots.spares.remove(spare)
                    slots.spare_commands.pop(spare.pid, None)
                    await self._kill_and_reap(spare, JobRecord("spare", 0.0))
                    await slots.give_back()

    async def _converse(self, process: Process, payload: bytes, record: JobRecord) -> tuple[bytes, bytes]:
        """Feed the child and read it to EOF; an extraction is watched meanwhile (`_watch`)."""
        cpu = _CpuClock(process.pid)
        async with anyio.create_task_group() as tg:
            if record.op == "extract":
                tg.start_soon(_watch, record, self.stall_seconds, cpu, tg.cancel_scope)
            out, err = await self._exchange(process, payload, record, cpu)
            tg.cancel_scope.cancel()
        if record.stopped is not None:
            record.outcome = f"{record.format}_timeout"
            raise ParserFailure(record.outcome, record.why)
        return out, err

    async def _exchange(self, process: Process, payload: bytes, record: JobRecord,
                        cpu: Callable[[], float | None]) -> tuple[bytes, bytes]:
        output = _Output(record, cpu)
        err = bytearray()

        async def feed() -> None:
            assert process.stdin is not None
            try:
                await process.stdin.send(payload)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass  # the child stopped reading (a refusal, or it died): its result says which
            finally:
                await process.stdin.aclose()

        async def drain(stream: Any, into: bytearray, bound: int) -> None:
            async for chunk in stream:
                if len(into) <= bound:
                    into.extend(chunk[: bound + 1 - len(into)])

        async def read_out() -> None:
            assert process.stdout is not None
            async for chunk in process.stdout:
                output.feed(chunk)

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            tg.start_soon(read_out)
            tg.start_soon(drain, process.stderr, err, _STDERR_KEEP)
        return output.result(), bytes(err)

    async def _kill_and_reap(self, process: Process, record: JobRecord) -> None:
        """SIGKILL the child's process group if anything of it may remain, then wait for the child,
        shielded: the slot is released only after this returns."""
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                _kill_group(process.pid)
            with anyio.move_on_after(_REAP_SECONDS):
                record.returncode = await process.wait()
            _kill_group(process.pid)  # helpers the child may have started in its group outlive nothing
            await _group_gone(process.pid)
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    await stream.aclose()
            record.reaped_at = time.monotonic()
            self.live.discard(process.pid)

    def _result(self, record: JobRecord, returncode: int, out: bytes, err: bytes) -> dict[str, Any]:
        if returncode != 0 or not out:
            record.outcome = f"{record.format}_killed"
            why = f"signal {-returncode}" if returncode < 0 else f"exit {returncode}"
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise ParserFailure(record.outcome, f"the parser child died ({why}) {tail[0][:200]}".strip())
        if len(out) > MAX_IO_BYTES:
            record.outcome = f"{record.format}_too_large"
            raise ExtractionRefused(record.outcome, "the parser's output is above the 32 MiB bound")
        try:
            result: dict[str, Any] = json.loads(out)
        except ValueError:
            record.outcome = f"{record.format}_killed"
            raise ParserFailure(record.outcome, "the parser child wrote no valid result") from None
        if not result.get("ok"):
            record.outcome = str(result.get("reason", f"{record.format}_unreadable"))
            failure = ParserFailure if record.outcome.endswith(("_killed", "_timeout")) else ExtractionRefused
            raise failure(record.outcome, str(result.get("message", "")))
        record.outcome = "ok"
        return result
