"""The migration runner: in order, exactly once, safe under concurrent starts; the schema's keys."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import urllib.parse
import uuid

import anyio
import pytest

from knowledge.config import Settings
from knowledge.errors import ConfigurationError, DatabaseUnavailable, MigrationError
from knowledge.semantic.encoder import available as semantic_available
from knowledge.service import NO_PGVECTOR, KnowledgeService
from knowledge.store.db import Database, dsn_with_database, open_bridge
from knowledge.store.migrate import applied_versions, discover, migrate
from knowledge.store.vectors import table_exists
from tests.conftest import create_database, new_database, open_sql


@pytest.mark.anyio
async def test_migrate_twice_applies_once(admin_dsn: str) -> None:
    dsn = await create_database(admin_dsn, migrated=False)
    expected = [m.version for m in await anyio.to_thread.run_sync(discover)]  # reads files: not on the loop
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


def _as_role(dsn: str, role: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{role}@{host}"))


@pytest.mark.skipif(not semantic_available(), reason="the semantic extra is not installed")
@pytest.mark.anyio
async def test_without_pgvector_the_default_runs_lexical_only_and_the_arm_appears_once_it_is_created(
        admin_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """A role that may not create the vector extension: the default settings open lexical-only with
    one warning (the arm explicitly required is a clear error); once an administrator creates the
    extension, the next start creates the arm's table although 0008 is recorded as applied."""
    role, name = f"kt_plain_{uuid.uuid4().hex[:8]}", f"knowledge_test_{uuid.uuid4().hex[:12]}"
    async with open_bridge() as bridge, Database.open(admin_dsn, bridge=bridge, min_size=1, max_size=1) as admin:
        await admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
        await admin.execute(f"CREATE DATABASE {name} OWNER {role}")
    plain = _as_role(dsn_with_database(admin_dsn, name), role)
    settings = Settings(dsn=plain, semantic_arm=None, sweep_interval_seconds=None, pool_min_size=1, pool_max_size=2)
    with caplog.at_level(logging.WARNING, logger="knowledge.service"):
        async with KnowledgeService.open(settings) as svc:
            arms = svc.retrieval().arms
            assert arms == ["lexical"] and "semantic" not in arms
            async with open_sql(svc.dsn) as db:
                assert 8 in await applied_versions(db) and not await table_exists(db)
    assert caplog.messages.count(NO_PGVECTOR) == 1
    with pytest.raises(ConfigurationError, match="pgvector"):
        async with KnowledgeService.open(settings.model_copy(update={"semantic_arm": True})):
            pass
    async with open_bridge() as bridge:
        async with Database.open(dsn_with_database(admin_dsn, name), bridge=bridge, min_size=1, max_size=1) as owner:
            await owner.execute("CREATE EXTENSION vector")  # what an administrator does
        async with Database.open(plain, bridge=bridge, min_size=1, max_size=1) as db:
            assert await migrate(db) == []  # nothing new to record…
            assert await table_exists(db)  # …but the arm's table is there now


@pytest.mark.anyio
async def test_a_missing_database_is_created_when_the_role_may_else_the_error_says_what_to_run(admin_dsn: str) -> None:
    name = f"knowledge_test_{uuid.uuid4().hex[:12]}"
    settings = Settings(dsn=dsn_with_database(admin_dsn, name), semantic_arm=False, sweep_interval_seconds=None,
                        pool_min_size=1, pool_max_size=2)
    async with KnowledgeService.open(settings) as svc, open_sql(svc.dsn) as db:  # this role may: created, migrated
        assert await applied_versions(db) == [m.version for m in await anyio.to_thread.run_sync(discover)]
    role = f"kt_plain_{uuid.uuid4().hex[:8]}"
    async with open_bridge() as bridge, Database.open(admin_dsn, bridge=bridge, min_size=1, max_size=1) as admin:
        await admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB")
    other = f"knowledge_test_{uuid.uuid4().hex[:12]}"
    with pytest.raises(DatabaseUnavailable) as refused:
        async with KnowledgeService.open(settings.model_copy(
                update={"dsn": _as_role(dsn_with_database(admin_dsn, other), role)})):
            pass
    assert f'CREATE DATABASE "{other}" OWNER "{role}"' in refused.value.message
