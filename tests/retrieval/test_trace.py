"""The trace: deleted passages render as deleted, the two-ceiling filter, two-tier retention."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge.config import Settings
from knowledge.core.memory_boundary import Belief
from knowledge.core.trace import (
    DELETED_NOTICE,
    MISSING_NOTICE,
    ClassRecord,
    PassageState,
    RecallTrace,
    TraceBudget,
    TracedBelief,
    TracedPassage,
    TraceRetention,
    block_sha256,
    build_view,
    rerender,
)
from knowledge.core.turn import TurnRequest
from knowledge.models import (
    ArtifactOrigin,
    Authority,
    DeletedChunk,
    KnowledgeChunk,
    KnowledgeQuery,
    Sensitivity,
    TrustLevel,
    Viewer,
)
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.store.traces import prune_traces
from tests.retrieval.test_turn import guide, ingest_text, owner, request

LEVELS = list(Sensitivity)
SHA = "ab" * 32
WHEN = datetime(2026, 7, 28, tzinfo=UTC)


def alice(tenant: str, ceiling: Sensitivity | str) -> Viewer:
    """The viewer of these traces: the principal whose turns made them, at a surface's ceiling."""
    return Viewer(tenant_id=tenant, principal_id="alice", sensitivity_ceiling=Sensitivity(ceiling))


@pytest.fixture
def settings(database_dsn: str) -> Settings:
    """These tests are about budgets and traces of passages that match their query only in part:
    they run without the relevance floor (`Settings.relevance_floor`), which would withhold them."""
    return Settings(dsn=database_dsn, pool_min_size=1, pool_max_size=4, sweep_interval_seconds=None,
                    relevance_floor=False, application_name=f"kt-{uuid.uuid4().hex[:10]}")


def traced_passage(i: int, sensitivity: Sensitivity, block: str = SHA) -> TracedPassage:
    text = f"passage {i}"
    return TracedPassage(
        chunk_id=f"kc_{i:021d}", document_id=uuid.UUID(int=i), version=1, title=f"Doc {i}", heading_path=["H", str(i)],
        doc_date=date(2026, 5, 2), authority=Authority.PRINCIPAL_SUPPLIED, score=0.9, arms=["lexical"],
        instruction_like=False, sensitivity=sensitivity, tokens=2,
        content_sha256=hashlib.sha256(text.encode()).hexdigest(), block_sha256=block)


def chunk_of(p: TracedPassage) -> KnowledgeChunk:
    return KnowledgeChunk(chunk_id=p.chunk_id, document_id=p.document_id, version=1, ordinal=0,
                          heading_path=p.heading_path or [], text=f"passage {int(p.chunk_id[3:])}", tokens=2,
                          contains_instruction_like_text=False, content_sha256=p.content_sha256)


def trace_of(recall: Sensitivity, passages: list[TracedPassage], beliefs: list[TracedBelief]) -> RecallTrace:
    empty = ClassRecord(offered=0, admitted=0, rendered=0, tokens=0, yielded_items=0, yielded_tokens=0)
    return RecallTrace(
        trace_id=uuid.uuid4(), tenant_id="t", principal_id="alice", surface="chat", recall_ceiling=recall,
        query_text="q", rendered_at=WHEN, policy="knowledge-v1", block_sha256=SHA if passages else None,
        beliefs=beliefs, passages=passages, budget=TraceBudget(region_tokens=0, classes={"knowledge": empty}))


@given(recall=st.sampled_from(LEVELS), viewer=st.sampled_from(LEVELS),
       passage_levels=st.lists(st.sampled_from(LEVELS), max_size=6),
       belief_levels=st.lists(st.sampled_from(LEVELS), max_size=6))
