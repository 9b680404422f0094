"""The PDF parser pool: disposable, rlimit-bounded child processes, at most two per event loop.

Each job runs ``python -m knowledge.parsers.child`` in its own session (process group), hands it the PDF
on stdin (at most 32 MiB) and reads one JSON result from stdout (at most 32 MiB). The child sets
its own CPU, address-space (Linux), core and file-size limits before it reads a byte.

- **Two slots per event loop**, shared by every pool on that loop (an anyio ``RunVar``): two
  loops in one process get two each. A slot is free, runs a job, or holds a *spare*: a child
  already started with its libraries imported (``keep_spares``, run by the service), so a job
  need not wait for an interpreter's start-up; a spare still serves exactly one job.
- **Deadlines count the child's run, not the queue.** Inspection has 10 s and extraction 60 s from
  the moment the job *gets* its slot (its child starts or a spare is handed the job); a job that
  waited 50 s behind others still has its whole 60 s. The queue itself is bounded only by the
  caller's cancellation (and, in practice, by the stall limit below: no hostile child holds a slot
  for long). The child's CPU limit is the deadline plus one second.
- **A stalled extraction is killed.** The extracting child reports progress on stdout (``~pages N``,
  ``~document``, ``~page`` per page; `knowledge.parsers.child`); one that reports nothing for `STALL_SECONDS`
  is killed as ``pdf_timeout`` with a message saying it stalled. A slow but honest file (every page
  within the stall limit) keeps its whole deadline; a decompression bomb whose one page never ends
  gives its slot back after the stall limit instead of the deadline. Inspection reports no progress
  (it reads no content stream) and is bounded by its 10 s alone.
- **In turn by tenant.** Jobs waiting for a slot are served in turn by owner — the tenant the
  ingestor sets in `EXTRACTION_OWNER` around each extraction: the next slot goes to the
  waiting job whose owner was served least recently (`LoopSlots`), first come, first served within
  an owner and for jobs with none.
- **Kill and reap before release.** On timeout, cancellation or any error the child's whole process
  group gets SIGKILL and the child is waited for (no zombie) inside the slot, so the next job's
  child never starts while a dead one still exists. Waiting is shielded and bounded.
- Nothing runs in a thread executor, and the event loop never blocks on a child.

Failures: the child's own refusals (``pdf_encrypted``, ``pdf_unreadable``, ``pdf_too_large``,
``no_text``) are `ExtractionRefused`; a deadline or a stall is ``pdf_timeout`` and a child that died or was
killed by a limit is ``pdf_killed`` — both `ParserFailure`, which callers may retry.
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
INSPECT_SECONDS = 10.0
EXTRACT_SECONDS = 60.0
#: An extracting child that reports no progress (a page done, the document read) for this long is
#: killed. Measured over the corpus through the real child: the longest gap between two progress
#: lines is 0.7 s for an honest file (a page of pdfjs__tracemonkey.pdf) and 6.5 s for the slow bomb
#: (pdfminer reading the broken xref of pdfjs__bug1978317.pdf, which still ends as before), unloaded.
STALL_SECONDS = 10.0
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


async def _watch_stall(record: JobRecord, limit: float, scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` (the child's conversation) once ``limit`` seconds pass without a progress
    line; the caller then kills and reaps the child as for any other end."""
    while True:
        left = record.last_progress + limit - anyio.current_time()
        if left <= 0:
            record.stalled = True
            scope.cancel()
            return
        await anyio.sleep(left)


class _Output:
    """The child's stdout as it arrives: progress lines (``~event``), each noted on the job's record
    as it completes, then the result, kept up to one byte past `MAX_IO_BYTES` (so that an oversized
    result is seen). A ``~`` line longer than `MAX_PROGRESS_BYTES` is no progress line: it and all
    after it are taken as the result (which then fails to parse: ``pdf_killed``)."""

    def __init__(self, record: JobRecord) -> None:
        self.record = record
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
        self.record.progress += 1
        self.record.last_progress = anyio.current_time()
        words = event.split()
        if len(words) == 2 and words[0] == b"pages" and words[1].isdigit():
            self.record.pages = int(words[1])

    def result(self) -> bytes:
        """What followed the progress lines (an incomplete progress line counts as the result)."""
        return bytes(self.kept or self.line)


@dataclass
class JobRecord:
    """What the pool observed of one job (kept for tests, stress runs and the audit)."""

    op: str
    deadline: float
    format: str = "pdf"  # pdf | html | docx
    waited: float = 0.0  # seconds spent queued for a slot (not counted by the deadline)
    pid: int | None = None
    progress: int = 0  # progress lines the child wrote
    pages: int | None = None  # the pages it said it would extract (``~pages N``)
    last_progress: float = 0.0  # anyio.current_time() of its start or its last progress line
    stalled: bool = False  # killed by the stall limit
    outcome: str = "pending"  # ok | <refusal reason> | pdf_timeout | pdf_killed | cancelled
    returncode: int | None = None
    reaped_at: float | None = None
    spawned_at: float | None = None


