"""A host process as the README tells a host author to write one: ``python -m knowledge.stress.host``.

It embeds the service under ``trio.run`` or ``asyncio.run`` with **their default Ctrl-C handling**
(trio: ``KeyboardInterrupt``; asyncio: the main task cancelled, then ``KeyboardInterrupt``) and does
what a host does — upload, ingest, search, a turn, a batch — until it is interrupted. Nothing here
handles a signal: the service has to hold up under the loop's own handling
(`knowledge.stress.host_signals` sends the signals and judges what is left).

    python -m knowledge.stress.host --loop trio --dsn postgresql://... --tenant t1 --app host-1
    python -m knowledge.stress.host --loop asyncio --data-dir /tmp/k --tenant t1 --app host-1

It prints ``ready`` once the service is open, then one ``.`` per round of work.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import trio

from knowledge.config import Settings
from knowledge.core.prepare import IngestRequest
from knowledge.core.turn import TurnRequest
from knowledge.models import ArtifactOrigin, KnowledgeQuery, Principal, TrustLevel, Visibility
from knowledge.service import KnowledgeService


async def work(svc: KnowledgeService, tenant: str) -> None:
    writer = Principal(tenant_id=tenant, principal_id="host", scopes=frozenset({"knowledge.write"}))
    query = KnowledgeQuery(tenant_id=tenant, principal_id="host", text="pelican harbour rollback")
    print("ready", flush=True)
    n = 0
    while True:
        n += 1
        refs = []
        for i in range(3):
            body = " ".join(f"Step {k} of runbook {n}.{i}: the pelican checks the harbour, then rolls back."
                            for k in range(30))
            refs.append(await svc.put_artifact(
                tenant, f"# Runbook {n}.{i}\n\n## Rollback\n\n{body}\n".encode(), media_type="text/markdown",
                origin=ArtifactOrigin.UPLOAD, trust=TrustLevel.USER, file_name=f"{n}-{i}.md",
                expires_at=datetime.now(UTC) + timedelta(hours=1)))  # an upload expires; its document stays
        await svc.ingest(refs[0], f"runbook {n}", "tenant", writer, origin_trust=TrustLevel.USER)
        await svc.search(query)
        await svc.turn(TurnRequest(query=query, region_tokens=3000, session_id="s", turn_id=str(n),
                                          retrieve=True))
        await svc.ingest_many([IngestRequest(source=ref, title=f"runbook {n}.{i}", visibility=Visibility.TENANT,
                                             principal=writer, origin_trust=TrustLevel.USER)
                               for i, ref in enumerate(refs[1:], 1)])
        print(".", end="", flush=True)


async def main(settings: Settings, tenant: str) -> None:
    # The moment is measured from here: the host's imports are done and its loop runs. A Ctrl-C before
    # is Python's to lose — in an import it can land in the import lock's weakref callback, where CPython
    # prints "Exception ignored" and drops it; in ``asyncio.run`` before the loop exists it leaves a
    # half-built loop whose ``__del__`` fails — and no library can hold it.
    print("starting", flush=True)
    async with KnowledgeService.open(settings) as svc:
        await work(svc, tenant)


def dump_tasks(signum: int, frame: object) -> None:
    """Every thread's stack, then every task's (trio's tree, or asyncio's tasks), on stderr."""
    faulthandler.dump_traceback(all_threads=True)
    lines: list[str] = [f"SIGINT handler: {signal.getsignal(signal.SIGINT)!r}"]
    try:
        def walk(task: trio.lowlevel.Task, depth: int) -> None:
            lines.append(f"{'  ' * depth}task {task.name}")
            lines.extend(f"{'  ' * depth}  {f.f_code.co_filename}:{f.f_lineno} {f.f_code.co_name}"
                         for f, _ in task.iter_await_frames())
            for nursery in task.child_nurseries:
                for child in nursery.child_tasks:
                    walk(child, depth + 1)

        root = trio.lowlevel.current_root_task()
        if root is not None:
            from trio._core._run import GLOBAL_RUN_CONTEXT  # trio's own state: is a Ctrl-C pending?

            lines.append(f"trio ki_pending: {getattr(GLOBAL_RUN_CONTEXT.runner, 'ki_pending', '?')}")
            walk(root, 0)
    except RuntimeError:  # not under trio
        try:
            for task in asyncio.all_tasks(asyncio.get_running_loop()):
                lines.append(f"task {task.get_name()}")
                awaited: Any = task.get_coro()
                while awaited is not None:  # the coroutine chain down to what it waits for
                    frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
                    if frame is not None:
                        lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
                    awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
        except RuntimeError:
            pass
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()


def run() -> None:
    parser = argparse.ArgumentParser(prog="python -m knowledge.stress.host")
    parser.add_argument("--loop", choices=("trio", "asyncio"), required=True)
    parser.add_argument("--dsn")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--app", default="knowledge-host", help="the connections' application_name")
    parser.add_argument("--semantic", choices=("on", "off"), default="off")
    args = parser.parse_args()
    settings = Settings.from_env(dsn=args.dsn, data_dir=args.data_dir, application_name=args.app,
                                 semantic_arm=args.semantic == "on", sweep_interval_seconds=60.0,
                                 attachment_workers=1)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started by a non-interactive shell as a background job, the process inherits SIGINT
        # ignored (SIG_IGN survives exec); a host run from a terminal has Python's default handler,
        # which is what the harness tests.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGUSR1, dump_tasks)  # a hung host's stacks and tasks, for the harness's report
    if args.loop == "trio":
        trio.run(main, settings, args.tenant)
    else:
        asyncio.run(main(settings, args.tenant))


if __name__ == "__main__":
    run()
    sys.exit(0)