def test_two_ceiling_filter_applies_to_passages_as_to_beliefs(
        recall: Sensitivity, viewer: Sensitivity, passage_levels: list[Sensitivity],
        belief_levels: list[Sensitivity]) -> None:
    passages = [traced_passage(i, s) for i, s in enumerate(passage_levels)]
    beliefs = [TracedBelief(belief_id=f"b{i}", text=f"belief {i}", tokens=3, sensitivity=s)
               for i, s in enumerate(belief_levels)]
    view = build_view(trace_of(recall, passages, beliefs), {p.chunk_id: chunk_of(p) for p in passages}, viewer)
    ceiling = min(recall, viewer)
    assert view.effective_ceiling == ceiling
    assert [p.chunk_id for p in view.passages] == [p.chunk_id for p in passages if p.sensitivity <= ceiling]
    assert [b.belief_id for b in view.beliefs] == [b.belief_id for b in beliefs if b.sensitivity <= ceiling]
    assert view.withheld_passages == sum(p.sensitivity > ceiling for p in passages)
    assert view.withheld_beliefs == sum(b.sensitivity > ceiling for b in beliefs)
    shown = view.render()
    for p in passages:  # nothing of a withheld item reaches the rendered view, not even its id
        assert (p.chunk_id in shown) == (p.sensitivity <= ceiling)
    for b in beliefs:
        assert (f"[{b.belief_id}]" in shown) == (b.sensitivity <= ceiling)


def test_view_states_deleted_missing_and_shown() -> None:
    passages = [traced_passage(i, Sensitivity.INTERNAL) for i in range(3)]
    gone = DeletedChunk(chunk_id=passages[1].chunk_id, document_id=passages[1].document_id, deleted_at=WHEN)
    view = build_view(trace_of(Sensitivity.INTERNAL, passages, []),
                      {passages[0].chunk_id: chunk_of(passages[0]), passages[1].chunk_id: gone}, Sensitivity.INTERNAL)
    assert [p.state for p in view.passages] == [PassageState.SHOWN, PassageState.DELETED, PassageState.MISSING]
    assert view.passages[0].text == "passage 0" and view.passages[1].text is None and view.passages[1].title is None
    lines = view.render().splitlines()
    assert any(passages[1].chunk_id in ln and DELETED_NOTICE in ln for ln in lines)
    assert any(passages[2].chunk_id in ln and MISSING_NOTICE in ln for ln in lines)
    assert "Doc 1" not in view.render()


def test_a_trace_hashes_its_block_exactly_when_it_rendered_passages() -> None:
    empty = trace_of(Sensitivity.INTERNAL, [], []).model_dump()
    with pytest.raises(ValueError, match="block hash"):
        RecallTrace.model_validate({**empty, "block_sha256": SHA})
    one = trace_of(Sensitivity.INTERNAL, [traced_passage(0, Sensitivity.PUBLIC)], []).model_dump()
    with pytest.raises(ValueError, match="block hash"):
        RecallTrace.model_validate({**one, "block_sha256": None})
    with pytest.raises(ValueError, match="carries the hash"):
        RecallTrace.model_validate({**one, "block_sha256": "cd" * 32})


def test_rerender_refuses_a_text_that_is_not_the_traced_one() -> None:
    p = traced_passage(0, Sensitivity.INTERNAL)
    trace = trace_of(Sensitivity.INTERNAL, [p], [])
    assert "passage 0" in rerender(trace, {p.chunk_id: "passage 0"})
    with pytest.raises(ValueError, match="content hash"):
        rerender(trace, {p.chunk_id: "passage 0, edited"})
    with pytest.raises(ValueError, match="no longer holds"):
        rerender(trace.model_copy(update={"passages": [p.model_copy(update={"title": None})]}), {p.chunk_id: "x"})


# --- against the database -----------------------------------------------------------------------

ROLLBACK = "# Ops\n\n## Rollback\n\n" + "Roll back by reverting the release tag and re-running the deploy job. " * 12
FAILOVER = "# Ops\n\n## Failover\n\n" + "Fail over by promoting the standby and re-pointing the clients at it. " * 12


