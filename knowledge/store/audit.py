"""The invariant audit's queries (read-only): what `knowledge.maintenance.audit` and the stress
tools check after a run — live document versions whole, nothing belonging to nothing, term
statistics equal to a recount, vectors present or queued, attachments settled. Each statement is a
function with named arguments returning typed rows (the dataclasses below), never a database record.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from knowledge.models import AttachmentState
from knowledge.store.db import Connection, Database
from knowledge.store.server import SESSIONS_OF

# Every live document version with what it has of itself: its chunk set's count, its chunks, their
# index rows, whether its source artifact is a live KNOWLEDGE_SOURCE, whether its ingest event exists:
# $1 tenants (NULL: all).
PARTIAL = """
SELECT d.tenant_id, d.document_id, d.version,
       s.chunk_count,
       (SELECT count(*) FROM knowledge_chunks c WHERE c.tenant_id = d.tenant_id AND c.document_id = d.document_id
          AND c.version = d.version AND c.chunker_version = d.chunker_version) AS chunks,
       (SELECT count(*) FROM knowledge_chunk_index i JOIN knowledge_chunks c
          ON c.tenant_id = i.tenant_id AND c.chunk_id = i.chunk_id
        WHERE c.tenant_id = d.tenant_id AND c.document_id = d.document_id AND c.version = d.version
          AND c.chunker_version = d.chunker_version) AS index_rows,
       (SELECT a.origin = 'KNOWLEDGE_SOURCE' AND a.expires_at IS NULL FROM artifacts a
        WHERE a.tenant_id = d.tenant_id AND a.artifact_id = d.source_artifact_id) AS source_ok,
       EXISTS (SELECT 1 FROM knowledge_events e WHERE e.tenant_id = d.tenant_id AND e.document_id = d.document_id
               AND e.version = d.version AND e.event_type = 'knowledge.document.ingested') AS event_ok
FROM knowledge_documents d
LEFT JOIN knowledge_chunk_sets s ON s.tenant_id = d.tenant_id AND s.document_id = d.document_id
     AND s.version = d.version AND s.chunker_version = d.chunker_version
WHERE d.valid_to IS NULL AND ($1::text[] IS NULL OR d.tenant_id = ANY($1))
"""

# Postings must be exactly the lexemes of the index rows: counted both ways per tenant, with the
# tenant's statistics and a recount of them, and the terms whose document frequency is not their
# postings' count: $1 tenants (NULL: all).
POSTINGS = """
SELECT t.tenant_id,
       (SELECT count(*) FROM knowledge_postings p WHERE p.tenant_id = t.tenant_id) AS postings,
       (SELECT coalesce(sum(length(i.tsv)), 0) FROM knowledge_chunk_index i WHERE i.tenant_id = t.tenant_id)
           AS lexemes,
       (SELECT count(*) FROM knowledge_postings p WHERE p.tenant_id = t.tenant_id AND NOT EXISTS (
            SELECT 1 FROM knowledge_chunk_index i WHERE i.tenant_id = p.tenant_id AND i.chunk_id = p.chunk_id))
           AS orphan_postings,
       (SELECT coalesce(sum(chunks), 0) FROM knowledge_tenant_stats s WHERE s.tenant_id = t.tenant_id) AS stat_chunks,
       (SELECT coalesce(sum(total_dl), 0) FROM knowledge_tenant_stats s WHERE s.tenant_id = t.tenant_id) AS stat_dl,
       (SELECT count(*) FROM knowledge_chunk_index i WHERE i.tenant_id = t.tenant_id) AS chunks,
       (SELECT coalesce(sum(dl), 0) FROM knowledge_chunk_index i WHERE i.tenant_id = t.tenant_id) AS dl,
       (SELECT count(*) FROM (SELECT term, sum(df) AS df FROM knowledge_term_stats s
                              WHERE s.tenant_id = t.tenant_id GROUP BY term) AS ts
        FULL JOIN (SELECT term, count(*) AS n FROM knowledge_postings p
                   WHERE p.tenant_id = t.tenant_id GROUP BY term) AS pc USING (term)
        WHERE coalesce(ts.df, 0) <> coalesce(pc.n, 0)) AS term_mismatches
FROM (SELECT DISTINCT tenant_id FROM knowledge_postings UNION SELECT DISTINCT tenant_id FROM knowledge_chunk_index
      UNION SELECT DISTINCT tenant_id FROM knowledge_tenant_stats
      UNION SELECT DISTINCT tenant_id FROM knowledge_term_stats) t
