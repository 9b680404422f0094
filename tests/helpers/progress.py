"""Waits bounded by progress, not by a clock (issue 33): a busy machine may be slow, never stuck."""

from __future__ import annotations

from uuid import UUID

import anyio

from knowledge import KnowledgeService

#: A hang detector's bound: how long a wait may go without its condition before the test fails. Far above
#: what any such wait takes on a loaded 2-core machine (the longest seen: ~60 s, at load 6 with several
#: suites running at once), so a busy machine is never taken for a hang; a real hang still fails (and
#: pytest's ``faulthandler_timeout`` dumps every stack first).
HANG_SECONDS = 300.0


def hang_detector(seconds: float = HANG_SECONDS) -> anyio.CancelScope:
    """``anyio.fail_after`` as a hang detector, not a timing assertion (see `HANG_SECONDS`)."""
    return anyio.fail_after(seconds)


#: How long the embedding backlog may stand still before a wait fails: the child's first start (the
#: model loaded) and one batch on a loaded 2-core machine take well under this.
STALL_SECONDS = 240.0


async def wait_embedded(service: KnowledgeService, *, tenant_id: str, document_id: UUID | None = None,
                        stall_seconds: float = STALL_SECONDS, poll_seconds: float = 2.0) -> None:
    """``service.wait_embedded``, failed only when the tenant's backlog has not shrunk for
    ``stall_seconds`` — however long the whole wait takes while chunks keep being embedded."""

    async def watchdog() -> None:
        least: int | None = None
        since = anyio.current_time()
        while True:
            await anyio.sleep(poll_seconds)
            left = (await service.embedding_backlog(tenant_id)).chunks
            if least is None or left < least:
                least, since = left, anyio.current_time()
            elif anyio.current_time() - since > stall_seconds:
                raise AssertionError(f"the embedding backlog stood at {left} chunks for {stall_seconds:.0f} s")

    async with anyio.create_task_group() as tg:
        tg.start_soon(watchdog)
        await service.wait_embedded(document_id, tenant_id=tenant_id)
        tg.cancel_scope.cancel()
