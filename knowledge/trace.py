"""The recall trace, knowledge side (ADR-0033, "The trace"): what a turn rendered, and its view.

One record carries the beliefs and the passages a turn rendered (`RecallTrace`, with its
``passages`` list of `TracedPassage`), so a user asking what the agent knew is never shown two
thirds of the answer. The trace holds the SHA-256 of the rendered ``<knowledge>`` block, and every
listed passage carries what re-rendering it needs except its text, which the chunk id resolves
(`rerender`, `check_trace`): the listed passages reproduce the block the hash covers.

**The view** (`RecallTraceView`, built by `build_view`): each passage shown with its citation; a
passage whose document was deleted renders as "this passage has been deleted" with its chunk id,
never as a dangling id or as silence. The **two-ceiling filter** applies to passages as to beliefs:
an item is shown only up to the stricter of the recall surface's sensitivity ceiling (recorded in
the trace) and the viewing surface's; what it withholds is counted, so the view never passes for
complete when it is not.

**Retention, two tiers** (`TRACE_RETENTION`, applied by `prune_traces`):

1. *Full* for ``full_days`` (30) after the turn: everything the view shows.
2. *Skeleton* until ``skeleton_days`` (365): the query text, belief texts, passage titles and heading
   paths are set to NULL; chunk and belief ids, versions, scores, arms, flags, sensitivities,
   token counts, content hashes, the block hash and the budget remain. Then the trace is deleted.

Deletion of a document also reaches its traces: they never held passage text, and the trigger of
migration 0006 forgets the deleted passages' titles and heading paths in the deleting transaction.

The models and `build_view`/`rerender` are pure; the functions below the line do I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Any, Self
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from knowledge.budget import IN_TURN_RECALL, KNOWLEDGE, ClassAllocation, RegionAllocation
from knowledge.catalog import DeletedChunk, visible_chunk_ids
from knowledge.models import Authority, KnowledgeChunk, RetrievedPassage, Sensitivity, Viewer
from knowledge.render import PATH_SEPARATOR, render_knowledge_block
from knowledge.store.db import Connection, Database, Record
from knowledge.store.locks import lock_documents

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_SHA256 = r"^[0-9a-f]{64}$"

DELETED_NOTICE = "this passage has been deleted"
MISSING_NOTICE = "this passage can no longer be resolved"
REDUCED_NOTICE = "details past the full-retention window"


def block_sha256(block: str) -> str:
    """The hash a trace records for a rendered block (SHA-256 of its UTF-8)."""
    return hashlib.sha256(block.encode("utf-8")).hexdigest()


# --- the record ---------------------------------------------------------------------------------


class TracedBelief(BaseModel):
    """A belief the turn rendered; ``text`` is None in the second retention tier."""

    model_config = _FROZEN

    belief_id: str
    text: str | None
    tokens: int = Field(ge=0)
    sensitivity: Sensitivity


class TracedPassage(BaseModel):
    """A passage the turn rendered: its citation and everything rendering it used but its text.

    ``title`` and ``heading_path`` are None once the chunk is deleted or the trace is reduced;
    ``block_sha256`` is the hash of the rendered block this passage was part of.
    """

    model_config = _FROZEN

    chunk_id: str
    document_id: UUID
    version: int = Field(ge=1)
    title: str | None
    heading_path: list[str] | None
    doc_date: date | None
    authority: Authority
    score: float
    arms: list[str]
    instruction_like: bool
    sensitivity: Sensitivity
    tokens: int = Field(ge=0)
    content_sha256: str = Field(pattern=_SHA256)
    block_sha256: str = Field(pattern=_SHA256)


class ClassRecord(BaseModel):
    """One budget class's allocation, as the trace keeps it."""

    model_config = _FROZEN

    offered: int = Field(ge=0)
    admitted: int = Field(ge=0)
    rendered: int = Field(ge=0)
    tokens: int = Field(ge=0)
    yielded_items: int = Field(ge=0)
    yielded_tokens: int = Field(ge=0)

    @classmethod
    def of(cls, allocation: ClassAllocation) -> ClassRecord:
        return cls(offered=allocation.offered, admitted=allocation.admitted, rendered=allocation.rendered,
                   tokens=allocation.tokens, yielded_items=allocation.yielded_items,
                   yielded_tokens=allocation.yielded_tokens)


