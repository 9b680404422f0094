"""The writes of an ingest and of a re-chunk, in named statements: the document, its chunk set, the
chunks, their index rows and BM25 postings, the tenant's counters, the embedding queue row and the
outcome counters; and the reads around them: a re-chunk's live version and chunk sets, and whether an
ingest attempt's COMMIT took effect (`knowledge.ingest` and `knowledge.ingest.bulk` run them)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from knowledge.core.chunking import chunk_id
from knowledge.core.prepare import PreparedDocument
from knowledge.errors import IngestRefused
from knowledge.models import Principal
from knowledge.store.artifacts import REF_COLUMNS, ref_columns
from knowledge.store.db import Connection
from knowledge.store.embedding_queue import QUEUE_INSERT
from knowledge.store.impact import impact_sql, term_stats_upsert
from knowledge.store.locks import lock_document

#: The text search configuration of the index rows and of queries.
TS_CONFIG = "english"


def outcome_upsert(rows: str) -> str:
    """Count one ingest outcome per row of ``rows`` (VALUES or a SELECT of tenant, day, outcome,
    reason, 1) in the tenant's outcome counters."""
    return f"""
INSERT INTO knowledge_ingest_outcomes (tenant_id, day, outcome, reason, count)
{rows}
ON CONFLICT (tenant_id, day, outcome, reason) DO UPDATE SET count = knowledge_ingest_outcomes.count + 1"""


# Count an ingest outcome: $1 tenant, $2 outcome, $3 reason.
OUTCOME_UPSERT = outcome_upsert("VALUES ($1, current_date, $2, $3, 1)")


async def supersede(tx: Connection, tenant: str, document_id: uuid.UUID, principal: Principal) -> int:
    """End the live version's validity and return the next version number. Concurrent new versions
    of one document queue on its lock, so none is lost and versions stay dense. Only the principal
    who ingested the document may version it."""
    await lock_document(tx, tenant, document_id)
    live = await tx.fetchrow(
        """SELECT version, ingested_by_principal_id FROM knowledge_documents
           WHERE tenant_id = $1 AND document_id = $2 AND valid_to IS NULL""", tenant, document_id)
    if live is None:
        raise IngestRefused("document_not_found", f"no live document {document_id} to replace")
    if live["ingested_by_principal_id"] != principal.principal_id:
        raise IngestRefused("not_document_owner", "only the principal who ingested a document may version it")
    await tx.execute(
        """UPDATE knowledge_documents SET valid_to = clock_timestamp(), superseded_by = document_id
           WHERE tenant_id = $1 AND document_id = $2 AND version = $3""", tenant, document_id, live["version"])
    return int(live["version"]) + 1


async def count_outcome(conn: Connection, tenant: str, outcome: str, reason: str) -> None:
    await conn.execute(OUTCOME_UPSERT, tenant, outcome, reason)


def _chunk_writes(document: str, version: str, chunker_version: str, first_array: int, gate: str = "") -> str:
    """The CTEs that write a chunk set's rows, given where the statement's parameters are: chunk
    rows from parallel arrays (heading paths as JSON arrays; ``first_array`` numbers the first of
    the seven) for one document (``document``, ``version`` and ``chunker_version`` are SQL
    expressions); see `chunk_writes_from`. ``gate`` (a WHERE clause) can hold every write back."""
    arrays = ", ".join(f"${first_array + i}::{t}[]" for i, t in enumerate(CHUNK_ARRAY_TYPES))
    return chunk_writes_from(
        f"SELECT {document}::uuid AS document_id, {version}::int AS version, "
        f"{chunker_version}::text AS chunker_version, r.* "
        f"FROM unnest({arrays}) AS r({', '.join(CHUNK_ARRAY_COLUMNS)}) {gate}")


