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
import os
import signal
import sys
from types import FrameType

from knowledge.cli.signals import SIGNALS, Interrupted, check, install, pop_pending

#: The exit codes of a command that was interrupted and said so (128 + SIGINT or SIGTERM).
INTERRUPTED_EXITS = frozenset(128 + s for s in SIGNALS)


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
        if code in INTERRUPTED_EXITS:
            pop_pending()  # a second signal as the interrupted command ended: its one line is said
        else:
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
