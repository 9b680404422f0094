"""The main job: start the embedded database, migrate, ingest a folder of Markdown (with a
progress bar), print what was ingested, what was refused and why, and the chunk sizes; then run
one turn for a question — its rendered, cited <knowledge> block and the trace committed with it —
and print the health check.

    knowledge-demo FOLDER [--question TEXT]
    bash scripts/main.sh [FOLDER] [--question TEXT]   # default: ../shared/corpus/docs-etcd, else examples/docs

Ingesting the same folder again finds every document already there (document ids are derived
from the tenant and the file's path), so the job can be re-run.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from knowledge.core.prepare import IngestRequest
from knowledge.core.turn import TurnRequest
from knowledge.errors import IngestRefused, KnowledgeError
from knowledge.models import (
    ArtifactOrigin,
    KnowledgeDocument,
    KnowledgeQuery,
    Principal,
    TrustLevel,
    Viewer,
    Visibility,
)
from knowledge.service import KnowledgeService

TENANT = "demo"
MEDIA_TYPES = {".md": "text/markdown", ".markdown": "text/markdown", ".txt": "text/plain"}


async def _ingest_folder(svc: KnowledgeService, principal: Principal, folder: Path, files: list[Path],
                         progress: Progress, outcomes: dict[str, int], tokens: list[int]) -> int:
    """Put every file (as an upload that expires), ingest them together (`ingest_many`: the next
    documents prepared while the server writes a group), count the outcomes; return the bytes."""
    task = progress.add_task("reading", total=len(files))
    requests: list[IngestRequest] = []
    size = 0
    for path in files:
        data = await anyio.Path(path).read_bytes()
        size += len(data)
        ref = await svc.put_artifact(TENANT, data, media_type=MEDIA_TYPES[path.suffix.lower()],
                                     origin=ArtifactOrigin.UPLOAD, trust=TrustLevel.USER, file_name=path.name,
                                     expires_at=datetime.now(UTC) + timedelta(hours=1))
        rel = str(path.relative_to(folder))
        requests.append(IngestRequest(
            source=ref, title=rel, visibility=Visibility.TENANT, principal=principal, origin_trust=TrustLevel.USER,
            document_id=uuid.uuid5(uuid.NAMESPACE_URL, f"knowledge-demo:{TENANT}:{rel}")))
        progress.advance(task)
    progress.update(task, description="ingesting", completed=0)
    try:
        results = await svc.ingest_many(requests, on_done=lambda _i, _o: progress.advance(task))
    finally:  # the uploads were only the vehicle
        await svc.expire_artifacts(TENANT, [r.source.artifact_id for r in requests])
    for r, outcome in zip(requests, results, strict=True):
        reason = outcome.reason if isinstance(outcome, KnowledgeError) else "ingested"
        outcomes[reason] = outcomes.get(reason, 0) + 1
        if isinstance(outcome, IngestRefused) and reason != "document_exists":
            print(f"  refused {r.title}: {reason}: {outcome.message}")
        elif isinstance(outcome, Exception) and not isinstance(outcome, IngestRefused):
            raise outcome
    new = [o.document_id for o in results if isinstance(o, KnowledgeDocument)]
    for document_id in new:
        detail = await svc.document(document_id, tenant_id=TENANT)
        tokens.extend(c.tokens for c in (detail.chunks if detail is not None else []))
    return size


async def run(folder: Path, files: list[Path], question: str) -> None:
    principal = Principal(tenant_id=TENANT, principal_id="operator", scopes=frozenset({"knowledge.write"}))
    async with KnowledgeService.open() as svc:
        server = (await svc.health()).server_start
        if server is not None:
            kind = "cold (initdb)" if server.cold_start else ("joined running" if server.reused else "warm")
            print(f"embedded PostgreSQL 18 at {server.pgdata}: {kind} start in {server.start_seconds:.2f}s")
        print(f"ingesting {len(files)} files from {folder}")
        outcomes: dict[str, int] = {}
        tokens: list[int] = []
        began = time.perf_counter()
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeRemainingColumn(), transient=True)
        with progress:
            size = await _ingest_folder(svc, principal, folder, files, progress, outcomes, tokens)
        elapsed = time.perf_counter() - began
        print(f"outcomes: {outcomes}  ({size / 1e6:.2f} MB in {elapsed:.2f}s, {size / 1e6 / elapsed:.2f} MB/s)")
        if tokens:
            q = statistics.quantiles(tokens, n=4, method="inclusive")
            print(f"new chunks: {len(tokens)}; tokens min {min(tokens)} p25 {q[0]:.0f} median {q[1]:.0f} "
                  f"p75 {q[2]:.0f} max {max(tokens)}")
        stats = await svc.ingest_stats(TENANT)
        print(f"corpus (tenant {TENANT}): {stats.live_chunks} live chunks, instruction-like rate "
              f"{stats.instruction_like_rate:.2%}, accepted {stats.accepted}, refused {stats.refused}")
        # One turn: retrieve, budget Region B, render, and commit the trace with the block.
        query = KnowledgeQuery(tenant_id=TENANT, principal_id="operator", text=question)
        began = time.perf_counter()
        turn = await svc.turn(TurnRequest(query=query, region_tokens=5000, session_id="demo", retrieve=True))
        took = (time.perf_counter() - began) * 1000
        print(f"\nQ: {question}  ({len(turn.passages)} passages, block and trace in {took:.1f} ms)")
        print(turn.block or "(no passage)")
        view = await svc.trace_view(turn.trace.trace_id, viewer=Viewer(tenant_id=TENANT, principal_id="operator"))
        print(view.render() if view is not None else "(no trace)")
        health = await svc.health()
        print(f"health: ok={health.ok} backend={health.backend} server={health.server_version} "
              f"schema={health.schema_version}/{health.schema_expected} latency={health.latency_ms:.1f}ms")
        if health.semantic is not None and health.semantic.backlog is not None:
            # Ingest commits without vectors; they follow in the background (and the next run goes on).
            print(health.semantic.backlog.describe())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a folder of Markdown and text files")
    parser.add_argument("--question", default="How do I restore an etcd cluster from a snapshot?")
    args = parser.parse_args()
    folder = args.folder.resolve()
    if not folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in MEDIA_TYPES and p.is_file())
    anyio.run(run, folder, files, args.question, backend="trio")


if __name__ == "__main__":
    main()
