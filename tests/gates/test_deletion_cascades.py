"""Hard gate "Deletion cascades" (ADR-0033, Hard gates):

    Deletion cascades — after a delete, no chunk, index row, or retrievable passage remains, the source artifact
    is swept, and a trace that cited it renders as deleted rather than dangling. M9.
"""

from __future__ import annotations

import json

import pytest

from knowledge.models import DeletedChunk, Viewer
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from tests.ingest.test_versions import V1, V2, ingest, owner, query


@pytest.mark.anyio
async def test_gate_deletion_cascades(service: KnowledgeService, sql: Database, tenant: str) -> None:
    doc = await ingest(service, tenant, V1)
    await ingest(service, tenant, V2, replaces=doc)
    other = await ingest(service, tenant, "# Other\n\nThe pelican procedure is unrelated here, about birds.\n")
    cited = (await service.search(query(tenant, "albatross procedure")))[0]
    sources = [r["source_artifact_id"] for r in await sql.fetch(
        "SELECT source_artifact_id FROM knowledge_documents WHERE tenant_id = $1 AND document_id = $2", tenant, doc)]
    stats_before = await sql.fetchval(
        "SELECT sum(chunks) FROM knowledge_tenant_stats WHERE tenant_id = $1", tenant)

    assert await service.delete(doc, owner(tenant)) == 2

    for who in ("alice", "bob"):
        for text in ("albatross procedure drain", "pelican procedure repoint clients"):
            assert doc not in [p.document_id for p in await service.search(query(tenant, text, who))]
    assert [p.document_id for p in await service.search(query(tenant, "pelican birds"))] == [other]
    left = await sql.fetchrow(
        """SELECT (SELECT count(*) FROM knowledge_chunks WHERE tenant_id = $1 AND document_id = $2) AS chunks,
                  (SELECT count(*) FROM knowledge_chunk_index WHERE tenant_id = $1 AND document_id = $2) AS idx,
                  (SELECT count(*) FROM knowledge_chunk_sets WHERE tenant_id = $1 AND document_id = $2) AS sets,
                  (SELECT count(*) FROM knowledge_postings WHERE tenant_id = $1 AND chunk_id = $3) AS postings""",
        tenant, doc, cited.chunk_id)
    assert left is not None and dict(left) == {"chunks": 0, "idx": 0, "sets": 0, "postings": 0}
    # Term statistics stay right: the counters equal a fresh recount.
    recount = await sql.fetchval("SELECT count(*) FROM knowledge_chunk_index WHERE tenant_id = $1", tenant)
    assert await sql.fetchval(
        "SELECT sum(chunks) FROM knowledge_tenant_stats WHERE tenant_id = $1", tenant) == recount == stats_before - 2
    # The sources expire at once and the sweeper deletes their bytes.
    assert await service.sweep_artifacts() >= len(sources)
    assert await sql.fetchval(
        "SELECT count(*) FROM artifacts WHERE tenant_id = $1 AND artifact_id = ANY($2::uuid[])", tenant, sources) == 0
    # A trace's citation resolves to "deleted", never dangles.
    gone = await service.get_chunk(cited.chunk_id, viewer=Viewer(tenant_id=tenant, principal_id="bob"))
    assert isinstance(gone, DeletedChunk) and gone.document_id == doc
    event = await sql.fetchrow(
        "SELECT payload FROM knowledge_events WHERE tenant_id = $1 AND event_type = 'knowledge.document.deleted'",
        tenant)
    assert event is not None and json.loads(event["payload"]) == {"versions": 2, "chunks": 2}
    assert "albatross" not in event["payload"]
