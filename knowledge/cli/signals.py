"""SIGINT and SIGTERM, from the console script's first line to its last: kept outside an event loop
(raised inside a library's C code a signal could be swallowed), acted on by a command's loop as it
starts or ends (`knowledge.cli.interrupt`), raised at once inside `raising` (a blocking read that
must end). Imports nothing but the standard library, so the console script (`knowledge.cli.console`)
installs these handlers before anything heavy loads."""

from __future__ import annotations

import contextlib
import signal
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
