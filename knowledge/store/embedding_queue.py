"""The embedding queue's statements (migration 0009): one row per chunk set and model version whose
chunks still need vectors. `knowledge.semantic.queue` runs them (its `EmbeddingDrain` claims,
renews, releases and deletes rows; `enqueue_missing`, `pending` and `queue_backlog` read and fill
the queue); the ingest's and re-chunk's statements (`knowledge.store.documents`) end with
`QUEUE_INSERT`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from knowledge.store.db import Database

# A chunk set queued for embedding: the ingest's and re-chunk's statements end with it (followed by
# VALUES or a SELECT of tenant, document, version, chunker version, model version, chunk count).
QUEUE_INSERT = """
INSERT INTO knowledge_embedding_queue (tenant_id, document_id, version, chunker_version, model_version, chunk_count)
"""

# Claim claimable rows under a lease, tenant-fair: each tenant's oldest row first, then each one's
# second …, the queue's order among equals — one tenant's backlog never holds another's new chunk
# sets behind it. $1 model version, $2 rows at most, $3 lease seconds, $4 attempts at most (a row
# claimed that often is left for an operator), $5 the one tenant to claim for (NULL: any). The
# claimable condition is repeated on the locked rows: a row another drain claimed meanwhile is re-
# checked (READ COMMITTED) and skipped.
CLAIM = """
WITH ranked AS (
    SELECT tenant_id, seq, row_number() OVER (PARTITION BY tenant_id ORDER BY seq) AS turn
    FROM knowledge_embedding_queue
    WHERE model_version = $1 AND ($5::text IS NULL OR tenant_id = $5)
      AND (leased_until IS NULL OR leased_until < clock_timestamp()) AND attempts < $4
), picked AS (
    SELECT q.tenant_id, q.seq FROM knowledge_embedding_queue q JOIN ranked r USING (tenant_id, seq)
    WHERE (q.leased_until IS NULL OR q.leased_until < clock_timestamp()) AND q.attempts < $4
    ORDER BY r.turn, r.seq LIMIT $2 FOR UPDATE OF q SKIP LOCKED
)
UPDATE knowledge_embedding_queue q
SET leased_until = clock_timestamp() + make_interval(secs => $3), attempts = q.attempts + 1
FROM picked
WHERE q.tenant_id = picked.tenant_id AND q.seq = picked.seq
RETURNING q.tenant_id, q.seq, q.document_id, q.version, q.chunker_version
"""

# The chunks of a queued set without a vector under the model version, in order: $1 tenant,
# $2 document, $3 version, $4 chunker version, $5 model version.
UNEMBEDDED_OF_SET = """
SELECT c.chunk_id, c.heading_path, c.text, c.tokens FROM knowledge_chunks c
WHERE c.tenant_id = $1 AND c.document_id = $2 AND c.version = $3 AND c.chunker_version = $4
  AND NOT EXISTS (SELECT 1 FROM knowledge_embeddings e
                  WHERE e.tenant_id = c.tenant_id AND e.chunk_id = c.chunk_id AND e.model_version = $5)
ORDER BY c.ordinal
"""

# Renew the lease of claimed rows (progress: the attempts start over): $1 tenants, $2 sequence
# numbers (parallel arrays), $3 lease seconds.
RENEW = """
UPDATE knowledge_embedding_queue SET leased_until = clock_timestamp() + make_interval(secs => $3), attempts = 0
WHERE tenant_id = ANY($1::text[]) AND seq = ANY($2::bigint[])
"""

# Give claimed rows back: $1 tenants, $2 sequence numbers, $3 attempts given back (0 after a
# failure, which keeps the attempt; 1 when the service closes, no fault of the rows').
RELEASE = """
UPDATE knowledge_embedding_queue SET leased_until = NULL, attempts = greatest(attempts - $3::int, 0)
WHERE tenant_id = ANY($1::text[]) AND seq = ANY($2::bigint[])
"""

# Rows whose sets are embedded: $1 tenants, $2 sequence numbers.
DONE = "DELETE FROM knowledge_embedding_queue WHERE tenant_id = ANY($1::text[]) AND seq = ANY($2::bigint[])"

# Queue every chunk set with a chunk that has no vector under the model version (rows already
# queued keep their place, their attempts start over); returns each set's chunk count:
# $1 model version, $2 tenant (NULL: all).
ENQUEUE_MISSING = QUEUE_INSERT + """
SELECT s.tenant_id, s.document_id, s.version, s.chunker_version, $1, s.chunk_count
FROM knowledge_chunk_sets s
WHERE ($2::text IS NULL OR s.tenant_id = $2)
  AND EXISTS (SELECT 1 FROM knowledge_chunks c
              WHERE c.tenant_id = s.tenant_id AND c.document_id = s.document_id AND c.version = s.version
                AND c.chunker_version = s.chunker_version
                AND NOT EXISTS (SELECT 1 FROM knowledge_embeddings e
                                WHERE e.tenant_id = c.tenant_id AND e.chunk_id = c.chunk_id
                                  AND e.model_version = $1))
