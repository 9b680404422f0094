"""One call per turn: retrieve, budget, render, trace — and what was rendered is what was traced. The gates
are `tests/gates/test_trace_completeness.py` and `tests/gates/test_budget_yield.py`."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge.config import Settings
from knowledge.core.memory_boundary import Belief
from knowledge.core.turn import TurnRequest
from knowledge.models import (
    ArtifactOrigin,
    KnowledgeQuery,
    Principal,
    Sensitivity,
    TrustLevel,
)
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.store.locks import lock_document
from tests.helpers.progress import hang_detector

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
    ref = await svc.put_artifact(tenant, text.encode(), media_type="text/markdown", origin=ArtifactOrigin.UPLOAD,
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
                       region_tokens=region, beliefs=beliefs(belief_tokens), session_id="s1", turn_id="t1",
                       retrieve=True)


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


async def lock_waiter(db: Database) -> None:
    """Return once some session of this database waits for an advisory lock."""
    while True:
        if await db.fetchval(
                """SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                   WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()"""):
            return
        await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_a_cancelled_turn_returns_nothing_and_traces_nothing(service: KnowledgeService, sql: Database,
                                                                    tenant: str) -> None:
    """The turn waits on a document's lock (held by a version or delete in progress); cancelling it
    there rolls the trace back: no block was handed out, no trace and no counter were written."""
    doc = await ingest_text(service, tenant, guide("alpha", [12, 40, 70]))
    async with sql.transaction() as holder:
        await lock_document(holder, tenant, doc)
        async with anyio.create_task_group() as tg:
            results: list[object] = []

            async def turn() -> None:
                results.append(await service.turn(request(tenant, "rollback failover snapshot", 10_000)))

            tg.start_soon(turn)
            with hang_detector():  # a bound on the wait for the turn to block, not a timing assertion
                await lock_waiter(sql)
            tg.cancel_scope.cancel()
    assert results == []
    assert await sql.fetchval("SELECT count(*) FROM knowledge_traces WHERE tenant_id = $1", tenant) == 0
    assert (await service.budget_pressure(tenant)).turns == 0
    after = await service.turn(request(tenant, "rollback failover snapshot", 10_000))  # and the service goes on
    assert after.passages and (await service.check_trace(after.trace.trace_id, tenant_id=tenant)).ok


@pytest.mark.anyio
async def test_a_turn_with_nothing_to_render_still_traces_its_beliefs(service: KnowledgeService, tenant: str) -> None:
    got = await service.turn(request(tenant, "nothing matches this", 3000, [25, 25]))
    assert got.block is None and got.passages == () and len(got.beliefs) == 2
    stored = await service.operator_trace(got.trace.trace_id, tenant_id=tenant)
    assert stored is not None and stored.block_sha256 is None and [b.belief_id for b in stored.beliefs] == ["b0", "b1"]
    assert (await service.check_trace(got.trace.trace_id, tenant_id=tenant)).ok


@pytest.mark.anyio
async def test_a_passage_deleted_after_retrieval_is_neither_rendered_nor_traced(
        service: KnowledgeService, tenant: str) -> None:
    """A document deleted between the search and the trace's transaction: its passages are dropped
    before the budget, so the block and the trace agree and cite only live chunks."""
    victim = await ingest_text(service, tenant, guide("alpha", [12, 40, 70]), title="Alpha")
    await ingest_text(service, tenant, guide("bravo", [25, 55, 11]), title="Bravo")
    turn = request(tenant, "rollback failover snapshot compaction quorum", 10_000)
    assert victim in {p.document_id for p in await service.search(turn.query)}  # the turn's search finds it
    deleted = []

    async def delete_after_the_search(at: str, query: KnowledgeQuery) -> None:  # the seam's search hook
        if at == "after" and not deleted:
            deleted.append(await service.delete(victim, owner(tenant)))

    service.faults.search_step = delete_after_the_search
    got = await service.turn(turn)
    service.faults.search_step = None
    assert deleted and deleted[0] > 0
    assert got.passages and victim not in {p.document_id for p in got.passages}
    assert [p.chunk_id for p in got.trace.passages] == [p.chunk_id for p in got.passages]
    assert got.trace.budget.classes["knowledge"].offered == len(got.passages)
    assert (await service.check_trace(got.trace.trace_id, tenant_id=tenant)).ok


@pytest.mark.anyio
async def test_pre_turn_retrieval_is_off_unless_the_service_or_the_turn_turns_it_on(
        service: KnowledgeService, tenant: str, settings: Settings) -> None:
    """Build step 5: knowledge retrieved without an explicit tool call only where asked — off by
    default (`Settings.preturn_retrieval`); a turn may ask either way. Off, the turn renders its
    beliefs and opens the trace the agent's tool calls join."""
    await ingest_corpus(service, tenant)
    plain = TurnRequest(query=KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="rollback failover"),
                        region_tokens=10_000, beliefs=beliefs([20]))
    off = await service.turn(plain)
    assert off.block is None and off.passages == () and [b.belief_id for b in off.beliefs] == ["b0"]
    assert off.trace.passages == [] and off.trace.query_text == "rollback failover"
    on = await service.turn(plain.model_copy(update={"retrieve": True}))
    assert on.block is not None and on.passages
    async with KnowledgeService.open(settings.model_copy(update={"preturn_retrieval": True})) as eager:
        assert (await eager.turn(plain)).passages
        assert (await eager.turn(plain.model_copy(update={"retrieve": False}))).passages == ()


