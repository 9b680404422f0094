"""A wheel built from this checkout is the product a host installs: it adds one top-level import
name, ``knowledge`` (the ``parsers/``, ``supervisors/`` and ``migrations/`` folders inside it), and,
installed with its declared dependencies into a fresh virtualenv, ``import knowledge``, the console
scripts and the README's embedding example work there, away from the checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What a wheel is built from: the project's metadata and its package folders (symlinks kept).
SOURCES = ("pyproject.toml", "README.md", "knowledge", "parsers", "supervisors", "migrations")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the checkout (a build in place would leave build/ behind)."""
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(source)], check=True, capture_output=True, timeout=300)
    (built,) = out.glob("knowledge-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel and its declared dependencies (from the configured index):
    its ``bin`` folder. A dependency the code imports but the metadata omits fails here."""
    env = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env)
    done = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return env / "bin"


def test_the_wheel_adds_one_top_level_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names if ".dist-info/" not in name}
    assert tops == {"knowledge"}
    for inside in ("knowledge/parsers/child.py", "knowledge/supervisors/parser_pool.py",
                   "knowledge/migrations/0001_initial.sql", "knowledge/core/prepare.py", "knowledge/__main__.py"):
        assert inside in names
    assert not any("__pycache__" in name or name.startswith(("tests/", "scripts/")) for name in names)


def _run(bin_dir: Path, *command: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(bin_dir / command[0]), *command[1:]], capture_output=True, text=True, cwd=cwd,
                          env={**clean, **(env or {})}, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_the_installed_wheel_imports_and_its_console_scripts_run(installed: Path, tmp_path: Path) -> None:
    where = _run(installed, "python", "-c", "import knowledge, knowledge.service, knowledge.parsers.child; "
                 "print(knowledge.__file__, knowledge.__version__)", cwd=tmp_path)
    assert str(installed.parent) in where and str(ROOT) not in where  # the installed copy, not the checkout
    assert "Usage: knowledge" in _run(installed, "knowledge", "--help", cwd=tmp_path)
    assert "Usage: knowledge" in _run(installed, "python", "-m", "knowledge", "--help", cwd=tmp_path)
    assert "FOLDER" in _run(installed, "knowledge-demo", "--help", cwd=tmp_path).upper()


def test_the_readmes_asyncio_example_runs_from_the_installed_wheel(installed: Path, tmp_path: Path,
                                                                   database_dsn: str) -> None:
    """The plain-asyncio example, as a host would run it: the migrations come from the wheel."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Embedding", 1)[1]
    code = next(c for c in re.findall(r"```python\n(.*?)```", section, re.DOTALL) if "asyncio.run(" in c)
    out = _run(installed, "python", "-c", code, cwd=tmp_path, env={"KNOWLEDGE_DSN": database_dsn})
    assert out.startswith("<knowledge as_of=") and "Revert the release tag." in out
