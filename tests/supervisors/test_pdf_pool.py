"""PDFs through the real parser child and the pool: every corpus file ends as it should, within its
deadline, with no process left and the service's own memory flat; and PDF ingestion end to end."""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import psutil
import pytest

from knowledge.config import Settings
from knowledge.errors import ExtractionRefused, IngestRefused
from knowledge.models import ArtifactOrigin, KnowledgeQuery, Principal, TrustLevel
from knowledge.parsers.pdf import PdfExtractor
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.supervisors.parser_pool import EXTRACT_SECONDS, ParserPool
from tests.conftest import child_processes, corpus_missing

PDFS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "pdf"
needs_corpus = pytest.mark.skipif(corpus_missing(PDFS / "MANIFEST.tsv"), reason="shared corpus not present")


def manifest() -> list[dict[str, str]]:
    if not (PDFS / "MANIFEST.tsv").exists():
        return []
    with (PDFS / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


BOMB_ENDINGS = {"pdf_killed", "pdf_timeout", "pdf_unreadable", "no_text"}


def wanted(row: dict[str, str]) -> str:
    """Our outcome for a manifest row: any encryption is refused outright (the spec), whatever a
    password-less reader could recover; unreadable files are refused; no text layer is no_text."""
    if row["category"].startswith("encrypted"):
        return "pdf_encrypted"
    return {"text": "text", "empty": "no_text", "refuse": "pdf_unreadable"}[row["expected"]]


async def outcome(pool: ParserPool, data: bytes, deadline: float) -> str:
    try:
        text = await pool.extract(data, deadline=deadline)
    except ExtractionRefused as exc:
        return exc.reason
    assert text.strip()
    return "text"


@pytest.mark.slow
@needs_corpus
@pytest.mark.trio
async def test_every_corpus_pdf_ends_as_expected_within_its_deadline() -> None:
    rows = manifest()
    assert len(rows) == 58
    me = psutil.Process()
    rss_before = me.memory_info().rss
    pool = ParserPool()
    results: dict[str, str] = {}
    queue = anyio.Semaphore(2)  # queue here, so each job's deadline is its own parse time

    async def one(row: dict[str, str]) -> None:
        async with queue:
            deadline = 60.0 if row["category"] == "large" else 20.0
            results[row["file"]] = await outcome(pool, (PDFS / row["file"]).read_bytes(), deadline)

    async with anyio.create_task_group() as tg:
        for row in rows:
            tg.start_soon(one, row)
    wrong = {}
    for row in rows:
        got, want = results[row["file"]], wanted(row)
        # A bomb must end contained and typed: text where pdfminer recovers it, else stopped by its
        # limits or refused as unreadable/textless (the manifest's "text" for some bombs is what
        # pypdf recovers, a parser this service does not run).
        if got != want and not (row["category"] == "bomb" and got in BOMB_ENDINGS):
            wrong[row["file"]] = (row["category"], want, got)
    assert wrong == {}, "\n".join(f"{k}: {v}" for k, v in wrong.items())
    assert pool.live == set() and not [c for c in me.children(recursive=True)]
    assert me.memory_info().rss - rss_before < 64 * 1024 * 1024  # the parsing happened elsewhere


@needs_corpus
@pytest.mark.anyio
async def test_pdf_ingest_end_to_end(settings: Settings, sql: Database, tenant: str) -> None:
    alice = Principal(tenant_id=tenant, principal_id="alice", scopes=frozenset({"knowledge.write"}))
    before = {p.pid for p in child_processes()}
    async with KnowledgeService.open(settings) as service:

        async def ingest(name: str) -> object:
            data = await anyio.Path(PDFS / name).read_bytes()
            ref = await service.put_artifact(tenant, data, media_type="application/pdf", origin=ArtifactOrigin.UPLOAD,
                                              trust=TrustLevel.EXTERNAL_UNTRUSTED, file_name=name)
            return await service.ingest(ref, name, "tenant", alice, origin_trust=TrustLevel.USER)

        await ingest("pypdf__pdflatex-outline.pdf")
        paths = [list(r["heading_path"]) for r in await sql.fetch(
            "SELECT heading_path FROM knowledge_chunks WHERE tenant_id = $1 ORDER BY ordinal", tenant)]
        assert paths and all(p[0] == "pypdf__pdflatex-outline.pdf" for p in paths)
        assert any(len(p) > 1 for p in paths)  # PDF chunks carry headings from the outline
        hits = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="printed text meaning"))
        assert hits
        inspection = await service.inspect_pdf(await anyio.Path(PDFS / "pypdf__pdflatex-outline.pdf").read_bytes())
        assert inspection["pages"] == 4 and inspection["encrypted"] is False

        rows = await anyio.to_thread.run_sync(manifest)  # a file read: not on the loop
        encrypted = next(r["file"] for r in rows if r["category"] == "encrypted_owner")
        image_only = next(r["file"] for r in rows if r["category"] == "image_only")
        for name, reason in [(encrypted, "pdf_encrypted"), (image_only, "no_text")]:
            with pytest.raises(IngestRefused) as refused:
                await ingest(name)
            assert refused.value.reason == reason
        health = await service.health()  # no job's child outlives its refusal
        assert health.parsers is not None and health.parsers.in_jobs == 0
    # Every parser child — each job's, and the spares the service keeps — is reaped (its pool is private).
    assert {p.pid for p in child_processes()} - before == set()


@pytest.mark.slow
@needs_corpus
@pytest.mark.trio
async def test_a_large_pdf_is_split_across_both_slots() -> None:
    large = next(r["file"] for r in manifest() if r["category"] == "large")
    data = (PDFS / large).read_bytes()
    pool = ParserPool()
    extractor = PdfExtractor(pool)

    async def source() -> AsyncIterator[bytes]:
        yield data

    text = await extractor.extract(source(), "application/pdf")
    ops = [(r.op, r.outcome) for r in pool.history]
    assert ops == [("inspect", "ok"), ("extract", "ok"), ("extract", "ok")]
    first, second = pool.history[1], pool.history[2]
    assert first.spawned_at is not None and second.spawned_at is not None and first.reaped_at is not None
    assert second.spawned_at < first.reaped_at  # the two halves ran at the same time
    assert text.count("\f") == 412  # every page once: the two halves joined
    # One budget for the document: its inspection and both ranges end by the same 60 s from the call.
    assert first.deadline == second.deadline == EXTRACT_SECONDS and first.due == second.due
    assert pool.history[0].due <= first.due and first.due - pool.history[0].asked <= EXTRACT_SECONDS
    assert pool.live == set()


@needs_corpus
@pytest.mark.trio
async def test_a_slow_bomb_is_stopped_by_its_deadline_and_a_greedy_one_by_its_memory_limit() -> None:
    slow = (PDFS / "pdfjs__bug1978317.pdf").read_bytes()  # broken xref: ~8 s of pdfminer here
    pool = ParserPool()
    with pytest.raises(ExtractionRefused) as stopped:
        await pool.extract(slow, deadline=2.0)
    assert stopped.value.reason == "pdf_timeout"
    record = pool.history[-1]
    assert record.pid is not None and not psutil.pid_exists(record.pid)
    tight = ParserPool(address_space_bytes=160 * 1024 * 1024)  # below what parsing this file takes
    with pytest.raises(ExtractionRefused) as limited:
        await tight.extract(slow, deadline=20.0)
    assert limited.value.reason in {"pdf_killed", "pdf_unreadable"}
    assert pool.live == set() and tight.live == set() and not psutil.Process().children(recursive=True)