def test_the_pre_turn_query_is_the_message_then_what_the_objective_adds() -> None:
    from knowledge.core.turn import form_query

    ask = TurnRequest(query=KnowledgeQuery(tenant_id="t", principal_id="p", text="and then what?"),
                      region_tokens=100, objective="Restore the etcd cluster from a snapshot, then what")
    assert form_query(ask).text == "and then what? Restore the etcd cluster from a snapshot,"
    assert form_query(ask.model_copy(update={"objective": None})).text == "and then what?"
    assert form_query(ask.model_copy(update={"objective": "And THEN"})).text == "and then what?"


def test_the_pre_turn_query_brings_the_sessions_entities_by_name() -> None:
    from knowledge.core.turn import ActiveEntity, form_query

    db = ActiveEntity(name="orders-postgres", aliases=("the prod db", "orders db"))
    argo = ActiveEntity(name="argocd-server")

    def asked(text: str, *entities: ActiveEntity) -> str:
        return form_query(TurnRequest(query=KnowledgeQuery(tenant_id="t", principal_id="p", text=text),
                                      region_tokens=100, entities=entities)).text

    assert asked("how big is the prod db now?", db, argo) == "how big is the prod db now? orders-postgres"
    assert asked("and the next step?", db, argo) == "and the next step? orders-postgres argocd-server"
    assert asked("restart argocd-server", db, argo) == "restart argocd-server"  # it chose its subject
    assert asked("is orders-postgres up?", db) == "is orders-postgres up?"


@given(message=st.text(min_size=1, max_size=60),
       names=st.lists(st.from_regex(r"[a-z]{3,8}(-[a-z]{3,8})?", fullmatch=True), max_size=4, unique=True))
def test_the_pre_turn_query_starts_with_the_message_and_names_every_entity_it_brings(
        message: str, names: list[str]) -> None:
    from knowledge.core.turn import ActiveEntity, form_query

    entities = tuple(ActiveEntity(name=n, aliases=(f"alias{i}",)) for i, n in enumerate(names))
    text = form_query(TurnRequest(query=KnowledgeQuery(tenant_id="t", principal_id="p", text=message),
                                  region_tokens=100, entities=entities)).text
    assert text.startswith(message)
    words = {w.lower() for w in re.findall(r"\w+", text)}
    mentioned = [e for e in entities
                 if any({w.lower() for w in re.findall(r"\w+", n)} <= {w.lower() for w in re.findall(r"\w+", message)}
                        for n in (e.name, *e.aliases))]
    for entity in mentioned or entities:  # each one named, by alias or not at all, is in the query by name
        assert {w.lower() for w in re.findall(r"\w+", entity.name)} <= words
