"""Hard gate "No belief from a document" (ADR-0033, Hard gates):

    No belief from a document — a consolidation pass over a session in which passages were rendered writes zero
    beliefs whose provenance is a document. M9.

By behaviour, through turns, a knowledge tool result and an agent quoting passages back; the check
of the source (no module writes to, or exposes a path into, belief formation) is in
`tests/core/test_memory_boundary.py`.
"""

from __future__ import annotations

import re

import pytest

from knowledge.core.memory_boundary import (
    AgentMessage,
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
