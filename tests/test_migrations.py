"""The migration runner: in order, exactly once, safe under concurrent starts; the schema's keys."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from knowledge.errors import MigrationError
from knowledge.store.db import Database, open_bridge
from knowledge.store.migrate import applied_versions, discover, migrate
from tests.conftest import create_database, new_database


@pytest.mark.anyio
async def test_migrate_twice_applies_once(admin_dsn: str) -> None:
    dsn = await create_database(admin_dsn, migrated=False)
    expected = [m.version for m in discover()]
    async with open_bridge() as bridge, Database.open(dsn, bridge=bridge) as db:
        assert await applied_versions(db) == []
        assert await migrate(db) == expected
        assert await migrate(db) == []
        assert await applied_versions(db) == expected
        counts = await db.fetch("SELECT version, count(*) AS n FROM knowledge_schema_migrations GROUP BY 1")
        assert all(r["n"] == 1 for r in counts)


def test_two_processes_migrating_at_once_apply_each_migration_once(admin_dsn: str) -> None:
    dsn = new_database(admin_dsn, migrated=False)
    cmd = [sys.executable, "-m", "knowledge.store.migrate", "--dsn", dsn]
    procs = [subprocess.Popen([*cmd, "--backend", backend], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for backend in ("trio", "asyncio", "asyncio")]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outputs]
    applied = [v for out, _ in outputs for v in json.loads(out.strip().splitlines()[-1])["applied"]]
    assert sorted(applied) == [m.version for m in discover()]  # each exactly once, across all three


@pytest.mark.anyio
async def test_an_edited_applied_migration_is_refused(admin_dsn: str) -> None:
    dsn = await create_database(admin_dsn)
    async with open_bridge() as bridge, Database.open(dsn, bridge=bridge) as db:
        await db.execute("UPDATE knowledge_schema_migrations SET checksum = repeat('0', 64) WHERE version = 1")
        with pytest.raises(MigrationError, match="edited"):
            await migrate(db)


@pytest.mark.anyio
async def test_a_newer_database_is_refused(admin_dsn: str) -> None:
    dsn = await create_database(admin_dsn)
    async with open_bridge() as bridge, Database.open(dsn, bridge=bridge) as db:
        await db.execute("INSERT INTO knowledge_schema_migrations (version, name, checksum) VALUES (9999, 'x', 'y')")
        with pytest.raises(MigrationError, match="does not know"):
            await migrate(db)


@pytest.mark.anyio
async def test_every_key_carries_tenant_id(database_dsn: str) -> None:
    """Distributable by tenant: tenant_id is in every primary key and every foreign key."""
    async with open_bridge() as bridge, Database.open(database_dsn, bridge=bridge) as db:
        rows = await db.fetch(
            """SELECT c.conrelid::regclass::text AS tbl, c.contype::text AS contype,
                      array_agg(a.attname::text) AS cols
               FROM pg_constraint c
               JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
               WHERE c.contype IN ('p', 'f', 'u') AND c.connamespace = 'public'::regnamespace
               GROUP BY c.oid, c.conrelid, c.contype""")
        tables = {r["tbl"] for r in rows if r["contype"] == "p"}
    assert {"artifacts", "knowledge_documents", "knowledge_chunks", "knowledge_chunk_sets",
            "knowledge_chunk_index", "knowledge_events"} <= tables
    offenders = [(r["tbl"], r["contype"], r["cols"]) for r in rows
                 if r["tbl"] != "knowledge_schema_migrations" and "tenant_id" not in r["cols"]]
    assert offenders == []
