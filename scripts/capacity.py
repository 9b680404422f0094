"""What a corpus costs (issue 36, the capacity note): storage per chunk, by what holds it, and ingest
and embedding throughput per CPU-second.

    .venv/bin/python scripts/capacity.py [--dsn DSN] [--semantic on|off] [--corpus ../shared/corpus]

Ingests every Markdown file of the docs corpora (``docs-*``: 551 files) into a fresh tenant through
the bulk path (`KnowledgeService.ingest_many`), waits for the semantic arm's embedding queue to
drain (where the arm is on), then reads each table's total size (heap, indexes, TOAST:
`knowledge.store.server.table_bytes`) and divides by the live chunks. A throwaway embedded server
unless ``--dsn`` (then other tenants' rows count too: use an empty database).

CPU is the whole machine's (``psutil.cpu_times``: this process, its parser and embedder children and
the PostgreSQL server together) over each phase, so "per CPU-second" is per core; run it on a quiet
machine. Wall time is printed beside it.
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path

import anyio
import psutil

from knowledge import KnowledgeService, Principal, Settings, TrustLevel
from knowledge.core.prepare import IngestRequest
from knowledge.models import ArtifactOrigin, KnowledgeDocument, Visibility
from knowledge.store.db import open_pool
from knowledge.store.server import table_bytes
from knowledge.supervisors.embedded_pg import start_embedded, throwaway_data_dir

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
#: What holds a chunk's lexical side, its vectors, and the rest, by table.
GROUPS = {
    "text and lexical index": ("knowledge_chunks", "knowledge_chunk_index", "knowledge_postings",
                               "knowledge_tenant_stats"),
    "vectors": ("knowledge_embeddings", "knowledge_embedding_queue"),
    "documents, versions, events": ("knowledge_documents", "knowledge_chunk_sets", "knowledge_events",
                                    "knowledge_ingest_outcomes"),
    "sources (the retained bytes)": ("artifacts",),
}


def _cpu() -> float:
    times = psutil.cpu_times()
    return times.user + times.system + getattr(times, "nice", 0.0)


async def measure(dsn: str, corpus: Path, semantic: bool | None) -> None:
    tenant = f"capacity-{uuid.uuid4().hex[:8]}"
    owner = Principal(tenant_id=tenant, principal_id="ops", scopes=frozenset({"knowledge.write"}))
    files = await anyio.to_thread.run_sync(lambda: [(p, p.read_bytes()) for p in sorted(corpus.glob("docs-*/**/*.md"))])
    settings = Settings(dsn=dsn, sweep_interval_seconds=None)
    if semantic is not None:
        settings = settings.model_copy(update={"semantic_arm": semantic})
    async with KnowledgeService.open(settings) as svc:
        arms = svc.retrieval().arms
        requests = []
        for path, data in files:
            ref = await svc.put_artifact(tenant, data, media_type="text/markdown", origin=ArtifactOrigin.UPLOAD,
                                         trust=TrustLevel.USER)
            requests.append(IngestRequest(source=ref, title=str(path.relative_to(corpus)), visibility=Visibility.TENANT,
                                          principal=owner, origin_trust=TrustLevel.USER))
        cpu, wall = _cpu(), time.monotonic()
        outcomes = await svc.ingest_many(requests)
        ingest_cpu, ingest_wall = _cpu() - cpu, time.monotonic() - wall
        embed_cpu = embed_wall = 0.0
        if "semantic" in arms:
            cpu, wall = _cpu(), time.monotonic()
            await svc.wait_embedded(tenant_id=tenant)
            embed_cpu, embed_wall = _cpu() - cpu, time.monotonic() - wall
        size = await svc.corpus_size(tenant)
    async with open_pool(dsn, min_size=1, max_size=1, application_name="knowledge-capacity") as db:
        sizes = await table_bytes(db)
    ingested = sum(isinstance(o, KnowledgeDocument) for o in outcomes)
    chunks = size.chunks
    megabytes = sum(len(d) for _, d in files) / 1e6
    print(f"corpus: {len(files)} Markdown files ({megabytes:.1f} MB) -> {ingested} documents, {chunks} chunks, "
          f"{size.tokens} tokens; arms {arms}")
    print("\n| held by | tables | bytes per chunk | MB for this corpus |\n|---|---|--:|--:|")
    total = 0
    for group, tables in GROUPS.items():
        held = sum(sizes.get(t, 0) for t in tables)
        total += held
        present = [t for t in tables if t in sizes]
        print(f"| {group} | {', '.join(present) or '—'} | {held / chunks:,.0f} | {held / 1e6:.1f} |")
    print(f"| **all of the above** | | **{total / chunks:,.0f}** | **{total / 1e6:.1f}** |")
    print(f"\ningest (bulk path): {ingest_wall:.1f} s wall, {ingest_cpu:.1f} CPU-s: "
          f"{chunks / ingest_cpu:,.0f} chunks and {ingested / ingest_cpu:.1f} documents per CPU-second")
    if embed_cpu:
        print(f"embedding (the semantic arm's drain): {embed_wall:.1f} s wall, {embed_cpu:.1f} CPU-s: "
              f"{chunks / embed_cpu:,.1f} chunks per CPU-second")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--semantic", choices=["on", "off"], default=None)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    args = parser.parse_args()
    semantic = None if args.semantic is None else args.semantic == "on"
    with throwaway_data_dir("knowledge-capacity-", dsn=args.dsn) as data_dir:
        dsn = args.dsn or start_embedded(data_dir).dsn("knowledge")
        anyio.run(measure, dsn, args.corpus, semantic, backend="trio")


if __name__ == "__main__":
    main()
