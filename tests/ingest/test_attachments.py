"""Owner-sent attachments (ADR-0120): marking, upload inspection, the fixed request, upload order,
one document per file, refusals, retries, and conversation deletion through the cascade."""

from __future__ import annotations

import sys
import uuid

import anyio
import pytest

from knowledge.errors import DatabaseUnavailable, ExtractionRefused, IngestRefused, ParserFailure
from knowledge.ingest.attachments import (
    ATTACHMENT_NAMESPACE,
    AttachmentQueue,
    SchedulerActor,
    SurfaceActor,
    attachment_document_id,
    mark_attachments,
    upload_attachment,
)
from knowledge.maintenance.worker import transient_reason
from knowledge.models import (
    ArtifactOrigin,
    AttachmentState,
    Authority,
    DeletedChunk,
    KnowledgeQuery,
    Sensitivity,
    TrustLevel,
    Visibility,
)
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.store.faults import Faults
from tests.conftest import open_sql
from tests.helpers.attachments import (
    PDFS,
    Gate,
    footprint,
    markdown,
    owner,
    secret_text,
    status,
    upload,
    wait_for,
    worker,
)
from tests.helpers.kit import Kit
from tests.helpers.progress import hang_detector

pytestmark = pytest.mark.anyio


# --- Marking -------------------------------------------------------------------------------------------------


async def test_marking_rules(service: KnowledgeService, kit: Kit, sql: Database, tenant: str) -> None:
    """Only the principal holding knowledge.write marks, only uploads of supported types are marked,
    and only marked attachments become documents."""
    md = await upload(service, tenant, markdown("Upgrade"), "upgrade.md")
    txt = await upload(service, tenant, b"Plain notes about the upgrade window and its rollback.", "notes.txt",
                       "text/plain; charset=utf-8")
    png = await upload(service, tenant, b"\x89PNG\r\n\x1a\n not really", "photo.png", "image/png")
    tool_output = await service.put_artifact(tenant, markdown("Generated"), media_type="text/markdown",
                                              origin=ArtifactOrigin.TOOL_OUTPUT)
    by_surface = await upload(service, tenant, markdown("From a surface"), "surface.md")
    by_schedule = await upload(service, tenant, markdown("From a schedule"), "schedule.md")
    by_reader = await upload(service, tenant, markdown("From a reader"), "reader.md")

    surface = await service.mark_attachments(SurfaceActor(tenant_id=tenant, surface_id="slack"),
                                             [by_surface.artifact_id], conversation_id="c1")
    scheduler = await service.mark_attachments(SchedulerActor(tenant_id=tenant, schedule_id="nightly"),
                                               [by_schedule.artifact_id], conversation_id="c1")
    reader = await service.mark_attachments(owner(tenant, write=False), [by_reader.artifact_id],
                                            conversation_id="c1")
    missing = uuid.uuid4()
    principal = await service.mark_attachments(
        owner(tenant), [md.artifact_id, txt.artifact_id, png.artifact_id, tool_output.artifact_id, missing],
        conversation_id="c1")

    assert [(m.state, m.reason) for m in surface] == [(None, "actor_not_principal")]
    assert [(m.state, m.reason) for m in scheduler] == [(None, "actor_not_principal")]
    assert [(m.state, m.reason) for m in reader] == [(None, "missing_scope")]
    assert [(m.artifact_id, m.state, m.reason) for m in principal] == [
        (md.artifact_id, AttachmentState.PENDING, None),
        (txt.artifact_id, AttachmentState.PENDING, None),
        (png.artifact_id, AttachmentState.AWAITING_EXTRACTOR, "unsupported_media_type"),  # kept for an extractor
        (tool_output.artifact_id, None, "not_an_upload"),
        (missing, None, "artifact_not_found"),
    ]
    # Sending again does not mark twice; every attachment passed belongs to the conversation.
    again = await service.mark_attachments(owner(tenant), [md.artifact_id], conversation_id="c1")
    assert [(m.state, m.reason) for m in again] == [(AttachmentState.PENDING, "already_marked")]
    for ref in (md, png, by_surface, by_schedule, by_reader):
        assert (await status(service, tenant, ref)).conversation_id == "c1"

    assert await worker(kit, tenant).drain() == 2
    assert (await footprint(sql, tenant))["documents"] == 2
    for ref in (md, txt):
        seen = await status(service, tenant, ref)
        assert seen.state is AttachmentState.INGESTED and seen.attached_by == "owner"
        assert seen.trust is TrustLevel.EXTERNAL_UNTRUSTED  # the file itself stays untrusted
    assert (await status(service, tenant, png)).state is AttachmentState.AWAITING_EXTRACTOR
    for ref in (by_surface, by_schedule, by_reader):
        assert (await status(service, tenant, ref)).state is None


