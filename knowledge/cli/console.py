"""The console script ``knowledge``: SIGINT and SIGTERM handled from its first line.

This module imports nothing heavy, so the handlers are in place before the CLI (and everything it
imports) loads. Outside an event loop a signal is kept, not raised (raised inside a library's C
code it could be swallowed): a command's event loop acts on a kept signal as it starts or ends
(`knowledge.cli.interrupt`: cancellation, then one line and 130 / 143), and the console script at
its end, when no loop ran. Blocking reads outside a loop (standard input, a prompt) run inside
`raising`, where a signal ends them at once. Once the command has ended and printed its line, a
signal (during the interpreter's shutdown) exits at once without another word.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """A command stopped by a signal (after it cleaned up)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def message(self) -> str:
        return "terminated" if self.signum == signal.SIGTERM else "interrupted"


class _State:
    #: Keep a signal for the command to act on at a safe point (its event loop's start or end, the
    #: command's end), rather than raise it wherever the interpreter is: raised inside a library's
    #: C code calling back into Python (pydantic validating a pattern), it is "ignored" and the
    #: command goes on. Off only inside `raising` (a blocking read that must end at once).
    deferring = True
    pending: int | None = None


def _handler(signum: int, _frame: FrameType | None) -> None:
    if _State.deferring:
        if _State.pending is None:
            _State.pending = signum
        return
    raise Interrupted(signum)


def install() -> None:
    """SIGINT and SIGTERM kept for the command (`pop_pending`), or raised as `Interrupted` inside
    `raising`."""
    for signum in SIGNALS:
        signal.signal(signum, _handler)


def pop_pending() -> int | None:
    """The signal kept since the last look (forgotten now), if any."""
    pending, _State.pending = _State.pending, None
    return pending


def check() -> None:
    """`Interrupted` if a signal was kept: a safe point to stop."""
    if (pending := pop_pending()) is not None:
        raise Interrupted(pending)


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """A blocking wait outside an event loop (reading standard input, a prompt): a signal kept
    before it, or one arriving during it, ends it at once as `Interrupted`."""
    check()
    _State.deferring = False
    try:
        yield
    finally:
        _State.deferring = True


def _after(signum: int, _frame: FrameType | None) -> None:
    """A signal once the command has ended and said so (the interpreter is shutting down: waiting
    for threads, running the exit handlers): out at once, silently — its one line is written."""
    try:
        atexit._run_exitfuncs()  # (they stop an embedded server this process started)
    finally:
        os._exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    install()
    try:
        from knowledge.cli.app import main as run_command

        code = run_command(argv)
        check()  # a signal kept where no event loop ran to act on it
    except Interrupted as exc:
        sys.stderr.write(f"knowledge: {exc.message}\n")
        return exc.exit_code
    else:
        return code
    finally:
        sys.stderr.flush()
        for signum in SIGNALS:
            signal.signal(signum, _after)
