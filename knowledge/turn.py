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
3. **Budget** (`knowledge.budget.allocate_turn`): beliefs above the recall surface's ceiling are
   withheld first; then knowledge yields to in-turn recall under region pressure, whole passages
   from the lowest-ranked end.
4. **Render** the surviving passages, in rank order, as the ``<knowledge>`` block (none: no block).
5. **Trace**: beliefs and passages in one `RecallTrace`, with the block's hash and the allocation,
   plus the budget-pressure counters; commit; return.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from uuid import UUID, uuid4

from pydantic import BaseModel, ConfigDict, Field

from knowledge.budget import IN_TURN_RECALL, KNOWLEDGE, BudgetClass, TurnBudget, allocate_turn
from knowledge.memory_boundary import Belief
from knowledge.models import KnowledgeQuery, RetrievedPassage, Sensitivity
from knowledge.render import render_knowledge_block
from knowledge.search import Searcher
from knowledge.store.db import Connection, Database
from knowledge.trace import (
    RecallTrace,
    TraceBudget,
    TracedBelief,
    TracedPassage,
    block_sha256,
    lock_documents_shared,
    write_trace,
)


class TurnRequest(BaseModel):
    """What a host hands a turn.

    ``query`` is the turn's knowledge query (its ``sensitivity_ceiling`` is the recall surface's
    ceiling); ``region_tokens`` is what Region B has for in-turn recall and knowledge this turn;
    ``beliefs`` are in-turn recall's ranked candidates from the host's memory read path.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    query: KnowledgeQuery
    region_tokens: int = Field(ge=0)
    beliefs: tuple[Belief, ...] = ()
    surface: str = Field(default="default", min_length=1, max_length=256)
    session_id: str | None = Field(default=None, max_length=256)
    turn_id: str | None = Field(default=None, max_length=256)


@dataclass(frozen=True)
class PassageFacts:
    """What the trace needs of a passage beyond `RetrievedPassage`: its version, its document's
    sensitivity, and its content hash."""

    version: int
    sensitivity: Sensitivity
    content_sha256: str


@dataclass(frozen=True)
class TurnResult:
    """A turn's Region B, rendered and traced.

    ``block`` is the ``<knowledge>`` block to place in Region B (None when no passage survived);
    ``beliefs`` are the beliefs in-turn recall renders (the host's memory renders them);
    ``trace`` is the committed record of both.
    """

    block: str | None
    beliefs: tuple[Belief, ...]
    passages: tuple[RetrievedPassage, ...]
    budget: TurnBudget
    trace: RecallTrace


def assemble(
    request: TurnRequest,
    passages: Sequence[RetrievedPassage],
    facts: Mapping[str, PassageFacts],
    *,
    trace_id: UUID,
    rendered_at: datetime,
    policy: str,
    knowledge: BudgetClass = KNOWLEDGE,
    in_turn_recall: BudgetClass = IN_TURN_RECALL,
) -> TurnResult:
    """Budget, render and trace a turn from its retrieved ``passages`` (ranked; each needs its
    `PassageFacts`) and the request's beliefs. Pure: the same inputs give the same block and trace."""
    query = request.query
    beliefs = [b for b in request.beliefs if b.sensitivity <= query.sensitivity_ceiling]
    budget = allocate_turn(request.region_tokens, beliefs, passages, knowledge=knowledge,
                           in_turn_recall=in_turn_recall)
    block: str | None = None
    sha: str | None = None
    traced: list[TracedPassage] = []
    if budget.passages:
        block = render_knowledge_block(budget.passages, as_of=rendered_at, policy=policy)
        sha = block_sha256(block)
        for p in budget.passages:
            f = facts[p.chunk_id]
            traced.append(TracedPassage(
                chunk_id=p.chunk_id, document_id=p.document_id, version=f.version, title=p.title,
                heading_path=list(p.heading_path), doc_date=p.doc_date, authority=p.authority, score=p.score,
                arms=list(p.arms), instruction_like=p.instruction_like, sensitivity=f.sensitivity,
                tokens=p.tokens, content_sha256=f.content_sha256, block_sha256=sha))
    trace = RecallTrace(
        trace_id=trace_id, tenant_id=query.tenant_id, principal_id=query.principal_id,
        session_id=request.session_id, turn_id=request.turn_id, surface=request.surface,
        recall_ceiling=query.sensitivity_ceiling, query_text=query.text, query_as_of=query.as_of,
        rendered_at=rendered_at, policy=policy, block_sha256=sha,
        beliefs=[TracedBelief(belief_id=b.belief_id, text=b.text, tokens=b.tokens, sensitivity=b.sensitivity)
                 for b in budget.beliefs],
        passages=traced,
        budget=TraceBudget.of(budget.allocation, withheld_beliefs=len(request.beliefs) - len(beliefs)),
    )
    return TurnResult(block=block, beliefs=budget.beliefs, passages=budget.passages, budget=budget, trace=trace)


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


def class_allowance(query: KnowledgeQuery, knowledge: BudgetClass = KNOWLEDGE) -> KnowledgeQuery:
    """``query`` limited to the knowledge class's allowance: it may ask for less, never for more."""
    max_passages = query.max_passages if knowledge.max_items is None else min(query.max_passages,
                                                                              knowledge.max_items)
    return query.model_copy(update={"budget_tokens": min(query.budget_tokens, knowledge.max_tokens),
                                    "max_passages": max_passages})


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
