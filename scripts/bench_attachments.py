"""Attachment worker throughput: owner-sent attachments drained by the maintenance worker, beside
baselines measured in the same run — direct `KnowledgeService.ingest` of the same files (1 and N at
a time) and `KnowledgeService.ingest_many` of them all (the bulk path, which the workers use).

    .venv/bin/python scripts/bench_attachments.py [--loop trio|asyncio] [--workers 1 2] [--batch 1 32]
                                                  [--repeat 3] [--pdf-repeat 1] [--large] [--dsn DSN]

``--batch``: the workers' batch sizes to measure (1 claims and ingests one attachment at a time, as
the workers did before they used the bulk path).

Corpora: the Markdown of ../shared/corpus/docs-etcd, and the PDFs of ../shared/corpus/pdf whose
manifest category is ``text`` (``--large`` adds the 412-page manual). Each measurement uses a tenant
of its own, so every file becomes a new document. Not timed: uploading (for the worker rows, with
the PDF upload inspection, reported on its own line) and marking. Timed: the direct ingests (1 and N
at a time), and the drain of N attachment workers from the first claim to the last attachment
settled (claim, lease, the same ingest, settle) — the workers and their ingest built as the service
builds its own, over a pool of the script's own (the service's parts are private). The semantic arm
is off (vectors follow ingest in the background either way; this measures ingest). Rounds are
interleaved (direct, then workers), so a noisy machine slows both alike. Prints a table; asserts
nothing about time.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import anyio

from knowledge.config import Settings
from knowledge.core.prepare import IngestRequest
from knowledge.errors import IngestRefused
from knowledge.ingest.attachments import AttachmentQueue, attachment_document_id
from knowledge.ingest.ingestor import Ingestor
from knowledge.maintenance.worker import AttachmentWorker, WorkerOptions
from knowledge.models import ArtifactOrigin, ArtifactRef, Principal, TrustLevel, Visibility
from knowledge.parsers.registry import default_registry
from knowledge.service import KnowledgeService
from knowledge.store.artifacts import ArtifactStore
from knowledge.store.db import Database, open_pool
from knowledge.supervisors.embedded_pg import throwaway_data_dir
from knowledge.supervisors.parser_pool import ParserPool

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
MEDIA = {".md": "text/markdown", ".pdf": "application/pdf"}


@dataclass
class Row:
    corpus: str
    path: str
    concurrency: int
    files: int
    ingested: int
    refused: int
    seconds: float


def markdown_files() -> list[Path]:
    found = sorted((CORPUS / "docs-etcd").glob("**/*.md"))
    if not found:
        raise SystemExit(f"no corpus at {CORPUS / 'docs-etcd'}")
    return found


def pdf_files(large: bool) -> list[Path]:
    with (CORPUS / "pdf" / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    wanted = {"text", "large"} if large else {"text"}
    return [CORPUS / "pdf" / r["file"] for r in rows if r["category"] in wanted]


async def direct(svc: KnowledgeService, corpus: str, paths: list[Path], concurrency: int) -> Row:
    """The baseline: `svc.ingest` with the worker's own request, ``concurrency`` at a time."""
    tenant = f"bench-direct-{uuid.uuid4().hex[:8]}"
    principal = Principal(tenant_id=tenant, principal_id="owner", scopes=frozenset({"knowledge.write"}))
    refs: list[ArtifactRef] = [
        await svc.put_artifact(tenant, p.read_bytes(), media_type=MEDIA[p.suffix], origin=ArtifactOrigin.UPLOAD,
                                file_name=p.name) for p in paths]
    queue = list(refs)
    ingested = refused = 0

    async def one_at_a_time() -> None:
        nonlocal ingested, refused
        while queue:
            ref = queue.pop(0)
            try:
                await svc.ingest(ref, ref.file_name or "attachment", "principal", principal,
                                 origin_trust=TrustLevel.USER,
                                 document_id=attachment_document_id(tenant, "owner", ref.sha256))
                ingested += 1
            except IngestRefused:
                refused += 1

    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(one_at_a_time)
    return Row(corpus, "direct svc.ingest", concurrency, len(paths), ingested, refused, time.perf_counter() - began)


async def bulk(svc: KnowledgeService, corpus: str, paths: list[Path]) -> Row:
    """The bulk baseline: one `svc.ingest_many` of the worker's own requests."""
    tenant = f"bench-bulk-{uuid.uuid4().hex[:8]}"
    principal = Principal(tenant_id=tenant, principal_id="owner", scopes=frozenset({"knowledge.write"}))
    refs: list[ArtifactRef] = [
        await svc.put_artifact(tenant, p.read_bytes(), media_type=MEDIA[p.suffix], origin=ArtifactOrigin.UPLOAD,
                                file_name=p.name) for p in paths]
    requests = [IngestRequest(source=ref, title=ref.file_name or "attachment", visibility=Visibility.PRINCIPAL,
                              principal=principal, origin_trust=TrustLevel.USER,
                              document_id=attachment_document_id(tenant, "owner", ref.sha256)) for ref in refs]
    began = time.perf_counter()
    outcomes = await svc.ingest_many(requests)
    seconds = time.perf_counter() - began
    ingested = sum(not isinstance(o, Exception) for o in outcomes)
    return Row(corpus, "direct svc.ingest_many", 1, len(paths), ingested, len(paths) - ingested, seconds)


