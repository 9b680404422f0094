"""A turn's parts that decide (pure): what a host hands a turn (`TurnRequest`), the block and the
trace built together from the same allocated passages (`assemble`), and the knowledge class's
allowance. `knowledge.retrieval.turn.run_turn` runs them between the search and the commit."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from knowledge.core.budget import IN_TURN_RECALL, KNOWLEDGE, BudgetClass, TurnBudget, allocate_turn
from knowledge.core.memory_boundary import Belief
from knowledge.core.render import render_knowledge_block
from knowledge.core.trace import RecallTrace, TraceBudget, TracedBelief, TracedPassage, block_sha256
from knowledge.models import KnowledgeQuery, RetrievedPassage
from knowledge.vocabulary import Sensitivity


class TurnRequest(BaseModel):
    """What a host hands a turn.

    ``query`` is the turn's knowledge query — its text the user's message, its
    ``sensitivity_ceiling`` the recall surface's ceiling; ``region_tokens`` is what Region B has for
    in-turn recall and knowledge this turn; ``beliefs`` are in-turn recall's ranked candidates from
    the host's memory read path. ``retrieve``: whether knowledge is retrieved before the turn
    (pre-turn retrieval; None: the service's `Settings.preturn_retrieval`, off by default), with
    the query `form_query` builds from the message and the session's ``objective``, if the host
    gives one; only passages at or above the relevance floor are rendered.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    query: KnowledgeQuery
    region_tokens: int = Field(ge=0)
    beliefs: tuple[Belief, ...] = ()
    surface: str = Field(default="default", min_length=1, max_length=256)
    session_id: str | None = Field(default=None, max_length=256)
    turn_id: str | None = Field(default=None, max_length=256)
    retrieve: bool | None = None
    objective: str | None = Field(default=None, max_length=2000)


_WORD = re.compile(r"\w+")


def form_query(request: TurnRequest) -> KnowledgeQuery:
    """The pre-turn query: the user's message (``request.query.text``), then the session's objective
    where the host gives one and it adds words the message lacks — what the turn is about when the
    message alone is terse ("and the next step?")."""
    query = request.query
    if not request.objective or not request.objective.strip():
        return query
    said = {w.lower() for w in _WORD.findall(query.text)}
    extra = [w for w in request.objective.split() if {x.lower() for x in _WORD.findall(w)} - said]
    if not extra:
        return query
    return query.model_copy(update={"text": f"{query.text} {' '.join(extra)}"[:10_000]})


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
    block, sha, traced = render_traced(budget.passages, facts, rendered_at=rendered_at, policy=policy)
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


def render_traced(
    passages: Sequence[RetrievedPassage], facts: Mapping[str, PassageFacts], *, rendered_at: datetime, policy: str
) -> tuple[str | None, str | None, list[TracedPassage]]:
    """``passages`` (each with its `PassageFacts`) rendered as one ``<knowledge>`` block, the block's
    hash, and the passages as the trace lists them; (None, None, []) for no passage."""
    if not passages:
        return None, None, []
    block = render_knowledge_block(passages, as_of=rendered_at, policy=policy)
    sha = block_sha256(block)
    traced = []
    for p in passages:
        f = facts[p.chunk_id]
        traced.append(TracedPassage(
            chunk_id=p.chunk_id, document_id=p.document_id, version=f.version, title=p.title,
            heading_path=list(p.heading_path), doc_date=p.doc_date, authority=p.authority, score=p.score,
            arms=list(p.arms), instruction_like=p.instruction_like, sensitivity=f.sensitivity,
            tokens=p.tokens, content_sha256=f.content_sha256, block_sha256=sha))
    return block, sha, traced


def class_allowance(query: KnowledgeQuery, knowledge: BudgetClass = KNOWLEDGE) -> KnowledgeQuery:
    """``query`` limited to the knowledge class's allowance: it may ask for less, never for more."""
    max_passages = query.max_passages if knowledge.max_items is None else min(query.max_passages,
                                                                              knowledge.max_items)
    return query.model_copy(update={"budget_tokens": min(query.budget_tokens, knowledge.max_tokens),
                                    "max_passages": max_passages})
