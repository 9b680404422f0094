"""One call per turn: retrieve, budget, render, trace — and what was rendered is what was traced."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence

import anyio
import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from knowledge.config import Settings
from knowledge.core.memory_boundary import Belief
from knowledge.core.render import parse_knowledge_block
from knowledge.core.trace import block_sha256, rerender
from knowledge.core.turn import TurnRequest
from knowledge.models import (
    ArtifactOrigin,
    KnowledgeChunk,
    KnowledgeQuery,
    Principal,
    RetrievedPassage,
    Sensitivity,
    TrustLevel,
)
from knowledge.service import KnowledgeService
from knowledge.store.locks import lock_document
from knowledge.store.traces import resolve_chunks

TOPICS = ["rollback", "failover", "snapshot", "compaction", "quorum", "defrag"]


@pytest.fixture
def settings(database_dsn: str) -> Settings:
    """These tests are about budgets and traces of passages that match their query only in part:
    they run without the relevance floor (`Settings.relevance_floor`), which would withhold them."""
    return Settings(dsn=database_dsn, pool_min_size=1, pool_max_size=4, sweep_interval_seconds=None,
                    relevance_floor=False, application_name=f"kt-{uuid.uuid4().hex[:10]}")


def owner(tenant: str, name: str = "alice") -> Principal:
    return Principal(tenant_id=tenant, principal_id=name, scopes=frozenset({"knowledge.write"}))


async def ingest_text(svc: KnowledgeService, tenant: str, text: str, *, title: str = "Runbook",
                      sensitivity: str = "internal", visibility: str = "tenant") -> uuid.UUID:
    ref = await svc.artifacts.put(tenant, text.encode(), media_type="text/markdown", origin=ArtifactOrigin.UPLOAD,
                                  trust=TrustLevel.USER)
    doc = await svc.ingest(ref, title, visibility, owner(tenant), origin_trust=TrustLevel.USER,
                           sensitivity=sensitivity)
    return doc.document_id


def section(topic: str, doc: str, sentences: int) -> str:
    """A section of about 12 tokens per sentence, about ``topic``, distinct per document."""
    body = " ".join(f"The {topic} step {i} of the {doc} guide checks the cluster before it continues."
                    for i in range(sentences))
    return f"## {topic.title()} in {doc}\n\n{body}\n"


def guide(doc: str, sizes: Sequence[int]) -> str:
    return f"# {doc.title()} guide\n\n" + "\n".join(
        section(TOPICS[(i + len(doc)) % len(TOPICS)], doc, n) for i, n in enumerate(sizes))


#: Four guides whose sections run from ~130 to ~850 tokens, so a turn's passages differ in size.
CORPUS = {"alpha": [12, 40, 70], "bravo": [25, 55, 11], "charlie": [65, 15, 35], "delta": [30, 50, 20]}


async def ingest_corpus(svc: KnowledgeService, tenant: str) -> None:
    for doc, sizes in CORPUS.items():
        await ingest_text(svc, tenant, guide(doc, sizes), title=f"{doc.title()} guide")


def beliefs(tokens: Sequence[int], sensitivity: Sensitivity = Sensitivity.INTERNAL) -> tuple[Belief, ...]:
    return tuple(Belief(belief_id=f"b{i}", text=f"The principal prefers option {i}.", tokens=t,
                        sensitivity=sensitivity) for i, t in enumerate(tokens))


def request(tenant: str, text: str, region: int, belief_tokens: Sequence[int] = (), **query: object) -> TurnRequest:
    return TurnRequest(query=KnowledgeQuery(tenant_id=tenant, principal_id="alice", text=text, **query),  # type: ignore[arg-type]
                       region_tokens=region, beliefs=beliefs(belief_tokens), session_id="s1", turn_id="t1")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gate_trace_completeness(database_dsn: str, backend: str) -> None:
    """For sampled turns, the trace lists exactly the rendered passages, in order, and re-rendering
    them (texts resolved by chunk id) reproduces the rendered block whose hash the trace records."""
    cfg = Settings(dsn=database_dsn, sweep_interval_seconds=None, pool_max_size=4, relevance_floor=False)
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    seen = {"rendered": 0, "yielded": 0, "empty": 0}
    with start_blocking_portal(backend) as portal, portal.wrap_async_context_manager(
            KnowledgeService.open(cfg)) as svc:
        portal.call(ingest_corpus, svc, tenant)

        @hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(words=st.lists(st.sampled_from([*TOPICS, "unrelated"]), min_size=1, max_size=3),
               region=st.integers(0, 6000), belief_tokens=st.lists(st.integers(1, 120), max_size=30))
        @example(words=["rollback", "snapshot"], region=10_000, belief_tokens=[])
        @example(words=["rollback", "failover", "snapshot"], region=1500, belief_tokens=[50] * 20)
        @example(words=["unrelated"], region=5000, belief_tokens=[25])
        def check(words: list[str], region: int, belief_tokens: list[int]) -> None:
            result = portal.call(svc.turn, request(tenant, " ".join(words), region, belief_tokens))
            stored = portal.call(lambda: svc.trace(result.trace.trace_id, tenant_id=tenant))
            assert stored == result.trace  # what the call returned is what was committed
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
            resolved = portal.call(resolve_chunks, svc.db, tenant, [p.chunk_id for p in stored.passages])
            texts = {cid: c.text for cid, c in resolved.items() if isinstance(c, KnowledgeChunk)}
            again = rerender(stored, texts)
            assert again == result.block and block_sha256(again) == stored.block_sha256
            assert portal.call(lambda: svc.check_trace(stored.trace_id, tenant_id=tenant)).ok

        check()
    assert seen["rendered"] and seen["yielded"] and seen["empty"]


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


@pytest.mark.anyio
async def test_turn_query_asks_for_less_never_more(service: KnowledgeService, tenant: str) -> None:
    await ingest_corpus(service, tenant)
    one = await service.turn(request(tenant, "rollback failover snapshot", 100_000, max_passages=1))
    assert len(one.passages) == 1 and one.budget.knowledge.admitted == 1
    many = await service.turn(request(tenant, "rollback failover snapshot", 100_000, max_passages=10,
                                      budget_tokens=100_000, max_per_document=3))
    assert len(many.passages) == 3 and sum(p.tokens for p in many.passages) <= 3000


@pytest.mark.anyio
async def test_beliefs_above_the_recall_ceiling_are_withheld(service: KnowledgeService, tenant: str) -> None:
    mixed = (*beliefs([10, 10]), Belief(belief_id="secret", text="The principal's salary.", tokens=10,
                                        sensitivity=Sensitivity.RESTRICTED))
    req = TurnRequest(query=KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="rollback"),
                      region_tokens=5000, beliefs=mixed)
    got = await service.turn(req)
    assert [b.belief_id for b in got.beliefs] == ["b0", "b1"]
    assert got.trace.budget.withheld_beliefs == 1 and "secret" not in got.trace.model_dump_json()


async def lock_waiter(svc: KnowledgeService) -> None:
    """Return once some session of this database waits for an advisory lock."""
    while True:
        if await svc.db.fetchval(
                """SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                   WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()"""):
            return
        await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_a_cancelled_turn_returns_nothing_and_traces_nothing(service: KnowledgeService, tenant: str) -> None:
    """The turn waits on a document's lock (held by a version or delete in progress); cancelling it
    there rolls the trace back: no block was handed out, no trace and no counter were written."""
    doc = await ingest_text(service, tenant, guide("alpha", [12, 40, 70]))
    async with service.db.transaction() as holder:
        await lock_document(holder, tenant, doc)
        async with anyio.create_task_group() as tg:
            results: list[object] = []

            async def turn() -> None:
                results.append(await service.turn(request(tenant, "rollback failover snapshot", 10_000)))

            tg.start_soon(turn)
            with anyio.fail_after(30):  # a bound on the wait for the turn to block, not a timing assertion
                await lock_waiter(service)
            tg.cancel_scope.cancel()
    assert results == []
    assert await service.db.fetchval("SELECT count(*) FROM knowledge_traces WHERE tenant_id = $1", tenant) == 0
    assert (await service.budget_pressure(tenant)).turns == 0
    after = await service.turn(request(tenant, "rollback failover snapshot", 10_000))  # and the service goes on
    assert after.passages and (await service.check_trace(after.trace.trace_id, tenant_id=tenant)).ok


@pytest.mark.anyio
async def test_a_turn_with_nothing_to_render_still_traces_its_beliefs(service: KnowledgeService, tenant: str) -> None:
    got = await service.turn(request(tenant, "nothing matches this", 3000, [25, 25]))
    assert got.block is None and got.passages == () and len(got.beliefs) == 2
    stored = await service.trace(got.trace.trace_id, tenant_id=tenant)
    assert stored is not None and stored.block_sha256 is None and [b.belief_id for b in stored.beliefs] == ["b0", "b1"]
    assert (await service.check_trace(got.trace.trace_id, tenant_id=tenant)).ok


@pytest.mark.anyio
async def test_a_passage_deleted_after_retrieval_is_neither_rendered_nor_traced(
        service: KnowledgeService, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A document deleted between the search and the trace's transaction: its passages are dropped
    before the budget, so the block and the trace agree and cite only live chunks."""
    victim = await ingest_text(service, tenant, guide("alpha", [12, 40, 70]), title="Alpha")
    await ingest_text(service, tenant, guide("bravo", [25, 55, 11]), title="Bravo")
    search = service.searcher.search

    async def search_then_delete(query: KnowledgeQuery) -> list[RetrievedPassage]:
        found = await search(query)
        assert victim in {p.document_id for p in found}
        await service.delete(victim, owner(tenant))
        return found

    monkeypatch.setattr(service.searcher, "search", search_then_delete)
    got = await service.turn(request(tenant, "rollback failover snapshot compaction quorum", 10_000))
    assert got.passages and victim not in {p.document_id for p in got.passages}
    assert [p.chunk_id for p in got.trace.passages] == [p.chunk_id for p in got.passages]
    assert got.trace.budget.classes["knowledge"].offered == len(got.passages)
    assert (await service.check_trace(got.trace.trace_id, tenant_id=tenant)).ok
