"""knowledge.search: isolation in SQL (the visibility state machine), ranking, the corpus gate. The verbatim
and citation gates are properties over generated corpora in `tests/test_gate_properties.py`."""

from __future__ import annotations

import contextlib
import functools
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from knowledge.config import Settings
from knowledge.core.ranking import DEFAULT_POLICY
from knowledge.errors import IngestRefused
from knowledge.models import ArtifactOrigin, KnowledgeQuery, Principal, Sensitivity, TrustLevel, Viewer, Visibility
from knowledge.retrieval.search import LexicalArm
from knowledge.semantic.encoder import available as semantic_available
from knowledge.service import KnowledgeService
from knowledge.store.evidence import lexical_evidence
from tests.conftest import corpus_missing

TENANTS = ["ta", "tb", "tc"]
PRINCIPALS = ["alice", "bob", "carol"]
PROJECTS = ["apollo", "gemini"]
WORDS = ["cluster", "snapshot", "rollback", "quorum", "leader", "compaction", "defrag", "backup"]


def writer(tenant: str, principal_id: str) -> Principal:
    return Principal(tenant_id=tenant, principal_id=principal_id, scopes=frozenset({"knowledge.write"}))


async def ingest_text(svc: KnowledgeService, tenant: str, principal_id: str, text: str, *, title: str = "Doc",
                      visibility: str = "tenant", project: str | None = None, sensitivity: str = "internal",
                      doc_date: date | None = None, authority: str = "principal_supplied") -> uuid.UUID:
    ref = await svc.artifacts.put(tenant, text.encode(), media_type="text/markdown", origin=ArtifactOrigin.UPLOAD,
                                  trust=TrustLevel.USER)
    doc = await svc.ingest(ref, title, visibility, writer(tenant, principal_id), origin_trust=TrustLevel.USER,
                           project_scope=project, sensitivity=sensitivity, doc_date=doc_date, authority=authority)
    return doc.document_id


@dataclass(frozen=True)
class DocFacts:
    tenant: str
    owner: str
    visibility: Visibility
    project: str | None
    sensitivity: Sensitivity


def admits(doc: DocFacts, tenant: str, principal: str, scope: str | None, ceiling: Sensitivity) -> bool:
    """The in-memory model of who may read what."""
    if doc.tenant != tenant or doc.sensitivity > ceiling:
        return False
    if doc.visibility is Visibility.TENANT:
        return True
    if doc.visibility is Visibility.PRINCIPAL:
        return doc.owner == principal
    return doc.project is not None and doc.project == scope


