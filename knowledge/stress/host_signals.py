"""Ctrl-C at random moments in a host that embeds the service (issue 37; the host is `knowledge.stress.host`).

Each round starts the host process (trio or asyncio, the loop's default SIGINT handling) on a fresh
tenant, sends SIGINT at a moment drawn from the host's start to well into its work (while it
imports, opens the service, ingests, searches, runs turns), and judges:

- it exits within `HANG_SECONDS` — no hang — by the interrupt (``KeyboardInterrupt``: exit -2 or
  1 with it as the last line of stderr, or 0 had it not begun), never by a crash (a segfault, an
  abort) and with no other error on stderr;
- none of its child processes (parser children, the embedder's) outlives it;
- its connections are closed (``pg_stat_activity`` by its application name);
- the store holds whole documents only and no artifact without an expiry that no document holds;
- with the embedded server: a server the host started is stopped when it exits, and one it joined
  is left running (the server's lifetime has one owner).

Used by ``tests/stress/test_host_signals.py`` and ``scripts/stress_service.py --interrupt-host``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil
from anyio.abc import ByteReceiveStream

from knowledge.store.db import open_pool
from knowledge.store.deletion import drop_tenant_documents
from knowledge.stress.signals import HANG_SECONDS, settle, store_leftovers
from knowledge.supervisors.embedded_pg import embedded_status, start_embedded, stop_embedded

#: Exit codes of a process ended by an uncaught KeyboardInterrupt (Python re-raises SIGINT: -2),
#: or by one a ``__main__`` caught and turned into exit 1 or 130.
INTERRUPTED_EXITS = (-signal.SIGINT, 1, 128 + signal.SIGINT)
#: Lines of stderr no interrupted host may print.
BAD_WORDS = ("Segmentation fault", "Fatal Python error", "Exception ignored", "was never retrieved",
             "Resetting connection", "ResourceWarning", "was never awaited", "Task was destroyed")


@dataclass
class HostRound:
    loop: str
    delay: float  # from the line ``after`` to the signal
    embedded: bool
    after: str = "starting"  # the host's line the delay counts from: "starting" (its first) or "ready"
    server_was_running: bool = False
    code: int | None = None
    stderr: str = ""
    stdout: str = ""
    exit_seconds: float = 0.0
    children_seen: int = 0
    problems: list[str] = field(default_factory=list)

    def moment(self) -> str:
        """Where the signal landed: before the service was open, or in its work."""
        return "working" if "ready" in self.stdout else "starting"

    def outcome(self) -> str:
        if self.problems:
            return "PROBLEM"
        return "exit 0" if self.code == 0 else "interrupted"


def host_command(loop: str, tenant: str, app: str, *, dsn: str | None, data_dir: Path | None) -> list[str]:
    command = [sys.executable, "-m", "knowledge.stress.host", "--loop", loop, "--tenant", tenant, "--app", app]
    if dsn is not None:
        command += ["--dsn", dsn]
    if data_dir is not None:
        command += ["--data-dir", str(data_dir)]
    return command


async def _descendants(pid: int) -> set[int]:
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


async def one_round(loop: str, delay: float, *, dsn: str, data_dir: Path | None, env: dict[str, str],
                    after: str = "starting") -> HostRound:
    """One host run interrupted ``delay`` seconds after its line ``after`` ("starting", its first, or
    "ready", once its service is open: the moment is bounded by the host's progress, not by a clock
    calibrated on another run). With ``data_dir`` the host uses the embedded server there (``dsn``
    then reaches that server, for the checks)."""
    tenant = f"host-{uuid.uuid4().hex[:10]}"
    app = f"kh-{uuid.uuid4().hex[:10]}"
    result = HostRound(loop=loop, delay=delay, embedded=data_dir is not None, after=after)
    line = after.encode()
    if data_dir is not None:
        result.server_was_running = await anyio.to_thread.run_sync(embedded_status, data_dir) is not None
    command = host_command(loop, tenant, app, dsn=None if data_dir is not None else dsn, data_dir=data_dir)
    process = await anyio.open_process(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                       start_new_session=True)
    stdout, stderr = bytearray(), bytearray()
    children: set[int] = set()
    started = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            async def read(stream: ByteReceiveStream | None, into: bytearray, mark: anyio.Event | None) -> None:
                assert stream is not None
                async for part in stream:
                    into.extend(part)
                    if mark is not None and line in into:
                        mark.set()

            async def watch_children() -> None:
                while process.returncode is None:
                    children.update(await _descendants(process.pid))
                    await anyio.sleep(0.02)

            tg.start_soon(read, process.stdout, stdout, started)
            tg.start_soon(read, process.stderr, stderr, None)
            tg.start_soon(watch_children)
            with anyio.move_on_after(HANG_SECONDS):
                await started.wait()
            await anyio.sleep(delay)
            signalled = time.monotonic()
            if process.returncode is None:
                process.send_signal(signal.SIGINT)
            with anyio.move_on_after(HANG_SECONDS):
                await process.wait()
            result.exit_seconds = time.monotonic() - signalled
            if process.returncode is None:
                process.send_signal(signal.SIGUSR1)  # the host's faulthandler prints every thread's stack
                await anyio.sleep(1.0)
                result.problems.append(f"still running {HANG_SECONDS:.0f} s after SIGINT; its stacks: "
                                       f"{stderr.decode(errors='replace')[-12000:]}")
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
    finally:
        await process.aclose()
    result.code = process.returncode
    result.stdout = stdout.decode(errors="replace")
    result.stderr = stderr.decode(errors="replace")
    result.children_seen = len(children)
    result.problems += _judge_exit(result)
    restart = False
    folder = data_dir
    if folder is not None:
        running = await _settle_status(folder, result.server_was_running)
        if running != result.server_was_running:
            result.problems.append("the host stopped a server it did not start" if result.server_was_running
                                   else "the server the host started is still running")
        restart = not running  # the store is read with the server up again, then it is stopped as it was
        if restart:
            await anyio.to_thread.run_sync(lambda: start_embedded(folder, cleanup_mode=None))
    try:
        result.problems += await _judge_leftovers(children, dsn, tenant, app)
    finally:
        if restart and folder is not None:
            await anyio.to_thread.run_sync(stop_embedded, folder)
    return result


async def _settle_status(data_dir: Path, expected: bool) -> bool:
    """Whether the embedded server runs, given a moment to reach ``expected`` (a stop takes time)."""
    async def differs() -> bool:
        return (await anyio.to_thread.run_sync(embedded_status, data_dir) is not None) != expected

    return expected != await settle(differs)


def _judge_exit(r: HostRound) -> list[str]:
    problems: list[str] = []
    lines = [line for line in r.stderr.strip().splitlines() if line.strip()]
    if r.code == 0:
        return [f"exit 0 but stderr: {r.stderr[-300:]!r}"] if lines else []
    if r.code == -signal.SIGKILL:
        return problems  # killed as hung: said above
    if r.code not in INTERRUPTED_EXITS:
        problems.append(f"exit {r.code} (a crash?), not an interrupt")
    if not lines or lines[-1].strip() != "KeyboardInterrupt":
        problems.append(f"stderr does not end with KeyboardInterrupt: {r.stderr[-600:]!r}")
    if bad := [w for w in BAD_WORDS if w in r.stderr]:
        problems.append(f"stderr says {bad}: {r.stderr[-1200:]!r}")
    return problems


async def _judge_leftovers(children: set[int], dsn: str, tenant: str, app: str) -> list[str]:
    problems = []

    async def alive() -> list[psutil.Process]:
        found = []
        for pid in children:
            try:
                p = psutil.Process(pid)
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except psutil.Error:
                continue
        return found

    if left := await settle(alive):
        problems.append(f"children left running: {[' '.join(p.cmdline()[:4]) for p in left]}")
        for p in left:
            p.kill()
    problems += await store_leftovers(dsn, app, tenant, "the host")
    async with open_pool(dsn, min_size=1, max_size=1) as db:
        await drop_tenant_documents(db, tenant_id=tenant)
    return problems


async def startup_span(loop: str, dsn: str | None, env: dict[str, str], data_dir: Path | None = None) -> float:
    """Seconds from the host's first line to ``ready`` (the service open), measured once (on the
    embedded server of ``data_dir`` where ``dsn`` is None)."""
    command = host_command(loop, f"host-cal-{uuid.uuid4().hex[:8]}", "kh-calibrate", dsn=dsn, data_dir=data_dir)
    process = await anyio.open_process(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                       start_new_session=True)
    seen = bytearray()
    began = None
    try:
        assert process.stdout is not None
        with anyio.fail_after(HANG_SECONDS):
            async for part in process.stdout:
                seen.extend(part)
                if began is None and b"starting" in seen:
                    began = time.monotonic()
                if b"ready" in seen:
                    break
        assert began is not None
        return time.monotonic() - began
    finally:
        process.send_signal(signal.SIGINT)  # (a clean end: a server it started is stopped)
        with anyio.move_on_after(HANG_SECONDS):
            await process.wait()
        if process.returncode is None:
            process.kill()
        await process.aclose()


async def interrupt_hosts(rounds: int, dsn: str, *, loop: str, seed: int = 0, work_seconds: float = 1.5,
                          opening_share: float = 0.3, data_dir: Path | None = None, embedded_share: float = 0.0,
                          env: dict[str, str] | None = None) -> list[HostRound]:
    """``rounds`` hosts under ``loop``, each interrupted once: most in its work, at a moment drawn
    uniformly from its "ready" line to ``work_seconds`` after it; a share ``opening_share`` in its
    opening (where a Ctrl-C as the service finishes opening once deadlocked it) — half of those at
    its first line, the others drawn uniformly over the opening's calibrated span from it (which may
    land in the work on a slow machine; the moment each landed in is recorded, `HostRound.moment`).
    A share ``embedded_share`` of the rounds use the embedded server of ``data_dir`` instead of
    ``dsn`` (which must then reach that server's database)."""
    env = {**os.environ, **(env or {})}
    env.pop("KNOWLEDGE_DSN", None)
    env["KNOWLEDGE_SEMANTIC_ARM"] = "off"
    embedded_only = data_dir is not None and embedded_share >= 1.0
    # The opening of a warm host on a migrated database: the first calibration migrates a fresh database
    # and fills the caches, and a span measured on it alone lets most "opening" moments land after the
    # real, shorter, opening (once 4 of 100 rounds on a loaded machine) — so the shorter of two.
    opening = min([await startup_span(loop, None if embedded_only else dsn, env, data_dir if embedded_only else None)
                   for _ in range(2)])
    rng = random.Random(seed)
    results = []
    for _ in range(rounds):
        embedded = data_dir is not None and rng.random() < embedded_share
        if rng.random() < opening_share:
            after, delay = "starting", (0.0 if rng.random() < 0.5 else rng.uniform(0.0, opening))
        else:
            after, delay = "ready", rng.uniform(0.0, work_seconds)
        results.append(await one_round(loop, delay, dsn=dsn, data_dir=data_dir if embedded else None, env=env,
                                       after=after))
    return results


def table(results: Sequence[HostRound]) -> list[str]:
    """Outcomes by loop and moment, and every problem."""
    counts = Counter((r.loop, r.moment(), r.embedded, r.outcome()) for r in results)
    lines = ["loop     moment    server    outcome       rounds  exit s (max)"]
    for (loop, moment, embedded, outcome), n in sorted(counts.items()):
        worst = max(r.exit_seconds for r in results
                    if (r.loop, r.moment(), r.embedded, r.outcome()) == (loop, moment, embedded, outcome))
        lines.append(f"{loop:8} {moment:9} {'embedded' if embedded else 'dsn':9} {outcome:13} {n:6}  {worst:6.2f}")
    for r in results:
        lines += [f"  ! {r.loop} SIGINT at {r.delay:.2f}s: {p}" for p in r.problems]
    return lines
