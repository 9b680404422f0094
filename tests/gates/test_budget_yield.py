"""Hard gate "Budget yield" (ADR-0033, Hard gates):

    Budget yield — under pressure the knowledge class yields before in-turn recall, and passages are dropped
    whole rather than truncated. M9.

Pure (`test_gate_budget_yield`, a property over `knowledge.core.budget.allocate_turn`) and through
the service (`test_gate_budget_yield_end_to_end`, with `tests/retrieval/test_turn.py`'s ``settings``
fixture: no relevance floor). Hypothesis's ``settings`` is imported as ``hypothesis_settings`` here,
as in that module, so that the fixture keeps its name.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from knowledge.core.budget import allocate_turn
from knowledge.core.render import parse_knowledge_block
from knowledge.models import KnowledgeChunk
from knowledge.service import KnowledgeService
from tests.core.test_budget import beliefs, passages
from tests.retrieval.test_turn import (
    ingest_corpus,
    request,
    settings,  # noqa: F401  (the fixture: no relevance floor)
)


@hypothesis_settings(max_examples=2000, deadline=None)
@given(
    region=st.integers(0, 8000),
    belief_tokens=st.lists(st.integers(0, 200), max_size=40),
    passage_tokens=st.lists(st.integers(0, 1000), max_size=6),
)
def test_gate_budget_yield(region: int, belief_tokens: list[int], passage_tokens: list[int]) -> None:
    """Under pressure knowledge yields before in-turn recall; no belief is evicted for a passage; the
    fewest passages drop, whole, from the lowest-ranked end; nothing exceeds its class or the region."""
    offered_b, offered_p = beliefs(belief_tokens), passages(passage_tokens)
    got = allocate_turn(region, offered_b, offered_p)
    k, r = got.knowledge, got.recall
    # Whole and in rank order: the rendered passages are the offered objects themselves, a prefix.
    assert got.passages == tuple(offered_p[: k.rendered])
    assert all(a is b for a, b in zip(got.passages, offered_p, strict=False))
    assert all(p.text == " ".join(["word"] * p.tokens) for p in got.passages)
    assert got.beliefs == tuple(offered_b[: r.rendered])
    # Limits: the region, and each class's own allowance.
    assert got.allocation.used_tokens == sum(p.tokens for p in got.passages) + sum(b.tokens for b in got.beliefs)
    assert got.allocation.used_tokens <= region
    assert len(got.passages) <= 3 and sum(p.tokens for p in got.passages) <= 3000
    assert sum(b.tokens for b in got.beliefs) <= 2000
    # Never a belief for a passage: the beliefs are exactly those rendered with no knowledge at all.
    assert got.beliefs == allocate_turn(region, offered_b, []).beliefs
    # Yield order: in-turn recall gives up a belief only when it would not fit with no knowledge at all.
    if r.yielded:
        assert sum(b.tokens for b in got.beliefs) + offered_b[r.rendered].tokens > region
    # The fewest passages dropped: the next admitted one would not have fitted.
    if k.yielded:
        assert got.allocation.used_tokens + offered_p[k.rendered].tokens > region
    # The class allowance is the longest prefix within 3 passages / 3,000 tokens.
    admitted = offered_p[: k.admitted]
    assert len(admitted) <= 3 and sum(p.tokens for p in admitted) <= 3000
    if k.admitted < len(offered_p) and k.admitted < 3:
        assert sum(p.tokens for p in admitted) + offered_p[k.admitted].tokens > 3000
    assert k.yielded_tokens == sum(p.tokens for p in offered_p[k.rendered: k.admitted])


@pytest.mark.anyio
async def test_gate_budget_yield_end_to_end(service: KnowledgeService, tenant: str) -> None:
    """Through the service: a short region costs knowledge its lowest-ranked passage, whole, and every
    belief still renders; shorter still, knowledge renders nothing before a belief is lost."""
    await ingest_corpus(service, tenant)
    roomy = await service.turn(request(tenant, "rollback failover snapshot", 100_000))
    assert len(roomy.passages) == 3 and roomy.budget.knowledge.yielded_items == 0
    sizes = [p.tokens for p in roomy.passages]
    belief_tokens = [40] * 20  # 800 tokens of beliefs
    short = sum(belief_tokens) + sizes[0] + sizes[1] + sizes[2] - 1
    got = await service.turn(request(tenant, "rollback failover snapshot", short, belief_tokens))
    assert [p.chunk_id for p in got.passages] == [p.chunk_id for p in roomy.passages[:2]]
    assert len(got.beliefs) == 20
    assert got.budget.knowledge.yielded_items == 1 and got.budget.knowledge.yielded_tokens == sizes[2]
    assert got.block is not None
    _, shown = parse_knowledge_block(got.block)
    for passage in shown:  # whole: exactly the stored chunk's text
        chunk = await service.operator_get_chunk(passage.chunk, tenant_id=tenant)
        assert isinstance(chunk, KnowledgeChunk) and passage.text == chunk.text
    starved = await service.turn(request(tenant, "rollback failover snapshot", 700, belief_tokens))
    assert starved.block is None and starved.passages == ()
    assert len(starved.beliefs) == 17 and starved.budget.recall.yielded_items == 3
    assert starved.trace.budget.classes["knowledge"].yielded_items == 3
    pressure = await service.budget_pressure(tenant)
    assert (pressure.turns, pressure.knowledge_turns, pressure.yielded_turns) == (3, 3, 2)
    assert (pressure.passages_admitted, pressure.passages_rendered, pressure.passages_yielded) == (9, 5, 4)
    assert pressure.tokens_yielded == sizes[2] + sum(sizes)
    assert (pressure.recall_yielded_turns, pressure.beliefs_yielded) == (1, 3)
    assert pressure.yield_rate == pytest.approx(2 / 3)
