"""Search latency and throughput: `knowledge.search` and its lexical arm beside bare PostgreSQL full-text SQL.

    .venv/bin/python scripts/bench_search.py [--sizes 10000,100000] [--concurrency 8] [--loop trio|asyncio]
                                             [--queries 300] [--explain]

Builds the corpus once through the real path (SciFact's 5,183 abstracts ingested by
`KnowledgeService.ingest` into a source tenant), stages those rows, removes the source tenant, then
replicates the staged rows in SQL into 10 tenants until each holds size/10 chunks: new document,
artifact and chunk ids (`knowledge.core.chunking.chunk_id` over the new identity) and consistent rows in
artifacts, knowledge_documents, knowledge_chunk_sets, knowledge_chunks, knowledge_chunk_index,
knowledge_postings and knowledge_tenant_stats, so a replicated chunk is found exactly like an
ingested one (checked). Each size grows the same database; then GIN index on the tsvectors (for the
baselines only; the schema has none) and VACUUM ANALYZE.

For SciFact's test queries (query i against tenant i mod 10) it measures `knowledge.search` end to end
(default: 3 passages, 3000 tokens), the arm alone (`searcher.candidates`, 50 candidates), and the bare
SQL baselines — ts_rank (normalization 1) over an OR tsquery of the query's lexemes with the tenant
predicate, and websearch_to_tsquery (AND) + ts_rank, both LIMIT 50 with the chunk text, via the GIN
index: median and p99 sequentially after a warm-up, and queries/s with N concurrent tasks (each on its
own pooled connection). Every query is searched once before any of that (so each method meets the
same cache, not the first one measured every query's first reads), the ranker's cache of text
features emptied before each; those first searches are the last row (no qps). Prints a table with
ratios; asserts nothing about time. ``--explain`` prints EXPLAIN (ANALYZE, BUFFERS) of the arm's
statements and of the OR baseline for the median and the slowest query of the arm at each size.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio
from retrieval_data import (
    BASELINE_SQL,
    GIN_SQL,
    ingest_sources,
    load_scifact,
    median_ms,
    own_db,
    own_searcher,
    p99_ms,
    print_run,
    scifact_sources,
    searching_with,
)

from knowledge.config import Settings
from knowledge.core import ranking
from knowledge.core.chunking import chunk_id
from knowledge.core.ranking import DEFAULT_POLICY, KNOWLEDGE_V1
from knowledge.models import KnowledgeQuery
from knowledge.retrieval.search import LexicalArm, Searcher
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.supervisors.embedded_pg import throwaway_data_dir

SOURCE_TENANT = "bench-source"
PRINCIPAL = "bench"
WARMUP = 30

_STAGE_SQL = """
CREATE TABLE bench_src_docs AS
    SELECT d.*, row_number() OVER (ORDER BY d.document_id) AS ord FROM knowledge_documents d WHERE d.tenant_id = '{t}';
CREATE TABLE bench_src_artifacts AS
    SELECT a.* FROM artifacts a JOIN knowledge_documents d
        ON d.tenant_id = a.tenant_id AND d.source_artifact_id = a.artifact_id WHERE d.tenant_id = '{t}';
CREATE TABLE bench_src_chunk_sets AS SELECT * FROM knowledge_chunk_sets WHERE tenant_id = '{t}';
CREATE TABLE bench_src_chunks AS SELECT * FROM knowledge_chunks WHERE tenant_id = '{t}';
CREATE TABLE bench_src_index AS SELECT * FROM knowledge_chunk_index WHERE tenant_id = '{t}';
CREATE TABLE bench_src_postings AS SELECT * FROM knowledge_postings WHERE tenant_id = '{t}';
CREATE UNIQUE INDEX ON bench_src_docs (document_id);
CREATE UNIQUE INDEX ON bench_src_artifacts (artifact_id);
CREATE UNIQUE INDEX ON bench_src_chunks (chunk_id);
CREATE UNIQUE INDEX ON bench_src_index (chunk_id);
CREATE INDEX ON bench_src_postings (chunk_id);
CREATE INDEX ON bench_src_chunk_sets (document_id);
ANALYZE bench_src_docs, bench_src_artifacts, bench_src_chunk_sets, bench_src_chunks, bench_src_index,
    bench_src_postings;