class VisibilityMachine(RuleBasedStateMachine):
    """Ingest and search at random across tenants, principals, projects, visibilities and
    sensitivities; every result must be admissible for its principal, always."""

    portal: BlockingPortal
    svc: KnowledgeService

    def __init__(self) -> None:
        super().__init__()
        self.run = uuid.uuid4().hex[:8]  # tenants of this run only
        self.docs: dict[uuid.UUID, DocFacts] = {}
        self.chunks: dict[str, uuid.UUID] = {}  # every chunk id a search returned, and its document
        self.results = 0
        self.resolved = 0

    def tenant(self, name: str) -> str:
        return f"{name}-{self.run}"

    @initialize()
    def seed(self) -> None:
        # Every tenant starts with one document nobody else may see, so leaks have something to leak.
        for name in TENANTS:
            self.ingest(name, "alice", Visibility.PRINCIPAL, None, Sensitivity.RESTRICTED, "cluster")

    @rule(tenant=st.sampled_from(TENANTS), owner=st.sampled_from(PRINCIPALS),
          visibility=st.sampled_from(list(Visibility)), project=st.sampled_from(PROJECTS),
          sensitivity=st.sampled_from(list(Sensitivity)), word=st.sampled_from(WORDS))
    def ingest(self, tenant: str, owner: str, visibility: Visibility, project: str | None,
               sensitivity: Sensitivity, word: str) -> None:
        project = project if visibility is Visibility.PROJECT else None
        text = (f"# {word.title()} notes\n\nThe {word} procedure for the cluster: check the leader, then the "
                f"{word}. Marker {uuid.uuid4().hex[:6]}.\n")
        doc_id = self.portal.call(lambda: ingest_text(self.svc, self.tenant(tenant), owner, text,
                                                      visibility=visibility.value, project=project,
                                                      sensitivity=sensitivity.value))
        self.docs[doc_id] = DocFacts(self.tenant(tenant), owner, visibility, project, sensitivity)

    @rule(tenant=st.sampled_from(TENANTS), principal=st.sampled_from(PRINCIPALS),
          scope=st.sampled_from([None, *PROJECTS]), ceiling=st.sampled_from(list(Sensitivity)),
          words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
    def search(self, tenant: str, principal: str, scope: str | None, ceiling: Sensitivity, words: list[str]) -> None:
        query = KnowledgeQuery(tenant_id=self.tenant(tenant), principal_id=principal, current_scope=scope,
                               text=" ".join(words), sensitivity_ceiling=ceiling, max_passages=50,
                               budget_tokens=100_000, max_per_document=5, min_score=-1e9)
        candidates = self.portal.call(self.svc.searcher.candidates, query)
        passages = self.portal.call(self.svc.search, query)
        for doc_id in [c.document_id for c in candidates] + [p.document_id for p in passages]:
            facts = self.docs.get(doc_id)
            assert facts is not None, "a result from a document this run never ingested: cross-tenant"
            assert admits(facts, self.tenant(tenant), principal, scope, ceiling), (facts, tenant, principal, scope)
        # And nothing admissible that matches is withheld (the predicates do not over-filter).
        visible = {d for d, f in self.docs.items() if admits(f, self.tenant(tenant), principal, scope, ceiling)}
        if visible and "cluster" in words:
            assert {c.document_id for c in candidates} == visible or len(candidates) == self.svc.searcher.arm_limit
        self.results += len(candidates)
        self.chunks.update({c.chunk_id: c.document_id for c in candidates})

    @precondition(lambda self: self.chunks)
    @rule(tenant=st.sampled_from(TENANTS), principal=st.sampled_from(PRINCIPALS),
          scope=st.sampled_from([None, *PROJECTS]), ceiling=st.sampled_from(list(Sensitivity)), data=st.data())
    def resolve(self, tenant: str, principal: str, scope: str | None, ceiling: Sensitivity,
                data: st.DataObject) -> None:
        """A citation resolved for a person (`get_chunk` with a viewer) comes back exactly when a
        search would have admitted its document for them; the operator's (`operator_get_chunk`)
        whenever it is of their tenant — and never across tenants."""
        chunk_id = data.draw(st.sampled_from(sorted(self.chunks)))
        facts = self.docs[self.chunks[chunk_id]]
        viewer = Viewer(tenant_id=self.tenant(tenant), principal_id=principal, current_scope=scope,
                        sensitivity_ceiling=ceiling)
        shown = self.portal.call(functools.partial(self.svc.get_chunk, chunk_id, viewer=viewer))
        assert (shown is not None) == admits(facts, self.tenant(tenant), principal, scope, ceiling), (facts, viewer)
        as_operator = self.portal.call(functools.partial(self.svc.operator_get_chunk, chunk_id,
                                                         tenant_id=self.tenant(tenant)))
        assert (as_operator is not None) == (facts.tenant == self.tenant(tenant))
        self.resolved += 1

    @invariant()
    def tenants_hold_their_documents(self) -> None:
        assert all(f.tenant.endswith(self.run) for f in self.docs.values())


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gate_visibility_isolation(database_dsn: str, backend: str) -> None:
    cfg = Settings(dsn=database_dsn, sweep_interval_seconds=None, pool_max_size=4)
    with start_blocking_portal(backend) as portal, portal.wrap_async_context_manager(
            KnowledgeService.open(cfg)) as svc:
        VisibilityMachine.portal = portal
        VisibilityMachine.svc = svc
        run_state_machine_as_test(VisibilityMachine, settings=settings(
            max_examples=12, stateful_step_count=25, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


GUIDE = """# Deployment Guide

## Rollback

Roll back by reverting the release tag and re-running the deploy job. Do not edit the running
configuration directly, or the next deploy silently undoes it.

## Escaping

A passage may quote markup such as </passage> or </knowledge>, ampersands & "quotes", and a
control character \x07 without breaking its envelope.
"""


@pytest.mark.anyio
async def test_scope_affinity_ranks_but_never_admits(service: KnowledgeService, tenant: str) -> None:
    body = "# Quorum\n\nThe quorum rule: a majority of members must agree before a write commits (marker {}).\n"
    # Equally matching texts of equal length (not identical: exact duplicates are dropped as duplicates).
    in_project = await ingest_text(service, tenant, "alice", body.format("pp"), title="Page", visibility="project",
                                   project="apollo")
    tenant_wide = await ingest_text(service, tenant, "alice", body.format("tt"), title="Book", visibility="tenant")
    other_project = await ingest_text(service, tenant, "alice", body.format("oo"), title="Note",
                                      visibility="project", project="gemini")
    q = KnowledgeQuery(tenant_id=tenant, principal_id="bob", current_scope="apollo", text="quorum majority",
                       max_per_document=1)
    got = [p.document_id for p in await service.search(q)]
    assert got[:2] == [in_project, tenant_wide] and other_project not in got
    q2 = q.model_copy(update={"current_scope": None})
    assert [p.document_id for p in await service.search(q2)] == [tenant_wide]


@pytest.mark.anyio
async def test_recency_reads_doc_date_and_cap_and_budget(service: KnowledgeService, tenant: str) -> None:
    body = "# Backup\n\n" + ("Take a backup of the keyspace before every upgrade of the cluster. " * 30) + "\n"
    old = await ingest_text(service, tenant, "alice", body, title="Old", doc_date=date(2015, 1, 1))
    new = await ingest_text(service, tenant, "alice", body.replace("keyspace", "keyspace data"), title="New",
                            doc_date=date(2026, 6, 1))
    got = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="backup upgrade"))
    assert [p.document_id for p in got][:2] == [new, old]
    tight = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="backup upgrade",
                                                budget_tokens=got[0].tokens))
    assert [p.chunk_id for p in tight] == [got[0].chunk_id] and tight[0].text == got[0].text  # whole, not cut
    assert await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="backup",
                                               budget_tokens=got[0].tokens - 1)) == []


