"""The spec's tracked metrics that the store can answer with one query each."""

from __future__ import annotations

from pydantic import BaseModel

from knowledge.store.db import Database


class IngestStats(BaseModel):
    """Ingestion outcomes (accepted, refusals and failures by cause) and the instruction-like rate."""

    accepted: int
    refused: dict[str, int]
    failed: dict[str, int]
    live_chunks: int
    instruction_like_chunks: int

    @property
    def instruction_like_rate(self) -> float:
        return self.instruction_like_chunks / self.live_chunks if self.live_chunks else 0.0


async def ingest_stats(db: Database, tenant_id: str | None = None) -> IngestStats:
    outcomes = await db.fetch(
        """SELECT outcome, reason, sum(count)::bigint AS n FROM knowledge_ingest_outcomes
           WHERE $1::text IS NULL OR tenant_id = $1 GROUP BY outcome, reason""",
        tenant_id,
    )
    chunks = await db.fetchrow(
        """SELECT count(*) AS total, count(*) FILTER (WHERE c.contains_instruction_like_text) AS flagged
           FROM knowledge_chunks c
           JOIN knowledge_documents d USING (tenant_id, document_id, version, chunker_version)
           WHERE d.valid_to IS NULL AND ($1::text IS NULL OR c.tenant_id = $1)""",
        tenant_id,
    )
    assert chunks is not None
    by: dict[str, dict[str, int]] = {"accepted": {}, "refused": {}, "failed": {}}
    for row in outcomes:
        by[row["outcome"]][row["reason"]] = int(row["n"])
    return IngestStats(
        accepted=sum(by["accepted"].values()), refused=by["refused"], failed=by["failed"],
        live_chunks=int(chunks["total"]), instruction_like_chunks=int(chunks["flagged"]),
    )
