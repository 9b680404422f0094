"""The impact-ordered lexical arm (issue 36) against the exhaustive arm it replaced, and the stored
state it reads — postings' impacts and the per-term document frequencies — kept current by every
write: ingest, a new version, a re-chunk, a deletion, concurrent ingests.

The property runs over a real corpus (etcd's documentation, 96 files) with generated queries and
depths: a chunk's score is always its exact BM25 (the arm rescores what it read), the order is the
score's, the evidence is what a fresh read finds, and where every query term was read whole the
answer is the exhaustive arm's, chunk for chunk; elsewhere it has as many hits (the arm reads deeper
where what it read admitted too few).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge.core.chunking import PlainTextChunker
from knowledge.core.prepare import IngestRequest
from knowledge.core.relevance import BM25_B, BM25_K1
from knowledge.models import ArtifactOrigin, KnowledgeQuery, Principal, TrustLevel, Visibility
from knowledge.service import KnowledgeService
from knowledge.store import audit as store_audit
from knowledge.store.db import Database
from knowledge.store.evidence import lexical_evidence
from knowledge.store.impact import impact
from knowledge.store.retrieval import LexicalHits, lexical_hits
from tests.conftest import SHARED_CORPUS, corpus_missing
from tests.gates.strategies import running_service
from tests.gates.test_passage_verbatim import PROPERTY

ETCD = SHARED_CORPUS / "docs-etcd"


def writer(tenant: str, principal_id: str = "alice") -> Principal:
    return Principal(tenant_id=tenant, principal_id=principal_id, scopes=frozenset({"knowledge.write"}))


async def ingest(svc: KnowledgeService, tenant: str, texts: dict[str, str], *, principal_id: str = "alice",
                 visibility: Visibility = Visibility.TENANT) -> list:
    requests = []
    for title, text in texts.items():
        ref = await svc.put_artifact(tenant, text.encode(), media_type="text/markdown", origin=ArtifactOrigin.UPLOAD,
                                     trust=TrustLevel.USER, file_name=title)
        requests.append(IngestRequest(source=ref, title=title, visibility=visibility,
                                      principal=writer(tenant, principal_id), origin_trust=TrustLevel.USER))
    outcomes = await svc.ingest_many(requests)
    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    return outcomes


async def stored_state(db: Database, tenant: str) -> tuple[int, int]:
    """(terms whose counted document frequency differs from their postings, postings whose stored
    impact is not `impact` of their tf and length); both 0 when the state is current."""
    (recount,) = await store_audit.postings_recount(db, tenants=[tenant])
    rows = await db.fetch("SELECT tf, dl, impact FROM knowledge_postings WHERE tenant_id = $1", tenant)
    assert rows
    return recount.term_mismatches, sum(1 for r in rows if r["impact"] != impact(r["tf"], r["dl"]))


@pytest.mark.anyio
async def test_impacts_and_document_frequencies_follow_every_write(
        service: KnowledgeService, sql: Database, tenant: str) -> None:
    texts = {f"guide-{i}.md": f"# Guide {i}\n\n## Rollback\n\nRoll back the deploy {i} times, "
                              f"{'then wait for the health checks ' * (i + 1)}and verify.\n" for i in range(6)}
    docs = await ingest(service, tenant, texts)
    assert await stored_state(sql, tenant) == (0, 0)
    # concurrent ingests of documents sharing their terms: counters on shards, none lost, no deadlock
    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(ingest, service, tenant, {f"more-{n}-{i}.md": text for i, text in enumerate(texts.values())})
    assert await stored_state(sql, tenant) == (0, 0)
    first = docs[0].document_id
    ref = await service.put_artifact(tenant, b"# Guide 0\n\nA new version: rollback is automatic now.\n",
                                     media_type="text/markdown", origin=ArtifactOrigin.UPLOAD, trust=TrustLevel.USER)
    await service.ingest(ref, "guide-0.md", Visibility.TENANT, writer(tenant), origin_trust=TrustLevel.USER,
                         replaces=first)
    await service.rechunk(docs[1].document_id, PlainTextChunker(), writer(tenant))
    assert await stored_state(sql, tenant) == (0, 0)
    before = await sql.fetchval("SELECT sum(df) FROM knowledge_term_stats WHERE tenant_id = $1", tenant)
    await service.delete(first, writer(tenant))
    await service.delete(docs[1].document_id, writer(tenant))
    assert await stored_state(sql, tenant) == (0, 0)
    after = await sql.fetchval("SELECT sum(df) FROM knowledge_term_stats WHERE tenant_id = $1", tenant)
    assert after < before  # the deletions took their postings' counts along


def _vocabulary(texts: list[str], n: int) -> list[str]:
    """``n`` words of the corpus, from the most common to the rarest (a fixed draw)."""
    words = sorted({w.lower() for t in texts for w in re.findall(r"[A-Za-z][A-Za-z-]{2,}", t)})
    return random.Random(36).sample(words, n)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_the_impact_ordered_arm_scores_exactly_and_equals_the_exhaustive_arm_where_it_reads_whole(
        database_dsn: str, backend: str, tmp_path: Path) -> None:
    assert not corpus_missing(ETCD) or pytest.skip("../shared/corpus is absent")
    files = sorted(ETCD.rglob("*.md"))
    texts = [f.read_text(errors="replace") for f in files]
    vocabulary = _vocabulary(texts, 300)
    tenant = f"t-impact-{backend}"
    seen = {"whole": 0, "deep terms": 0}
    with running_service(database_dsn, backend) as (portal, svc):
        portal.call(ingest, svc, tenant, {str(f.relative_to(ETCD)): t for f, t in zip(files, texts, strict=True)})
        db = svc._db  # the service's own pool: the statements as the arm runs them

        async def check(words: list[str], depth: int, limit: int) -> None:
            query = KnowledgeQuery(tenant_id=tenant, principal_id="alice", text=" ".join(words))
            got: LexicalHits = await lexical_hits(db, query=query, k1=BM25_K1, b=BM25_B, limit=limit, depth=depth)
            every = await lexical_hits(db, query=query, k1=BM25_K1, b=BM25_B, limit=100_000, depth=None)
            exact = {h.candidate.chunk_id: h.score for h in every.hits}
            scores = [h.score for h in got.hits]
            assert scores == sorted(scores, reverse=True)
            for hit in got.hits:  # rescored exactly, whatever the depth
                assert hit.score == pytest.approx(exact[hit.candidate.chunk_id], rel=1e-12, abs=1e-12)
            dfs = await db.fetch("""SELECT coalesce(sum(df), 0) AS df FROM knowledge_term_stats
                                    WHERE tenant_id = $1 AND term IN (SELECT unnest(tsvector_to_array(
                                        to_tsvector('english', $2)))) GROUP BY term""", tenant, query.text)
            deepest = max((int(r["df"]) for r in dfs), default=0)
            if deepest <= depth:
                seen["whole"] += 1
                assert [h.candidate.chunk_id for h in got.hits] == [h.candidate.chunk_id for h in every.hits][:limit]
            else:
                seen["deep terms"] += 1
            assert len(got.hits) == min(limit, len(every.hits))  # never fewer than the exhaustive arm
            if got.hits:  # the evidence gathered in the same pass is a fresh read's
                ids = [h.candidate.chunk_id for h in got.hits]
                assert got.evidence is not None and every.evidence is not None
                assert got.evidence.idf == pytest.approx(every.evidence.idf)
                fresh = await lexical_evidence(db, tenant, query.text, ids)
                assert got.evidence.lengths == fresh.lengths
                assert {c: sorted(m, key=str) for c, m in got.evidence.matches.items()} == \
                    {c: sorted(m, key=str) for c, m in fresh.matches.items()}

        @settings(PROPERTY, max_examples=60)
        @given(words=st.lists(st.sampled_from(vocabulary), min_size=1, max_size=6),
               depth=st.sampled_from([1, 3, 10, 50, 400]), limit=st.integers(1, 40))
        def property_(words: list[str], depth: int, limit: int) -> None:
            portal.call(check, words, depth, limit)

        property_()
    assert seen["whole"] and seen["deep terms"], seen  # both regimes were drawn


@pytest.mark.anyio
async def test_a_principal_who_sees_little_and_a_term_held_by_history_get_every_hit_the_exhaustive_arm_has(
        service: KnowledgeService, sql: Database, tenant: str) -> None:
    """The strongest postings of a term can all be inadmissible — another principal's documents,
    superseded versions — and the arm then reads deeper: never fewer hits than the exhaustive arm."""
    strong = "# Rollback\n\nrollback rollback rollback canary canary canary.\n"
    await ingest(service, tenant, {f"alice-{i}.md": strong for i in range(24)}, visibility=Visibility.PRINCIPAL)
    weak = "# Notes {i}\n\n" + "Deploys are planned with care and reviewed by the on-call engineer. " * 8 + \
        "A rollback and a canary are mentioned once here.\n"
    await ingest(service, tenant, {f"bob-{i}.md": weak.format(i=i) for i in range(3)}, principal_id="bob",
                 visibility=Visibility.PRINCIPAL)
    # bob's one document whose many versions each held the term strongly; its live version does not
    (history,) = await ingest(service, tenant, {"bob-history.md": strong + "\nVersion first.\n"}, principal_id="bob",
                              visibility=Visibility.PRINCIPAL)
    for n in range(12):
        text = strong if n < 11 else weak.format(i="live") + "canary canary.\n"
        ref = await service.put_artifact(tenant, f"{text}\nVersion {n}.\n".encode(), media_type="text/markdown",
                                         origin=ArtifactOrigin.UPLOAD, trust=TrustLevel.USER)
        await service.ingest(ref, "bob-history.md", Visibility.PRINCIPAL, writer(tenant, "bob"),
                             origin_trust=TrustLevel.USER, replaces=history.document_id)
    for text in ("rollback", "canary", "rollback canary"):
        query = KnowledgeQuery(tenant_id=tenant, principal_id="bob", text=text)
        every = await lexical_hits(sql, query=query, k1=BM25_K1, b=BM25_B, limit=10, depth=None)
        assert len(every.hits) >= 3  # bob's notes (and the live version, for canary)
        for depth in (1, 2, 5):  # each far below the postings that are not bob's or not live
            got = await lexical_hits(sql, query=query, k1=BM25_K1, b=BM25_B, limit=10, depth=depth, pool_margin=0)
            assert [h.candidate.chunk_id for h in got.hits] == [h.candidate.chunk_id for h in every.hits], (text, depth)


def test_the_depth_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from knowledge.config import LEXICAL_DEPTH, Settings
    from knowledge.errors import ConfigurationError

    monkeypatch.delenv("KNOWLEDGE_LEXICAL_DEPTH", raising=False)
    assert Settings().lexical_depth == LEXICAL_DEPTH
    for value, depth in (("all", None), ("ALL", None), ("50", 50)):
        monkeypatch.setenv("KNOWLEDGE_LEXICAL_DEPTH", value)
        assert Settings().lexical_depth == depth
    with pytest.raises(ValidationError):
        Settings(lexical_depth=0)
    for bad in ("0", "-5", "deep", "4.5"):  # a typo is a typed refusal, not a bare ValueError
        monkeypatch.setenv("KNOWLEDGE_LEXICAL_DEPTH", bad)
        with pytest.raises(ConfigurationError):
            Settings()
