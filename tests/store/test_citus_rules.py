"""Ready for Citus (issue 36): the rules a tenant-distributed schema needs, held by the schema and by
the SQL the store defines.

Citus distributes a table by one column and co-locates tables distributed by the same one, so a
join, a key and a foreign key stay on one node only where they include that column. Here it is
``tenant_id`` (`migrations/0015_citus_distribution.sql`):

- **the schema** (read from a migrated database's catalog): every table but the migration ledger
  has ``tenant_id``, and each of its primary keys, unique constraints, unique indexes and foreign
  keys includes it — a foreign key matching ``tenant_id`` to the referenced table's ``tenant_id``;
  and the migration distributes exactly those tables;
- **the statements** (every SQL statement in ``knowledge/store/``, parsed by PostgreSQL's own parser
  through pglast): each tenant table a statement reads or writes is bound by ``tenant_id`` — an
  equality, ``IN``/``= ANY`` or ``USING (tenant_id)`` in the statement, an ``INSERT``'s column —
  so it routes to one tenant's shard, and its joins are co-located. The statements that serve every
  tenant by design (the sweeper, the attachment workers' claims, the audit, the embedding drain,
  retention, listings for an operator) are named in `CROSS_TENANT` with why; on Citus they run on
  every shard. A statement built at call time from a function's own values cannot be parsed here:
  `BUILT_AT_CALL_TIME` names each, with where its ``tenant_id`` binding is.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from pglast import parse_sql
from pglast.parser import ParseError

from knowledge.store.db import Database

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "knowledge" / "store"
MIGRATION = ROOT / "migrations" / "0015_citus_distribution.sql"
#: Tables without ``tenant_id``: the migration ledger, local to the coordinator (only it migrates).
LOCAL_TABLES = {"knowledge_schema_migrations"}
_SQL = re.compile(r"^\s*(SELECT|INSERT|WITH|UPDATE|DELETE)\s")  # (upper case: the store's style; not a docstring)

#: Statements that serve every tenant by design (file:function or file:CONSTANT), and why. Most take
#: an optional tenant (``$1 IS NULL OR tenant_id = $1``): one tenant's shard when given, every shard
#: for an operator's or a background job's view of the whole store.
_EVERY_OR_ONE = "an operator's report: one tenant's, or (no tenant given) every tenant's"
CROSS_TENANT: dict[str, str] = {
    "answers.py:citation_stats": _EVERY_OR_ONE,
    "metrics.py:budget_pressure": _EVERY_OR_ONE,
    "metrics.py:ingest_stats": _EVERY_OR_ONE,
    "metrics.py:ingest_trend": _EVERY_OR_ONE,
    "catalog.py:_TENANTS_SQL": "`knowledge tenants`: lists every tenant (an operator's command)",
    "artifacts.py:sweep": "the sweeper collects expired sources of every tenant (one background job per store)",
    "attachment_queue.py:CLAIM": "attachment workers serve every tenant unless `attachment_tenant` names one",
    "attachment_queue.py:COUNTS": "the worker's queue counts, over the tenants it serves",
    "attachment_queue.py:NEXT_DUE": "when the worker's next attachment is due, over the tenants it serves",
    "awaiting.py:COUNTS": "`knowledge docs reextract` for one tenant or all: what still awaits an extractor",
    "awaiting.py:EXTRACTED": "`knowledge docs reextract` for one tenant or all: documents whose extractor changed",
    "awaiting.py:RELEASE_ATTACHMENTS": "`knowledge docs reextract` for one tenant or all: attachments made pending",
    "embedding_queue.py:BACKLOG": "the embedding drain serves every tenant: its backlog, or one tenant's",
    "embedding_queue.py:CLAIM": "the embedding drain claims the oldest work of any tenant",
    "traces.py:_EXPIRE": "trace retention is one policy for the store: expired traces of every tenant",
    "traces.py:_REDUCE": "trace retention: reduced traces of every tenant",
    "audit.py:ATTACHMENTS_SEEN": "the invariant audit checks the whole store (stress runs, `knowledge db` checks)",
    "audit.py:DOCUMENT_VERSIONS": "the invariant audit checks the whole store",
    "audit.py:POSTINGS": "the invariant audit checks the whole store",
}


#: Module constants that are fragments of other statements (checked whole there), and where.
FRAGMENTS = {
    "embedding_queue.py:QUEUE_INSERT": "the INSERT head the ingest's and re-chunk's statements end with",
}


def _built(module: str, builder: str, *args: Any) -> Callable[[], str]:
    def build() -> str:
        import importlib

        return str(getattr(importlib.import_module(f"knowledge.store.{module}"), builder)(*args))
    return build


#: Statements built at call time from a function's own values (file:function): a sample of what each
#: builds, checked like the rest — or None where the store's constants that use it are checked instead
#: or it touches no table — and why.
BUILT_AT_CALL_TIME: dict[str, tuple[Callable[[], str] | None, str]] = {
    "documents.py:outcome_upsert": (_built("documents", "outcome_upsert", "VALUES ($1, current_date, $2, $3, 1)"),
                                    "its rows are the caller's; its INSERT names tenant_id"),
    "documents.py:_chunk_writes": (None, "a fragment of CHUNKS_SQL and INGEST_SQL, which are checked whole"),
    "evidence.py:document_frequency": (_built("evidence", "document_frequency", "'term'"), "one lexeme's df"),
    "impact.py:term_stats_upsert": (_built("impact", "term_stats_upsert", "SELECT $1, 'term', 1"),
                                    "its rows are the caller's; its INSERT names tenant_id"),
    "locks.py:lock_documents": (None, "advisory locks on (tenant, document) keys: no table"),
    "retrieval.py:nearest_sql": (_built("retrieval", "nearest_sql", "m1", 384, False), "the semantic arm's query"),
    "vectors.py:scan_options_sql": (_built("vectors", "scan_options_sql", 40, 1000), "set_config calls: no table"),
    "vectors.py:cosines_sql": (_built("vectors", "cosines_sql", "m1", 384), "cosines of given chunks"),
}


# -- the schema ------------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_citus_every_key_of_a_tenant_table_includes_tenant_id(sql: Database) -> None:
    tables = {r["table"]: set(r["columns"]) for r in await sql.fetch(
        """SELECT c.relname AS table, array_agg(a.attname::text) AS columns
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
            WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') GROUP BY c.relname""")}
    tenant_tables = {t for t, columns in tables.items() if "tenant_id" in columns}
    assert set(tables) - tenant_tables == LOCAL_TABLES
    problems = []
    for row in await sql.fetch(
            """SELECT c.conrelid::regclass::text AS table, c.conname, c.contype::text AS kind,
                      (SELECT array_agg(a.attname::text ORDER BY k.i) FROM unnest(c.conkey) WITH ORDINALITY k(n, i)
                         JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n) AS columns,
                      c.confrelid::regclass::text AS referenced,
                      (SELECT array_agg(a.attname::text ORDER BY k.i) FROM unnest(c.confkey) WITH ORDINALITY k(n, i)
                         JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n) AS referenced_columns
                 FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
                WHERE n.nspname = current_schema() AND c.contype IN ('p', 'u', 'f')"""):
        if row["table"] not in tenant_tables:
            continue
        columns = list(row["columns"])
        if "tenant_id" not in columns:
            problems.append(f"{row['table']}.{row['conname']} ({row['kind']}) lacks tenant_id: {columns}")
        elif row["kind"] == "f":
            at = columns.index("tenant_id")
            if row["referenced"] not in tenant_tables or list(row["referenced_columns"])[at] != "tenant_id":
                problems.append(f"{row['table']}.{row['conname']} does not match tenant_id to "
                                f"{row['referenced']}.tenant_id: {columns} -> {row['referenced_columns']}")
    for row in await sql.fetch(
            """SELECT t.relname AS table, i.relname AS index,
                      array_agg(a.attname::text) FILTER (WHERE a.attname IS NOT NULL) AS columns
                 FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
                 JOIN pg_namespace n ON n.oid = t.relnamespace
                 LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY(x.indkey)
                WHERE n.nspname = current_schema() AND x.indisunique GROUP BY t.relname, i.relname"""):
        if row["table"] in tenant_tables and "tenant_id" not in (row["columns"] or []):
            problems.append(f"unique index {row['index']} on {row['table']} lacks tenant_id")
    assert problems == []
    planned = await anyio.to_thread.run_sync(distributed_by_the_migration)  # (a file read: not on the loop)
    assert planned - {"knowledge_embeddings"} <= tenant_tables <= planned  # (pgvector's table is optional)


