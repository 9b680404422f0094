"""Choose the impact-ordered lexical arm's depth (postings read per query term) and pool margin (chunks
rescored beyond the candidates asked for) on training data.

    .venv/bin/python scripts/fit_lexical_depth.py [--depths 25,50,100,200,400,800] [--margins 10,50]
                                                  [--loop trio|asyncio]

Ingests SciFact's 5,183 abstracts through `KnowledgeService.ingest` (one text/plain document each, as
`scripts/eval_retrieval.py` does) and asks SciFact's **train** queries (809 claims; the test queries
and docs-dev are the checks, never looked at here) of the lexical arm at each depth and margin, and of
the exhaustive arm (every posting). For each: nDCG@10 by document (a document at the rank of its first
chunk among the arm's 50 candidates), how many queries' top 10 chunks equal the exhaustive arm's, how
many of the exhaustive top 50 were found, and the median latency. The rule: the smallest depth whose
nDCG@10 is within 0.002 of the exhaustive arm's and whose top 10 equals it for at least 95% of the
queries, with the smallest margin that meets it there (a margin costs two index probes and an index
row per chunk; the depth, a posting per term). Prints the table and the choice; asserts nothing.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from retrieval_data import (
    first_occurrences,
    ingest_sources,
    load_scifact,
    median_ms,
    ndcg_at_k,
    print_run,
    scifact_sources,
)

from knowledge.config import Settings
from knowledge.core.relevance import BM25_B, BM25_K1
from knowledge.models import KnowledgeQuery
from knowledge.service import KnowledgeService
from knowledge.store.retrieval import lexical_hits
from knowledge.supervisors.embedded_pg import throwaway_data_dir

TENANT = "fit-depth"
LIMIT = 50  # the arm's candidates at the service's defaults (Settings.search_candidates)
NDCG_SLACK = 0.002
SAME_TOP10 = 0.95


async def run(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    train = load_scifact(split="train")
    with throwaway_data_dir("knowledge-fit-depth-") as data_dir:
        settings = Settings(data_dir=data_dir, sweep_interval_seconds=None, semantic_arm=False)
        async with KnowledgeService.open(settings) as svc:
            began = time.perf_counter()
            keys, refused = await ingest_sources(svc, TENANT, scifact_sources(train))
            out.append(f"SciFact: {len(keys)} documents ingested in {time.perf_counter() - began:.0f}s "
                       f"(refused {refused or 0}); {len(train.queries)} train queries")
            db = svc._db  # a measuring script reads through the service's own pool
            await db.execute("VACUUM ANALYZE")
            qids = list(train.queries)

            async def ask(depth: int | None, margin: int = 0) -> tuple[list[list[str]], list[float]]:
                ranked, seconds = [], []
                for qid in qids:
                    q = KnowledgeQuery(tenant_id=TENANT, principal_id="fit", text=train.queries[qid])
                    t0 = time.perf_counter()
                    found = await lexical_hits(db, query=q, k1=BM25_K1, b=BM25_B, limit=LIMIT, depth=depth,
                                               pool_margin=margin)
                    seconds.append(time.perf_counter() - t0)
                    ranked.append([h.candidate.chunk_id for h in found.hits])
                return ranked, seconds

            by_chunk = {r["chunk_id"]: keys[r["document_id"]] for r in await db.fetch(
                "SELECT chunk_id, document_id FROM knowledge_chunks WHERE tenant_id = $1", TENANT)}
            await ask(None)  # warm
            exact, exact_s = await ask(None)

            def ndcg(ranked: list[list[str]]) -> float:
                return sum(ndcg_at_k(first_occurrences(by_chunk[c] for c in r), train.qrels[q], 10)
                           for r, q in zip(ranked, qids, strict=True)) / len(qids)

            base = ndcg(exact)
            rows: list[tuple[str, float, float, float, float]] = [("all (exhaustive)", base, 1.0, 1.0,
                                                                   median_ms(exact_s))]
            chosen: tuple[int, int] | None = None
            for depth, margin in ((d, m) for d in args.depths for m in args.margins):
                ranked, seconds = await ask(depth, margin)
                score = ndcg(ranked)
                same10 = sum(r[:10] == e[:10] for r, e in zip(ranked, exact, strict=True)) / len(qids)
                found = sum(len(set(r) & set(e)) for r, e in zip(ranked, exact, strict=True)) / max(
                    sum(len(e) for e in exact), 1)
                rows.append((f"{depth} + {margin}", score, same10, found, median_ms(seconds)))
                if chosen is None and score >= base - NDCG_SLACK and same10 >= SAME_TOP10:
                    chosen = (depth, margin)
    out.append(f"{'depth + margin':<18} {'nDCG@10':>8} {'top10 same':>11} {'top50 found':>12} {'median ms':>10}")
    out += [f"{d:<18} {n:>8.4f} {s:>11.3f} {f:>12.3f} {ms:>10.2f}" for d, n, s, f, ms in rows]
    out.append(f"chosen (smallest depth, then margin, within {NDCG_SLACK} nDCG@10 and {SAME_TOP10:.0%} identical "
               f"top 10): {chosen}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depths", default="25,50,100,200,400,800",
                        type=lambda s: sorted(int(x) for x in s.split(",") if x.strip()))
    parser.add_argument("--margins", default="10,50",
                        type=lambda s: sorted(int(x) for x in s.split(",") if x.strip()))
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    args: Any = parser.parse_args()
    print_run(run, args)


if __name__ == "__main__":
    main()
