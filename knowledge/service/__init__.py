"""`KnowledgeService`: the nursery that owns the database pool and every background actor.

    async with KnowledgeService.open() as svc:        # under trio or asyncio, via anyio
        ref = await svc.put_artifact(tenant, data, media_type="text/markdown")
        print(await svc.health())

Entering starts (or joins) the embedded PostgreSQL unless a DSN is configured, opens the pool,
applies pending migrations, and starts the service's task group. Leaving — normally, by
exception, or by cancellation — cancels that task group, waits for every task in it, then
closes every connection: nothing outlives the block.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from dataclasses import replace
from datetime import date, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
from anyio.abc import TaskGroup

from knowledge.config import Settings
from knowledge.core.chunking import Chunker, MarkdownChunker, PlainTextChunker
from knowledge.core.prepare import IngestRequest
from knowledge.core.ranking import DEFAULT_POLICY
from knowledge.core.trace import TRACE_RETENTION, PruneResult, RecallTrace, RecallTraceView, TraceRetention
from knowledge.core.turn import TurnRequest, TurnResult
from knowledge.errors import ConfigurationError, TraceNotFound
from knowledge.ingest.attachments import (
    AttachmentMark,
    AttachmentQueue,
    MessageActor,
    QueueOverview,
    mark_attachments,
    upload_attachment,
)
from knowledge.ingest.bulk import OnDone, Outcome, ingest_many
from knowledge.ingest.ingestor import Ingestor, QueueOnly
from knowledge.ingest.reextract import Reextracted, reextract
from knowledge.maintenance.worker import MaintenanceStatus, MaintenanceWorker
from knowledge.models import (
    ArtifactOrigin,
    ArtifactRef,
    Authority,
    DeletedChunk,
    KnowledgeChunk,
    KnowledgeDocument,
    KnowledgeQuery,
    Principal,
    RetrievedPassage,
    Sensitivity,
    TrustLevel,
    Viewer,
    Visibility,
)
from knowledge.parsers.base import Extractor
from knowledge.parsers.registry import default_registry
from knowledge.retrieval.answers import record_answer
from knowledge.retrieval.search import Arm, LexicalArm, Searcher
from knowledge.retrieval.turn import ToolSearch, run_tool_search, run_turn
from knowledge.semantic.arm import SemanticArm
from knowledge.semantic.encoder import DIM
from knowledge.semantic.queue import Backlog, enqueue_missing, pending, queue_backlog
from knowledge.service.policy import policy
from knowledge.service.semantic_parts import NO_PGVECTOR, SemanticParts, start_semantic
from knowledge.service.status import (
    Health,
    ParserStatus,
    ReplicaStatus,
    RetrievalStatus,
    SemanticStatus,
    ServerStart,
)
from knowledge.store import catalog
from knowledge.store.answers import CitationStats, RecordedAnswer, citation_stats
from knowledge.store.artifacts import ArtifactStore
from knowledge.store.attachment_queue import AttachmentStatus
from knowledge.store.db import Database, ensure_database, open_bridge, open_creating
from knowledge.store.deletion import ConversationDeleted, delete_conversation, delete_document
from knowledge.store.faults import Faults
from knowledge.store.metrics import (
    BudgetPressure,
    IngestDay,
    IngestStats,
    budget_pressure,
    ingest_stats,
    ingest_trend,
)
from knowledge.store.migrate import applied_versions, discover, migrate
from knowledge.store.replicas import ReadRouter, Replica, shown
from knowledge.store.retry import retry_transient
from knowledge.store.server import server_identity
from knowledge.store.traces import TraceCheck, check_trace, load_trace, prune_traces, view_trace
from knowledge.store.vectors import missing_reason
from knowledge.structured import HeldError, keyboard_interrupt_at_checkpoints, unwrapped
from knowledge.supervisors.embedded_pg import EmbeddedServer, start_embedded_async
from knowledge.supervisors.parser_pool import ParserPool

__all__ = ["NO_PGVECTOR", "Health", "KnowledgeService", "ParserStatus", "RetrievalStatus", "SemanticParts",
           "SemanticStatus", "ServerStart", "start_semantic"]

_log = logging.getLogger(__name__)


class KnowledgeService:
    """The service. Build it with `KnowledgeService.open`, never directly: the composition root,
    where each part is built once with the parts it needs (the ingest's vector queue and the
    searcher's arms are handed in, never patched in later).

    A closed facade: its parts are private, and what a host, the CLI, the demo and the tests may
    use is the documented methods below (pinned by ``tests/test_exports.py``), three read-only facts
    (`settings`, `semantic_version`, `dsn`) and one seam, `faults` (injected at `open`). Each method's
    policy — a task of the service or not, retried after a transient database fault or typed — is
    declared once, by `policy` (`knowledge.service.policy`) on its definition."""

    def __init__(self, settings: Settings, db: Database, task_group: TaskGroup, server: EmbeddedServer | None,
                 semantic_parts: SemanticParts | None = None, faults: Faults | None = None,
                 extractors: Sequence[Extractor] = (), replicas: Sequence[Replica] = ()) -> None:
        self._settings = settings
        self._db = db
        #: Where searches and catalog reads go: a replica that has replayed this service's writes, else
        #: the primary (`knowledge.store.replicas`; no replicas: always the primary).
        self._reads = ReadRouter(db, replicas, max_lag_seconds=settings.replica_max_lag_seconds,
                                 wait_seconds=settings.replica_wait_seconds,
                                 check_seconds=settings.replica_check_seconds)
        self._faults = faults if faults is not None else Faults()
        self._catalog = catalog.Catalog(db)  # the read-side view (operator and citations)
        self._artifacts = ArtifactStore(db, settings.max_artifact_bytes)
        self._server = server
        self._task_group = task_group
        self._parser_pool = ParserPool()
        self._extractors = default_registry(self._parser_pool)
        for extractor in extractors:  # a host's own adapters of the Extractor port, for types none reads
            self._extractors.register(extractor)
        #: The semantic arm's model version, embedder (its child's owner) and embedding drain (the
        #: queue's consumer), when the arm is on (`start_semantic`).
        self._semantic_version = semantic_parts.version if semantic_parts else None
        self._embedder = semantic_parts.embedder if semantic_parts else None
        self._drain = semantic_parts.drain if semantic_parts else None
        vectors = self._drain or (QueueOnly(self._semantic_version) if self._semantic_version else None)
        self._ingestor = Ingestor(db, self._artifacts, self._extractors, faults=self._faults, vectors=vectors)
        arms: list[Arm] = [LexicalArm(depth=settings.lexical_depth)]
        if semantic_parts is not None and semantic_parts.arm is not None:
            arms.append(semantic_parts.arm)
        elif self._embedder is not None and self._semantic_version is not None:
            arms.append(SemanticArm(self._embedder, self._semantic_version, DIM))
        self._searcher = Searcher(db, arms, arm_limit=settings.search_candidates, faults=self._faults,
                                  policy=DEFAULT_POLICY if settings.relevance_floor else DEFAULT_POLICY.unfloored())
        self._attachment_queue = AttachmentQueue(db)
        #: The maintenance worker — attachment workers (``attachment_workers``, maybe none) and the
        #: one sweeper (expired artifacts, trace retention) — when this service sweeps or has workers.
        self._maintenance: MaintenanceWorker | None = (
            MaintenanceWorker.from_settings(settings, db, self._artifacts, self._ingestor)
            if settings.attachment_workers or settings.sweep_interval_seconds else None)

    @property
    def settings(self) -> Settings:
        """The settings this service was opened with (read-only)."""
        return self._settings

    @property
    def semantic_version(self) -> str | None:
        """The model version chunk sets are queued and searched under; None: the semantic arm is off."""
        return self._semantic_version

    @property
    def dsn(self) -> str:
        """The DSN of the database this service uses (the embedded server's, when it started or joined one)."""
        return self._db.dsn

    @property
    def faults(self) -> Faults:
        """The fault-injection seam handed to `open` (``faults=``), or an inert one: a test or the
        stress harness sets its hooks between calls."""
        return self._faults

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        settings: Settings | None = None,
        *,
        dsn: str | None = None,
        data_dir: Path | None = None,
        faults: Faults | None = None,
        semantic: SemanticParts | None = None,
        extractors: Sequence[Extractor] = (),
    ) -> AsyncIterator[KnowledgeService]:
        """Open the service; see the module docstring.

        ``settings`` defaults to `Settings.from_env` (``$KNOWLEDGE_DSN`` …); ``dsn`` and
        ``data_dir`` override it. ``faults`` is the fault-injection seam (`Faults`: hooks at the
        ingest's fault points, its retries' backoff) for tests and the stress harness; ``semantic``
        the semantic arm's parts made by the caller (`SemanticParts`: a test's seam), used instead of
        those ``settings`` would make. ``extractors``: the host's own adapters of the Extractor port
        (`knowledge.parsers.base.Extractor`) for media types the service does not read; sources that
        awaited one are ingested by `reextract`.

        Cancellation while opening: a server start in progress runs to completion (bounded by
        pg_ctl's timeout), everything opened so far is closed, and the cancellation propagates.
        """
        if settings is None:
            settings = Settings.from_env(dsn=dsn, data_dir=data_dir)
        else:
            settings = settings.model_copy(update={k: v for k, v in {"dsn": dsn, "data_dir": data_dir}.items() if v})
        # The service lives in a task of its own (`_serve`): the caller's task (a host's main task,
        # the one trio delivers Ctrl-C to and asyncio.run cancels) only waits — for the service to
        # be ready, in its calls (`call_in_group`), for it to close — and every wait there takes an
        # interruption as a cancellation of what it waits for. Opening, the database bridge (trio-
        # asyncio's loop), the pool and the task group are never interrupted halfway by a signal.
        held = HeldError()  # the host's own exception leaves the block as itself
        with keyboard_interrupt_at_checkpoints(), unwrapped():
            async with anyio.create_task_group() as owner:
                closing, ready = anyio.Event(), anyio.Event()
                opened: list[KnowledgeService] = []
                # Not `owner.start`: a start whose caller is interrupted as the service finishes
                # opening leaves the service's task where neither side can end it (trio's
                # `started()` into a cancelled start does not hand the task over; anyio's asyncio
                # start cancels it and waits) while the task waits, shielded, for `closing`.
                given = (faults, semantic, tuple(extractors))
                owner.start_soon(cls._serve, settings, given, closing, (ready, opened), owner.cancel_scope,
                                 name="knowledge.service")
                try:
                    await ready.wait()  # (the task failing to open cancels this wait; the group raises why)
                    with held:
                        yield opened[0]
                finally:
                    closing.set()  # however the block ends: the service closes after it, never beside it
        held.reraise()

    @classmethod
    async def _serve(cls, settings: Settings, given: tuple[Faults | None, SemanticParts | None, Sequence[Extractor]],
                     closing: anyio.Event,
                     opened: tuple[anyio.Event, list[KnowledgeService]], block: anyio.CancelScope) -> None:
        async with cls._opened(settings, *given) as svc:
            async def guard() -> None:
                """The service's task group ending before the host's block did (a background task
                failed) cancels the block, whose end closes the service and raises the failure."""
                try:
                    await anyio.sleep_forever()
                finally:
                    if not closing.is_set():
                        block.cancel()

            svc.start_background("block-guard", guard)
            ready, into = opened
            into.append(svc)
            ready.set()
            # A cancellation of the scopes around the host's block reaches the block; the service
            # waits for the block to end (its cleanup may still use the service) before it closes.
            with anyio.CancelScope(shield=True):
                await closing.wait()

    @classmethod
    @contextlib.asynccontextmanager
    async def _opened(cls, settings: Settings, faults: Faults | None, semantic: SemanticParts | None,
                      extractors: Sequence[Extractor] = ()) -> AsyncIterator[KnowledgeService]:
        async with open_bridge() as bridge:
            server: EmbeddedServer | None = None
            url = settings.dsn
            if url is None:
                server = await start_embedded_async(settings.data_dir)
                await ensure_database(server.dsn("postgres"), settings.database, bridge)
                url = server.dsn(settings.database)
            async with open_creating(
                url,
                bridge=bridge,
                min_size=settings.pool_min_size,
                max_size=settings.pool_max_size,
                application_name=settings.application_name,
            ) as db:
                if settings.migrate:
                    applied = await migrate(db)
                    if applied:
                        _log.info("applied migrations %s", applied)
                # The host's own exception leaves the block as itself, not as an ExceptionGroup.
                held = HeldError()
                async with contextlib.AsyncExitStack() as standbys, anyio.create_task_group() as tg:
                    with held:
                        replicas = [Replica(shown(dsn), await standbys.enter_async_context(Database.open(
                            dsn, bridge=bridge, min_size=0, max_size=settings.pool_max_size,
                            application_name=settings.application_name))) for dsn in settings.replica_dsns]
                        parts = await (semantic.start(db, tg) if semantic is not None
                                       else start_semantic(settings, db, tg))
                        svc = cls(settings, db, tg, server, parts, faults, extractors, replicas)
                        if replicas:
                            await svc._reads.check()  # (a replica down now is skipped until it answers)
                            svc.start_background("replica-watch", svc._reads.watch)
                        if svc._maintenance is not None:
                            svc.start_background("maintenance-worker", svc._maintenance.run)
                        svc.start_background("parser-spares", svc._parser_pool.keep_spares)
                        if svc._drain is not None and settings.semantic_backfill:
                            svc.start_background("semantic-backfill", svc._backfill)
                        yield svc
                    tg.cancel_scope.cancel()
                held.reraise()

    async def _backfill(self) -> None:
        try:
            queued = await self._enqueue_missing(self._settings.embedding_tenant)  # (None: every tenant)
            if queued:
                _log.info("semantic arm: queued %d chunks that had no %s vectors", queued, self._semantic_version)
        except Exception:
            _log.exception("semantic backfill failed; `knowledge docs reembed` (or a restart) resumes it")

    def _semantic(self) -> str:
        if self._semantic_version is None:
            raise ConfigurationError(message="this needs the semantic arm (semantic_arm=True)")
        return self._semantic_version

    async def _enqueue_missing(self, tenant_id: str | None) -> int:
        version = self._semantic()
        queued = await retry_transient("reembed", functools.partial(enqueue_missing, self._db, version, tenant_id))
        if self._drain is not None:
            self._drain.wake()
        return queued

    # --- The source store: what a host puts before it ingests, and the operator's expiry.

    @policy()
    async def put_artifact(
        self,
        tenant_id: str,
        data: bytes | AsyncIterable[bytes],
        *,
        media_type: str,
        origin: ArtifactOrigin = ArtifactOrigin.UPLOAD,
        trust: TrustLevel = TrustLevel.EXTERNAL_UNTRUSTED,
        file_name: str | None = None,
        expires_at: datetime | None = None,
    ) -> ArtifactRef:
        """Store a source (bytes, or an async iterable of them) and return its ref, for `ingest`.
        Raises `ArtifactTooLarge` above ``max_artifact_bytes``. Cancellation: nothing is stored."""
        return await self._artifacts.put(tenant_id, data, media_type=media_type, origin=origin, trust=trust,
                                         file_name=file_name, expires_at=expires_at)

    @policy(faults="retry")
    async def artifact_ref(self, tenant_id: str, artifact_id: UUID) -> ArtifactRef:
        """A stored source's ref (its hash, size, media type, origin, trust). Raises `ArtifactNotFound`."""
        return await self._artifacts.get_ref(tenant_id, artifact_id)

    @policy(faults="retry")
    async def read_artifact(self, ref: ArtifactRef) -> bytes:
        """All of a stored source's bytes (bounded by the store's size limit)."""
        return await self._artifacts.read(ref)

    @policy(faults="retry")
    async def expire_artifacts(self, tenant_id: str, artifact_ids: Sequence[UUID]) -> None:
        """Expire these sources now (the sweeper, or `sweep_artifacts`, collects their bytes)."""
        await self._artifacts.expire_now(tenant_id, artifact_ids)

    @policy()
    async def sweep_artifacts(self) -> int:
        """Delete every expired source, bytes and row, now; return how many (the sweeper does this each
        interval). Cancellation: batches already committed stay deleted."""
        return await self._artifacts.sweep()

    # --- The semantic arm.

    @policy()
    async def reembed(self, tenant_id: str | None = None, *, wait: bool = True) -> int:
        """Queue, under the configured model version, every chunk set (of one tenant, or all; live,
        superseded and re-chunked alike) that has a chunk without a vector under it — embedded from
        stored chunk text, no re-upload, no re-chunking; vectors of other versions stay — and, with
        ``wait``, wait until the tenant's queue is drained. Returns the number of chunks queued.
        Requires the semantic arm. Cancellation: the wait stops; what was queued stays queued."""
        queued = await self._enqueue_missing(tenant_id)
        if wait and tenant_id is not None:
            await self._until_drained(tenant_id, None)
        return queued

    @policy()
    async def wait_embedded(self, document_id: UUID | None = None, *, tenant_id: str) -> None:
        """Return once every chunk set of a document (or, with None, of the tenant) queued for the
        semantic arm has its vectors (ingest returns before they exist; at once if nothing is
        queued). Bound it the structured way: ``with anyio.move_on_after(30): await
        svc.wait_embedded(doc.document_id, tenant_id=...)``. Requires the semantic arm.
        Cancellation: the wait stops; nothing changes."""
        await self._until_drained(tenant_id, document_id)

    async def _until_drained(self, tenant_id: str, document_id: UUID | None) -> None:
        version = self._semantic()
        while await retry_transient("wait_embedded", functools.partial(pending, self._db, version, tenant_id,
                                                                       document_id)):
            if self._drain is not None:
                await self._drain.progressed(at_most=1.0)  # another process's drain may be the one at work
            else:  # only another process's drain embeds (``semantic_model=False``)
                await anyio.sleep(1.0)

    @policy(faults="retry")
    async def embedding_backlog(self, tenant_id: str | None = None) -> Backlog:
        """What waits for the semantic arm (of one tenant, or all): chunk sets and chunks, the
        oldest wait, this process's drain rate (0 where this process queues for the arm without
        loading the model: ``semantic_model=False``). Requires the semantic arm."""
        version = self._semantic()
        if self._drain is None:
            return await queue_backlog(self._db, version, tenant_id)
        return await self._drain.backlog(tenant_id)

    @policy(faults="retry")
    async def queued_for(self, version: str, tenant_id: str | None = None) -> Backlog:
        """What waits for vectors under model ``version``, read from the queue without the arm in
        this process (a read-only command never starts the model): the rate is 0."""
        return await queue_backlog(self._db, version, tenant_id)

    @policy()
    async def semantic_ready(self, *, within: float) -> bool:
        """Wait up to ``within`` seconds for this process's embedder to serve (a fresh process loads
        its model first); whether it does. False at once without the semantic arm's model here."""
        if self._embedder is None:
            return False
        with anyio.move_on_after(within):
            await self._embedder.wait_ready()
        return self._embedder.serving

    # --- Ingest, search, citations, versions, deletion.

    @policy(in_group=True, writes=True)
    async def ingest(
        self,
        source: ArtifactRef,
        title: str,
        visibility: Visibility | str,
        principal: Principal,
        *,
        origin_trust: TrustLevel,
        project_scope: str | None = None,
        doc_date: date | None = None,
        authority: Authority | str = Authority.PRINCIPAL_SUPPLIED,
        sensitivity: Sensitivity | str = Sensitivity.INTERNAL,
        document_id: UUID | None = None,
        replaces: UUID | None = None,
    ) -> KnowledgeDocument:
        """``knowledge.ingest``: the seven steps in one transaction (see `knowledge.ingest`).

        ``origin_trust`` is the calling turn's; ``replaces`` ingests a new version of that document
        (its previous version stays readable by ``as_of``). Raises `IngestRefused` (with a reason code) and
        writes nothing but an outcome counter when refused. Runs as a task of the service: closing
        the service cancels it (`ServiceClosed`); cancelling the caller rolls it back first.
        """
        request = IngestRequest(
            source=source, title=title, visibility=Visibility(visibility), principal=principal,
            origin_trust=origin_trust, project_scope=project_scope, doc_date=doc_date,
            authority=Authority(authority), sensitivity=Sensitivity(sensitivity), document_id=document_id,
            replaces=replaces,
        )
        return await self._ingestor.ingest(request)

    @policy(in_group=True, writes=True)
    async def ingest_many(self, requests: Sequence[IngestRequest], *, on_done: OnDone | None = None
                          ) -> list[Outcome]:
        """``knowledge.ingest`` for many documents at once (`knowledge.ingest.bulk`): preparing the
        next documents while the server writes the previous group, a group of documents in one
        statement. Each document is all-or-nothing and gets its own outcome — its document, or the
        typed error (`IngestRefused` with its reason, or a failure) — at its request's index, and
        ``on_done(index, outcome)`` is called as each commits or is refused. A new version
        (``replaces``) takes the single path. Runs as a task of the service. Cancellation: the group
        in flight rolls back; documents already reported to ``on_done`` as committed stay."""
        return await ingest_many(self._ingestor, list(requests), on_done)

    @policy(in_group=True, faults="retry")
    async def search(self, query: KnowledgeQuery) -> list[RetrievedPassage]:
        """``knowledge.search``: ranked, cited passages admitted for ``query``'s principal, whole, within
        its budget. Results carry `TrustLevel.KNOWLEDGE`. Runs as a task of the service (closing the
        service cancels it with `ServiceClosed`); cancelling the caller cancels the query."""
        return await self._reads.read(
            lambda db: (self._searcher if db is self._db else replace(self._searcher, db=db)).search(query))

    def retrieval(self) -> RetrievalStatus:
        """How this process retrieves, and what its arms did since the service opened (no database read)."""
        return RetrievalStatus(ranking=self._searcher.policy.name, arms=[arm.name for arm in self._searcher.arms],
                               searches_without_arm=dict(self._searcher.without),
                               embedded_chunks=self._drain.embedded_chunks if self._drain is not None else 0)

    @policy(faults="retry")
    async def get_chunk(self, chunk_id: str, *, viewer: Viewer) -> KnowledgeChunk | DeletedChunk | None:
        """Resolve a citation (a chunk id) for a person — a click on a cited passage: the chunk
        (whichever version or chunk set holds it) if its document version is visible to ``viewer``
        as a search would have admitted it (visibility, project, sensitivity ceiling), a
        `DeletedChunk` if its document was deleted, else None (a passage they may not see reads as
        one that never existed). The operator's tenant-wide resolution is `operator_get_chunk`."""
        return await self._reads.read(lambda db: catalog.viewed_chunk(db, viewer, chunk_id))

    @policy(faults="retry")
    async def operator_get_chunk(self, chunk_id: str, *, tenant_id: str) -> KnowledgeChunk | DeletedChunk | None:
        """The operator's resolution of a chunk id: anywhere in the tenant, whatever its visibility
        (`knowledge chunk show`); never for a person's view (`get_chunk`)."""
        return await catalog.resolve_chunk(self._db, tenant_id, chunk_id)

    @policy(in_group=True, writes=True)
    async def reextract(self, tenant_id: str | None = None, *, media_type: str | None = None) -> Reextracted:
        """Re-run ingestion over stored sources, never asking for a re-upload (`knowledge.ingest.reextract`):
        sources refused as ``unsupported_media_type`` (kept thirty days) whose type now has an
        extractor become documents, such attachments become pending, and live documents whose
        extractor's version changed get a new version from their own source. Of one tenant or all,
        of one media type or all. Expired and deleted sources are never read. Runs as a task of the
        service. Cancellation: documents committed before stay."""
        done = await reextract(self._ingestor, tenant_id=tenant_id, media_type=media_type)
        if done.attachments and self._maintenance is not None:
            self._maintenance.wake()
        return done

    @policy(in_group=True, faults="typed", writes=True)
    async def rechunk(self, document_id: UUID, chunker: Chunker, principal: Principal) -> int:
        """Re-chunk a document's live version under another chunker version from its stored
        source (no re-upload); see `Ingestor.rechunk`. Runs as a task of the service."""
        return await self._ingestor.rechunk(document_id, chunker, principal)

    def chunker_for(self, media_type: str) -> Chunker:
        """The chunker ingest uses for a media type (Markdown's headings, else paragraphs)."""
        structured = self._extractors.for_media_type(media_type).structure == "markdown"
        return MarkdownChunker() if structured else PlainTextChunker()

    @policy(in_group=True, writes=True)
    async def delete(self, document_id: UUID, principal: Principal) -> int:
        """Delete every version of a document, its chunks, index rows and postings, and expire its
        source (the sweeper collects the bytes); returns the number of chunks deleted. Raises
        `DeleteRefused`. Runs as a task of the service; cancellation rolls it back."""
        return await delete_document(self._db, document_id, principal)

    @policy(in_group=True)
    async def inspect_pdf(self, data: bytes) -> dict[str, Any]:
        """Upload inspection of a PDF (10 s from getting a parser slot) in a parser child: page count,
        encryption, outline. Raises `ExtractionRefused`/`ParserFailure` with a reason code.
        Cancellation: the child is killed and reaped first."""
        return await self._parser_pool.inspect(data)

    @policy(faults="retry")
    async def ingest_stats(self, tenant_id: str | None = None, since: date | None = None) -> IngestStats:
        """The tracked metrics "ingestion outcomes" (from ``since``, a day; default: ever) and
        "instruction-like rate" (of the live corpus), for one tenant or all."""
        return await ingest_stats(self._db, tenant_id, since)

    @policy()
    async def count_refusal(self, tenant_id: str, reason: str) -> None:
        """Count an ingest refused before it reached the service (the tool layer's ``missing_scope``,
        ``origin_trust``, ``invalid_arguments``) with the ingestion outcomes. Never raises: a count
        that cannot be written is logged."""
        await self._ingestor.count_refusal(tenant_id, reason)

    @policy(faults="retry")
    async def ingest_trend(self, tenant_id: str | None = None, since: date | None = None) -> list[IngestDay]:
        """The same metrics day by day (`knowledge.store.metrics.IngestDay`): refusals by cause and
        the instruction-like rate of what was ingested each day, from ``since``."""
        return await ingest_trend(self._db, tenant_id, since)

    # --- The operator's read-side view (`knowledge.store.catalog`): tenant-scoped, visibility not applied.
    # --- Read-only; cancellation propagates and leaves no connection checked out.

    @policy(faults="retry")
    async def documents(self, tenant_id: str, *, project: str | None = None, ingested_by: str | None = None,
                        limit: int | None = None, title: str | None = None,
                        since: datetime | None = None) -> list[catalog.DocumentSummary]:
        """The tenant's live documents, newest first (the operator's listing, not retrieval);
        filters as `catalog.list_documents`."""
        return await self._reads.read(lambda db: catalog.list_documents(
            db, tenant_id, project=project, ingested_by=ingested_by, limit=limit, title=title, since=since))

    @policy(faults="retry")
    async def document(self, document_id: UUID, *, tenant_id: str) -> catalog.DocumentDetail | None:
        """A live document, its source and its live chunks (no text); None if absent or deleted."""
        return await self._reads.read(lambda db: catalog.document_detail(db, tenant_id, document_id))

    @policy(faults="retry")
    async def document_summaries(self, document_ids: Sequence[UUID], *, tenant_id: str
                                 ) -> dict[UUID, catalog.DocumentSummary]:
        """The live version of each of these documents that is live, by document id."""
        return await self._reads.read(lambda db: catalog.live_documents(db, tenant_id, list(document_ids)))

    @policy(faults="retry")
    async def document_versions(self, document_id: UUID, *, tenant_id: str) -> list[catalog.VersionInfo]:
        """Every version of a document still held, oldest first, with sources and chunk sets."""
        return await self._reads.read(lambda db: catalog.document_versions(db, tenant_id, document_id))

    @policy(faults="retry")
    async def operator_resolve_citation(self, chunk_id: str, *, tenant_id: str
                                        ) -> catalog.Citation | DeletedChunk | None:
        """The operator's resolution of a citation: a chunk id resolved to its passage, document
        version and source anywhere in the tenant, whatever its visibility; `DeletedChunk` if
        deleted. Never for a person's view: `get_chunk` checks the viewer."""
        return await catalog.resolve_citation(self._db, tenant_id, chunk_id)

    @policy(faults="retry")
    async def document_ids_starting(self, tenant_id: str, prefix: str) -> list[UUID]:
        """The tenant's document ids starting with ``prefix`` (hex digits), at most six."""
        return await catalog.document_ids_starting(self._db, tenant_id, prefix)

    @policy(faults="retry")
    async def tenants(self) -> list[catalog.TenantSummary]:
        """Every tenant the store knows (the operator's view: not scoped to one tenant)."""
        return await catalog.tenants(self._db)

    @policy(faults="retry")
    async def tenant_known(self, tenant_id: str) -> bool:
        """Whether anything was ever put or ingested in ``tenant_id``."""
        return await catalog.tenant_known(self._db, tenant_id)

    @policy(faults="retry")
    async def corpus_size(self, tenant_id: str) -> catalog.CorpusSize:
        """The tracked metric "corpus size": live documents, versions, chunks, tokens, source bytes."""
        return await self._reads.read(lambda db: catalog.corpus_size(db, tenant_id))

    @policy(faults="retry")
    async def passages_given(self, tenant_id: str) -> catalog.PassagesGiven | None:
        """How many passages the retained traces say the agent was given (turns and tool calls);
        None without trace tables. What it cited: `citation_stats`."""
        return await catalog.passages_given(self._db, tenant_id)

    # --- Turns, tool calls, answers and their traces.

    @policy(in_group=True, faults="typed")
    async def turn(self, request: TurnRequest) -> TurnResult:
        """One turn's knowledge (`knowledge.retrieval.turn.run_turn`): where pre-turn retrieval is on
        (``request.retrieve``, else `Settings.preturn_retrieval`: off by default) retrieve under the
        knowledge class's allowance, budget Region B beside ``request.beliefs`` (knowledge yields first), render the
        ``<knowledge>`` block and commit its trace; the block is returned only with its trace
        committed. Runs as a task of the service (closing it raises `ServiceClosed`); cancelling the
        caller rolls the trace back and returns nothing."""
        if request.retrieve is None:
            request = request.model_copy(update={"retrieve": self._settings.preturn_retrieval})
        return await run_turn(self._db, self._searcher, request)

    @policy(in_group=True, faults="typed")
    async def tool_search(self, query: KnowledgeQuery, *, trace_id: UUID | None = None,
                          session_id: str | None = None, turn_id: str | None = None) -> ToolSearch:
        """``knowledge.search`` as the agent calls it (the tool handler's path): search, render the
        block the tool returns and append it, with its passages, to the turn's trace ``trace_id``
        (the turn's `TurnResult.trace`; it must be ``query``'s principal's, and its recall ceiling
        caps the search's) — or, without one, to a trace of the call's own — in one transaction
        (`knowledge.retrieval.turn.run_tool_search`). Raises `ToolRefused` (``unknown_trace``). Runs
        as a task of the service; cancelling the caller returns nothing and traces nothing."""
        return await run_tool_search(self._db, self._searcher, query, trace_id=trace_id, session_id=session_id,
                                     turn_id=turn_id)

    @policy(in_group=True, faults="typed")
    async def record_answer(self, trace_id: UUID, answer: str, *, tenant_id: str) -> RecordedAnswer:
        """Record the agent's ``answer`` for the turn whose trace is ``trace_id``: the chunk ids it
        cites are found (any wrapping: ``[kc_…]``, ``(kc_…)``, bare …; see `knowledge.core.citations`),
        each tied to the claim it stands beside and judged against every passage the turn showed
        the agent — its block and its ``knowledge.search`` results; an id it never showed is
        *hallucinated* and never resolved; each claim is checked against the passage it cites
        (`knowledge.core.support`: supported or not), and the passages the answer drew on are found
        (a sentence they support, cited or not) — and stored with the trace (the answer's hash, not
        its text) and in the citation counters (`citation_stats`: accuracy and rate), in one
        transaction. A turn may record several answers. Raises `TraceNotFound` (``unknown_trace``).
        Runs as a task of the service; cancelling the caller records nothing."""
        recorded = await record_answer(self._db, self._embedder, tenant_id, trace_id, answer)
        if recorded is None:
            raise TraceNotFound(message=f"no trace {trace_id} in tenant {tenant_id}")
        return recorded

    @policy(faults="retry")
    async def citation_stats(self, tenant_id: str | None = None, since: date | None = None) -> CitationStats:
        """The tracked citation metrics from the recorded answers (per tenant, or all, from a UTC
        day): answers, answers citing, citations, hallucinated citations, citation accuracy
        (supported / judged citations) and citation rate (answers citing every passage they drew on
        / answers that drew on one).
        Cancellation: the read is cancelled; nothing to undo."""
        return await citation_stats(self._db, tenant_id, since)

    @policy(faults="retry")
    async def operator_trace(self, trace_id: UUID, *, tenant_id: str) -> RecallTrace | None:
        """The operator's read of a turn's `RecallTrace` as stored (beliefs, passages and tool calls in
        one record, nothing filtered), or None. Never for a person: `trace_view` checks the viewer.
        Cancellation: the read is cancelled; nothing to undo."""
        return await load_trace(self._db, tenant_id, trace_id)

    @policy(faults="retry")
    async def trace_view(self, trace_id: UUID, *, viewer: Viewer) -> RecallTraceView | None:
        """A trace as ``viewer`` may see it — None unless ``viewer`` is the principal whose turn it
        was (a turn's query, beliefs and what the agent was given are that principal's: to anyone
        else the trace reads as one that never existed). Items above the stricter of the recall
        ceiling and the viewer's, and passages of documents the viewer may not see now (their
        scope, a changed visibility), are withheld and counted; deleted passages are shown as
        deleted with their chunk id. The operator's view: `operator_trace_view`.
        Cancellation: the reads are cancelled; nothing to undo."""
        return await view_trace(self._db, viewer.tenant_id, trace_id, viewer.sensitivity_ceiling, viewer)

    @policy(faults="retry")
    async def operator_trace_view(
        self, trace_id: UUID, *, tenant_id: str, viewing_ceiling: Sensitivity | str
    ) -> RecallTraceView | None:
        """A trace as an operator's viewing surface sees it: only the two ceilings apply (the
        passages' visibility does not). Cancellation: the reads are cancelled; nothing to undo."""
        return await view_trace(self._db, tenant_id, trace_id, Sensitivity(viewing_ceiling))

    @policy(faults="retry")
    async def check_trace(self, trace_id: UUID, *, tenant_id: str) -> TraceCheck:
        """Whether a trace's passages, resolved by chunk id and re-rendered, reproduce its block's hash.
        Cancellation: the reads are cancelled; nothing to undo."""
        return await check_trace(self._db, tenant_id, trace_id)

    @policy(faults="retry")
    async def budget_pressure(self, tenant_id: str | None = None, since: date | None = None) -> BudgetPressure:
        """The tracked metric "budget pressure": how often and how much the knowledge class yielded
        (per tenant, or all, from a UTC day). Cancellation: the read is cancelled; nothing to undo."""
        return await budget_pressure(self._db, tenant_id, since)

    @policy()
    async def prune_traces(self, retention: TraceRetention = TRACE_RETENTION) -> PruneResult:
        """Apply the traces' two-tier retention schedule now (the sweeper does this each interval).
        Cancellation: the batch in flight rolls back."""
        return await prune_traces(self._db, retention=retention)

    # --- Owner-sent attachments (ADR-0120) and the maintenance worker.

    @policy(faults="typed")  # retries inside, past the inspection
    async def upload_attachment(self, tenant_id: str, data: bytes, *, media_type: str, file_name: str | None,
                                expires_at: datetime | None = None) -> ArtifactRef:
        """Store a chat attachment (ADR-0120) as an ``UPLOAD`` artifact, trust ``EXTERNAL_UNTRUSTED``;
        a PDF gets upload inspection first (the parser pool's 10 s ``inspect``) and its marker is kept on
        the artifact. Raises `ArtifactTooLarge`. Cancellation: the inspection's child is killed and
        reaped, and nothing is stored."""
        return await upload_attachment(self._db, self._parser_pool.inspect, tenant_id, data, media_type=media_type,
                                       file_name=file_name, max_bytes=self._settings.max_artifact_bytes,
                                       expires_at=expires_at)

    @policy(faults="retry")  # idempotent
    async def mark_attachments(self, actor: MessageActor, artifact_ids: Iterable[UUID], *,
                               conversation_id: str) -> list[AttachmentMark]:
        """A message was sent with these attachments (`knowledge.ingest.attachments.mark_attachments`): each
        is recorded with the conversation and marked ``pending`` only if ``actor`` is the principal
        holding ``knowledge.write`` and its media type is supported; this process's attachment workers
        are woken. Cancellation: nothing is marked."""
        marks = await mark_attachments(self._db, actor, list(artifact_ids), conversation_id=conversation_id,
                                       media_types=self._extractors.media_types())
        if self._maintenance is not None:
            self._maintenance.wake()
        return marks

    @policy(faults="retry")
    async def attachment(self, tenant_id: str, artifact_id: UUID) -> AttachmentStatus | None:
        """An attachment's state, reason, attempts and their history, and its document; None if gone."""
        return await self._attachment_queue.status(tenant_id, artifact_id)

    @policy(faults="retry")
    async def attachment_overview(self, tenant_id: str) -> QueueOverview:
        """A tenant's attachments by state and reason, expired leases and the oldest pending one's age
        (`knowledge.ingest.attachments.QueueOverview`). Cancellation: propagates; nothing changes."""
        return await self._attachment_queue.overview(tenant_id)

    @policy(in_group=True, writes=True)
    async def delete_conversation(self, tenant_id: str, conversation_id: str) -> ConversationDeleted:
        """Delete a conversation's attachments and, through the deletion cascade, the documents ingested
        from them (`knowledge.store.deletion.delete_conversation`); the sweeper collects the bytes. Runs as a
        task of the service; cancellation rolls it back."""
        return await delete_conversation(self._db, tenant_id, conversation_id)

    @policy()
    async def worker_status(self) -> MaintenanceStatus | None:
        """The maintenance worker's supervisor counters (crashes, restarts, last error, crash loop),
        its workers' counters and the queue's depth; None if this service runs no worker."""
        return await self._maintenance.status() if self._maintenance is not None else None

    def worker_snapshot(self) -> MaintenanceStatus | None:
        """The maintenance worker's counters as this process holds them (no database read; also
        after the service closed); None if this service runs no worker."""
        return self._maintenance.snapshot() if self._maintenance is not None else None

    def start_background(self, name: str, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` in the service's task group: cancelled and awaited on close."""
        self._task_group.start_soon(fn, *args, name=name)

    @policy()
    async def health(self) -> Health:
        """Round-trip the database and report; never raises for a database failure.

        Cancellation: propagates; nothing is left checked out."""
        began = time.perf_counter()
        expected = len(await anyio.to_thread.run_sync(discover))  # reads the package's files
        server = self._server
        common: dict[str, Any] = {
            "backend": self._db.backend,
            "embedded": server is not None,
            "data_dir": str(self._settings.data_dir) if server else None,
            "server_start": ServerStart(pgdata=str(server.pgdata), cold_start=server.cold_start, reused=server.reused,
                                        start_seconds=server.start_seconds) if server else None,
            "schema_expected": expected,
            "pool": self._db.pool_stats(),
            "parsers": ParserStatus(in_jobs=len(self._parser_pool.live), spares=self._parser_pool.spares()),
            "replicas": [ReplicaStatus(name=r.name, healthy=r.healthy, why=r.why, reads=r.reads)
                         for r in self._reads.replicas],
            "primary_reads": self._reads.primary_reads,
            "workers": self._maintenance.snapshot() if self._maintenance else None,
            "semantic": SemanticStatus(model_version=self._semantic_version,
                                       child_running=self._embedder.pid is not None, child_pid=self._embedder.pid,
                                       restarts=self._embedder.restarts,
                                       searches_without_arm=self._searcher.without[SemanticArm.name])
            if self._embedder is not None and self._semantic_version is not None else None,
        }
        try:
            identity = await server_identity(self._db)
            versions = await applied_versions(self._db)
            if common["semantic"] is not None and self._drain is not None:
                common["semantic"].backlog = await self._drain.backlog()
            if self._semantic_version is None:
                common["semantic_unavailable"] = await missing_reason(self._db)
        except Exception as exc:
            return Health(ok=False, server_version=None, database=None, schema_version=0,
                          latency_ms=(time.perf_counter() - began) * 1000, error=repr(exc), **common)
        schema_version = max(versions, default=0)
        return Health(
            ok=schema_version == expected and not (self._maintenance and self._maintenance.snapshot().crash_looping),
            server_version=identity.version,
            database=identity.database,
            schema_version=schema_version,
            latency_ms=(time.perf_counter() - began) * 1000,
            **common,
        )