def distributed_by_the_migration() -> set[str]:
    """The tables migration 0015 distributes (one ARRAY[...]), and those a later migration that makes
    a tenant table distributes by name where citus is present."""
    text = MIGRATION.read_text(encoding="utf-8")
    listed = re.search(r"ARRAY\[(.*?)\]", text, re.DOTALL)
    assert listed is not None, "the migration names its distributed tables in one ARRAY[...]"
    later = (f.read_text(encoding="utf-8") for f in sorted(MIGRATION.parent.glob("*.sql")) if f.name > MIGRATION.name)
    return set(re.findall(r"'([a-z_]+)'", listed.group(1))) | {
        t for sql in later for t in re.findall(r"create_distributed_table\('([a-z_]+)', 'tenant_id'", sql)}


# -- the statements ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Statement:
    where: str  # file:function (or file:CONSTANT), as `CROSS_TENANT` names it
    line: str  # file:line
    sql: str | None  # None: built at call time, not parseable here


def _module_namespace(path: Path) -> dict[str, Any]:
    import importlib

    return vars(importlib.import_module(f"knowledge.store.{path.stem}"))


def store_statements() -> Iterator[Statement]:
    """Every SQL statement of ``knowledge/store/``: each module-level constant holding one (as the
    module built it: concatenations and helpers evaluated), and each literal or f-string inside a
    function (f-strings evaluated with the module's own names; one that needs the function's own
    values is built at call time)."""
    for path in sorted(STORE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        namespace = _module_namespace(path)
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                value = namespace.get(target.id) if isinstance(target, ast.Name) else None
                if isinstance(value, str) and _SQL.match(value):
                    yield Statement(f"{path.name}:{target.id}", f"{path.name}:{node.lineno}", value)
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            parts = {id(v) for n in ast.walk(function) if isinstance(n, ast.JoinedStr) for v in n.values}
            for node in ast.walk(function):
                text: str | None
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
                    text = node.value
                elif isinstance(node, ast.JoinedStr):
                    shape = "".join(v.value if isinstance(v, ast.Constant) else " x " for v in node.values)
                    if not _SQL.match(shape):
                        continue
                    try:
                        text = eval(compile(ast.Expression(node), str(path), "eval"), dict(namespace))
                    except NameError:  # a function's own value: built at call time
                        text = None
                else:
                    continue
                if text is None or _SQL.match(text):
                    yield Statement(f"{path.name}:{function.name}", f"{path.name}:{node.lineno}", text)


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list | tuple):
        for value in node:
            yield from _walk(value)


