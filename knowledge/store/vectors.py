"""The semantic arm's storage: vectors per chunk window and model version (migration 0008).

- `ensure_index`: one HNSW index per model version, on ``embedding::vector(dim)`` with cosine
  distance, partial on that version (the model version is in the SQL text, never a parameter, so
  the planner can match the partial index; `model_literal` admits only a strict vocabulary).
- `insert_missing`: the embedding drain's write (`knowledge.semantic.queue`): window vectors of
  chunks that still exist, each written once.
- The semantic arm's reads (`knowledge.semantic.arm`): `nearest_sql` (the nearest windows under the
  isolation predicates, by the HNSW index or an exact pass), `scan_options_sql` (pgvector's scan
  options, set for the transaction), `cosines_sql` (the best window's cosine of given chunks) and
  `WINDOW_COUNT` (a tenant's windows of a version, up to a limit).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from knowledge.errors import ConfigurationError
from knowledge.store.db import Database

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


# The drain's write: `_INSERT_SQL`, skipping chunks deleted meanwhile and rows written meanwhile.
_INSERT_MISSING_SQL = _INSERT_SQL.rstrip() + """
WHERE EXISTS (SELECT 1 FROM knowledge_chunks c WHERE c.tenant_id = $1 AND c.chunk_id = r.chunk_id)
ON CONFLICT DO NOTHING
"""


async def insert_missing(db: Database, tenant: str, version: str, chunk_ids: Sequence[str],
                         vectors: Sequence[Sequence[str]]) -> None:
    """The drain's write: a chunk deleted meanwhile is skipped; one embedded meanwhile (by another
    drain whose lease had expired) is left as it is."""
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



# --- the semantic arm's reads -------------------------------------------------------------------


def scan_options_sql(ef_search: int, max_scan_tuples: int) -> str:
    """pgvector's HNSW scan options for the rest of the transaction: ``ef_search``, iterative
    scans (relaxed order) and how many tuples they may scan. No parameters."""
    return f"""
SELECT set_config('hnsw.ef_search', '{ef_search}', true), set_config('hnsw.iterative_scan', 'relaxed_order', true),
       set_config('hnsw.max_scan_tuples', '{max_scan_tuples}', true)
"""


def cosines_sql(version: str, dim: int) -> str:
    """The best window's cosine to the query of each given chunk that has vectors of ``version``:
    $1 tenant, $2 query vector, $3 chunk ids."""
    return f"""
SELECT e.chunk_id, max(1 - (e.embedding::vector({dim}) <=> $2::vector({dim}))) AS cosine
FROM knowledge_embeddings e
WHERE e.tenant_id = $1 AND e.model_version = {model_literal(version)} AND e.chunk_id = ANY($3::text[])
GROUP BY e.chunk_id
"""


# A tenant's windows of a model version, counted up to a limit: $1 tenant, $2 model version, $3 limit.
WINDOW_COUNT = """
SELECT count(*) FROM (SELECT 1 FROM knowledge_embeddings
                      WHERE tenant_id = $1 AND model_version = $2 LIMIT $3) AS s
"""