#: The per-chunk arrays of `chunk_columns` (after its four leading scalars), with their SQL types.
CHUNK_ARRAY_COLUMNS = ("chunk_id", "ordinal", "heading_json", "text", "tokens", "flagged", "sha")
CHUNK_ARRAY_TYPES = ("text", "int", "text", "text", "int", "bool", "text")


def chunk_writes_from(rows: str) -> str:
    """The CTEs that write chunk rows, whatever documents they belong to: ``rows`` is a SELECT of
    (document_id, version, chunker_version, `CHUNK_ARRAY_COLUMNS`); their chunk rows; their index
    rows (the heading path weighted above the body, in one tsvector per chunk, and its length);
    the BM25 postings unnested from those tsvectors, with their impacts (`knowledge.store.impact`);
    and each term's document frequency and the tenant's chunk count and total length, added on this
    backend's shard. ``$1`` is the tenant."""
    return f"""
rows AS (
    {rows}
), chunks AS (
    INSERT INTO knowledge_chunks (tenant_id, chunk_id, document_id, version, chunker_version, ordinal,
        heading_path, text, tokens, contains_instruction_like_text, content_sha256)
    SELECT $1, chunk_id, document_id, version, chunker_version, ordinal,
           ARRAY(SELECT h FROM jsonb_array_elements_text(heading_json::jsonb) WITH ORDINALITY AS e(h, n) ORDER BY n),
           text, tokens, flagged, sha
    FROM rows
    RETURNING tenant_id, chunk_id, document_id, version, chunker_version, heading_path, text
), vec AS MATERIALIZED (
    SELECT c.tenant_id, c.chunk_id, c.document_id, c.version, c.chunker_version,
           setweight(to_tsvector('{TS_CONFIG}', array_to_string(c.heading_path, ' ')), 'A')
           || setweight(to_tsvector('{TS_CONFIG}', c.text), 'B') AS tsv
    FROM chunks c
), terms AS MATERIALIZED (
    SELECT v.chunk_id, u.lexeme, coalesce(array_length(u.positions, 1), 1) AS tf FROM vec v, unnest(v.tsv) AS u
), lengths AS MATERIALIZED (
    SELECT chunk_id, sum(tf)::int AS dl FROM terms GROUP BY chunk_id
), idx AS (
    INSERT INTO knowledge_chunk_index (tenant_id, chunk_id, document_id, version, chunker_version, tsv, dl)
    SELECT v.tenant_id, v.chunk_id, v.document_id, v.version, v.chunker_version, v.tsv, l.dl
    FROM vec v JOIN lengths l USING (chunk_id)
    RETURNING dl
), postings AS (
    INSERT INTO knowledge_postings (tenant_id, term, chunk_id, tf, dl, impact)
    SELECT $1, t.lexeme, t.chunk_id, t.tf, l.dl, {impact_sql("t.tf", "l.dl")}
    FROM terms t JOIN lengths l USING (chunk_id)
), term_stats AS ({term_stats_upsert("SELECT $1, lexeme, count(*) FROM terms GROUP BY lexeme")}
), tenant_stats AS (
    INSERT INTO knowledge_tenant_stats (tenant_id, shard, chunks, total_dl)
    SELECT $1, pg_backend_pid() % 16, count(*), coalesce(sum(dl), 0) FROM idx HAVING count(*) > 0
    ON CONFLICT (tenant_id, shard) DO UPDATE
    SET chunks = knowledge_tenant_stats.chunks + excluded.chunks,
        total_dl = knowledge_tenant_stats.total_dl + excluded.total_dl
)"""


# A new chunk set of an existing document version (re-chunking): $2 document, $3 version,
# $4 chunker version, $5.. the chunk arrays (`chunk_columns`).
CHUNKS_SQL = "WITH " + _chunk_writes("$2", "$3", "$4", 5) + "\nSELECT count(*) FROM chunks"

# A re-chunked set queued for embedding: $1 tenant, $2 document, $3 version, $4 chunker version,
# $5 model version, $6 chunk count.
QUEUE_SET_SQL = QUEUE_INSERT + "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING"


