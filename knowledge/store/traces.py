"""The recall trace's storage (`knowledge.core.trace` holds the record and its view): writing a
trace in a turn's transaction, reading and viewing it, checking it against its block hash, the
two-tier retention pruning, and the budget-pressure counters."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from knowledge.core.budget import IN_TURN_RECALL, KNOWLEDGE
from knowledge.core.trace import (
    TRACE_RETENTION,
    ClassRecord,
    PruneResult,
    RecallTrace,
    RecallTraceView,
    TraceBudget,
    TracedAnswer,
    TracedBelief,
    TracedCitation,
    TracedPassage,
    TracedToolCall,
    TraceRetention,
    block_sha256,
    build_view,
    rerender,
)
from knowledge.core.turn import PassageFacts
from knowledge.models import DeletedChunk, KnowledgeChunk, Viewer
from knowledge.store.catalog import visible_chunk_ids
from knowledge.store.db import Connection, Database, Record
from knowledge.store.locks import lock_documents
from knowledge.vocabulary import Authority, Sensitivity

_INSERT_TRACE = """
INSERT INTO knowledge_traces (tenant_id, trace_id, principal_id, session_id, turn_id, surface, recall_ceiling,
                              query_text, query_as_of, rendered_at, policy, block_sha256, beliefs, budget)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb, $14::jsonb)
RETURNING created_at
"""
_INSERT_PASSAGES = """
INSERT INTO knowledge_trace_passages (tenant_id, trace_id, call_no, ordinal, chunk_id, document_id, version, title,
    heading_path, doc_date, authority, score, arms, instruction_like, sensitivity, tokens, content_sha256)
SELECT $1, $2, $4, (e.n - 1)::int, p->>'chunk_id', (p->>'document_id')::uuid, (p->>'version')::int, p->>'title',
       ARRAY(SELECT h FROM jsonb_array_elements_text(p->'heading_path') WITH ORDINALITY AS x(h, i) ORDER BY i),
       (p->>'doc_date')::date, p->>'authority', (p->>'score')::float8,
       ARRAY(SELECT a FROM jsonb_array_elements_text(p->'arms') WITH ORDINALITY AS y(a, i) ORDER BY i),
       (p->>'instruction_like')::boolean, p->>'sensitivity', (p->>'tokens')::int, p->>'content_sha256'
FROM jsonb_array_elements($3::jsonb) WITH ORDINALITY AS e(p, n)
"""
# The next tool call of a trace, numbered under the trace row's lock (concurrent calls of one turn
# queue here); no row: no such trace.
_LOCK_TRACE = """
SELECT (SELECT coalesce(max(call_no), 0) + 1 FROM knowledge_trace_tool_calls c
        WHERE c.tenant_id = t.tenant_id AND c.trace_id = t.trace_id) AS call_no
FROM knowledge_traces t WHERE tenant_id = $1 AND trace_id = $2 FOR UPDATE
"""
_INSERT_TOOL_CALL = """
INSERT INTO knowledge_trace_tool_calls (tenant_id, trace_id, call_no, tool, query_text, query_as_of, rendered_at,
                                        block_sha256)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING created_at
"""
_TOOL_PRESSURE = """
INSERT INTO knowledge_budget_pressure AS p (tenant_id, day, shard, tool_calls, tool_passages)
VALUES ($1, (clock_timestamp() AT TIME ZONE 'UTC')::date, pg_backend_pid() % 16, 1, $2)
ON CONFLICT (tenant_id, day, shard) DO UPDATE SET
    tool_calls = p.tool_calls + 1, tool_passages = p.tool_passages + excluded.tool_passages
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


async def write_trace(tx: Connection, trace: RecallTrace, *, turn: bool = True) -> datetime:
    """Write ``trace`` and add its turn to the budget-pressure counters (``turn``: False for the
    trace a tool call outside any turn writes for itself), on ``tx`` (the caller's transaction,
    which should hold each cited document's lock, shared: see `lock_documents_shared`). Returns the
    database's ``created_at``. Cancellation: the caller's transaction rolls back."""
    created_at: datetime = await tx.fetchval(
        _INSERT_TRACE, trace.tenant_id, trace.trace_id, trace.principal_id, trace.session_id, trace.turn_id,
        trace.surface, trace.recall_ceiling.value, trace.query_text, trace.query_as_of, trace.rendered_at,
        trace.policy, trace.block_sha256, json.dumps([b.model_dump(mode="json") for b in trace.beliefs]),
        trace.budget.model_dump_json())
    await _write_passages(tx, trace.tenant_id, trace.trace_id, 0, trace.passages)
    if not turn:
        return created_at
    none = ClassRecord(offered=0, admitted=0, rendered=0, tokens=0, yielded_items=0, yielded_tokens=0)
    k = trace.budget.classes.get(KNOWLEDGE.name, none)
    r = trace.budget.classes.get(IN_TURN_RECALL.name, none)
    await tx.execute(_PRESSURE, trace.tenant_id, int(k.admitted > 0), int(k.yielded_items > 0), k.admitted,
                     k.rendered, k.yielded_items, k.yielded_tokens, int(r.yielded_items > 0), r.yielded_items)
    return created_at


