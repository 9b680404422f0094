"""The boundary with memory: no belief from a document, by behaviour and by inspection of the source."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from knowledge.core.memory_boundary import (
    AgentMessage,
    Episode,
    EpisodeSource,
    Exclusion,
    RenderedContext,
    SessionItem,
    ToolResult,
    UserMessage,
    consolidation_input,
)
from knowledge.core.render import render_knowledge_block
from knowledge.models import KnowledgeQuery, TrustLevel
from knowledge.service import KnowledgeService
from tests.retrieval.test_turn import ingest_text, request

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("knowledge", "parsers", "supervisors")

RUNBOOK = """# Runbook

## Failover

Promote the standby with the pelican procedure, then repoint every client at the new primary.
The pelican procedure takes about four minutes on a three-member cluster and needs no downtime.
Never run the pelican procedure while a defragmentation is in progress on any member.

## Snapshots

Take a snapshot of the keyspace with the albatross tool before every upgrade of the cluster.
Restore a snapshot into a fresh data directory, never over the directory of a running member.
"""


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if len(s.strip()) >= 40]


@pytest.mark.anyio
async def test_gate_no_belief_from_document(service: KnowledgeService, tenant: str) -> None:
    """A session in which passages were rendered — as turn blocks, as a knowledge tool result, pasted
    and quoted back by the agent — yields consolidation input with no item whose provenance is a
    document: no passage sentence, block or chunk id in any episode, no episode from a knowledge tool."""
    await ingest_text(service, tenant, RUNBOOK, title="Runbook")
    first = await service.turn(request(tenant, "how do I fail over with the pelican procedure", 5000, [25]))
    second = await service.turn(request(tenant, "snapshot before upgrade albatross", 5000, [25]))
    assert first.block is not None and second.block is not None
    rendered = [*first.passages, *second.passages]
    searched = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="pelican standby"))
    tool_block = render_knowledge_block(searched, as_of=first.trace.rendered_at)
    quoted = sentences(first.passages[0].text)[1]
    session: list[SessionItem] = [
        UserMessage(item_id="u1", text="How do I fail over? I run a three-member cluster at home."),
        RenderedContext(item_id="c1", region="in_turn_recall", text="The principal runs etcd at home."),
        RenderedContext(item_id="c2", region="knowledge", text=first.block),
        ToolResult(item_id="r1", tool="knowledge.search", trust=TrustLevel.KNOWLEDGE, text=tool_block),
        ToolResult(item_id="r2", tool="knowledge.search", trust=TrustLevel.TOOL_OUTPUT, text=searched[0].text),
        AgentMessage(item_id="a1", text=f"From the runbook: {quoted} I would start with the standby.\n{first.block}"),
        ToolResult(item_id="r3", tool="shell.run", trust=TrustLevel.TOOL_OUTPUT,
                   text=f"member list ok\n{second.passages[0].text}"),
        UserMessage(item_id="u2", text="Thanks, I prefer doing upgrades on Sundays."),
        RenderedContext(item_id="c3", region="knowledge", text=second.block),
        AgentMessage(item_id="a2", text="Noted: upgrades on Sundays."),
    ]
    got = consolidation_input("s1", session)

    assert [e.episode_id for e in got.episodes] == ["u1", "a1", "r3", "u2", "a2"]
    assert {e.source for e in got.episodes} <= {EpisodeSource.USER, EpisodeSource.AGENT, EpisodeSource.TOOL}
    assert got.excluded == {Exclusion.RENDERED_CONTEXT: 3, Exclusion.KNOWLEDGE_TOOL_RESULT: 2}
    shown = {s for p in [*rendered, *searched] for s in sentences(p.text)}
    chunk_ids = {p.chunk_id for p in [*rendered, *searched]}
    for episode in got.episodes:
        assert "<knowledge" not in episode.text and "<passage" not in episode.text
        assert not any(s in episode.text for s in shown), episode
        assert not any(c in episode.text for c in chunk_ids), episode
        assert episode.tool is None or not episode.tool.startswith("knowledge")
    assert got.envelopes_removed == 1 and got.quotes_removed >= 2
    # What the principal and the agent said in their own words is still there, for formation to read.
    by_id = {e.episode_id: e.text for e in got.episodes}
    assert by_id["u2"] == "Thanks, I prefer doing upgrades on Sundays."
    assert "I would start with the standby." in by_id["a1"] and by_id["r3"].startswith("member list ok")


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
