"""The agent's answers and their citations, stored with the turn's trace (migrations 0012, 0013;
`knowledge.core.citations` finds and judges them, `knowledge.core.grounding` checks their claims,
`knowledge.retrieval.answers` runs it), and the citation metrics over time."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import date, datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from knowledge.core.citations import JudgedCitation
from knowledge.core.grounding import Grounding
from knowledge.store.db import Database

#: A cited id is stored as written up to this length (an invented one can be anything).
MAX_CITED_CHARS = 64

_NEXT_ANSWER = """
SELECT (SELECT coalesce(max(answer_no), 0) + 1 FROM knowledge_trace_answers a
        WHERE a.tenant_id = t.tenant_id AND a.trace_id = t.trace_id) AS answer_no
FROM knowledge_traces t WHERE tenant_id = $1 AND trace_id = $2 FOR UPDATE
"""
_SHOWN = "SELECT DISTINCT chunk_id FROM knowledge_trace_passages WHERE tenant_id = $1 AND trace_id = $2"
# Every passage the turn showed, with its text while it is stored (a deleted one: NULL), and a row
# with a NULL chunk id when the trace exists at all.
_SHOWN_TEXTS = """
SELECT NULL::text AS chunk_id, NULL::text AS text FROM knowledge_traces WHERE tenant_id = $1 AND trace_id = $2
UNION ALL
SELECT s.chunk_id, c.text
FROM (SELECT DISTINCT chunk_id FROM knowledge_trace_passages WHERE tenant_id = $1 AND trace_id = $2) AS s
LEFT JOIN knowledge_chunks c ON c.tenant_id = $1 AND c.chunk_id = s.chunk_id
"""
_INSERT_ANSWER = """
INSERT INTO knowledge_trace_answers (tenant_id, trace_id, answer_no, answer_sha256, drawn_on)
VALUES ($1, $2, $3, $4, $5)
RETURNING recorded_at
"""
_INSERT_CITATIONS = """
INSERT INTO knowledge_trace_citations (tenant_id, trace_id, answer_no, ordinal, chunk_id, well_formed, shown, claim,
                                       supported)
SELECT $1, $2, $3, (e.n - 1)::int, c->>'chunk_id', (c->>'well_formed')::boolean, (c->>'shown')::boolean, c->>'claim',
       (c->>'supported')::boolean
FROM jsonb_array_elements($4::jsonb) WITH ORDINALITY AS e(c, n)
"""
_COUNT = """
INSERT INTO knowledge_citation_stats AS s (tenant_id, day, shard, answers, answers_citing, citations, hallucinated,
                                           supported, unsupported, answers_drawing, answers_citing_drawn)
