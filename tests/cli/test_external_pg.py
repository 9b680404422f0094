"""The CLI on a PostgreSQL of one's own (issue 37, item 6): ``--dsn`` as a role that owns its
database and nothing more — a role that is not a superuser.

Two such databases, made by the session's superuser on the test server:

- **no pgvector** — the role may not create the ``vector`` extension (it is not trusted in this
  build: only a superuser may create it), so migration 0008 skips the semantic arm's table and the
  service runs lexical-only. Where a build marks pgvector trusted (a database owner could create
  it), the fixture withholds CREATE on the database from the role instead, which a trusted
  extension needs.
- **an administrator's vector** — the superuser ran ``CREATE EXTENSION vector`` in the database
  before the role first used it: the role owns the tables, not the extension.

Every command either works or ends in one line (``knowledge: …``) with its exit code; ``db restore``
restores as the non-owner of ``vector`` (which plain pg_restore cannot: "must be owner of extension
vector").
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import anyio
import asyncpg
import pytest

from knowledge import semantic
from knowledge.cli.db_cmd import archive_extensions, without_extensions
from knowledge.config import Settings
from knowledge.semantic.encoder import available as semantic_available
from knowledge.store.db import dsn_with_database
from knowledge.supervisors.embedded_pg import BIN
from tests.cli.test_cli import RUNBOOK, Cli, Result, cli_runner

NOTES = "The heron cluster fails over at midnight.\n\nCheck the pelican dashboard first.\n"


@dataclass(frozen=True)
class RoleDatabase:
    """A database owned by a non-superuser role, and the role's DSN to it."""

    name: str  # the role's and the database's
    dsn: str
    vector: bool  # whether a superuser created the vector extension in it


def _as_role(admin: str, role: str, password: str, database: str) -> str:
    parts = urlsplit(dsn_with_database(admin, database))
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}:{quote(password, safe='')}@{host}"))


async def _make(admin: str, vector: bool) -> RoleDatabase:
    conn = await asyncpg.connect(admin)
    try:
        if not await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"):
            pytest.skip("making a role and its database needs a superuser DSN")
        offered = await conn.fetchrow("SELECT count(*) > 0 AS offered, coalesce(bool_or(trusted), false) AS trusted "
                                      "FROM pg_available_extension_versions WHERE name = 'vector'")
        assert offered is not None
        if vector and not offered["offered"]:
            pytest.skip("this server has no pgvector")
        name = f"knowledge_t_{uuid.uuid4().hex[:12]}"
        password = uuid.uuid4().hex
        await conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
        await conn.execute(f"CREATE DATABASE {name} OWNER {name}")
        if not vector and offered["trusted"]:  # a trusted extension needs CREATE on the database
            await conn.execute(f"REVOKE CREATE ON DATABASE {name} FROM {name}, PUBLIC")
    finally:
        await conn.close()
    if vector:
        conn = await asyncpg.connect(dsn_with_database(admin, name))
        try:
            await conn.execute("CREATE EXTENSION vector")
        finally:
            await conn.close()
    return RoleDatabase(name, _as_role(admin, name, password, name), vector)


async def _drop(admin: str, name: str) -> None:
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await conn.execute(f"DROP ROLE IF EXISTS {name}")
    finally:
        await conn.close()


async def _fetch(dsn: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


def fetch(dsn: str, sql: str) -> list[asyncpg.Record]:
    return anyio.run(_fetch, dsn, sql)


@pytest.fixture
def role_databases(admin_dsn: str) -> Iterator[list[RoleDatabase]]:
    """Made on demand (``make(vector=…)``), dropped with their roles at the end of the test."""
    made: list[RoleDatabase] = []
    yield made
    for db in made:
        anyio.run(_drop, admin_dsn, db.name)


@pytest.fixture
def arm_default(monkeypatch: pytest.MonkeyPatch) -> str | None:
    """The semantic arm as an operator has it (the measured default: on where the extra is
    installed), not the suite's lexical-only; returns its state on a database with pgvector."""
    monkeypatch.delenv("KNOWLEDGE_SEMANTIC_ARM", raising=False)
    return "on" if semantic.enabled(Settings().semantic_arm) else None


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "runbook.md").write_text(RUNBOOK)
    (root / "notes.txt").write_text(NOTES)
    return root


