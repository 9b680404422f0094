"""``knowledge worker``: the maintenance worker (`knowledge.maintenance.worker`) as a long-running process.

It runs the attachment workers (owner-sent attachments) and the artifact sweeper under one
supervisor until SIGINT or SIGTERM; then the service closes: a job in flight rolls back and its
attachment is released for the next worker.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer

from knowledge.cli.context import CliError, Options, log_to_stderr, options

if TYPE_CHECKING:
    from knowledge.config import Settings

_log = logging.getLogger(__name__)


async def serve(settings: Settings, *, announce: Callable[[dict[str, Any]], None]) -> None:
    """Open a service that runs the maintenance worker, call ``announce`` with its facts, and run
    until SIGINT or SIGTERM; then close it (jobs in flight roll back and are released) and return.
    Cancellation: the same close, then it propagates."""
    from knowledge.service import KnowledgeService

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with KnowledgeService.open(settings) as svc:
            started = svc.worker_snapshot()
            if started is None:
                raise CliError("the service was opened without its maintenance worker")
            announce({"ready": True, "pid": os.getpid(), "process": started.process,
                      "workers": [w.worker_id for w in started.workers]})
            async for signum in signals:
                _log.info("signal %d: stopping the maintenance worker", signum)
                break
        status = svc.worker_snapshot()  # after the close: jobs in flight are released by now
        assert status is not None
        announce({"stopped": True, "workers": [w.model_dump() for w in status.workers]})


def _announce(opts: Options, facts: dict[str, Any]) -> None:
    if opts.out.json:
        opts.out.emit_json(facts, compact=True)
    elif facts.get("ready"):
        n = len(facts.get("workers", []))
        opts.out.line(f"maintenance worker running (pid {facts.get('pid')}): {n} attachment worker{'s' * (n != 1)}; "
                      "stop it with ^C or SIGTERM")
    elif facts.get("stopped"):
        opts.out.line("maintenance worker stopped")


def worker(
    ctx: typer.Context,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Attachment workers.")] = 1,
    only_tenant: Annotated[str | None, typer.Option(help="Only this tenant's attachments (default: all).")] = None,
    lease_seconds: Annotated[float | None, typer.Option(min=0.1, help="An attachment's lease.")] = None,
    poll_seconds: Annotated[float | None, typer.Option(min=0.01, help="Idle poll interval.")] = None,
    batch: Annotated[int | None, typer.Option(min=1, max=256, help="Attachments a worker claims and ingests at once "
                                              "(default 32).")] = None,
    sweep_interval_seconds: Annotated[float, typer.Option(min=0.1, help="Artifact sweep interval.")] = 300.0,
    log_level: Annotated[str, typer.Option(help="Logging level on stderr.")] = "INFO",
) -> int:
    """Run the maintenance worker (attachments, artifact sweeper) until SIGINT/SIGTERM stop it cleanly."""
    opts = options(ctx)
    log_to_stderr(log_level)
    overrides: dict[str, Any] = {"attachment_workers": workers, "attachment_tenant": only_tenant,
                                 "sweep_interval_seconds": sweep_interval_seconds,
                                 "application_name": "knowledge-worker",
                                 "pool_max_size": max(4, 2 * workers + 2)}  # a worker's bulk ingest writes on two
    if lease_seconds is not None:
        overrides["attachment_lease_seconds"] = lease_seconds
    if poll_seconds is not None:
        overrides["attachment_poll_seconds"] = poll_seconds
    if batch is not None:
        overrides["attachment_batch"] = batch
    settings = opts.settings(**overrides)
    opts.run(lambda: serve(settings, announce=lambda facts: _announce(opts, facts)))
    return 0