@pytest.mark.anyio
async def test_a_trace_renders_a_deleted_passage_as_deleted(service: KnowledgeService, tenant: str) -> None:
    """Deletion after a trace: the view keeps the chunk id and says the passage was deleted; the trace
    forgot the passage's title and heading path; the other passage still shows."""
    gone = await ingest_text(service, tenant, ROLLBACK, title="Rollback runbook")
    kept = await ingest_text(service, tenant, FAILOVER, title="Failover runbook")
    turn = await service.turn(request(tenant, "rollback release failover standby", 10_000, [20]))
    assert {p.document_id for p in turn.passages} == {gone, kept}
    deleted_chunk = next(p.chunk_id for p in turn.passages if p.document_id == gone)
    assert (await service.check_trace(turn.trace.trace_id, tenant_id=tenant)).ok

    await service.delete(gone, owner(tenant))

    view = await service.trace_view(turn.trace.trace_id, viewer=alice(tenant, "internal"))
    assert view is not None
    states = {p.chunk_id: p.state for p in view.passages}
    assert states[deleted_chunk] is PassageState.DELETED and len(view.passages) == 2
    assert all(s is PassageState.SHOWN for c, s in states.items() if c != deleted_chunk)
    text = view.render()
    assert f"[{deleted_chunk}] {DELETED_NOTICE}" in text
    assert "Rollback runbook" not in text and "reverting the release tag" not in text
    assert "Failover runbook" in text and "promoting the standby" in text
    stored = await service.operator_trace(turn.trace.trace_id, tenant_id=tenant)
    assert stored is not None
    forgotten = next(p for p in stored.passages if p.chunk_id == deleted_chunk)
    assert forgotten.title is None and forgotten.heading_path is None  # the migration's trigger
    assert len(stored.beliefs) == 1  # the one record still carries the turn's beliefs
    check = await service.check_trace(turn.trace.trace_id, tenant_id=tenant)
    assert not check.ok and deleted_chunk in (check.reason or "")


@pytest.mark.anyio
async def test_a_trace_is_its_principals_and_shows_them_only_what_a_search_would_give_them(
        service: KnowledgeService, tenant: str) -> None:
    """Alice's turn at project apollo cited her private runbook, an apollo runbook and a tenant-wide
    one. To Bob the trace does not exist (not its query, nor its beliefs, nor a count); Alice at
    apollo sees all three; Alice at another scope has the apollo passage withheld and counted; the
    operator's view shows all three."""
    private = await ingest_text(service, tenant, ROLLBACK, title="Alice's rollback notes", visibility="principal")
    shared = await ingest_text(service, tenant, FAILOVER, title="Failover runbook")
    ref = await service.put_artifact(tenant, FAILOVER.replace("## Failover", "## Apollo failover").encode(),
                                      media_type="text/markdown", origin=ArtifactOrigin.UPLOAD, trust=TrustLevel.USER)
    apollo = (await service.ingest(ref, "Apollo runbook", "project", owner(tenant), origin_trust=TrustLevel.USER,
                                   project_scope="apollo")).document_id
    turn = await service.turn(request(tenant, "rollback release failover standby", 10_000, [20],
                                      current_scope="apollo", max_per_document=1))
    assert {p.document_id for p in turn.passages} == {private, shared, apollo}
    bob = Viewer(tenant_id=tenant, principal_id="bob", current_scope="apollo")
    assert await service.trace_view(turn.trace.trace_id, viewer=bob) is None
    at_apollo = await service.trace_view(turn.trace.trace_id,
                                         viewer=Viewer(tenant_id=tenant, principal_id="alice", current_scope="apollo"))
    assert at_apollo is not None and at_apollo.withheld_passages == 0 and len(at_apollo.passages) == 3
    elsewhere = await service.trace_view(turn.trace.trace_id, viewer=alice(tenant, "internal"))
    assert elsewhere is not None and elsewhere.withheld_passages == 1
    assert {p.document_id for p in elsewhere.passages} == {private, shared}
    operator = await service.operator_trace_view(turn.trace.trace_id, tenant_id=tenant, viewing_ceiling="internal")
    assert operator is not None and operator.withheld_passages == 0 and len(operator.passages) == 3
    cited = next(p.chunk_id for p in turn.passages if p.document_id == private)
    assert await service.get_chunk(cited, viewer=bob) is None  # a click on it, as Bob: nothing
    assert await service.get_chunk(cited, viewer=alice(tenant, "internal")) is not None


