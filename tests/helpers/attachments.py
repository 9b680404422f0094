"""Shared pieces of the attachment and worker tests: principals, uploads, workers, what was written."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from knowledge.ingest.attachments import AttachmentQueue
from knowledge.maintenance.worker import AttachmentWorker, WorkerOptions
from knowledge.models import ArtifactRef, Principal
from knowledge.service import KnowledgeService
from knowledge.store.attachment_queue import AttachmentStatus
from knowledge.store.db import Connection, Database
from tests.helpers.kit import Kit
from tests.helpers.progress import HANG_SECONDS

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
PDFS = CORPUS / "pdf"
SECRETS = CORPUS / "secrets" / "dev.jsonl.gz"

#: Options that make a test fast: no real backoff, a short idle poll.
FAST = {"poll_seconds": 0.05, "retry_base_seconds": 0.01, "retry_max_seconds": 0.05, "lease_seconds": 30.0}


def owner(tenant: str, principal_id: str = "owner", *, write: bool = True) -> Principal:
    return Principal(tenant_id=tenant, principal_id=principal_id,
                     scopes=frozenset({"knowledge.write"} if write else {"chat.send"}))


def markdown(title: str, body: str = "") -> bytes:
    body = body or (f"The {title} procedure has three steps. First drain the node, then upgrade it, "
                    "then let it rejoin the cluster and wait for the health check to pass.")
    return f"# {title}\n\n## Steps\n\n{body}\n".encode()


async def upload(svc: KnowledgeService, tenant: str, data: bytes, name: str,
                 media_type: str = "text/markdown") -> ArtifactRef:
    return await svc.upload_attachment(tenant, data, media_type=media_type, file_name=name)


def worker(kit: Kit, tenant: str, worker_id: str | None = None, **options: Any) -> AttachmentWorker:
    """An attachment worker over a kit's database and ingest (`tests.helpers.kit`: the service's parts
    are private), dedicated to ``tenant``; the kit's `Faults` are its ingest's."""
    return AttachmentWorker(AttachmentQueue(kit.db), kit.ingestor,
                            WorkerOptions(**{**FAST, "tenant_id": tenant, **options}),
                            worker_id=worker_id or f"test-{uuid.uuid4().hex[:6]}")


async def status(svc: KnowledgeService, tenant: str, ref: ArtifactRef) -> AttachmentStatus:
    found = await svc.attachment(tenant, ref.artifact_id)
    assert found is not None
    return found


async def footprint(db: Database, tenant: str) -> dict[str, int]:
    """What ingests wrote for ``tenant``: documents, chunks, index rows, postings, sources, events."""
    row = await db.fetchrow(
        """SELECT (SELECT count(*) FROM knowledge_documents WHERE tenant_id = $1) AS documents,
                  (SELECT count(*) FROM knowledge_chunks WHERE tenant_id = $1) AS chunks,
                  (SELECT count(*) FROM knowledge_chunk_index WHERE tenant_id = $1) AS index_rows,
                  (SELECT count(*) FROM knowledge_postings WHERE tenant_id = $1) AS postings,
                  (SELECT count(*) FROM artifacts WHERE tenant_id = $1 AND origin = 'KNOWLEDGE_SOURCE') AS sources,
                  (SELECT count(*) FROM knowledge_events
                   WHERE tenant_id = $1 AND event_type = 'knowledge.document.ingested') AS ingested_events""",
        tenant)
    assert row is not None
    return dict(row)


def secret_text() -> str:
    """A document from the secret-scan dev set that holds a credential."""
    with gzip.open(SECRETS, "rt", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            if record["label"] == "secret":
                return str(record["text"])
    raise AssertionError("no secret in the dev set")


class Gate:
    """A fault hook for `Faults.ingest_step` that holds ingests at ``step`` until opened, or fails
    them: ``reached`` is set once an ingest is held; ``fail`` raises that many times first."""

    def __init__(self, step: str = "before_commit", *, hold: int = 0,
                 fail: int = 0, error: Callable[[], BaseException] | None = None) -> None:
        self.step = step
        self.hold = hold
        self.fail = fail
        self.error = error
        self.reached = anyio.Event()
        self.opened = anyio.Event()
        self.calls = 0

    async def __call__(self, step: str, conn: Connection) -> None:
        if step != self.step:
            return
        self.calls += 1
        if self.fail > 0:
            self.fail -= 1
            assert self.error is not None
            raise self.error()
        if self.hold > 0:
            self.hold -= 1
            self.reached.set()
            await self.opened.wait()


async def wait_for(predicate: Callable[[], Awaitable[bool]], seconds: float = HANG_SECONDS,
                   every: float = 0.02) -> None:
    """Poll ``predicate`` until true; ``seconds`` is a hang detector, not a timing assertion."""
    with anyio.fail_after(seconds):
        while not await predicate():  # noqa: ASYNC110 - the state polled lives in the database
            await anyio.sleep(every)
