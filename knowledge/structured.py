"""Small structured-concurrency helpers shared by the service and the database bridge."""

from __future__ import annotations

import contextlib
import math
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType, TracebackType
from typing import Any, TypeVar

import anyio
import sniffio
from anyio.abc import TaskGroup

from knowledge.errors import ServiceClosed

T = TypeVar("T")


class HeldError:
    """Hold the exception of a block that runs inside a nursery, to re-raise it unwrapped after.

    A task group wraps whatever leaves its body in an ExceptionGroup; a host that embeds us
    should see its own exception as itself. Cancellation is not held: the cancel scopes around
    (the group's own included) must see it to know whether it is theirs::

        held = HeldError()
        async with anyio.create_task_group() as tg:
            with held:
                yield service
            tg.cancel_scope.cancel()
        held.reraise()
    """

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def __enter__(self) -> HeldError:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if exc is None or isinstance(exc, anyio.get_cancelled_exc_class()):
            return False  # cancellation belongs to the scopes around us: let it through
        self.error = exc
        return True

    def reraise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error


async def call_in_group(group: TaskGroup, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``fn(*args)`` as a task of ``group`` (the service's) and return its result here.

    The service thereby owns every in-flight operation: closing it cancels the operation, and the
    caller gets `ServiceClosed`. Cancelling the caller cancels the operation and waits for it to
    finish unwinding (rolled back, children reaped) before the cancellation propagates; a second
    cancellation (or ``KeyboardInterrupt``) during that wait is kept, not allowed to cut it short.

    A caller cancelled while the operation completed anyway (its COMMIT was already in flight, and
    commits are shielded) — the rule depends on who cancelled:

    - **A cancel scope that stays cancelled** (trio's, anyio's on either loop): the result is
      returned as if the cancellation had come a moment later, and the scope delivers the
      cancellation again at the caller's next checkpoint. A call that raises the cancellation never
      took effect.
    - **asyncio's one-shot** ``Task.cancel()`` (``asyncio.timeout``, a ``TaskGroup``, Ctrl-C under
      ``asyncio.run``, a web framework's disconnect): it is delivered once, so returning would lose
      it. The cancellation is raised, with what took effect attached: `took_effect` (of the
      ``CancelledError``, or of the ``TimeoutError`` raised from it) returns the result. The
      task's cancellation count (``Task.cancelling()``) is left as the canceller made it.
    """
    outcome: list[tuple[bool, Any]] = []
    done = anyio.Event()
    scope = anyio.CancelScope()

    async def runner() -> None:
        try:
            with scope:
                outcome.append((True, await fn(*args)))
        except Exception as exc:  # the operation's own failure, delivered to the caller
            outcome.append((False, exc))
        finally:
            done.set()

    try:
        group.start_soon(runner)
    except RuntimeError:  # the group is closed
        raise ServiceClosed(message="the service is closed") from None
    interrupted: BaseException | None = None  # the caller's cancellation, or KeyboardInterrupt
    try:
        await done.wait()
    except BaseException as exc:  # re-raised below, once the operation has unwound
        interrupted = exc
        scope.cancel()
        await _until_set(done)
    if interrupted is None:
        return _delivered(outcome)  # type: ignore[no-any-return]
    if not isinstance(interrupted, anyio.get_cancelled_exc_class()):
        raise interrupted  # KeyboardInterrupt, SystemExit: after the operation unwound
    if not (outcome and outcome[0][0]):
        raise interrupted  # it took no effect (rolled back, or failed)
    value = outcome[0][1]
    if anyio.current_effective_deadline() == -math.inf:
        return value  # type: ignore[no-any-return]  # a cancelled scope around us delivers it again
    _attach(interrupted, value)
    raise interrupted


async def _until_set(done: anyio.Event) -> None:
    """Wait for ``done`` whatever interrupts the wait. anyio's shield keeps its own scopes' and
    trio's cancellations out, but not asyncio's native ``Task.cancel()`` nor trio's
    ``KeyboardInterrupt``, which reach the main task through any shield. Each is waited out: the
    caller raises its first interruption once the operation has unwound (a native cancellation is
    counted by the task, ``cancelling()``, so a second one is not lost either)."""
    while not done.is_set():
        with anyio.CancelScope(shield=True):
            try:
                await done.wait()
            except BaseException:  # the caller re-raises its interruption after this wait
                continue


def _delivered(outcome: list[tuple[bool, Any]]) -> Any:
    if not outcome:
        raise ServiceClosed(message="the service closed during the operation")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


#: The attribute of a raised cancellation that holds what its call took effect with (`took_effect`).
_TOOK_EFFECT = "knowledge_took_effect"


def _attach(cancellation: BaseException, value: Any) -> None:
    setattr(cancellation, _TOOK_EFFECT, (value,))
    cancellation.add_note(f"knowledge: the call took effect before this cancellation reached it: {value!r:.200}")


def took_effect(exc: BaseException) -> tuple[Any] | None:
    """What a service call took effect with although it raised its caller's cancellation: a
    one-tuple of its result (the committed `KnowledgeDocument`, the turn whose trace was committed …),
    or None if the call took no effect. ``exc`` is the ``CancelledError`` the call raised, or an
    exception raised from it (``asyncio.timeout``'s ``TimeoutError``). Only asyncio's one-shot
    ``Task.cancel()`` raises after an effect (see `call_in_group`)::

        try:
            async with asyncio.timeout(5):
                doc = await svc.ingest(...)
        except TimeoutError as exc:
            if (done := took_effect(exc)) is not None:
                doc = done[0]   # committed: the timeout came as COMMIT was answered
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        held = getattr(current, _TOOK_EFFECT, None)
        if held is not None:
            return held  # type: ignore[no-any-return]
        current = current.__cause__ or current.__context__
    return None


_ki_lock = threading.Lock()
_ki_holders = 0
_ki_saved: Any = None


def _at_checkpoints(signum: int, frame: FrameType | None) -> None:
    """SIGINT under trio while a service is open: trio's own handler, told that no frame may take
    the ``KeyboardInterrupt`` (``frame=None`` reads as protected), so trio delivers it to the main
    task at its next checkpoint — ``trio.run(..., restrict_keyboard_interrupt_to_checkpoints=True)``."""
    _ki_saved(signum, None)


@contextlib.contextmanager
def keyboard_interrupt_at_checkpoints() -> Iterator[None]:
    """While the block runs (a `KnowledgeService` is open), Ctrl-C under trio's default handling
    raises ``KeyboardInterrupt`` in the main task at a checkpoint, as a cancellation would arrive,
    never in the middle of a statement of the service's tasks, of asyncpg's callbacks in the
    trio-asyncio loop, or of a cleanup (trio raises it wherever the interpreter is when no frame
    there is protected — issue 37 measured crashes and hangs). Nothing changes where another handler
    than trio's own is installed (the host's ``open_signal_receiver``, asyncio's, a custom one), off
    the main thread, or outside trio. Nested and concurrent services share one installation."""
    global _ki_holders, _ki_saved
    installed = False
    if sniffio.current_async_library() == "trio" and threading.current_thread() is threading.main_thread():
        with _ki_lock:
            current = signal.getsignal(signal.SIGINT)
            if _ki_holders:
                installed = current is _at_checkpoints
            elif getattr(current, "__module__", None) == "trio._core._ki":  # trio's KIManager handler
                _ki_saved = current
                signal.signal(signal.SIGINT, _at_checkpoints)
                installed = True
            if installed:
                _ki_holders += 1
    try:
        yield
    finally:
        if installed:
            with _ki_lock:
                _ki_holders -= 1
                if not _ki_holders and signal.getsignal(signal.SIGINT) is _at_checkpoints:
                    signal.signal(signal.SIGINT, _ki_saved)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


@contextlib.contextmanager
def unwrapped() -> Iterator[None]:
    """What leaves a task group leaves as itself where it is one thing, as a host expects of a
    library: a ``KeyboardInterrupt`` that reached a task group's exit (trio delivers it to the main
    task waiting there; several are the first), or the one error a group holds beside the
    cancellations it caused (a failed start: `ConfigurationError`, `DatabaseUnavailable` …). A group
    of several errors stays a group."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = [e for e in _leaves(group) if not isinstance(e, anyio.get_cancelled_exc_class())]
        interrupts = [e for e in leaves if isinstance(e, KeyboardInterrupt)]
        if interrupts:
            raise interrupts[0] from None
        if len(leaves) == 1:
            raise leaves[0]  # noqa: B904 - its own cause and traceback are kept; the group is its context
        raise


async def run_both(first: Callable[[], Awaitable[Any]], second: Callable[[], Awaitable[Any]]) -> None:
    """Run two calls concurrently in this call's task group; the first failure stops the other and
    is raised unwrapped (a caller sees the database's own error, not an ExceptionGroup)."""
    errors: list[Exception] = []

    async def one(fn: Callable[[], Awaitable[Any]], tg: TaskGroup) -> None:
        try:
            await fn()
        except Exception as exc:  # the first failure, raised unwrapped; the other call stops
            errors.append(exc)
            tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, first, tg)
        tg.start_soon(one, second, tg)
    if errors:
        raise errors[0]
