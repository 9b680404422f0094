"""The agent's answer recorded against its turn (`svc.record_answer`): citations of what the turn
showed — its block and its tool results — are shown, any other id is hallucinated and never
resolved, and the counters, the trace and its retention keep them."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from knowledge.core.trace import TraceRetention
from knowledge.errors import TraceNotFound
from knowledge.models import Principal, TrustLevel, Viewer
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.store.traces import prune_traces
from knowledge.tools import ToolContext
from tests.retrieval.test_turn import ingest_corpus, request
from tests.test_tools import registry


@pytest.mark.anyio
async def test_citations_of_what_the_turn_showed_are_shown_and_the_rest_hallucinated(
        service: KnowledgeService, sql: Database, tenant: str) -> None:
    await ingest_corpus(service, tenant)
    turn = await service.turn(request(tenant, "rollback", 10_000))
    context = ToolContext(principal=Principal(tenant_id=tenant, principal_id="alice"), origin_trust=TrustLevel.USER,
                          trace_id=turn.trace.trace_id)
    found = await registry().call("knowledge.search", {"text": "quorum defrag"}, context, service)
    other = await service.turn(request(tenant, "snapshot compaction", 10_000))  # another turn's passages
    from_turn, from_tool = turn.passages[0].chunk_id, found.data["passages"][0]["chunk_id"]
    elsewhere = next(p.chunk_id for p in other.passages
                     if p.chunk_id not in {x.chunk_id for x in turn.trace.all_passages()}
                     and p.chunk_id not in {x["chunk_id"] for x in found.data["passages"]})
    answer = (f"Roll back by reverting the tag [{from_turn}]. A quorum needs a majority ({from_tool}).\n"
              f"Compaction drops old revisions [{elsewhere}]. Defrag frees space [kc_madeup].")
    recorded = await service.record_answer(turn.trace.trace_id, answer, tenant_id=tenant)
    assert recorded.answer_no == 1
    assert [(c.citation.chunk_id, c.shown) for c in recorded.citations] == [
        (from_turn, True), (from_tool, True), (elsewhere, False), ("kc_madeup", False)]
    assert [c.citation.claim for c in recorded.hallucinated] == ["Compaction drops old revisions.",
                                                                  "Defrag frees space."]
    again = await service.record_answer(turn.trace.trace_id, "No citations this time.", tenant_id=tenant)
    assert again.answer_no == 2 and again.citations == ()

    stats = await service.citation_stats(tenant)
    assert (stats.answers, stats.answers_citing, stats.citations, stats.hallucinated) == (2, 1, 4, 2)
    assert stats.hallucination_rate == 0.5 and stats.citing_share == 0.5

    stored = await service.operator_trace(turn.trace.trace_id, tenant_id=tenant)
    assert stored is not None and [a.answer_no for a in stored.answers] == [1, 2]
    assert [(c.chunk_id, c.shown, c.claim) for c in stored.answers[0].citations] == [
        (c.citation.chunk_id, c.shown, c.citation.claim) for c in recorded.citations]
    mine = await service.trace_view(turn.trace.trace_id, viewer=Viewer(tenant_id=tenant, principal_id="alice"))
    assert mine is not None and "hallucinated" in mine.render() and "kc_madeup" in mine.render()

    with pytest.raises(TraceNotFound) as missing:
        await service.record_answer(uuid.uuid4(), answer, tenant_id=tenant)
    assert missing.value.reason == "unknown_trace"
    with pytest.raises(TraceNotFound):  # another tenant's trace is no trace
        await service.record_answer(turn.trace.trace_id, answer, tenant_id=f"{tenant}-other")

    created = stored.created_at
    assert created is not None
    retention = TraceRetention(full_days=30, skeleton_days=365)
    await prune_traces(sql, now=created + timedelta(days=31), retention=retention, tenant_id=tenant)
    reduced = await service.operator_trace(turn.trace.trace_id, tenant_id=tenant)
    assert reduced is not None and all(c.claim is None for c in reduced.answers[0].citations)
    assert [c.chunk_id for c in reduced.answers[0].citations] == [c.citation.chunk_id for c in recorded.citations]
    await prune_traces(sql, now=created + timedelta(days=366), retention=retention, tenant_id=tenant)
    assert await sql.fetchval(
        "SELECT count(*) FROM knowledge_trace_citations WHERE tenant_id = $1", tenant) == 0
    assert (await service.citation_stats(tenant)).citations == 4  # the counters are not traces: they stay