def works(result: Result) -> Result:
    """Exit 0, and whatever stderr says is in single ``knowledge: …`` lines (a warning), never a traceback."""
    assert result.code == 0, result.err
    assert "Traceback" not in result.err
    assert all(line.startswith("knowledge: ") for line in result.err.splitlines()), result.err
    return result


def fails(result: Result, code: int, *words: str) -> str:
    assert result.code == code, (result.code, result.out, result.err)
    line = result.one_error_line()
    assert all(w in line for w in words), line
    return line


def _scenario(knowledge: Cli, db: RoleDatabase, docs: Path, tmp_path: Path, arm: str | None) -> None:
    """ingest, search, docs list, stats, db status, db dump, a change, db restore — as the role."""
    def run(*args: str) -> Result:
        return knowledge(*args, dsn=db.dsn)

    ingested = works(run("--json", "ingest", str(docs / "runbook.md")))  # the first command migrates
    assert ingested.json()["outcomes"] == {"ingested": 1}
    found = works(run("--json", "search", "revert the pelican release tag"))
    assert "Revert the pelican release tag" in found.json()["passages"][0]["text"]
    assert works(run("search", "pelican release", "--format", "text")).out.strip()
    listed = works(run("--json", "docs", "list")).json()
    assert [d["title"] for d in listed] == ["runbook.md"]
    assert "1 document in tenant" in works(run("docs", "list")).out

    stats = works(run("--json", "stats")).json()
    assert stats["tenant_known"] is True and stats["corpus"]["documents"] == 1
    human = works(run("stats")).out
    assert "instruction-like rate" in human
    status = works(run("--json", "db", "status")).json()
    assert status["running"] is True and status["schema_version"] == status["schema_expected"]
    assert "at --dsn: database " + db.name in works(run("db", "status")).out
    expected_state = None if arm is None else "on" if db.vector else "unavailable"
    for facts in (stats["semantic_arm"], status["semantic_arm"]):
        assert facts["state"] == (expected_state or "off"), facts
    if expected_state == "unavailable":
        assert "CREATE EXTENSION vector" in stats["semantic_arm"]["reason"] and stats["embedding_backlog"] is None
        assert "semantic arm (minilm" in human and "unavailable, search is lexical-only" in human
        assert "semantic arm: unavailable" in works(run("db", "status")).out
    elif expected_state == "on":
        assert stats["embedding_backlog"]["chunks"] >= 1  # queued by the ingest, read without the model

    archive = tmp_path / f"{db.name}.dump"
    assert works(run("db", "dump", str(archive))).out.startswith(f"dumped to {archive}")
    assert ("vector" in archive_extensions(_toc(archive))) is db.vector
    works(run("ingest", str(docs / "notes.txt")))  # a change after the dump
    assert len(works(run("--json", "docs", "list")).json()) == 2
    assert works(run("db", "restore", str(archive))).out.strip() == f"restored from {archive}"
    assert [d["title"] for d in works(run("--json", "docs", "list")).json()] == ["runbook.md"]
    assert works(run("--json", "search", "pelican release")).json()["passages"]
    assert works(run("--json", "stats")).json()["corpus"]["documents"] == 1


def _toc(archive: Path) -> str:
    return subprocess.run([str(BIN / "pg_restore"), "--list", str(archive)], capture_output=True, text=True,
                          check=True).stdout