VALUES ($1, (clock_timestamp() AT TIME ZONE 'UTC')::date, pg_backend_pid() % 16, 1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (tenant_id, day, shard) DO UPDATE SET
    answers = s.answers + 1, answers_citing = s.answers_citing + excluded.answers_citing,
    citations = s.citations + excluded.citations, hallucinated = s.hallucinated + excluded.hallucinated,
    supported = s.supported + excluded.supported, unsupported = s.unsupported + excluded.unsupported,
    answers_drawing = s.answers_drawing + excluded.answers_drawing,
    answers_citing_drawn = s.answers_citing_drawn + excluded.answers_citing_drawn
"""


@dataclass(frozen=True)
class RecordedAnswer:
    """An answer recorded against a turn's trace: its number there, its judged citations (each with
    its support verdict), and the shown passages it drew on."""

    trace_id: UUID
    answer_no: int
    recorded_at: datetime
    citations: tuple[JudgedCitation, ...]
    drawn_on: frozenset[str] = frozenset()

    @property
    def hallucinated(self) -> tuple[JudgedCitation, ...]:
        return tuple(c for c in self.citations if c.hallucinated)

    @property
    def cites_what_it_drew_on(self) -> bool:
        return self.drawn_on <= {c.citation.chunk_id for c in self.citations if c.shown}


async def shown_passages(db: Database, tenant_id: str, trace_id: UUID) -> dict[str, str | None] | None:
    """Every passage the trace's turn showed the agent (its block and its tool calls): chunk id ->
    its text, None once deleted; None if the tenant holds no such trace. One statement."""
    rows = await db.fetch(_SHOWN_TEXTS, tenant_id, trace_id)
    if not rows:
        return None
    return {r["chunk_id"]: r["text"] for r in rows if r["chunk_id"] is not None}


async def store_answer(db: Database, tenant_id: str, trace_id: UUID, answer: str, grounding: Grounding
                       ) -> RecordedAnswer | None:
    """Store ``answer``'s hash and ``grounding`` (its citations judged against the passages the
    turn had shown when it was checked) with the trace and in the daily counters, in one
    transaction; None if the tenant holds no such trace. Should the turn have shown more since (a
    tool call in between), its citations are judged again against all of it, and any whose verdict
    was reached on the smaller set is left without one. Cancellation: rolls back."""
    async with db.transaction() as tx:
        row = await tx.fetchrow(_NEXT_ANSWER, tenant_id, trace_id)
        if row is None:
            return None
        answer_no = int(row["answer_no"])
        shown = {r["chunk_id"] for r in await tx.fetch(_SHOWN, tenant_id, trace_id)}
        judged = [c if c.shown == (c.citation.chunk_id in shown) else replace(
            c, shown=c.citation.chunk_id in shown, supported=None if c.citation.chunk_id in shown else False)
            for c in grounding.citations]
        recorded_at: datetime = await tx.fetchval(
            _INSERT_ANSWER, tenant_id, trace_id, answer_no,
            hashlib.sha256(answer.encode("utf-8", "surrogatepass")).hexdigest(), sorted(grounding.drawn_on))
        if judged:
            await tx.execute(_INSERT_CITATIONS, tenant_id, trace_id, answer_no, json.dumps([
                {"chunk_id": j.citation.chunk_id[:MAX_CITED_CHARS], "well_formed": j.citation.well_formed,
                 "shown": j.shown, "claim": j.citation.claim, "supported": j.supported} for j in judged]))
        cited = {j.citation.chunk_id for j in judged if j.shown}
        await tx.execute(_COUNT, tenant_id, int(bool(judged)), len(judged), sum(j.hallucinated for j in judged),
                         sum(j.supported is True for j in judged), sum(j.supported is False for j in judged),
                         int(bool(grounding.drawn_on)), int(bool(grounding.drawn_on) and grounding.drawn_on <= cited))
    return RecordedAnswer(trace_id=trace_id, answer_no=answer_no, recorded_at=recorded_at, citations=tuple(judged),
                          drawn_on=grounding.drawn_on)


class CitationStats(BaseModel):
    """The tracked citation metrics over a period: answers recorded, how many cite, citations,
    citations of passages the turn never showed (hallucinated), the support verdicts (citation
    accuracy) and the answers that drew on a passage and cited all they drew on (citation rate)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    answers: int
    answers_citing: int
    citations: int
    hallucinated: int
    supported: int = 0
    unsupported: int = 0
    answers_drawing: int = 0
    answers_citing_drawn: int = 0

    @property
    def accuracy(self) -> float | None:
        """Citation accuracy: of the citations with a verdict, the share whose passage supports the
        claim they stand beside (a hallucinated one does not). None: no verdict yet."""
        judged = self.supported + self.unsupported
        return self.supported / judged if judged else None

    @property
    def rate(self) -> float | None:
        """Citation rate: of the answers that drew on a passage the turn showed, the share citing
        every passage they drew on. None: no answer drew on one."""
        return self.answers_citing_drawn / self.answers_drawing if self.answers_drawing else None

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
                  coalesce(sum(citations), 0) AS citations, coalesce(sum(hallucinated), 0) AS hallucinated,
                  coalesce(sum(supported), 0) AS supported, coalesce(sum(unsupported), 0) AS unsupported,
                  coalesce(sum(answers_drawing), 0) AS answers_drawing,
                  coalesce(sum(answers_citing_drawn), 0) AS answers_citing_drawn
           FROM knowledge_citation_stats
           WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::date IS NULL OR day >= $2)""", tenant_id, since)
    assert row is not None
    return CitationStats(**{k: int(v) for k, v in dict(row).items()})
