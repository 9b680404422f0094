"""Each facade method's policy, declared once on its definition (issue 33): a task of the service or
not, and what a transient database fault does to it."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, Literal, ParamSpec, Protocol, TypeAlias, TypeVar

from anyio.abc import TaskGroup

from knowledge.store.replicas import ReadRouter
from knowledge.store.retry import retry_transient, typed_faults
from knowledge.structured import call_in_group


class Owner(Protocol):
    """What a method's policy needs of the service: the task group its in-group calls run in, and
    where reads go (told of each acknowledged write)."""

    _task_group: TaskGroup
    _reads: ReadRouter


S = TypeVar("S", bound=Owner)
P = ParamSpec("P")
R = TypeVar("R")

FaultPolicy = Literal["retry", "typed"]
_Method: TypeAlias = Callable[Concatenate[S, P], Coroutine[Any, Any, R]]


def policy(*, in_group: bool = False, faults: FaultPolicy | None = None, writes: bool = False
           ) -> Callable[[_Method[S, P, R]], _Method[S, P, R]]:
    """Declare a facade method's policy once, on its definition:

    - ``in_group``: it runs as a task of the service (`call_in_group`): closing the service cancels
      it (`ServiceClosed`), and a cancelled caller waits for it to unwind (rolled back, children
      reaped) — the writes and everything that holds a child;
    - ``faults="retry"``: safe to repeat, so retried after a transient database fault, then
      `DatabaseUnavailable` (`retry_transient`); ``"typed"``: run once, a transient fault raised as
      `DatabaseUnavailable` (`typed_faults`); None: the body handles its own (or has none);
    - ``writes``: it changes documents, so the reads after it returns must see the change: the read
      router (`knowledge.store.replicas.ReadRouter.wrote`) takes the primary's position then.

    The policy is kept on the method (``__knowledge_policy__``) for the facade's test."""

    def declare(fn: _Method[S, P, R]) -> _Method[S, P, R]:
        what = fn.__name__

        @functools.wraps(fn)
        async def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            op: Callable[[], Awaitable[R]] = functools.partial(fn, self, *args, **kwargs)
            if faults == "retry":
                op = functools.partial(retry_transient, what, op)
            elif faults == "typed":
                op = functools.partial(typed_faults, what, op)
            result = await call_in_group(self._task_group, op) if in_group else await op()
            if writes:
                await self._reads.wrote()
            return result

        method.__knowledge_policy__ = (in_group, faults)  # type: ignore[attr-defined]
        return method

    return declare
