"""The store owns its statements (issue 33): a call that runs SQL (``fetch``, ``fetchrow``, ``fetchval``,
``execute``, ``executemany``, ``copy_records``) is made in ``knowledge/store/`` — where each statement
is a function with named arguments — and nowhere else in the package.

The move is under way: `REMAINING` is what is left outside the store, per file, and it may only shrink
(a ratchet: a new call site outside the store, or one more in a listed file, fails this test; a file
that reaches zero must leave the list). Issue 33's review counted 59 (60 by this count). Moved so far:
the invariant audit (`knowledge.store.audit`), the server's identity and clients (`knowledge.store.server`),
the lexical arm (`knowledge.store.retrieval.lexical_rows`), the semantic arm
(`knowledge.store.retrieval.VectorStatements`), the embedding queue (`knowledge.store.embedding_queue`), the
attachment queue (`knowledge.store.attachment_queue`), the stress tools and the demo. Left: the ingest path
(`ingest/ingestor.py`, `ingest/bulk.py`).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS_SQL = {"fetch", "fetchrow", "fetchval", "execute", "executemany", "copy_records", "copy_records_to_table"}

#: Calls that run SQL outside ``knowledge/store/``, per file: to be moved into the store.
REMAINING = {
    "knowledge/ingest/ingestor.py": 13,
    "knowledge/ingest/bulk.py": 1,
}


def sql_calls() -> Counter[str]:
    """Per file of the package outside the store, its calls of a method that runs SQL."""
    found: Counter[str] = Counter()
    for path in sorted((ROOT / "knowledge").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("knowledge/store/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RUNS_SQL:
                found[rel] += 1
    return found


def test_no_statement_runs_outside_the_store_but_those_left_to_move() -> None:
    found = sql_calls()
    grown = {f: (n, REMAINING.get(f, 0)) for f, n in found.items() if n > REMAINING.get(f, 0)}
    assert grown == {}, f"SQL run outside knowledge/store/ (found, allowed): {grown}"
    shrunk = {f: (found.get(f, 0), n) for f, n in REMAINING.items() if found.get(f, 0) < n}
    assert shrunk == {}, f"fewer calls than REMAINING says (found, listed): lower the ratchet: {shrunk}"


def test_the_count_sees_a_call_written_outside_the_store(tmp_path: Path) -> None:
    tree = ast.parse("async def f(db):\n    await db.fetch('SELECT 1')\n    await db.store_function(x=1)\n")
    calls = [n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert [c for c in calls if c in RUNS_SQL] == ["fetch"]