class TraceBudget(BaseModel):
    """The turn's Region B: its total, each class's allocation, and beliefs above the recall ceiling."""

    model_config = _FROZEN

    region_tokens: int = Field(ge=0)
    classes: dict[str, ClassRecord]
    withheld_beliefs: int = Field(default=0, ge=0)  # above the recall surface's ceiling: never budgeted

    @classmethod
    def of(cls, allocation: RegionAllocation, withheld_beliefs: int = 0) -> TraceBudget:
        return cls(region_tokens=allocation.region_tokens,
                   classes={name: ClassRecord.of(c) for name, c in allocation.classes.items()},
                   withheld_beliefs=withheld_beliefs)


class RecallTrace(BaseModel):
    """What one turn rendered: beliefs and passages in one record, with the rendered block's hash.

    ``block_sha256`` is set exactly when passages were rendered, and every passage carries it.
    """

    model_config = _FROZEN

    trace_id: UUID
    tenant_id: str
    principal_id: str
    session_id: str | None = None
    turn_id: str | None = None
    surface: str
    recall_ceiling: Sensitivity
    query_text: str | None
    query_as_of: datetime | None = None
    rendered_at: datetime
    policy: str
    block_sha256: str | None = Field(default=None, pattern=_SHA256)
    beliefs: list[TracedBelief]
    passages: list[TracedPassage]
    budget: TraceBudget
    created_at: datetime | None = None  # set by the database when written
    reduced_at: datetime | None = None  # set when the trace entered the second retention tier

    @model_validator(mode="after")
    def _block_covers_passages(self) -> Self:
        if (self.block_sha256 is None) != (not self.passages):
            raise ValueError("a trace has a block hash exactly when it rendered passages")
        if any(p.block_sha256 != self.block_sha256 for p in self.passages):
            raise ValueError("every traced passage carries the hash of the block it was rendered in")
        return self


def rerender(trace: RecallTrace, texts: Mapping[str, str]) -> str:
    """Render the trace's passages again, in order, with their texts from ``texts`` (chunk id -> text).

    Raises ``ValueError`` if the trace rendered nothing, lost a title or heading path (a deleted
    chunk, or the second retention tier), or a text is missing or is not the one traced.
    """
    if not trace.passages:
        raise ValueError("the trace rendered no passages")
    passages: list[RetrievedPassage] = []
    for p in trace.passages:
        if p.title is None or p.heading_path is None:
            raise ValueError(f"{p.chunk_id}: the trace no longer holds its title and heading path")
        text = texts.get(p.chunk_id)
        if text is None or hashlib.sha256(text.encode("utf-8")).hexdigest() != p.content_sha256:
            raise ValueError(f"{p.chunk_id}: no text matching the traced content hash")
        passages.append(RetrievedPassage(
            chunk_id=p.chunk_id, document_id=p.document_id, title=p.title, heading_path=p.heading_path, text=text,
            doc_date=p.doc_date, authority=p.authority, score=p.score, arms=p.arms,
            instruction_like=p.instruction_like, tokens=p.tokens))
    return render_knowledge_block(passages, as_of=trace.rendered_at, policy=trace.policy)


# --- the view -----------------------------------------------------------------------------------


class PassageState(StrEnum):
    SHOWN = "shown"  # resolved to its chunk; title, path and text shown
    DELETED = "deleted"  # its document was deleted: chunk id and when, nothing else
    REDUCED = "reduced"  # the trace is in its second retention tier: citation and score only
    MISSING = "missing"  # neither a chunk nor a tombstone (a restored or foreign database)