def _names(column_ref: dict[str, Any]) -> list[str]:
    return [f.get("sval", "*") for f in column_ref.get("fields", [])]


def _conjuncts(clause: Any) -> Iterator[dict[str, Any]]:
    """The conditions that must all hold: ``clause`` itself, or the arms of its ANDs (never an OR's
    or a NOT's: ``tenant_id = $1 OR $1 IS NULL`` binds nothing)."""
    if not isinstance(clause, dict):
        return
    if clause.get("@") == "BoolExpr" and clause.get("boolop", {}).get("name") == "AND_EXPR":
        for arm in clause.get("args", []):
            yield from _conjuncts(arm)
    else:
        yield clause


def _tenant_equalities(condition: dict[str, Any]) -> set[str]:
    """The qualifiers whose ``tenant_id`` ``condition`` fixes: ``q.tenant_id = …``, ``= ANY(…)``,
    ``IN (…)``, either side."""
    if condition.get("@") != "A_Expr" or [n.get("sval") for n in condition.get("name", [])] != ["="] or \
            condition.get("kind", {}).get("name") not in ("AEXPR_OP", "AEXPR_OP_ANY", "AEXPR_IN"):
        return set()
    found = set()
    for side in (condition.get("lexpr"), condition.get("rexpr")):
        if isinstance(side, dict) and side.get("@") == "ColumnRef" and _names(side)[-1] == "tenant_id":
            found.add(".".join(_names(side)[:-1]))
    return found