async def test_pdf_upload_inspection_is_kept_on_the_artifact(service: KnowledgeService, kit: Kit, sql: Database,
                                                             tenant: str) -> None:
    """A PDF is inspected at upload; the marker stays on the artifact, and an encrypted PDF is
    recorded refused when marked, never ingested."""
    good = await upload(service, tenant, await anyio.Path(PDFS / "pypdf__crazyones.pdf").read_bytes(),
                        "crazyones.pdf", "application/pdf")
    locked = await upload(service, tenant, await anyio.Path(PDFS / "pypdf__r2-user-password.pdf").read_bytes(),
                          "locked.pdf", "application/pdf")
    marked_good = await status(service, tenant, good)
    assert marked_good.inspection is not None and marked_good.inspection["ok"] is True
    assert marked_good.inspection["pages"] == 1 and marked_good.inspection["encrypted"] is False
    assert (await status(service, tenant, locked)).inspection == {"ok": False, "reason": "pdf_encrypted",
                                                                  "transient": False}

    marks = await service.mark_attachments(owner(tenant), [good.artifact_id, locked.artifact_id],
                                           conversation_id="c1")
    assert [(m.state, m.reason) for m in marks] == [(AttachmentState.PENDING, None),
                                                    (AttachmentState.REFUSED, "pdf_encrypted")]
    assert await worker(kit, tenant).drain() == 1
    done = await status(service, tenant, good)
    assert done.state is AttachmentState.INGESTED
    assert (await status(service, tenant, locked)).attempts == 0
    row = await sql.fetchrow(
        "SELECT title, media_type FROM knowledge_documents WHERE tenant_id = $1 AND document_id = $2",
        tenant, done.document_id)
    assert row is not None and (row["title"], row["media_type"]) == ("crazyones.pdf", "application/pdf")


# --- The worker's request, order, and one document per file ---------------------------------------------------


async def test_upload_order_and_the_fixed_request(service: KnowledgeService, kit: Kit, sql: Database,
                                                  tenant: str) -> None:
    """Attachments are taken in upload order (not marking order) and ingested with the fixed request."""
    names = ["third.md", "second.md", "first.md"]
    refs = [await upload(service, tenant, markdown(name.removesuffix(".md").title()), name) for name in names]
    await service.mark_attachments(owner(tenant), [r.artifact_id for r in reversed(refs)], conversation_id="c1")
    assert await worker(kit, tenant).drain() == 3

    rows = await sql.fetch(
        """SELECT d.document_id, d.title, d.visibility, d.authority, d.sensitivity, d.ingested_by_principal_id,
                  s.trust, s.origin
           FROM knowledge_documents d JOIN artifacts s
             ON s.tenant_id = d.tenant_id AND s.artifact_id = d.source_artifact_id
           WHERE d.tenant_id = $1 ORDER BY d.ingested_at""", tenant)
    assert [r["title"] for r in rows] == names  # upload order
    for ref, row in zip(refs, rows, strict=True):
        assert row["document_id"] == attachment_document_id(tenant, "owner", ref.sha256)
        assert row["document_id"] == uuid.uuid5(ATTACHMENT_NAMESPACE, f'["{tenant}", "owner", "{ref.sha256}"]')
        assert (row["visibility"], row["authority"], row["sensitivity"]) == (
            Visibility.PRINCIPAL.value, Authority.PRINCIPAL_SUPPLIED.value, Sensitivity.INTERNAL.value)
        assert row["ingested_by_principal_id"] == "owner"
        assert (row["origin"], row["trust"]) == ("KNOWLEDGE_SOURCE", "EXTERNAL_UNTRUSTED")
    # principal visibility: the owner finds it, another principal of the tenant does not.
    mine = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="owner", text="drain upgrade rejoin"))
    theirs = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="other", text="drain upgrade rejoin"))
    assert mine and not theirs