class ViewedPassage(BaseModel):
    model_config = _FROZEN

    rank: int  # 1-based position in the rendered block
    chunk_id: str
    state: PassageState
    document_id: UUID | None = None
    version: int | None = None
    title: str | None = None
    heading_path: list[str] | None = None
    doc_date: date | None = None
    score: float | None = None
    arms: list[str] | None = None
    instruction_like: bool | None = None
    text: str | None = None
    deleted_at: datetime | None = None

    def render(self) -> str:
        if self.state is PassageState.DELETED:
            when = f" ({self.deleted_at.isoformat()})" if self.deleted_at else ""
            return f"  {self.rank}. [{self.chunk_id}] {DELETED_NOTICE}{when}"
        if self.state is PassageState.MISSING:
            return f"  {self.rank}. [{self.chunk_id}] {MISSING_NOTICE}"
        flag = "true" if self.instruction_like else "false"
        facts = f"score {self.score:.3f}, arms {','.join(self.arms or [])}, instruction_like {flag}"
        if self.state is PassageState.REDUCED:
            return f"  {self.rank}. [{self.chunk_id}] v{self.version} {REDUCED_NOTICE}; {facts}"
        path = f" — {PATH_SEPARATOR.join(self.heading_path)}" if self.heading_path else ""
        dated = f", dated {self.doc_date.isoformat()}" if self.doc_date else ""
        head = f"  {self.rank}. \"{self.title}\"{path} [{self.chunk_id}] v{self.version}{dated}; {facts}"
        body = "".join(f"\n     | {line}" for line in (self.text or "").split("\n"))
        return head + body


class ViewedBelief(BaseModel):
    model_config = _FROZEN

    rank: int
    belief_id: str
    text: str | None

    def render(self) -> str:
        return f"  {self.rank}. [{self.belief_id}] {self.text if self.text is not None else REDUCED_NOTICE}"


class RecallTraceView(BaseModel):
    """A trace as one viewer may see it: filtered at ``effective_ceiling`` (the stricter of the
    recall and viewing surfaces' ceilings), with deleted passages marked deleted."""

    model_config = _FROZEN

    trace_id: UUID
    rendered_at: datetime
    surface: str
    recall_ceiling: Sensitivity
    viewing_ceiling: Sensitivity
    effective_ceiling: Sensitivity
    query_text: str | None
    block_sha256: str | None
    reduced: bool
    beliefs: list[ViewedBelief]
    passages: list[ViewedPassage]
    withheld_beliefs: int  # above the effective ceiling: counted, never shown
    withheld_passages: int
    budget: TraceBudget

    def render(self) -> str:
        """The view as text, for a person."""
        lines = [
            f"recall trace {self.trace_id} at {self.rendered_at.isoformat()} on surface {self.surface!r}; "
            f"shown up to {self.effective_ceiling} (recall {self.recall_ceiling}, viewer {self.viewing_ceiling})",
            f"query: {self.query_text if self.query_text is not None else REDUCED_NOTICE}",
            f"beliefs rendered: {len(self.beliefs) + self.withheld_beliefs}",
            *(b.render() for b in self.beliefs),
            f"passages rendered: {len(self.passages) + self.withheld_passages}"
            + (f" (block sha256 {self.block_sha256})" if self.block_sha256 else ""),
            *(p.render() for p in self.passages),
        ]
        if self.withheld_beliefs or self.withheld_passages:
            lines.append(f"withheld above this view's ceiling: {self.withheld_beliefs} belief(s), "
                         f"{self.withheld_passages} passage(s)")
        k = self.budget.classes.get(KNOWLEDGE.name)
        if k is not None:
            lines.append(f"budget: region {self.budget.region_tokens} tokens; knowledge rendered {k.rendered} of "
                         f"{k.admitted} admitted, yielded {k.yielded_items} ({k.yielded_tokens} tokens)")
        return "\n".join(lines)


