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


class ActiveEntity(BaseModel):
    """An entity the session is about, as the host's memory tracks it: its name and the other names
    it goes by (aliases)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=256)
    aliases: tuple[str, ...] = Field(default=(), max_length=32)


class TurnRequest(BaseModel):
    """What a host hands a turn.

    ``query`` is the turn's knowledge query — its text the user's message, its
    ``sensitivity_ceiling`` the recall surface's ceiling; ``region_tokens`` is what Region B has for
    in-turn recall and knowledge this turn; ``beliefs`` are in-turn recall's ranked candidates from
    the host's memory read path. ``retrieve``: whether knowledge is retrieved before the turn
    (pre-turn retrieval; None: the service's `Settings.preturn_retrieval`, off by default), with
    the query `form_query` builds from the message and the session's ``objective``, if the host
    gives one and the session's active ``entities`` (the host memory's query former's: the spec
    shares it — "the same objective, the same active entities, the same aliasing"); only passages
    at or above the relevance floor are rendered.
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
    entities: tuple[ActiveEntity, ...] = Field(default=(), max_length=64)


_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _names(text: str, words: set[str]) -> bool:
    """``text`` (a name, an alias) is said in ``words``: all of its words are."""
    mine = _words(text)
    return bool(mine) and mine <= words


def form_query(request: TurnRequest) -> KnowledgeQuery:
    """The pre-turn query: the user's message (``request.query.text``), then what the session adds
    to it — what the turn is about when the message alone is terse ("and the next step?"):

    1. the words of the session's objective the message lacks, where the host gives one;
    2. the session's active entities, by name: an entity the message names by an alias only ("the
       prod db") brings its name ("orders-postgres"); when the message names none of them, by name
       or alias, they all come — the session's focus, left implicit. An entity the message names is
       there already; while it names one, the others stay out (the message chose its subject).
    """
    query = request.query
    message = _words(query.text)
    said = set(message)
    extra: list[str] = []
    for word in (request.objective or "").split():
        if _words(word) - said:
            extra.append(word)
            said |= _words(word)
    named = [e for e in request.entities if any(_names(n, message) for n in (e.name, *e.aliases))]
    for entity in named or request.entities:
        if not _names(entity.name, said):
            extra.append(entity.name)
            said |= _words(entity.name)
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