def test_a_role_on_a_database_without_pgvector(capfd: pytest.CaptureFixture[str], admin_dsn: str, docs: Path,
                                               tmp_path: Path, role_databases: list[RoleDatabase],
                                               arm_default: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    db = anyio.run(_make, admin_dsn, False)
    role_databases.append(db)
    knowledge = cli_runner(capfd, db.dsn, "acme")
    # An unknown tenant (nothing yet): one line, exit 0; JSON says so (and migrates the new database).
    empty = works(knowledge("--json", "stats"))
    assert empty.json()["tenant_known"] is False and "has nothing stored" in empty.json()["note"]
    _scenario(knowledge, db, docs, tmp_path, arm_default)
    assert fetch(db.dsn, "SELECT to_regclass('knowledge_embeddings') AS t")[0]["t"] is None  # lexical-only indeed
    # What needs the arm says what is missing, in one line: a configuration matter (exit 2).
    # (without the semantic extra, the first thing missing is the extra itself)
    fails(knowledge("docs", "reembed"), 2, "configuration", "pgvector" if semantic_available() else "semantic extra")
    monkeypatch.setenv("KNOWLEDGE_SEMANTIC_ARM", "on")  # (without the extra: a configuration error too)
    fails(knowledge("search", "pelican"), 2, "configuration")
    if arm_default:
        assert works(knowledge("--json", "stats")).json()["semantic_arm"]["state"] == "unavailable"


def test_a_role_on_a_database_where_an_administrator_created_vector(
        capfd: pytest.CaptureFixture[str], admin_dsn: str, docs: Path, tmp_path: Path,
        role_databases: list[RoleDatabase], arm_default: str | None) -> None:
    db = anyio.run(_make, admin_dsn, True)
    role_databases.append(db)
    knowledge = cli_runner(capfd, db.dsn, "acme")
    _scenario(knowledge, db, docs, tmp_path, arm_default)
    owner = fetch(db.dsn, "SELECT r.rolname, r.rolsuper FROM pg_extension e JOIN pg_roles r ON r.oid = e.extowner "
                          "WHERE e.extname = 'vector'")
    assert len(owner) == 1 and owner[0]["rolsuper"] and owner[0]["rolname"] != db.name  # left as it was
    assert fetch(db.dsn, "SELECT to_regclass('knowledge_embeddings') AS t")[0]["t"] is not None
    # The simulation is the reported one: plain pg_restore, as this role, cannot restore the archive.
    archive = tmp_path / f"{db.name}.dump"
    plain = subprocess.run([str(BIN / "pg_restore"), "--clean", "--if-exists", "--no-owner", "--single-transaction",
                            "--dbname", db.dsn, str(archive)], capture_output=True, text=True, check=False)
    assert plain.returncode != 0 and "must be owner of extension vector" in plain.stderr


def test_an_archive_needing_an_extension_the_role_may_not_create_is_refused_in_one_line(
        capfd: pytest.CaptureFixture[str], admin_dsn: str, docs: Path, tmp_path: Path,
        role_databases: list[RoleDatabase]) -> None:
    with_vector = anyio.run(_make, admin_dsn, True)
    role_databases.append(with_vector)
    without = anyio.run(_make, admin_dsn, False)
    role_databases.append(without)
    knowledge = cli_runner(capfd, with_vector.dsn, "acme")
    works(knowledge("ingest", str(docs / "runbook.md"), dsn=with_vector.dsn))
    works(knowledge("ingest", str(docs / "notes.txt"), dsn=without.dsn))
    archive = tmp_path / "with-vector.dump"
    works(knowledge("db", "dump", str(archive), dsn=with_vector.dsn))
    fails(knowledge("db", "restore", str(archive), dsn=without.dsn), 2, "needs the vector extension",
          without.name, "CREATE EXTENSION vector", "nothing was restored")
    assert [d["title"] for d in works(knowledge("--json", "docs", "list", dsn=without.dsn)).json()] == [
        "notes.txt"]  # as it was
    garbage = tmp_path / "not-an-archive.dump"
    garbage.write_bytes(b"PGDMP? no")
    fails(knowledge("db", "restore", str(garbage), dsn=without.dsn), 2, "not an archive")


def test_the_table_of_contents_without_an_extension() -> None:
    toc = (";\n; Selected TOC Entries:\n;\n2; 3079 16388 EXTENSION - vector \n"
           "3003; 0 0 COMMENT - EXTENSION vector \n"
           "4; 3079 16400 EXTENSION - odd name \n"
           '3005; 0 0 COMMENT - EXTENSION "odd name" \n'
           "222; 1259 17063 TABLE public artifacts rb\n"
           "3004; 0 0 COMMENT public TABLE knowledge_chunks rb\n")
    assert archive_extensions(toc) == {"vector", "odd name"}
    kept = without_extensions(toc, {"vector"})
    assert ";2; 3079 16388 EXTENSION - vector \n;3003; 0 0 COMMENT - EXTENSION vector \n" in kept
    assert '\n4; 3079 16400 EXTENSION - odd name \n3005; 0 0 COMMENT - EXTENSION "odd name" \n222;' in kept
    odd = without_extensions(toc, {"odd name"})
    assert ';4; 3079 16400 EXTENSION - odd name \n;3005; 0 0 COMMENT - EXTENSION "odd name" \n' in odd
    assert "\n2; 3079 16388 EXTENSION - vector \n" in odd
    assert kept.endswith("\n3004; 0 0 COMMENT public TABLE knowledge_chunks rb\n")
    assert without_extensions(toc, set()) == toc