# --- re-chunking (`Ingestor.rechunk`) ---

# The live version of a document, as re-chunking reads it: $1 tenant, $2 document.
LIVE_DOCUMENT = """
SELECT version, source_artifact_id, title, chunker_version, ingested_by_principal_id
FROM knowledge_documents WHERE tenant_id = $1 AND document_id = $2 AND valid_to IS NULL
"""

# The live version's number (re-checked under the document's lock): $1 tenant, $2 document.
LIVE_VERSION = """
SELECT version FROM knowledge_documents
WHERE tenant_id = $1 AND document_id = $2 AND valid_to IS NULL
"""

# A chunk set of a document version, if it exists: $1 tenant, $2 document, $3 version, $4 chunker version.
CHUNK_SET = """
SELECT superseded_at, chunk_count FROM knowledge_chunk_sets WHERE tenant_id = $1
  AND document_id = $2 AND version = $3 AND chunker_version = $4
"""

# The transaction's clock, for the chunk sets' periods. No parameters.
NOW = "SELECT clock_timestamp()"

# End the live chunk set of a document version: $1 tenant, $2 document, $3 version, $4 when.
END_LIVE_SET = """
UPDATE knowledge_chunk_sets SET superseded_at = $4
WHERE tenant_id = $1 AND document_id = $2 AND version = $3 AND superseded_at IS NULL
"""

# A new chunk set: $1 tenant, $2 document, $3 version, $4 chunker version, $5 chunk count, $6 created at.
INSERT_CHUNK_SET = """
INSERT INTO knowledge_chunk_sets (tenant_id, document_id, version, chunker_version, chunk_count, created_at)
VALUES ($1, $2, $3, $4, $5, $6)
"""

# Make an earlier chunk set live again (its live period kept for as_of): $1 tenant, $2 document,
# $3 version, $4 chunker version, $5 live from.
REVIVE_CHUNK_SET = """
UPDATE knowledge_chunk_sets
SET earlier_periods = earlier_periods || tstzrange(created_at, superseded_at),
    created_at = $5, superseded_at = NULL
WHERE tenant_id = $1 AND document_id = $2 AND version = $3 AND chunker_version = $4
"""

# The document version's live chunker version: $1 tenant, $2 document, $3 version, $4 chunker version.
SET_CHUNKER_VERSION = """
UPDATE knowledge_documents SET chunker_version = $4
WHERE tenant_id = $1 AND document_id = $2 AND version = $3
"""

# The re-chunk's event: $1 tenant, $2 document, $3 version, $4 principal, $5 payload (JSON).
RECHUNKED_EVENT = """
INSERT INTO knowledge_events (tenant_id, event_type, document_id, version, principal_id, payload)
VALUES ($1, 'knowledge.document.rechunked', $2, $3, $4, $5::jsonb)
"""