def build_view(
    trace: RecallTrace,
    resolved: Mapping[str, KnowledgeChunk | DeletedChunk | None],
    viewing_ceiling: Sensitivity,
    hidden: frozenset[str] = frozenset(),
) -> RecallTraceView:
    """The view of ``trace`` for a viewing surface with ``viewing_ceiling``; ``resolved`` maps each
    traced chunk id to what it resolves to now (a chunk, a tombstone, or None); ``hidden``: chunk ids
    whose documents the viewer may not see, withheld (and counted) like those above the ceiling."""
    ceiling = min(trace.recall_ceiling, viewing_ceiling)
    beliefs = [b for b in trace.beliefs if b.sensitivity <= ceiling]
    passages: list[ViewedPassage] = []
    withheld_passages = 0
    for rank, p in enumerate(trace.passages, start=1):
        if p.sensitivity > ceiling or p.chunk_id in hidden:
            withheld_passages += 1
            continue
        now = resolved.get(p.chunk_id)
        if isinstance(now, DeletedChunk):
            passages.append(ViewedPassage(rank=rank, chunk_id=p.chunk_id, state=PassageState.DELETED,
                                          deleted_at=now.deleted_at))
        elif now is None or now.content_sha256 != p.content_sha256:
            passages.append(ViewedPassage(rank=rank, chunk_id=p.chunk_id, state=PassageState.MISSING))
        elif trace.reduced_at is not None or p.title is None:
            passages.append(ViewedPassage(
                rank=rank, chunk_id=p.chunk_id, state=PassageState.REDUCED, document_id=p.document_id,
                version=p.version, score=p.score, arms=p.arms, instruction_like=p.instruction_like))
        else:
            passages.append(ViewedPassage(
                rank=rank, chunk_id=p.chunk_id, state=PassageState.SHOWN, document_id=p.document_id,
                version=p.version, title=p.title, heading_path=p.heading_path, doc_date=p.doc_date, score=p.score,
                arms=p.arms, instruction_like=p.instruction_like, text=now.text))
    return RecallTraceView(
        trace_id=trace.trace_id, rendered_at=trace.rendered_at, surface=trace.surface,
        recall_ceiling=trace.recall_ceiling, viewing_ceiling=viewing_ceiling, effective_ceiling=ceiling,
        query_text=trace.query_text, block_sha256=trace.block_sha256, reduced=trace.reduced_at is not None,
        beliefs=[ViewedBelief(rank=i, belief_id=b.belief_id, text=b.text) for i, b in enumerate(beliefs, start=1)],
        passages=passages, withheld_beliefs=len(trace.beliefs) - len(beliefs), withheld_passages=withheld_passages,
        budget=trace.budget,
    )


# --- retention ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceRetention:
    """The two-tier schedule: full for ``full_days``, a skeleton until ``skeleton_days``, then gone."""

    full_days: int = 30
    skeleton_days: int = 365

    def __post_init__(self) -> None:
        if not 0 < self.full_days <= self.skeleton_days:
            raise ValueError("retention needs 0 < full_days <= skeleton_days")


TRACE_RETENTION = TraceRetention()


@dataclass(frozen=True)
class PruneResult:
    reduced: int  # traces moved to the skeleton tier
    deleted: int  # traces past the skeleton tier, deleted


# ================================================================================================
# I/O: writing, reading, viewing, checking and pruning traces; the budget-pressure counters.

