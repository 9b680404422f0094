"""Ingestion: the spec's seven ordered steps, all writes in ONE transaction.

1. Admit     origin trust >= USER, the ``knowledge.write`` scope, the source in the principal's tenant
2. Extract   the registry's adapter for the source's media type (`knowledge.parsers.base.Extractor`)
3. Normalize the closed list (`knowledge.core.normalize`)
4. Scan      a secret refuses everything (naming the chunk, never the secret); instruction-like
             text only flags the chunk
5. Chunk     structure first (`knowledge.core.chunking`), ids deterministic per chunker version
6. Index     PostgreSQL full-text search over text plus heading path; with the semantic arm on,
             the chunk set is queued for embedding (`knowledge.semantic.queue`): its vectors
             follow in the background, never on the ingest's path
7. Commit    source copy (KNOWLEDGE_SOURCE, expires_at NULL), document, chunk set, chunks, index
             rows (postings), the embedding queue row when the arm is on, and a
             ``knowledge.document.ingested`` event, in one transaction

Steps 3–5 are the pure `prepare`; the shell around it reads, refuses and commits. A refusal
raises `IngestRefused` with a reason code; a refused or failed ingest writes nothing but an
outcome counter (`knowledge_ingest_outcomes`, which holds no content). The caller's input
artifact is never modified or deleted.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Protocol, TypeVar

import anyio

from knowledge.core.chunking import (
    Chunker,
)
from knowledge.core.prepare import IngestRequest, PreparedDocument, dated, prepare
from knowledge.errors import ArtifactNotFound, CommitUnknown, DatabaseUnavailable, ExtractionRefused, IngestRefused
from knowledge.models import (
    ArtifactRef,
    Authority,
    KnowledgeDocument,
    Principal,
    Sensitivity,
    TrustLevel,
    Visibility,
)
from knowledge.parsers.base import ExtractorRegistry
from knowledge.parsers.sniff import routed, sniff_media_type
from knowledge.store.artifacts import ArtifactStore, Opened
from knowledge.store.awaiting import keep_awaiting
from knowledge.store.db import Connection, Database, is_transient
from knowledge.store.documents import count_outcome, supersede
from knowledge.store.faults import Faults
from knowledge.store.ingest_writes import (
    DocumentWrite,
    chunk_set_live,
    committed_version,
    live_version,
    live_version_number,
    switch_chunk_set,
    write_document,
)
from knowledge.store.locks import lock_document
from knowledge.store.retry import retry_transient, unavailable
from knowledge.structured import unwrapped
from knowledge.supervisors.parser_pool import EXTRACTION_OWNER
from knowledge.vocabulary import WRITE_SCOPE

_log = logging.getLogger(__name__)
T = TypeVar("T")



class VectorQueue(Protocol):
    """Where the ingest queues each chunk set it writes for embedding, in the same transaction (the
    semantic arm's drain, `knowledge.semantic.queue.EmbeddingDrain`, satisfies it): the model
    version the set is queued under, and a nudge for the queue's consumer after a commit."""

    @property
    def version(self) -> str: ...

    def wake(self) -> None: ...


@dataclass(frozen=True)
class QueueOnly:
    """A `VectorQueue` with no consumer in this process: chunk sets are queued under ``version`` for
    another process's drain (``semantic_model=False``)."""

    version: str

    def wake(self) -> None:
        return None


@dataclass
class Ingestor:
    """The imperative shell around `prepare`."""

    db: Database
    artifacts: ArtifactStore
    registry: ExtractorRegistry
    #: The fault-injection seam: hooks at the fault points, the retries' backoff.
    faults: Faults = field(default_factory=Faults)
    #: The semantic arm's queue, when the arm is on: every chunk set written is queued for
    #: embedding under its version in the same transaction (`knowledge.semantic.queue`).
    vectors: VectorQueue | None = None

    @property
    def embed_version(self) -> str | None:
        """The model version chunk sets are queued under; None: the arm is off, nothing is queued."""
        return self.vectors.version if self.vectors is not None else None

    async def ingest(self, request: IngestRequest) -> KnowledgeDocument:
        """Run the seven steps; return the committed document or raise `IngestRefused`.

        Cancellation: the transaction rolls back and nothing of the attempt remains (the outcome
        counter is not touched). A transient database fault is retried (`knowledge.store.retry`: the
        same document id, and after a COMMIT of unknown outcome the committed version is looked up
        first — `CommitUnknown` if the database cannot be asked); once retries are spent it is
        `DatabaseUnavailable`. Failures leave nothing; they are counted as ``failed`` and re-raised.
        """
        return await self.counted(request.principal.tenant_id, self._ingest, request)

    async def counted(self, tenant: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` (some steps of an ingest), counting a refusal or a failure as
        `ingest` does; a cancellation is not counted, nor a `CommitUnknown` (it may be in)."""
        try:
            return await fn(*args)
        except IngestRefused as refusal:
            await self._count(tenant, "refused", refusal.reason)
            raise
        except (anyio.get_cancelled_exc_class(), CommitUnknown):  # (that one may have been accepted)
            raise
        except Exception as exc:
            await self._count(tenant, "failed", type(exc).__name__)
            raise

    async def _ingest(self, request: IngestRequest) -> KnowledgeDocument:
        return await self.commit_prepared(request, *await self.prepare_request(request))

    async def prepare_request(self, request: IngestRequest, opened: Opened | None = None
                              ) -> tuple[ArtifactRef, PreparedDocument]:
        """Steps 1-5 of a request: admit, read the source (``opened``: already opened), extract,
        normalize, chunk and scan."""
        self._admit(request)
        try:
            return await self._read_and_prepare(
                request.principal.tenant_id, request.source.artifact_id, request.title,
                sha256=request.source.sha256, opened=opened)
        except _Unsupported as refused:
            raise await self._keep_awaiting(request, refused) from None

    async def _keep_awaiting(self, request: IngestRequest, refused: _Unsupported) -> IngestRefused:
        """Keep a source no extractor reads yet, marked as awaiting one (`knowledge.store.awaiting`):
        ``knowledge docs reextract`` ingests it once one exists, without a re-upload. The refusal
        says until when it is kept. Best effort: a failure to mark keeps the refusal as it was."""
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                kept = await keep_awaiting(self.db, tenant_id=request.principal.tenant_id,
                                           artifact_id=request.source.artifact_id, media_type=refused.media_type,
                                           request=request_record(request))
                if kept is not None:
                    return IngestRefused(refused.reason, f"{refused.message}; the source is kept until "
                                                         f"{kept:%Y-%m-%d}, awaiting an extractor for its type "
                                                         "(knowledge docs reextract)")
        except Exception:
            _log.warning("could not keep source %s for a later extractor", request.source.artifact_id,
                         exc_info=True)
        return IngestRefused(refused.reason, refused.message)

    async def commit_prepared(self, request: IngestRequest, source: ArtifactRef, prepared: PreparedDocument
                              ) -> KnowledgeDocument:
        """Steps 6-7 of a prepared request, in one transaction (retried; see `_commit`)."""
        document = await self._commit(dated(request, prepared), source, prepared)
        self.wake_drain()
        return document

    def wake_drain(self) -> None:
        if self.vectors is not None:
            self.vectors.wake()

    async def _read_and_prepare(self, tenant: str, artifact_id: uuid.UUID, title: str, *, sha256: str | None = None,
                                chunker: Chunker | None = None, opened: Opened | None = None
                                ) -> tuple[ArtifactRef, PreparedDocument]:
        """Steps 2-5 for a stored artifact: read, extract, normalize, chunk, scan — refusals typed.
        ``opened``: the artifact's ref and stream, already opened (`ArtifactStore.open_many`)."""
        pending = [opened] if opened is not None else []  # used once: a retry reads afresh

        async def read() -> tuple[ArtifactRef, Any, str]:
            try:
                source, stream = pending.pop() if pending else await self.artifacts.open_read(tenant, artifact_id)
            except ArtifactNotFound:
                raise IngestRefused("source_not_found", f"artifact {artifact_id}") from None
            if sha256 is not None and source.sha256 != sha256:
                raise IngestRefused("source_mismatch", "the artifact's bytes differ from the ref's sha256")
            owner = EXTRACTION_OWNER.set(tenant)  # the parser pool serves tenants in turn
            content: AsyncIterator[bytes] | None = None
            try:
                # What the bytes are, not what the name said (`knowledge.parsers.sniff`): the document
                # and its source copy carry the type it was extracted as.
                media_type, content = await sniffed(source, stream)
                if media_type != source.media_type:
                    source = source.model_copy(update={"media_type": media_type})
                try:
                    extractor = self.registry.for_media_type(media_type)
                except ExtractionRefused as exc:
                    raise _Unsupported(media_type, exc.message) from None
                with unwrapped():  # an extractor's one failure beside the cancellations it caused: itself
                    return source, extractor, await extractor.extract(content, media_type)
            except ExtractionRefused as exc:
                raise IngestRefused(exc.reason, exc.message) from None
            finally:
                EXTRACTION_OWNER.reset(owner)
                # A refusal mid-read leaves the stream started: close it here, not when it is collected
                # (trio reports an async generator collected unfinished).
                for started in (content, stream):
                    aclose = getattr(started, "aclose", None)
                    if aclose is not None:
                        await aclose()

        # Reading the source writes nothing: safe to repeat after a database fault.
        source, extractor, raw_text = await retry_transient(f"reading source {artifact_id}", read, self.faults.delays)
        await anyio.lowlevel.checkpoint()
        # No title given: the one the source states (an HTML <title>, a Word document's), else its file name.
        title = (title.strip() and title) or (getattr(raw_text, "stated_title", None) or source.file_name or "").strip()
        if not title or len(title) > 1024:
            why = "the title is above 1024 characters" if title else "a title is required (the source states none)"
            raise IngestRefused("invalid_request", why)
        prepared = prepare(raw_text, title, extractor.structure, chunker, extractor.version)
        await anyio.lowlevel.checkpoint()
        return source, prepared

    def _admit(self, request: IngestRequest) -> None:
        if request.origin_trust < TrustLevel.USER:
            raise IngestRefused("origin_trust", f"origin trust {request.origin_trust} is below USER")
        if not request.principal.has_scope(WRITE_SCOPE):
            raise IngestRefused("missing_scope", f"the principal lacks {WRITE_SCOPE}")
        if request.source.tenant_id != request.principal.tenant_id:
            raise IngestRefused("tenant_mismatch", "the source belongs to another tenant")
        if request.visibility is Visibility.PROJECT and not request.project_scope:
            raise IngestRefused("invalid_request", "visibility=project requires a project_scope")
        if len(request.title) > 1024:  # an empty one: the source's own (`_read_and_prepare`)
            raise IngestRefused("invalid_request", "a title of at most 1024 characters is required")

    async def rechunk(self, document_id: uuid.UUID, chunker: Chunker, principal: Principal) -> int:
        """Re-chunk the live version of a document under ``chunker`` from its retained source — no
        re-upload — as a new chunk set beside the old one, which keeps resolving as citations until
        the document is deleted; live search reads the new set. Returns the new set's chunk count.
        A chunker version never rewrites a chunk set in place: re-chunking under the live set's
        version is refused (``already_chunked``); back to a version the document had before makes
        that set live again (its chunks and citations are the same), its earlier live periods kept
        for ``as_of``."""
        tenant = principal.tenant_id
        doc = await live_version(self.db, tenant_id=tenant, document_id=document_id)
        if doc is None:
            raise IngestRefused("document_not_found", f"no live document {document_id}")
        if doc.ingested_by != principal.principal_id:
            raise IngestRefused("not_document_owner", "only the principal who ingested a document may re-chunk it")
        _, prepared = await self._read_and_prepare(tenant, doc.source_artifact_id, doc.title, chunker=chunker)
        async with self.db.transaction() as tx:
            await lock_document(tx, tenant, document_id)
            if await live_version_number(tx, tenant_id=tenant, document_id=document_id) != doc.version:
                raise IngestRefused("document_changed", "a new version arrived meanwhile; re-chunk that one")
            live = await chunk_set_live(tx, tenant_id=tenant, document_id=document_id, version=doc.version,
                                        chunker_version=prepared.chunker_version)
            if live:
                raise IngestRefused("already_chunked", f"the live chunk set is {prepared.chunker_version} already")
            # A set it had before (superseded): the same chunks (same source, same chunker), live again.
            await switch_chunk_set(tx, tenant_id=tenant, document_id=document_id, version=doc.version,
                                   prepared=prepared, revive=live is False, embed_version=self.embed_version,
                                   principal_id=principal.principal_id, from_chunker_version=doc.chunker_version)
        self.wake_drain()
        return len(prepared.chunks)

    async def fault(self, step: str, conn: Connection | None) -> None:
        if self.faults.ingest_step is not None:
            await self.faults.ingest_step(step, conn)

    async def _commit(self, request: IngestRequest, source: ArtifactRef, prepared: PreparedDocument
                      ) -> KnowledgeDocument:
        """Step 7, retried after transient faults (see `knowledge.store.retry`). Every attempt writes the
        same document id; an attempt whose COMMIT was sent but not answered is resolved by looking
        for the version it wrote before anything runs again."""
        document_id = request.replaces or request.document_id or uuid.uuid4()
        for delay in (*self.faults.delays, None):
            attempt = _Attempt()
            try:
                return await self._commit_once(request, source, prepared, document_id, attempt)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                fault = exc
            if attempt.commit_sent:
                found = await self.resolve_commit(request, source, document_id, attempt.version)
                if found is not None:
                    return found
            if delay is None:
                raise unavailable(f"ingest of {document_id}", fault) from fault
            _log.info("ingest of %s: transient %s; retrying in %.2f s", document_id, type(fault).__name__, delay)
            await anyio.sleep(delay)
        raise AssertionError("unreachable")

    async def _commit_once(self, request: IngestRequest, source: ArtifactRef, prepared: PreparedDocument,
                           document_id: uuid.UUID, attempt: _Attempt) -> KnowledgeDocument:
        tenant = request.principal.tenant_id
        async with self.db.transaction(on_commit=functools.partial(self.fault, "commit", None)) as tx:
            if request.replaces is not None:
                attempt.version = await supersede(tx, tenant, request.replaces, request.principal)
            # One statement: the source copy (made inside the server, never re-sent), the document,
            # its chunk set, the event and the outcome counter.
            await self.fault("before_write", tx)
            # One statement writes everything (see INGEST_SQL): one round trip, whatever the size.
            written = await write_document(tx, tenant_id=tenant, document=document_write(
                request, source, document_id, attempt.version, prepared), embed_version=self.embed_version)
            if written.source is None:
                raise IngestRefused("source_not_found", "the source vanished during ingest")
            if written.ingested_at is None:
                raise IngestRefused("document_exists", f"document {document_id} already exists")
            await self.fault("before_commit", tx)
            attempt.commit_sent = True  # leaving the block sends COMMIT (shielded: see `call_in_group`)
        with anyio.CancelScope(shield=True):  # committed: nothing may turn this into a cancellation now
            await self.fault("after_commit", tx)
        return document_of(request, document_id, attempt.version, written.source, source.media_type,
                           prepared.chunker_version, written.ingested_at)

    async def resolve_commit(self, request: IngestRequest, source: ArtifactRef, document_id: uuid.UUID,
                             version: int) -> KnowledgeDocument | None:
        """After a COMMIT whose answer was lost: the version it wrote, or None if it wrote nothing —
        asked again after transient faults, shielded (a cancelled caller must not be left not
        knowing). If the database cannot be asked, `CommitUnknown`."""
        try:
            with anyio.CancelScope(shield=True):
                found: KnowledgeDocument | None = await retry_transient(
                    f"resolving the commit of {document_id}",
                    functools.partial(self.committed, request, source, document_id, version), self.faults.delays)
        except DatabaseUnavailable as exc:
            raise CommitUnknown.of(document_id, exc) from exc
        return found

    async def committed(self, request: IngestRequest, source: ArtifactRef, document_id: uuid.UUID,
                         version: int) -> KnowledgeDocument | None:
        """The version an attempt wrote, if its COMMIT took effect: same id and version, written by
        the same principal from a source with the same SHA-256."""
        await self.fault("resolve", None)
        found = await committed_version(self.db, tenant_id=request.principal.tenant_id, document_id=document_id,
                                        version=version, principal_id=request.principal.principal_id,
                                        source_sha256=source.sha256)
        if found is None:
            return None
        return document_of(request, document_id, version, found.source, source.media_type, found.chunker_version,
                           found.ingested_at)

    async def count_refusal(self, tenant: str, reason: str) -> None:
        """Count a refusal decided before this ingestor saw the request (the tool layer's)."""
        await self._count(tenant, "refused", reason)

    async def _count(self, tenant: str, outcome: str, reason: str) -> None:
        """Count a refusal or failure in its own short transaction; never masks the original error."""
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                async with self.db.connection() as conn:
                    await count_outcome(conn, tenant, outcome, reason)
        except Exception as exc:  # (the database gone too: expected, and said by the failure itself)
            _log.log(logging.INFO if is_transient(exc) else logging.WARNING,
                     "could not count ingest outcome %s/%s", outcome, reason, exc_info=True)


class _Unsupported(IngestRefused):
    """``unsupported_media_type``: no extractor reads what the source's bytes are (``media_type``)."""

    def __init__(self, media_type: str, message: str) -> None:
        super().__init__("unsupported_media_type", message)
        self.media_type = media_type


def request_record(request: IngestRequest) -> dict[str, Any]:
    """The admitted request as a source awaiting an extractor keeps it (no content): `request_from`
    reads it back."""
    p = request.principal
    return {"principal": {"tenant_id": p.tenant_id, "principal_id": p.principal_id, "scopes": sorted(p.scopes)},
            "title": request.title, "visibility": request.visibility.value, "origin_trust": request.origin_trust.value,
            "project_scope": request.project_scope,
            "doc_date": request.doc_date.isoformat() if request.doc_date else None,
            "authority": request.authority.value, "sensitivity": request.sensitivity.value,
            "document_id": str(request.document_id) if request.document_id else None,
            "replaces": str(request.replaces) if request.replaces else None}


def request_from(record: dict[str, Any], source: ArtifactRef) -> IngestRequest:
    """The request `request_record` kept, for ``source``."""
    return IngestRequest(
        source=source, title=record["title"], visibility=Visibility(record["visibility"]),
        principal=Principal(tenant_id=record["principal"]["tenant_id"],
                            principal_id=record["principal"]["principal_id"],
                            scopes=frozenset(record["principal"]["scopes"])),
        origin_trust=TrustLevel(record["origin_trust"]), project_scope=record["project_scope"],
        doc_date=date.fromisoformat(record["doc_date"]) if record["doc_date"] else None,
        authority=Authority(record["authority"]), sensitivity=Sensitivity(record["sensitivity"]),
        document_id=uuid.UUID(record["document_id"]) if record["document_id"] else None,
        replaces=uuid.UUID(record["replaces"]) if record["replaces"] else None)


async def sniffed(source: ArtifactRef, stream: AsyncIterator[bytes]) -> tuple[str, AsyncIterator[bytes]]:
    """The media type ``source``'s bytes are (`sniff_media_type`, from the first slice; a ZIP's from
    all of it, which its structure needs) and the same bytes as a stream again."""
    head = await anext(stream, b"")
    if head.startswith(b"PK") and len(head) < source.size_bytes:
        # a ZIP whole, once: the same bytes object is sniffed and handed on (the extractor's
        # `collect_source` joins one part without copying it)
        head = b"".join([head, *[part async for part in stream]])
    parts = [head]
    media_type = routed(source.media_type, sniff_media_type(head, source.media_type))

    async def again() -> AsyncIterator[bytes]:
        for part in parts:
            yield part
        async for part in stream:
            yield part

    return media_type, again()


@dataclass
class _Attempt:
    """What one commit attempt got to: its version number, and whether COMMIT was sent."""

    version: int = 1
    commit_sent: bool = False


def document_write(request: IngestRequest, source: ArtifactRef, document_id: uuid.UUID, version: int,
                   prepared: PreparedDocument) -> DocumentWrite:
    """What the store writes for ``request``: its document version, copied from ``source``."""
    return DocumentWrite(source=source, document_id=document_id, version=version,
                         principal_id=request.principal.principal_id, visibility=request.visibility.value,
                         project_scope=request.project_scope, title=request.title, doc_date=request.doc_date,
                         authority=request.authority.value, sensitivity=request.sensitivity.value, prepared=prepared)


def document_of(request: IngestRequest, document_id: uuid.UUID, version: int, source_ref: ArtifactRef,
              media_type: str, chunker_version: str, ingested_at: Any) -> KnowledgeDocument:
    return KnowledgeDocument(
        document_id=document_id, tenant_id=request.principal.tenant_id,
        ingested_by_principal_id=request.principal.principal_id, visibility=request.visibility,
        project_scope=request.project_scope, title=request.title, source_ref=source_ref, media_type=media_type,
        doc_date=request.doc_date, authority=request.authority, version=version, chunker_version=chunker_version,
        superseded_by=None, ingested_at=ingested_at, sensitivity=request.sensitivity,
    )