# The whole ingest in one statement (every write or none; one round trip): the source copy, made
# inside the server and never re-sent; the document; its chunk set; the event; the outcome counter;
# then the chunk set's rows — only if the document row was written. The foreign keys from chunks
# to their set are checked at the end of the statement, when the set exists.
# $1 tenant, $2 input artifact, $3 new source artifact id, $4 sha256, $5 document, $6 version,
# $7 principal, $8 visibility, $9 project, $10 title, $11 doc_date, $12 authority,
# $13 chunker_version, $14 sensitivity, $15 chunk count, $16 event type, $17 event payload,
# $18..$24 the chunk arrays, $25 the semantic arm's model version (NULL: the arm is off, nothing queued).
INGEST_SQL = """
WITH src AS (
    INSERT INTO artifacts (tenant_id, artifact_id, origin, trust, sha256, size_bytes, media_type, file_name,
                           content, expires_at)
    SELECT tenant_id, $3, 'KNOWLEDGE_SOURCE', trust, sha256, size_bytes, media_type, file_name, content, NULL
    FROM artifacts WHERE tenant_id = $1 AND artifact_id = $2 AND sha256 = $4
    RETURNING tenant_id, artifact_id, origin, trust, sha256, size_bytes, media_type, file_name, created_at,
              expires_at
), doc AS (
    INSERT INTO knowledge_documents (tenant_id, document_id, version, ingested_by_principal_id, visibility,
        project_scope, title, source_artifact_id, media_type, doc_date, authority, chunker_version,
        ingested_at, valid_from, sensitivity)
    SELECT $1, $5, $6, $7, $8, $9, $10, src.artifact_id, src.media_type, $11, $12, $13,
           clock_timestamp(), clock_timestamp(), $14
    FROM src
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, document_id, version, chunker_version, ingested_at
), chunk_set AS (
    INSERT INTO knowledge_chunk_sets (tenant_id, document_id, version, chunker_version, chunk_count)
    SELECT tenant_id, document_id, version, chunker_version, $15 FROM doc
), event AS (
    INSERT INTO knowledge_events (tenant_id, event_type, document_id, version, principal_id, payload)
    SELECT tenant_id, $16, document_id, version, $7,
           $17::jsonb || jsonb_build_object('source_artifact_id', (SELECT artifact_id FROM src))
    FROM doc
), queued AS (
""" + QUEUE_INSERT + """
    SELECT tenant_id, document_id, version, chunker_version, $25, $15 FROM doc WHERE $25::text IS NOT NULL
), outcome AS (
""" + outcome_upsert("SELECT tenant_id, current_date, 'accepted', '', 1 FROM doc") + """
), """ + _chunk_writes("$5", "$6", "$13", 18, gate="WHERE EXISTS (SELECT 1 FROM doc)") + """
SELECT src.*, doc.ingested_at FROM src LEFT JOIN doc ON true
"""


# The version an ingest attempt wrote, if its COMMIT took effect, with its source artifact's ref:
# $1 tenant, $2 document, $3 version, $4 principal, $5 the source's SHA-256.
COMMITTED = f"""
SELECT d.ingested_at, d.chunker_version, {ref_columns('a')}
FROM knowledge_documents d
JOIN artifacts a ON a.tenant_id = d.tenant_id AND a.artifact_id = d.source_artifact_id
WHERE d.tenant_id = $1 AND d.document_id = $2 AND d.version = $3
  AND d.ingested_by_principal_id = $4 AND a.sha256 = $5
"""


def chunk_columns(tenant: str, document_id: uuid.UUID, version: int, prepared: PreparedDocument) -> list[Any]:
    chunks = prepared.chunks
    return [
        tenant, document_id, version, prepared.chunker_version,
        [chunk_id(tenant, document_id, version, prepared.chunker_version, c.draft.ordinal, c.content_sha256)
         for c in chunks],
        [c.draft.ordinal for c in chunks],
        [json.dumps(list(c.draft.heading_path)) for c in chunks],
        [c.draft.text for c in chunks],
        [c.draft.tokens for c in chunks],
        [c.instruction_like for c in chunks],
        [c.content_sha256 for c in chunks],
    ]


_DOC_ARRAYS = (("input_id", "uuid"), ("source_id", "uuid"), ("sha", "text"), ("document_id", "uuid"),
               ("principal", "text"), ("visibility", "text"), ("project", "text"), ("title", "text"),
               ("doc_date", "date"), ("authority", "text"), ("chunker_version", "text"), ("sensitivity", "text"),
               ("chunk_count", "int"), ("payload", "text"))
_FIRST_CHUNK_ARRAY = 2 + len(_DOC_ARRAYS) + 2  # $1 tenant, the document arrays, event type, model version
_EVENT, _MODEL = f"${2 + len(_DOC_ARRAYS)}", f"${3 + len(_DOC_ARRAYS)}"
_CHUNK_ARRAYS = (("document_id", "uuid"), ("chunker_version", "text"),
                 *zip(CHUNK_ARRAY_COLUMNS, CHUNK_ARRAY_TYPES, strict=True))