async def _write_passages(tx: Connection, tenant_id: str, trace_id: UUID, call_no: int,
                          passages: Sequence[TracedPassage]) -> None:
    """One block's passages (call 0: the turn's own), forgetting the titles of those deleted already."""
    if passages:
        await tx.execute(_INSERT_PASSAGES, tenant_id, trace_id, json.dumps([_passage_json(p) for p in passages]),
                         call_no)
        await tx.execute(_FORGET_DELETED, tenant_id, trace_id)


async def trace_owner(db: Database, tenant_id: str, trace_id: UUID) -> tuple[str, Sensitivity] | None:
    """The principal a trace belongs to and its recall ceiling; None if absent."""
    row = await db.fetchrow("SELECT principal_id, recall_ceiling FROM knowledge_traces "
                            "WHERE tenant_id = $1 AND trace_id = $2", tenant_id, trace_id)
    return None if row is None else (row["principal_id"], Sensitivity(row["recall_ceiling"]))


async def lock_trace_for_call(tx: Connection, tenant_id: str, trace_id: UUID) -> int | None:
    """Lock the trace row (to the end of ``tx``) and return its next tool call's number; None if
    absent. Cancellation: the caller's transaction rolls back."""
    call_no: int | None = await tx.fetchval(_LOCK_TRACE, tenant_id, trace_id)
    return call_no


async def write_tool_call(tx: Connection, tenant_id: str, trace_id: UUID, call: TracedToolCall) -> datetime:
    """Append ``call`` (numbered by `lock_trace_for_call` on the same ``tx``) to the trace, with its
    passages, and count it in budget pressure. Returns the database's ``created_at``.
    Cancellation: the caller's transaction rolls back."""
    created_at: datetime = await tx.fetchval(
        _INSERT_TOOL_CALL, tenant_id, trace_id, call.call_no, call.tool, call.query_text, call.query_as_of,
        call.rendered_at, call.block_sha256)
    await _write_passages(tx, tenant_id, trace_id, call.call_no, call.passages)
    await tx.execute(_TOOL_PRESSURE, tenant_id, len(call.passages))
    return created_at


async def lock_documents_shared(tx: Connection, tenant_id: str, document_ids: Sequence[UUID]) -> None:
    """Take each document's lock (the one its versions and deletion take exclusively) in shared mode,
    to the end of ``tx``, in a fixed order: a deletion then waits for this trace, or this trace sees
    its tombstones. Cancellation while waiting: the wait ends and the caller's transaction rolls back."""
    await lock_documents(tx, [(tenant_id, d) for d in document_ids], shared=True)


def _traced(p: Record, sha: str) -> TracedPassage:
    return TracedPassage(
        chunk_id=p["chunk_id"], document_id=p["document_id"], version=p["version"], title=p["title"],
        heading_path=list(p["heading_path"]) if p["heading_path"] is not None else None, doc_date=p["doc_date"],
        authority=Authority(p["authority"]), score=p["score"], arms=list(p["arms"]),
        instruction_like=p["instruction_like"], sensitivity=Sensitivity(p["sensitivity"]), tokens=p["tokens"],
        content_sha256=p["content_sha256"], block_sha256=sha)


def _trace_from(row: Record, passages: Sequence[Record], calls: Sequence[Record], answers: Sequence[Record],
                citations: Sequence[Record]) -> RecallTrace:
    sha = row["block_sha256"]
    return RecallTrace(
        trace_id=row["trace_id"], tenant_id=row["tenant_id"], principal_id=row["principal_id"],
        session_id=row["session_id"], turn_id=row["turn_id"], surface=row["surface"],
        recall_ceiling=Sensitivity(row["recall_ceiling"]), query_text=row["query_text"],
        query_as_of=row["query_as_of"], rendered_at=row["rendered_at"], policy=row["policy"], block_sha256=sha,
        beliefs=[TracedBelief(text=None, **b) if "text" not in b else TracedBelief(**b)
                 for b in json.loads(row["beliefs"])],
        passages=[_traced(p, sha) for p in passages if p["call_no"] == 0],
        budget=TraceBudget.model_validate_json(row["budget"]), created_at=row["created_at"],
        reduced_at=row["reduced_at"],
        tool_calls=[TracedToolCall(
            call_no=c["call_no"], tool=c["tool"], query_text=c["query_text"], query_as_of=c["query_as_of"],
            rendered_at=c["rendered_at"], block_sha256=c["block_sha256"], created_at=c["created_at"],
            passages=[_traced(p, c["block_sha256"]) for p in passages if p["call_no"] == c["call_no"]])
            for c in calls],
        answers=[TracedAnswer(
            answer_no=a["answer_no"], answer_sha256=a["answer_sha256"], recorded_at=a["recorded_at"],
            drawn_on=list(a["drawn_on"]),
            citations=[TracedCitation(chunk_id=c["chunk_id"], well_formed=c["well_formed"], shown=c["shown"],
                                      claim=c["claim"], supported=c["supported"])
                       for c in citations if c["answer_no"] == a["answer_no"]])
            for a in answers],
    )