def unbound_tables(sql: str, tenant_tables: set[str]) -> list[str]:
    """The tenant tables ``sql`` reads or writes without binding them by ``tenant_id``."""
    unbound = []
    for raw in parse_sql(sql):
        tree = raw.stmt(skip_none=True)
        nodes = list(_walk(tree))
        bound: set[str] = set()  # qualifiers (alias or table name) bound; "" for an unqualified tenant_id
        for node in nodes:
            kind = node.get("@")
            for clause in (node.get("whereClause"), node.get("quals")):
                for condition in _conjuncts(clause):
                    bound |= _tenant_equalities(condition)
            if kind == "JoinExpr" and "tenant_id" in [s.get("sval") for s in node.get("usingClause", [])]:
                for side in (node.get("larg"), node.get("rarg")):
                    if isinstance(side, dict) and side.get("@") == "RangeVar":
                        bound.add(side.get("alias", {}).get("aliasname") or side["relname"])
            elif kind == "InsertStmt" and "tenant_id" in [c.get("name") for c in node.get("cols", [])]:
                bound.add(node["relation"].get("alias", {}).get("aliasname") or node["relation"]["relname"])
        ctes = {c.get("ctename") for c in nodes if c.get("@") == "CommonTableExpr"}
        for node in nodes:
            if node.get("@") != "RangeVar" or node["relname"] not in tenant_tables or node["relname"] in ctes:
                continue
            name = node.get("alias", {}).get("aliasname") or node["relname"]
            if name not in bound and "" not in bound:
                unbound.append(node["relname"])
    return unbound


TENANT_TABLES = {
    "artifacts", "awaiting_extractor", "knowledge_budget_pressure", "knowledge_chunk_index", "knowledge_chunk_sets",
    "knowledge_chunks", "knowledge_citation_stats", "knowledge_deleted_chunks", "knowledge_documents",
    "knowledge_embedding_queue", "knowledge_embeddings", "knowledge_events", "knowledge_ingest_outcomes",
    "knowledge_postings", "knowledge_tenant_stats", "knowledge_term_stats", "knowledge_trace_answers",
    "knowledge_trace_citations",
    "knowledge_trace_passages", "knowledge_trace_tool_calls", "knowledge_traces",
}


def test_citus_the_tenant_tables_named_here_are_the_migrations() -> None:
    assert distributed_by_the_migration() == TENANT_TABLES


def test_citus_every_statement_on_a_tenant_table_binds_tenant_id() -> None:
    statements = list(store_statements())
    assert len(statements) > 150  # the store's statements were found (178 literals, 35 f-strings when written)
    unbound: dict[str, list[str]] = {}
    unparsed = {s.where for s in statements if s.sql is None}
    assert unparsed == set(BUILT_AT_CALL_TIME)  # each statement built at call time has its sample
    samples = [Statement(where, where, build()) for where, (build, _) in BUILT_AT_CALL_TIME.items() if build]
    fragments = {s.where for s in statements if s.where in FRAGMENTS}
    assert fragments == set(FRAGMENTS)
    for statement in [*statements, *samples]:
        if statement.sql is None or statement.where in FRAGMENTS:
            continue
        try:
            tables = unbound_tables(statement.sql, TENANT_TABLES)
        except ParseError as exc:
            raise AssertionError(f"{statement.line}: not parseable SQL ({exc})") from None
        if tables:
            unbound.setdefault(statement.where, []).extend(tables)
    assert {w: sorted(set(t)) for w, t in unbound.items() if w not in CROSS_TENANT} == {}
    assert set(CROSS_TENANT) <= set(unbound), "a cross-tenant entry whose statement now binds tenant_id: drop it"


@pytest.mark.parametrize(("sql", "unbound"), [
    ("SELECT 1 FROM knowledge_chunks WHERE tenant_id = $1", []),
    ("SELECT 1 FROM knowledge_chunks c JOIN knowledge_documents d USING (tenant_id, document_id) "
     "WHERE c.tenant_id = $1", []),
    ("SELECT 1 FROM knowledge_chunks c JOIN knowledge_documents d ON d.document_id = c.document_id "
     "WHERE c.tenant_id = $1", ["knowledge_documents"]),
    ("DELETE FROM artifacts WHERE expires_at < now()", ["artifacts"]),
    ("INSERT INTO knowledge_events (tenant_id, event_id) VALUES ($1, $2)", []),
    ("UPDATE artifacts a SET expires_at = now() WHERE a.tenant_id = ANY($1::text[])", []),
    ("WITH d AS (SELECT * FROM knowledge_documents WHERE document_id = $1) SELECT * FROM d", ["knowledge_documents"]),
    ("SELECT 1 FROM artifacts WHERE (tenant_id = $1 OR $1 IS NULL) AND expires_at > now()", ["artifacts"]),
    ("SELECT 1 FROM artifacts WHERE NOT (tenant_id = $1)", ["artifacts"]),
])
def test_citus_the_statement_check_tells_bound_from_unbound(sql: str, unbound: list[str]) -> None:
    assert unbound_tables(sql, TENANT_TABLES) == unbound
