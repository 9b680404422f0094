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
- Where the arm cannot live: `missing_reason` (why this database has no vector table, for
  ``knowledge stats`` and ``db status``) and `extension_access` (which extensions this role finds
  installed or may create, for ``knowledge db restore``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

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


# Where the semantic arm's table stands: whether it exists, and whether the ``vector`` extension is
# installed in this database or only offered by the server.
_PGVECTOR_STATE = """
SELECT to_regclass('knowledge_embeddings') IS NOT NULL AS has_table,
       EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') AS installed,
       EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') AS offered
"""


async def missing_reason(db: Database) -> str | None:
    """Why this database holds no vectors for the semantic arm, in words for an operator — or None
    when it can: its ``knowledge_embeddings`` table exists. Migration 0008 creates the table only
    where the ``vector`` extension is installed or this role may create it (and a service start
    tries again while it is missing: `knowledge.store.migrate.OPTIONAL`). Reads only the catalogs."""
    row = await db.fetchrow(_PGVECTOR_STATE)
    assert row is not None
    if row["has_table"]:
        return None
    if row["installed"]:
        return ("the vector extension is installed in this database, but the arm's table is not created yet: the "
                "next service start that migrates (a host, knowledge worker, knowledge ingest) creates it")
    if row["offered"]:
        return ("the vector extension is not installed in this database and this role may not create it: an "
                "administrator can run CREATE EXTENSION vector in it")
    return "this server has no pgvector (the vector extension is not available on it)"


# For each of $1 (extension names): whether the server offers it, whether this database has it,
# and whether this role may create it (a superuser; or a trusted extension and CREATE on the database).
_EXTENSION_ACCESS = """
SELECT n.name, e.name IS NOT NULL AS offered, coalesce(e.installed_version IS NOT NULL, false) AS installed,
       coalesce((SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user), false)
       OR (coalesce((SELECT bool_or(v.trusted) FROM pg_available_extension_versions v WHERE v.name = n.name), false)
           AND has_database_privilege(current_database(), 'CREATE')) AS creatable,
       current_user AS role, current_database() AS database
FROM unnest($1::text[]) AS n(name) LEFT JOIN pg_available_extensions e ON e.name = n.name
ORDER BY n.name
"""


@dataclass(frozen=True)
class ExtensionState:
    name: str
    offered: bool  # the server has it (pg_available_extensions)
    installed: bool  # this database has it
    creatable: bool  # this role may create it here


@dataclass(frozen=True)
class ExtensionAccess:
    """What ``knowledge db restore`` needs to know before it restores an archive's extensions."""

    role: str
    database: str
    extensions: list[ExtensionState]


async def extension_access(db: Database, names: Sequence[str]) -> ExtensionAccess:
    """For each extension named: offered by the server, installed in this database, creatable by
    this role (the ``vector`` extension an administrator created is installed but not the role's)."""
    rows = await db.fetch(_EXTENSION_ACCESS, list(names))
    role, database = ((rows[0]["role"], rows[0]["database"]) if rows
                      else (await db.fetchval("SELECT current_user"), await db.fetchval("SELECT current_database()")))
    return ExtensionAccess(role=role, database=database, extensions=[
        ExtensionState(name=r["name"], offered=r["offered"], installed=r["installed"], creatable=r["creatable"])
        for r in rows])


async def ensure_index(db: Database, version: str, dim: int) -> None:
    """Create the model version's HNSW index unless it exists (one creator at a time)."""
    if (reason := await missing_reason(db)) is not None:
        raise ConfigurationError(message=f"the semantic arm needs pgvector: {reason}")
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