def own_ingestor(db: Database, settings: Settings) -> Ingestor:
    """The attachment workers' ingest, built over ``db`` as the service builds its own: its artifact
    store, the extractors (PDFs through a parser pool of its own; spares are the loop's) and no vectors
    (the semantic arm is off)."""
    parsers = ParserPool()
    extractors = default_registry(parsers)
    return Ingestor(db, ArtifactStore(db, settings.max_artifact_bytes), extractors)


async def through_workers(svc: KnowledgeService, ingestor: Ingestor, corpus: str, paths: list[Path], workers: int,
                          batch: int) -> tuple[Row, Row]:
    """Upload (with inspection) and mark, then drain with ``workers`` attachment workers claiming
    ``batch`` attachments at a time, over ``ingestor`` (`own_ingestor`)."""
    tenant = f"bench-worker-{uuid.uuid4().hex[:8]}"
    began = time.perf_counter()
    refs = [await svc.upload_attachment(tenant, p.read_bytes(), media_type=MEDIA[p.suffix], file_name=p.name)
            for p in paths]
    uploaded = time.perf_counter() - began
    owner = Principal(tenant_id=tenant, principal_id="owner", scopes=frozenset({"knowledge.write"}))
    marks = await svc.mark_attachments(owner, [r.artifact_id for r in refs], conversation_id="bench")
    queue = AttachmentQueue(ingestor.db)
    options = WorkerOptions(tenant_id=tenant, poll_seconds=0.05, retry_base_seconds=0.01, batch=batch)
    crew = [AttachmentWorker(queue, ingestor, options, worker_id=f"bench/{i}") for i in range(workers)]
    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for w in crew:
            tg.start_soon(w.drain)
    seconds = time.perf_counter() - began
    counts = await queue.counts(tenant)
    refused_at_marking = sum(m.state is not None and m.state.value == "refused" for m in marks)
    upload_row = Row(corpus, "upload_attachment (+ PDF inspection)", 1, len(paths), len(refs), 0, uploaded)
    worker_row = Row(corpus, f"attachment workers (drain), batch {batch}", workers, len(paths),
                     counts.get("ingested", 0), counts.get("refused", 0) - refused_at_marking, seconds)
    return upload_row, worker_row


async def run(args: argparse.Namespace) -> list[list[Row]]:
    """Every measurement ``repeat`` times, interleaved (direct, then workers, per round), so that a noisy
    machine slows both alike; returns the rounds of each (corpus, path, concurrency)."""
    measured: dict[tuple[str, str, int], list[Row]] = {}

    def keep(row: Row) -> None:
        measured.setdefault((row.corpus, row.path, row.concurrency), []).append(row)

    corpora = [("docs-etcd (Markdown)", markdown_files(), args.repeat),
               ("pdf (text)", pdf_files(args.large), args.pdf_repeat)]
    with throwaway_data_dir("knowledge-bench-", dsn=args.dsn) as data_dir:
        settings = Settings(dsn=args.dsn, data_dir=data_dir, sweep_interval_seconds=None, semantic_arm=False,
                            pool_max_size=max(4, 2 * max(args.workers) + 2))
        async with KnowledgeService.open(settings) as svc, \
                open_pool(svc.dsn, min_size=1, max_size=settings.pool_max_size,
                          application_name="knowledge-bench-attachments") as db:
            ingestor = own_ingestor(db, settings)
            for corpus, paths, repeat in corpora:
                await direct(svc, corpus, paths[:3], 1)  # warm-up: connections, spares, caches
                await through_workers(svc, ingestor, corpus, paths[:3], 1, 1)  # and the workers' own pool
                for _ in range(repeat):
                    keep(await bulk(svc, corpus, paths))
                    for n in args.workers:
                        keep(await direct(svc, corpus, paths, n))
                        for batch in args.batch:
                            upload_row, worker_row = await through_workers(svc, ingestor, corpus, paths, n, batch)
                            keep(upload_row)
                            keep(worker_row)
    return list(measured.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="worker counts; the direct baseline runs at each as its concurrency")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 32],
                        help="the workers' batch sizes (1: one attachment at a time)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds for Markdown (the median is shown)")
    parser.add_argument("--pdf-repeat", type=int, default=1, help="rounds for PDFs")
    parser.add_argument("--large", action="store_true", help="include the 412-page PDF")
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    results = anyio.run(run, args, backend=args.loop)
    print(f"loop={args.loop}; seconds and files/s are the median of the rounds, best files/s beside")
    print(f"{'corpus':<22} {'path':<38} {'conc':>4} {'files':>5} {'ok':>4} {'refused':>7} {'rounds':>6} "
          f"{'seconds':>8} {'files/s':>8} {'best':>7} {'vs direct x1':>12}")
    baseline = {r[0].corpus: r[0].files / statistics.median(x.seconds for x in r) for r in results
                if r[0].path == "direct svc.ingest" and r[0].concurrency == 1}
    for rounds in results:
        first = rounds[0]
        seconds = statistics.median(r.seconds for r in rounds)
        rate, best = first.files / seconds, first.files / min(r.seconds for r in rounds)
        ratio = f"{rate / baseline[first.corpus]:.2f}x" if first.corpus in baseline and "upload" not in first.path \
            else "-"
        print(f"{first.corpus:<22} {first.path:<38} {first.concurrency:>4} {first.files:>5} {first.ingested:>4} "
              f"{first.refused:>7} {len(rounds):>6} {seconds:>8.2f} {rate:>8.1f} {best:>7.1f} {ratio:>12}")


if __name__ == "__main__":
    main()
