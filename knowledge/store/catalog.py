"""The corpus as an operator audits it: documents, versions, citations and sizes (read-only SQL).

Every function is scoped to one tenant and reads what the store holds regardless of visibility:
this is the operator's view (``knowledge docs …``, ``knowledge stats``), not retrieval, which
resolves visibility against the querying principal. Nothing here writes; each function is one or
two queries and returns pydantic models, so the CLI can print them as tables or as JSON.

Cancellation: every function propagates it; nothing is left checked out.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from datetime import date, datetime
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from knowledge.models import DeletedChunk, KnowledgeChunk, Viewer
from knowledge.store.db import Database, Record
from knowledge.store.visibility import visible

_FROZEN = ConfigDict(frozen=True, extra="forbid")
T = TypeVar("T")


class SourceInfo(BaseModel):
    """The source artifact a document version keeps (origin ``KNOWLEDGE_SOURCE``)."""

    model_config = _FROZEN

    artifact_id: UUID
    sha256: str
    size_bytes: int
    media_type: str
    file_name: str | None
    origin: str
    created_at: datetime
    expires_at: datetime | None


class DocumentSummary(BaseModel):
    """One version of a document with the size of its live chunk set."""

    model_config = _FROZEN

    document_id: UUID
    version: int
    title: str
    visibility: str
    project_scope: str | None
    media_type: str
    authority: str
    sensitivity: str
    doc_date: date | None
    ingested_by: str
    ingested_at: datetime
    valid_from: datetime
    valid_to: datetime | None  # None while this version is the live one
    chunker_version: str
    chunks: int
    tokens: int
    instruction_like_chunks: int
    source_sha256: str
    source_bytes: int

    @property
    def live(self) -> bool:
        return self.valid_to is None


class ChunkSummary(BaseModel):
    """A chunk without its text: what a listing shows."""

    model_config = _FROZEN

    chunk_id: str
    ordinal: int
    heading_path: list[str]
    tokens: int
    instruction_like: bool


class DocumentDetail(BaseModel):
    """A document's live version, its source and its live chunk set, and how many versions it has."""

    model_config = _FROZEN

    document: DocumentSummary
    source: SourceInfo
    versions: int
    chunks: list[ChunkSummary]


class ChunkSetInfo(BaseModel):
    model_config = _FROZEN

    chunker_version: str
    chunk_count: int
    created_at: datetime
    superseded_at: datetime | None  # re-chunked under another chunker version


class VersionInfo(BaseModel):
    """One version of a document, with its source and every chunk set it was chunked into."""

    model_config = _FROZEN

    document: DocumentSummary
    superseded_by: UUID | None
    source: SourceInfo
    chunk_sets: list[ChunkSetInfo]


class Citation(BaseModel):
    """What a chunk id resolves to: the passage, the document version holding it, and its source."""

    model_config = _FROZEN

    chunk: KnowledgeChunk
    document: DocumentSummary
    source: SourceInfo
    #: Whether live retrieval can return this passage now: its version is the live one and its
    #: chunk set is the one live retrieval reads (not re-chunked away).
    live: bool


class CorpusSize(BaseModel):
    """The tracked metric "corpus size" for one tenant."""

    model_config = _FROZEN

    documents: int  # live documents
    versions: int  # every version still held (superseded ones stay readable by as_of)
    chunks: int  # live chunks: the live version's live chunk set
    tokens: int  # tokens of the live chunks
    instruction_like_chunks: int
    source_bytes: int  # bytes of the live versions' sources
    retained_source_bytes: int  # bytes of every version's source
    deleted_chunks: int  # tombstones: citations that resolve to "deleted"


class GivenDocument(BaseModel):
    model_config = _FROZEN

    document_id: UUID
    title: str | None  # None once the document is deleted (its traces forget titles)
    passages: int


class PassagesGiven(BaseModel):
    """How many passages the traces say the agent was given — turns' blocks and ``knowledge.search``
    results — within trace retention. Not citations: what the agent cited is in its recorded
    answers (`knowledge.store.answers.citation_stats`)."""

    model_config = _FROZEN

    traces: int  # traces kept (turns, and searches outside a turn)
    traces_with_passages: int
    passages: int  # passages given, summed over traces
    distinct_chunks: int
    distinct_documents: int
    since_deleted: int  # passages whose chunk has since been deleted
    top_documents: list[GivenDocument]


