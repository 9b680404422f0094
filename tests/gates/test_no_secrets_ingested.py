"""Hard gate "No secrets ingested" (ADR-0033, Hard gates):

    No secrets ingested — a source containing a credential pattern fails the ingest, and no KnowledgeDocument,
    chunk, index row, ingest event, or newly created knowledge-source artifact survives the attempt. The
    caller's input artifact is untouched: knowledge.ingest is handed an existing ArtifactRef and must read it to
    scan it, so deleting it would destroy a caller-owned object that may be shared or retried, on the strength
    of a refusal this tool had no authority to make. M9.
"""

from __future__ import annotations

import gzip
import json

import anyio
import pytest

from knowledge.errors import IngestRefused
from knowledge.models import TrustLevel
from knowledge.service import KnowledgeService
from tests.conftest import corpus_missing
from tests.ingest.test_ingest import SECRETS, footprint, put, writer


def _secret_records() -> list[dict[str, str]]:
    with gzip.open(SECRETS, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _embed(snippet: str) -> str:
    return (
        "# Service setup\n\nThis page explains how the service is configured for production use and how\n"
        "operators rotate what it needs. Read it before the first deploy.\n\n## Configuration\n\n"
        f"{snippet}\n\n## Next steps\n\nContinue with the monitoring guide, which explains the alerts.\n"
    )


@pytest.mark.anyio
@pytest.mark.skipif(corpus_missing(SECRETS), reason="shared corpus not present")
async def test_gate_no_secrets_ingested(service: KnowledgeService, tenant: str) -> None:
    records = await anyio.to_thread.run_sync(_secret_records)  # a file read: not on the loop
    assert sum(r["label"] == "secret" for r in records) == 50
    for record in records:
        text = _embed(record["text"])
        ref = await put(service, tenant, text)
        before = await footprint(service, tenant)
        if record["label"] == "secret":
            with pytest.raises(IngestRefused) as refused:
                await service.ingest(ref, "Setup", "principal", writer(tenant), origin_trust=TrustLevel.USER)
            err = refused.value
            assert err.reason == "secret_detected", record["id"]
            assert err.chunk_ordinal is not None and err.heading_path and err.heading_path[0] == "Setup"
            assert str(err).find(record["text"].strip().splitlines()[-1][-12:]) == -1  # never the secret
            assert await footprint(service, tenant) == before, record["id"]  # inputs untouched too
            assert await service.artifacts.read(ref) == text.encode()
        else:
            await service.ingest(ref, "Setup", "principal", writer(tenant), origin_trust=TrustLevel.USER)
    stats = await service.ingest_stats(tenant)
    assert stats.accepted == 50 and stats.refused == {"secret_detected": 50}
