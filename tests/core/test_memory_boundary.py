"""The boundary with memory: no belief from a document, by inspection of the source and of the types. The
behavioural gate is `tests/gates/test_no_belief_from_document.py`."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from knowledge.core.memory_boundary import (
    Episode,
    EpisodeSource,
    Exclusion,
    SessionItem,
    ToolResult,
    consolidation_input,
)
from knowledge.models import TrustLevel

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("knowledge", "parsers", "supervisors")


def test_an_episode_cannot_have_a_document_as_its_source() -> None:
    assert {s.value for s in EpisodeSource} == {"user", "agent", "tool"}
    with pytest.raises(ValidationError):
        Episode(episode_id="e", session_id="s", ordinal=0, source="document", text="x")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="knowledge tool"):
        Episode(episode_id="e", session_id="s", ordinal=0, source=EpisodeSource.TOOL, tool="knowledge.search",
                text="x")
    with pytest.raises(ValidationError, match="exactly"):
        Episode(episode_id="e", session_id="s", ordinal=0, source=EpisodeSource.AGENT, tool="shell.run", text="x")


def test_knowledge_results_are_excluded_by_name_or_by_label() -> None:
    items: list[SessionItem] = [
        ToolResult(item_id="a", tool="knowledge", trust=TrustLevel.TOOL_OUTPUT, text="x"),
        ToolResult(item_id="b", tool="knowledge.ingest", trust=TrustLevel.TOOL_OUTPUT, text="y"),
        ToolResult(item_id="c", tool="web.fetch", trust=TrustLevel.KNOWLEDGE, text="z"),
        ToolResult(item_id="d", tool="knowledgebase.lookup", trust=TrustLevel.TOOL_OUTPUT, text="w"),
    ]
    got = consolidation_input("s", items)
    assert [e.episode_id for e in got.episodes] == ["d"]  # another domain that merely starts alike
    assert got.excluded == {Exclusion.KNOWLEDGE_TOOL_RESULT: 3}


# --- the source: no module writes to, or exposes a path into, belief formation -------------------

#: Relations a module could write beliefs or episodes through.
_FORMATION_RELATION = re.compile(r"belief|episode|memory|formation|consolidat", re.IGNORECASE)
#: SQL that writes a relation (keywords in capitals, as every statement in this code base is written,
#: so prose such as "update the memory" in a docstring is not mistaken for SQL).
_SQL_WRITE = re.compile(
    r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|COPY|TRUNCATE(?:\s+TABLE)?|ALTER\s+TABLE|"
    r"CREATE\s+(?:UNLOGGED\s+)?(?:TABLE|VIEW|MATERIALIZED\s+VIEW)(?:\s+IF\s+NOT\s+EXISTS)?)"
    r"\s+(?:ONLY\s+)?\"?([A-Za-z_][\w.]*)")
_FORMATION_FUNCTION = re.compile(
    r"(?:form|assert|write|store|save|create|promote|mine|extract|learn|remember)_?\w*belief|consolidat", re.I)
#: The one function allowed to build what consolidation reads, in the one module that defines it.
_SANCTIONED = {("knowledge/core/memory_boundary.py", "consolidation_input")}
_MEMORY_TYPES = {"Belief", "Episode", "ConsolidationInput"}


def _callee(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in _MEMORY_TYPES:
        return f.value.id  # Belief.model_validate(...), Belief.model_construct(...)
    return None


def formation_violations(path: str, source: str) -> Iterator[str]:
    """Every way ``source`` (the module at ``path``) writes to, or exposes a path into, belief formation."""
    tree = ast.parse(source)
    functions: dict[ast.AST, str] = {}  # node -> the innermost function it is in

    def enclose(parent: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(parent):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else name
            functions[child] = inner
            enclose(child, inner)

    enclose(tree, "")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in modules:
                if name != "knowledge.core.memory_boundary" and _FORMATION_RELATION.search(name):
                    yield f"{path}:{node.lineno} imports {name}"
        elif isinstance(node, ast.Call):
            callee = _callee(node)
            where = (path, functions.get(node, ""))
            if callee == "Belief":
                yield f"{path}:{node.lineno} constructs a Belief"
            elif callee in {"Episode", "ConsolidationInput"} and where not in _SANCTIONED:
                yield f"{path}:{node.lineno} constructs {callee} outside consolidation_input"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if _FORMATION_FUNCTION.search(node.name) and (path, node.name) not in _SANCTIONED:
                yield f"{path}:{node.lineno} defines {node.name}"
            returns = ast.unparse(node.returns) if node.returns is not None else ""
            if re.search(r"\b(?:Episode|ConsolidationInput)\b", returns) and (path, node.name) not in _SANCTIONED:
                yield f"{path}:{node.lineno} {node.name} returns {returns}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in _SQL_WRITE.finditer(node.value):
                if _FORMATION_RELATION.search(match.group(1)):
                    yield f"{path}:{node.lineno} SQL writes {match.group(1)}"


def sql_violations(path: str, sql: str) -> Iterator[str]:
    for match in _SQL_WRITE.finditer(sql):
        if _FORMATION_RELATION.search(match.group(1)):
            yield f"{path}: writes {match.group(1)}"


def test_no_module_writes_to_or_exposes_a_path_into_belief_formation() -> None:
    modules = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
    assert len(modules) > 20 and ROOT / "knowledge" / "retrieval" / "turn.py" in modules
    found = [v for p in modules for v in formation_violations(str(p.relative_to(ROOT)), p.read_text("utf-8"))]
    found += [v for p in sorted((ROOT / "migrations").glob("*.sql"))
              for v in sql_violations(str(p.relative_to(ROOT)), p.read_text("utf-8"))]
    assert found == []


@pytest.mark.parametrize("source", [
    "from knowledge.core.memory_boundary import Belief\nb = Belief(belief_id='x', text='t', tokens=1)\n",
    "from knowledge.core.memory_boundary import Belief\nb = Belief.model_validate({})\n",
    "def f(x):\n    return Episode(episode_id='e', session_id='s', ordinal=0, source='user', text=x)\n",
    "def passages_to_episodes(p) -> list[Episode]:\n    ...\n",
    "async def form_beliefs_from_passages(p):\n    ...\n",
    "Q = 'INSERT INTO memory_beliefs (text) VALUES ($1)'\n",
    "Q = '''UPDATE beliefs SET text = $1'''\n",
    "from memory.formation import consolidate\n",
    "import host.memory\n",
])
def test_the_source_check_catches_a_path_into_formation(source: str) -> None:
    assert list(formation_violations("knowledge/example.py", source))


def test_the_source_check_allows_reading_beliefs_and_the_sanctioned_builder() -> None:
    allowed = (
        "from knowledge.core.memory_boundary import Belief, consolidation_input\n"
        "def budget(beliefs: list[Belief]) -> int:\n    return sum(b.tokens for b in beliefs)\n"
        "Q = 'INSERT INTO knowledge_traces (beliefs) VALUES ($1)'\n"
    )
    assert list(formation_violations("knowledge/example.py", allowed)) == []
    assert list(sql_violations("migrations/x.sql", "CREATE TABLE memory_beliefs (id text);")) != []
