"""The maintenance worker: many workers and one result, workers stopped or killed mid-job, the
supervisor's restarts and visible crash loops, the sweeper, and the worker as a process."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from knowledge.config import Settings
from knowledge.ingest.attachments import AttachmentQueue, attachment_document_id
from knowledge.ingest.ingestor import Ingestor
from knowledge.maintenance.worker import AttachmentWorker, WorkerOptions
from knowledge.models import AttachmentState
from knowledge.parsers.base import Extractor, ExtractorRegistry
from knowledge.parsers.text import MarkdownExtractor, PlainTextExtractor
from knowledge.service import KnowledgeService
from knowledge.store.db import Connection, Database, open_bridge
from knowledge.store.faults import Faults
from tests.conftest import open_sql
from tests.helpers.attachments import (
    FAST,
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
ROOT = Path(__file__).resolve().parents[2]


def with_workers(settings: Settings, tenant: str, **extra: Any) -> Settings:
    return settings.model_copy(update={
        "attachment_workers": 1, "attachment_tenant": tenant, "attachment_poll_seconds": 0.05,
        "attachment_retry_base_seconds": 0.01, "worker_restart_base_seconds": 0.01,
        "worker_restart_max_seconds": 0.05, **extra})


# --- Many workers, one result ------------------------------------------------------------------------------------


async def test_two_workers_over_200_attachments_one_cancelled_mid_batch(service: KnowledgeService, kit: Kit,
                                                                        sql: Database, tenant: str) -> None:
    """Each of 200 attachments is ingested exactly once by two workers claiming batches of 8; the
    first worker is cancelled mid-batch (its third group's statement held inside its transaction):
    its batch rolls back whole, every claim of it is released, and the second worker ingests them."""
    refs = [await upload(service, tenant, markdown(f"Procedure {i}", f"Step {i}: restart shard {i} and verify it."),
                         f"procedure-{i:03d}.md") for i in range(200)]
    await service.mark_attachments(owner(tenant), [r.artifact_id for r in refs], conversation_id="c1")
    gate = Gate("before_commit", hold=1)
    commits = 0

    async def hold_the_third(step: str, conn: Connection) -> None:
        nonlocal commits
        if step == "before_commit":
            commits += 1
            if commits == 3:
                await gate(step, conn)

    # The first worker has a kit of its own (the same ingest, on a pool of its own), so that only its
    # ingests are held.
    second = worker(kit, tenant, "second", batch=8)

    async with open_sql(service.dsn) as db, anyio.create_task_group() as tg:
        first = worker(Kit(db, faults=Faults(ingest_step=hold_the_third)), tenant, "first", batch=8)
        with anyio.CancelScope() as first_scope:
            tg.start_soon(second.drain)
            async with anyio.create_task_group() as mine:
                mine.start_soon(first.drain)
                with hang_detector():
                    await gate.reached.wait()
                held = [r for r in refs if (await status(service, tenant, r)).lease_owner == "first"]
                first_scope.cancel()
    assert len(held) == 8 and first.stats.released == 8
    assert first.stats.claimed == 24 and first.stats.ingested == 16 and second.stats.ingested == 184

    states = [await status(service, tenant, r) for r in refs]
    assert {s.state for s in states} == {AttachmentState.INGESTED}
    assert {s.attempts for s in states} == {1}  # a released attempt is not counted
    for ref in held:
        handed_over = await status(service, tenant, ref)
        assert [(h["outcome"], h["worker"]) for h in handed_over.history] == [("released", "first"),
                                                                              ("ingested", "second")]
    assert len({s.document_id for s in states}) == 200
    written = await footprint(sql, tenant)
    assert (written["documents"], written["ingested_events"], written["sources"]) == (200, 200, 200)
    stats = await service.ingest_stats(tenant)
    assert stats.accepted == 200 and stats.refused == {} and stats.failed == {}


# --- Batches: the bulk path, settled one attachment at a time ---------------------------------------------------


async def test_a_backlog_with_refusals_settles_each_attachment_once(service: KnowledgeService, kit: Kit, sql: Database,
                                                                    tenant: str) -> None:
    """30 attachments claimed as one batch and ingested through the bulk path: a secret-bearing file,
    an undecodable one, a blank one and a second copy of a file among them. Each is settled exactly
    once, with its own outcome; the refused ones leave nothing; the copy is the first one's document."""
    names = [f"runbook-{i:02d}.md" for i in range(26)]
    data = {name: markdown(f"Runbook {i}", f"Step {i}: fail over region {i}, then page the lead.")
            for i, name in enumerate(names)}
    secret = await anyio.to_thread.run_sync(secret_text)  # a file read: not on the loop
    data |= {"secret.md": secret.encode(), "latin1.md": "Caf\xe9 r\xe9seau".encode("latin-1"),
             "blank.md": b"  \n\n\t\n", "runbook-00 (copy).md": data["runbook-00.md"]}
    order = [*names[:10], "secret.md", "latin1.md", *names[10:20], "blank.md", "runbook-00 (copy).md", *names[20:]]
    refs = {name: await upload(service, tenant, data[name], name) for name in order}
    await service.mark_attachments(owner(tenant), [r.artifact_id for r in refs.values()], conversation_id="c1")
    w = worker(kit, tenant)
    assert await w.drain() == 30 and w.stats.claimed == 30
    seen = {name: await status(service, tenant, ref) for name, ref in refs.items()}
    assert {name: (s.state, s.reason) for name, s in seen.items() if s.state is not AttachmentState.INGESTED} == {
        "secret.md": (AttachmentState.REFUSED, "secret_detected"),
        "latin1.md": (AttachmentState.REFUSED, "undecodable"),
        "blank.md": (AttachmentState.REFUSED, "no_text")}
    assert all(len(s.history) == 1 and s.attempts == 1 for s in seen.values())  # settled once, never retried
    assert seen["runbook-00 (copy).md"].document_id == seen["runbook-00.md"].document_id
    assert (w.stats.ingested, w.stats.refused, w.stats.retried, w.stats.failed) == (27, 3, 0, 0)
    written = await footprint(sql, tenant)
    assert (written["documents"], written["sources"], written["ingested_events"]) == (26, 26, 26)
    stats = await service.ingest_stats(tenant)
    assert stats.accepted == 26 and stats.failed == {}
    assert stats.refused == {"secret_detected": 1, "undecodable": 1, "no_text": 1, "document_exists": 1}


async def test_a_batch_whose_leases_are_all_lost_stops_and_leaves_nothing(service: KnowledgeService, kit: Kit,
                                                                          sql: Database, tenant: str) -> None:
    """The conversation of a whole batch is deleted while its group's statement is held: the next
    renewal finds every lease lost, the batch is cancelled (its transaction rolls back) and each
    attachment is recorded withdrawn. The gate is never opened: only the lost leases end the batch."""
    refs = [await upload(service, tenant, markdown(f"Drill {i}"), f"drill-{i}.md") for i in range(4)]
    await service.mark_attachments(owner(tenant), [r.artifact_id for r in refs], conversation_id="c1")
    gate = Gate("before_commit", hold=1)
    kit.faults.ingest_step = gate
    w = worker(kit, tenant, lease_seconds=0.3)
    with hang_detector():  # a hang detector: the gate holds the batch until something cancels it
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.drain)
            await gate.reached.wait()
            assert (await service.delete_conversation(tenant, "c1")).attachments == 4
    assert (w.stats.claimed, w.stats.withdrawn, w.stats.ingested) == (4, 4, 0)
    assert not gate.opened.is_set()
    assert await footprint(sql, tenant) == {"documents": 0, "chunks": 0, "index_rows": 0, "postings": 0,
                                            "sources": 0, "ingested_events": 0}


