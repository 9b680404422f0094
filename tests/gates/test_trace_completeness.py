"""Hard gate "Trace completeness" (ADR-0033, Hard gates):

    Trace completeness — for sampled turns, a trace that rendered passages lists them, and the listed passages
    reproduce the rendered block the recorded hash covers. M9.

Both paths by which the agent gets knowledge: the turn's own block and each ``knowledge.search``
the agent calls in the turn ("the tool is the path"), through the tool registry as a host calls it.
"""

from __future__ import annotations

import hashlib
import uuid

import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from knowledge.config import Settings
from knowledge.core.render import parse_knowledge_block
from knowledge.core.trace import RecallTrace, block_sha256, rerender
from knowledge.models import KnowledgeChunk, Principal, TrustLevel
from knowledge.service import KnowledgeService
from knowledge.store.traces import resolve_chunks
from knowledge.tools import ToolContext, ToolResult
from tests.conftest import open_sql
from tests.retrieval.test_turn import TOPICS, ingest_corpus, request
from tests.test_tools import registry


def tool_context(tenant: str, trace_id: uuid.UUID | None) -> ToolContext:
    return ToolContext(principal=Principal(tenant_id=tenant, principal_id="alice"), origin_trust=TrustLevel.USER,
                       trace_id=trace_id)


def assert_tool_calls_traced(stored: RecallTrace, results: list[ToolResult], texts: dict[str, str]) -> None:
    """Each tool result is in the trace, in order: the passages it showed the agent, and a block
    hash that the listed passages, re-rendered, reproduce — the content the agent was given."""
    assert [c.call_no for c in stored.tool_calls] == list(range(1, len(results) + 1))
    for call, result in zip(stored.tool_calls, results, strict=True):
        assert result.data["trace_id"] == str(stored.trace_id) and result.data["call_no"] == call.call_no
        _, shown = parse_knowledge_block(result.content)
        assert [p.chunk_id for p in call.passages] == [p.chunk for p in shown] == [
            p["chunk_id"] for p in result.data["passages"]]
        if not shown:
            assert call.block_sha256 is None
            continue
        assert call.block_sha256 == block_sha256(result.content)
        assert rerender(stored, texts, call.call_no) == result.content


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gate_trace_completeness(database_dsn: str, backend: str) -> None:
    """For sampled turns, the trace lists exactly the rendered passages, in order, and re-rendering
    them (texts resolved by chunk id) reproduces the rendered block whose hash the trace records."""
    cfg = Settings(dsn=database_dsn, sweep_interval_seconds=None, pool_max_size=4, relevance_floor=False)
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    seen = {"rendered": 0, "yielded": 0, "empty": 0, "tool_passages": 0}
    with start_blocking_portal(backend) as portal, portal.wrap_async_context_manager(
            KnowledgeService.open(cfg)) as svc, portal.wrap_async_context_manager(open_sql(database_dsn)) as db:
        portal.call(ingest_corpus, svc, tenant)

        @hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(words=st.lists(st.sampled_from([*TOPICS, "unrelated"]), min_size=1, max_size=3),
               region=st.integers(0, 6000), belief_tokens=st.lists(st.integers(1, 120), max_size=30),
               searches=st.lists(st.lists(st.sampled_from([*TOPICS, "unrelated"]), min_size=1, max_size=2),
                                 max_size=2))
        @example(words=["rollback", "snapshot"], region=10_000, belief_tokens=[], searches=[["quorum"]])
        @example(words=["rollback", "failover", "snapshot"], region=1500, belief_tokens=[50] * 20, searches=[])
        @example(words=["unrelated"], region=5000, belief_tokens=[25], searches=[["unrelated"], ["defrag"]])
        def check(words: list[str], region: int, belief_tokens: list[int], searches: list[list[str]]) -> None:
            result = portal.call(svc.turn, request(tenant, " ".join(words), region, belief_tokens))
            tools = registry()
            called = [portal.call(tools.call, "knowledge.search", {"text": " ".join(q)},
                                  tool_context(tenant, result.trace.trace_id), svc) for q in searches]
            seen["tool_passages"] += sum(len(r.data["passages"]) for r in called)
            stored = portal.call(lambda: svc.operator_trace(result.trace.trace_id, tenant_id=tenant))
            assert stored is not None
            assert stored.model_copy(update={"tool_calls": []}) == result.trace  # what the turn returned was committed
            resolved = portal.call(resolve_chunks, db, tenant, [p.chunk_id for p in stored.all_passages()])
            texts = {cid: c.text for cid, c in resolved.items() if isinstance(c, KnowledgeChunk)}
            assert_tool_calls_traced(stored, called, texts)
            assert portal.call(lambda: svc.check_trace(stored.trace_id, tenant_id=tenant)).ok
            assert [b.belief_id for b in stored.beliefs] == [b.belief_id for b in result.beliefs]
            k = stored.budget.classes["knowledge"]
            assert k.rendered == len(stored.passages) == len(result.passages)
            seen["yielded"] += k.yielded_items > 0
            if result.block is None:
                seen["empty"] += 1
                assert stored.passages == [] and stored.block_sha256 is None
                return
            seen["rendered"] += 1
            _, shown = parse_knowledge_block(result.block)
            assert [p.chunk_id for p in stored.passages] == [p.chunk for p in shown] == [
                p.chunk_id for p in result.passages]
            assert stored.block_sha256 == hashlib.sha256(result.block.encode()).hexdigest()
            again = rerender(stored, texts)
            assert again == result.block and block_sha256(again) == stored.block_sha256

        check()
    assert seen["rendered"] and seen["yielded"] and seen["empty"] and seen["tool_passages"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gate_trace_completeness_of_a_search_outside_a_turn(database_dsn: str, backend: str) -> None:
    """A ``knowledge.search`` with no turn's trace writes a trace of its own: every tool result is traced."""
    cfg = Settings(dsn=database_dsn, sweep_interval_seconds=None, pool_max_size=4, relevance_floor=False)
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    with start_blocking_portal(backend) as portal, portal.wrap_async_context_manager(
            KnowledgeService.open(cfg)) as svc, portal.wrap_async_context_manager(open_sql(database_dsn)) as db:
        portal.call(ingest_corpus, svc, tenant)
        result = portal.call(registry().call, "knowledge.search", {"text": "rollback quorum"},
                             tool_context(tenant, None), svc)
        stored = portal.call(lambda: svc.operator_trace(uuid.UUID(result.data["trace_id"]), tenant_id=tenant))
        assert stored is not None and stored.surface == "tool" and stored.passages == []
        resolved = portal.call(resolve_chunks, db, tenant, [p.chunk_id for p in stored.all_passages()])
        assert_tool_calls_traced(stored, [result], {c: k.text for c, k in resolved.items()
                                                     if isinstance(k, KnowledgeChunk)})
        assert result.data["passages"] and portal.call(lambda: svc.check_trace(stored.trace_id, tenant_id=tenant)).ok
        pressure = portal.call(svc.budget_pressure, tenant)
        assert (pressure.turns, pressure.tool_calls, pressure.tool_passages) == (0, 1, len(result.data["passages"]))
