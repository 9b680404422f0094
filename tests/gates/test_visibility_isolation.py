"""Hard gate "Visibility isolation" (ADR-0033, Hard gates):

    Visibility isolation — zero cross-tenant results, and zero results whose visibility does not admit the
    querying principal. A hard gate, not a metric to improve. M9.

Every read a person can reach: `VisibilityMachine` ingests, searches, runs turns with the agent's
tool calls, resolves citations and opens traces at random across tenants, principals, projects,
visibilities and sensitivities with the lexical arm (`test_gate_visibility_isolation`), and
`SemanticVisibilityMachine` checks the semantic arm's own candidates too
(`test_gate_visibility_isolation_semantic_arm`, skipped where the ``semantic`` extra is not installed).
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass

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
from knowledge.core.turn import TurnRequest
from knowledge.models import KnowledgeQuery, Principal, Sensitivity, TrustLevel, Viewer, Visibility
from knowledge.retrieval.search import Arm, LexicalArm, Searcher
from knowledge.semantic.encoder import available
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.tools import ToolContext
from tests.conftest import open_sql
from tests.retrieval.test_search import ingest_text
from tests.semantic.test_semantic import Semantic, arms, semantic_service
from tests.test_tools import registry

TENANTS = ["ta", "tb", "tc"]
PRINCIPALS = ["alice", "bob", "carol"]
PROJECTS = ["apollo", "gemini"]
WORDS = ["cluster", "snapshot", "rollback", "quorum", "leader", "compaction", "defrag", "backup"]


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
    #: The test's own pool on the service's database, and a searcher over it with the service's arms
    #: (the service's parts are private): for the arms' candidates, before ranking.
    db: Database
    searcher: Searcher

    def __init__(self) -> None:
        super().__init__()
        self.run = uuid.uuid4().hex[:8]  # tenants of this run only
        self.docs: dict[uuid.UUID, DocFacts] = {}
        self.chunks: dict[str, uuid.UUID] = {}  # every chunk id a search returned, and its document
        self.results = 0
        self.resolved = 0
        self.traces: dict[uuid.UUID, tuple[str, str, list[uuid.UUID]]] = {}  # tenant, principal, documents given
        self.viewed = 0
        self.tools = registry()

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
        candidates = self.portal.call(self.searcher.candidates, query)
        passages = self.portal.call(self.svc.search, query)
        for doc_id in [c.document_id for c in candidates] + [p.document_id for p in passages]:
            facts = self.docs.get(doc_id)
            assert facts is not None, "a result from a document this run never ingested: cross-tenant"
            assert admits(facts, self.tenant(tenant), principal, scope, ceiling), (facts, tenant, principal, scope)
        # And nothing admissible that matches is withheld (the predicates do not over-filter).
        visible = {d for d, f in self.docs.items() if admits(f, self.tenant(tenant), principal, scope, ceiling)}
        if visible and "cluster" in words:
            assert {c.document_id for c in candidates} == visible or len(candidates) == self.searcher.arm_limit
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

    @rule(tenant=st.sampled_from(TENANTS), principal=st.sampled_from(PRINCIPALS),
          scope=st.sampled_from([None, *PROJECTS]), ceiling=st.sampled_from(list(Sensitivity)),
          words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
          searches=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=2), max_size=2))
    def turn(self, tenant: str, principal: str, scope: str | None, ceiling: Sensitivity, words: list[str],
             searches: list[list[str]]) -> None:
        """A turn and the agent's ``knowledge.search`` calls in it: everything the agent is given is
        admissible for the turn's principal, and the trace records it for the view rule."""
        query = KnowledgeQuery(tenant_id=self.tenant(tenant), principal_id=principal, current_scope=scope,
                               text=" ".join(words), sensitivity_ceiling=ceiling, min_score=-1e9)
        result = self.portal.call(self.svc.turn, TurnRequest(query=query, region_tokens=10_000, retrieve=True))
        given = [p.document_id for p in result.passages]
        context = ToolContext(principal=Principal(tenant_id=self.tenant(tenant), principal_id=principal),
                              origin_trust=TrustLevel.USER, current_scope=scope, sensitivity_ceiling=ceiling,
                              trace_id=result.trace.trace_id)
        for q in searches:
            found = self.portal.call(self.tools.call, "knowledge.search", {"text": " ".join(q)}, context, self.svc)
            given += [uuid.UUID(p["document_id"]) for p in found.data["passages"]]
        for doc_id in given:
            assert admits(self.docs[doc_id], self.tenant(tenant), principal, scope, ceiling), (doc_id, principal)
        self.traces[result.trace.trace_id] = (self.tenant(tenant), principal, given)

    @precondition(lambda self: self.traces)
    @rule(tenant=st.sampled_from(TENANTS), principal=st.sampled_from(PRINCIPALS),
          scope=st.sampled_from([None, *PROJECTS]), ceiling=st.sampled_from(list(Sensitivity)), data=st.data())
    def view_trace(self, tenant: str, principal: str, scope: str | None, ceiling: Sensitivity,
                   data: st.DataObject) -> None:
        """A trace opened by a person (`trace_view`) exists only for the principal whose turn it was,
        and shows them exactly the passages, of both paths, that a search would admit for them now —
        the rest counted as withheld; the operator's view only within the trace's tenant."""
        trace_id = data.draw(st.sampled_from(sorted(self.traces)))
        owner_tenant, owner, given = self.traces[trace_id]
        viewer = Viewer(tenant_id=self.tenant(tenant), principal_id=principal, current_scope=scope,
                        sensitivity_ceiling=ceiling)
        view = self.portal.call(functools.partial(self.svc.trace_view, trace_id, viewer=viewer))
        if (self.tenant(tenant), principal) != (owner_tenant, owner):
            assert view is None, (owner_tenant, owner, viewer)
        else:
            assert view is not None
            shown = [p.document_id for p in view.passages] + [
                p.document_id for c in view.tool_calls for p in c.passages]
            withheld = view.withheld_passages + sum(c.withheld_passages for c in view.tool_calls)
            assert sorted(str(d) for d in shown) == sorted(
                str(d) for d in given if admits(self.docs[d], self.tenant(tenant), principal, scope, ceiling))
            assert len(shown) + withheld == len(given)
        as_operator = self.portal.call(functools.partial(
            self.svc.operator_trace_view, trace_id, tenant_id=self.tenant(tenant), viewing_ceiling="restricted"))
        assert (as_operator is not None) == (owner_tenant == self.tenant(tenant))
        self.viewed += 1

    @invariant()
    def tenants_hold_their_documents(self) -> None:
        assert all(f.tenant.endswith(self.run) for f in self.docs.values())