async def test_the_same_file_sent_twice_is_one_document(service: KnowledgeService, kit: Kit, sql: Database,
                                                        tenant: str) -> None:
    """One worker claims both in one batch: one document, one source copy, one event."""
    data = markdown("Runbook")
    first = await upload(service, tenant, data, "runbook.md")
    second = await upload(service, tenant, data, "runbook (copy).md")
    await service.mark_attachments(owner(tenant), [first.artifact_id], conversation_id="c1")
    await service.mark_attachments(owner(tenant), [second.artifact_id], conversation_id="c2")
    assert await worker(kit, tenant).drain() == 2
    a, b = await status(service, tenant, first), await status(service, tenant, second)
    assert a.state is b.state is AttachmentState.INGESTED
    assert a.document_id == b.document_id is not None
    written = await footprint(sql, tenant)
    assert (written["documents"], written["ingested_events"], written["sources"]) == (1, 1, 1)


async def test_the_same_file_sent_twice_at_once_is_one_document(service: KnowledgeService, sql: Database,
                                                                tenant: str) -> None:
    """Two workers ingest the same file at the same moment: the first holds its uncommitted document
    until the second is seen waiting on the document's key; the second then loses the race on that key
    and records the winner's document."""
    data = markdown("Failover")
    refs = [await upload(service, tenant, data, f"failover-{i}.md") for i in range(2)]
    gate = Gate("before_commit", hold=1)
    await service.mark_attachments(owner(tenant), [r.artifact_id for r in refs], conversation_id="c1")

    async def second_waits_on_the_key() -> bool:
        return bool(await sql.fetchval(
            """SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
               AND wait_event_type = 'Lock' AND query LIKE '%knowledge_documents%'"""))

    # the workers' kit has a pool of its own: the two ingests hold both of a test pool's connections
    async with open_sql(service.dsn) as db, anyio.create_task_group() as tg:
        kit = Kit(db, faults=Faults(ingest_step=gate))
        for w in [worker(kit, tenant, batch=1), worker(kit, tenant, batch=1)]:
            tg.start_soon(w.drain)
        with hang_detector():
            await gate.reached.wait()
        await wait_for(second_waits_on_the_key)
        gate.opened.set()
    states = [await status(service, tenant, r) for r in refs]
    assert [s.state for s in states] == [AttachmentState.INGESTED] * 2
    assert states[0].document_id == states[1].document_id
    assert [s.attempts for s in states] == [1, 1]
    assert (await footprint(sql, tenant))["documents"] == 1
    stats = await service.ingest_stats(tenant)
    assert stats.accepted == 1 and stats.refused == {"document_exists": 1}  # the race really happened


# --- Outcomes ------------------------------------------------------------------------------------------------


async def test_a_secret_bearing_attachment_is_refused_and_never_retried(service: KnowledgeService, kit: Kit,
                                                                        sql: Database, tenant: str) -> None:
    ref = await upload(service, tenant, (await anyio.to_thread.run_sync(secret_text)).encode(), "config-notes.md")
    await service.mark_attachments(owner(tenant), [ref.artifact_id], conversation_id="c1")
    assert await worker(kit, tenant).drain() == 1
    refused = await status(service, tenant, ref)
    assert (refused.state, refused.reason, refused.attempts) == (AttachmentState.REFUSED, "secret_detected", 1)
    assert [h["outcome"] for h in refused.history] == ["refused"]
    assert await footprint(sql, tenant) == {"documents": 0, "chunks": 0, "index_rows": 0, "postings": 0,
                                            "sources": 0, "ingested_events": 0}
    assert await worker(kit, tenant).drain() == 0  # never retried
    assert (await status(service, tenant, ref)).attempts == 1
    assert (await service.artifact_ref(tenant, ref.artifact_id)).sha256 == ref.sha256  # untouched