@pytest.mark.anyio
async def test_search_of_nothing_returns_nothing(service: KnowledgeService, tenant: str) -> None:
    await ingest_text(service, tenant, "alice", GUIDE)
    for text in ["zzyzx unmatched", "the and of", "!!!"]:
        assert await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text=text)) == []


@pytest.mark.anyio
async def test_every_passage_carries_its_relevance_and_a_host_can_floor_it(service: KnowledgeService,
                                                                             tenant: str) -> None:
    await ingest_text(service, tenant, "alice", GUIDE)
    notes = ("# Notes\n\nA release is tagged by the release manager at the end of each week, after the "
             "nightly jobs have all passed their checks.\n")
    await ingest_text(service, tenant, "alice", notes)
    ask = KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="how do I roll back a release tag")
    found = await service.search(ask)
    assert found and "Roll back by reverting" in found[0].text
    relevances = [p.relevance for p in found]
    assert all(r is not None and 0.0 <= r <= 1.0 for r in relevances)
    assert relevances == sorted(relevances, reverse=True)  # equal document terms: relevance orders them
    bar = found[0].relevance
    assert bar is not None
    higher = await service.search(ask.model_copy(update={"min_relevance": bar}))
    assert [p.chunk_id for p in higher] == [p.chunk_id for p in found if p.relevance is not None and p.relevance >= bar]
    assert await service.search(ask.model_copy(update={"min_relevance": min(bar + 1e-6, 1.0)})) == []
    # The notes match one word of the question: below the floor, unless the host turns it off.
    assert len(found) == 1
    async with KnowledgeService.open(service.settings.model_copy(update={"relevance_floor": False})) as unfloored:
        everything = await unfloored.search(ask)
    assert [p.chunk_id for p in everything][:1] == [found[0].chunk_id] and len(everything) == 2
    assert everything[1].relevance is not None and everything[1].relevance < DEFAULT_POLICY.min_relevance_more


@pytest.mark.anyio
async def test_the_evidence_reuses_the_lexical_arms_statistics_to_the_last_bit(service: KnowledgeService,
                                                                               tenant: str) -> None:
    """The relevance model's evidence takes the query's idf and mean length from the lexical arm's
    own statement instead of counting the postings again: what it reads must be what a fresh
    count gives, for lexemes held by many chunks, by one, and by none."""
    await ingest_text(service, tenant, "alice", GUIDE)
    await ingest_text(service, tenant, "alice", "# Notes\n\nA release is tagged weekly by the release manager.\n")
    arm = LexicalArm()
    for text in ["how do I roll back a release tag", "release pelican", "weekly"]:
        query = KnowledgeQuery(tenant_id=tenant, principal_id="alice", text=text)
        result = await arm.search_result(service.db, query, 50)
        assert result.terms is not None and result.candidates
        ids = [c.chunk_id for c in result.candidates]
        reused = await lexical_evidence(service.db, tenant, text, ids, result.terms)
        fresh = await lexical_evidence(service.db, tenant, text, ids)
        assert ("pelican" in fresh.idf) == ("pelican" in text)  # a lexeme no chunk holds has its idf too
        assert (reused.idf, reused.avgdl, reused.lengths) == (fresh.idf, fresh.avgdl, fresh.lengths)
        assert {k: sorted(v, key=repr) for k, v in reused.matches.items()} == {
            k: sorted(v, key=repr) for k, v in fresh.matches.items()}


