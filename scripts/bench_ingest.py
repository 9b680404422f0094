"""Ingest throughput: the real seven steps beside a bare-COPY floor measured in the same run.

    .venv/bin/python scripts/bench_ingest.py [--loop trio|asyncio] [--concurrency 4] [--dsn DSN]

Ingests every Markdown file of ../shared/corpus/docs-argocd and docs-etcd through
`KnowledgeService.ingest` (sources put first, not timed), one at a time and then N at a time, and
through `KnowledgeService.ingest_many` (the bulk path), and compares with two floors, the chunk
rows computed beforehand: the old one (issue 3: COPYed one transaction per document into a table
with a stored weighted tsvector and a GIN index, and in one bulk COPY), and **the same index**
the service writes (chunk rows by one COPY, then their tsvectors and lengths, postings and tenant
statistics in SQL, into tables like the service's, one transaction). Each of the service's paths
starts from an empty store, as the floors write into empty tables. Prints a table; asserts
nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import time
import uuid
from pathlib import Path

import anyio

from knowledge.config import Settings
from knowledge.core.normalize import normalize
from knowledge.core.prepare import IngestRequest, prepare
from knowledge.core.scan import find_secrets
from knowledge.models import ArtifactOrigin, ArtifactRef, Principal, TrustLevel, Visibility
from knowledge.service import KnowledgeService
from knowledge.store.db import Database, open_pool
from knowledge.store.documents import TS_CONFIG
from knowledge.store.impact import impact_sql
from knowledge.supervisors.embedded_pg import throwaway_data_dir

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"

FLOOR_TABLE = f"""
CREATE TABLE IF NOT EXISTS bench_floor (
    tenant_id text NOT NULL, chunk_id text NOT NULL, document_id uuid NOT NULL, version int NOT NULL,
    chunker_version text NOT NULL, ordinal int NOT NULL, heading_path text[] NOT NULL, heading text NOT NULL,
    text text NOT NULL, tokens int NOT NULL, contains_instruction_like_text bool NOT NULL,
    content_sha256 text NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (setweight(to_tsvector('{TS_CONFIG}', heading), 'A')
                                      || setweight(to_tsvector('{TS_CONFIG}', text), 'B')) STORED,
    PRIMARY KEY (tenant_id, chunk_id));
