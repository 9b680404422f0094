"""The spec's tracked metrics that the store can answer with one query each."""

from __future__ import annotations

from datetime import date
from typing import Any

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


async def ingest_stats(db: Database, tenant_id: str | None = None, since: date | None = None) -> IngestStats:
    """Outcomes by cause from ``since`` (a day; default: ever), and the live corpus's instruction-like
    rate (the corpus now, whatever ``since``). Cancellation: the query is cancelled; nothing to undo."""
    outcomes = await db.fetch(
        """SELECT outcome, reason, sum(count)::bigint AS n FROM knowledge_ingest_outcomes
           WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::date IS NULL OR day >= $2)
           GROUP BY outcome, reason""",
        tenant_id, since,
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


class IngestDay(BaseModel):
    """One day of the ingestion trend: outcomes by cause that day, and the chunks ingested that day
    (every version, superseded or not) with how many were flagged instruction-like — the spec's
    signals: "a rising media-type refusal rate is the signal to build the next extractor"; "a sudden
    rise [of the instruction-like rate] is either a poisoning attempt or a scanner regression"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    day: date
    accepted: int
    refused: dict[str, int]
    failed: dict[str, int]
    chunks: int
    instruction_like_chunks: int

    @property
    def instruction_like_rate(self) -> float:
        return self.instruction_like_chunks / self.chunks if self.chunks else 0.0

    @property
    def refusal_rate(self) -> float:
        """Refusals over everything that day (accepted, refused or failed)."""
        total = self.accepted + sum(self.refused.values()) + sum(self.failed.values())
        return sum(self.refused.values()) / total if total else 0.0


async def ingest_trend(db: Database, tenant_id: str | None = None, since: date | None = None) -> list[IngestDay]:
    """The ingestion trend, a row per day with any outcome or ingested chunk from ``since`` (default:
    ever), oldest first. Days are the database's (the outcome counters' ``current_date``).
    Cancellation: the query is cancelled; nothing to undo."""
    outcomes = await db.fetch(
        """SELECT day, outcome, reason, sum(count)::bigint AS n FROM knowledge_ingest_outcomes
           WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::date IS NULL OR day >= $2)
           GROUP BY day, outcome, reason""",
        tenant_id, since,
    )
    chunks = await db.fetch(
        """SELECT d.ingested_at::date AS day, count(*) AS total,
                  count(*) FILTER (WHERE c.contains_instruction_like_text) AS flagged
           FROM knowledge_documents d
           JOIN knowledge_chunks c USING (tenant_id, document_id, version, chunker_version)
           WHERE ($1::text IS NULL OR d.tenant_id = $1) AND ($2::date IS NULL OR d.ingested_at::date >= $2)
           GROUP BY 1""",
        tenant_id, since,
    )
    days: dict[date, dict[str, Any]] = {}

    def of(day: date) -> dict[str, Any]:
        return days.setdefault(day, {"day": day, "accepted": 0, "refused": {}, "failed": {}, "chunks": 0,
                                     "instruction_like_chunks": 0})

    for row in outcomes:
        entry = of(row["day"])
        if row["outcome"] == "accepted":
            entry["accepted"] += int(row["n"])
        else:
            entry[row["outcome"]][row["reason"]] = int(row["n"])
    for row in chunks:
        entry = of(row["day"])
        entry["chunks"], entry["instruction_like_chunks"] = int(row["total"]), int(row["flagged"])
    return [IngestDay(**days[d]) for d in sorted(days)]


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
