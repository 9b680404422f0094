"""Bulk ingest (`KnowledgeService.ingest_many`, issue 18 item 3): many documents at once, each
all-or-nothing; refusals in the middle of a folder leave nothing of themselves; a group that
cannot be written in one statement falls back to one document at a time; cancellation leaves only
whole documents, exactly those reported committed."""

from __future__ import annotations

import gzip
import json
import sys
import uuid
from typing import Any

import anyio
import anyio.lowlevel
import asyncpg
import pytest

from knowledge.core.prepare import IngestRequest
from knowledge.errors import CommitUnknown, ExtractionRefused, IngestRefused
from knowledge.ingest import bulk as ingest_bulk
from knowledge.ingest.ingestor import Ingestor
from knowledge.maintenance.audit import audit_storage
from knowledge.models import ArtifactRef, KnowledgeDocument, TrustLevel, Visibility
from knowledge.parsers.base import ExtractorRegistry
from knowledge.parsers.pdf import SPLIT_BYTES
from knowledge.parsers.registry import default_registry
from knowledge.parsers.text import MarkdownExtractor
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.supervisors.parser_pool import EXTRACTION_OWNER, ParserPool
from knowledge.vocabulary import Structure
from tests.conftest import open_sql
from tests.helpers.kit import Kit
from tests.helpers.progress import hang_detector
from tests.ingest.test_ingest import SECRETS, footprint, nothing_but_inputs, put, writer

pytestmark = pytest.mark.anyio


def text(n: int) -> str:
    return (f"# Guide {n}\n\nThe deploy job number {n} renders manifests and applies them in order.\n\n"
            f"## Rollback {n}\n\nRevert the release tag {n} and run the job again; wait for the rollout.\n")


def a_secret() -> str:
    if not SECRETS.exists():
        pytest.fail(f"{SECRETS} is missing") if __import__("os").environ.get("CI") else pytest.skip("no corpus")
    with gzip.open(SECRETS, "rt") as fh:
        return next(r["text"] for r in map(json.loads, fh) if r["label"] == "secret")


def request(ref: ArtifactRef, tenant: str, title: str, **kw: Any) -> IngestRequest:
    return IngestRequest(source=ref, title=title, visibility=Visibility.TENANT, principal=writer(tenant),
                         origin_trust=TrustLevel.USER, **kw)