async def test_a_transient_failure_twice_then_cleared_ends_ingested(service: KnowledgeService, kit: Kit,
                                                                    sql: Database, tenant: str) -> None:
    ref = await upload(service, tenant, markdown("Backup"), "backup.md")
    kit.faults.ingest_step = Gate("before_commit", fail=2, error=lambda: DatabaseUnavailable(message="down"))
    kit.faults.retry_delays = ()  # an outage longer than the service's own retries
    await service.mark_attachments(owner(tenant), [ref.artifact_id], conversation_id="c1")
    w = worker(kit, tenant)
    assert await w.drain() == 3
    done = await status(service, tenant, ref)
    assert (done.state, done.attempts, done.reason) == (AttachmentState.INGESTED, 3, None)
    assert [(h["outcome"], h["reason"]) for h in done.history] == [
        ("retry", "database_unavailable"), ("retry", "database_unavailable"), ("ingested", None)]
    assert (w.stats.retried, w.stats.ingested) == (2, 1)
    assert (await footprint(sql, tenant))["documents"] == 1


async def test_a_transient_failure_four_times_ends_failed_after_three_retries(service: KnowledgeService, kit: Kit,
                                                                             sql: Database, tenant: str) -> None:
    ref = await upload(service, tenant, markdown("Restore"), "restore.md")
    kit.faults.ingest_step = Gate("before_commit", fail=4, error=lambda: DatabaseUnavailable(message="down"))
    kit.faults.retry_delays = ()  # an outage longer than the service's own retries
    await service.mark_attachments(owner(tenant), [ref.artifact_id], conversation_id="c1")
    assert await worker(kit, tenant).drain() == 4
    failed = await status(service, tenant, ref)
    assert (failed.state, failed.attempts, failed.reason) == (AttachmentState.FAILED, 4, "database_unavailable")
    assert [h["outcome"] for h in failed.history] == ["retry", "retry", "retry", "failed"]
    assert (await footprint(sql, tenant))["documents"] == 0
    kit.faults.ingest_step = None
    assert await worker(kit, tenant).drain() == 0  # failed is final


async def test_a_parser_killed_by_the_pool_is_transient(kit: Kit, tenant: str) -> None:
    """The parser pool's own failure (pdf_killed) is retried, not recorded as a refusal. The upload,
    marking and worker run over a kit (no service: its parser pool, private, would keep spare real
    children on this loop that a job takes before spawning the kit's stand-in)."""
    kit.parser_pool.command = (sys.executable, "-m", "tests.helpers.fake_child")  # "crash": SIGKILL itself
    ref = await upload_attachment(kit.db, kit.parser_pool.inspect, tenant, b"crash", media_type="application/pdf",
                                  file_name="report.pdf", max_bytes=kit.max_bytes)
    queue = AttachmentQueue(kit.db)
    uploaded = await queue.status(tenant, ref.artifact_id)
    assert uploaded is not None
    assert uploaded.inspection == {"ok": False, "reason": "pdf_killed", "transient": True}
    await mark_attachments(kit.db, owner(tenant), [ref.artifact_id], conversation_id="c1",
                           media_types=kit.extractors.media_types())
    assert await worker(kit, tenant, max_retries=1).drain() == 2
    failed = await queue.status(tenant, ref.artifact_id)
    assert failed is not None
    assert (failed.state, failed.attempts, failed.reason) == (AttachmentState.FAILED, 2, "pdf_killed")


def test_transient_classification() -> None:
    assert transient_reason(DatabaseUnavailable()) == "database_unavailable"
    assert transient_reason(ParserFailure("pdf_timeout")) is None  # the file's answer (its own progress judged it)
    assert transient_reason(ParserFailure("html_killed")) == "html_killed"
    assert transient_reason(IngestRefused("pdf_killed")) == "pdf_killed"
    assert transient_reason(TimeoutError()) == "timeout"
    assert transient_reason(ConnectionResetError()) == "database_unavailable"
    assert transient_reason(ExceptionGroup("x", [ParserFailure("pdf_killed"), DatabaseUnavailable()])) == "pdf_killed"
    assert transient_reason(ExceptionGroup("x", [ParserFailure("pdf_killed"), ValueError()])) is None
    assert transient_reason(IngestRefused("secret_detected")) is None
    assert transient_reason(ExtractionRefused("pdf_encrypted")) is None
    assert transient_reason(ValueError()) is None