ORDER BY s.created_at
ON CONFLICT (tenant_id, document_id, version, chunker_version, model_version) DO UPDATE SET attempts = 0
RETURNING chunk_count
"""

# Chunk sets queued: $1 tenant, $2 model version, $3 document (NULL: all of the tenant's).
PENDING = """SELECT count(*) FROM knowledge_embedding_queue
           WHERE tenant_id = $1 AND model_version = $2 AND ($3::uuid IS NULL OR document_id = $3)"""

# What waits (sets, stuck sets, the oldest wait in seconds, chunks without vectors): $1 model
# version, $2 attempts at which a set is stuck, $3 tenant (NULL: all).
BACKLOG = """
SELECT count(*) AS sets, count(*) FILTER (WHERE q.attempts >= $2) AS stuck,
       coalesce(extract(epoch FROM clock_timestamp() - min(q.queued_at)), 0)::float8 AS oldest,
       (SELECT count(*) FROM knowledge_embedding_queue q2
        JOIN knowledge_chunks c ON c.tenant_id = q2.tenant_id AND c.document_id = q2.document_id
             AND c.version = q2.version AND c.chunker_version = q2.chunker_version
        WHERE q2.model_version = $1 AND ($3::text IS NULL OR q2.tenant_id = $3)
          AND NOT EXISTS (SELECT 1 FROM knowledge_embeddings e
                          WHERE e.tenant_id = c.tenant_id AND e.chunk_id = c.chunk_id AND e.model_version = $1)
       ) AS chunks
FROM knowledge_embedding_queue q WHERE q.model_version = $1 AND ($3::text IS NULL OR q.tenant_id = $3)
"""


# --- the statements, each a function with named arguments (issue 33: the store owns its statements) ---------

@dataclass(frozen=True)
class QueueRow:
    """A claimed queue row: one chunk set (tenant, document, version, chunker version) and its place."""

    tenant_id: str
    seq: int
    document_id: uuid.UUID
    version: int
    chunker_version: str


@dataclass(frozen=True)
class UnembeddedChunk:
    """A chunk of a claimed set without a vector of the model version: what the drain embeds."""

    chunk_id: str
    heading_path: tuple[str, ...]
    text: str
    tokens: int


@dataclass(frozen=True)
class BacklogCounts:
    """The queue's chunk sets, their chunks, the sets left for an operator and the oldest wait."""

    chunk_sets: int
    chunks: int
    stuck_sets: int
    oldest_wait_seconds: float


def _keys(rows: Sequence[QueueRow]) -> tuple[list[str], list[int]]:
    return [r.tenant_id for r in rows], [r.seq for r in rows]


async def enqueue_missing_sets(db: Database, *, version: str, tenant: str | None) -> int:
    """`ENQUEUE_MISSING`: queue the chunk sets with a chunk lacking a ``version`` vector; their chunks."""
    return sum(int(r["chunk_count"]) for r in await db.fetch(ENQUEUE_MISSING, version, tenant))


async def pending_sets(db: Database, *, version: str, tenant: str, document_id: uuid.UUID | None) -> int:
    """`PENDING`: chunk sets of ``tenant`` (of one document, if given) queued under ``version``."""
    return int(await db.fetchval(PENDING, tenant, version, document_id))


async def claim_sets(db: Database, *, version: str, rows: int, lease_seconds: float, max_attempts: int,
                     tenant: str | None) -> list[QueueRow]:
    """`CLAIM`: at most ``rows`` claimable rows under a lease of ``lease_seconds``, tenant-fair; in
    queue order."""
    found = await db.fetch(CLAIM, version, rows, lease_seconds, max_attempts, tenant)
    return sorted((QueueRow(r["tenant_id"], int(r["seq"]), r["document_id"], int(r["version"]), r["chunker_version"])
                   for r in found), key=lambda r: r.seq)


async def unembedded_chunks(db: Database, *, row: QueueRow, model_version: str) -> list[UnembeddedChunk]:
    """`UNEMBEDDED_OF_SET`: the chunks of a claimed chunk set without a ``model_version`` vector."""
    found = await db.fetch(UNEMBEDDED_OF_SET, row.tenant_id, row.document_id, row.version, row.chunker_version,
                           model_version)
    return [UnembeddedChunk(r["chunk_id"], tuple(r["heading_path"]), r["text"], int(r["tokens"])) for r in found]


async def renew_lease(db: Database, *, rows: Sequence[QueueRow], lease_seconds: float) -> None:
    """`RENEW`: extend the claimed rows' lease (progress was made: their attempts start again)."""
    await db.execute(RENEW, *_keys(rows), lease_seconds)


async def remove_done(db: Database, *, rows: Sequence[QueueRow]) -> None:
    """`DONE`: delete the rows whose chunks all have vectors."""
    await db.execute(DONE, *_keys(rows))


async def release_claim(db: Database, *, rows: Sequence[QueueRow], attempts_back: int) -> None:
    """`RELEASE`: give claimed rows back, with ``attempts_back`` attempts returned (0 after a failure)."""
    await db.execute(RELEASE, *_keys(rows), attempts_back)


async def backlog_counts(db: Database, *, version: str, max_attempts: int, tenant: str | None) -> BacklogCounts:
    """`BACKLOG`: the queue's sets, chunks, stuck sets and oldest wait for ``version``."""
    row = await db.fetchrow(BACKLOG, version, max_attempts, tenant)
    assert row is not None  # an aggregate: one row, always
    return BacklogCounts(int(row["sets"]), int(row["chunks"]), int(row["stuck"]), round(float(row["oldest"]), 3))
