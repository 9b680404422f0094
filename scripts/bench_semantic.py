"""What the semantic arm costs, and whether filtered ANN keeps a small tenant's recall (issue 11).

    .venv/bin/python scripts/bench_semantic.py [--folder docs-argocd/operator-manual] [--copies 24]
                                               [--mid 5,10] [--loop trio|asyncio] [--search-only]

On a throwaway embedded PostgreSQL, every Markdown file of ``--folder`` (default: the Argo CD
operator manual, 157 files, 1.2 MB):

1. **Ingest**, 4 at a time through `KnowledgeService.ingest`: lexical-only into one tenant, then
   with the arm on into another (same bytes): time to searchable (ingest returned; the vectors
   are queued) and to fully embedded (the queue drained), beside the encoder alone in process on
   the very windows (the arm's floor: what embedding costs without a child, a database or an
   event loop). ``--folder . --ingest-only``: both docs corpora, this table only.
2. **Search**, the 68 docs-dev questions sequentially after a warm-up: `knowledge.search` lexical-only
   and fused, each under the shipped ranking and under ``knowledge-v1`` (no relevance model: what
   the model costs), each arm alone, and the bare ANN statement (tenant predicate only, query
   vector precomputed) as the SQL floor. p50 and p99. ``--search-only`` stops here. The arms alone,
   the query's embedding and the ``knowledge-v1`` rows run on a `Searcher` built as the service's
   own (`retrieval_data.own_searcher`, with an embedder child of its own: the service's parts are
   private), over a pool of the script's own.
3. **A small tenant in a large table**: the arm's tenant is copied in SQL (artifacts, documents,
   chunk sets, chunks, vectors; every key is tenant-scoped, so a copy is a tenant of its own) into
   ``--copies`` other tenants, the HNSW index rebuilt over all of them; then, for the small tenant
   and for larger ones (``--mid``: that many copies merged into one tenant), recall@50 of chunk
   lists against an exact pass over the same tenant (tie-robust, see `recall_rows`): the bare
   statement with HNSW's default scan and with iterative scans, and the arm (isolation joins and
   query embedding included) through each of its two paths. Byte-identical copies are the worst
   case for filtered HNSW: every window's nearest graph neighbours are its copies in other tenants.
Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from retrieval_data import CORPUS, load_docs_dev, median_ms, own_db, own_searcher, p99_ms, print_run, searching_with

from knowledge.config import Settings
from knowledge.core.prepare import prepare
from knowledge.core.ranking import KNOWLEDGE_V1
from knowledge.models import ArtifactOrigin, KnowledgeQuery, Principal, TrustLevel
from knowledge.retrieval.search import Searcher
from knowledge.semantic.arm import EF_SEARCH, MAX_SCAN_TUPLES, SemanticArm
from knowledge.semantic.encoder import DIM, Encoder
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.store.vectors import index_name, model_literal, scan_options_sql
from knowledge.supervisors.embedded_pg import throwaway_data_dir

LEXICAL, SEMANTIC = "bench-lexical", "bench-semantic"
WARMUP = 5
LIMIT = 50
OWN_POOL = "knowledge-bench-semantic"  # the application name of the script's own pool
#: The arm's HNSW scan options (iterative scans), for the bare statement.
SCAN_OPTIONS = scan_options_sql(EF_SEARCH, MAX_SCAN_TUPLES)


async def ingest_folder(svc: KnowledgeService, db: Database, tenant: str, paths: Sequence[Path]
                        ) -> tuple[float, int]:
    principal = Principal(tenant_id=tenant, principal_id="bench", scopes=frozenset({"knowledge.write"}))
    refs = [await svc.put_artifact(tenant, p.read_bytes(), media_type="text/markdown", origin=ArtifactOrigin.UPLOAD,
                                    trust=TrustLevel.USER, file_name=p.name) for p in paths]
    queue = list(zip(refs, paths, strict=True))

    async def worker() -> None:
        while queue:
            ref, path = queue.pop()
            try:
                await svc.ingest(ref, path.name, "tenant", principal, origin_trust=TrustLevel.USER)
            except Exception as exc:
                print(f"  refused {path.name}: {exc}")

    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(worker)
    seconds = time.perf_counter() - began
    chunks = await db.fetchval("SELECT count(*) FROM knowledge_chunks WHERE tenant_id = $1", tenant)
    return seconds, int(chunks)


def encoder_floor(paths: Sequence[Path], window: int) -> tuple[float, int, int]:
    """The encoder alone, in this process, on the very windows ingest embeds."""
    enc = Encoder(window=window, threads=2)
    passages = []
    for p in paths:
        try:
            prepared = prepare(p.read_text(encoding="utf-8"), p.name, "markdown")
        except Exception:
            continue
        passages += [(c.draft.heading_path, c.draft.text) for c in prepared.chunks]
    began = time.perf_counter()
    vectors, _ = enc.encode_passages(passages)
    return time.perf_counter() - began, len(passages), len(vectors)


async def timed(texts: Sequence[str], run: Callable[[str], Awaitable[Any]]) -> list[float]:
    for t in texts[:WARMUP]:
        await run(t)
    out = []
    for t in texts:
        began = time.perf_counter()
        await run(t)
        out.append(time.perf_counter() - began)
    return out


def q(tenant: str, text: str) -> KnowledgeQuery:
    return KnowledgeQuery(tenant_id=tenant, principal_id="bench", text=text)


_COPIED = ("artifacts", "knowledge_documents", "knowledge_chunk_sets", "knowledge_chunks", "knowledge_embeddings")


async def copy_tenant(db: Database, source: str, target: str, salt: str = "") -> None:
    """A tenant's rows under another tenant id; with ``salt``, new artifact, document and chunk ids
    too, so several copies can merge into one tenant."""
    async with db.transaction() as tx:
        for table in _COPIED:
            await tx.execute(f"DROP TABLE IF EXISTS bench_{table}")
            await tx.execute(f"CREATE TEMP TABLE bench_{table} AS SELECT * FROM {table} WHERE tenant_id = '{source}'")
            await tx.execute(f"UPDATE bench_{table} SET tenant_id = '{target}'")
        if salt:
            await tx.execute(f"UPDATE bench_artifacts SET artifact_id = md5(artifact_id::text || '{salt}')::uuid")
            await tx.execute(f"""UPDATE bench_knowledge_documents
                                 SET source_artifact_id = md5(source_artifact_id::text || '{salt}')::uuid""")
            for table in ("knowledge_documents", "knowledge_chunk_sets", "knowledge_chunks"):
                await tx.execute(f"UPDATE bench_{table} SET document_id = md5(document_id::text || '{salt}')::uuid")
            for table in ("knowledge_chunks", "knowledge_embeddings"):
                await tx.execute(f"UPDATE bench_{table} SET chunk_id = chunk_id || '{salt}'")
        for table in _COPIED:
            await tx.execute(f"INSERT INTO {table} OVERRIDING SYSTEM VALUE SELECT * FROM bench_{table}")


async def recall_rows(db: Database, arm: SemanticArm, tenant: str, texts: Sequence[str],
                      vectors: Sequence[str]) -> list[str]:
    """Recall@50 of chunk lists against an exact pass over the tenant's windows. Tie-robust: a
    returned chunk counts if its best window is at most as far as the exact 50th chunk's (copies
    merged into one tenant have identical vectors, so which copy an exact cut keeps is arbitrary)."""
    version = model_literal(arm.version)
    distance = f"e.embedding::vector({DIM}) <=> $2::vector({DIM})"

    def nearest(tail: str) -> str:  # tail "+ 0": an order the index cannot serve (the exact pass)
        return f"""SELECT e.chunk_id, min(e.d) AS d FROM (
                 SELECT e.chunk_id, {distance} AS d FROM knowledge_embeddings e
                 WHERE e.tenant_id = $1 AND e.model_version = {version}
                 ORDER BY ({distance}) {tail} LIMIT {LIMIT * 4}) e
               GROUP BY e.chunk_id ORDER BY d LIMIT {LIMIT}"""

    exact_sql = nearest("+ 0")
    ann_sql = nearest("")
    best_sql = f"""SELECT min({distance}) AS d FROM knowledge_embeddings e
                   WHERE e.tenant_id = $1 AND e.model_version = {version} AND e.chunk_id = ANY($3::text[])
                   GROUP BY e.chunk_id"""

    async def bare(vec: str, scan_options: bool) -> list[str]:
        async with db.transaction() as tx:
            if scan_options:
                await tx.execute(SCAN_OPTIONS)
            return [r["chunk_id"] for r in await tx.fetch(ann_sql, tenant, vec)]

    async def through_arm(text: str, exact_max: int) -> list[str]:
        saved, arm.exact_max_windows = arm.exact_max_windows, exact_max
        try:
            return [c.chunk_id for c in await arm.search(db, q(tenant, text), LIMIT)]
        finally:
            arm.exact_max_windows = saved

    windows = await db.fetchval("SELECT count(*) FROM knowledge_embeddings WHERE tenant_id = $1", tenant)
    path = "exact pass" if windows <= arm.exact_max_windows else "iterative scans"
    ways: dict[str, Callable[[str, str], Awaitable[list[str]]]] = {
        "bare SQL, hnsw default scan": lambda text, vec: bare(vec, False),
        "bare SQL, hnsw iterative scans": lambda text, vec: bare(vec, True),
        "the arm, iterative scans": lambda text, vec: through_arm(text, 0),
        "the arm, exact pass": lambda text, vec: through_arm(text, 10**9),
    }
    recall: dict[str, list[float]] = {k: [] for k in ways}
    times: dict[str, list[float]] = {k: [] for k in [*ways, "bare SQL, exact pass"]}
    for text, vec in zip(texts, vectors, strict=True):
        began = time.perf_counter()
        truth = await db.fetch(exact_sql, tenant, vec)
        times["bare SQL, exact pass"].append(time.perf_counter() - began)
        cutoff = max(r["d"] for r in truth) + 1e-6
        for name, way in ways.items():
            began = time.perf_counter()
            got = await way(text, vec)
            times[name].append(time.perf_counter() - began)
            near = sum(1 for r in await db.fetch(best_sql, tenant, vec, got) if r["d"] <= cutoff)
            recall[name].append(min(near, len(truth)) / len(truth))
    out = [f"tenant {tenant}: {windows} windows (the arm takes its {path})"]
    for name in times:
        r = sum(recall[name]) / len(recall[name]) if name in recall else 1.0
        out.append(f"  {name:<32} recall@{LIMIT} {r:.3f}   p50 {median_ms(times[name]):7.1f} ms   "
                   f"p99 {p99_ms(times[name]):7.1f} ms")
    return out


async def run(args: argparse.Namespace) -> list[str]:
    paths = sorted(p for folder in args.folder.split(",") for p in (CORPUS / folder).glob("**/*.md"))
    size_mb = sum(p.stat().st_size for p in paths) / 1e6
    texts = [x["question"] for x in load_docs_dev()]
    out = [f"{len(paths)} files, {size_mb:.2f} MB from {args.folder}; loop={args.loop}, "
           f"embedder threads={args.threads}"]
    with throwaway_data_dir("knowledge-bench-semantic-") as data_dir:
        base = dict(data_dir=data_dir, sweep_interval_seconds=None, pool_max_size=10, semantic_backfill=False)
        async with KnowledgeService.open(Settings(**base, semantic_arm=False)) as svc, own_db(svc, OWN_POOL) as db:
            lex_s, lex_chunks = await ingest_folder(svc, db, LEXICAL, paths)
        async with KnowledgeService.open(Settings(**base, semantic_arm=True, embedder_threads=args.threads)) as svc, \
                own_db(svc, OWN_POOL) as db:
            assert await svc.semantic_ready(within=600)
            began = time.perf_counter()
            sem_s, sem_chunks = await ingest_folder(svc, db, SEMANTIC, paths)  # searchable (lexically) now
            without = svc.retrieval().searches_without_arm.get("semantic", 0)
            during = await timed(texts, lambda t: svc.search(q(SEMANTIC, t)))  # while the queue drains
            without = svc.retrieval().searches_without_arm.get("semantic", 0) - without
            await svc.wait_embedded(tenant_id=SEMANTIC)
            full_s = time.perf_counter() - began
            rate = sem_chunks / full_s
            out += ["", "ingest (4 concurrent)                  seconds     MB/s   ms/chunk   ratio",
                    f"lexical-only                           {lex_s:7.1f}  {size_mb / lex_s:7.3f}  "
                    f"{1000 * lex_s / lex_chunks:9.1f}   1.00x",
                    f"arm on: searchable (ingest returned)   {sem_s:7.1f}  {size_mb / sem_s:7.3f}  "
                    f"{1000 * sem_s / sem_chunks:9.1f}   {lex_s / sem_s:.2f}x of lexical-only",
                    f"arm on: fully embedded (queue drained) {full_s:7.1f}  {size_mb / full_s:7.3f}  "
                    f"{1000 * full_s / sem_chunks:9.1f}   {rate:.1f} passages/s through the embedder"]
            out.append(f"searches while the queue drains (fused, {len(texts)} docs-dev questions): p50 "
                       f"{median_ms(during):.1f} ms, p99 {p99_ms(during):.1f} ms; {without} went on without the arm")
            if args.ingest_only:
                return out
            if not args.search_only:
                floor_s, floor_passages, floor_windows = encoder_floor(paths, svc.settings.semantic_window)
                out.append(f"encoder alone, in process              {floor_s:7.1f}  {size_mb / floor_s:7.3f}  "
                           f"{1000 * floor_s / floor_passages:9.1f}   the drain = {floor_s / full_s:.2f}x of the "
                           f"encoder's pace ({floor_windows} windows, {floor_windows / floor_passages:.2f} per "
                           "passage)")
            await db.execute("VACUUM ANALYZE")
            async with own_searcher(svc, db) as own:
                lexical, sem = own.arms
                assert isinstance(sem, SemanticArm)
                vectors = [await sem.embedder.embed_query(t) for t in texts]
                ann_floor = f"""SELECT chunk_id FROM knowledge_embeddings e WHERE tenant_id = $1
                                AND model_version = {model_literal(sem.version)}
                                ORDER BY (e.embedding::vector({DIM}) <=> $2::vector({DIM})) + 0 LIMIT {LIMIT * 4}"""
                by_vec = dict(zip(texts, vectors, strict=True))
                rows = [
                    (f"knowledge.search, fused ({svc.retrieval().ranking})",
                     await timed(texts, lambda t: svc.search(q(SEMANTIC, t)))),
                    *await without_relevance(own, texts, "fused"),
                    ("lexical arm alone", await timed(texts, lambda t: lexical.search(db, q(SEMANTIC, t), LIMIT))),
                    ("semantic arm alone (with query embedding)",
                     await timed(texts, lambda t: sem.search(db, q(SEMANTIC, t), LIMIT))),
                    ("embedding the query (child round trip)", await timed(texts, sem.embedder.embed_query)),
                    ("bare SQL: exact ANN, tenant only", await timed(texts, lambda t: db.fetch(
                        ann_floor, SEMANTIC, by_vec[t]))),
                ]
                # the service's fused searches and the script's own searcher's
                degraded = svc.retrieval().searches_without_arm.get(sem.name, 0) + own.without[sem.name]
        async with KnowledgeService.open(Settings(**base, semantic_arm=False)) as svc, own_db(svc, OWN_POOL) as db, \
                own_searcher(svc, db) as own:
            rows[:0] = [(f"knowledge.search, lexical-only ({svc.retrieval().ranking})",
                         await timed(texts, lambda t: svc.search(q(SEMANTIC, t)))),
                        *await without_relevance(own, texts, "lexical-only")]
        out += ["", f"search ({len(texts)} docs-dev questions, sequential)   p50 ms   p99 ms"]
        out += [f"{name:<44} {median_ms(s):7.1f}  {p99_ms(s):7.1f}" for name, s in rows]
        out.append(f"(fused searches that went on without the semantic arm: {degraded})")
        if args.search_only:
            return out

        async with KnowledgeService.open(Settings(**base, semantic_arm=True)) as svc, own_db(svc, OWN_POOL) as db, \
                own_searcher(svc, db) as own:
            lexical, sem = own.arms
            assert isinstance(sem, SemanticArm)
            began = time.perf_counter()
            await db.execute(f"DROP INDEX IF EXISTS {index_name(sem.version)}")
            for i in range(args.copies):
                await copy_tenant(db, SEMANTIC, f"bench-big-{i}")
            for size in args.mid:
                for i in range(size):
                    await copy_tenant(db, SEMANTIC, f"bench-mid{size}", salt=f"m{size}c{i}")
            await db.execute("SET maintenance_work_mem = '512MB'")
            await db.execute(f"CREATE INDEX {index_name(sem.version)} ON knowledge_embeddings USING hnsw "
                             f"((embedding::vector({DIM})) vector_cosine_ops) "
                             f"WHERE model_version = {model_literal(sem.version)}")
            await db.execute("VACUUM ANALYZE")
            total = await db.fetchval("SELECT count(*) FROM knowledge_embeddings")
            mids = " and ".join(f"a {n}-copy tenant" for n in args.mid)
            out += ["", f"{args.copies} copies + {mids}: {total} windows in the table, HNSW "
                        f"built in {time.perf_counter() - began:.0f}s (copies included)"]
            vectors = [await sem.embedder.embed_query(t) for t in texts]
            out += await recall_rows(db, sem, SEMANTIC, texts, vectors)
            for size in args.mid:
                out += await recall_rows(db, sem, f"bench-mid{size}", texts, vectors)
    return out


async def without_relevance(searcher: Searcher, texts: Sequence[str], label: str
                            ) -> list[tuple[str, list[float]]]:
    """The same searches ranked by `KNOWLEDGE_V1` (reciprocal-rank fusion, no relevance model): what
    the relevance model costs. ``searcher``: the script's own, built as the service's (`own_searcher`)."""
    with searching_with(searcher, policy=KNOWLEDGE_V1):
        return [(f"knowledge.search, {label} ({KNOWLEDGE_V1.name})",
                 await timed(texts, lambda t: searcher.search(q(SEMANTIC, t))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", default="docs-argocd/operator-manual")
    parser.add_argument("--copies", type=int, default=24)
    parser.add_argument("--mid", type=lambda s: [int(x) for x in s.split(",") if x], default=[5, 10],
                        help="sizes (in copies) of the larger tenants measured inside the table")
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    parser.add_argument("--threads", type=int, default=Settings.model_fields["embedder_threads"].default,
                        help="the embedder child's encoder threads")
    parser.add_argument("--search-only", action="store_true",
                        help="stop after the search table (no encoder floor, no copies)")
    parser.add_argument("--ingest-only", action="store_true",
                        help="only the ingest table: time to searchable and to fully embedded (e.g. --folder .)")
    print_run(run, parser.parse_args())


if __name__ == "__main__":
    main()