# --- SQL ---------------------------------------------------------------------------------------------------

# One row per document version, with its live chunk set's size and its source's size.
_SUMMARY = """
SELECT d.document_id, d.version, d.title, d.visibility, d.project_scope, d.media_type, d.authority,
       d.sensitivity, d.doc_date, d.ingested_by_principal_id AS ingested_by, d.ingested_at, d.valid_from,
       d.valid_to, d.chunker_version, d.superseded_by, d.source_artifact_id,
       a.sha256 AS source_sha256, a.size_bytes AS source_bytes,
       coalesce(c.chunks, 0) AS chunks, coalesce(c.tokens, 0) AS tokens,
       coalesce(c.flagged, 0) AS instruction_like_chunks
FROM knowledge_documents d
JOIN artifacts a ON a.tenant_id = d.tenant_id AND a.artifact_id = d.source_artifact_id
LEFT JOIN LATERAL (
    SELECT count(*)::bigint AS chunks, sum(k.tokens)::bigint AS tokens,
           count(*) FILTER (WHERE k.contains_instruction_like_text)::bigint AS flagged
    FROM knowledge_chunks k
    WHERE k.tenant_id = d.tenant_id AND k.document_id = d.document_id AND k.version = d.version
      AND k.chunker_version = d.chunker_version
) c ON true
"""

_SOURCE = """
SELECT artifact_id, sha256, size_bytes, media_type, file_name, origin, created_at, expires_at
FROM artifacts WHERE tenant_id = $1 AND artifact_id = $2
"""


def _summary(row: Record) -> DocumentSummary:
    return DocumentSummary(**{k: row[k] for k in DocumentSummary.model_fields})


def _source(row: Record) -> SourceInfo:
    return SourceInfo(**{k: row[k] for k in SourceInfo.model_fields})


async def list_documents(
    db: Database, tenant_id: str, *, project: str | None = None, ingested_by: str | None = None,
    limit: int | None = None, title: str | None = None, since: datetime | None = None,
) -> list[DocumentSummary]:
    """The tenant's live documents, newest first; optionally one project's, one principal's, those
    whose title contains ``title`` (case-insensitive), those ingested at or after ``since``."""
    rows = await db.fetch(
        _SUMMARY + """
        WHERE d.tenant_id = $1 AND d.valid_to IS NULL
          AND ($2::text IS NULL OR d.project_scope = $2) AND ($3::text IS NULL OR d.ingested_by_principal_id = $3)
          AND ($5::text IS NULL OR strpos(lower(d.title), lower($5)) > 0)
          AND ($6::timestamptz IS NULL OR d.ingested_at >= $6)
        ORDER BY d.ingested_at DESC, d.document_id LIMIT $4""",
        tenant_id, project, ingested_by, limit, title, since)
    return [_summary(r) for r in rows]


async def live_document(db: Database, tenant_id: str, document_id: UUID) -> DocumentSummary | None:
    """The live version of a document, or None (never ingested, or deleted)."""
    return (await live_documents(db, tenant_id, [document_id])).get(document_id)


async def live_documents(db: Database, tenant_id: str, document_ids: list[UUID]) -> dict[UUID, DocumentSummary]:
    """The live versions of those of ``document_ids`` that have one, by id."""
    rows = await db.fetch(
        _SUMMARY + " WHERE d.tenant_id = $1 AND d.document_id = ANY($2::uuid[]) AND d.valid_to IS NULL",
        tenant_id, document_ids)
    return {row["document_id"]: _summary(row) for row in rows}


async def document_detail(db: Database, tenant_id: str, document_id: UUID) -> DocumentDetail | None:
    """A live document with its source and its live chunks (without their text), or None."""
    row = await db.fetchrow(_SUMMARY + " WHERE d.tenant_id = $1 AND d.document_id = $2 AND d.valid_to IS NULL",
                            tenant_id, document_id)
    if row is None:
        return None
    document = _summary(row)
    source = await db.fetchrow(_SOURCE, tenant_id, row["source_artifact_id"])
    assert source is not None  # the foreign key keeps a document's source
    versions = await db.fetchval(
        "SELECT count(*) FROM knowledge_documents WHERE tenant_id = $1 AND document_id = $2", tenant_id, document_id)
    chunks = await db.fetch(
        """SELECT chunk_id, ordinal, heading_path, tokens, contains_instruction_like_text AS instruction_like
           FROM knowledge_chunks
           WHERE tenant_id = $1 AND document_id = $2 AND version = $3 AND chunker_version = $4 ORDER BY ordinal""",
        tenant_id, document_id, document.version, document.chunker_version)
    return DocumentDetail(
        document=document, source=_source(source), versions=int(versions),
        chunks=[ChunkSummary(chunk_id=r["chunk_id"], ordinal=r["ordinal"], heading_path=list(r["heading_path"]),
                             tokens=r["tokens"], instruction_like=r["instruction_like"]) for r in chunks],
    )


