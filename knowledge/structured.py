"""Small structured-concurrency helpers shared by the service and the database bridge."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

import anyio
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
    finish unwinding (rolled back, children reaped) before the cancellation propagates.

    The rule for a caller cancelled late: **a call that raises the cancellation never took
    effect.** If the operation completed anyway (its COMMIT was already in flight, and commits are
    shielded), its result is returned as if the cancellation had come a moment later; the
    cancellation is then delivered at the caller's next checkpoint (trio and anyio scopes stay
    cancelled until they exit).
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
    try:
        await done.wait()
    except anyio.get_cancelled_exc_class():
        scope.cancel()
        with anyio.CancelScope(shield=True):
            await done.wait()
        if not (outcome and outcome[0][0]):
            raise
        # It completed before the cancellation reached it: report what took effect.
    finally:
        if not done.is_set():  # anything else that interrupts the wait (KeyboardInterrupt)
            scope.cancel()
            with anyio.CancelScope(shield=True):
                await done.wait()
    if not outcome:
        raise ServiceClosed(message="the service closed during the operation")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


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