WHERE $1::text[] IS NULL OR t.tenant_id = ANY($1)
"""

# Unexpiring source artifacts of no document: $1 tenants (NULL: all).
ORPHAN_SOURCES = """
SELECT a.tenant_id, a.artifact_id FROM artifacts a
WHERE a.origin = 'KNOWLEDGE_SOURCE' AND a.expires_at IS NULL AND ($1::text[] IS NULL OR a.tenant_id = ANY($1))
  AND NOT EXISTS (SELECT 1 FROM knowledge_documents d
                  WHERE d.tenant_id = a.tenant_id AND d.source_artifact_id = a.artifact_id)
"""

# Every chunk set with its recorded and its actual chunk count: $1 tenants (NULL: all).
ORPHAN_SETS = """
SELECT s.tenant_id, s.document_id, s.version, s.chunker_version, s.chunk_count,
       (SELECT count(*) FROM knowledge_chunks c WHERE c.tenant_id = s.tenant_id AND c.document_id = s.document_id
          AND c.version = s.version AND c.chunker_version = s.chunker_version) AS chunks
FROM knowledge_chunk_sets s WHERE $1::text[] IS NULL OR s.tenant_id = ANY($1)
"""

# With the semantic arm on: chunks of live chunk sets with no vector under the arm's model version
# whose set is not queued for it (``$3``: or queued at all — once the queue has drained):
# $1 tenants (NULL: all), $2 model version, $3 drained.
UNEMBEDDED = """
SELECT c.tenant_id, c.document_id, c.version, count(*) AS chunks FROM knowledge_chunks c
JOIN knowledge_chunk_sets s ON s.tenant_id = c.tenant_id AND s.document_id = c.document_id AND s.version = c.version
     AND s.chunker_version = c.chunker_version AND s.superseded_at IS NULL
WHERE ($1::text[] IS NULL OR c.tenant_id = ANY($1))
  AND NOT EXISTS (SELECT 1 FROM knowledge_embeddings e
                  WHERE e.tenant_id = c.tenant_id AND e.chunk_id = c.chunk_id AND e.model_version = $2)
  AND ($3 OR NOT EXISTS (SELECT 1 FROM knowledge_embedding_queue q
                         WHERE q.tenant_id = s.tenant_id AND q.document_id = s.document_id AND q.version = s.version
                           AND q.chunker_version = s.chunker_version AND q.model_version = $2))
GROUP BY c.tenant_id, c.document_id, c.version
"""

# The stored versions of given documents, whatever their tenant: $1 document ids.
DOCUMENT_VERSIONS = """
SELECT tenant_id, document_id, version FROM knowledge_documents WHERE document_id = ANY($1::uuid[])
"""

# Given attachments' tenant, state and history (JSON text), whatever their tenant: $1 artifact ids.
ATTACHMENTS_SEEN = """
SELECT tenant_id, artifact_id, attachment_state AS state, attachment_history::text AS history
FROM artifacts WHERE artifact_id = ANY($1::uuid[])
"""

# A tenant's unexpiring artifacts that no document has as its source (uploads and orphaned sources):
# $1 tenant.
UNEXPIRING = """
SELECT count(*) FROM artifacts a
WHERE a.tenant_id = $1 AND a.expires_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM knowledge_documents d
                  WHERE d.tenant_id = a.tenant_id AND d.source_artifact_id = a.artifact_id)
"""


# --- what the statements read, typed ----------------------------------------------------------------------


@dataclass(frozen=True)
class UnembeddedSet:
    """A live document version with chunks lacking vectors (`unembedded_sets`)."""

    tenant_id: str
    document_id: uuid.UUID
    version: int
    chunks: int  # its chunks without vectors


@dataclass(frozen=True)
class LiveVersion:
    """A live document version with what it has of itself (`live_versions`)."""

    tenant_id: str
    document_id: uuid.UUID
    version: int
    chunk_count: int | None  # its chunk set's recorded count; None: no chunk set
    chunks: int  # its chunks
    index_rows: int  # their index rows
    source_ok: bool  # its source artifact is a live KNOWLEDGE_SOURCE
    event_ok: bool  # its ingest event exists


@dataclass(frozen=True)
class ChunkSetCount:
    """A chunk set with its recorded and its actual chunk count (`orphan_chunk_sets`)."""

    tenant_id: str
    document_id: uuid.UUID
    version: int
    chunker_version: str
    chunk_count: int  # as recorded
    chunks: int  # as counted


@dataclass(frozen=True)
class OrphanSource:
    """An unexpiring source artifact of no document (`orphan_sources`)."""

    tenant_id: str
    artifact_id: uuid.UUID


@dataclass(frozen=True)
class PostingsRecount:
    """A tenant's postings against its index rows, and its statistics against a recount (`postings_recount`)."""

    tenant_id: str
    postings: int
    lexemes: int  # lexeme occurrences in its index rows' tsvectors
    orphan_postings: int  # postings of no index row
    stat_chunks: int  # as the tenant statistics say
    stat_dl: int
    chunks: int  # as recounted from the index rows
    dl: int
    term_mismatches: int  # terms whose counted document frequency is not their postings' count