# --- Conversation deletion -------------------------------------------------------------------------------------


async def test_deleting_the_conversation_deletes_its_documents(service: KnowledgeService, kit: Kit, sql: Database,
                                                               tenant: str) -> None:
    """Documents, chunks, index rows, postings and bytes go with the conversation; a file also sent in
    a conversation that lives on stays until that one is deleted too."""
    only_here = await upload(service, tenant, markdown("Rotation", "Rotate the keys every quarter."), "rotation.md")
    shared_data = markdown("Escalation", "Escalate to the on-call lead after fifteen minutes.")
    shared_here = await upload(service, tenant, shared_data, "escalation.md")
    shared_there = await upload(service, tenant, shared_data, "escalation.md")
    await service.mark_attachments(owner(tenant), [only_here.artifact_id, shared_here.artifact_id],
                                   conversation_id="c1")
    await service.mark_attachments(owner(tenant), [shared_there.artifact_id], conversation_id="c2")
    assert await worker(kit, tenant).drain() == 3
    rotation = (await status(service, tenant, only_here)).document_id
    chunk_ids = [r["chunk_id"] for r in await sql.fetch(
        "SELECT chunk_id FROM knowledge_chunks WHERE tenant_id = $1 AND document_id = $2", tenant, rotation)]
    assert chunk_ids and (await footprint(sql, tenant))["documents"] == 2

    gone = await service.delete_conversation(tenant, "c1")
    assert (gone.attachments, gone.documents) == (2, 1) and gone.chunks == len(chunk_ids)
    left = await footprint(sql, tenant)
    assert left["documents"] == 1  # escalation lives on in c2
    assert not await sql.fetchval(
        """SELECT count(*) FROM knowledge_chunk_index i WHERE i.tenant_id = $1 AND i.document_id = $2""",
        tenant, rotation)
    assert not await sql.fetchval(
        "SELECT count(*) FROM knowledge_postings WHERE tenant_id = $1 AND chunk_id = ANY($2::text[])",
        tenant, chunk_ids)
    assert isinstance(await service.operator_get_chunk(chunk_ids[0], tenant_id=tenant), DeletedChunk)
    assert not await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="owner", text="rotate keys"))

    await service.sweep_artifacts()
    for ref in (only_here, shared_here):
        assert await service.attachment(tenant, ref.artifact_id) is None  # bytes and row swept
    assert await service.attachment(tenant, shared_there.artifact_id) is not None

    await service.delete_conversation(tenant, "c2")
    await service.sweep_artifacts()
    assert await footprint(sql, tenant) == {"documents": 0, "chunks": 0, "index_rows": 0, "postings": 0,
                                            "sources": 0, "ingested_events": 2}
    assert not await sql.fetchval("SELECT count(*) FROM artifacts WHERE tenant_id = $1", tenant)


async def test_a_conversation_deleted_mid_ingest_leaves_no_document(service: KnowledgeService, kit: Kit,
                                                                    sql: Database, tenant: str) -> None:
    """The worker commits after the conversation's deletion committed: it finds its attachment
    withdrawn and deletes the document it made."""
    ref = await upload(service, tenant, markdown("Capacity"), "capacity.md")
    gate = Gate("before_commit", hold=1)
    kit.faults.ingest_step = gate
    await service.mark_attachments(owner(tenant), [ref.artifact_id], conversation_id="c1")
    w = worker(kit, tenant)
    async with anyio.create_task_group() as tg:
        tg.start_soon(w.drain)
        with hang_detector():
            await gate.reached.wait()
        assert (await service.delete_conversation(tenant, "c1")).attachments == 1
        gate.opened.set()
    assert w.stats.withdrawn == 1
    left = await footprint(sql, tenant)
    assert (left["documents"], left["chunks"], left["postings"]) == (0, 0, 0)
