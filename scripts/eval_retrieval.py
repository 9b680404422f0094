"""Retrieval quality: the lexical arm and `knowledge.search` beside bm25s and plain PostgreSQL ts_rank.

    .venv/bin/python scripts/eval_retrieval.py [--skip-scifact] [--skip-docs] [--loop trio|asyncio]

Opens the service on a throwaway embedded PostgreSQL and ingests, through `KnowledgeService.ingest`:

- SciFact (BEIR, test split: 300 claims, 5,183 abstracts): each abstract one text/plain document titled
  by its SciFact title (so the title is the heading path and indexed too). nDCG@10, recall@10 and
  recall@3 by document (a document at the rank of its first chunk) for the arm (`searcher.candidates`,
  before ranking and selection), for `knowledge.search` (10 passages, one per document), for bm25s
  (method lucene, PyStemmer English, English stopwords; k1=1.2 b=0.75 as the arm, and bm25s's default
  k1=1.5), for ts_rank (normalization 1) over an OR tsquery of the query's lexemes, and for ts_rank over
  websearch_to_tsquery (AND). The bm25s rows index whole abstracts (title + text), the others chunks.
- docs-dev (68 hand-labelled questions over docs-argocd and docs-etcd, 8 unanswerable): every Markdown
  file, titled by its path under the corpus folder. A passage answers when it contains one of the
  question's answer quotes (whitespace-normalized). Recall@3/@10 over the answerable questions, split
  plain/paraphrased; noise@3 = retrieved-and-not-answering / retrieved over all questions, for the final
  `knowledge.search` output (default 3 passages / 3000 tokens) and every baseline at k=3. bm25s here
  indexes the very chunks (heading path + text, from knowledge_chunks).

Latency is the median over the queries, sequential, after a warm-up (bm25s: in process, no I/O).
The baselines use a GIN index on knowledge_chunk_index.tsv created here (the schema has none).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from retrieval_data import (
    BASELINE_SQL,
    GIN_SQL,
    Bm25s,
    SciFact,
    add_semantic_option,
    answers,
    docs_sources,
    first_occurrences,
    ingest_sources,
    load_docs_dev,
    load_scifact,
    median_ms,
    ndcg_at_k,
    own_db,
    own_searcher,
    print_run,
    recall_at_k,
    scifact_sources,
    timed,
)
from retrieval_goals import Pairs, configs, docs_goals, limit_curve, scifact_goals

from knowledge.config import Settings
from knowledge.core.ranking import DEFAULT_POLICY
from knowledge.models import KnowledgeQuery
from knowledge.retrieval.search import BM25_B, BM25_K1, Searcher
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.supervisors.embedded_pg import throwaway_data_dir

SCIFACT_TENANT = "eval-scifact"
DOCS_TENANT = "eval-docs"
PRINCIPAL = "eval"
WARMUP = 10
#: How many chunks a SQL baseline fetches before they are folded into documents (the arm's own limit).
SQL_CHUNKS = 50


@dataclass
class Corpus:
    tenant: str
    doc_keys: dict[UUID, str]
    refused: dict[str, int]
    seconds: float
    chunks: int = 0
    megabytes: float = 0.0

    def throughput(self) -> str:
        return (f"ingest {self.seconds:.1f}s ({self.megabytes / self.seconds:.2f} MB/s, "
                f"{1000 * self.seconds / max(self.chunks, 1):.1f} ms/chunk)")


@dataclass
class Row:
    """One method's per-query results: ranked keys (documents or passage texts) and latencies."""

    name: str
    ranked: list[list[str]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    top10: bool = True  # False: returns fewer than 10 by construction (no @10 columns)


async def ingest_corpus(svc: KnowledgeService, db: Database, tenant: str, sources: Sequence[Any]) -> Corpus:
    began = time.perf_counter()
    doc_keys, refused = await ingest_sources(svc, tenant, sources)
    seconds = time.perf_counter() - began
    chunks = await db.fetchval("SELECT count(*) FROM knowledge_chunks WHERE tenant_id = $1", tenant)
    return Corpus(tenant, doc_keys, refused, seconds, int(chunks), sum(len(s.data) for s in sources) / 1e6)


def fused_label(svc: KnowledgeService) -> str:
    return ", fused" if len(svc.retrieval().arms) > 1 else ""


def arm_bm25(searcher: Searcher) -> tuple[float, float]:
    """The lexical arm's own k1 and b (the module defaults if the arm does not expose them)."""
    arm = searcher.arms[0]
    return float(getattr(arm, "k1", BM25_K1)), float(getattr(arm, "b", BM25_B))


def query(tenant: str, text: str, **kw: Any) -> KnowledgeQuery:
    return KnowledgeQuery(tenant_id=tenant, principal_id=PRINCIPAL, text=text, **kw)


async def sql_baseline(db: Database, sql: str, tenant: str, text: str, limit: int) -> list[Any]:
    async with db.connection() as conn:
        return await conn.fetch(sql, tenant, text, limit)


async def measure(row: Row, texts: Sequence[str], run: Callable[[str], Awaitable[list[str]]]) -> Row:
    """Warm up on the first queries, then run every query once, timed."""
    for text in texts[:WARMUP]:
        await run(text)
    for text in texts:
        ranked, seconds = await timed(lambda text=text: run(text))
        row.ranked.append(ranked)
        row.seconds.append(seconds)
    return row


def measure_sync(row: Row, texts: Sequence[str], run: Callable[[str], list[str]]) -> Row:
    for text in texts[:WARMUP]:
        run(text)
    for text in texts:
        began = time.perf_counter()
        ranked = run(text)
        row.seconds.append(time.perf_counter() - began)
        row.ranked.append(ranked)
    return row


# --------------------------------------------------------------------------- SciFact


async def eval_scifact(svc: KnowledgeService, searcher: Searcher, data: SciFact, corpus: Corpus) -> list[str]:
    tenant, keys = corpus.tenant, corpus.doc_keys
    qids = list(data.queries)
    texts = [data.queries[q] for q in qids]
    rows: list[Row] = []

    def arm_run(arm: Any) -> Callable[[str], Awaitable[list[str]]]:
        async def run(text: str) -> list[str]:
            cands = await arm.search(searcher.db, query(tenant, text), searcher.arm_limit)
            return first_occurrences(keys[c.document_id] for c in cands)
        return run

    async def search_default(text: str) -> list[str]:
        passages = await svc.search(query(tenant, text))
        return first_occurrences(keys[p.document_id] for p in passages)

    async def search_10(text: str) -> list[str]:
        passages = await svc.search(query(tenant, text, max_passages=10, max_per_document=1, budget_tokens=100_000))
        return first_occurrences(keys[p.document_id] for p in passages)

    for a in searcher.arms:
        rows.append(await measure(Row(f"ours: {a.name} arm (candidates, {searcher.arm_limit} chunks)"), texts,
                                  arm_run(a)))
    rows.append(await measure(Row(f"ours: knowledge.search, 10 passages 1/doc{fused_label(svc)}"), texts, search_10))
    rows.append(await measure(Row(f"ours: knowledge.search, default (3 passages){fused_label(svc)}", top10=False),
                              texts, search_default))

    bm_texts = [f"{d['title']} {d['text']}" for d in data.corpus]
    bm_ids = [d["_id"] for d in data.corpus]
    arm_k1, arm_b = arm_bm25(searcher)
    for k1 in dict.fromkeys((arm_k1, 1.5)):
        bm = Bm25s(bm_texts, k1=k1, b=arm_b)
        label = "as the arm" if k1 == arm_k1 else "bm25s default"
        rows.append(measure_sync(Row(f"bm25s lucene k1={k1} b={arm_b} ({label}), abstracts"), texts,
                                 lambda text, bm=bm: [bm_ids[i] for i in bm.top(text, 10)]))

    for name, sql in BASELINE_SQL.items():
        async def baseline(text: str, sql: str = sql) -> list[str]:
            found = await sql_baseline(searcher.db, sql, tenant, text, SQL_CHUNKS)
            return first_occurrences(keys[r["document_id"]] for r in found)

        rows.append(await measure(Row(f"PostgreSQL {name}, GIN"), texts, baseline))

    lines = [f"SciFact test: {len(qids)} queries, {len(data.corpus)} abstracts -> {len(keys)} documents, "
             f"{corpus.chunks} chunks (refused {corpus.refused or 0}); {corpus.throughput()}",
             f"{'method':<58} {'nDCG@10':>8} {'R@10':>6} {'R@3':>6} {'empty':>6} {'median ms':>10}"]
    for row in rows:
        rels = [data.qrels[q] for q in qids]
        ndcg = sum(ndcg_at_k(r, rel, 10) for r, rel in zip(row.ranked, rels, strict=True)) / len(qids)
        r10 = sum(recall_at_k(r, rel, 10) for r, rel in zip(row.ranked, rels, strict=True)) / len(qids)
        r3 = sum(recall_at_k(r, rel, 3) for r, rel in zip(row.ranked, rels, strict=True)) / len(qids)
        empty = sum(not r for r in row.ranked)
        shown_10 = row.top10
        lines.append(f"{row.name:<58} {f'{ndcg:.3f}' if shown_10 else '-':>8} {f'{r10:.3f}' if shown_10 else '-':>6} "
                     f"{r3:>6.3f} {empty:>6} {median_ms(row.seconds):>10.2f}")
    return lines


# --------------------------------------------------------------------------- docs-dev


async def eval_docs(svc: KnowledgeService, searcher: Searcher, corpus: Corpus) -> list[str]:
    tenant = corpus.tenant
    questions = load_docs_dev()
    texts = [q["question"] for q in questions]
    chunk_rows = await searcher.db.fetch(
        "SELECT chunk_id, heading_path, text FROM knowledge_chunks WHERE tenant_id = $1 ORDER BY chunk_id", tenant)
    rows: list[Row] = []

    def arm_run(arm: Any) -> Callable[[str], Awaitable[list[str]]]:
        async def run(text: str) -> list[str]:
            return [c.text for c in await arm.search(searcher.db, query(tenant, text), searcher.arm_limit)]
        return run

    async def search_default(text: str) -> list[str]:
        return [p.text for p in await svc.search(query(tenant, text))]

    async def search_10(text: str) -> list[str]:
        return [p.text for p in await svc.search(query(tenant, text, max_passages=10, budget_tokens=10_000))]

    for a in searcher.arms:
        rows.append(await measure(Row(f"ours: {a.name} arm (candidates, top of {searcher.arm_limit})"), texts,
                                  arm_run(a)))
    rows.append(await measure(Row(f"ours: knowledge.search, 10 passages / 10000 tokens{fused_label(svc)}"), texts,
                              search_10))
    rows.append(await measure(Row(f"ours: knowledge.search, default 3 / 3000{fused_label(svc)}", top10=False),
                              texts, search_default))

    bm_texts = [" ".join(r["heading_path"]) + "\n" + r["text"] for r in chunk_rows]
    arm_k1, arm_b = arm_bm25(searcher)
    for k1 in dict.fromkeys((arm_k1, 1.5)):
        bm = Bm25s(bm_texts, k1=k1, b=arm_b)
        label = "as the arm" if k1 == arm_k1 else "bm25s default"
        rows.append(measure_sync(Row(f"bm25s lucene k1={k1} b={arm_b} ({label}), same chunks"), texts,
                                 lambda text, bm=bm: [chunk_rows[i]["text"] for i in bm.top(text, 10)]))

    for name, sql in BASELINE_SQL.items():
        async def baseline(text: str, sql: str = sql) -> list[str]:
            return [r["text"] for r in await sql_baseline(searcher.db, sql, tenant, text, 10)]

        rows.append(await measure(Row(f"PostgreSQL {name}, GIN"), texts, baseline))

    answerable = [i for i, q in enumerate(questions) if not q["unanswerable"]]
    plain = [i for i in answerable if not questions[i]["paraphrase"]]
    para = [i for i in answerable if questions[i]["paraphrase"]]
    unanswerable = [i for i, q in enumerate(questions) if q["unanswerable"]]

    def hit(row: Row, i: int, k: int) -> bool:
        return any(answers(questions[i], t) for t in row.ranked[i][:k])

    def rate(row: Row, idx: list[int], k: int) -> str:
        return f"{sum(hit(row, i, k) for i in idx) / len(idx):.3f}" if idx else "-"

    lines = [f"docs-dev: {len(questions)} questions ({len(answerable)} answerable: {len(plain)} plain, "
             f"{len(para)} paraphrased; {len(unanswerable)} unanswerable); {len(corpus.doc_keys)} documents, "
             f"{corpus.chunks} chunks (refused {corpus.refused or 0}); {corpus.throughput()}",
             f"{'method':<58} {'R@3':>6} {'R@10':>6} {'R@3 pl':>6} {'R@3 pa':>6} {'R@10pl':>6} {'R@10pa':>6} "
             f"{'noise@3':>7} {'ret@3':>5} {'unans':>5} {'median ms':>9}"]
    for row in rows:
        retrieved = sum(min(len(r), 3) for r in row.ranked)
        irrelevant = sum(1 for i, r in enumerate(row.ranked) for t in r[:3] if not answers(questions[i], t))
        noise = f"{irrelevant / retrieved:.3f}" if retrieved else "-"
        unans = sum(bool(row.ranked[i]) for i in unanswerable)
        top10 = row.top10
        lines.append(
            f"{row.name:<58} {rate(row, answerable, 3):>6} {rate(row, answerable, 10) if top10 else '-':>6} "
            f"{rate(row, plain, 3):>6} {rate(row, para, 3):>6} {rate(row, plain, 10) if top10 else '-':>6} "
            f"{rate(row, para, 10) if top10 else '-':>6} {noise:>7} {retrieved:>5} {f'{unans}/{len(unanswerable)}':>5} "
            f"{median_ms(row.seconds):>9.2f}")
    lines.append("R@k: answerable questions with an answering passage in the top k (pl plain, pa paraphrased); "
                 "noise@3: top-3 passages that answer nothing / top-3 passages returned (ret@3), all questions; "
                 "unans: unanswerable questions that got any passage.")
    return lines


# --------------------------------------------------------------------------- main


async def run(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    with throwaway_data_dir("knowledge-eval-") as data_dir:
        settings = Settings(data_dir=data_dir, sweep_interval_seconds=None, pool_max_size=10,
                            semantic_arm=args.semantic)
        async with KnowledgeService.open(settings) as svc, own_db(svc, "knowledge-eval-retrieval") as db:
            scifact = None if args.skip_scifact else load_scifact()
            sci_corpus = docs_corpus = None
            if scifact is not None:
                sci_corpus = await ingest_corpus(svc, db, SCIFACT_TENANT, scifact_sources(scifact))
            if not args.skip_docs:
                docs_corpus = await ingest_corpus(svc, db, DOCS_TENANT, docs_sources())
            began = time.perf_counter()
            await db.execute(GIN_SQL)
            await db.execute("VACUUM ANALYZE")
            # The arms, the searcher's candidates and the configurations: a searcher of the script's own
            # over its own pool, built as the service's (whose parts are private).
            async with own_searcher(svc, db) as searcher:
                out.append(f"baseline GIN index + VACUUM ANALYZE: {time.perf_counter() - began:.1f}s; "
                           f"loop={db.backend}; arm BM25 k1, b = {arm_bm25(searcher)}")
                cfgs = configs(svc, DEFAULT_POLICY)
                pairs = {"docs-dev": Pairs(), "SciFact test": Pairs()}
                if scifact is not None and sci_corpus is not None:
                    if not args.goals_only:
                        out += ["", *await eval_scifact(svc, searcher, scifact, sci_corpus)]
                    out += ["", *await scifact_goals(searcher, SCIFACT_TENANT, scifact.queries, scifact.qrels,
                                                     sci_corpus.doc_keys, cfgs, pairs["SciFact test"])]
                if docs_corpus is not None:
                    if not args.goals_only:
                        out += ["", *await eval_docs(svc, searcher, docs_corpus)]
                    questions = load_docs_dev()
                    out += ["", *await docs_goals(searcher, DOCS_TENANT, questions, cfgs, pairs["docs-dev"])]
                    out += ["", *await limit_curve(searcher, DOCS_TENANT, questions, cfgs[-1])]
                for name, found in pairs.items():
                    out += found.table(f"\nreliability of the relevance ({cfgs[-1].name}), {name}: the passages "
                                       "of 10-passage searches, by bins")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-scifact", action="store_true")
    parser.add_argument("--skip-docs", action="store_true")
    parser.add_argument("--goals-only", action="store_true",
                        help="only the goal, reliability and curve tables (not the baselines)")
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    add_semantic_option(parser)
    print_run(run, parser.parse_args())


if __name__ == "__main__":
    main()
