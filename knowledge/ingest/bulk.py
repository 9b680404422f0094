"""Bulk ingest: many documents at once, each still all-or-nothing (issue 18, item 3).

`ingest_many` runs the same seven steps as `Ingestor.ingest` for a list of requests, in a
pipeline:

- one **preparer** admits, reads, extracts, normalizes, chunks and scans the requests in order
  (steps 1-5: pure CPU once the source is read) — two when PDFs are among them, which the parser
  pool's two children parse at once (`preparers_for`) — and a **grouper** hands the prepared
  documents on in groups of one tenant, at most `group_limit` documents or `GROUP_TOKENS`
  tokens, no document id twice (the same attachment sent twice: the later one finds the first's
  document);
- two **writers** (a connection each) commit the groups, each group with ONE statement in one
  transaction (`BULK_SQL`): source copies, documents, chunk sets, events, outcome counters,
  embedding-queue rows, chunk rows, index rows, postings and term statistics of every document in
  the group.

While the server writes, the preparer prepares the next group: the two cores work at once, and
both write once preparing is done.

Whole documents only. A refusal or a failure of steps 1-5 is that request's outcome and writes
nothing but its outcome counter, as in the single path; the rest are ingested. Each file's outcome
names its reason: the preparation (`Ingestor.prepare_request`) raises an extractor's failure as the
ingest's refusal, on both paths.

If a group's statement fails for any reason — a document id that exists, a source that vanished,
a database fault — the transaction rolls back and every document of the group is committed on its
own through the single path's step 7 (its retries, and the resolution of a COMMIT whose reply was
lost), so each ends committed or with its own error.
A group whose own COMMIT lost its answer is resolved first (`_resolve`): its documents are all in,
or all written one at a time, or — the database not answering since — each is `CommitUnknown`.
Requests that replace a document (a new version) take the single path.

Cancellation: the group in flight rolls back; groups committed before stay, each reported through
``on_done`` as it committed (so a caller always knows which documents exist), and the
cancellation propagates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from knowledge.core.prepare import IngestRequest, PreparedDocument, dated
from knowledge.errors import CommitUnknown, KnowledgeError
from knowledge.ingest.ingestor import Ingestor, document_of, document_write
from knowledge.models import ArtifactRef, KnowledgeDocument
from knowledge.store.artifacts import Opened
from knowledge.store.ingest_writes import write_documents

_log = logging.getLogger(__name__)

#: Sources read ahead in one query (their first MiB each).
READ_AHEAD = 32
#: Groups written at once, each on its own connection: once preparing is done, both cores write.
WRITERS = 2
#: A group's bounds: one statement writes at most this many documents or tokens.
GROUP_DOCUMENTS = 64
GROUP_TOKENS = 60_000
#: The smallest group of a short list (`group_limit`).
MIN_GROUP = 8

#: What became of one request: its committed document, or the typed error that refused or failed it.
Outcome = KnowledgeDocument | KnowledgeError | Exception
OnDone = Callable[[int, Outcome], None]


@dataclass(frozen=True)
class _Prepared:
    index: int
    request: IngestRequest  # with its document id fixed
    source: ArtifactRef
    prepared: PreparedDocument

    @property
    def tokens(self) -> int:
        return sum(c.draft.tokens for c in self.prepared.chunks)


class _GroupRefused(Exception):
    """The bulk statement could not write every document of its group (rolled back)."""


async def ingest_many(ingestor: Ingestor, requests: Sequence[IngestRequest], on_done: OnDone | None = None, *,
                      prepare_seconds: float | None = None) -> list[Outcome]:
    """Ingest every request (see the module docstring); the outcome of request i is at index i.
    ``prepare_seconds`` bounds steps 1-5 of each request: one that takes longer is that request's
    `TimeoutError` (a slow or hostile file costs only its own outcome)."""
    outcomes: list[Outcome | None] = [None] * len(requests)

    def done(index: int, outcome: Outcome) -> None:
        outcomes[index] = outcome
        if on_done is not None:
            on_done(index, outcome)

    send, receive = anyio.create_memory_object_stream[list[_Prepared]](1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_prepare_all, ingestor, requests, send, done, prepare_seconds)
        with receive:
            for _ in range(WRITERS):
                tg.start_soon(_writer, ingestor, receive.clone(), done)
    assert all(o is not None for o in outcomes)
    return outcomes  # type: ignore[return-value]


async def _writer(ingestor: Ingestor, receive: ObjectReceiveStream[list[_Prepared]], done: OnDone) -> None:
    async with receive:
        async for group in receive:
            await _write(ingestor, group, done)


class _Cursor:
    """The next request to prepare, shared by the preparers: each takes one in order, with its
    source already read (the next `READ_AHEAD` sources of its tenant are read in one query)."""

    def __init__(self, ingestor: Ingestor, requests: Sequence[IngestRequest]) -> None:
        self._ingestor = ingestor
        self._requests = requests
        self._next = 0
        self._opened: dict[uuid.UUID, Opened] = {}
        self._lock = anyio.Lock()

    async def take(self) -> tuple[int, IngestRequest, Opened | None] | None:
        async with self._lock:
            index = self._next
            if index >= len(self._requests):
                return None
            self._next += 1
            request = self._requests[index]
            if request.document_id is None and request.replaces is None:  # one id, whatever path it takes
                request = dataclasses.replace(request, document_id=uuid.uuid4())
            if request.source.artifact_id not in self._opened:
                ahead = [r.source.artifact_id for r in self._requests[index:index + READ_AHEAD]
                         if r.source.tenant_id == request.source.tenant_id]
                with contextlib.suppress(Exception):  # a fault here: each request reads its own
                    self._opened = await self._ingestor.artifacts.open_many(request.source.tenant_id, ahead)
            return index, request, self._opened.pop(request.source.artifact_id, None)


async def _prepare_all(ingestor: Ingestor, requests: Sequence[IngestRequest],
                       send: ObjectSendStream[list[_Prepared]], done: OnDone, seconds: float | None) -> None:
    """Preparers take the requests in order; the grouper makes their documents groups."""
    preparers = preparers_for(ingestor, requests)
    items, received = anyio.create_memory_object_stream[_Prepared](preparers)
    cursor = _Cursor(ingestor, requests)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_group_all, received, send, group_limit(len(requests)))
        async with items:
            for _ in range(preparers):
                tg.start_soon(_prepare_some, ingestor, cursor, items.clone(), done, seconds)


async def _prepare_some(ingestor: Ingestor, cursor: _Cursor, items: ObjectSendStream[_Prepared], done: OnDone,
                        seconds: float | None) -> None:
    async with items:
        while (taken := await cursor.take()) is not None:
            index, request, opened = taken
            try:
                with anyio.fail_after(seconds):
                    source, prepared = await ingestor.counted(request.principal.tenant_id, ingestor.prepare_request,
                                                              request, opened)
            except Exception as exc:  # IngestRefused and failures: typed, counted, this request's outcome
                done(index, exc)
                continue
            await items.send(_Prepared(index, dated(request, prepared), source, prepared))


def preparers_for(ingestor: Ingestor, requests: Sequence[IngestRequest]) -> int:
    """How many requests to prepare at once: one where preparing is pure CPU in this process (a
    second would only delay the first group), the extractors' own concurrency where some parse
    in child processes (two PDFs parse at once in the parser pool's two children)."""
    concurrency = 1
    for media_type in {r.source.media_type for r in requests}:
        with contextlib.suppress(KnowledgeError):  # unsupported: refused by its own preparation
            concurrency = max(concurrency, ingestor.registry.for_media_type(media_type).concurrency)
    return concurrency


def group_limit(requests: int) -> int:
    """Documents per group: `GROUP_DOCUMENTS`, but a quarter of a short list (at least
    `MIN_GROUP`), so that its first groups are written while the next are prepared."""
    return min(GROUP_DOCUMENTS, max(MIN_GROUP, -(-requests // 4)))


async def _group_all(received: ObjectReceiveStream[_Prepared], send: ObjectSendStream[list[_Prepared]],
                     limit: int) -> None:
    group: list[_Prepared] = []
    async with received, send:
        async for item in received:
            request = item.request
            if group and (group[0].request.principal.tenant_id != request.principal.tenant_id
                          or len(group) >= limit or sum(p.tokens for p in group) + item.tokens > GROUP_TOKENS
                          or any(p.request.document_id == request.document_id for p in group)):
                await send.send(group)
                group = []
            group.append(item)
        if group:
            await send.send(group)


async def _write(ingestor: Ingestor, group: list[_Prepared], done: OnDone) -> None:
    """Commit a group in one statement, or each of its documents on its own if that fails."""
    bulk = [p for p in group if p.request.replaces is None]
    versions = [p for p in group if p.request.replaces is not None]  # new versions: the single path
    alone = group
    if len(bulk) > 1:
        attempt = _Attempt()
        try:
            documents = await _write_bulk(ingestor, bulk, attempt)
        except Exception as exc:  # whatever failed, each document is tried alone below
            _log.info("a group of %d documents could not be written in one statement (%s); one at a time",
                      len(bulk), exc)
            if attempt.commit_sent:
                alone = await _resolve(ingestor, bulk, done) + versions
        else:
            for p, document in zip(bulk, documents, strict=True):
                done(p.index, document)
            ingestor.wake_drain()
            alone = versions
    for p in alone:
        try:
            document = await ingestor.counted(p.request.principal.tenant_id, _alone, ingestor, p)
        except Exception as exc:
            done(p.index, exc)
        else:
            done(p.index, document)


async def _alone(ingestor: Ingestor, p: _Prepared) -> KnowledgeDocument:
    """The single path's step 7 for one prepared document."""
    return await ingestor.commit_prepared(p.request, p.source, p.prepared)


async def _resolve(ingestor: Ingestor, bulk: list[_Prepared], done: OnDone) -> list[_Prepared]:
    """After the group's COMMIT lost its answer, what it did. The group is one transaction: if its
    first document is not in, none is, and all are returned to be written one at a time; if it is,
    each is reported committed. If the database cannot be asked, each of the rest is reported
    `CommitUnknown` (in, or not at all) — never "not written", which might be false."""
    for i, p in enumerate(bulk):
        assert p.request.document_id is not None
        try:
            found = await ingestor.resolve_commit(p.request, p.source, p.request.document_id, 1)
        except Exception as exc:  # (the lookup failing otherwise leaves the outcome as unknown)
            unknown = exc if isinstance(exc, CommitUnknown) else CommitUnknown.of(p.request.document_id, exc)
            for q in bulk[i:]:
                done(q.index, unknown if q is p else CommitUnknown.of(q.request.document_id, unknown.__cause__))
            return []
        if found is None:  # (a later one missing would break the transaction's all-or-nothing: write it)
            return bulk[i:]
        done(p.index, found)
    ingestor.wake_drain()
    return []


@dataclass
class _Attempt:
    commit_sent: bool = False


async def _write_bulk(ingestor: Ingestor, group: list[_Prepared], attempt: _Attempt) -> list[KnowledgeDocument]:
    tenant = group[0].request.principal.tenant_id
    ids = [p.request.document_id for p in group]
    assert all(ids)  # (a group's documents are new, each with its id chosen)
    writes = [document_write(p.request, p.source, d, 1, p.prepared) for p, d in zip(group, ids, strict=True) if d]
    # The single path's fault points (`knowledge.store.faults.FaultHook`), once per group.
    async with ingestor.db.transaction(on_commit=functools.partial(ingestor.fault, "commit", None)) as tx:
        await ingestor.fault("before_write", tx)
        by_id = await write_documents(tx, tenant_id=tenant, documents=writes, embed_version=ingestor.embed_version)
        documents = []
        for p, write in zip(group, writes, strict=True):
            written = by_id.get(write.document_id)
            if written is None or written.source is None or written.ingested_at is None:
                raise _GroupRefused(f"document {write.document_id} could not be written in the group")
            documents.append(document_of(p.request, write.document_id, 1, written.source, p.source.media_type,
                                         p.prepared.chunker_version, written.ingested_at))
        await ingestor.fault("before_commit", tx)
        attempt.commit_sent = True  # leaving the block sends COMMIT
    with anyio.CancelScope(shield=True):  # committed: nothing may turn this into a cancellation now
        await ingestor.fault("after_commit", tx)
    return documents