async def load_trace(db: Database, tenant_id: str, trace_id: UUID) -> RecallTrace | None:
    """The trace ``trace_id`` of ``tenant_id`` as stored, or None. Cancellation: nothing to undo."""
    async with db.connection() as conn, conn.transaction(isolation="repeatable_read"):
        row = await conn.fetchrow("SELECT * FROM knowledge_traces WHERE tenant_id = $1 AND trace_id = $2",
                                  tenant_id, trace_id)
        if row is None:
            return None
        passages = await conn.fetch(
            "SELECT * FROM knowledge_trace_passages WHERE tenant_id = $1 AND trace_id = $2 ORDER BY call_no, ordinal",
            tenant_id, trace_id)
        calls = await conn.fetch(
            "SELECT * FROM knowledge_trace_tool_calls WHERE tenant_id = $1 AND trace_id = $2 ORDER BY call_no",
            tenant_id, trace_id)
        answers = await conn.fetch(
            "SELECT * FROM knowledge_trace_answers WHERE tenant_id = $1 AND trace_id = $2 ORDER BY answer_no",
            tenant_id, trace_id)
        citations = await conn.fetch(
            "SELECT * FROM knowledge_trace_citations WHERE tenant_id = $1 AND trace_id = $2 "
            "ORDER BY answer_no, ordinal", tenant_id, trace_id) if answers else []
    return _trace_from(row, passages, calls, answers, citations)


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
    with a ``viewer`` (of ``tenant_id``): None unless the trace is theirs, and the passages of
    documents they may not see are withheld. Cancellation: nothing to undo."""
    trace = await load_trace(db, tenant_id, trace_id)
    if trace is None or (viewer is not None and viewer.principal_id != trace.principal_id):
        return None
    chunk_ids = [p.chunk_id for p in trace.all_passages()]
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
    resolved = await resolve_chunks(db, tenant_id, [p.chunk_id for p in trace.all_passages()])
    texts = {cid: c.text for cid, c in resolved.items() if isinstance(c, KnowledgeChunk)}
    for call_no, _, sha, passages in trace.blocks():
        if not passages:
            continue
        which = "the turn's block" if call_no == 0 else f"tool call {call_no}'s block"
        try:
            block = rerender(trace, texts, call_no)
        except ValueError as exc:
            return TraceCheck(False, f"{which}: {exc}")
        if block_sha256(block) != sha:
            return TraceCheck(False, f"{which}: the re-rendered block does not match the recorded hash")
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
), calls AS (
    UPDATE knowledge_trace_tool_calls tc SET query_text = NULL
    FROM due WHERE tc.tenant_id = due.tenant_id AND tc.trace_id = due.trace_id
), claims AS (
    UPDATE knowledge_trace_citations ci SET claim = NULL
    FROM due WHERE ci.tenant_id = due.tenant_id AND ci.trace_id = due.trace_id
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


_FACTS = """
SELECT c.chunk_id, c.version, c.content_sha256, d.sensitivity
FROM knowledge_chunks c
JOIN knowledge_documents d ON d.tenant_id = c.tenant_id AND d.document_id = c.document_id AND d.version = c.version
WHERE c.tenant_id = $1 AND c.chunk_id = ANY($2::text[])
"""


async def passage_facts(tx: Connection, tenant_id: str, chunk_ids: Sequence[str]) -> dict[str, PassageFacts]:
    """`PassageFacts` of each chunk that still exists (a deleted one is absent), read on ``tx``.
    Cancellation: the caller's transaction rolls back."""
    rows = await tx.fetch(_FACTS, tenant_id, list(chunk_ids))
    return {r["chunk_id"]: PassageFacts(r["version"], Sensitivity(r["sensitivity"]), r["content_sha256"])
            for r in rows}
