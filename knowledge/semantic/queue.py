"""The embedding queue (migration 0009): ingest commits without vectors; vectors follow.

An ingest (or re-chunk) with the semantic arm on writes, in its own transaction, one queue row per
chunk set and model version. `EmbeddingDrain` — an actor of the service's task group — claims rows
under a lease, tenant-fair (each tenant's oldest first: one tenant's backlog never holds another's
behind it; a drain may also serve one tenant only, `Settings.embedding_tenant`), embeds the set's
chunks that have no vector under the version (in the embedder child, a batch of `BATCH_PASSAGES`
passages per request, interleaved there with query embeddings), writes each batch's vectors as soon
as it has them, and deletes the row when the set is done. Until then the lexical arm finds the
passages and the semantic arm does not.

- **Nothing is lost.** The queue lives in the database: a killed process's lease expires and any
  drain takes the row again; a batch whose vectors were written is not embedded twice (only
  chunks without vectors are read), and writing a vector twice is a no-op.
- **Nothing outlives its chunk.** Queue rows go with their chunk set and vectors with their chunk
  (ON DELETE CASCADE); a chunk deleted while its batch was in the child is skipped at write time.
  The ANN query keeps every isolation predicate, so a superseded set's vectors are never returned
  as live.
- **One path.** A new model version, or chunks ingested while the arm was off, are queued by
  `enqueue_missing` (at start, and by `KnowledgeService.reembed`) and drained the same way.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import time
import uuid
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel

from knowledge.errors import EmbedderUnavailable
from knowledge.store.db import Database
from knowledge.store.embedding_queue import (
    QueueRow,
    backlog_counts,
    claim_sets,
    enqueue_missing_sets,
    pending_sets,
    release_claim,
    remove_done,
    renew_lease,
    unembedded_chunks,
)
from knowledge.store.retry import retry_transient
from knowledge.store.vectors import insert_missing
from knowledge.supervisors.embedder import BATCH_PASSAGES, Embedder

_log = logging.getLogger(__name__)

#: Queue rows claimed at once (small documents share a request to the child).
CLAIM_ROWS = 8
#: A claim's lease, renewed after every batch: a drain that dies frees its rows after this.
LEASE_SECONDS = 120.0
#: How often an idle drain looks for rows queued by other processes (its own ingests wake it).
POLL_SECONDS = 2.0
#: Windows (estimated from token counts) per request to the embedder child. The child serves one
#: request at a time and a search's query waits for the request in flight, so requests are small:
#: ~16 windows is ~0.35 s of encoding on one core (and batching larger buys nothing on the CPU:
#: 43-46 windows/s at 4 to 32 windows per call, measured in process on one thread).
BATCH_WINDOWS = 16
#: Claims of one row that may end without progress before it is left for an operator.
MAX_ATTEMPTS = 5
#: How long a drain waits after the embedder could not answer, or after a database fault.
RETRY_SECONDS = 1.0
#: How long a failed batch's rows are offered back (retried while the database comes back), and the
#: waits between the attempts.
RELEASE_SECONDS = 15.0
RELEASE_DELAYS = (0.1, 0.3, 0.6, 1.0, 2.0, 3.0, 4.0)


class Backlog(BaseModel):
    """What waits for the semantic arm (`KnowledgeService.health`, ``knowledge stats``)."""

    model_version: str
    chunk_sets: int
    chunks: int
    #: Chunk sets whose embedding failed `MAX_ATTEMPTS` times in a row: left for an operator.
    stuck_sets: int = 0
    #: Seconds the oldest queued chunk set has waited (0 when nothing waits).
    oldest_wait_seconds: float
    #: Windows embedded per second by this process's drain over the last minute.
    windows_per_second: float

    def describe(self) -> str:
        """One line for a person: what still waits for vectors, or that nothing does."""
        if not self.chunks:
            return f"semantic arm ({self.model_version}): every chunk has its vectors"
        return (f"semantic arm ({self.model_version}): vectors are still being added — {self.chunks} chunks "
                f"waiting; search answers lexically for those until then")


async def enqueue_missing(db: Database, version: str, tenant: str | None = None) -> int:
    """Queue every chunk set (of ``tenant``, or all; live, superseded and re-chunked alike, so
    ``as_of`` works under the version) that has a chunk without a vector under ``version``; returns
    the number of chunks in those sets. Sets already queued stay where they are in the queue, and
    any left for an operator (`MAX_ATTEMPTS`) are tried again."""
    return await enqueue_missing_sets(db, version=version, tenant=tenant)


async def pending(db: Database, version: str, tenant: str, document_id: uuid.UUID | None = None) -> int:
    """Chunk sets of ``tenant`` (of one document, if given) queued under ``version``."""
    return await pending_sets(db, version=version, tenant=tenant, document_id=document_id)


# --- the drain -----------------------------------------------------------------------------------


@dataclass
class EmbeddingDrain:
    """Drains the queue for one model version through one embedder (see the module docstring)."""

    db: Database
    embedder: Embedder
    version: str
    claim_rows: int = CLAIM_ROWS
    #: Windows (estimated) per request to the child: a query waits for at most one such request.
    batch_windows: int = BATCH_WINDOWS
    lease_seconds: float = LEASE_SECONDS
    poll_seconds: float = POLL_SECONDS
    #: The one tenant this drain embeds for (a command waiting for its own vectors); None: every
    #: tenant, in turn (`CLAIM` is tenant-fair).
    tenant: str | None = None
    #: Windows embedded: (monotonic time, windows) per written batch, for the rate.
    _done: collections.deque[tuple[float, int]] = field(default_factory=lambda: collections.deque(maxlen=4096))
    _wake: anyio.Event = field(default_factory=anyio.Event)
    _progress: anyio.Event = field(default_factory=anyio.Event)
    #: Chunks embedded (or found deleted when their vectors came back) by this drain.
    embedded_chunks: int = 0
    #: Chunks sent to the embedder whose vectors are not yet written (0 between batches).
    in_flight: int = 0

    def wake(self) -> None:
        """Something was queued in this process: look now rather than at the next poll."""
        self._wake.set()

    async def progressed(self, at_most: float) -> None:
        """Return after the next written batch (or claim that found nothing), or ``at_most`` seconds."""
        with anyio.move_on_after(at_most):
            await self._progress.wait()

    def windows_per_second(self, over: float = 60.0) -> float:
        now = time.monotonic()
        recent = [(t, n) for t, n in self._done if now - t <= over]
        if not recent:
            return 0.0
        return sum(n for _, n in recent) / max(now - recent[0][0], 1.0)

    async def backlog(self, tenant: str | None = None) -> Backlog:
        """What waits (of one tenant, or all); the rate is this drain's, whoever it worked for."""
        return await queue_backlog(self.db, self.version, tenant, self.windows_per_second())


    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Claim, embed, write, repeat, until cancelled (the service's task group owns this)."""
        task_status.started()
        while True:
            try:
                rows = await self._claim()
            except Exception as exc:
                _log.warning("embedding queue: claim failed (%s); retrying", exc)
                await anyio.sleep(RETRY_SECONDS)
                continue
            if not rows:
                self._signal()
                await self._idle()
                continue
            try:
                await self._drain(rows)
            except EmbedderUnavailable as exc:
                _log.info("embedding queue: the embedder could not answer (%s); retrying", exc.message)
                await self._release(rows, failed=True)
                await anyio.sleep(RETRY_SECONDS)
            except Exception:
                _log.exception("embedding queue: a batch failed; its rows go back to the queue")
                await self._release(rows, failed=True)
                await anyio.sleep(RETRY_SECONDS)
            except BaseException:  # cancelled (the service closes): hand the rows back at once, no fault of theirs
                await self._release(rows, failed=False)
                raise

    async def _idle(self) -> None:
        with anyio.move_on_after(self.poll_seconds):
            await self._wake.wait()
        self._wake = anyio.Event()

    def _signal(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()

    async def _claim(self) -> list[QueueRow]:
        return await claim_sets(self.db, version=self.version, rows=self.claim_rows, lease_seconds=self.lease_seconds,
                                max_attempts=MAX_ATTEMPTS, tenant=self.tenant)

    async def _drain(self, rows: list[QueueRow]) -> None:
        """Embed every chunk of the claimed sets that lacks a vector, a batch at a time; each
        batch's vectors are written at once (progress survives a kill); then the rows go."""
        work: list[tuple[str, str, tuple[str, ...], str]] = []
        sizes: list[int] = []
        for row in rows:
            found = await unembedded_chunks(self.db, row=row, model_version=self.version)
            work.extend((row.tenant_id, c.chunk_id, c.heading_path, c.text) for c in found)
            sizes.extend(estimated_windows(c.tokens) for c in found)
        for first, last in batches(sizes, self.batch_windows):
            batch = work[first:last]
            self.in_flight = len(batch)
            try:
                vectors = await self.embedder.embed_passages([(h, t) for _, _, h, t in batch])
                for owner in dict.fromkeys(t for t, _, _, _ in batch):
                    picked = [i for i, w in enumerate(batch) if w[0] == owner]
                    await insert_missing(self.db, owner, self.version, [batch[i][1] for i in picked],
                                         [vectors[i] for i in picked])
            finally:
                self.in_flight = 0
            self._done.append((time.monotonic(), sum(len(v) for v in vectors)))
            self.embedded_chunks += len(batch)
            await renew_lease(self.db, rows=rows, lease_seconds=self.lease_seconds)
            self._signal()
        await remove_done(self.db, rows=rows)
        self._signal()

    async def _release(self, rows: list[QueueRow], *, failed: bool) -> None:
        """Hand the rows back now. A batch fails most often because the database went away (a
        restart, a terminated connection), so the release is retried while it comes back: rows left
        leased would wait out `LEASE_SECONDS` (two minutes) before any drain took them again. What
        cannot be released within the bound is left to its lease."""
        release = functools.partial(release_claim, self.db, rows=rows, attempts_back=0 if failed else 1)
        with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_SECONDS), contextlib.suppress(Exception):
            await retry_transient("releasing embedding queue rows", release, RELEASE_DELAYS)


def estimated_windows(tokens: int) -> int:
    """About how many windows a passage of ``tokens`` (our count) makes: a window holds ~96 new
    word pieces, and a word piece is about one of our tokens."""
    return max(1, -(-tokens // 96))


def batches(sizes: list[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive ``[first, last)`` ranges of items whose sizes add up to at most ``budget`` (an
    item larger than the budget goes alone), at most `BATCH_PASSAGES` items each."""
    out: list[tuple[int, int]] = []
    first, total = 0, 0
    for i, size in enumerate(sizes):
        if i > first and (total + size > budget or i - first >= BATCH_PASSAGES):
            out.append((first, i))
            first, total = i, 0
        total += size
    if first < len(sizes):
        out.append((first, len(sizes)))
    return out


async def queue_backlog(db: Database, version: str, tenant: str | None = None, rate: float = 0.0) -> Backlog:
    """What waits for vectors under model ``version`` (of one tenant, or all): a query of the
    queue, which any process may run (no drain, no model); ``rate``: the windows per second of
    the drain asking, if one does."""
    counts = await backlog_counts(db, version=version, max_attempts=MAX_ATTEMPTS, tenant=tenant)
    return Backlog(model_version=version, chunk_sets=counts.chunk_sets, chunks=counts.chunks,
                   stuck_sets=counts.stuck_sets, oldest_wait_seconds=counts.oldest_wait_seconds,
                   windows_per_second=round(rate, 2))