@dataclass(frozen=True)
class StoredVersion:
    """A stored version of a document (`document_versions`)."""

    tenant_id: str
    document_id: uuid.UUID
    version: int


@dataclass(frozen=True)
class SeenAttachment:
    """An attachment's tenant, state and history (`attachments_seen`)."""

    tenant_id: str
    artifact_id: uuid.UUID
    state: AttachmentState | None
    history: list[dict[str, Any]]  # one entry per attempt


# --- the statements, each a function with named arguments (issue 33: the store owns its statements) ---------

Reader = Connection | Database


async def unembedded_sets(conn: Reader, *, tenants: list[str] | None, version: str,
                          drained: bool) -> list[UnembeddedSet]:
    """`UNEMBEDDED`: live chunk sets with chunks lacking ``version`` vectors (and, unless ``drained``, not queued)."""
    return [UnembeddedSet(tenant_id=r["tenant_id"], document_id=r["document_id"], version=int(r["version"]),
                          chunks=int(r["chunks"]))
            for r in await conn.fetch(UNEMBEDDED, tenants, version, drained)]


async def live_versions(conn: Reader, *, tenants: list[str] | None) -> list[LiveVersion]:
    """`PARTIAL`: every live document version with what it has of itself."""
    return [LiveVersion(tenant_id=r["tenant_id"], document_id=r["document_id"], version=int(r["version"]),
                        chunk_count=None if r["chunk_count"] is None else int(r["chunk_count"]),
                        chunks=int(r["chunks"]), index_rows=int(r["index_rows"]),
                        source_ok=bool(r["source_ok"]), event_ok=bool(r["event_ok"]))
            for r in await conn.fetch(PARTIAL, tenants)]


async def orphan_chunk_sets(conn: Reader, *, tenants: list[str] | None) -> list[ChunkSetCount]:
    """`ORPHAN_SETS`: every chunk set, with its recorded and its actual chunk count."""
    return [ChunkSetCount(tenant_id=r["tenant_id"], document_id=r["document_id"], version=int(r["version"]),
                          chunker_version=r["chunker_version"], chunk_count=int(r["chunk_count"]),
                          chunks=int(r["chunks"]))
            for r in await conn.fetch(ORPHAN_SETS, tenants)]


async def orphan_sources(conn: Reader, *, tenants: list[str] | None) -> list[OrphanSource]:
    """`ORPHAN_SOURCES`: source artifacts of no document."""
    return [OrphanSource(tenant_id=r["tenant_id"], artifact_id=r["artifact_id"])
            for r in await conn.fetch(ORPHAN_SOURCES, tenants)]


async def postings_recount(conn: Reader, *, tenants: list[str] | None) -> list[PostingsRecount]:
    """`POSTINGS`: per tenant, the postings against the index and the statistics against a recount."""
    # The sums of the statistics' bigint columns come back as numeric: whole numbers, kept as ints.
    return [PostingsRecount(tenant_id=r["tenant_id"], postings=int(r["postings"]), lexemes=int(r["lexemes"]),
                            orphan_postings=int(r["orphan_postings"]), stat_chunks=int(r["stat_chunks"]),
                            stat_dl=int(r["stat_dl"]), chunks=int(r["chunks"]), dl=int(r["dl"]),
                            term_mismatches=int(r["term_mismatches"]))
            for r in await conn.fetch(POSTINGS, tenants)]


async def document_versions(conn: Reader, *, document_ids: list[uuid.UUID]) -> list[StoredVersion]:
    """`DOCUMENT_VERSIONS`: the stored versions of these documents."""
    return [StoredVersion(tenant_id=r["tenant_id"], document_id=r["document_id"], version=int(r["version"]))
            for r in await conn.fetch(DOCUMENT_VERSIONS, document_ids)]


async def attachments_seen(conn: Reader, *, artifact_ids: list[uuid.UUID]) -> list[SeenAttachment]:
    """`ATTACHMENTS_SEEN`: these attachments' tenant, state and history."""
    return [SeenAttachment(tenant_id=r["tenant_id"], artifact_id=r["artifact_id"],
                           state=AttachmentState(r["state"]) if r["state"] else None,
                           history=json.loads(r["history"] or "[]"))
            for r in await conn.fetch(ATTACHMENTS_SEEN, artifact_ids)]


async def sessions_of(conn: Reader, *, application_name: str) -> int:
    """Database sessions of ``application_name`` other than ``conn``'s own (`SESSIONS_OF`)."""
    return int(await conn.fetchval(SESSIONS_OF, application_name))


async def unexpiring_artifacts(conn: Reader, *, tenant_id: str) -> int:
    """`UNEXPIRING`: the tenant's unexpiring artifacts that no document has as its source."""
    return int(await conn.fetchval(UNEXPIRING, tenant_id))
