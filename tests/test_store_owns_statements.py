"""The store owns its statements (issue 33): a call that runs SQL (``fetch``, ``fetchrow``, ``fetchval``,
``execute``, ``executemany``, ``copy_records``) is made in ``knowledge/store/`` — where each statement
is a function with named arguments returning domain values — and nowhere else in the package.

Issue 33's review counted 59 such calls outside the store (60 by this count); all moved: the invariant
audit (`knowledge.store.audit`), the server's identity and clients (`knowledge.store.server`), the lexical
arm (`knowledge.store.retrieval.lexical_hits`), the semantic arm (`knowledge.store.retrieval.VectorStatements`),
the embedding queue (`knowledge.store.embedding_queue`), the attachment queue
(`knowledge.store.attachment_queue`), the stress tools and the demo, and the ingest path
(`knowledge.store.ingest_writes`: the one-statement ingest, a group's, a lost commit's resolution, a
re-chunk's reads and writes)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS_SQL = {"fetch", "fetchrow", "fetchval", "execute", "executemany", "copy_records", "copy_records_to_table"}



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


def test_no_statement_runs_outside_the_store() -> None:
    assert sql_calls() == {}, "SQL run outside knowledge/store/: move it into a store function"


def test_the_count_sees_a_call_written_outside_the_store(tmp_path: Path) -> None:
    tree = ast.parse("async def f(db):\n    await db.fetch('SELECT 1')\n    await db.store_function(x=1)\n")
    calls = [n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert [c for c in calls if c in RUNS_SQL] == ["fetch"]


def test_no_store_function_hands_a_database_row_out() -> None:
    """The store's functions return domain values (dataclasses, models, numbers), never an asyncpg
    ``Record`` whose columns a shell would read by name; only ``knowledge.store.db`` — the driver's
    wrapper the store itself runs statements through — deals in records. Nothing outside the store
    imports ``Record``."""
    import importlib
    import inspect
    import pkgutil
    import re

    import knowledge.store

    record = re.compile(r"\bRecord\b")
    handing_out = []
    for info in pkgutil.iter_modules(knowledge.store.__path__):
        if info.name == "db":
            continue
        module = importlib.import_module(f"knowledge.store.{info.name}")
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            functions = [(name, obj)] if inspect.isfunction(obj) else [
                (f"{name}.{n}", f) for n, f in vars(obj).items()
                if inspect.isfunction(f) and not n.startswith("_")] if inspect.isclass(obj) else []
            handing_out += [f"{module.__name__}.{n}" for n, f in functions
                            if record.search(str(inspect.signature(f).return_annotation))]
    assert handing_out == []
    importers = [path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "knowledge").rglob("*.py"))
                 if not path.relative_to(ROOT).as_posix().startswith("knowledge/store/")
                 and re.search(r"^from knowledge\.store\.db import .*\bRecord\b", path.read_text(encoding="utf-8"),
                               re.M)]
    assert importers == []
