"""The docs cannot drift from the code (issue 33): every module, file, service method, setting,
environment variable, CLI command and code identifier that `README.md`, `DESIGN.md` and the pages of
``docs/`` name in a code span (`` `…` ``) exists in the code as named.

What counts as a name, by its shape:

- a file or folder under one of the project's folders (``knowledge/core/scan.py``, ``scripts/…``,
  ``tests/gates/test_*.py`` — a glob), or under ``../shared/``;
- a dotted module path from ``knowledge``, ``parsers`` or ``supervisors``, perhaps ending in an attribute
  (``knowledge.core.scan.find_secrets``), or a dotted name the code defines as a string (an event
  ``knowledge.document.deleted``, a tool ``knowledge.search``, a scope ``knowledge.write``);
- ``svc.<method>`` or ``KnowledgeService.<method>``: a public attribute of the service;
- ``Settings.<field>`` or ``settings.<field>``: a setting;
- ``KNOWLEDGE_<NAME>``: an environment variable the code reads (or a value it defines);
- ``knowledge <command> [<subcommand>]``: a command of the CLI;
- a ``CamelCase`` name, perhaps with an attribute (``LoopSlots.take``), or a ``snake_case`` identifier
  of two words or more, or one called (``find_secrets()``): a name that occurs in the code (a class, a
  function, a column, a reason code), so a renamed or removed one is found.

A span may opt out where it names something that is not this project's (a library's function, a
column of another tool): `FOREIGN` lists those, each with the reason it is not ours.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

import pytest
import typer

from knowledge import KnowledgeService
from knowledge.config import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "DESIGN.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))
TOP = ("knowledge", "parsers", "supervisors", "scripts", "tests", "migrations", "examples", ".ci")
CODE_SUFFIXES = (".py", ".sql", ".sh", ".toml", ".cfg", ".ini", ".yml", ".yaml", ".json", ".tsv", ".txt")

#: Names in code spans that do not name one thing, with why.
FOREIGN: dict[str, str] = {
    "migrations/NNNN_name.sql": "the pattern every migration's file name follows",
    "TrioInternalError": "trio's exception, named where DESIGN tells what an earlier design provoked",
}

_SPAN = re.compile(r"`([^`\n]+)`")
_FILE = re.compile(rf"(?:\.\./shared/|(?:{'|'.join(re.escape(t) for t in TOP)})/)[\w.*/-]*")
_MODULE = re.compile(r"(?:knowledge|parsers|supervisors)(?:\.\w+)+")
_SVC = re.compile(r"(?:svc|KnowledgeService)\.(\w+)")
_SETTING = re.compile(r"(?:Settings|settings)\.(\w+)")
_ENV = re.compile(r"KNOWLEDGE_[A-Z0-9_]+")
_CLI = re.compile(r"knowledge((?: [a-z][a-z-]*)+)")
_CLASS_ATTR = re.compile(r"([A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)(?:\.(\w+))?(?:\(.*\))?")
_IDENT = re.compile(r"([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?:\(.*\))?|([a-z][a-z0-9]+)\(\)?")


def spans() -> list[tuple[str, str]]:
    """(document, span) for every code span of the docs, each once."""
    found: dict[tuple[str, str], None] = {}
    for doc in DOCS:
        for span in _SPAN.findall((ROOT / doc).read_text(encoding="utf-8")):
            found[doc, span.strip()] = None
    return list(found)


@cache
def code_text() -> str:
    """Every code file of the project, concatenated (the docs themselves excluded)."""
    parts = []
    for top in TOP:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in CODE_SUFFIXES and "__pycache__" not in path.parts \
                    and path != Path(__file__).resolve():  # this file names what does not exist, on purpose
                parts.append(path.read_text(encoding="utf-8", errors="replace"))
    parts.append((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return "\n".join(parts)


@cache
def cli_commands() -> dict[str, set[str]]:
    """The CLI's commands, each with its subcommands (empty for a leaf)."""
    from knowledge.cli.app import app

    root = typer.main.get_command(app)
    tree: dict[str, set[str]] = {}
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        tree[name] = set(getattr(command, "commands", {}) or {})
    return tree


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(target, attr):
                return False
            target = getattr(target, attr)
        return True
    return False