async def document_versions(db: Database, tenant_id: str, document_id: UUID) -> list[VersionInfo]:
    """Every version of a document still held, oldest first (empty: none, or deleted)."""
    rows = await db.fetch(
        _SUMMARY + " WHERE d.tenant_id = $1 AND d.document_id = $2 ORDER BY d.version",
        tenant_id, document_id)
    sets = await db.fetch(
        """SELECT version, chunker_version, chunk_count, created_at, superseded_at FROM knowledge_chunk_sets
           WHERE tenant_id = $1 AND document_id = $2 ORDER BY version, created_at""", tenant_id, document_id)
    sources = await db.fetch(
        """SELECT artifact_id, sha256, size_bytes, media_type, file_name, origin, created_at, expires_at
           FROM artifacts WHERE tenant_id = $1 AND artifact_id = ANY($2::uuid[])""",
        tenant_id, [r["source_artifact_id"] for r in rows])
    by_id = {s["artifact_id"]: _source(s) for s in sources}
    return [
        VersionInfo(
            document=_summary(r), superseded_by=r["superseded_by"], source=by_id[r["source_artifact_id"]],
            chunk_sets=[ChunkSetInfo(chunker_version=s["chunker_version"], chunk_count=s["chunk_count"],
                                     created_at=s["created_at"], superseded_at=s["superseded_at"])
                        for s in sets if s["version"] == r["version"]],
        )
        for r in rows
    ]


# --- raw reads for the demo and the stress tools (whatever the visibility) ---

# The chunk ids of a document version (every chunk set): $1 tenant, $2 document, $3 version.
VERSION_CHUNK_IDS = "SELECT chunk_id FROM knowledge_chunks WHERE tenant_id = $1 AND document_id = $2 AND version = $3"

# The token counts of documents' chunks (every version and chunk set): $1 tenant, $2 document ids.
CHUNK_TOKENS = "SELECT tokens FROM knowledge_chunks WHERE tenant_id = $1 AND document_id = ANY($2::uuid[])"

# A tenant's live document ids: $1 tenant.
LIVE_DOCUMENT_IDS = "SELECT DISTINCT document_id FROM knowledge_documents WHERE tenant_id = $1 AND valid_to IS NULL"

# A tenant's document rows (every version): $1 tenant.
DOCUMENT_ROWS = "SELECT count(*) FROM knowledge_documents WHERE tenant_id = $1"


_CHUNK_SQL = """
SELECT c.chunk_id, c.document_id, c.version, c.ordinal, c.heading_path, c.text, c.tokens,
       c.contains_instruction_like_text, c.content_sha256
FROM knowledge_chunks c WHERE c.tenant_id = $1 AND c.chunk_id = $2
"""


async def get_chunk(db: Database, tenant_id: str, chunk_id: str) -> KnowledgeChunk | None:
    """Resolve a citation within a tenant: the chunk, whichever version or chunk set it is in."""
    row = await db.fetchrow(_CHUNK_SQL, tenant_id, chunk_id)
    if row is None:
        return None
    return KnowledgeChunk(
        chunk_id=row["chunk_id"], document_id=row["document_id"], version=row["version"], ordinal=row["ordinal"],
        heading_path=list(row["heading_path"]), text=row["text"], tokens=row["tokens"],
        contains_instruction_like_text=row["contains_instruction_like_text"], content_sha256=row["content_sha256"],
    )



async def deleted_chunk(db: Database, tenant_id: str, chunk_id: str) -> DeletedChunk | None:
    row = await db.fetchrow(
        "SELECT chunk_id, document_id, deleted_at FROM knowledge_deleted_chunks WHERE tenant_id = $1 AND chunk_id = $2",
        tenant_id, chunk_id)
    return DeletedChunk(**dict(row)) if row is not None else None


