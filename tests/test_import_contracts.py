"""The layout's rules, held against the code: the import contracts of ``pyproject.toml``
(``[tool.importlinter]``: the core is pure, each layer imports only those below it) pass, and no
module reaches the top-level folders by their own names (``parsers``, ``supervisors``,
``migrations``): an installed wheel has only ``knowledge``, so such an import works from a checkout
and nowhere else."""

from __future__ import annotations

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
