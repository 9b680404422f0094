"""The spec's tracked metrics that the store can answer with one query each."""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel, ConfigDict

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


class BudgetPressure(BaseModel):
    """The tracked metric "budget pressure": how often, and how much, the knowledge class yielded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turns: int
    knowledge_turns: int  # turns whose knowledge class admitted at least one passage
    yielded_turns: int  # of those, turns in which knowledge yielded under region pressure
    passages_admitted: int
    passages_rendered: int
    passages_yielded: int
    tokens_yielded: int
    recall_yielded_turns: int  # turns in which in-turn recall yielded as well (knowledge had nothing left)
    beliefs_yielded: int
    tool_calls: int = 0  # knowledge.search calls the agent made (the tool path, traced with the turns)
    tool_passages: int = 0  # passages those calls returned

    @property
    def yield_rate(self) -> float:
        """Share of turns with knowledge to render in which the knowledge class yielded."""
        return self.yielded_turns / self.knowledge_turns if self.knowledge_turns else 0.0

    @property
    def yielded_passage_share(self) -> float:
        """Share of admitted passages given up under pressure."""
        return self.passages_yielded / self.passages_admitted if self.passages_admitted else 0.0


async def budget_pressure(db: Database, tenant_id: str | None = None, since: date | None = None) -> BudgetPressure:
    """Budget pressure summed over one tenant (or all) from ``since`` (a UTC day; default: ever).
    Cancellation: the query is cancelled; nothing to undo."""
    row = await db.fetchrow(
        """SELECT coalesce(sum(turns), 0) AS turns, coalesce(sum(knowledge_turns), 0) AS knowledge_turns,
                  coalesce(sum(yielded_turns), 0) AS yielded_turns,
                  coalesce(sum(passages_admitted), 0) AS passages_admitted,
                  coalesce(sum(passages_rendered), 0) AS passages_rendered,
                  coalesce(sum(passages_yielded), 0) AS passages_yielded,
                  coalesce(sum(tokens_yielded), 0) AS tokens_yielded,
                  coalesce(sum(recall_yielded_turns), 0) AS recall_yielded_turns,
                  coalesce(sum(beliefs_yielded), 0) AS beliefs_yielded,
                  coalesce(sum(tool_calls), 0) AS tool_calls, coalesce(sum(tool_passages), 0) AS tool_passages
           FROM knowledge_budget_pressure
           WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::date IS NULL OR day >= $2)""",
        tenant_id, since)
    assert row is not None
    return BudgetPressure(**{k: int(v) for k, v in dict(row).items()})