@dataclass
class ParserPool:
    """Runs parser jobs in child processes; see the module docstring."""

    command: tuple[str, ...] = CHILD_COMMAND
    address_space_bytes: int | None = ADDRESS_SPACE_BYTES
    stall_seconds: float | None = STALL_SECONDS  # None: extraction is bounded by its deadline alone
    on_spawn: Callable[[JobRecord], None] | None = None
    live: set[int] = field(default_factory=set)  # pids of children not yet reaped
    history: list[JobRecord] = field(default_factory=list)
    keep_history: int = 1000

    def spares(self) -> int:
        """Warm spare children this event loop's slots hold (shared by every pool on the loop)."""
        return len(loop_slots().spares)

    async def inspect(self, data: bytes, deadline: float = INSPECT_SECONDS) -> dict[str, Any]:
        """Upload inspection: page count, encryption, outline. Raises `ExtractionRefused`
        (``pdf_encrypted``/``pdf_unreadable``/``pdf_too_large``) or `ParserFailure`.

        Cancellation: the child is killed and reaped before the cancellation propagates."""
        result = await self.run("inspect", data, deadline)
        inspection: dict[str, Any] = result["inspection"]
        return inspection

    async def extract(self, data: bytes, deadline: float = EXTRACT_SECONDS,
                      pages: tuple[int, int] | None = None, fmt: str = "pdf") -> Extracted:
        """The PDF's text (or that of the 0-based, end-exclusive page range ``pages``), with Markdown
        headings from its outline or font sizes, and the date the PDF states of itself (`Extracted`;
        read with the first range). Raises `ExtractionRefused` (``no_text`` among them)
        or `ParserFailure`.

        Cancellation: the child is killed and reaped before the cancellation propagates."""
        result = await self.run("extract", data, deadline, pages, fmt)
        stated, title = result.get("date"), result.get("title")
        return Extracted(result["text"], date.fromisoformat(stated) if isinstance(stated, str) else None,
                         title if isinstance(title, str) and title.strip() else None)

    async def run(self, op: str, data: bytes, deadline: float, pages: tuple[int, int] | None = None,
                  fmt: str = "pdf") -> dict[str, Any]:
        """One job: queue for a slot, then spawn, feed, read, reap within ``deadline`` seconds of
        getting it (the queue is not counted; an extraction that stalls ends sooner)."""
        if len(data) > MAX_IO_BYTES:
            raise ExtractionRefused(f"{fmt}_too_large",
                                    f"{len(data)} bytes is above the {MAX_IO_BYTES}-byte input bound")
        record = JobRecord(op, deadline, fmt)
        self.history.append(record)
        del self.history[: -self.keep_history]
        asked = time.monotonic()
        slots = loop_slots()
        slots.used.set()
        spare = await slots.take(EXTRACTION_OWNER.get())
        try:
            record.waited = time.monotonic() - asked
            with anyio.move_on_after(deadline) as scope:
                return await self._run_child(record, data, deadline, pages, spare)
        finally:
            with anyio.CancelScope(shield=True):
                await slots.give_back()  # only now: the child is dead and reaped
        record.outcome = f"{fmt}_timeout"
        if scope.cancelled_caught:
            raise ParserFailure(record.outcome, f"{op} passed its {deadline:.0f} s deadline")
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_child(self, record: JobRecord, data: bytes, remaining: float, pages: tuple[int, int] | None,
                         spare: Process | None = None) -> dict[str, Any]:
        header = json.dumps({"op": record.op, "format": record.format,
                             "cpu_seconds": max(1, math.ceil(remaining)) + 1,
                             "address_space_bytes": self.address_space_bytes,
                             "pages": list(pages) if pages else None}).encode() + b"\n"
        if spare is not None and spare.returncode is not None:  # a spare that died idle: reap it, spawn anew
            await self._kill_and_reap(spare, JobRecord("spare", 0.0))
            spare = None
        process = spare or await self._spawn()
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
                async with slots.changed:
                    slots.changed.notify_all()
                mine = [p for p in mine if p in slots.spares]
        finally:
            with anyio.CancelScope(shield=True):
                for spare in [p for p in mine if p in slots.spares]:
                    slots.spares.remove(spare)
                    await self._kill_and_reap(spare, JobRecord("spare", 0.0))
                    await slots.give_back()

    async def _converse(self, process: Process, payload: bytes, record: JobRecord) -> tuple[bytes, bytes]:
        """Feed the child and read it to EOF; an extraction is watched for stalls meanwhile."""
        stall = self.stall_seconds if record.op == "extract" else None
        async with anyio.create_task_group() as tg:
            if stall is not None:
                tg.start_soon(_watch_stall, record, stall, tg.cancel_scope)
            out, err = await self._exchange(process, payload, record)
            tg.cancel_scope.cancel()
        if record.stalled:
            record.outcome = f"{record.format}_timeout"
            raise ParserFailure(record.outcome, f"{record.op} stalled: no progress from the parser child "
                                               f"within {stall:.0f} s (after {record.progress} progress lines)")
        return out, err

    async def _exchange(self, process: Process, payload: bytes, record: JobRecord) -> tuple[bytes, bytes]:
        output = _Output(record)
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