def _unnest(arrays: Sequence[tuple[str, str]], first: int, alias: str) -> str:
    params = ", ".join(f"${first + i}::{t}[]" for i, (_, t) in enumerate(arrays))
    return f"unnest({params}) AS {alias}({', '.join(n for n, _ in arrays)})"


# Every document of a group in one statement: the single path's `INGEST_SQL`, over arrays of
# documents (all new: version 1) and of their chunks. A document whose id exists writes nothing
# (ON CONFLICT DO NOTHING) and neither do its chunks; the caller then rolls the whole group back.
BULK_SQL = f"""
WITH d AS (
    SELECT * FROM {_unnest(_DOC_ARRAYS, 2, "d")}
), src AS (
    INSERT INTO artifacts (tenant_id, artifact_id, origin, trust, sha256, size_bytes, media_type, file_name,
                           content, expires_at)
    SELECT a.tenant_id, d.source_id, 'KNOWLEDGE_SOURCE', a.trust, a.sha256, a.size_bytes, a.media_type,
           a.file_name, a.content, NULL
    FROM d JOIN artifacts a ON a.tenant_id = $1 AND a.artifact_id = d.input_id AND a.sha256 = d.sha
    RETURNING {REF_COLUMNS}
), doc AS (
    INSERT INTO knowledge_documents (tenant_id, document_id, version, ingested_by_principal_id, visibility,
        project_scope, title, source_artifact_id, media_type, doc_date, authority, chunker_version,
        ingested_at, valid_from, sensitivity)
    SELECT $1, d.document_id, 1, d.principal, d.visibility, d.project, d.title, src.artifact_id, src.media_type,
           d.doc_date, d.authority, d.chunker_version, clock_timestamp(), clock_timestamp(), d.sensitivity
    FROM d JOIN src ON src.artifact_id = d.source_id
    ON CONFLICT DO NOTHING
    RETURNING document_id, version, chunker_version, ingested_at
), chunk_set AS (
    INSERT INTO knowledge_chunk_sets (tenant_id, document_id, version, chunker_version, chunk_count)
    SELECT $1, doc.document_id, doc.version, doc.chunker_version, d.chunk_count FROM doc JOIN d USING (document_id)
), event AS (
    INSERT INTO knowledge_events (tenant_id, event_type, document_id, version, principal_id, payload)
    SELECT $1, {_EVENT}, doc.document_id, doc.version, d.principal,
           d.payload::jsonb || jsonb_build_object('source_artifact_id', d.source_id)
    FROM doc JOIN d USING (document_id)
), queued AS (
    {QUEUE_INSERT.strip()}
    SELECT $1, doc.document_id, doc.version, doc.chunker_version, {_MODEL}, d.chunk_count
    FROM doc JOIN d USING (document_id) WHERE {_MODEL}::text IS NOT NULL
), outcome AS (
    INSERT INTO knowledge_ingest_outcomes (tenant_id, day, outcome, reason, count)
    SELECT $1, current_date, 'accepted', '', count(*) FROM doc HAVING count(*) > 0
    ON CONFLICT (tenant_id, day, outcome, reason)
    DO UPDATE SET count = knowledge_ingest_outcomes.count + excluded.count
), {chunk_writes_from(
    f"SELECT r.document_id, 1 AS version, {', '.join('r.' + n for n, _ in _CHUNK_ARRAYS[1:])} "
    f"FROM {_unnest(_CHUNK_ARRAYS, _FIRST_CHUNK_ARRAY, 'r')} "
    "WHERE r.document_id IN (SELECT document_id FROM doc)")}
SELECT d.document_id, src.*, doc.ingested_at
FROM d LEFT JOIN src ON src.artifact_id = d.source_id LEFT JOIN doc USING (document_id)
"""
