"""Versions, as_of, and deletion that really deletes. The gates are `tests/gates/test_version_supersession.py`
and `tests/gates/test_deletion_cascades.py`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import anyio
import pytest

from knowledge.core.chunking import CHUNKER_VERSION, ChunkDraft, MarkdownChunker, chunk_text
from knowledge.errors import DeleteRefused, IngestRefused
from knowledge.models import ArtifactOrigin, KnowledgeChunk, KnowledgeQuery, Principal, TrustLevel
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from tests.helpers.progress import hang_detector


def owner(tenant: str, name: str = "alice") -> Principal:
    return Principal(tenant_id=tenant, principal_id=name, scopes=frozenset({"knowledge.write"}))


async def ingest(svc: KnowledgeService, tenant: str, text: str, *, replaces: uuid.UUID | None = None,
                 who: str = "alice") -> uuid.UUID:
    ref = await svc.put_artifact(tenant, text.encode(), media_type="text/markdown", origin=ArtifactOrigin.UPLOAD,
                                  trust=TrustLevel.USER)
    doc = await svc.ingest(ref, "Runbook", "tenant", owner(tenant, who), origin_trust=TrustLevel.USER,
                           replaces=replaces)
    return doc.document_id


V1 = "# Runbook\n\n## Failover\n\nPromote the standby with the pelican procedure, then repoint the clients.\n"
V2 = "# Runbook\n\n## Failover\n\nPromote the standby with the albatross procedure, then drain the old primary.\n"


def query(tenant: str, text: str, who: str = "alice", as_of: datetime | None = None) -> KnowledgeQuery:
    return KnowledgeQuery(tenant_id=tenant, principal_id=who, text=text, as_of=as_of)


@pytest.mark.anyio
async def test_only_the_owner_versions_or_deletes(service: KnowledgeService, tenant: str) -> None:
    doc = await ingest(service, tenant, V1)
    with pytest.raises(IngestRefused, match="not_document_owner"):
        await ingest(service, tenant, V2, replaces=doc, who="mallory")
    with pytest.raises(IngestRefused, match="document_not_found"):
        await ingest(service, tenant, V2, replaces=uuid.uuid4())
    with pytest.raises(DeleteRefused, match="not_document_owner"):
        await service.delete(doc, owner(tenant, "mallory"))
    with pytest.raises(DeleteRefused, match="document_not_found"):
        await service.delete(uuid.uuid4(), owner(tenant))
    assert [p.document_id for p in await service.search(query(tenant, "pelican"))] == [doc]


@pytest.mark.anyio
async def test_concurrent_new_versions_serialize_and_stay_dense(service: KnowledgeService, sql: Database,
                                                                tenant: str) -> None:
    doc = await ingest(service, tenant, V1)
    async def version(i: int) -> None:
        await ingest(service, tenant, V2.replace("albatross", f"albatross{i}"), replaces=doc)

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(version, i)
    rows = await sql.fetch(
        "SELECT version, valid_to IS NULL AS live FROM knowledge_documents WHERE tenant_id = $1 ORDER BY version",
        tenant)
    assert [r["version"] for r in rows] == list(range(1, 8)) and [r["live"] for r in rows].count(True) == 1


@pytest.mark.anyio
async def test_versions_deletes_and_searches_interleaved(service: KnowledgeService, sql: Database,
                                                         tenant: str) -> None:
    """Many concurrent versions and deletes of the same and different documents, with searches: no
    version lost, no passage of a deleted document after its delete committed, no deadlock."""
    docs = [await ingest(service, tenant, V1.replace("pelican", f"pelican{i} heron")) for i in range(4)]
    deleted_at: dict[uuid.UUID, float] = {}
    versions: dict[uuid.UUID, int] = dict.fromkeys(docs, 1)
    violations: list[str] = []

    async def versioner(doc: uuid.UUID, rounds: int) -> None:
        for r in range(rounds):
            try:
                await ingest(service, tenant, V2.replace("albatross", f"albatross{r} heron"), replaces=doc)
                versions[doc] += 1
            except IngestRefused as exc:
                assert exc.reason == "document_not_found" and doc in deleted_at

    async def deleter(doc: uuid.UUID) -> None:
        await anyio.sleep(0.05)
        await service.delete(doc, owner(tenant))
        deleted_at[doc] = anyio.current_time()

    async def searcher() -> None:
        for _ in range(30):
            began = anyio.current_time()
            for p in await service.search(query(tenant, "heron procedure")):
                if p.document_id in deleted_at and deleted_at[p.document_id] < began:
                    violations.append(str(p.document_id))

    with hang_detector():  # a deadlock detector
        async with anyio.create_task_group() as tg:
            for doc in docs:
                tg.start_soon(versioner, doc, 3)
                tg.start_soon(versioner, doc, 3)
            tg.start_soon(deleter, docs[0])
            tg.start_soon(deleter, docs[1])
            tg.start_soon(searcher)
            tg.start_soon(searcher)
    assert violations == []
    for doc in docs[2:]:
        rows = await sql.fetch(
            "SELECT version FROM knowledge_documents WHERE tenant_id = $1 AND document_id = $2 ORDER BY 1",
            tenant, doc)
        assert [r["version"] for r in rows] == list(range(1, versions[doc] + 1)) and versions[doc] == 7
    for doc in docs[:2]:
        assert await sql.fetchval(
            "SELECT count(*) FROM knowledge_chunks WHERE tenant_id = $1 AND document_id = $2", tenant, doc) == 0


class ParagraphChunker:
    """Another chunker version: paragraphs only, headings ignored (a real, different strategy)."""

    version = "paragraphs-test-v1"

    def chunk(self, text: str, title: str) -> list[ChunkDraft]:
        return chunk_text(text, title, markdown=False)


@pytest.mark.anyio
async def test_rechunk_writes_a_new_set_beside_the_old_from_the_stored_source(service: KnowledgeService,
                                                                               sql: Database, tenant: str) -> None:
    doc = await ingest(service, tenant, V1)
    old = await service.search(query(tenant, "pelican procedure"))
    # The caller's upload is gone: re-chunking reads the document's own retained source.
    await sql.execute("DELETE FROM artifacts WHERE tenant_id = $1 AND origin <> 'KNOWLEDGE_SOURCE'", tenant)
    before = datetime.now(UTC)
    await anyio.sleep(0.01)
    assert await service.rechunk(doc, ParagraphChunker(), owner(tenant)) >= 1
    new = await service.search(query(tenant, "pelican procedure"))
    assert new and {p.chunk_id for p in new}.isdisjoint({p.chunk_id for p in old})  # new ids, live
    then = await service.search(query(tenant, "pelican procedure", as_of=before))
    assert [p.chunk_id for p in then] == [p.chunk_id for p in old]  # as_of reads the set live then
    sets = await sql.fetch(
        "SELECT chunker_version FROM knowledge_chunk_sets WHERE tenant_id = $1 ORDER BY created_at", tenant)
    assert [r["chunker_version"] for r in sets] == [CHUNKER_VERSION, "paragraphs-test-v1"]
    cited = await service.operator_get_chunk(old[0].chunk_id, tenant_id=tenant)  # the old set still resolves
    assert isinstance(cited, KnowledgeChunk) and cited.text == old[0].text
    with pytest.raises(IngestRefused, match="already_chunked"):
        await service.rechunk(doc, ParagraphChunker(), owner(tenant))
    with pytest.raises(IngestRefused, match="not_document_owner"):
        await service.rechunk(doc, ParagraphChunker(), owner(tenant, "mallory"))


@pytest.mark.anyio
async def test_rechunk_back_to_an_earlier_chunker_makes_its_set_live_again_and_as_of_reads_each_period(
        service: KnowledgeService, sql: Database, tenant: str) -> None:
    doc = await ingest(service, tenant, V1)
    first = await service.search(query(tenant, "pelican procedure"))
    await anyio.sleep(0.01)
    during_first = datetime.now(UTC)
    await anyio.sleep(0.01)
    await service.rechunk(doc, ParagraphChunker(), owner(tenant))
    second = await service.search(query(tenant, "pelican procedure"))
    await anyio.sleep(0.01)
    during_second = datetime.now(UTC)
    await anyio.sleep(0.01)
    assert await service.rechunk(doc, MarkdownChunker(), owner(tenant)) >= 1  # back to the first chunker
    again = await service.search(query(tenant, "pelican procedure"))
    assert [p.chunk_id for p in again] == [p.chunk_id for p in first]  # the same citations, live again
    assert {p.chunk_id for p in second}.isdisjoint({p.chunk_id for p in again})
    for instant, expected in ((during_first, first), (during_second, second)):
        then = await service.search(query(tenant, "pelican procedure", as_of=instant))
        assert [p.chunk_id for p in then] == [p.chunk_id for p in expected]
    sets = await sql.fetch(
        "SELECT chunker_version, superseded_at IS NULL AS live, cardinality(earlier_periods) AS earlier "
        "FROM knowledge_chunk_sets WHERE tenant_id = $1 ORDER BY chunker_version", tenant)
    assert {(r["chunker_version"], r["live"], r["earlier"]) for r in sets} == {
        (CHUNKER_VERSION, True, 1), ("paragraphs-test-v1", False, 0)}
    with pytest.raises(IngestRefused, match="already_chunked"):  # the live set's own version
        await service.rechunk(doc, MarkdownChunker(), owner(tenant))