@pytest.mark.anyio
async def test_two_ceilings_through_the_service(service: KnowledgeService, tenant: str) -> None:
    levels = ["public", "internal", "confidential"]
    docs = {lvl: await ingest_text(service, tenant, ROLLBACK.replace("Roll back", f"Roll back ({lvl})"),
                                   title=f"{lvl} runbook", sensitivity=lvl) for lvl in levels}
    mind = tuple(Belief(belief_id=f"b-{lvl}", text=f"a {lvl} belief", tokens=5, sensitivity=Sensitivity(lvl))
                 for lvl in [*levels, "restricted"])
    query = KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="roll back release tag",
                           sensitivity_ceiling=Sensitivity.CONFIDENTIAL)
    turn = await service.turn(TurnRequest(query=query, region_tokens=10_000, beliefs=mind, surface="ops-console",
                                              retrieve=True))
    assert {p.document_id for p in turn.passages} == set(docs.values())
    assert [b.belief_id for b in turn.beliefs] == ["b-public", "b-internal", "b-confidential"]

    async def shown(viewer: str) -> tuple[set[str], set[str], int, int]:
        view = await service.trace_view(turn.trace.trace_id, viewer=alice(tenant, viewer))
        assert view is not None
        return ({p.title or "" for p in view.passages}, {b.belief_id for b in view.beliefs},
                view.withheld_passages, view.withheld_beliefs)

    assert await shown("public") == ({"public runbook"}, {"b-public"}, 2, 2)
    assert await shown("internal") == ({"public runbook", "internal runbook"}, {"b-public", "b-internal"}, 1, 1)
    every = ({f"{lvl} runbook" for lvl in levels}, {f"b-{lvl}" for lvl in levels}, 0, 0)
    assert await shown("restricted") == every  # the recall surface's ceiling (confidential) is the stricter
    lower = await service.turn(TurnRequest(query=query.model_copy(update={"sensitivity_ceiling": Sensitivity.INTERNAL}),
                                           region_tokens=10_000, beliefs=mind, retrieve=True))
    view = await service.trace_view(lower.trace.trace_id, viewer=alice(tenant, "restricted"))
    assert view is not None and view.effective_ceiling is Sensitivity.INTERNAL
    assert {p.title for p in view.passages} == {"public runbook", "internal runbook"}


@pytest.mark.anyio
async def test_two_tier_retention(service: KnowledgeService, sql: Database, tenant: str) -> None:
    await ingest_text(service, tenant, guide("alpha", [12, 40, 70]))
    turn = await service.turn(request(tenant, "rollback failover snapshot", 10_000, [25, 25]))
    created = turn.trace.created_at
    assert created is not None and turn.passages
    retention = TraceRetention(full_days=30, skeleton_days=365)

    early = await prune_traces(sql, now=created + timedelta(days=29), retention=retention, tenant_id=tenant)
    assert (early.reduced, early.deleted) == (0, 0)
    assert (await service.check_trace(turn.trace.trace_id, tenant_id=tenant)).ok

    tier2 = await prune_traces(sql, now=created + timedelta(days=31), retention=retention, tenant_id=tenant)
    assert (tier2.reduced, tier2.deleted) == (1, 0)
    stored = await service.operator_trace(turn.trace.trace_id, tenant_id=tenant)
    assert stored is not None and stored.reduced_at is not None and stored.query_text is None
    assert all(b.text is None for b in stored.beliefs) and [b.belief_id for b in stored.beliefs] == ["b0", "b1"]
    assert all(p.title is None and p.heading_path is None for p in stored.passages)
    assert [p.chunk_id for p in stored.passages] == [p.chunk_id for p in turn.passages]  # the skeleton stays
    assert stored.block_sha256 == turn.trace.block_sha256 == block_sha256(turn.block or "")
    view = await service.trace_view(turn.trace.trace_id, viewer=alice(tenant, "internal"))
    assert view is not None and {p.state for p in view.passages} == {PassageState.REDUCED}
    assert "checks the cluster" not in view.render()
    again = await prune_traces(sql, now=created + timedelta(days=31), retention=retention, tenant_id=tenant)
    assert (again.reduced, again.deleted) == (0, 0)

    gone = await prune_traces(sql, now=created + timedelta(days=366), retention=retention, tenant_id=tenant)
    assert (gone.reduced, gone.deleted) == (0, 1)
    assert await service.operator_trace(turn.trace.trace_id, tenant_id=tenant) is None
    assert await sql.fetchval(
        "SELECT count(*) FROM knowledge_trace_passages WHERE tenant_id = $1", tenant) == 0
    assert (await service.budget_pressure(tenant)).turns == 1  # the counters are not traces: they stay