async def test_a_lease_lost_mid_batch_withdraws_only_that_attachment(service: KnowledgeService, kit: Kit,
                                                                     sql: Database, tenant: str) -> None:
    """One attachment of a batch loses its lease (its conversation is deleted) while the group's
    statement is held: the renewals go on for the others, the batch commits, the others are
    ingested, and that one is recorded withdrawn with its document deleted."""
    kept = [await upload(service, tenant, markdown(f"Audit {i}"), f"audit-{i}.md") for i in range(3)]
    lost = await upload(service, tenant, markdown("Payroll"), "payroll.md")
    await service.mark_attachments(owner(tenant), [r.artifact_id for r in kept], conversation_id="c1")
    await service.mark_attachments(owner(tenant), [lost.artifact_id], conversation_id="c2")
    gate = Gate("before_commit", hold=1)
    kit.faults.ingest_step = gate
    w = worker(kit, tenant, lease_seconds=0.3)

    async def renewed_since(moment: datetime) -> bool:
        return bool(await sql.fetchval(
            "SELECT bool_and(lease_expires_at > $2) FROM artifacts WHERE tenant_id = $1 AND conversation_id = 'c1'",
            tenant, moment + timedelta(seconds=0.3)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(w.drain)
        with hang_detector():
            await gate.reached.wait()
        assert (await service.delete_conversation(tenant, "c2")).attachments == 1
        await wait_for(functools.partial(renewed_since, datetime.now(UTC)))  # a renewal after the loss
        gate.opened.set()
    assert (w.stats.ingested, w.stats.withdrawn) == (3, 1)
    assert [(await status(service, tenant, r)).state for r in kept] == [AttachmentState.INGESTED] * 3
    payroll = attachment_document_id(tenant, "owner", lost.sha256)
    assert not await sql.fetchval(
        "SELECT count(*) FROM knowledge_documents WHERE tenant_id = $1 AND document_id = $2", tenant, payroll)
    assert (await footprint(sql, tenant))["documents"] == 3


class _Hangs:
    """A Markdown extractor that never returns for a file whose text starts with ``# Hang``."""

    structure = "markdown"
    version = ""
    concurrency = 1

    def __init__(self, inner: Extractor) -> None:
        self.inner = inner

    def media_types(self) -> set[str]:
        return self.inner.media_types()

    async def extract(self, source: AsyncIterator[bytes], media_type: str) -> str:
        text = await self.inner.extract(source, media_type)
        if text.startswith("# Hang"):
            await anyio.sleep_forever()
        return text


async def test_an_attachment_that_hangs_times_out_alone_in_its_batch(service: KnowledgeService, kit: Kit,
                                                                    sql: Database, tenant: str) -> None:
    """Each attachment's preparation is bounded on its own: the one that hangs is a transient
    ``timeout`` (retried, then failed); the others of its batch are ingested on the first attempt."""
    registry = ExtractorRegistry([PlainTextExtractor(), _Hangs(MarkdownExtractor())])
    ingestor = Ingestor(kit.db, kit.artifacts, registry)
    names = ["a.md", "hang.md", "b.md", "c.md"]
    refs = [await upload(service, tenant, markdown("Hang" if name == "hang.md" else f"Guide {name}"), name)
            for name in names]
    await service.mark_attachments(owner(tenant), [r.artifact_id for r in refs], conversation_id="c1")
    w = AttachmentWorker(AttachmentQueue(kit.db), ingestor,
                         WorkerOptions(**{**FAST, "tenant_id": tenant, "job_timeout_seconds": 0.5, "max_retries": 1}))
    assert await w.drain() == 5  # four claims, then the retry of the one that hung
    seen = [await status(service, tenant, r) for r in refs]
    assert [(s.state, s.attempts) for s in seen] == [(AttachmentState.INGESTED, 1), (AttachmentState.FAILED, 2),
                                                     (AttachmentState.INGESTED, 1), (AttachmentState.INGESTED, 1)]
    assert [(h["outcome"], h["reason"]) for h in seen[1].history] == [("retry", "timeout"), ("failed", "timeout")]
    assert (await footprint(sql, tenant))["documents"] == 3


# --- A worker process: SIGKILL mid-job (lease expiry), SIGTERM mid-job (clean stop) ------------------------------


@contextlib.asynccontextmanager
async def document_key_held(dsn: str, tenant: str, document_id: uuid.UUID) -> AsyncIterator[None]:
    """Hold an uncommitted row on ``document_id``'s key, so an ingest of that document blocks inside
    its transaction (mid-job) until the block ends (rolled back)."""
    async with open_bridge() as bridge, Database.open(dsn, bridge=bridge, min_size=1, max_size=1) as db:
        with contextlib.suppress(_Rollback):
            async with db.transaction() as tx:
                source = uuid.uuid4()
                await tx.execute(
                    """INSERT INTO artifacts (tenant_id, artifact_id, origin, trust, sha256, size_bytes, media_type,
                                              content)
                       VALUES ($1, $2, 'KNOWLEDGE_SOURCE', 'USER', repeat('0', 64), 0, 'text/plain', '')""",
                    tenant, source)
                await tx.execute(
                    """INSERT INTO knowledge_documents (tenant_id, document_id, version, ingested_by_principal_id,
                           visibility, title, source_artifact_id, media_type, authority, chunker_version,
                           ingested_at, valid_from, sensitivity)
                       VALUES ($1, $2, 1, 'holder', 'principal', 'held', $3, 'text/plain', 'principal_supplied',
                               'x', now(), now(), 'internal')""", tenant, document_id, source)
                yield
                raise _Rollback


class _Rollback(Exception):
    pass


async def _lines(process: Process) -> AsyncIterator[dict[str, Any]]:
    assert process.stdout is not None
    buffer = b""
    async for chunk in process.stdout:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield json.loads(line)


async def _blocked_on_a_lock(db: Database) -> bool:
    return bool(await db.fetchval(
        """SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
           AND wait_event_type = 'Lock' AND query LIKE '%knowledge_documents%'"""))


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
async def test_a_worker_process_stopped_mid_job(service: KnowledgeService, kit: Kit, sql: Database, settings: Settings,
                                                tenant: str, anyio_backend_name: str, how: str) -> None:
    """SIGKILL: the dead worker's lease expires and a worker of this process takes the attachment
    over. SIGTERM: the worker process rolls back, releases the attachment and exits 0."""
    assert settings.dsn is not None
    ref = await upload(service, tenant, markdown("Disaster recovery"), "dr.md")
    document_id = attachment_document_id(tenant, "owner", ref.sha256)
    command = [sys.executable, "-m", "knowledge", "--dsn", settings.dsn, "--loop", anyio_backend_name, "--json",
               "worker", "--only-tenant", tenant, "--lease-seconds", "1", "--poll-seconds", "0.05",
               "--log-level", "WARNING"]
    async with document_key_held(settings.dsn, tenant, document_id):
        process = await anyio.open_process(command, cwd=ROOT)
        try:
            async with contextlib.aclosing(_lines(process)) as lines:  # closed here, not by the collector
                with hang_detector():
                    ready = await anext(lines)
                assert ready["ready"] and len(ready["workers"]) == 1
                await service.mark_attachments(owner(tenant), [ref.artifact_id], conversation_id="c1")

                async def mid_job() -> bool:
                    seen = await status(service, tenant, ref)
                    return seen.lease_owner == ready["workers"][0] and await _blocked_on_a_lock(sql)

                await wait_for(mid_job)
                if how == "sigkill":
                    process.kill()
                    assert await process.wait() == -signal.SIGKILL
                else:
                    process.terminate()
                    with hang_detector():  # hang detector: a clean stop is prompt
                        assert await process.wait() == 0
                        stopped = await anext(lines)
                    assert stopped["stopped"] and stopped["workers"][0]["released"] == 1
        finally:
            if process.returncode is None:
                process.kill()
                with anyio.CancelScope(shield=True):
                    await process.wait()
            await process.aclose()

    seen = await status(service, tenant, ref)
    if how == "sigterm":
        assert (seen.state, seen.attempts, seen.lease_owner) == (AttachmentState.PENDING, 0, None)
        assert [h["outcome"] for h in seen.history] == ["released"]
    else:
        assert seen.state is AttachmentState.INGESTING and seen.lease_owner == ready["workers"][0]
    assert (await footprint(sql, tenant))["documents"] == 0  # nothing half-written

    survivor = worker(kit, tenant, "survivor")
    with hang_detector():
        assert await survivor.drain() == 1
    done = await status(service, tenant, ref)
    assert done.state is AttachmentState.INGESTED and done.document_id == document_id
    assert (await footprint(sql, tenant))["documents"] == 1
    if how == "sigkill":
        assert survivor.stats.taken_over == 1
        assert [(h["outcome"], h["worker"]) for h in done.history] == [("lease_expired", ready["workers"][0]),
                                                                       ("ingested", "survivor")]
        assert done.attempts == 2
    else:
        assert done.attempts == 1


# --- The service's maintenance worker ---------------------------------------------------------------------------


async def test_the_service_worker_ingests_marked_attachments_and_sweeps(settings: Settings, sql: Database,
                                                                         tenant: str) -> None:
    async with KnowledgeService.open(with_workers(settings, tenant, sweep_interval_seconds=0.05)) as svc:
        ref = await upload(svc, tenant, markdown("Onboarding"), "onboarding.md")
        expired = await svc.put_artifact(tenant, b"old", media_type="text/plain",
                                          expires_at=datetime.now(UTC) - timedelta(seconds=1))
        await svc.mark_attachments(owner(tenant), [ref.artifact_id], conversation_id="c1")

        async def done() -> bool:
            swept = not await sql.fetchval(
                "SELECT count(*) FROM artifacts WHERE tenant_id = $1 AND artifact_id = $2", tenant, expired.artifact_id)
            ingested = (await status(svc, tenant, ref)).state is AttachmentState.INGESTED
            # the worker counts an attachment just after the transaction that settled it
            snapshot = svc.worker_snapshot()
            return swept and ingested and snapshot is not None and snapshot.workers[0].ingested == 1

        await wait_for(done)
        report = await svc.worker_status()
        assert report is not None and report.swept >= 1 and report.queue == {"ingested": 1}
        assert {a.name for a in report.actors} == {"attachment-worker-0", "sweeper"}
        assert report.workers[0].ingested == 1 and not report.crash_looping
        health = await svc.health()
        assert health.ok and health.workers is not None


async def test_a_crashing_worker_is_restarted_and_its_crash_loop_is_visible(
        settings: Settings, tenant: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="knowledge.supervisors.actors")
    broken = True

    async def claim(at: str) -> None:
        if at == "claim" and broken:
            raise RuntimeError("injected claim failure")

    async with KnowledgeService.open(with_workers(settings, tenant), faults=Faults(worker_step=claim)) as svc:

        async def looping() -> bool:
            report = await svc.worker_status()
            return report is not None and report.crash_looping

        await wait_for(looping)
        report = await svc.worker_status()
        assert report is not None
        actor = next(a for a in report.actors if a.name == "attachment-worker-0")
        assert actor.crash_looping and actor.consecutive_crashes >= 3 and actor.restarts >= 2
        assert actor.last_error == "RuntimeError: injected claim failure"
        health = await svc.health()
        assert not health.ok and health.workers is not None and health.workers.crash_looping
        assert any("CRASH LOOP" in r.getMessage() and r.exc_info for r in caplog.records)

        broken = False  # the fault clears: the next restart works, and progress ends the loop
        ref = await upload(svc, tenant, markdown("Recovery"), "recovery.md")
        await svc.mark_attachments(owner(tenant), [ref.artifact_id], conversation_id="c1")

        async def recovered() -> bool:
            return (await status(svc, tenant, ref)).state is AttachmentState.INGESTED

        await wait_for(recovered)
        report = await svc.worker_status()
        assert report is not None and not report.crash_looping
        actor = next(a for a in report.actors if a.name == "attachment-worker-0")
        assert actor.running and actor.consecutive_crashes == 0 and actor.crashes >= 3
        assert (await svc.health()).ok


async def test_closing_the_service_mid_job_releases_the_attachment(settings: Settings, kit: Kit, sql: Database,
                                                                   tenant: str) -> None:
    gate = Gate("before_commit", hold=1)
    with hang_detector():  # hang detector: closing mid-job is prompt
        async with KnowledgeService.open(with_workers(settings, tenant)) as svc:
            svc.faults.ingest_step = gate
            ref = await upload(svc, tenant, markdown("Maintenance window"), "window.md")
            await svc.mark_attachments(owner(tenant), [ref.artifact_id], conversation_id="c1")
            await gate.reached.wait()
    async with KnowledgeService.open(settings) as svc:
        seen = await status(svc, tenant, ref)
        assert (seen.state, seen.attempts, seen.lease_owner) == (AttachmentState.PENDING, 0, None)
        assert [h["outcome"] for h in seen.history] == ["released"]
        assert await footprint(sql, tenant) == {"documents": 0, "chunks": 0, "index_rows": 0, "postings": 0,
                                                "sources": 0, "ingested_events": 0}
        assert await worker(kit, tenant).drain() == 1
        assert (await status(svc, tenant, ref)).state is AttachmentState.INGESTED


# --- Leases: a stalled worker, an exhausted takeover -------------------------------------------------------------


class _Stalled(AttachmentQueue):
    """A worker that stalls: it never gets to renew its lease (and believes it did)."""

    async def renew(self, claims: Any, lease_seconds: float) -> set[uuid.UUID]:
        return {c.artifact_id for c in claims}


async def test_a_stalled_worker_loses_its_lease_and_makes_no_second_document(service: KnowledgeService, kit: Kit,
                                                                              sql: Database, tenant: str) -> None:
    """The first worker stalls mid-job past its lease; the second takes the attachment over and
    waits on the document's key; when the first commits after all, the second records that
    document, and the first finds its lease lost."""
    ref = await upload(service, tenant, markdown("Certificates"), "certs.md")
    gate = Gate("before_commit", hold=1)
    options = WorkerOptions(**{**FAST, "tenant_id": tenant, "lease_seconds": 0.3})
    second = worker(kit, tenant, "second")
    await service.mark_attachments(owner(tenant), [ref.artifact_id], conversation_id="c1")
    # the stalled worker has a pool of its own: a test pool's two connections serve the second worker and the probe
    async with open_sql(service.dsn) as db, anyio.create_task_group() as tg:
        stalled_ingestor = Kit(db, faults=Faults(ingest_step=gate)).ingestor
        stalled = AttachmentWorker(_Stalled(db), stalled_ingestor, options, worker_id="stalled")
        tg.start_soon(stalled.step)
        with hang_detector():
            await gate.reached.wait()
        tg.start_soon(second.drain)
        await wait_for(lambda: _blocked_on_a_lock(sql))
        gate.opened.set()
    assert (stalled.stats.lease_lost, second.stats.taken_over, second.stats.ingested) == (1, 1, 1)
    done = await status(service, tenant, ref)
    assert done.state is AttachmentState.INGESTED and done.attempts == 2
    assert [(h["outcome"], h["worker"]) for h in done.history] == [("lease_expired", "stalled"),
                                                                   ("ingested", "second")]
    assert (await footprint(sql, tenant))["documents"] == 1


async def test_a_takeover_after_the_last_attempt_records_failed(service: KnowledgeService, kit: Kit, sql: Database,
                                                                 tenant: str) -> None:
    """The worker of the fourth (last) attempt died mid-job: the takeover records failed, runs nothing."""
    ref = await upload(service, tenant, markdown("Quotas"), "quotas.md")
    await service.mark_attachments(owner(tenant), [ref.artifact_id], conversation_id="c1")
    await sql.execute(
        """UPDATE artifacts SET attachment_state = 'ingesting', attachment_attempts = 4, lease_owner = 'dead',
                  lease_expires_at = clock_timestamp() - interval '1 second'
           WHERE tenant_id = $1 AND artifact_id = $2""", tenant, ref.artifact_id)
    w = worker(kit, tenant)
    assert await w.drain() == 1
    failed = await status(service, tenant, ref)
    assert (failed.state, failed.attempts, failed.reason) == (AttachmentState.FAILED, 4, "lease_expired")
    assert [(h["outcome"], h["attempt"]) for h in failed.history] == [("lease_expired", 4), ("failed", 4)]
    assert (await footprint(sql, tenant))["documents"] == 0
