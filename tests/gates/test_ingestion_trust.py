"""Hard gate "Ingestion trust" (ADR-0033, Hard gates):

    Ingestion trust — an ingest attempted from a turn below USER origin trust is refused, and nothing is
    written. M9.
"""

from __future__ import annotations

import pytest

from knowledge.errors import IngestRefused
from knowledge.models import TrustLevel
from knowledge.service import KnowledgeService
from tests.ingest.test_ingest import DOC, footprint, nothing_but_inputs, put, writer


@pytest.mark.anyio
@pytest.mark.parametrize("trust", [t for t in TrustLevel if t < TrustLevel.USER])
async def test_gate_ingestion_trust(service: KnowledgeService, tenant: str, trust: TrustLevel) -> None:
    ref = await put(service, tenant, DOC)
    before = await footprint(service, tenant)
    with pytest.raises(IngestRefused) as refused:
        await service.ingest(ref, "Guide", "tenant", writer(tenant), origin_trust=trust)
    assert refused.value.reason == "origin_trust"
    after = await footprint(service, tenant)
    assert after == before and nothing_but_inputs(after)
    assert (await service.ingest_stats(tenant)).refused == {"origin_trust": 1}
    # USER and above are admitted.
    for ok in (TrustLevel.USER, TrustLevel.SYSTEM):
        await service.ingest(await put(service, tenant, DOC), "Guide", "tenant", writer(tenant), origin_trust=ok)
