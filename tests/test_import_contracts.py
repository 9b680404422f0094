"""The layout's rules, held against the code: the import contracts of ``pyproject.toml``
(``[tool.importlinter]``: the core is pure, no import circle at any depth, each layer imports only
those below it) pass; no module reaches the top-level folders by their own names (``parsers``,
``supervisors``, ``migrations``): an installed wheel has only ``knowledge``, so such an import works
from a checkout and nowhere else; and no SQL statement stands outside the store."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_the_import_contracts_hold() -> None:
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_broken_contract_is_reported(tmp_path: Path) -> None:
    """The same tool over the same package fails a contract the code breaks (the retrieval shell
    imports the store), so the test above can fail."""
    config = tmp_path / "contracts.toml"
    config.write_text('[tool.importlinter]\nroot_package = "knowledge"\n\n[[tool.importlinter.contracts]]\n'
                      'name = "retrieval without the store"\ntype = "forbidden"\n'
                      'source_modules = ["knowledge.retrieval"]\nforbidden_modules = ["knowledge.store"]\n',
                      encoding="utf-8")
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache", str(config)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 1 and "1 broken" in done.stdout


def test_no_module_imports_the_folders_by_their_top_level_names() -> None:
    code = ("import sys; from tests.helpers.modules import all_modules; all_modules(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'parsers', 'supervisors', 'migrations'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


#: A string that is a SQL statement (or the head of one): what only `knowledge.store` may hold.
_STATEMENT = re.compile(r"^\s*(?:SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|WITH\s+\w+\s+AS\s*\(|"
                        r"CREATE\s|DROP\s|ALTER\s|TRUNCATE\s)")


def test_sql_statements_live_in_the_store() -> None:
    """Every SQL statement of the package is a named statement of `knowledge.store` (the shells run
    them): no string constant outside the store is one."""
    found = []
    for path in sorted(p for folder in ("knowledge", "parsers", "supervisors") for p in (ROOT / folder).rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("knowledge/store/") or "__pycache__" in relative:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _STATEMENT.match(node.value):
                found.append(f"{relative}:{node.lineno}: {node.value.strip()[:60]}")
    assert found == []


def test_the_sql_check_sees_a_statement() -> None:
    assert _STATEMENT.match("\n    SELECT 1 FROM knowledge_chunks") and _STATEMENT.match("WITH x AS (SELECT 1)")
    assert not _STATEMENT.match("select the best passage") and not _STATEMENT.match("Update the docs")
