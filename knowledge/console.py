"""The console script ``knowledge``: SIGINT and SIGTERM handled from its first line.

This module imports nothing heavy, so the handlers are in place before the CLI (and everything it
imports) loads: a signal while the interpreter imports or parses the arguments ends the command
with one line and 130 / 143, never a traceback or a bare ``-15``. While a command runs its event
loop, `knowledge.cli.interrupt` receives the signals instead and turns them into cancellation; a
signal in the instant the loop starts or ends, without its receiver in place, is kept (`defer`)
and acted on as soon as it can be. Once the command has ended and printed its line, a signal
(during the interpreter's shutdown) exits at once without another word.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
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
    deferring = False
    pending: int | None = None


def _handler(signum: int, _frame: FrameType | None) -> None:
    if _State.deferring:  # an event loop is starting: its signal receiver will act on it
        if _State.pending is None:
            _State.pending = signum
        return
    raise Interrupted(signum)


def install() -> None:
    """SIGINT and SIGTERM raise `Interrupted` (outside an event loop: nothing is open to clean up)."""
    for signum in SIGNALS:
        signal.signal(signum, _handler)


def defer(on: bool) -> int | None:
    """Start (``on``) or stop keeping signals for an event loop (it receives them itself once its
    receiver is in place); returns (and forgets) the signal kept meanwhile, if any."""
    _State.deferring = on
    return pop_pending()


def pop_pending() -> int | None:
    """The signal kept since `defer` (forgotten now), if any."""
    pending, _State.pending = _State.pending, None
    return pending


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
        from knowledge.cli import main as run_command

        return run_command(argv)
    except Interrupted as exc:  # while importing, or between the command's own handling
        sys.stderr.write(f"knowledge: {exc.message}\n")
        return exc.exit_code
    finally:
        sys.stderr.flush()
        for signum in SIGNALS:
            signal.signal(signum, _after)