def single_writes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Records each document written on its own (the single path's step 7) rather than in a group."""
    alone = ingest_bulk._alone
    singles: list[Any] = []

    async def counted_alone(*args: Any) -> Any:
        singles.append(args)
        return await alone(*args)

    monkeypatch.setattr(ingest_bulk, "_alone", counted_alone)
    return singles


async def whole_documents(svc: KnowledgeService, tenant: str) -> None:
    """Every stored document of ``tenant`` is whole and the term statistics equal a recount."""
    async with open_sql(svc.dsn) as db:
        audit = await audit_storage(db, None, [tenant])
    assert audit.ok, audit


async def test_a_folder_with_refusals_in_the_middle_ingests_the_rest(service: KnowledgeService, sql: Database,
                                                                     tenant: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest_bulk, "GROUP_DOCUMENTS", 4)  # several groups
    singles = single_writes(monkeypatch)
    inputs: list[tuple[bytes, str]] = [(text(n).encode(), "text/markdown") for n in range(10)]
    secret = await anyio.to_thread.run_sync(a_secret)  # a file read: not on the loop
    inputs[3] = (f"# Deploy notes\n\n## Credentials\n\n{secret}\n".encode(), "text/markdown")
    inputs[5] = (b"caf\xe9 au lait\n", "text/plain")  # not UTF-8
    inputs[7] = (b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png")
    refs = [await put(service, tenant, data, media_type=mt) for data, mt in inputs]
    reported: dict[int, Any] = {}
    outcomes = await service.ingest_many([request(r, tenant, f"doc {i}") for i, r in enumerate(refs)],
                                         on_done=reported.__setitem__)
    assert reported == dict(enumerate(outcomes))
    reasons = {i: o.reason for i, o in enumerate(outcomes) if isinstance(o, IngestRefused)}
    assert reasons == {3: "secret_detected", 5: "undecodable", 7: "unsupported_media_type"}
    docs = [o for o in outcomes if isinstance(o, KnowledgeDocument)]
    assert len(docs) == 7 and all(d.version == 1 for d in docs)
    assert singles == []  # every group was written in one statement
    found = await footprint(service, tenant)
    assert (found["documents"], found["chunk_sets"], found["events"], found["sources"]) == (7, 7, 7, 7)
    stored = {r["document_id"] for r in await sql.fetch(
        "SELECT document_id FROM knowledge_documents WHERE tenant_id = $1", tenant)}
    assert stored == {d.document_id for d in docs}
    stats = await service.ingest_stats(tenant)
    assert stats.accepted == 7
    assert stats.refused == {"secret_detected": 1, "undecodable": 1, "unsupported_media_type": 1}
    await whole_documents(service, tenant)
    # Searchable like any ingested document, and the same chunks as the single path would write.
    single = await service.ingest(await put(service, f"{tenant}-1", text(0)), "doc 0", "tenant",
                                  writer(f"{tenant}-1"), origin_trust=TrustLevel.USER)

    async def chunks(t: str, document_id: uuid.UUID) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await sql.fetch(
            """SELECT c.ordinal, c.heading_path, c.text, c.tokens, c.content_sha256, i.tsv::text, i.dl
               FROM knowledge_chunks c JOIN knowledge_chunk_index i USING (tenant_id, chunk_id)
               WHERE c.tenant_id = $1 AND c.document_id = $2 ORDER BY c.ordinal""", t, document_id)]

    assert await chunks(tenant, docs[0].document_id) == await chunks(f"{tenant}-1", single.document_id)


async def test_a_group_that_cannot_be_written_at_once_falls_back_to_one_at_a_time(service: KnowledgeService,
                                                                                tenant: str) -> None:
    first = await service.ingest(await put(service, tenant, text(99)), "old", "tenant", writer(tenant),
                                 origin_trust=TrustLevel.USER)
    refs = [await put(service, tenant, text(n)) for n in range(5)]
    requests = [request(r, tenant, f"doc {i}") for i, r in enumerate(refs)]
    requests[2] = request(refs[2], tenant, "taken", document_id=first.document_id)  # that id exists
    outcomes = await service.ingest_many(requests)
    assert isinstance(outcomes[2], IngestRefused), outcomes[2] and outcomes[2].reason == "document_exists"
    assert all(isinstance(o, KnowledgeDocument) for i, o in enumerate(outcomes) if i != 2)
    assert (await footprint(service, tenant))["documents"] == 5
    await whole_documents(service, tenant)
    # The same requests again (same ids, same bytes): nothing is written twice, and nothing is
    # reported as ingested that was not.
    again = await service.ingest_many([request(r.source, tenant, r.title, document_id=o.document_id)
                                       for r, o in zip(requests, outcomes, strict=True)
                                       if isinstance(o, KnowledgeDocument)])
    assert [getattr(o, "reason", None) for o in again] == ["document_exists"] * 4
    assert (await footprint(service, tenant))["documents"] == 5


async def test_cancellation_mid_batch_leaves_only_whole_documents(service: KnowledgeService, sql: Database,
                                                                  tenant: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller is cancelled as the first group commits (from ``on_done``, no timer): that group
    stays, reported; a group whose COMMIT was already in flight on the other writer stays too, and
    is reported; whatever else was under way leaves nothing."""
    monkeypatch.setattr(ingest_bulk, "GROUP_DOCUMENTS", 3)
    refs = [await put(service, tenant, text(n)) for n in range(9)]
    reported: dict[int, Any] = {}
    caller = anyio.CancelScope()

    def on_done(index: int, outcome: Any) -> None:
        reported[index] = outcome
        caller.cancel()

    with caller:
        await service.ingest_many([request(r, tenant, f"doc {i}") for i, r in enumerate(refs)], on_done=on_done)
    assert caller.cancelled_caught
    committed = {o.document_id for o in reported.values() if isinstance(o, KnowledgeDocument)}
    assert len(committed) in (3, 6), reported  # whole groups: one, or two with the other writer's
    stored = {r["document_id"] for r in await sql.fetch(
        "SELECT document_id FROM knowledge_documents WHERE tenant_id = $1", tenant)}
    assert stored == committed
    await whole_documents(service, tenant)
    assert nothing_but_inputs(await footprint(service, f"{tenant}-none"))


@pytest.mark.parametrize("after", ["in", "not_in", "cannot_ask"])
async def test_a_group_whose_commit_lost_its_answer_is_resolved_whole(service: KnowledgeService, sql: Database,
                                                                      tenant: str, monkeypatch: pytest.MonkeyPatch,
                                                                      after: str) -> None:
    """The first group's COMMIT loses its answer. It took effect (``in``): each document is reported
    committed, nothing is written twice. The connection died first (``not_in``): the group is written
    one document at a time. It took effect but the database cannot be asked since (``cannot_ask``):
    each of its documents is `CommitUnknown` — never reported as not written — and is in, whole."""
    monkeypatch.setattr(ingest_bulk, "GROUP_DOCUMENTS", 3)
    monkeypatch.setattr(ingest_bulk, "WRITERS", 1)  # groups in order: the first is the one that loses its answer
    service.faults.retry_delays = (0.01, 0.02)
    singles = single_writes(monkeypatch)
    backend: list[int] = []

    async def hook(at: str, conn: Any) -> None:
        if at == "before_commit" and not backend:
            backend.append(await conn.fetchval("SELECT pg_backend_pid()"))
        elif at == "commit" and after == "not_in" and len(backend) == 1:  # COMMIT goes to a dead connection
            backend.append(await sql.fetchval("SELECT pg_terminate_backend($1)", backend[0]))
            await anyio.sleep(0.2)  # (the backend is gone before COMMIT is sent)
        elif at == "after_commit" and after != "not_in" and len(backend) == 1:
            backend.append(0)
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")
        elif at == "resolve" and after == "cannot_ask":  # did it take effect? the database cannot be asked
            raise asyncpg.ConnectionDoesNotExistError("the server is gone")

    service.faults.ingest_step = hook
    refs = [await put(service, tenant, text(n)) for n in range(6)]
    requests = [request(r, tenant, f"doc {i}", document_id=uuid.uuid4()) for i, r in enumerate(refs)]
    outcomes = await service.ingest_many(requests)
    assert len(backend) == 2
    stored = {r["document_id"] for r in await sql.fetch(
        "SELECT document_id FROM knowledge_documents WHERE tenant_id = $1", tenant)}
    assert stored == {r.document_id for r in requests}  # each once (an id is never written twice)
    first, rest = outcomes[:3], outcomes[3:]
    assert all(isinstance(o, KnowledgeDocument) for o in rest)
    if after == "cannot_ask":
        assert [type(o) for o in first] == [CommitUnknown] * 3
        assert all(str(r.document_id) in o.message for r, o in zip(requests, first, strict=False))
        assert singles == []
    else:
        assert [o.document_id for o in first if isinstance(o, KnowledgeDocument)] == [
            r.document_id for r in requests[:3]]
        assert len(singles) == (3 if after == "not_in" else 0)
    stats = await service.ingest_stats(tenant)
    assert (stats.accepted, stats.failed) == (6, {})
    await whole_documents(service, tenant)


class _Counting:
    """An extractor that records how many of its extractions run at once; with ``concurrency`` 2 it
    holds each until two are in (so one preparer at a time would hang: the caller's bound fails)."""

    structure = "plain"
    version = ""

    def __init__(self, media_type: str, concurrency: int) -> None:
        self.media_type, self.concurrency = media_type, concurrency
        self.inside = self.most = 0
        self.both_in = anyio.Event()
        self.owners: set[str | None] = set()  # whom the ingestor said each extraction was for

    def media_types(self) -> set[str]:
        return {self.media_type}

    async def extract(self, source: Any, media_type: str) -> str:
        chunks = [chunk async for chunk in source]
        self.owners.add(EXTRACTION_OWNER.get())
        self.inside += 1
        self.most = max(self.most, self.inside)
        if self.inside == 2:
            self.both_in.set()
        if self.concurrency > 1:
            await self.both_in.wait()
        await anyio.lowlevel.checkpoint()
        self.inside -= 1
        return b"".join(chunks).decode()


@pytest.mark.parametrize("concurrency", [1, 2])
async def test_requests_are_prepared_as_many_at_once_as_their_extractors_allow(
        service: KnowledgeService, kit: Kit, tenant: str, concurrency: int) -> None:
    """In-process extraction (concurrency 1) runs one at a time; an extractor that parses in child
    processes (concurrency 2, as PDFs do) gets two preparations at once."""
    extractor = _Counting("application/x-counted", concurrency)
    ingestor = Ingestor(kit.db, kit.artifacts, ExtractorRegistry([extractor]))
    refs = [await put(service, tenant, text(n).encode(), "application/x-counted") for n in range(6)]
    with hang_detector():  # a hang detector: concurrency 2 waits for a second preparation
        outcomes = await ingest_bulk.ingest_many(ingestor, [request(r, tenant, f"G{i}") for i, r in enumerate(refs)])
    assert all(isinstance(o, KnowledgeDocument) for o in outcomes)
    assert extractor.most == concurrency
    assert extractor.owners == {tenant} and EXTRACTION_OWNER.get() is None  # the pool's turns, then reset


async def test_a_pdf_whose_page_range_fails_is_that_files_outcome_and_the_rest_are_ingested(
        service: KnowledgeService, kit: Kit, tenant: str) -> None:
    """Five files, one a large PDF whose second page range's child dies (a stand-in child,
    `tests.supervisors.paced_child`): it is refused ``pdf_killed`` — one typed refusal, not an
    exception group, the other range's child reaped — and the four others are ingested."""
    pool = ParserPool(command=(sys.executable, "-m", "tests.supervisors.paced_child"))
    ingestor = Ingestor(kit.db, kit.artifacts, default_registry(pool))

    def large_pdf(**parts: object) -> bytes:
        return json.dumps({"pages": 100, **parts}).encode().ljust(SPLIT_BYTES + 1)

    inputs = [(text(n).encode(), "text/markdown") for n in range(5)]
    inputs[2] = (large_pdf(ranges={"0": "block", "50": "crash"}), "application/pdf")
    refs = [await put(service, tenant, data, media_type=mt) for data, mt in inputs]
    outcomes = await ingest_bulk.ingest_many(ingestor, [request(r, tenant, f"file {i}") for i, r in enumerate(refs)])
    failed = outcomes[2]
    assert isinstance(failed, IngestRefused) and failed.reason == "pdf_killed", failed
    assert "died" in failed.message
    assert [i for i, o in enumerate(outcomes) if isinstance(o, KnowledgeDocument)] == [0, 1, 3, 4]
    assert (await service.ingest_stats(tenant)).refused == {"pdf_killed": 1}
    # It was split (nobody else waited for a slot): one range died, the other was cancelled and reaped.
    assert sorted((r.op, r.outcome) for r in pool.history) == [
        ("extract", "cancelled"), ("extract", "pdf_killed"), ("inspect", "ok")]
    assert pool.live == set()
    await whole_documents(service, tenant)


class _Grouped:
    """An extractor whose refusal comes wrapped in an exception group (as a task group wraps it)."""

    structure: Structure = "plain"
    version = ""
    concurrency = 1

    def media_types(self) -> set[str]:
        return {"application/x-grouped"}

    async def extract(self, source: Any, media_type: str) -> str:
        raise ExceptionGroup("a task group's", [ExtractionRefused("pdf_timeout", "passed its budget")])


async def test_a_refusal_wrapped_in_an_exception_group_is_still_that_files_refusal(
        service: KnowledgeService, kit: Kit, tenant: str) -> None:
    """On both paths: the preparation (`Ingestor.prepare_request`) turns it into the ingest's refusal."""
    ingestor = Ingestor(kit.db, kit.artifacts, ExtractorRegistry([_Grouped(), MarkdownExtractor()]))
    refs = [await put(service, tenant, b"x", "application/x-grouped"), await put(service, tenant, text(1))]
    outcomes = await ingest_bulk.ingest_many(ingestor, [request(r, tenant, f"file {i}") for i, r in enumerate(refs)])
    assert isinstance(outcomes[0], IngestRefused) and outcomes[0].reason == "pdf_timeout"
    assert isinstance(outcomes[1], KnowledgeDocument)
    with pytest.raises(IngestRefused) as single:  # the single path: the same refusal, never a group
        await ingestor.ingest(request(refs[0], tenant, "file 0"))
    assert single.value.reason == "pdf_timeout"
