"""The PDF parser pool: disposable, rlimit-bounded child processes, at most two per event loop.

Each job runs ``python -m parsers.child`` in its own session (process group), hands it the PDF
on stdin (at most 32 MiB) and reads one JSON result from stdout (at most 32 MiB). The child sets
its own CPU, address-space (Linux), core and file-size limits before it reads a byte.

- **Two slots per event loop**, shared by every pool on that loop (an anyio ``RunVar``): two
  loops in one process get two each. A slot is free, runs a job, or holds a *spare*: a child
  already started with its libraries imported (``keep_spares``, run by the service), so a job
  need not wait for an interpreter's start-up; a spare still serves exactly one job.
- **Deadlines include the queue.** Inspection has 10 s and extraction 60 s from the moment the job
  *asks* for a slot; a job that waited 9 s for one has 1 s left to run.
- **Kill and reap before release.** On timeout, cancellation or any error the child's whole process
  group gets SIGKILL and the child is waited for (no zombie) inside the slot, so the next job's
  child never starts while a dead one still exists. Waiting is shielded and bounded.
- Nothing runs in a thread executor, and the event loop never blocks on a child.

Failures: the child's own refusals (``pdf_encrypted``, ``pdf_unreadable``, ``pdf_too_large``,
``no_text``) are `ExtractionRefused`; a deadline is ``pdf_timeout`` and a child that died or was
killed by a limit is ``pdf_killed`` — both `ParserFailure`, which callers may retry.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import Process
from anyio.lowlevel import RunVar

from parsers.base import ExtractionRefused

MAX_IO_BYTES = 32 * 1024 * 1024
SLOTS_PER_LOOP = 2
INSPECT_SECONDS = 10.0
EXTRACT_SECONDS = 60.0
ADDRESS_SPACE_BYTES = 512 * 1024 * 1024
CHILD_COMMAND = (sys.executable, "-m", "parsers.child")
_REAP_SECONDS = 10.0
_STDERR_KEEP = 16 * 1024

_SLOTS: RunVar[LoopSlots] = RunVar("knowledge_parser_slots")


class LoopSlots:
    """One event loop's parser slots. A slot is free, holds a spare child (started, its libraries
    imported, waiting for a job), or runs a job; so at most ``size`` children exist on the loop."""

    def __init__(self, size: int = SLOTS_PER_LOOP) -> None:
        self.size = size
        self.free = size
        self.spares: list[Process] = []
        self.changed = anyio.Condition()
        self.used = anyio.Event()  # spares are kept only once this loop has parsed something

    async def take(self) -> Process | None:
        """Wait for a slot; return its spare child, or None when the slot is free (spawn into it).
        Cancellation while waiting takes nothing."""
        async with self.changed:
            while not self.spares and not self.free:
                await self.changed.wait()
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


class ParserFailure(ExtractionRefused):
    """The parse did not finish: ``pdf_timeout`` (its deadline, queue included, passed) or
    ``pdf_killed`` (the child died: a limit, a crash, a kill). Transient: a retry may succeed."""

    reason = "pdf_killed"
    transient = True


@dataclass
class JobRecord:
    """What the pool observed of one job (kept for tests, stress runs and the audit)."""

    op: str
    deadline: float
    waited: float = 0.0  # seconds spent queued for a slot
    pid: int | None = None
    outcome: str = "pending"  # ok | <refusal reason> | pdf_timeout | pdf_killed | cancelled
    returncode: int | None = None
    reaped_at: float | None = None
    spawned_at: float | None = None


@dataclass
class ParserPool:
    """Runs parser jobs in child processes; see the module docstring."""

    command: tuple[str, ...] = CHILD_COMMAND
    address_space_bytes: int | None = ADDRESS_SPACE_BYTES
    on_spawn: Callable[[JobRecord], None] | None = None
    live: set[int] = field(default_factory=set)  # pids of children not yet reaped
    history: list[JobRecord] = field(default_factory=list)
    keep_history: int = 1000

    async def inspect(self, data: bytes, deadline: float = INSPECT_SECONDS) -> dict[str, Any]:
        """Upload inspection: page count, encryption, outline. Raises `ExtractionRefused`
        (``pdf_encrypted``/``pdf_unreadable``/``pdf_too_large``) or `ParserFailure`.

        Cancellation: the child is killed and reaped before the cancellation propagates."""
        result = await self.run("inspect", data, deadline)
        inspection: dict[str, Any] = result["inspection"]
        return inspection

    async def extract(self, data: bytes, deadline: float = EXTRACT_SECONDS,
                      pages: tuple[int, int] | None = None) -> str:
        """The PDF's text (or that of the 0-based, end-exclusive page range ``pages``), with Markdown
        headings from its outline or font sizes. Raises `ExtractionRefused` (``no_text`` among them)
        or `ParserFailure`.

        Cancellation: the child is killed and reaped before the cancellation propagates."""
        result = await self.run("extract", data, deadline, pages)
        text: str = result["text"]
        return text

    async def run(self, op: str, data: bytes, deadline: float, pages: tuple[int, int] | None = None
                  ) -> dict[str, Any]:
        """One job: queue for a slot, spawn, feed, read, reap — all within ``deadline`` seconds."""
        if len(data) > MAX_IO_BYTES:
            raise ExtractionRefused("pdf_too_large", f"{len(data)} bytes is above the {MAX_IO_BYTES}-byte input bound")
        record = JobRecord(op, deadline)
        self.history.append(record)
        del self.history[: -self.keep_history]
        asked = time.monotonic()
        slots = loop_slots()
        slots.used.set()
        with anyio.move_on_after(deadline) as scope:
            spare = await slots.take()
            try:
                record.waited = time.monotonic() - asked
                remaining = deadline - record.waited
                return await self._run_child(record, data, remaining, pages, spare)
            finally:
                with anyio.CancelScope(shield=True):
                    await slots.give_back()  # only now: the child is dead and reaped
        record.outcome = "pdf_timeout"
        if scope.cancelled_caught:
            raise ParserFailure("pdf_timeout", f"{op} passed its {deadline:.0f} s deadline (queue included)")
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_child(self, record: JobRecord, data: bytes, remaining: float, pages: tuple[int, int] | None,
                         spare: Process | None = None) -> dict[str, Any]:
        header = json.dumps({"op": record.op, "cpu_seconds": max(1, math.ceil(remaining)) + 1,
                             "address_space_bytes": self.address_space_bytes,
                             "pages": list(pages) if pages else None}).encode() + b"\n"
        if spare is not None and spare.returncode is not None:  # a spare that died idle: reap it, spawn anew
            await self._kill_and_reap(spare, JobRecord("spare", 0.0))
            spare = None
        process = spare or await self._spawn()
        record.pid = process.pid
        record.spawned_at = time.monotonic()
        self.live.add(process.pid)
        if self.on_spawn is not None:
            self.on_spawn(record)
        try:
            out, err = await self._converse(process, header + data)
            returncode = await process.wait()
        except BaseException:
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
                async with slots.changed:
                    slots.spares.append(spare)
                    slots.changed.notify_all()
                mine = [p for p in mine if p in slots.spares]
        finally:
            with anyio.CancelScope(shield=True):
                for spare in [p for p in mine if p in slots.spares]:
                    slots.spares.remove(spare)
                    await self._kill_and_reap(spare, JobRecord("spare", 0.0))
                    await slots.give_back()

    async def _converse(self, process: Process, payload: bytes) -> tuple[bytes, bytes]:
        out = bytearray()
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

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            tg.start_soon(drain, process.stdout, out, MAX_IO_BYTES)
            tg.start_soon(drain, process.stderr, err, _STDERR_KEEP)
        return bytes(out), bytes(err)

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
            record.outcome = "pdf_killed"
            why = f"signal {-returncode}" if returncode < 0 else f"exit {returncode}"
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise ParserFailure("pdf_killed", f"the parser child died ({why}) {tail[0][:200]}".strip())
        if len(out) > MAX_IO_BYTES:
            record.outcome = "pdf_too_large"
            raise ExtractionRefused("pdf_too_large", "the parser's output is above the 32 MiB bound")
        try:
            result: dict[str, Any] = json.loads(out)
        except ValueError:
            record.outcome = "pdf_killed"
            raise ParserFailure("pdf_killed", "the parser child wrote no valid result") from None
        if not result.get("ok"):
            record.outcome = str(result.get("reason", "pdf_unreadable"))
            failure = ParserFailure if record.outcome in {"pdf_killed", "pdf_timeout"} else ExtractionRefused
            raise failure(record.outcome, str(result.get("message", "")))
        record.outcome = "ok"
        return result
