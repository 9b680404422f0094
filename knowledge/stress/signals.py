"""``knowledge ingest`` interrupted by SIGINT or SIGTERM at random moments (issue 20).

Each round runs the console script in a session of its own on a fresh tenant, sends the signal
after a random delay (from the console script's first line, `STARTUP_SECONDS`, while it imports,
to after the last commit), sometimes a second one just after, and then checks what the command promises
(`knowledge.cli.interrupt`):

- it exits within `HANG_SECONDS` with 128 + the signal number (or 0, had it finished first),
  printing one line on stderr — ``knowledge: interrupted`` / ``terminated`` — and no traceback
  (after a second signal: at once, at most that line);
- nothing of its session is left running (the embedder child, parser children);
- its connections are closed (``pg_stat_activity`` by application name);
- the store holds whole documents only (`knowledge.maintenance.audit.audit_storage`: no partial document, no
  orphan source, statistics that agree), and no artifact without an expiry that no document holds.

Used by ``tests/cli/test_cli_signals.py`` and ``scripts/stress_service.py --interrupt-cli``.
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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import anyio
import psutil
from anyio.abc import ByteReceiveStream

from knowledge.maintenance.audit import audit_storage
from knowledge.store.audit import unexpiring_artifacts
from knowledge.store.catalog import document_rows
from knowledge.store.db import open_pool
from knowledge.store.deletion import drop_tenant_documents
from knowledge.store.server import database_sessions_of

#: A command still running this long after the signal is hung.
HANG_SECONDS = 60.0
#: How long an exited command's session and connections may take to disappear.
GRACE_SECONDS = 5.0
APPLICATION = "knowledge-cli"
#: The interpreter's start, before the console script's first line runs (not drawn from).
STARTUP_SECONDS = 0.15
T = TypeVar("T")

@dataclass
class Round:
    """One interrupted command and what was found after it."""

    loop: str
    signum: int
    delay: float
    twice: bool
    code: int | None = None
    stderr: str = ""
    exit_seconds: float = 0.0  # from the (first) signal to the exit
    ran_seconds: float = 0.0  # from the start to the command closing its output
    documents: int = 0
    problems: list[str] = field(default_factory=list)

    complete: bool = False  # every file of the folder was ingested
    summarized: bool = False  # stdout ends with the uninterrupted command's last line (it had ended)

    @property
    def finished_first(self) -> bool:
        return self.code == 0 or (self.complete and self.summarized and not self.stderr.strip()
                                  and self.code in (-self.signum, 128 + self.signum))

    def outcome(self) -> str:
        if self.problems:
            return "PROBLEM"
        return "finished before the signal" if self.finished_first else f"exit {self.code}, one line"


def script() -> list[str]:
    """The console script of this interpreter's environment."""
    console = Path(sys.executable).parent / "knowledge"
    return [str(console)] if console.exists() else [sys.executable, "-m", "knowledge"]


def _session(pid: int) -> list[psutil.Process]:
    alive = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getsid(p.pid) == pid and p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return alive


