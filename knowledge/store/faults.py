"""The fault-injection seam (as httpx's ``Client(transport=)`` is its client's): what a test or the
stress harness hands to `KnowledgeService.open` (``faults=``) and may change between calls. The ingest
and the search read it at each of their fault points, and the ingest at each retry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from knowledge.store.retry import RETRY_DELAYS

if TYPE_CHECKING:
    from knowledge.models import KnowledgeQuery
    from knowledge.store.db import Connection

#: The ingest's fault points, called with the step's name inside the open transaction: "before_write"
#: (after any supersede, before the one writing statement) and "before_commit"; "commit" (no
#: connection), inside the shield just before COMMIT is sent; "after_commit", once the transaction
#: committed (a fault there stands for a COMMIT whose reply was lost); and "resolve" (no connection),
#: before each question of whether a COMMIT whose reply was lost took effect.
FaultHook = Callable[[str, "Connection | None"], Awaitable[None]]
#: The search's fault points, called with the step's name and the query: "before" (each attempt,
#: before the arms run) and "after" (the passages ranked and selected, before the caller uses them:
#: a turn's trace, the tool's block).
SearchHook = Callable[[str, "KnowledgeQuery"], Awaitable[None]]
#: The attachment workers' fault points, called with the step's name: "claim" (before each claim).
WorkerHook = Callable[[str], Awaitable[None]]


@dataclass
class Faults:
    """- ``ingest_step``: a `FaultHook`, called at the ingest's fault points;
    - ``search_step``: a `SearchHook`, called at the search's;
    - ``worker_step``: a `WorkerHook`, called at the attachment workers';
    - ``retry_delays``: the ingest's backoff between attempts after a transient database fault
      (None: the store's `RETRY_DELAYS`; ``()``: no retry)."""

    ingest_step: FaultHook | None = None
    search_step: SearchHook | None = None
    worker_step: WorkerHook | None = None
    retry_delays: tuple[float, ...] | None = None

    @property
    def delays(self) -> tuple[float, ...]:
        return RETRY_DELAYS if self.retry_delays is None else self.retry_delays

    async def search(self, step: str, query: KnowledgeQuery) -> None:
        if self.search_step is not None:
            await self.search_step(step, query)

    async def worker(self, step: str) -> None:
        if self.worker_step is not None:
            await self.worker_step(step)
