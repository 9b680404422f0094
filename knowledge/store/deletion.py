"""Deletion that really deletes (ADR-0033, "Versions, supersession, and deletion").

One transaction removes every version's document rows — and through the foreign keys their chunk
sets, chunks and index rows — deletes the chunks' postings and takes them out of the tenant's
statistics, sets ``expires_at = now`` on the source artifacts (the sweeper collects the bytes),
leaves a tombstone per chunk id (the citation, never the text), and records a
``knowledge.document.deleted`` event that names the document and holds none of its text.

Deleting a conversation (`delete_conversation`) expires its attachments and deletes the documents
ingested from them through the same cascade.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from knowledge.errors import DeleteRefused
from knowledge.models import Principal
from knowledge.store.artifacts import LIVE
from knowledge.store.db import Connection, Database, is_transient
from knowledge.store.impact import impact_sql, term_stats_upsert
from knowledge.store.locks import lock_document
from knowledge.store.retry import retry_transient

DELETED_EVENT = "knowledge.document.deleted"

# Test tooling only (the stress tools' clean-up): drop a tenant's document rows outright, their
# chunk sets, chunks and index rows with them through the foreign keys — no tombstones, no events,
# postings and statistics untouched: $1 tenant.
DROP_TENANT_DOCUMENTS = "DELETE FROM knowledge_documents WHERE tenant_id = $1"


# The document's postings, found by their key: the impact is recomputed from the index row (the
# tf from the lexeme's positions, as the ingest counted it); and each term's document frequency
# less as many, on this backend's shard.
_POSTINGS = f"""
WITH gone AS MATERIALIZED (
    SELECT ci.chunk_id, u.lexeme, {impact_sql("coalesce(array_length(u.positions, 1), 1)", "ci.dl")} AS impact
    FROM knowledge_chunk_index ci, unnest(ci.tsv) AS u
    WHERE ci.tenant_id = $1 AND ci.document_id = $2
), postings AS (
    DELETE FROM knowledge_postings p USING gone
    WHERE p.tenant_id = $1 AND p.term = gone.lexeme AND p.impact = gone.impact AND p.chunk_id = gone.chunk_id
), terms AS ({term_stats_upsert("SELECT $1, lexeme, -count(*) FROM gone GROUP BY lexeme")}
)
SELECT count(*) FROM gone
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
    who ingested it may delete it. A transient database fault is retried (`knowledge.store.retry`); a
    retry that finds the document gone and this principal's deletion event written learns that the
    earlier attempt's COMMIT took effect. Cancellation: the transaction rolls back; nothing is deleted."""
    faulted = False

    async def attempt() -> int:
        nonlocal faulted
        try:
            return await _delete_once(db, document_id, principal)
        except DeleteRefused as refused:
            if faulted and refused.reason == "document_not_found":
                chunks = await db.fetchval(
                    """SELECT (payload->>'chunks')::int FROM knowledge_events
                       WHERE tenant_id = $1 AND document_id = $2 AND event_type = $3 AND principal_id = $4
                       ORDER BY event_id DESC LIMIT 1""",
                    principal.tenant_id, document_id, DELETED_EVENT, principal.principal_id)
                if chunks is not None:
                    return int(chunks)
            raise
        except Exception as exc:
            faulted = faulted or is_transient(exc)
            raise

    return await retry_transient(f"delete of {document_id}", attempt)


async def _delete_once(db: Database, document_id: uuid.UUID, principal: Principal) -> int:
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


# --- Owner-sent attachments (ADR-0120): a conversation's deletion takes its documents along ---------------


class ConversationDeleted(BaseModel):
    """What `delete_conversation` did: attachments expired (the sweeper collects their bytes),
    documents deleted through the cascade, and their chunks."""

    conversation_id: str
    attachments: int
    documents: int
    chunks: int


#: The attachment states in which an attachment is, or will become, its document: the references that
#: keep an attachment-made document alive. A refused or failed attachment never becomes one.
REFERENCING_STATES = ("pending", "ingesting", "ingested")

# Whether a live attachment (`LIVE`) in one of `REFERENCING_STATES` still refers to a document:
# $1 tenant, $2 document, $3 the states.
_REFERENCED = f"""
SELECT 1 FROM artifacts
WHERE tenant_id = $1 AND attachment_document_id = $2 AND attachment_state = ANY($3::text[]) AND {LIVE}
LIMIT 1"""


