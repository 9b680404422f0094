"""Hard gate "Corpus retrieval" (ADR-0033, Hard gates):

    Corpus retrieval — a labelled corpus of questions and their answering passages, with a floor on passage
    recall@3 and a ceiling on noise ratio. A corpus gate. M9.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from knowledge.config import Settings
from knowledge.errors import IngestRefused
from knowledge.models import KnowledgeQuery, TrustLevel
from knowledge.semantic.encoder import available as semantic_available
from knowledge.service import KnowledgeService
from tests.conftest import corpus_missing
from tests.helpers.progress import wait_embedded
from tests.retrieval.test_search import writer

QA = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "qa" / "docs-dev.jsonl"
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


@pytest.mark.slow
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
        ref = await service.put_artifact(tenant, data, media_type="text/markdown")
        with contextlib.suppress(IngestRefused):  # the one file holding a live-format credential
            await service.ingest(ref, str(path.relative_to(corpus)), "tenant", writer(tenant, "ops"),
                                 origin_trust=TrustLevel.USER)
    if "semantic" in service.retrieval().arms:  # as long as it takes while chunks keep being embedded
        await wait_embedded(service, tenant_id=tenant)
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
          f"{answerable_empty}, arms {service.retrieval().arms}")
    assert recall_at_3 >= RECALL_AT_3_FLOOR
    assert noise <= NOISE_CEILING
    assert answerable_empty <= ANSWERABLE_EMPTY_CEILING