_INSERT_TRACE = """
INSERT INTO knowledge_traces (tenant_id, trace_id, principal_id, session_id, turn_id, surface, recall_ceiling,
                              query_text, query_as_of, rendered_at, policy, block_sha256, beliefs, budget)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb, $14::jsonb)
RETURNING created_at
"""
_INSERT_PASSAGES = """
INSERT INTO knowledge_trace_passages (tenant_id, trace_id, ordinal, chunk_id, document_id, version, title,
    heading_path, doc_date, authority, score, arms, instruction_like, sensitivity, tokens, content_sha256)
SELECT $1, $2, (e.n - 1)::int, p->>'chunk_id', (p->>'document_id')::uuid, (p->>'version')::int, p->>'title',
       ARRAY(SELECT h FROM jsonb_array_elements_text(p->'heading_path') WITH ORDINALITY AS x(h, i) ORDER BY i),
       (p->>'doc_date')::date, p->>'authority', (p->>'score')::float8,
       ARRAY(SELECT a FROM jsonb_array_elements_text(p->'arms') WITH ORDINALITY AS y(a, i) ORDER BY i),
       (p->>'instruction_like')::boolean, p->>'sensitivity', (p->>'tokens')::int, p->>'content_sha256'
FROM jsonb_array_elements($3::jsonb) WITH ORDINALITY AS e(p, n)
"""
# A passage whose document was deleted before this transaction took the document's lock.
_FORGET_DELETED = """
UPDATE knowledge_trace_passages tp SET title = NULL, heading_path = NULL
FROM knowledge_deleted_chunks d
WHERE tp.tenant_id = $1 AND tp.trace_id = $2 AND d.tenant_id = $1 AND d.chunk_id = tp.chunk_id
"""
_PRESSURE = """
INSERT INTO knowledge_budget_pressure AS p (tenant_id, day, shard, turns, knowledge_turns, yielded_turns,
    passages_admitted, passages_rendered, passages_yielded, tokens_yielded, recall_yielded_turns, beliefs_yielded)
VALUES ($1, (clock_timestamp() AT TIME ZONE 'UTC')::date, pg_backend_pid() % 16, 1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (tenant_id, day, shard) DO UPDATE SET
    turns = p.turns + 1,
    knowledge_turns = p.knowledge_turns + excluded.knowledge_turns,
    yielded_turns = p.yielded_turns + excluded.yielded_turns,
    passages_admitted = p.passages_admitted + excluded.passages_admitted,
    passages_rendered = p.passages_rendered + excluded.passages_rendered,
    passages_yielded = p.passages_yielded + excluded.passages_yielded,
    tokens_yielded = p.tokens_yielded + excluded.tokens_yielded,
    recall_yielded_turns = p.recall_yielded_turns + excluded.recall_yielded_turns,
    beliefs_yielded = p.beliefs_yielded + excluded.beliefs_yielded
"""


def _passage_json(p: TracedPassage) -> dict[str, Any]:
    return {
        "chunk_id": p.chunk_id, "document_id": str(p.document_id), "version": p.version, "title": p.title,
        "heading_path": p.heading_path, "doc_date": p.doc_date.isoformat() if p.doc_date else None,
        "authority": p.authority.value, "score": p.score, "arms": p.arms, "instruction_like": p.instruction_like,
        "sensitivity": p.sensitivity.value, "tokens": p.tokens, "content_sha256": p.content_sha256,
    }


async def write_trace(tx: Connection, trace: RecallTrace) -> datetime:
    """Write ``trace`` and add its turn to the budget-pressure counters, on ``tx`` (the caller's
    transaction, which should hold each cited document's lock, shared: see `lock_documents_shared`).
    Returns the database's ``created_at``. Cancellation: the caller's transaction rolls back."""
    created_at: datetime = await tx.fetchval(
        _INSERT_TRACE, trace.tenant_id, trace.trace_id, trace.principal_id, trace.session_id, trace.turn_id,
        trace.surface, trace.recall_ceiling.value, trace.query_text, trace.query_as_of, trace.rendered_at,
        trace.policy, trace.block_sha256, json.dumps([b.model_dump(mode="json") for b in trace.beliefs]),
        trace.budget.model_dump_json())
    if trace.passages:
        await tx.execute(_INSERT_PASSAGES, trace.tenant_id, trace.trace_id,
                         json.dumps([_passage_json(p) for p in trace.passages]))
        await tx.execute(_FORGET_DELETED, trace.tenant_id, trace.trace_id)
    none = ClassRecord(offered=0, admitted=0, rendered=0, tokens=0, yielded_items=0, yielded_tokens=0)
    k = trace.budget.classes.get(KNOWLEDGE.name, none)
    r = trace.budget.classes.get(IN_TURN_RECALL.name, none)
    await tx.execute(_PRESSURE, trace.tenant_id, int(k.admitted > 0), int(k.yielded_items > 0), k.admitted,
                     k.rendered, k.yielded_items, k.yielded_tokens, int(r.yielded_items > 0), r.yielded_items)
    return created_at


async def lock_documents_shared(tx: Connection, tenant_id: str, document_ids: Sequence[UUID]) -> None:
    """Take each document's lock (the one its versions and deletion take exclusively) in shared mode,
    to the end of ``tx``, in a fixed order: a deletion then waits for this trace, or this trace sees
    its tombstones. Cancellation while waiting: the wait ends and the caller's transaction rolls back."""
    await lock_documents(tx, [(tenant_id, d) for d in document_ids], shared=True)


