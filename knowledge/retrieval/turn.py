"""One call per turn (ADR-0033, "Budgeted assembly and the trace"): query in, knowledge retrieved,
Region B budget applied, the ``<knowledge>`` block rendered, the trace written.

`run_turn` is the whole of it, so what was rendered and what was traced cannot diverge: the block
and the trace are built together by `assemble` (pure) from the same allocated passages, the trace
records the block's SHA-256, and the block is returned only once the transaction that wrote the
trace has committed. A turn that fails or is cancelled before that returns no block and leaves no
trace.

The order inside:

1. **Retrieve**, where the turn asks for pre-turn retrieval (``request.retrieve``, resolved by the
   service from `Settings.preturn_retrieval`, off by default), with `knowledge.search` under the
   knowledge class's allowance (3 passages / 3,000 tokens; a query may ask for less, never more)
   and the query `form_query` builds; otherwise the turn renders beliefs only and its trace waits
   for the agent's ``knowledge.search`` calls.
2. **Lock and resolve** (one transaction from here on): the cited documents' locks in shared mode,
   then each passage's version, sensitivity and content hash. A passage whose document was deleted
   since step 1 is not rendered.
3. **Budget** (`knowledge.core.budget.allocate_turn`): beliefs above the recall surface's ceiling are
   withheld first; then knowledge yields to in-turn recall under region pressure, whole passages
   from the lowest-ranked end.
4. **Render** the surviving passages, in rank order, as the ``<knowledge>`` block (none: no block).
5. **Trace**: beliefs and passages in one `RecallTrace`, with the block's hash and the allocation,
   plus the budget-pressure counters; commit; return.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from uuid import UUID, uuid4

from knowledge.core.budget import IN_TURN_RECALL, KNOWLEDGE, BudgetClass
from knowledge.core.render import render_knowledge_block
from knowledge.core.trace import RecallTrace, TraceBudget, TracedToolCall
from knowledge.core.turn import TurnRequest, TurnResult, assemble, class_allowance, form_query, render_traced
from knowledge.errors import ToolRefused
from knowledge.models import KnowledgeQuery, RetrievedPassage
from knowledge.retrieval.search import Searcher
from knowledge.store.db import Database
from knowledge.store.traces import (
    lock_documents_shared,
    lock_trace_for_call,
    passage_facts,
    trace_owner,
    write_tool_call,
    write_trace,
)

#: The surface a trace records when a tool call outside any turn's trace writes one of its own.
TOOL_SURFACE = "tool"


async def run_turn(
    db: Database,
    searcher: Searcher,
    request: TurnRequest,
    *,
    now: datetime | None = None,
    knowledge: BudgetClass = KNOWLEDGE,
    in_turn_recall: BudgetClass = IN_TURN_RECALL,
) -> TurnResult:
    """Run one turn (see the module docstring) and return its block, beliefs and committed trace.

    ``now`` is the block's ``as_of`` for a live query (default: the current time); a query with
    ``as_of`` renders that instant. Cancellation: a search in flight is cancelled, the transaction
    rolls back, and nothing is returned or traced.
    """
    query = request.query
    passages = await searcher.search(class_allowance(form_query(request), knowledge)) if request.retrieve else []
    rendered_at = query.as_of or now or datetime.now(UTC)
    async with db.transaction() as tx:
        await lock_documents_shared(tx, query.tenant_id, [p.document_id for p in passages])
        facts = await passage_facts(tx, query.tenant_id, [p.chunk_id for p in passages])
        result = assemble(request, [p for p in passages if p.chunk_id in facts], facts, trace_id=uuid4(),
                          rendered_at=rendered_at, policy=searcher.policy.name, knowledge=knowledge,
                          in_turn_recall=in_turn_recall)
        created_at = await write_trace(tx, result.trace)
    return replace(result, trace=result.trace.model_copy(update={"created_at": created_at}))


@dataclass(frozen=True)
class ToolSearch:
    """A ``knowledge.search`` tool call, traced: the trace and call number it was recorded under, the
    passages it returned, the block rendered from them (None: nothing found), whose hash the trace
    holds, and what the tool hands the agent (that block, or an empty ``<knowledge>`` envelope)."""

    trace_id: UUID
    call_no: int
    passages: tuple[RetrievedPassage, ...]
    block: str | None
    content: str
    created_at: datetime


async def run_tool_search(
    db: Database,
    searcher: Searcher,
    query: KnowledgeQuery,
    *,
    trace_id: UUID | None = None,
    tool: str = "knowledge.search",
    session_id: str | None = None,
    turn_id: str | None = None,
    now: datetime | None = None,
) -> ToolSearch:
    """Search for the agent and append what it is given to its turn's trace (the tool is the path,
    so the trace shows what the agent knew from both paths): ``trace_id`` names the turn's trace —
    it must be ``query``'s principal's, and the turn's recall ceiling caps the search's — or, None,
    a trace of the call's own is written (no turn block). The passages are resolved, rendered and
    recorded in one transaction, under the cited documents' shared locks, like a turn's: a passage
    whose document was deleted since the search is not returned.

    Raises `ToolRefused` (``unknown_trace``) for a trace that is not the principal's. Cancellation:
    the search is cancelled or the transaction rolls back; nothing is returned or traced."""
    if trace_id is not None:
        owner = await trace_owner(db, query.tenant_id, trace_id)
        if owner is None or owner[0] != query.principal_id:
            raise ToolRefused("unknown_trace", f"no trace {trace_id} of this principal to add the search to")
        query = query.model_copy(update={"sensitivity_ceiling": min(query.sensitivity_ceiling, owner[1])})
    found = await searcher.search(query)
    rendered_at = query.as_of or now or datetime.now(UTC)
    policy = searcher.policy.name
    async with db.transaction() as tx:
        if trace_id is None:
            trace_id = uuid4()
            await write_trace(tx, RecallTrace(
                trace_id=trace_id, tenant_id=query.tenant_id, principal_id=query.principal_id, session_id=session_id,
                turn_id=turn_id, surface=TOOL_SURFACE, recall_ceiling=query.sensitivity_ceiling,
                query_text=query.text, query_as_of=query.as_of, rendered_at=rendered_at, policy=policy,
                beliefs=[], passages=[], budget=TraceBudget(region_tokens=0, classes={})), turn=False)
        call_no = await lock_trace_for_call(tx, query.tenant_id, trace_id)
        if call_no is None:  # deleted by retention between the check and the lock
            raise ToolRefused("unknown_trace", f"no trace {trace_id} of this principal to add the search to")
        await lock_documents_shared(tx, query.tenant_id, [p.document_id for p in found])
        facts = await passage_facts(tx, query.tenant_id, [p.chunk_id for p in found])
        kept = [p for p in found if p.chunk_id in facts]
        block, sha, traced = render_traced(kept, facts, rendered_at=rendered_at, policy=policy)
        created_at = await write_tool_call(tx, query.tenant_id, trace_id, TracedToolCall(
            call_no=call_no, tool=tool, query_text=query.text, query_as_of=query.as_of, rendered_at=rendered_at,
            block_sha256=sha, passages=traced))
    content = block if block is not None else render_knowledge_block([], as_of=rendered_at, policy=policy)
    return ToolSearch(trace_id=trace_id, call_no=call_no, passages=tuple(kept), block=block, content=content,
                      created_at=created_at)