-- The source tenant goes: the measured database holds the 10 tenants only. Documents, chunk sets,
-- chunks and index rows cascade from the artifacts; postings and counters have no foreign key.
DELETE FROM knowledge_postings WHERE tenant_id = '{t}';
DELETE FROM artifacts WHERE tenant_id = '{t}';
DELETE FROM knowledge_tenant_stats WHERE tenant_id = '{t}';
DELETE FROM knowledge_term_stats WHERE tenant_id = '{t}';
DELETE FROM knowledge_events WHERE tenant_id = '{t}';
DELETE FROM knowledge_ingest_outcomes WHERE tenant_id = '{t}';
CREATE UNLOGGED TABLE bench_doc_map (tenant_id text, src_document_id uuid, document_id uuid, artifact_id uuid);
CREATE UNLOGGED TABLE bench_chunk_map (tenant_id text, src_chunk_id text, chunk_id text, document_id uuid);
"""

# One replication batch: the rows named by bench_doc_map / bench_chunk_map, copied with their new ids.
_REPLICATE_SQL = [
    """INSERT INTO artifacts (tenant_id, artifact_id, origin, trust, sha256, size_bytes, media_type, file_name,
                              content, created_at, expires_at)
       SELECT m.tenant_id, m.artifact_id, a.origin, a.trust, a.sha256, a.size_bytes, a.media_type, a.file_name,
              a.content, clock_timestamp(), NULL
       FROM bench_doc_map m JOIN bench_src_docs d ON d.document_id = m.src_document_id
       JOIN bench_src_artifacts a ON a.artifact_id = d.source_artifact_id""",
    """INSERT INTO knowledge_documents (tenant_id, document_id, version, ingested_by_principal_id, visibility,
           project_scope, title, source_artifact_id, media_type, doc_date, authority, chunker_version, superseded_by,
           ingested_at, valid_from, valid_to, sensitivity)
       SELECT m.tenant_id, m.document_id, d.version, d.ingested_by_principal_id, d.visibility, d.project_scope,
              d.title, m.artifact_id, d.media_type, d.doc_date, d.authority, d.chunker_version, d.superseded_by,
              d.ingested_at, d.valid_from, d.valid_to, d.sensitivity
       FROM bench_doc_map m JOIN bench_src_docs d ON d.document_id = m.src_document_id""",
    """INSERT INTO knowledge_chunk_sets (tenant_id, document_id, version, chunker_version, chunk_count, created_at)
       SELECT m.tenant_id, m.document_id, s.version, s.chunker_version, s.chunk_count, s.created_at
       FROM bench_doc_map m JOIN bench_src_chunk_sets s ON s.document_id = m.src_document_id""",
    """INSERT INTO knowledge_chunks (tenant_id, chunk_id, document_id, version, chunker_version, ordinal,
           heading_path, text, tokens, contains_instruction_like_text, content_sha256)
       SELECT m.tenant_id, m.chunk_id, m.document_id, c.version, c.chunker_version, c.ordinal, c.heading_path,
              c.text, c.tokens, c.contains_instruction_like_text, c.content_sha256
       FROM bench_chunk_map m JOIN bench_src_chunks c ON c.chunk_id = m.src_chunk_id""",
    """INSERT INTO knowledge_chunk_index (tenant_id, chunk_id, document_id, version, chunker_version, tsv, dl)
       SELECT m.tenant_id, m.chunk_id, m.document_id, i.version, i.chunker_version, i.tsv, i.dl
       FROM bench_chunk_map m JOIN bench_src_index i ON i.chunk_id = m.src_chunk_id""",
    """INSERT INTO knowledge_postings (tenant_id, term, chunk_id, tf, dl, impact)
       SELECT m.tenant_id, p.term, m.chunk_id, p.tf, p.dl, p.impact
       FROM bench_chunk_map m JOIN bench_src_postings p ON p.chunk_id = m.src_chunk_id""",
    """INSERT INTO knowledge_term_stats (tenant_id, term, shard, df)
       SELECT m.tenant_id, p.term, 0, count(*)
       FROM bench_chunk_map m JOIN bench_src_postings p ON p.chunk_id = m.src_chunk_id GROUP BY m.tenant_id, p.term
       ON CONFLICT (tenant_id, term, shard) DO UPDATE SET df = knowledge_term_stats.df + excluded.df""",
    """INSERT INTO knowledge_tenant_stats (tenant_id, shard, chunks, total_dl)
       SELECT m.tenant_id, 0, count(*), coalesce(sum(i.dl), 0)
       FROM bench_chunk_map m JOIN bench_src_index i ON i.chunk_id = m.src_chunk_id GROUP BY m.tenant_id
       ON CONFLICT (tenant_id, shard) DO UPDATE
       SET chunks = knowledge_tenant_stats.chunks + excluded.chunks,
           total_dl = knowledge_tenant_stats.total_dl + excluded.total_dl""",
]


@dataclass
class SourceDoc:
    document_id: uuid.UUID
    version: int
    chunks: list[tuple[str, int, str, str]]  # (src chunk_id, ordinal, content_sha256, chunker_version)


class Replicator:
    """Grows every tenant to a chunk count by copying the staged documents cyclically, each tenant
    starting at its own offset so tenants differ at the small size."""

    def __init__(self, docs: list[SourceDoc], tenants: list[str]) -> None:
        self.docs = docs
        self.tenants = tenants
        self.cursor = {t: i * len(docs) // len(tenants) for i, t in enumerate(tenants)}
        self.count = dict.fromkeys(tenants, 0)

    def plan(self, per_tenant: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        doc_rows: list[tuple[Any, ...]] = []
        chunk_rows: list[tuple[Any, ...]] = []
        for tenant in self.tenants:
            while self.count[tenant] < per_tenant:
                src = self.docs[self.cursor[tenant] % len(self.docs)]
                self.cursor[tenant] += 1
                new_doc = uuid.uuid4()
                doc_rows.append((tenant, src.document_id, new_doc, uuid.uuid4()))
                for src_chunk, ordinal, sha, chunker_version in src.chunks:
                    new_id = chunk_id(tenant, new_doc, src.version, chunker_version, ordinal, sha)
                    chunk_rows.append((tenant, src_chunk, new_id, new_doc))
                self.count[tenant] += len(src.chunks)
        return doc_rows, chunk_rows


async def stage(db: Database) -> list[SourceDoc]:
    await db.execute(_STAGE_SQL.format(t=SOURCE_TENANT))
    rows = await db.fetch("""
        SELECT d.document_id, d.version,
               array_agg(c.chunk_id ORDER BY c.ordinal) AS ids, array_agg(c.ordinal ORDER BY c.ordinal) AS ords,
               array_agg(c.content_sha256 ORDER BY c.ordinal) AS shas,
               array_agg(c.chunker_version ORDER BY c.ordinal) AS cvs
        FROM bench_src_docs d JOIN bench_src_chunks c ON c.document_id = d.document_id
        GROUP BY d.document_id, d.version, d.ord ORDER BY d.ord""")
    return [SourceDoc(r["document_id"], r["version"], list(zip(r["ids"], r["ords"], r["shas"], r["cvs"], strict=True)))
            for r in rows]


async def grow(db: Database, rep: Replicator, total: int) -> float:
    began = time.perf_counter()
    await db.execute("DROP INDEX IF EXISTS bench_tsv_gin")  # rebuilt after the load, faster than maintained
    doc_rows, chunk_rows = rep.plan(total // len(rep.tenants))
    if doc_rows:
        async with db.transaction() as tx:
            await tx.execute("TRUNCATE bench_doc_map, bench_chunk_map")
            await tx.copy_records("bench_doc_map", doc_rows,
                                  columns=("tenant_id", "src_document_id", "document_id", "artifact_id"))
            await tx.copy_records("bench_chunk_map", chunk_rows,
                                  columns=("tenant_id", "src_chunk_id", "chunk_id", "document_id"))
            await tx.execute("ANALYZE bench_doc_map; ANALYZE bench_chunk_map")
            await tx.execute("SET LOCAL enable_nestloop = off")  # bulk joins: hash them
            for sql in _REPLICATE_SQL:
                await tx.execute(sql)
                # Each table analyzed as it fills (ANALYZE counts this transaction's rows): a foreign key's
                # check on the next table plans with these statistics, and a table last analyzed empty
                # (autovacuum after the source tenant left) made every check a sequential scan — a
                # 1M-chunk build then stalled for over half an hour in one INSERT.
                target = re.search(r"INSERT INTO (\w+)", sql)
                assert target is not None
                await tx.execute(f"ANALYZE {target[1]}")
    await db.execute(GIN_SQL)
    await db.execute("VACUUM ANALYZE")
    return time.perf_counter() - began


async def check(searcher: Searcher) -> list[str]:
    """Counters agree with the rows, and replicated chunks are found by the arm by their own words."""
    rows = await searcher.db.fetch("""
        SELECT t.tenant_id, t.chunks, t.total_dl, i.n, i.dl, p.n AS postings
        FROM (SELECT tenant_id, sum(chunks) AS chunks, sum(total_dl) AS total_dl
              FROM knowledge_tenant_stats GROUP BY tenant_id) t
        JOIN (SELECT tenant_id, count(*) AS n, sum(dl) AS dl FROM knowledge_chunk_index GROUP BY tenant_id) i
            USING (tenant_id)
        JOIN (SELECT tenant_id, count(*) AS n FROM knowledge_postings GROUP BY tenant_id) p USING (tenant_id)
        ORDER BY tenant_id""")
    bad = [r["tenant_id"] for r in rows if r["chunks"] != r["n"] or r["total_dl"] != r["dl"]]
    sample = await searcher.db.fetch("""
        SELECT tenant_id, chunk_id, text FROM knowledge_chunks TABLESAMPLE BERNOULLI (5) REPEATABLE (7) LIMIT 20""")
    found = 0
    for r in sample:
        words = " ".join(r["text"].split()[:30])
        cands = await searcher.candidates(KnowledgeQuery(tenant_id=r["tenant_id"], principal_id=PRINCIPAL, text=words))
        found += any(c.chunk_id == r["chunk_id"] for c in cands)
    chunks = sum(r["n"] for r in rows)
    postings = sum(r["postings"] for r in rows)
    return [f"tenants {len(rows)}, chunks {chunks} ({min(r['n'] for r in rows)}..{max(r['n'] for r in rows)} "
            f"per tenant), postings {postings}; counters disagree for {bad or 'none'}; a replicated chunk's "
            f"first 30 words find it among the arm's candidates: {found}/{len(sample)}"]


@dataclass
class Result:
    name: str
    seconds: list[float]
    qps: float


async def measure(name: str, texts: Sequence[tuple[str, str]], run: Callable[[str, str], Awaitable[Any]],
                  concurrency: int) -> Result:
    for tenant, text in texts[:WARMUP]:
        await run(tenant, text)
    seconds = []
    for tenant, text in texts:
        began = time.perf_counter()
        await run(tenant, text)
        seconds.append(time.perf_counter() - began)
    pending = list(reversed(texts)) * 2

    async def worker() -> None:
        while pending:
            tenant, text = pending.pop()
            await run(tenant, text)

    n = len(pending)
    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return Result(name, seconds, n / (time.perf_counter() - began))


async def bench(svc: KnowledgeService, own: Searcher, lexical: Searcher, texts: Sequence[tuple[str, str]],
                concurrency: int) -> list[Result]:
    """``own``: a searcher built as the service's (its parts are private), for the same search under
    another policy; ``lexical``: the lexical arm alone, over the same pool."""
    limit = lexical.arm_limit

    def q(tenant: str, text: str) -> KnowledgeQuery:
        return KnowledgeQuery(tenant_id=tenant, principal_id=PRINCIPAL, text=text)

    async def search(tenant: str, text: str) -> Any:
        return await svc.search(q(tenant, text))

    async def search_own(tenant: str, text: str) -> Any:
        return await own.search(q(tenant, text))

    async def arm(tenant: str, text: str) -> Any:
        return await lexical.candidates(q(tenant, text))

    async def arm_exhaustive(tenant: str, text: str) -> Any:
        return await exhaustive.candidates(q(tenant, text))

    depth = lexical.arms[0].depth  # type: ignore[attr-defined]
    exhaustive = replace(lexical, arms=[LexicalArm(depth=None)])
    # Each query searched once first, so the rows below compare methods on the same cache (the first
    # row measured would otherwise pay every query's first reads); those first searches are a row too.
    first = []
    for tenant, text in texts:
        # and nothing of it ranked before: the ranker's text features are cached by content, and the
        # replicated corpus repeats SciFact's texts (a corpus of distinct chunks would rarely hit)
        ranking._FEATURES.clear()
        began = time.perf_counter()
        await search(tenant, text)
        first.append(time.perf_counter() - began)
    results = [await measure(f"knowledge.search (end to end, 3 passages, {DEFAULT_POLICY.name})", texts, search,
                             concurrency)]
    with searching_with(own, policy=KNOWLEDGE_V1):  # the same search without the relevance model: what it costs
        results.append(await measure(f"knowledge.search, {KNOWLEDGE_V1.name} (RRF, no relevance model)", texts,
                                     search_own, concurrency))
    results.append(await measure(f"lexical arm alone (candidates, {limit}, depth {depth})", texts, arm, concurrency))
    # The exhaustive rows last but the baselines: they read every posting of the query's terms, which
    # pushes the others' pages out of the caches (at 1M the arm alone measured after them: 14.7 ms).
    with searching_with(own, arms=[LexicalArm(depth=None), *own.arms[1:]]):  # the arm before issue 36
        results.append(await measure("knowledge.search, exhaustive lexical arm", texts, search_own, concurrency))
    results.append(await measure(f"lexical arm alone, exhaustive (candidates, {limit})", texts, arm_exhaustive,
                                 concurrency))
    for name, sql in BASELINE_SQL.items():
        async def baseline(tenant: str, text: str, sql: str = sql) -> Any:
            async with lexical.db.connection() as conn:
                return await conn.fetch(sql, tenant, text, limit)

        results.append(await measure(f"SQL {name} + GIN, top {limit}", texts, baseline, concurrency))
    return [*results, Result("knowledge.search, each query's first time", first, float("nan"))]


class _Recorder:
    """A pooled connection that records the statements run through it (for EXPLAIN)."""

    def __init__(self, conn: Any, calls: list[tuple[str, tuple[Any, ...]]]) -> None:
        self._conn, self._calls = conn, calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def fetch(self, sql: str, *args: Any) -> Any:
        self._calls.append((sql, args))
        return await self._conn.fetch(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        self._calls.append((sql, args))
        return await self._conn.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        self._calls.append((sql, args))
        return await self._conn.fetchval(sql, *args)


async def explain(lexical: Searcher, tenant: str, text: str) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of every statement the arm runs for one query (recorded from a real
    `searcher.candidates` call, so the parameters are the arm's own) and of the OR baseline. ``lexical``:
    the lexical arm alone over the script's own pool, whose connections are recorded for the call."""
    calls: list[tuple[str, tuple[Any, ...]]] = []
    db = lexical.db
    original = db.connection

    @contextlib.asynccontextmanager
    async def recording() -> AsyncIterator[Any]:
        async with original() as conn:
            yield _Recorder(conn, calls)

    db.connection = recording  # type: ignore[method-assign]
    try:
        await lexical.candidates(KnowledgeQuery(tenant_id=tenant, principal_id=PRINCIPAL, text=text))
    finally:
        del db.connection
    out = [f"--- EXPLAIN, tenant {tenant}, query {text!r}"]
    statements = [*((f"arm statement {i}", sql, args) for i, (sql, args) in enumerate(calls, start=1)),
                  ("baseline ts_rank OR", BASELINE_SQL["ts_rank OR"], (tenant, text, lexical.arm_limit))]
    async with db.connection() as conn:
        for label, sql, args in statements:
            shown = [a if not isinstance(a, list) or len(a) < 30 else f"[{len(a)} items]" for a in args]
            plan = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", *args)
            out += [f"{label}: parameters {shown}", *(r[0] for r in plan)]
    return out


