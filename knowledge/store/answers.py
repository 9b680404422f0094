"""The agent's answers and their citations, stored with the turn's trace (migration 0012;
`knowledge.core.citations` finds and judges them), and the citation metrics over time."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import date, datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from knowledge.core.citations import JudgedCitation, judge
from knowledge.store.db import Database

#: A cited id is stored as written up to this length (an invented one can be anything).
MAX_CITED_CHARS = 64

_NEXT_ANSWER = """
SELECT (SELECT coalesce(max(answer_no), 0) + 1 FROM knowledge_trace_answers a
        WHERE a.tenant_id = t.tenant_id AND a.trace_id = t.trace_id) AS answer_no
FROM knowledge_traces t WHERE tenant_id = $1 AND trace_id = $2 FOR UPDATE
"""
_SHOWN = "SELECT DISTINCT chunk_id FROM knowledge_trace_passages WHERE tenant_id = $1 AND trace_id = $2"
_INSERT_ANSWER = """
INSERT INTO knowledge_trace_answers (tenant_id, trace_id, answer_no, answer_sha256) VALUES ($1, $2, $3, $4)
RETURNING recorded_at
"""
_INSERT_CITATIONS = """
INSERT INTO knowledge_trace_citations (tenant_id, trace_id, answer_no, ordinal, chunk_id, well_formed, shown, claim)
SELECT $1, $2, $3, (e.n - 1)::int, c->>'chunk_id', (c->>'well_formed')::boolean, (c->>'shown')::boolean, c->>'claim'
FROM jsonb_array_elements($4::jsonb) WITH ORDINALITY AS e(c, n)
"""
_COUNT = """
INSERT INTO knowledge_citation_stats AS s (tenant_id, day, shard, answers, answers_citing, citations, hallucinated)
VALUES ($1, (clock_timestamp() AT TIME ZONE 'UTC')::date, pg_backend_pid() % 16, 1, $2, $3, $4)
ON CONFLICT (tenant_id, day, shard) DO UPDATE SET
    answers = s.answers + 1, answers_citing = s.answers_citing + excluded.answers_citing,
    citations = s.citations + excluded.citations, hallucinated = s.hallucinated + excluded.hallucinated
"""


@dataclass(frozen=True)
class RecordedAnswer:
    """An answer recorded against a turn's trace: its number there and its judged citations."""

    trace_id: UUID
    answer_no: int
    recorded_at: datetime
    citations: tuple[JudgedCitation, ...]

    @property
    def hallucinated(self) -> tuple[JudgedCitation, ...]:
        return tuple(c for c in self.citations if c.hallucinated)


async def record_answer(db: Database, tenant_id: str, trace_id: UUID, answer: str) -> RecordedAnswer | None:
    """Find ``answer``'s citations, judge each against every passage the trace's turn showed the
    agent (its block and its tool calls), and store them with the trace and in the daily counters,
    in one transaction; None if the tenant holds no such trace. Cancellation: rolls back."""
    async with db.transaction() as tx:
        row = await tx.fetchrow(_NEXT_ANSWER, tenant_id, trace_id)
        if row is None:
            return None
        answer_no = int(row["answer_no"])
        shown = {r["chunk_id"] for r in await tx.fetch(_SHOWN, tenant_id, trace_id)}
        judged = judge(answer, shown)
        recorded_at: datetime = await tx.fetchval(_INSERT_ANSWER, tenant_id, trace_id, answer_no,
                                                  hashlib.sha256(answer.encode("utf-8", "surrogatepass")).hexdigest())
        if judged:
            await tx.execute(_INSERT_CITATIONS, tenant_id, trace_id, answer_no, json.dumps([
                {"chunk_id": j.citation.chunk_id[:MAX_CITED_CHARS], "well_formed": j.citation.well_formed,
                 "shown": j.shown, "claim": j.citation.claim} for j in judged]))
        await tx.execute(_COUNT, tenant_id, int(bool(judged)), len(judged), sum(j.hallucinated for j in judged))
    return RecordedAnswer(trace_id=trace_id, answer_no=answer_no, recorded_at=recorded_at, citations=tuple(judged))


class CitationStats(BaseModel):
    """The tracked citation metrics over a period: answers recorded, how many cite, citations, and
    citations of passages the turn never showed (hallucinated)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    answers: int
    answers_citing: int
    citations: int
    hallucinated: int

    @property
    def hallucination_rate(self) -> float:
        """Share of citations naming a passage the turn never showed the agent."""
        return self.hallucinated / self.citations if self.citations else 0.0

    @property
    def citing_share(self) -> float:
        """Share of recorded answers with at least one citation."""
        return self.answers_citing / self.answers if self.answers else 0.0


async def citation_stats(db: Database, tenant_id: str | None = None, since: date | None = None) -> CitationStats:
    """The citation counters summed over one tenant (or all) from ``since`` (a UTC day; default:
    ever). Cancellation: the query is cancelled; nothing to undo."""
    row = await db.fetchrow(
        """SELECT coalesce(sum(answers), 0) AS answers, coalesce(sum(answers_citing), 0) AS answers_citing,
                  coalesce(sum(citations), 0) AS citations, coalesce(sum(hallucinated), 0) AS hallucinated
           FROM knowledge_citation_stats
           WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::date IS NULL OR day >= $2)""", tenant_id, since)
    assert row is not None
    return CitationStats(**{k: int(v) for k, v in dict(row).items()})
