"""The semantic arm's storage: vectors per chunk window and model version (migration 0008).

- `ensure_index`: one HNSW index per model version, on ``embedding::vector(dim)`` with cosine
  distance, partial on that version (the model version is in the SQL text, never a parameter, so
  the planner can match the partial index; `model_literal` admits only a strict vocabulary).
- `insert_vectors`: a chunk set's window vectors, written inside the caller's transaction (the
  ingest's or the re-chunk's), so a chunk is in both arms or in neither.
- `chunks_missing`, `insert_missing`: re-embedding (a new model version, or chunks ingested while
  the arm was off) from stored chunk text, as a new set of vectors beside the old.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from knowledge.errors import ConfigurationError
from knowledge.store.db import Connection, Database
from supervisors.embedder import Embedder

_VERSION = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


def model_literal(version: str) -> str:
    """The model version as a SQL string literal; only ``[a-z0-9._-]`` is admitted."""
    if not _VERSION.match(version):
        raise ConfigurationError(message=f"not a model version: {version!r}")
    return f"'{version}'"


def index_name(version: str) -> str:
    return "knowledge_embeddings_hnsw_" + re.sub(r"[^a-z0-9]", "_", version)[:30]


async def table_exists(db: Database) -> bool:
    return bool(await db.fetchval("SELECT to_regclass('knowledge_embeddings') IS NOT NULL"))


async def ensure_index(db: Database, version: str, dim: int) -> None:
    """Create the model version's HNSW index unless it exists (one creator at a time)."""
    if not await table_exists(db):
        raise ConfigurationError(
            message="the semantic arm needs pgvector: this server has no knowledge_embeddings table "
                    "(the vector extension was not available when migration 0008 ran)")
    async with db.transaction() as tx:
        await tx.execute("SELECT pg_advisory_xact_lock(hashtextextended('knowledge.embeddings.index', 0))")
        await tx.execute(
            f"CREATE INDEX IF NOT EXISTS {index_name(version)} ON knowledge_embeddings "
            f"USING hnsw ((embedding::vector({int(dim)})) vector_cosine_ops) "
            f"WHERE model_version = {model_literal(version)}")


_INSERT_SQL = """
INSERT INTO knowledge_embeddings (tenant_id, chunk_id, model_version, window_no, embedding)
SELECT $1, r.chunk_id, $2, r.window_no, r.v::vector
FROM unnest($3::text[], $4::int[], $5::text[]) AS r(chunk_id, window_no, v)
"""


def rows(chunk_ids: Sequence[str], vectors: Sequence[Sequence[str]]) -> tuple[list[str], list[int], list[str]]:
    """Parallel arrays (chunk id, window number, vector literal) for `_INSERT_SQL`."""
    ids: list[str] = []
    numbers: list[int] = []
    literals: list[str] = []
    for cid, windows in zip(chunk_ids, vectors, strict=True):
        for n, v in enumerate(windows):
            ids.append(cid)
            numbers.append(n)
            literals.append(v)
    return ids, numbers, literals


async def insert_vectors(tx: Connection, tenant: str, version: str, chunk_ids: Sequence[str],
                         vectors: Sequence[Sequence[str]]) -> int:
    """Write the windows of ``chunk_ids`` (``vectors[i]`` are chunk i's) in the caller's transaction."""
    ids, numbers, literals = rows(chunk_ids, vectors)
    if ids:
        await tx.execute(_INSERT_SQL, tenant, version, ids, numbers, literals)
    return len(ids)


async def chunks_missing(db: Database, version: str, limit: int, tenant: str | None = None,
                         after: tuple[str, str] = ("", "")) -> list[tuple[str, str, tuple[str, ...], str]]:
    """Up to ``limit`` chunks (any chunk set, any version: ``as_of`` reads old ones too) with no
    vector under ``version``, in (tenant, chunk id) order after ``after``."""
    found = await db.fetch(
        """SELECT c.tenant_id, c.chunk_id, c.heading_path, c.text FROM knowledge_chunks c
           WHERE ($1::text IS NULL OR c.tenant_id = $1) AND (c.tenant_id, c.chunk_id) > ($2, $3)
             AND NOT EXISTS (SELECT 1 FROM knowledge_embeddings e
                             WHERE e.tenant_id = c.tenant_id AND e.chunk_id = c.chunk_id AND e.model_version = $4)
           ORDER BY c.tenant_id, c.chunk_id LIMIT $5""", tenant, after[0], after[1], version, limit)
    return [(r["tenant_id"], r["chunk_id"], tuple(r["heading_path"]), r["text"]) for r in found]


# Re-embedding's write: `_INSERT_SQL`, skipping chunks deleted meanwhile and rows written meanwhile.
_INSERT_MISSING_SQL = _INSERT_SQL.rstrip() + """
WHERE EXISTS (SELECT 1 FROM knowledge_chunks c WHERE c.tenant_id = $1 AND c.chunk_id = r.chunk_id)
ON CONFLICT DO NOTHING
"""


async def insert_missing(db: Database, tenant: str, version: str, chunk_ids: Sequence[str],
                         vectors: Sequence[Sequence[str]]) -> None:
    """Re-embedding's write: a chunk deleted meanwhile is skipped; one embedded meanwhile (by a
    concurrent re-embed) is left as it is."""
    ids, numbers, literals = rows(chunk_ids, vectors)
    for _ in range(3):
        try:
            if ids:
                await db.execute(_INSERT_MISSING_SQL, tenant, version, ids, numbers, literals)
        except Exception as exc:  # a chunk deleted after the statement's snapshot: once more
            if getattr(exc, "sqlstate", None) != "23503":
                raise
        else:
            return


@dataclass(frozen=True)
class VectorWriter:
    """What ingest and re-chunking need of the arm: embed a chunk set (before the transaction,
    in the embedder child) and write its vectors (inside it)."""

    embedder: Embedder
    version: str

    async def embed(self, passages: Sequence[tuple[Sequence[str], str]]) -> list[list[str]]:
        return await self.embedder.embed_passages(passages)

    async def write(self, tx: Connection, tenant: str, chunk_ids: Sequence[str],
                    vectors: Sequence[Sequence[str]]) -> int:
        return await insert_vectors(tx, tenant, self.version, chunk_ids, vectors)


#: Chunks read, embedded and written per re-embedding step.
REEMBED_BATCH = 64


async def reembed_missing(db: Database, writer: VectorWriter, tenant: str | None = None) -> int:
    """Embed every chunk (of ``tenant``, or all) that has no vector under ``writer.version``, in
    (tenant, chunk id) order, a batch at a time; returns how many were embedded."""
    done = 0
    after = ("", "")
    while batch := await chunks_missing(db, writer.version, REEMBED_BATCH, tenant, after):
        vectors = await writer.embed([(h, t) for _, _, h, t in batch])
        for owner in dict.fromkeys(t for t, _, _, _ in batch):
            picked = [i for i, row in enumerate(batch) if row[0] == owner]
            await insert_missing(db, owner, writer.version, [batch[i][1] for i in picked], [vectors[i] for i in picked])
        done += len(batch)
        after = (batch[-1][0], batch[-1][1])
    return done