def _trace_from(row: Record, passages: Sequence[Record]) -> RecallTrace:
    sha = row["block_sha256"]
    return RecallTrace(
        trace_id=row["trace_id"], tenant_id=row["tenant_id"], principal_id=row["principal_id"],
        session_id=row["session_id"], turn_id=row["turn_id"], surface=row["surface"],
        recall_ceiling=Sensitivity(row["recall_ceiling"]), query_text=row["query_text"],
        query_as_of=row["query_as_of"], rendered_at=row["rendered_at"], policy=row["policy"], block_sha256=sha,
        beliefs=[TracedBelief(text=None, **b) if "text" not in b else TracedBelief(**b)
                 for b in json.loads(row["beliefs"])],
        passages=[TracedPassage(
            chunk_id=p["chunk_id"], document_id=p["document_id"], version=p["version"], title=p["title"],
            heading_path=list(p["heading_path"]) if p["heading_path"] is not None else None, doc_date=p["doc_date"],
            authority=Authority(p["authority"]), score=p["score"], arms=list(p["arms"]),
            instruction_like=p["instruction_like"], sensitivity=Sensitivity(p["sensitivity"]), tokens=p["tokens"],
            content_sha256=p["content_sha256"], block_sha256=sha) for p in passages],
        budget=TraceBudget.model_validate_json(row["budget"]), created_at=row["created_at"],
        reduced_at=row["reduced_at"],
    )


async def load_trace(db: Database, tenant_id: str, trace_id: UUID) -> RecallTrace | None:
    """The trace ``trace_id`` of ``tenant_id`` as stored, or None. Cancellation: nothing to undo."""
    async with db.connection() as conn, conn.transaction(isolation="repeatable_read"):
        row = await conn.fetchrow("SELECT * FROM knowledge_traces WHERE tenant_id = $1 AND trace_id = $2",
                                  tenant_id, trace_id)
        if row is None:
            return None
        passages = await conn.fetch(
            "SELECT * FROM knowledge_trace_passages WHERE tenant_id = $1 AND trace_id = $2 ORDER BY ordinal",
            tenant_id, trace_id)
    return _trace_from(row, passages)


_RESOLVE = """
SELECT k.chunk_id, c.document_id, c.version, c.ordinal, c.heading_path, c.text, c.tokens,
       c.contains_instruction_like_text, c.content_sha256,
       d.document_id AS deleted_document_id, d.deleted_at
FROM unnest($2::text[]) AS k(chunk_id)
LEFT JOIN knowledge_chunks c ON c.tenant_id = $1 AND c.chunk_id = k.chunk_id
LEFT JOIN knowledge_deleted_chunks d ON d.tenant_id = $1 AND d.chunk_id = k.chunk_id
"""


async def resolve_chunks(
    db: Database, tenant_id: str, chunk_ids: Sequence[str]
) -> dict[str, KnowledgeChunk | DeletedChunk | None]:
    """What each citation resolves to now, in one query: the chunk, its tombstone, or None.
    Cancellation: the query is cancelled; nothing to undo."""
    out: dict[str, KnowledgeChunk | DeletedChunk | None] = dict.fromkeys(chunk_ids)
    for r in await db.fetch(_RESOLVE, tenant_id, list(dict.fromkeys(chunk_ids))):
        if r["deleted_at"] is not None:
            out[r["chunk_id"]] = DeletedChunk(chunk_id=r["chunk_id"], document_id=r["deleted_document_id"],
                                              deleted_at=r["deleted_at"])
        elif r["document_id"] is not None:
            out[r["chunk_id"]] = KnowledgeChunk(
                chunk_id=r["chunk_id"], document_id=r["document_id"], version=r["version"], ordinal=r["ordinal"],
                heading_path=list(r["heading_path"]), text=r["text"], tokens=r["tokens"],
                contains_instruction_like_text=r["contains_instruction_like_text"],
                content_sha256=r["content_sha256"])
    return out