def share(machine: type[VisibilityMachine], portal: BlockingPortal, svc: KnowledgeService, db: Database,
          searched: list[Arm]) -> None:
    """Hand the machine the service, the test's pool and a searcher with the service's arms."""
    assert [arm.name for arm in searched] == svc.retrieval().arms
    machine.portal, machine.svc, machine.db = portal, svc, db
    machine.searcher = Searcher(db, searched, arm_limit=svc.settings.search_candidates)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gate_visibility_isolation(database_dsn: str, backend: str) -> None:
    cfg = Settings(dsn=database_dsn, sweep_interval_seconds=None, pool_max_size=4)
    with start_blocking_portal(backend) as portal, portal.wrap_async_context_manager(
            KnowledgeService.open(cfg)) as svc, portal.wrap_async_context_manager(open_sql(database_dsn)) as db:
        share(VisibilityMachine, portal, svc, db, [LexicalArm()])
        run_state_machine_as_test(VisibilityMachine, settings=settings(
            max_examples=12, stateful_step_count=25, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


# ------------------------------------------------------------------ the semantic arm


class SemanticVisibilityMachine(VisibilityMachine):
    """The search issue's visibility machine, every search also checked arm by arm: the semantic
    arm's own candidates — from the exact pass and from the HNSW index with iterative scans — are
    all admissible, and it withholds nothing admissible (every document matches it somewhat)."""

    semantic: Semantic  # the service and the parts it was handed (`SemanticParts`), the arm among them

    @rule(tenant=st.sampled_from(TENANTS), principal=st.sampled_from(PRINCIPALS),
          scope=st.sampled_from([None, *PROJECTS]), ceiling=st.sampled_from(list(Sensitivity)),
          words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
    def search(self, tenant: str, principal: str, scope: str | None, ceiling: Sensitivity, words: list[str]) -> None:
        super().search(tenant, principal, scope, ceiling, words)
        query = KnowledgeQuery(tenant_id=self.tenant(tenant), principal_id=principal, current_scope=scope,
                               text=" ".join(words), sensitivity_ceiling=ceiling)
        _, sem = arms(self.semantic)
        self.portal.call(functools.partial(self.svc.wait_embedded, tenant_id=self.tenant(tenant)))
        visible = {d for d, f in self.docs.items() if admits(f, self.tenant(tenant), principal, scope, ceiling)}
        for exact_max in (10**9, 0):  # the exact pass, then the HNSW index
            sem.exact_max_windows = exact_max
            found = self.portal.call(sem.search, self.db, query, 50)
            for c in found:
                facts = self.docs.get(c.document_id)
                assert facts is not None, "a semantic candidate from a document this run never ingested"
                assert admits(facts, self.tenant(tenant), principal, scope, ceiling), (facts, principal, scope)
            assert {c.document_id for c in found} == visible or len(found) == 50


@pytest.mark.skipif(not available(), reason="the semantic extra is not installed")
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gate_visibility_isolation_semantic_arm(database_dsn: str, backend: str) -> None:
    with start_blocking_portal(backend) as portal, portal.wrap_async_context_manager(
            semantic_service(database_dsn)) as made:
        share(SemanticVisibilityMachine, portal, made.svc, made.db, list(arms(made)))
        SemanticVisibilityMachine.semantic = made
        run_state_machine_as_test(SemanticVisibilityMachine, settings=settings(
            max_examples=5, stateful_step_count=20, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
