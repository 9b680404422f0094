"""Deletion that really deletes (ADR-0033, "Versions, supersession, and deletion").

One transaction removes every version's document rows — and through the foreign keys their chunk
sets, chunks and index rows — deletes the chunks' postings and takes them out of the tenant's
statistics, sets ``expires_at = now`` on the source artifacts (the sweeper collects the bytes),
leaves a tombstone per chunk id (the citation, never the text), and records a
``knowledge.document.deleted`` event that names the document and holds none of its text.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from pydantic import BaseModel

from knowledge.errors import KnowledgeError
from knowledge.ingest import lock_document
from knowledge.models import Principal
from knowledge.store.db import Database

DELETED_EVENT = "knowledge.document.deleted"


class DeleteRefused(KnowledgeError):
    """``document_not_found`` or ``not_document_owner``."""

    reason = "delete_refused"


class DeletedChunk(BaseModel):
    """What a citation of a deleted passage resolves to: its id, its document, when — no text."""

    chunk_id: str
    document_id: uuid.UUID
    deleted_at: datetime


_POSTINGS = """
WITH gone AS (
    SELECT ci.chunk_id, u.lexeme FROM knowledge_chunk_index ci, unnest(ci.tsv) AS u
    WHERE ci.tenant_id = $1 AND ci.document_id = $2
)
DELETE FROM knowledge_postings p USING gone
WHERE p.tenant_id = $1 AND p.term = gone.lexeme AND p.chunk_id = gone.chunk_id
"""
_STATS = """
INSERT INTO knowledge_tenant_stats (tenant_id, shard, chunks, total_dl)
SELECT $1, pg_backend_pid() % 16, -count(*), -coalesce(sum(dl), 0)
FROM knowledge_chunk_index WHERE tenant_id = $1 AND document_id = $2
ON CONFLICT (tenant_id, shard) DO UPDATE
SET chunks = knowledge_tenant_stats.chunks + excluded.chunks,
    total_dl = knowledge_tenant_stats.total_dl + excluded.total_dl
"""
_TOMBSTONES = """
INSERT INTO knowledge_deleted_chunks (tenant_id, chunk_id, document_id)
SELECT tenant_id, chunk_id, document_id FROM knowledge_chunks WHERE tenant_id = $1 AND document_id = $2
ON CONFLICT DO NOTHING
"""


async def delete_document(db: Database, document_id: uuid.UUID, principal: Principal) -> int:
    """Delete every version of ``document_id``; return how many chunks went. Only the principal
    who ingested it may delete it. Cancellation: the transaction rolls back; nothing is deleted."""
    tenant = principal.tenant_id
    async with db.transaction() as tx:
        await lock_document(tx, tenant, document_id)
        rows = await tx.fetch(
            """SELECT version, ingested_by_principal_id, source_artifact_id, valid_to FROM knowledge_documents
               WHERE tenant_id = $1 AND document_id = $2 ORDER BY version""", tenant, document_id)
        if not rows:
            raise DeleteRefused("document_not_found", f"no document {document_id}")
        if rows[-1]["ingested_by_principal_id"] != principal.principal_id:
            raise DeleteRefused("not_document_owner", "only the principal who ingested a document may delete it")
        await tx.execute(_POSTINGS, tenant, document_id)
        await tx.execute(_STATS, tenant, document_id)
        await tx.execute(_TOMBSTONES, tenant, document_id)
        chunks = int(await tx.fetchval(
            "SELECT count(*) FROM knowledge_chunks WHERE tenant_id = $1 AND document_id = $2", tenant, document_id))
        await tx.execute("DELETE FROM knowledge_documents WHERE tenant_id = $1 AND document_id = $2",
                         tenant, document_id)
        await tx.execute(
            """UPDATE artifacts SET expires_at = clock_timestamp()
               WHERE tenant_id = $1 AND artifact_id = ANY($2::uuid[])""",
            tenant, [r["source_artifact_id"] for r in rows])
        await tx.execute(
            """INSERT INTO knowledge_events (tenant_id, event_type, document_id, version, principal_id, payload)
               VALUES ($1, $2, $3, $4, $5, $6::jsonb)""",
            tenant, DELETED_EVENT, document_id, rows[-1]["version"], principal.principal_id,
            json.dumps({"versions": len(rows), "chunks": chunks}))
    return chunks


async def deleted_chunk(db: Database, tenant_id: str, chunk_id: str) -> DeletedChunk | None:
    row = await db.fetchrow(
        "SELECT chunk_id, document_id, deleted_at FROM knowledge_deleted_chunks WHERE tenant_id = $1 AND chunk_id = $2",
        tenant_id, chunk_id)
    return DeletedChunk(**dict(row)) if row is not None else None