def problem(span: str) -> str | None:
    """Why ``span`` names something that does not exist, or None."""
    if span in FOREIGN:
        return None
    if (match := _FILE.fullmatch(span.rstrip("/"))) is not None:
        path = match.group()
        base = ROOT.parent / path[len("../"):] if path.startswith("../") else ROOT / path
        if "*" in path:
            return None if list(base.parent.glob(base.name)) else f"no file matches {path}"
        return None if base.exists() else f"no file {path}"
    if _MODULE.fullmatch(span):
        if _resolves(span) or f'"{span}"' in code_text():  # a module, or a name the code defines: an event,
            return None  # a tool, a scope ("knowledge.document.deleted", "knowledge.search", "knowledge.write")
        return f"no module, attribute or name {span}"
    if (match := _SVC.match(span)) is not None:
        return None if hasattr(KnowledgeService, match.group(1)) else f"KnowledgeService has no {match.group(1)}"
    if (match := _SETTING.match(span)) is not None:
        return None if match.group(1) in Settings.model_fields else f"no setting {match.group(1)}"
    if (match := _ENV.fullmatch(span)) is not None:
        return None if re.search(rf"\b{span}\b", code_text()) else f"the code never reads {span}"
    if (match := _CLI.match(span)) is not None:
        words = match.group(1).split()
        tree = cli_commands()
        if words[0] not in tree:
            return f"no CLI command {words[0]}"
        if tree[words[0]] and len(words) > 1 and words[1] not in tree[words[0]]:
            return f"no CLI command {words[0]} {words[1]}"
        return None
    if (match := _CLASS_ATTR.fullmatch(span)) is not None:
        cls, attr = match.groups()
        if not re.search(rf"\b{cls}\b", code_text()):
            return f"no {cls} in the code"
        return None if attr is None or re.search(rf"\b{attr}\b", code_text()) else f"no {cls}.{attr} in the code"
    if (match := _IDENT.fullmatch(span)) is not None:
        name = match.group(1) or match.group(2)
        return None if re.search(rf"\b{re.escape(name)}\b", code_text()) else f"no {name} in the code"
    return None


def test_the_docs_name_things_by_every_shape_the_test_reads() -> None:
    """The test reads what the docs write: each shape above occurs (so none is silently never checked)."""
    found = [span for _, span in spans()]
    for shape in (_FILE, _MODULE, _SVC, _ENV, _CLI, _CLASS_ATTR, _IDENT):
        assert any(shape.fullmatch(s) or shape.match(s) for s in found), shape.pattern


@pytest.mark.parametrize("doc", DOCS)
def test_everything_the_docs_name_exists(doc: str) -> None:
    missing = sorted({f"{span!r}: {why}" for d, span in spans() if d == doc and (why := problem(span))})
    assert missing == [], "\n".join(missing)


@pytest.mark.parametrize(("span", "exists"), [
    ("knowledge/core/scan.py", True), ("knowledge/core/nothing.py", False), ("tests/gates/test_*.py", True),
    ("knowledge.core.scan.find_secrets", True), ("knowledge.core.scan.find_nothing", False),
    ("svc.search", True), ("svc.frobnicate", False), ("KNOWLEDGE_DSN", True), ("KNOWLEDGE_NOTHING", False),
    ("knowledge db start", True), ("knowledge db frobnicate", False), ("knowledge frobnicate", False),
    ("find_secrets()", True), ("find_nothing_here", False), ("Settings.dsn", True), ("Settings.nothing", False),
    ("LoopSlots.take", True), ("LoopSlots.frobnicate", False), ("FrobnicatorService", False),
])
def test_the_checks_tell_a_name_that_exists_from_one_that_does_not(span: str, exists: bool) -> None:
    assert (problem(span) is None) is exists, problem(span)
