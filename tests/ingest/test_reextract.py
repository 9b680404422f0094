"""Re-extraction without re-upload (issue 34, item 5; build step 7): a source no extractor reads is
kept, marked as awaiting one, for thirty days; once an extractor exists, `reextract` ingests it;
a new version of an extractor gives its documents new versions; deleted or expired sources are
never resurrected; attachments of such a type await the same way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from knowledge.config import Settings
from knowledge.errors import IngestRefused
from knowledge.models import ArtifactOrigin, ArtifactRef, KnowledgeQuery, Principal, TrustLevel
from knowledge.parsers.text import decode_utf8
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.vocabulary import AttachmentState, Structure

CSV = b"service,owner,runbook\ncheckout,payments,restart the checkout pods then drain the queue\n"


class CsvExtractor:
    """A host's own adapter of the Extractor port, for a type the service does not read."""

    structure: Structure = "plain"
    concurrency: int = 1

    def __init__(self, version: str) -> None:
        self.version = version

    def media_types(self) -> set[str]:
        return {"text/csv"}

    async def extract(self, source: AsyncIterator[bytes], media_type: str) -> str:
        return await decode_utf8(source)


def writer(tenant: str) -> Principal:
    return Principal(tenant_id=tenant, principal_id="alice", scopes=frozenset({"knowledge.write"}))


async def put_csv(svc: KnowledgeService, tenant: str) -> ArtifactRef:
    return await svc.put_artifact(tenant, CSV, media_type="text/csv", origin=ArtifactOrigin.UPLOAD,
                                  trust=TrustLevel.USER, file_name="owners.csv")


async def refused_and_kept(svc: KnowledgeService, sql: Database, tenant: str) -> ArtifactRef:
    ref = await put_csv(svc, tenant)
    with pytest.raises(IngestRefused) as refused:
        await svc.ingest(ref, "Owners", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
    assert refused.value.reason == "unsupported_media_type"
    assert "awaiting an extractor" in str(refused.value)
    mark = await sql.fetchrow("SELECT media_type, expires_at, request FROM awaiting_extractor "
                              "WHERE tenant_id = $1 AND artifact_id = $2", tenant, ref.artifact_id)
    assert mark is not None and mark["media_type"] == "text/csv"
    kept = await svc.artifact_ref(tenant, ref.artifact_id)  # kept thirty days from the refusal: with its mark
    assert ref.expires_at is not None and kept.expires_at is not None and ref.expires_at <= kept.expires_at
    assert mark["expires_at"] == kept.expires_at
    assert "restart the checkout" not in mark["request"]  # the request as admitted, never content
    return ref


@pytest.mark.anyio
async def test_an_unsupported_source_is_kept_and_becomes_a_document_once_an_extractor_exists(
        service: KnowledgeService, settings: Settings, sql: Database, tenant: str) -> None:
    ref = await refused_and_kept(service, sql, tenant)
    assert (await service.reextract(tenant)).ingested == 0  # still nothing reads it
    async with KnowledgeService.open(settings, extractors=[CsvExtractor("csv1")]) as svc:
        done = await svc.reextract(tenant)
        assert (done.ingested, done.versioned, done.refused) == (1, 0, {})
        docs = await svc.documents(tenant)
        assert [(d.title, d.media_type) for d in docs] == [("Owners", "text/csv")]
        assert await sql.fetchval("SELECT count(*) FROM awaiting_extractor WHERE tenant_id = $1", tenant) == 0
        hits = await svc.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="checkout pods"))
        assert [h.document_id for h in hits] == [docs[0].document_id]
        again = await svc.reextract(tenant)
        assert (again.ingested, again.versioned, again.unchanged) == (0, 0, 1)  # idempotent
        assert (await svc.artifact_ref(tenant, ref.artifact_id)).sha256 == ref.sha256  # the upload is kept as is


@pytest.mark.anyio
async def test_a_new_extractor_version_gives_its_documents_new_versions(
        settings: Settings, tenant: str) -> None:
    async with KnowledgeService.open(settings, extractors=[CsvExtractor("csv1")]) as svc:
        ref = await put_csv(svc, tenant)
        doc = await svc.ingest(ref, "Owners", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
        assert doc.chunker_version.endswith("+csv1")
        assert (await svc.reextract(tenant)).unchanged == 1
    async with KnowledgeService.open(settings, extractors=[CsvExtractor("csv2")]) as svc:
        assert (await svc.reextract(tenant, media_type="text/markdown")).versioned == 0  # another type only
        done = await svc.reextract(tenant, media_type="text/csv")
        assert (done.versioned, done.unchanged) == (1, 0)
        versions = await svc.document_versions(doc.document_id, tenant_id=tenant)
        assert sorted(v.document.version for v in versions) == [1, 2]
        live = await svc.document(doc.document_id, tenant_id=tenant)
        assert live is not None and live.document.version == 2
        assert {s.chunker_version.rsplit("+", 1)[1] for v in versions for s in v.chunk_sets} == {"csv1", "csv2"}
        assert live.document.title == "Owners" and live.document.ingested_by == "alice"
        assert (await svc.reextract(tenant)).unchanged == 1


@pytest.mark.anyio
async def test_deleted_and_expired_sources_are_never_resurrected(
        service: KnowledgeService, settings: Settings, sql: Database, tenant: str) -> None:
    kept = await refused_and_kept(service, sql, tenant)
    await service.expire_artifacts(tenant, [kept.artifact_id])  # its thirty days are over
    async with KnowledgeService.open(settings, extractors=[CsvExtractor("csv1")]) as svc:
        assert (await svc.reextract(tenant)).ingested == 0
        ref = await put_csv(svc, tenant)
        doc = await svc.ingest(ref, "Owners", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
        await svc.delete(doc.document_id, writer(tenant))
    async with KnowledgeService.open(settings, extractors=[CsvExtractor("csv2")]) as svc:
        done = await svc.reextract(tenant)
        assert (done.ingested, done.versioned, done.unchanged) == (0, 0, 0)
        assert await svc.documents(tenant) == []
        await svc.sweep_artifacts()
    assert await sql.fetchval("SELECT count(*) FROM awaiting_extractor WHERE tenant_id = $1", tenant) == 0


@pytest.mark.anyio
async def test_uploads_from_every_path_get_the_thirty_day_default(service: KnowledgeService, tenant: str) -> None:
    before = datetime.now(UTC)
    put = await put_csv(service, tenant)
    attached = await service.upload_attachment(tenant, CSV, media_type="text/csv", file_name="owners.csv")
    for ref in (put, attached):
        assert ref.expires_at is not None
        assert before + timedelta(days=29, hours=23) < ref.expires_at <= datetime.now(UTC) + timedelta(days=30)


@pytest.mark.anyio
async def test_an_attachment_of_an_unsupported_type_awaits_and_is_pending_once_an_extractor_exists(
        service: KnowledgeService, settings: Settings, tenant: str) -> None:
    ref = await service.upload_attachment(tenant, CSV, media_type="text/csv", file_name="owners.csv")
    [mark] = await service.mark_attachments(writer(tenant), [ref.artifact_id], conversation_id="c1")
    assert (mark.state, mark.reason) == (AttachmentState.AWAITING_EXTRACTOR, "unsupported_media_type")
    assert (await service.reextract(tenant)).attachments == 0
    async with KnowledgeService.open(settings, extractors=[CsvExtractor("csv1")]) as svc:
        assert (await svc.reextract(tenant)).attachments == 1
        status = await svc.attachment(tenant, ref.artifact_id)
        assert status is not None and status.state is AttachmentState.PENDING
        assert (await svc.reextract(tenant)).attachments == 0
