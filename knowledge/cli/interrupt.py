"""SIGINT and SIGTERM in a command: cancel it, let it clean up, say one line, exit 130 or 143.

Python's default SIGINT handler raises ``KeyboardInterrupt`` wherever the main thread happens to be —
inside asyncpg's protocol callbacks, a trio-asyncio loop's I/O task, a ``finally`` block. A command
interrupted that way may leave a transaction half-awaited, a connection idle in transaction and the
loop waiting on it forever, or worse. So a command's event loop runs under `run`, which turns a
signal into ordinary cancellation:

- for the whole of the loop, SIGINT and SIGTERM are received by a task of the command's own task
  group (``anyio.open_signal_receiver``: the handler only records the signal), which cancels the
  command. The command unwinds as under any cancellation: a transaction in flight rolls back (or,
  if its COMMIT was sent, is resolved), uploads keep their expiry, the service closes its pool and
  reaps its children, an embedded server this process started stops. Then `Interrupted` is raised,
  and the console script prints ``knowledge: interrupted`` (or ``terminated``) and exits 128 + the
  signal number;
- a second signal while that cleanup runs exits at once (`exit_now`): the connections close with
  the process, so the server rolls back whatever was in flight.

Before and after the loop, `knowledge.cli.console`'s handlers keep the signal: the receiver acts on
one kept before it was in place, and `run` on one kept as the loop ended.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import sniffio
from anyio.abc import TaskStatus

from knowledge.cli import signals
from knowledge.cli.signals import SIGNALS, Interrupted
from knowledge.store.db import log_loop_error
from knowledge.structured import HeldError

T = TypeVar("T")


def exit_now(signum: int) -> None:
    """The second signal: one line, the exit handlers (they stop an embedded server this process
    started), and out — without waiting for the command's cleanup."""
    sys.stderr.write(f"knowledge: {Interrupted(signum).message} again: exiting now\n")
    sys.stderr.flush()
    try:
        atexit._run_exitfuncs()
    finally:
        os._exit(128 + signum)


async def _guarded(fn: Callable[[], Awaitable[T]]) -> T:
    received: list[int] = []
    work = anyio.CancelScope()

    async def watch(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(*SIGNALS) as receiver:
            task_status.started()
            if (early := signals.pop_pending()) is not None:  # kept before the loop (or its receiver) started
                received.append(early)
                work.cancel()
            async for signum in receiver:
                if received:
                    exit_now(signum)
                received.append(signum)
                work.cancel()

    if sniffio.current_async_library() == "asyncio":  # this loop is the command's own: asyncpg's notes are logs
        asyncio.get_running_loop().set_exception_handler(log_loop_error)
    result: list[T] = []
    held = HeldError()  # the command's own exception leaves unwrapped
    async with anyio.create_task_group() as tg:
        await tg.start(watch)
        with held, work:
            result.append(await fn())
        tg.cancel_scope.cancel()
    if received:
        raise Interrupted(received[0])
    held.reraise()
    return result[0]


def run(fn: Callable[[], Awaitable[T]], backend: str) -> T:
    """Run ``fn`` on ``backend`` with SIGINT and SIGTERM turned into its cancellation (see the
    module docstring); `Interrupted` if a signal stopped it."""
    try:
        return anyio.run(_guarded, fn, backend=backend)
    finally:
        signals.install()  # asyncio leaves SIG_DFL behind when its receiver closes
        signals.check()  # a signal kept while the loop ended