async def full_run(knowledge: Sequence[str], dsn: str, folder: Path, loop: str, env: dict[str, str]
                   ) -> tuple[float, str]:
    """How long the uninterrupted command takes (the span the signal's moment is drawn from), and
    the last line it prints. ``knowledge``: the console script's command (`script`)."""
    began = time.monotonic()
    done = await anyio.run_process([*knowledge, "--dsn", dsn, "--tenant", f"sig-full-{uuid.uuid4().hex[:8]}",
                                    "--loop", loop, "ingest", str(folder)], env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the uninterrupted ingest failed: {done.stderr.decode(errors='replace')[-400:]}")
    return time.monotonic() - began, _last_line(done.stdout)


def _last_line(out: bytes) -> str:
    lines = out.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


async def one_round(knowledge: Sequence[str], dsn: str, folder: Path, files: int, loop: str, signum: int,
                    delay: float, twice: bool, env: dict[str, str], last_line: str) -> Round:
    tenant = f"sig-{uuid.uuid4().hex[:10]}"
    result = Round(loop=loop, signum=signum, delay=delay, twice=twice)
    command = [*knowledge, "--dsn", dsn, "--tenant", tenant, "--loop", loop, "ingest", str(folder)]
    process = await anyio.open_process(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                       start_new_session=True)
    stdout, stderr = bytearray(), bytearray()
    started = time.monotonic()
    try:
        async with anyio.create_task_group() as tg:
            async def read(stream: ByteReceiveStream | None, into: bytearray) -> None:
                assert stream is not None
                async for part in stream:
                    into.extend(part)
                result.ran_seconds = max(result.ran_seconds, time.monotonic() - started)

            tg.start_soon(read, process.stdout, stdout)
            tg.start_soon(read, process.stderr, stderr)
            await anyio.sleep(delay)
            signalled = time.monotonic()
            if process.returncode is None:
                process.send_signal(signal.Signals(signum))
                if twice:
                    await anyio.sleep(0.05)
                    if process.returncode is None:
                        process.send_signal(signal.Signals(signum))
            with anyio.move_on_after(HANG_SECONDS):
                await process.wait()
            result.exit_seconds = time.monotonic() - signalled
            if process.returncode is None:
                result.problems.append(f"still running {HANG_SECONDS:.0f} s after the signal")
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
    finally:
        await process.aclose()
    result.code = process.returncode
    result.stderr = stderr.decode(errors="replace")
    result.summarized = bool(last_line) and _last_line(bytes(stdout)) == last_line
    result.problems += await _judge_leftovers(process.pid, dsn, tenant)
    async with open_pool(dsn, min_size=1, max_size=1) as db:
        result.documents = await document_rows(db, tenant_id=tenant)
        await drop_tenant_documents(db, tenant_id=tenant)
    result.complete = result.documents == files
    result.problems += _judge_exit(result, result.complete)
    return result


def _judge_exit(r: Round, complete: bool) -> list[str]:
    lines = r.stderr.strip().splitlines()
    word = "terminated" if r.signum == signal.SIGTERM else "interrupted"
    if r.code == 0 or (r.code in (-r.signum, 128 + r.signum) and complete and r.summarized and not lines):
        # Done; or done and then ended by the signal after `console.main` returned (it exits with
        # 128 + n and says nothing more: the summary is out) or in the interpreter's last instants
        # (its handlers are gone by then; a shell reports 128 + the signal number all the same).
        return [f"exit {r.code} but stderr: {r.stderr[-300:]!r}"] if lines else []
    problems = []
    # A second signal exits at once: by `exit_now` (128 + n), or by the signal itself if it came
    # while the interpreter was already finishing.
    if r.code != 128 + r.signum and not (r.twice and r.code == -r.signum):
        problems.append(f"exit {r.code}, not {128 + r.signum}")
    if len(lines) > 1 or (lines and not lines[0].startswith(f"knowledge: {word}")) or (not lines and not r.twice):
        problems.append(f"stderr is not one line 'knowledge: {word}': {r.stderr[-600:]!r}")
    return problems


async def settle(check: Callable[[], Awaitable[T]], seconds: float = GRACE_SECONDS) -> T:
    """``check()`` again until its value is falsy or ``seconds`` pass; its last value."""
    value = await check()
    for _ in range(int(seconds / 0.1)):
        if not value:
            break
        await anyio.sleep(0.1)
        value = await check()
    return value


async def _judge_leftovers(pid: int, dsn: str, tenant: str) -> list[str]:
    problems = []

    async def session() -> list[psutil.Process]:
        return _session(pid)

    if left := await settle(session):
        problems.append(f"left running: {[' '.join(p.cmdline()[:3]) for p in left]}")
        for p in left:
            p.kill()
    return problems + await store_leftovers(dsn, APPLICATION, tenant, "the command")


async def store_leftovers(dsn: str, application: str, tenant: str, who: str) -> list[str]:
    """What an ended process (``who``) left in the store: its connections (by application name,
    given a moment to go), partial documents, orphans, statistics that disagree, and artifacts
    without an expiry that no document holds."""
    problems = []
    async with open_pool(dsn, min_size=1, max_size=1) as db:
        async def connections() -> int:
            return await database_sessions_of(db, application_name=application)

        if still := await settle(connections):
            problems.append(f"{still} connections of {who} still open")
        audit = await audit_storage(db, None, [tenant])
        problems += audit.partial + audit.orphans + audit.statistics
        unexpiring = await unexpiring_artifacts(db, tenant_id=tenant)
        if unexpiring:
            problems.append(f"{unexpiring} artifacts without an expiry that no document holds")
    return problems


async def interrupt_cli(rounds: int, dsn: str, folder: Path, *, loop: str, signals: Sequence[int] = (signal.SIGINT,),
                        seed: int = 0, twice_share: float = 0.1, env: dict[str, str] | None = None) -> list[Round]:
    """``rounds`` interrupted ingests of ``folder`` under ``loop``, one at a time (see the module
    docstring). The moments are drawn uniformly over the uninterrupted command's run: the shorter of
    two measured runs at first, then the shortest a round that finished before its signal took — so a
    span measured while the machine was busier does not leave most moments after the command's end."""
    env = {**os.environ, **(env or {})}
    env.pop("KNOWLEDGE_DSN", None)
    knowledge = await anyio.to_thread.run_sync(script)  # looks for the console script (a stat): not on the loop
    span, last_line = await full_run(knowledge, dsn, folder, loop, env)
    span = min(span, (await full_run(knowledge, dsn, folder, loop, env))[0])
    # (The interpreter's own start, before the console script's first line installs its handlers,
    # is left out: Python's default handler is in charge there.)
    files = await anyio.to_thread.run_sync(_count_files, folder)
    rng = random.Random(seed)
    results = []
    for _ in range(rounds):
        done = await one_round(knowledge, dsn, folder, files, loop, rng.choice(list(signals)),
                               rng.uniform(STARTUP_SECONDS, span), rng.random() < twice_share, env, last_line)
        if done.finished_first:  # an uninterrupted run, timed now: the span as the machine runs today
            span = max(STARTUP_SECONDS, min(span, done.ran_seconds))
        results.append(done)
    return results


def _count_files(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.parts))


def table(results: Sequence[Round]) -> list[str]:
    """The outcomes by loop and signal, and every problem."""
    counts = Counter((r.loop, signal.Signals(r.signum).name, r.twice, r.outcome()) for r in results)
    lines = ["loop     signal   second  outcome                      rounds  exit s (max)"]
    for (loop, name, twice, outcome), n in sorted(counts.items()):
        worst = max(r.exit_seconds for r in results if (r.loop, signal.Signals(r.signum).name, r.twice,
                                                         r.outcome()) == (loop, name, twice, outcome))
        lines.append(f"{loop:8} {name:8} {'yes' if twice else 'no':7} {outcome:28} {n:6}  {worst:6.2f}")
    for r in results:
        lines += [f"  ! {r.loop} {signal.Signals(r.signum).name} at {r.delay:.2f}s: {p}" for p in r.problems]
    return lines