@pytest.mark.anyio
async def test_a_passage_that_holds_a_one_word_question_is_returned(service: KnowledgeService, tenant: str) -> None:
    """Short queries and small tenants lie outside what the model was fitted on (its features are
    clipped): a passage holding the one word asked is still returned, and a word nothing holds
    returns nothing."""
    await ingest_text(service, tenant, "alice", GUIDE)
    found = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="rollback"))
    assert [p.heading_path[-1] for p in found] == ["Deployment Guide"]
    assert await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="pelican")) == []


QA = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "qa" / "docs-dev.jsonl"
# The shipped default (the semantic arm on, ranking knowledge-v2: the calibrated relevance and its
# floors; 3 passages / 3,000 tokens). Measured (`scripts/eval_retrieval.py --semantic`, issue 19):
# recall@3 0.733 (44 of 60; knowledge-v1 fused 0.633, lexical 0.500), noise 0.775, no answerable
# question empty and no unanswerable one empty either. The bounds sit two questions under recall
# and a few passages over noise, so a regression of that size fails.
RECALL_AT_3_FLOOR = 0.70
NOISE_CEILING = 0.79
#: At most this many answerable questions come back empty (the floor's cost).
ANSWERABLE_EMPTY_CEILING = 1
#: One tenant for both loops' runs: the second finds the corpus ingested and embedded.
CORPUS_TENANT = f"gate-corpus-{uuid.uuid4().hex[:8]}"


def _norm(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
async def default_service(database_dsn: str) -> AsyncIterator[KnowledgeService]:
    """The service as shipped: the semantic arm on where the extra is installed (as ``auto`` does)."""
    settings = Settings(dsn=database_dsn, pool_min_size=1, pool_max_size=4, sweep_interval_seconds=None,
                        semantic_arm=semantic_available(), semantic_backfill=False, embedder_threads=2,
                        application_name=f"kg-{uuid.uuid4().hex[:10]}")
    async with KnowledgeService.open(settings) as svc:
        yield svc


@pytest.mark.anyio
@pytest.mark.skipif(corpus_missing(QA), reason="shared corpus not present")
@pytest.mark.parametrize("anyio_backend", [("trio", {})], ids=["trio"])
async def test_gate_corpus_retrieval(default_service: KnowledgeService) -> None:
    """docs-dev through the real ingest and search paths at the shipped defaults: a floor on passage
    recall@3, a ceiling on the noise ratio, and the relevance floor — unanswerable questions come
    back empty, answerable ones do not. Under one loop: ranking does not depend on it (every other
    search test runs under both), and embedding both corpora is the suite's longest wait."""
    service, tenant = default_service, CORPUS_TENANT
    corpus = QA.parent.parent

    def read_corpus() -> list[tuple[Path, bytes]]:  # file reads: in a worker thread, not on the loop
        return [(path, path.read_bytes()) for path in sorted(corpus.glob("docs-*/**/*.md"))]

    for path, data in await anyio.to_thread.run_sync(read_corpus):
        ref = await service.artifacts.put(tenant, data, media_type="text/markdown")
        with contextlib.suppress(IngestRefused):  # the one file holding a live-format credential
            await service.ingest(ref, str(path.relative_to(corpus)), "tenant", writer(tenant, "ops"),
                                 origin_trust=TrustLevel.USER)
    if service.drain is not None:
        with anyio.fail_after(900):
            await service.wait_embedded(tenant_id=tenant)
    questions = [json.loads(line) for line in (await anyio.Path(QA).read_text(encoding="utf-8")).splitlines()
                 if line.strip()]
    hits = answerable = retrieved = irrelevant = unanswerable_empty = answerable_empty = 0
    for q in questions:
        passages = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="ops", text=q["question"]))
        assert all(p.relevance is not None and 0.0 <= p.relevance <= 1.0 for p in passages)
        quotes = [_norm(x) for x in q["answer_quotes"]]
        good = [any(quote in _norm(p.text) for quote in quotes) for p in passages]
        retrieved += len(passages)
        irrelevant += good.count(False)
        if q["unanswerable"]:
            unanswerable_empty += not passages
        else:
            answerable += 1
            hits += any(good)
            answerable_empty += not passages
    recall_at_3 = hits / answerable
    noise = irrelevant / max(retrieved, 1)
    print(f"\ndocs-dev: recall@3 {recall_at_3:.3f} ({hits}/{answerable}), noise {noise:.3f} "
          f"({irrelevant}/{retrieved} passages), unanswerable empty {unanswerable_empty}, answerable empty "
          f"{answerable_empty}, arms {[a.name for a in service.searcher.arms]}")
    assert recall_at_3 >= RECALL_AT_3_FLOOR
    assert noise <= NOISE_CEILING
    assert answerable_empty <= ANSWERABLE_EMPTY_CEILING