CREATE INDEX IF NOT EXISTS bench_floor_tsv ON bench_floor USING gin (tsv);
"""


def files() -> list[Path]:
    found = sorted(CORPUS.glob("docs-*/**/*.md"))
    if not found:
        raise SystemExit(f"no corpus at {CORPUS}")
    return found


async def put_all(svc: KnowledgeService, tenant: str, paths: list[Path]) -> list[tuple[ArtifactRef, str]]:
    out = []
    for path in paths:
        ref = await svc.put_artifact(tenant, path.read_bytes(), media_type="text/markdown",
                                      origin=ArtifactOrigin.UPLOAD, trust=TrustLevel.USER, file_name=path.name)
        out.append((ref, path.stem))
    return out


async def ingest_all(svc: KnowledgeService, tenant: str, items: list[tuple[ArtifactRef, str]],
                     concurrency: int) -> tuple[float, int]:
    principal = Principal(tenant_id=tenant, principal_id="bench", scopes=frozenset({"knowledge.write"}))
    refused = 0
    queue = list(items)

    async def worker() -> None:
        nonlocal refused
        while queue:
            ref, title = queue.pop()
            try:
                await svc.ingest(ref, title, "tenant", principal, origin_trust=TrustLevel.USER)
            except Exception:
                refused += 1

    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return time.perf_counter() - began, refused


def floor_rows(paths: list[Path], tenant: str) -> list[list[tuple[object, ...]]]:
    per_doc = []
    for path in paths:
        try:
            prepared = prepare(path.read_text(encoding="utf-8"), path.stem, "markdown")
        except Exception:
            continue
        doc = uuid.uuid4()
        per_doc.append([(tenant, f"kc_{uuid.uuid4().hex[:20]}", doc, 1, prepared.chunker_version, c.draft.ordinal,
                         list(c.draft.heading_path), " ".join(c.draft.heading_path), c.draft.text, c.draft.tokens,
                         c.instruction_like, c.content_sha256) for c in prepared.chunks])
    return per_doc


async def copy_floor(db: Database, per_doc: list[list[tuple[object, ...]]], bulk: bool) -> float:
    columns = ("tenant_id", "chunk_id", "document_id", "version", "chunker_version", "ordinal", "heading_path",
               "heading", "text", "tokens", "contains_instruction_like_text", "content_sha256")
    began = time.perf_counter()
    if bulk:
        async with db.transaction() as tx:
            await tx.copy_records("bench_floor", [r for rows in per_doc for r in rows], columns=columns)
    else:
        for rows in per_doc:
            async with db.transaction() as tx:
                await tx.copy_records("bench_floor", rows, columns=columns)
    return time.perf_counter() - began


SAME_INDEX_TABLES = """
CREATE TABLE IF NOT EXISTS bench_chunks (LIKE knowledge_chunks INCLUDING ALL);
CREATE TABLE IF NOT EXISTS bench_index (LIKE knowledge_chunk_index INCLUDING ALL);
CREATE TABLE IF NOT EXISTS bench_postings (LIKE knowledge_postings INCLUDING ALL);
CREATE TABLE IF NOT EXISTS bench_stats (LIKE knowledge_tenant_stats INCLUDING ALL);
CREATE TABLE IF NOT EXISTS bench_term_stats (LIKE knowledge_term_stats INCLUDING ALL);
"""

# The same index the service writes — chunk rows, the weighted tsvector and length per chunk, one
# posting per (chunk, lexeme) with its impact, each lexeme's document frequency, the tenant's
# statistics — into tables like the service's (same columns and indexes, no foreign keys), from rows
# COPYed in: the floor for `ingest_many`.
SAME_INDEX_SQL = f"""
WITH vec AS MATERIALIZED (
    SELECT c.tenant_id, c.chunk_id, c.document_id, c.version, c.chunker_version,
           setweight(to_tsvector('{TS_CONFIG}', array_to_string(c.heading_path, ' ')), 'A')
           || setweight(to_tsvector('{TS_CONFIG}', c.text), 'B') AS tsv
    FROM bench_chunks c WHERE c.tenant_id = $1
), terms AS MATERIALIZED (
    SELECT v.chunk_id, u.lexeme, coalesce(array_length(u.positions, 1), 1) AS tf FROM vec v, unnest(v.tsv) AS u
), lengths AS MATERIALIZED (
    SELECT chunk_id, sum(tf)::int AS dl FROM terms GROUP BY chunk_id
), idx AS (
    INSERT INTO bench_index (tenant_id, chunk_id, document_id, version, chunker_version, tsv, dl)
    SELECT v.tenant_id, v.chunk_id, v.document_id, v.version, v.chunker_version, v.tsv, l.dl
    FROM vec v JOIN lengths l USING (chunk_id) RETURNING dl
), postings AS (
    INSERT INTO bench_postings (tenant_id, term, chunk_id, tf, dl, impact)
    SELECT $1, t.lexeme, t.chunk_id, t.tf, l.dl, {impact_sql("t.tf", "l.dl")}
    FROM terms t JOIN lengths l USING (chunk_id)
), term_stats AS (
    INSERT INTO bench_term_stats (tenant_id, term, shard, df) SELECT $1, lexeme, 0, count(*) FROM terms GROUP BY lexeme
)
INSERT INTO bench_stats (tenant_id, shard, chunks, total_dl) SELECT $1, 0, count(*), sum(dl) FROM idx
"""


async def same_index_floor(db: Database, per_doc: list[list[tuple[object, ...]]], tenant: str) -> float:
    """One COPY of every chunk row, then the index rows, postings and statistics in SQL: one transaction."""
    columns = ("tenant_id", "chunk_id", "document_id", "version", "chunker_version", "ordinal", "heading_path",
               "text", "tokens", "contains_instruction_like_text", "content_sha256")
    rows = [(tenant, *r[1:7], *r[8:]) for doc in per_doc for r in doc]  # without the floor's joined heading
    began = time.perf_counter()
    async with db.transaction() as tx:
        await tx.copy_records("bench_chunks", rows, columns=columns)
        await tx.execute(SAME_INDEX_SQL, tenant)
    return time.perf_counter() - began


async def ingest_bulk(svc: KnowledgeService, tenant: str, items: list[tuple[ArtifactRef, str]]) -> float:
    principal = Principal(tenant_id=tenant, principal_id="bench", scopes=frozenset({"knowledge.write"}))
    requests = [IngestRequest(source=ref, title=title, visibility=Visibility.TENANT, principal=principal,
                              origin_trust=TrustLevel.USER) for ref, title in items]
    began = time.perf_counter()
    await svc.ingest_many(requests)
    return time.perf_counter() - began


#: Every path starts from an empty store (a larger postings index costs every later insert more).
RESET = """TRUNCATE artifacts, knowledge_documents, knowledge_chunk_sets, knowledge_chunks, knowledge_chunk_index,
                    knowledge_postings, knowledge_tenant_stats, knowledge_term_stats, knowledge_events,
                    knowledge_ingest_outcomes CASCADE"""


async def fresh_put(svc: KnowledgeService, db: Database, tenant: str, paths: list[Path]
                    ) -> list[tuple[ArtifactRef, str]]:
    await db.execute(RESET)
    return await put_all(svc, tenant, paths)


async def run(args: argparse.Namespace) -> None:
    paths = files()
    total_mb = sum(p.stat().st_size for p in paths) / 1e6
    with throwaway_data_dir("knowledge-bench-", dsn=args.dsn) as data_dir:
        settings = Settings(dsn=args.dsn, data_dir=data_dir, sweep_interval_seconds=None, semantic_arm=False,
                            pool_max_size=max(4, args.concurrency + 2))
        # The floors, the resets and the counts run on a pool of the script's own (the service's is private).
        async with KnowledgeService.open(settings) as svc, \
                open_pool(svc.dsn, min_size=1, max_size=4, application_name="knowledge-bench-ingest") as db:
            rows: list[tuple[str, float, float, str]] = []

            began = time.perf_counter()
            for path in paths:
                with contextlib.suppress(Exception):  # the refused file counts its scan time too
                    prepare(path.read_text(encoding="utf-8"), path.stem, "markdown")
            pure = time.perf_counter() - began
            normalized = [normalize(path.read_text(encoding="utf-8")) for path in paths]
            began = time.perf_counter()
            for text in normalized:
                find_secrets(text)
            scan = time.perf_counter() - began

            await db.execute(FLOOR_TABLE)
            per_doc = floor_rows(paths, "floor-a")
            t_floor = await copy_floor(db, per_doc, bulk=False)
            per_doc_b = floor_rows(paths, "floor-b")
            t_bulk = await copy_floor(db, per_doc_b, bulk=True)
            await db.execute(SAME_INDEX_TABLES)
            t_same = await same_index_floor(db, floor_rows(paths, "floor-c"), "floor-c")

            items = await fresh_put(svc, db, "bench-seq", paths)
            t_seq, refused = await ingest_all(svc, "bench-seq", items, 1)
            chunks = await db.fetchval("SELECT count(*) FROM knowledge_chunks WHERE tenant_id = 'bench-seq'")
            tokens = await db.fetchval("SELECT sum(tokens) FROM knowledge_chunks WHERE tenant_id = 'bench-seq'")
            items_c = await fresh_put(svc, db, "bench-conc", paths)
            t_conc, _ = await ingest_all(svc, "bench-conc", items_c, args.concurrency)
            items_b = await fresh_put(svc, db, "bench-bulk", paths)
            t_many = await ingest_bulk(svc, "bench-bulk", items_b)

            rows.append(("floor: COPY, one transaction per document", t_floor, total_mb / t_floor, "1.00x"))
            rows.append(("floor: one bulk COPY", t_bulk, total_mb / t_bulk, f"{t_floor / t_bulk:.2f}x"))
            rows.append(("knowledge.ingest, 1 at a time", t_seq, total_mb / t_seq, f"{t_floor / t_seq:.2f}x"))
            rows.append((f"knowledge.ingest, {args.concurrency} at a time", t_conc, total_mb / t_conc,
                         f"{t_floor / t_conc:.2f}x"))
            rows.append(("svc.ingest_many (bulk)", t_many, total_mb / t_many, f"{t_floor / t_many:.2f}x"))
            rows.append(("  of which normalize+scan+chunk (in process)", pure, total_mb / pure, "-"))
            rows.append(("  of which the secret scan (find_secrets)", scan, total_mb / scan,
                         f"{scan / (pure - scan):.0%} of the rest of prepare"))
            same_index = ("same-index floor: one COPY + index, postings, stats", t_same, total_mb / t_same,
                          f"{t_floor / t_same:.2f}x")
            rows.insert(2, same_index)

    print(f"corpus: {len(paths)} Markdown files, {total_mb:.2f} MB, {chunks} chunks, {tokens} tokens "
          f"({refused} refused); loop={args.loop}")
    print(f"{'path':<52} {'seconds':>8} {'MB/s':>7} {'docs/s':>7} {'tokens/s':>9} {'vs floor':>9} "
          f"{'vs same-index':>13}")
    for name, seconds, mbps, ratio in rows:
        print(f"{name:<52} {seconds:>8.2f} {mbps:>7.2f} {len(paths) / seconds:>7.0f} "
              f"{tokens / seconds:>9.0f} {ratio:>9} {t_same / seconds:>12.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    anyio.run(run, args, backend=args.loop)


if __name__ == "__main__":
    main()