async def cascade_delete(tx: Connection, tenant: str, document_id: uuid.UUID, cause: dict[str, Any]) -> int:
    """The deletion cascade of `delete_document` inside the caller's transaction, for a deletion the
    system decides (no principal's ownership to check): every version, its chunks, index rows and
    postings, the tenant's statistics, tombstones, ``expires_at = now`` on the sources, and a
    ``knowledge.document.deleted`` event whose payload carries ``cause``. Returns the chunks
    deleted (0 if the document no longer exists)."""
    await lock_document(tx, tenant, document_id)
    rows = await tx.fetch(
        """SELECT version, ingested_by_principal_id, source_artifact_id FROM knowledge_documents
           WHERE tenant_id = $1 AND document_id = $2 ORDER BY version""", tenant, document_id)
    if not rows:
        return 0
    await tx.execute(_POSTINGS, tenant, document_id)
    await tx.execute(_STATS, tenant, document_id)
    await tx.execute(_TOMBSTONES, tenant, document_id)
    chunks = int(await tx.fetchval(
        "SELECT count(*) FROM knowledge_chunks WHERE tenant_id = $1 AND document_id = $2", tenant, document_id))
    await tx.execute("DELETE FROM knowledge_documents WHERE tenant_id = $1 AND document_id = $2", tenant, document_id)
    await tx.execute(
        """UPDATE artifacts SET expires_at = clock_timestamp()
           WHERE tenant_id = $1 AND artifact_id = ANY($2::uuid[])""",
        tenant, [r["source_artifact_id"] for r in rows])
    await tx.execute(
        """INSERT INTO knowledge_events (tenant_id, event_type, document_id, version, principal_id, payload)
           VALUES ($1, $2, $3, $4, $5, $6::jsonb)""",
        tenant, DELETED_EVENT, document_id, rows[-1]["version"], rows[-1]["ingested_by_principal_id"],
        json.dumps({"versions": len(rows), "chunks": chunks, **cause}))
    return chunks


async def withdraw_unreferenced(tx: Connection, tenant: str, document_ids: Iterable[uuid.UUID],
                                cause: dict[str, Any]) -> tuple[int, int]:
    """Delete (`cascade_delete`) each of ``document_ids`` that no live attachment refers to any more
    (``attachment_document_id`` set at marking; states `REFERENCING_STATES`): the same file sent in two
    conversations is one document, which goes with the last of them. Returns (documents, chunks).

    Each document's lock (`lock_document`) is taken, in id order, before its references are read, so
    the check sees every attachment marked before it and a worker recording an attachment as that
    document (which takes the same lock first) either commits before the check or finds the document
    gone after it."""
    documents = chunks = 0
    for document_id in sorted(set(document_ids)):
        await lock_document(tx, tenant, document_id)
        referenced = await tx.fetchval(_REFERENCED, tenant, document_id, list(REFERENCING_STATES))
        if referenced:
            continue
        exists = await tx.fetchval(
            "SELECT 1 FROM knowledge_documents WHERE tenant_id = $1 AND document_id = $2 LIMIT 1", tenant, document_id)
        if exists:
            documents += 1
            chunks += await cascade_delete(tx, tenant, document_id, cause)
    return documents, chunks


async def delete_conversation(db: Database, tenant_id: str, conversation_id: str) -> ConversationDeleted:
    """Delete a conversation's attachments: each gets ``expires_at = now`` (gone to readers at once;
    the sweeper deletes the bytes) and leaves the queue, and every document they are (or were to
    become) is deleted through the cascade on its source (`cascade_delete`) unless a live attachment
    of another conversation is the same file (`withdraw_unreferenced`). A worker ingesting one of
    them meanwhile finds it withdrawn when it settles and withdraws what it made. One transaction;
    documents' locks are taken before the attachments' rows, as workers do. Cancellation: it rolls
    back; nothing is deleted."""
    async with db.transaction() as tx:
        planned = {r["attachment_document_id"] for r in await tx.fetch(
            """SELECT DISTINCT attachment_document_id FROM artifacts
               WHERE tenant_id = $1 AND conversation_id = $2 AND attachment_document_id IS NOT NULL""",
            tenant_id, conversation_id)}
        for document_id in sorted(planned):
            await lock_document(tx, tenant_id, document_id)
        rows = await tx.fetch(
            """UPDATE artifacts
               SET expires_at = CASE WHEN expires_at IS NOT NULL AND expires_at <= clock_timestamp()
                                     THEN expires_at ELSE clock_timestamp() END,
                   lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL,
                   attachment_state = CASE WHEN attachment_state IN ('pending', 'ingesting') THEN NULL
                                           ELSE attachment_state END,
                   attachment_updated_at = clock_timestamp()
               WHERE tenant_id = $1 AND conversation_id = $2
               RETURNING attachment_document_id""", tenant_id, conversation_id)
        documents, chunks = await withdraw_unreferenced(
            tx, tenant_id, [r["attachment_document_id"] for r in rows if r["attachment_document_id"] is not None],
            {"cause": "conversation_deleted", "conversation_id": conversation_id})
    return ConversationDeleted(conversation_id=conversation_id, attachments=len(rows), documents=documents,
                               chunks=chunks)


async def drop_tenant_documents(db: Database, *, tenant_id: str) -> None:
    """Remove a tenant's documents for a test harness's cleanup (`DROP_TENANT_DOCUMENTS`): no
    tombstones, no events — never the service's deletion."""
    await db.execute(DROP_TENANT_DOCUMENTS, tenant_id)
