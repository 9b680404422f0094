"""The migration runner: numbered SQL files from the ``migrations`` package, applied in order.

Each file ``NNNN_name.sql`` is applied once, in its own transaction, and recorded with its
SHA-256 in ``knowledge_schema_migrations``. The whole run holds a PostgreSQL advisory lock, so
two processes starting at once apply each migration exactly once (the second waits, then finds
nothing to do). An applied file that was edited afterwards is refused: change the schema with a
new file, never by editing an applied one.

A migration may depend on what the server offers: 0008 creates the semantic arm's table only where
the ``vector`` extension is available and may be created, and is recorded as applied either way.
Such migrations are listed in `OPTIONAL` with the relation they create; while it is missing, every
run applies the file again (it is written to be re-run), so the arm's schema appears as soon as an
administrator makes pgvector available (``CREATE EXTENSION vector``) — no manual step.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources

import anyio

from knowledge.errors import MigrationError
from knowledge.store.db import Connection, Database, open_pool

# pg_advisory_lock key: the first 8 bytes of sha256("knowledge.migrations"), as a signed bigint.
LOCK_KEY = int.from_bytes(hashlib.sha256(b"knowledge.migrations").digest()[:8], "big", signed=True)
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS knowledge_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


#: Migrations that create a relation only where the server allows it (see the module docstring):
#: version -> the relation; applied again by every run while the relation is missing.
OPTIONAL = {8: "knowledge_embeddings"}


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def discover() -> list[Migration]:
    """Every migration shipped with the package, in order; gaps and duplicates are errors."""
    found: list[Migration] = []
    for entry in resources.files("knowledge.migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise MigrationError(message=f"migrations must be numbered 1..n without gaps: {[m.version for m in found]}")
    return found


async def migrate(db: Database) -> list[int]:
    """Apply every pending migration; return the versions this call applied.

    Cancellation: the migration in flight rolls back (it is one transaction), those before it
    stay applied, and the advisory lock is released with the connection (a dedicated one, closed
    at the end: the lock is session state, which pooled connections never carry).
    """
    async with db.dedicated() as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
        try:
            return await _apply_pending(conn)
        finally:
            with anyio.CancelScope(shield=True):
                await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)


async def _apply_pending(conn: Connection) -> list[int]:
    await conn.execute(_BOOKKEEPING)
    applied = {r["version"]: r["checksum"] for r in await conn.fetch(
        "SELECT version, checksum FROM knowledge_schema_migrations")}
    known = {m.version: m for m in await anyio.to_thread.run_sync(discover)}  # reads the package's files
    unknown = sorted(set(applied) - set(known))
    if unknown:
        raise MigrationError(message=f"database has migrations {unknown} this code does not know; upgrade the code")
    for version, checksum in applied.items():
        if known[version].checksum != checksum:
            raise MigrationError(message=f"applied migration {version:04d}_{known[version].name} was edited")
    done: list[int] = []
    for migration in known.values():
        if migration.version in applied:
            relation = OPTIONAL.get(migration.version)
            if relation is not None and not await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", relation):
                async with conn.transaction():  # the server may allow it now
                    await conn.execute(migration.sql)
            continue
        async with conn.transaction():
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO knowledge_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                migration.version, migration.name, migration.checksum,
            )
        done.append(migration.version)
    return done


async def applied_versions(db: Database) -> list[int]:
    exists = await db.fetchval("SELECT to_regclass('knowledge_schema_migrations') IS NOT NULL")
    if not exists:
        return []
    return [r["version"] for r in await db.fetch("SELECT version FROM knowledge_schema_migrations ORDER BY 1")]


async def _main(dsn: str) -> None:
    async with open_pool(dsn, min_size=1, max_size=1) as db:
        print(json.dumps({"applied": await migrate(db)}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Apply pending knowledge migrations to DSN.")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    anyio.run(_main, args.dsn, backend=args.backend)