def table(results: list[Result]) -> list[str]:
    search, arm = results[0], results[2]
    lines = [f"{'method':<44} {'median ms':>9} {'p99 ms':>8} {'qps':>7} {'med÷search':>10} {'med÷arm':>8} "
             f"{'qps÷search':>10} {'qps÷arm':>8}"]
    for r in results:
        lines.append(f"{r.name:<44} {median_ms(r.seconds):>9.2f} {p99_ms(r.seconds):>8.2f} {r.qps:>7.1f} "
                     f"{median_ms(r.seconds) / median_ms(search.seconds):>10.2f} "
                     f"{median_ms(r.seconds) / median_ms(arm.seconds):>8.2f} {r.qps / search.qps:>10.2f} "
                     f"{r.qps / arm.qps:>8.2f}")
    lines.append("med÷X: this row's median latency / X's (baseline ÷ ours: above 1, ours is faster); "
                 "qps÷X: this row's throughput / X's")
    return lines


async def run(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    with throwaway_data_dir("knowledge-bench-search-") as data_dir:
        settings = Settings(data_dir=data_dir, sweep_interval_seconds=None, pool_max_size=args.concurrency + 2)
        async with KnowledgeService.open(settings) as svc, \
                own_db(svc, "knowledge-bench-search", max_size=args.concurrency + 2) as db:
            scifact = load_scifact()
            began = time.perf_counter()
            doc_keys, refused = await ingest_sources(svc, SOURCE_TENANT, scifact_sources(scifact))
            source_chunks = await db.fetchval(
                "SELECT count(*) FROM knowledge_chunks WHERE tenant_id = $1", SOURCE_TENANT)
            out.append(f"source: SciFact {len(doc_keys)} documents, {source_chunks} chunks through knowledge.ingest "
                       f"in {time.perf_counter() - began:.1f}s (refused {refused or 0}); loop={db.backend}, "
                       f"{args.concurrency} concurrent tasks")
            tenants = [f"bench-t{i}" for i in range(args.tenants)]
            rep = Replicator(await stage(db), tenants)
            rng = random.Random(0)
            queries = list(scifact.queries.values())
            rng.shuffle(queries)
            texts = [(tenants[i % len(tenants)], text) for i, text in enumerate(queries[:args.queries])]
            # The service's parts are private: the searcher's other policy and the lexical arm alone are
            # searchers of the script's own over its own pool (as large as the service's).
            async with own_searcher(svc, db) as own:
                lexical = Searcher(db, [LexicalArm()], arm_limit=own.arm_limit, policy=own.policy)
                for size in args.sizes:
                    seconds = await grow(db, rep, size)
                    out += ["", f"== {size} chunks over {len(tenants)} tenants (replicated + GIN + VACUUM ANALYZE "
                                f"in {seconds:.1f}s)", *await check(lexical)]
                    results = await bench(svc, own, lexical, texts, args.concurrency)
                    out += [f"{len(texts)} SciFact test queries, sequential (median, p99) after {WARMUP} warm-up, "
                            f"then {2 * len(texts)} at {args.concurrency} concurrent (qps)", *table(results)]
                    if args.explain:
                        arm = results[2]
                        mid = sorted(range(len(texts)), key=lambda i: arm.seconds[i])[len(texts) // 2]
                        slow = max(range(len(texts)), key=lambda i: arm.seconds[i])
                        for i in (mid, slow):
                            out += await explain(lexical, *texts[i])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000",
                        type=lambda s: sorted(int(x) for x in s.split(",") if x.strip()))
    parser.add_argument("--tenants", type=int, default=10, help="the tenants the chunks are spread over")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    parser.add_argument("--explain", action="store_true")
    print_run(run, parser.parse_args())


if __name__ == "__main__":
    main()