async def resolve_chunk(db: Database, tenant_id: str, chunk_id: str) -> KnowledgeChunk | DeletedChunk | None:
    """A citation within a tenant: its chunk (live or in an old version or chunk set), a
    `DeletedChunk` if its document was deleted, or None if it never existed there."""
    return await get_chunk(db, tenant_id, chunk_id) or await deleted_chunk(db, tenant_id, chunk_id)


_VISIBLE_CHUNKS = f"""
SELECT c.chunk_id FROM knowledge_chunks c
JOIN knowledge_documents d ON d.tenant_id = c.tenant_id AND d.document_id = c.document_id AND d.version = c.version
WHERE c.tenant_id = $1 AND c.chunk_id = ANY($2::text[]) AND {visible("$3", "$4", "$5")}
"""


async def visible_chunk_ids(db: Database, viewer: Viewer, chunk_ids: Sequence[str]) -> set[str]:
    """Which of ``chunk_ids`` the viewer may see: the document version each is a chunk of is visible
    to them (`knowledge.store.visibility`), live or superseded — a citation outlives its version."""
    rows = await db.fetch(_VISIBLE_CHUNKS, viewer.tenant_id, list(dict.fromkeys(chunk_ids)), viewer.principal_id,
                          viewer.current_scope, viewer.sensitivity_ceiling.admitted())
    return {r["chunk_id"] for r in rows}


async def viewed_chunk(db: Database, viewer: Viewer, chunk_id: str) -> KnowledgeChunk | DeletedChunk | None:
    """`resolve_chunk` for a person: the chunk if its document version is visible to ``viewer``, a
    `DeletedChunk` if its document was deleted, else None — a passage they may not see reads as
    one that never existed."""
    found = await resolve_chunk(db, viewer.tenant_id, chunk_id)
    if isinstance(found, KnowledgeChunk) and chunk_id not in await visible_chunk_ids(db, viewer, [chunk_id]):
        return None
    return found


async def resolve_citation(db: Database, tenant_id: str, chunk_id: str) -> Citation | DeletedChunk | None:
    """A chunk id within a tenant: its passage, document version and source (`Citation`); a
    `DeletedChunk` if its document was deleted; None if it never existed in this tenant."""
    chunk = await get_chunk(db, tenant_id, chunk_id)
    if chunk is None:  # the same resolution as KnowledgeService.get_chunk
        return await deleted_chunk(db, tenant_id, chunk_id)
    row = await db.fetchrow(
        _SUMMARY + " WHERE d.tenant_id = $1 AND d.document_id = $2 AND d.version = $3",
        tenant_id, chunk.document_id, chunk.version)
    assert row is not None  # chunks cascade from their document version
    source = await db.fetchrow(_SOURCE, tenant_id, row["source_artifact_id"])
    assert source is not None
    chunker_version = await db.fetchval(
        "SELECT chunker_version FROM knowledge_chunks WHERE tenant_id = $1 AND chunk_id = $2", tenant_id, chunk_id)
    document = _summary(row)
    return Citation(chunk=chunk, document=document, source=_source(source),
                    live=document.live and chunker_version == document.chunker_version)


async def corpus_size(db: Database, tenant_id: str) -> CorpusSize:
    """The tenant's corpus size (one query)."""
    row = await db.fetchrow(
        """SELECT
             (SELECT count(*) FROM knowledge_documents WHERE tenant_id = $1 AND valid_to IS NULL) AS documents,
             (SELECT count(*) FROM knowledge_documents WHERE tenant_id = $1) AS versions,
             c.chunks, c.tokens, c.flagged AS instruction_like_chunks,
             (SELECT coalesce(sum(a.size_bytes), 0) FROM knowledge_documents d
                JOIN artifacts a ON a.tenant_id = d.tenant_id AND a.artifact_id = d.source_artifact_id
              WHERE d.tenant_id = $1 AND d.valid_to IS NULL) AS source_bytes,
             (SELECT coalesce(sum(a.size_bytes), 0) FROM artifacts a
              WHERE a.tenant_id = $1 AND a.artifact_id IN (
                  SELECT source_artifact_id FROM knowledge_documents WHERE tenant_id = $1)) AS retained_source_bytes,
             (SELECT count(*) FROM knowledge_deleted_chunks WHERE tenant_id = $1) AS deleted_chunks
           FROM (SELECT count(*) AS chunks, coalesce(sum(k.tokens), 0) AS tokens,
                        count(*) FILTER (WHERE k.contains_instruction_like_text) AS flagged
                 FROM knowledge_chunks k
                 JOIN knowledge_documents d USING (tenant_id, document_id, version, chunker_version)
                 WHERE k.tenant_id = $1 AND d.valid_to IS NULL) c""",
        tenant_id)
    assert row is not None
    return CorpusSize(**{k: int(v) for k, v in dict(row).items()})