async def view_trace(
    db: Database, tenant_id: str, trace_id: UUID, viewing_ceiling: Sensitivity, viewer: Viewer | None = None
) -> RecallTraceView | None:
    """Load ``trace_id`` and build its view for a surface with ``viewing_ceiling`` (see `build_view`);
    with a ``viewer`` (of ``tenant_id``), the passages of documents they may not see are withheld.
    Cancellation: nothing to undo."""
    trace = await load_trace(db, tenant_id, trace_id)
    if trace is None:
        return None
    chunk_ids = [p.chunk_id for p in trace.passages]
    resolved = await resolve_chunks(db, tenant_id, chunk_ids)
    hidden: frozenset[str] = frozenset()
    if viewer is not None:
        present = [c for c, now in resolved.items() if isinstance(now, KnowledgeChunk)]
        hidden = frozenset(present) - await visible_chunk_ids(db, viewer, present)
    return build_view(trace, resolved, viewing_ceiling, hidden)


@dataclass(frozen=True)
class TraceCheck:
    """Whether a trace's passages reproduce its block: ``ok``, or why not."""

    ok: bool
    reason: str | None = None


async def check_trace(db: Database, tenant_id: str, trace_id: UUID) -> TraceCheck:
    """Re-render a trace's passages from their chunks and compare with the recorded block hash.
    Cancellation: nothing to undo."""
    trace = await load_trace(db, tenant_id, trace_id)
    if trace is None:
        return TraceCheck(False, "no such trace")
    if not trace.passages:
        return TraceCheck(True)
    resolved = await resolve_chunks(db, tenant_id, [p.chunk_id for p in trace.passages])
    texts = {cid: c.text for cid, c in resolved.items() if isinstance(c, KnowledgeChunk)}
    try:
        block = rerender(trace, texts)
    except ValueError as exc:
        return TraceCheck(False, str(exc))
    if block_sha256(block) != trace.block_sha256:
        return TraceCheck(False, "the re-rendered block does not match the recorded hash")
    return TraceCheck(True)


_REDUCE = """
WITH due AS (
    SELECT tenant_id, trace_id FROM knowledge_traces
    WHERE reduced_at IS NULL AND created_at < $1::timestamptz - make_interval(days => $2)
      AND ($4::text IS NULL OR tenant_id = $4)
    ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED
), passages AS (
    UPDATE knowledge_trace_passages tp SET title = NULL, heading_path = NULL
    FROM due WHERE tp.tenant_id = due.tenant_id AND tp.trace_id = due.trace_id
)
UPDATE knowledge_traces t
SET query_text = NULL, reduced_at = $1,
    beliefs = (SELECT coalesce(jsonb_agg(b - 'text' ORDER BY i), '[]'::jsonb)
               FROM jsonb_array_elements(t.beliefs) WITH ORDINALITY AS x(b, i))
FROM due WHERE t.tenant_id = due.tenant_id AND t.trace_id = due.trace_id
"""
_EXPIRE = """
DELETE FROM knowledge_traces t USING (
    SELECT tenant_id, trace_id FROM knowledge_traces
    WHERE created_at < $1::timestamptz - make_interval(days => $2) AND ($4::text IS NULL OR tenant_id = $4)
    ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED) AS due
WHERE t.tenant_id = due.tenant_id AND t.trace_id = due.trace_id
"""


def _count(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


async def prune_traces(
    db: Database, *, now: datetime | None = None, retention: TraceRetention = TRACE_RETENTION,
    tenant_id: str | None = None, batch_size: int = 500,
) -> PruneResult:
    """Apply the retention schedule to every tenant's traces (or ``tenant_id``'s), as of ``now``
    (default: the database's clock), in batches of ``batch_size``, each its own short transaction;
    rows another pruner holds are skipped. Cancellation: the batch in flight rolls back; earlier
    batches stay applied."""
    if now is None:
        now = await db.fetchval("SELECT clock_timestamp()")
    reduced = deleted = 0
    while True:
        n = _count(await db.execute(_EXPIRE, now, retention.skeleton_days, batch_size, tenant_id))
        deleted += n
        if n < batch_size:
            break
    while True:
        n = _count(await db.execute(_REDUCE, now, retention.full_days, batch_size, tenant_id))
        reduced += n
        if n < batch_size:
            break
    return PruneResult(reduced=reduced, deleted=deleted)
