"""One call per turn (ADR-0033, "Budgeted assembly and the trace"): query in, knowledge retrieved,
Region B budget applied, the ``<knowledge>`` block rendered, the trace written.

`run_turn` is the whole of it, so what was rendered and what was traced cannot diverge: the block
and the trace are built together by `assemble` (pure) from the same allocated passages, the trace
records the block's SHA-256, and the block is returned only once the transaction that wrote the
trace has committed. A turn that fails or is cancelled before that returns no block and leaves no
trace.

The order inside:

1. **Retrieve** with `knowledge.search` under the knowledge class's allowance (3 passages / 3,000
   tokens; a query may ask for less, never more).
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

from dataclasses import replace
from datetime import UTC, datetime
from uuid import uuid4

from knowledge.core.budget import IN_TURN_RECALL, KNOWLEDGE, BudgetClass
from knowledge.core.turn import TurnRequest, TurnResult, assemble, class_allowance
from knowledge.retrieval.search import Searcher
from knowledge.store.db import Database
from knowledge.store.traces import lock_documents_shared, passage_facts, write_trace


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
    passages = await searcher.search(class_allowance(query, knowledge))
    rendered_at = query.as_of or now or datetime.now(UTC)
    async with db.transaction() as tx:
        await lock_documents_shared(tx, query.tenant_id, [p.document_id for p in passages])
        facts = await passage_facts(tx, query.tenant_id, [p.chunk_id for p in passages])
        result = assemble(request, [p for p in passages if p.chunk_id in facts], facts, trace_id=uuid4(),
                          rendered_at=rendered_at, policy=searcher.policy.name, knowledge=knowledge,
                          in_turn_recall=in_turn_recall)
        created_at = await write_trace(tx, result.trace)
    return replace(result, trace=result.trace.model_copy(update={"created_at": created_at}))