def test_retention_schedule_is_stated() -> None:
    from knowledge.core.trace import TRACE_RETENTION

    assert (TRACE_RETENTION.full_days, TRACE_RETENTION.skeleton_days) == (30, 365)
    with pytest.raises(ValueError):
        TraceRetention(full_days=40, skeleton_days=30)


@pytest.mark.anyio
async def test_the_tool_path_is_in_the_turns_trace_filtered_and_retained_like_the_turns_own(
        service: KnowledgeService, sql: Database, tenant: str) -> None:
    """What ``knowledge.search`` gave the agent in a turn is in that turn's trace: it is Alice's (Bob
    gets nothing), a public surface withholds (and counts) its passages, the turn's recall ceiling caps
    the tool's search, another principal's trace is refused, and retention reduces and deletes it."""
    from knowledge.errors import ToolRefused
    from knowledge.models import Principal
    from knowledge.tools import ToolContext
    from tests.test_tools import registry

    private = await ingest_text(service, tenant, ROLLBACK, title="Alice's rollback notes", visibility="principal")
    shared = await ingest_text(service, tenant, FAILOVER, title="Failover runbook")
    secret = await ingest_text(service, tenant, FAILOVER.replace("standby", "standby (secret)"),
                               title="Confidential failover", sensitivity="confidential")
    turn = await service.turn(request(tenant, "unrelated words", 10_000))  # the turn's own block: whatever
    as_alice = Principal(tenant_id=tenant, principal_id="alice")
    context = ToolContext(principal=as_alice, origin_trust=TrustLevel.USER, trace_id=turn.trace.trace_id,
                          sensitivity_ceiling=Sensitivity.CONFIDENTIAL)  # above the turn's recall ceiling
    tools = registry()
    first = await tools.call("knowledge.search", {"text": "roll back release tag"}, context, service)
    second = await tools.call("knowledge.search", {"text": "fail over promoting standby"}, context, service)
    got = {p["document_id"] for r in (first, second) for p in r.data["passages"]}
    assert {str(private), str(shared)} <= got and str(secret) not in got  # capped at the turn's ceiling (internal)

    bob = await service.trace_view(turn.trace.trace_id, viewer=Viewer(tenant_id=tenant, principal_id="bob"))
    assert bob is None  # Alice's turn, tool calls included, is hers
    mine = await service.trace_view(turn.trace.trace_id, viewer=alice(tenant, "internal"))
    assert mine is not None and [c.call_no for c in mine.tool_calls] == [1, 2]
    assert sum(c.withheld_passages for c in mine.tool_calls) == 0
    assert "reverting the release tag" in mine.render() and "tool call 1: knowledge.search" in mine.render()
    public = await service.trace_view(turn.trace.trace_id, viewer=alice(tenant, "public"))  # a public surface
    assert public is not None and sum(len(c.passages) for c in public.tool_calls) == 0
    assert sum(c.withheld_passages for c in public.tool_calls) == len(got) >= 2
    assert "reverting the release tag" not in public.render()

    bobs = ToolContext(principal=Principal(tenant_id=tenant, principal_id="bob"), origin_trust=TrustLevel.USER,
                       trace_id=turn.trace.trace_id)
    with pytest.raises(ToolRefused) as refused:
        await tools.call("knowledge.search", {"text": "failover"}, bobs, service)
    assert refused.value.reason == "unknown_trace"
    stored = await service.operator_trace(turn.trace.trace_id, tenant_id=tenant)
    assert stored is not None and len(stored.tool_calls) == 2  # the refused call added nothing

    created = stored.created_at
    assert created is not None
    retention = TraceRetention(full_days=30, skeleton_days=365)
    await prune_traces(sql, now=created + timedelta(days=31), retention=retention, tenant_id=tenant)
    reduced = await service.operator_trace(turn.trace.trace_id, tenant_id=tenant)
    assert reduced is not None and all(c.query_text is None for c in reduced.tool_calls)
    assert all(p.title is None for c in reduced.tool_calls for p in c.passages)
    assert [p.chunk_id for c in reduced.tool_calls for p in c.passages] == [
        p.chunk_id for c in stored.tool_calls for p in c.passages]
    await prune_traces(sql, now=created + timedelta(days=366), retention=retention, tenant_id=tenant)
    assert await sql.fetchval(
        "SELECT count(*) FROM knowledge_trace_tool_calls WHERE tenant_id = $1", tenant) == 0