async def passages_given(db: Database, tenant_id: str, *, top: int = 5) -> PassagesGiven | None:
    """The passages the recall traces say the agent was given, or None without trace tables."""
    if await db.fetchval("SELECT to_regclass('knowledge_trace_passages') IS NULL"):
        return None
    row = await db.fetchrow(
        """SELECT (SELECT count(*) FROM knowledge_traces WHERE tenant_id = $1) AS traces,
                  (SELECT count(DISTINCT trace_id) FROM knowledge_trace_passages WHERE tenant_id = $1)
                      AS traces_with_passages,
                  count(*) AS passages, count(DISTINCT tp.chunk_id) AS distinct_chunks,
                  count(DISTINCT tp.document_id) AS distinct_documents,
                  count(*) FILTER (WHERE EXISTS (
                      SELECT 1 FROM knowledge_deleted_chunks x
                      WHERE x.tenant_id = tp.tenant_id AND x.chunk_id = tp.chunk_id)) AS since_deleted
           FROM knowledge_trace_passages tp WHERE tp.tenant_id = $1""",
        tenant_id)
    assert row is not None
    tops = await db.fetch(
        """SELECT tp.document_id, max(tp.title) AS title, count(*) AS passages
           FROM knowledge_trace_passages tp WHERE tp.tenant_id = $1
           GROUP BY tp.document_id ORDER BY count(*) DESC, tp.document_id LIMIT $2""",
        tenant_id, top)
    return PassagesGiven(
        **{k: int(v) for k, v in dict(row).items()},
        top_documents=[GivenDocument(document_id=r["document_id"], title=r["title"], passages=int(r["passages"]))
                       for r in tops],
    )


class TenantSummary(BaseModel):
    """A tenant the store knows: something was ever put or ingested there."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    documents: int  # live documents


_TENANTS_SQL = """
WITH t AS (SELECT DISTINCT tenant_id FROM knowledge_events
           UNION SELECT DISTINCT tenant_id FROM artifacts
           UNION SELECT DISTINCT tenant_id FROM knowledge_documents)
SELECT t.tenant_id, (SELECT count(*) FROM knowledge_documents d
                     WHERE d.tenant_id = t.tenant_id AND d.valid_to IS NULL) AS documents
FROM t ORDER BY t.tenant_id
"""

_TENANT_KNOWN_SQL = """
SELECT EXISTS (SELECT 1 FROM knowledge_events WHERE tenant_id = $1)
    OR EXISTS (SELECT 1 FROM artifacts WHERE tenant_id = $1)
    OR EXISTS (SELECT 1 FROM knowledge_documents WHERE tenant_id = $1)
