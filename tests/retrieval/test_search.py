"""knowledge.search: ranking, relevance and evidence. The search gates — visibility isolation (the visibility
state machine), passage verbatim, citation resolves and corpus retrieval — are in `tests/gates/`."""

from __future__ import annotations

import uuid
from datetime import date

import pytest

from knowledge.core.ranking import DEFAULT_POLICY
from knowledge.models import ArtifactOrigin, KnowledgeQuery, Principal, TrustLevel
from knowledge.retrieval.search import LexicalArm
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.store.evidence import lexical_evidence


def writer(tenant: str, principal_id: str) -> Principal:
    return Principal(tenant_id=tenant, principal_id=principal_id, scopes=frozenset({"knowledge.write"}))


async def ingest_text(svc: KnowledgeService, tenant: str, principal_id: str, text: str, *, title: str = "Doc",
                      visibility: str = "tenant", project: str | None = None, sensitivity: str = "internal",
                      doc_date: date | None = None, authority: str = "principal_supplied") -> uuid.UUID:
    ref = await svc.put_artifact(tenant, text.encode(), media_type="text/markdown", origin=ArtifactOrigin.UPLOAD,
                                  trust=TrustLevel.USER)
    doc = await svc.ingest(ref, title, visibility, writer(tenant, principal_id), origin_trust=TrustLevel.USER,
                           project_scope=project, sensitivity=sensitivity, doc_date=doc_date, authority=authority)
    return doc.document_id


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
                                                                               sql: Database, tenant: str) -> None:
    """The relevance model's evidence takes the query's idf and mean length from the lexical arm's
    own statement instead of counting the postings again: what it reads must be what a fresh
    count gives, for lexemes held by many chunks, by one, and by none."""
    await ingest_text(service, tenant, "alice", GUIDE)
    await ingest_text(service, tenant, "alice", "# Notes\n\nA release is tagged weekly by the release manager.\n")
    arm = LexicalArm()
    for text in ["how do I roll back a release tag", "release pelican", "weekly"]:
        query = KnowledgeQuery(tenant_id=tenant, principal_id="alice", text=text)
        result = await arm.search_result(sql, query, 50)
        assert result.terms is not None and result.candidates
        ids = [c.chunk_id for c in result.candidates]
        reused = await lexical_evidence(sql, tenant, text, ids, result.terms)
        fresh = await lexical_evidence(sql, tenant, text, ids)
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
