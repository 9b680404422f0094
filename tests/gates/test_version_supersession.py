"""Hard gate "Version supersession" (ADR-0033, Hard gates):

    Version supersession — after a new version is ingested, live retrieval returns the new passages and never
    the old, while an as_of query still returns the old ones. M9.
"""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import pytest

from knowledge.models import KnowledgeChunk, Viewer
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from tests.ingest.test_versions import V1, V2, ingest, query


@pytest.mark.anyio
async def test_gate_version_supersession(service: KnowledgeService, sql: Database, tenant: str) -> None:
    doc = await ingest(service, tenant, V1)
    old = await service.search(query(tenant, "pelican procedure"))
    assert [p.document_id for p in old] == [doc]
    between = datetime.now(UTC)
    await anyio.sleep(0.01)
    assert await ingest(service, tenant, V2, replaces=doc) == doc
    live = await service.search(query(tenant, "pelican albatross procedure"))
    assert live and all("albatross" in p.text and "pelican" not in p.text for p in live)
    assert await service.search(query(tenant, "pelican")) == []  # never the old passages, live
    then = await service.search(query(tenant, "pelican procedure", as_of=between))
    assert [p.chunk_id for p in then] == [p.chunk_id for p in old]  # as_of: what live returned then
    assert await service.search(query(tenant, "albatross", as_of=between)) == []
    cited = await service.get_chunk(old[0].chunk_id, viewer=Viewer(tenant_id=tenant, principal_id="bob"))
    assert isinstance(cited, KnowledgeChunk) and cited.version == 1 and "pelican" in cited.text
    versions = await sql.fetch(
        "SELECT version, valid_to IS NULL AS live, superseded_by FROM knowledge_documents "
        "WHERE tenant_id = $1 ORDER BY version", tenant)
    assert [(r["version"], r["live"], r["superseded_by"]) for r in versions] == [(1, False, doc), (2, True, None)]