"""


async def tenants(db: Database) -> list[TenantSummary]:
    """Every tenant the store knows, with its live documents (an operator's view across tenants)."""
    return [TenantSummary(tenant_id=r["tenant_id"], documents=r["documents"]) for r in await db.fetch(_TENANTS_SQL)]


async def tenant_known(db: Database, tenant_id: str) -> bool:
    """Whether anything was ever put or ingested in ``tenant_id`` (a typo'd tenant is not)."""
    return bool(await db.fetchval(_TENANT_KNOWN_SQL, tenant_id))


async def document_ids_starting(db: Database, tenant_id: str, prefix: str, limit: int = 6) -> list[UUID]:
    """The tenant's document ids (any version) whose hex digits start with ``prefix``."""
    rows = await db.fetch(
        """SELECT DISTINCT document_id FROM knowledge_documents
           WHERE tenant_id = $1 AND starts_with(replace(document_id::text, '-', ''), $2)
           ORDER BY document_id LIMIT $3""", tenant_id, prefix, limit)
    return [r["document_id"] for r in rows]


async def chunk_ids_starting(db: Database, tenant_id: str, prefix: str, limit: int = 7) -> list[str]:
    """The tenant's chunk ids (any version or chunk set, deleted ones included: a citation outlives
    its chunk) that start with ``prefix``, in order, at most ``limit``."""
    rows = await db.fetch(
        """SELECT chunk_id FROM knowledge_chunks WHERE tenant_id = $1 AND starts_with(chunk_id, $2)
           UNION
           SELECT chunk_id FROM knowledge_deleted_chunks WHERE tenant_id = $1 AND starts_with(chunk_id, $2)
           ORDER BY chunk_id LIMIT $3""", tenant_id, prefix, limit)
    return [r["chunk_id"] for r in rows]


class Catalog:
    """The functions above bound to one database, each read retried on a transient error
    (`knowledge.store.retry`): `KnowledgeService` answers its read-side calls with one, and the CLI's
    read-only commands with one over a bare connection (`knowledge.cli.reading`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def read(self, name: str, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``fn(db, *args, **kwargs)`` — any one-statement read of this database — retried on a
        transient error as ``name`` (`knowledge.cli.stats_cmd` reads the metrics this way)."""
        from knowledge.store.retry import retry_transient

        return await retry_transient(name, functools.partial(fn, self.db, *args, **kwargs))

    async def documents(self, tenant_id: str, *, project: str | None = None, ingested_by: str | None = None,
                        limit: int | None = None, title: str | None = None,
                        since: datetime | None = None) -> list[DocumentSummary]:
        return await self.read("documents", list_documents, tenant_id, project=project, ingested_by=ingested_by,
                                limit=limit, title=title, since=since)

    async def document(self, tenant_id: str, document_id: UUID) -> DocumentDetail | None:
        return await self.read("document", document_detail, tenant_id, document_id)

    async def document_versions(self, tenant_id: str, document_id: UUID) -> list[VersionInfo]:
        return await self.read("document_versions", document_versions, tenant_id, document_id)

    async def get_chunk(self, tenant_id: str, chunk_id: str) -> KnowledgeChunk | DeletedChunk | None:
        return await self.read("get_chunk", resolve_chunk, tenant_id, chunk_id)

    async def viewed_chunk(self, viewer: Viewer, chunk_id: str) -> KnowledgeChunk | DeletedChunk | None:
        return await self.read("viewed_chunk", viewed_chunk, viewer, chunk_id)

    async def resolve_citation(self, tenant_id: str, chunk_id: str) -> Citation | DeletedChunk | None:
        return await self.read("resolve_citation", resolve_citation, tenant_id, chunk_id)

    async def document_ids_starting(self, tenant_id: str, prefix: str) -> list[UUID]:
        return await self.read("document_ids_starting", document_ids_starting, tenant_id, prefix)

    async def chunk_ids_starting(self, tenant_id: str, prefix: str, limit: int = 7) -> list[str]:
        return await self.read("chunk_ids_starting", chunk_ids_starting, tenant_id, prefix, limit)

    async def tenants(self) -> list[TenantSummary]:
        return await self.read("tenants", tenants)

    async def tenant_known(self, tenant_id: str) -> bool:
        return await self.read("tenant_known", tenant_known, tenant_id)

    async def corpus_size(self, tenant_id: str) -> CorpusSize:
        return await self.read("corpus_size", corpus_size, tenant_id)

    async def passages_given(self, tenant_id: str) -> PassagesGiven | None:
        return await self.read("passages_given", passages_given, tenant_id)


async def chunk_tokens(db: Database, *, tenant_id: str, document_ids: Sequence[UUID]) -> list[int]:
    """The token counts of these documents' chunks (`CHUNK_TOKENS`)."""
    return [int(r["tokens"]) for r in await db.fetch(CHUNK_TOKENS, tenant_id, list(document_ids))]


async def version_chunk_ids(db: Database, *, tenant_id: str, document_id: UUID, version: int) -> set[str]:
    """The chunk ids of one document version (`VERSION_CHUNK_IDS`)."""
    return {r["chunk_id"] for r in await db.fetch(VERSION_CHUNK_IDS, tenant_id, document_id, version)}


async def live_document_ids(db: Database, *, tenant_id: str) -> set[UUID]:
    """The tenant's live document ids (`LIVE_DOCUMENT_IDS`)."""
    return {r["document_id"] for r in await db.fetch(LIVE_DOCUMENT_IDS, tenant_id)}


async def document_rows(db: Database, *, tenant_id: str) -> int:
    """The tenant's document rows, every version (`DOCUMENT_ROWS`)."""
    return int(await db.fetchval(DOCUMENT_ROWS, tenant_id))
