"""Small structured-concurrency helpers shared by the service and the database bridge."""

from __future__ import annotations

from types import TracebackType


class HeldError:
    """Hold the exception of a block that runs inside a nursery, to re-raise it unwrapped after.

    A task group wraps whatever leaves its body in an ExceptionGroup; a host that embeds us
    should see its own exception (or cancellation) as itself::

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
        self.error = exc
        return exc is not None

    def reraise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
