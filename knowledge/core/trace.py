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

Pure: the models, `build_view` and `rerender`. Writing, reading, viewing, checking and pruning
traces are `knowledge.store.traces`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Self
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from knowledge.core.budget import KNOWLEDGE, ClassAllocation, RegionAllocation
from knowledge.core.render import PATH_SEPARATOR, render_knowledge_block
from knowledge.models import Authority, DeletedChunk, KnowledgeChunk, RetrievedPassage, Sensitivity

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


def _one_block(block_sha256: str | None, passages: list[TracedPassage]) -> None:
    if (block_sha256 is None) != (not passages):
        raise ValueError("a block hash is recorded exactly when passages were rendered")
    if any(p.block_sha256 != block_sha256 for p in passages):
        raise ValueError("every traced passage carries the hash of the block it was rendered in")


class TracedToolCall(BaseModel):
    """A ``knowledge.search`` result the agent got in the turn (the tool is the path): its query,
    the instant its block rendered at, the hash of the block the tool returned and its passages,
    each carrying that hash. ``query_text`` is None in the second retention tier."""

    model_config = _FROZEN

    call_no: int = Field(ge=1)  # 1, 2, … in the order the calls were made
    tool: str
    query_text: str | None
    query_as_of: datetime | None = None
    rendered_at: datetime
    block_sha256: str | None = Field(default=None, pattern=_SHA256)
    passages: list[TracedPassage]
    created_at: datetime | None = None  # set by the database when written

    @model_validator(mode="after")
    def _block_covers_passages(self) -> Self:
        _one_block(self.block_sha256, self.passages)
        return self


class TracedCitation(BaseModel):
    """A chunk id the agent's answer cited (`knowledge.core.citations`): whether the turn showed it
    (else hallucinated), the claim it stood beside (None once reduced), and the claim-support
    verdict (None: not assessed)."""

    model_config = _FROZEN

    chunk_id: str
    well_formed: bool
    shown: bool
    claim: str | None
    supported: bool | None = None


class TracedAnswer(BaseModel):
    """An answer of the agent recorded against the turn (`KnowledgeService.record_answer`): its hash
    (its text is not kept) and its citations, in order."""

    model_config = _FROZEN

    answer_no: int = Field(ge=1)
    answer_sha256: str = Field(pattern=_SHA256)
    recorded_at: datetime
    citations: list[TracedCitation]
    #: The shown passages the answer drew on (a sentence of it they support, cited or not).
    drawn_on: list[str] = []


class RecallTrace(BaseModel):
    """What one turn gave the agent: the beliefs and passages the turn rendered in one record, with
    the rendered block's hash, and every ``knowledge.search`` result of the turn (`tool_calls`).

    ``block_sha256`` is set exactly when passages were rendered, and every passage carries it.
    A trace written by a tool call outside a turn has no turn block and one tool call.
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
    tool_calls: list[TracedToolCall] = Field(default_factory=list)
    answers: list[TracedAnswer] = Field(default_factory=list)

    @model_validator(mode="after")
    def _block_covers_passages(self) -> Self:
        _one_block(self.block_sha256, self.passages)
        if [c.call_no for c in self.tool_calls] != list(range(1, len(self.tool_calls) + 1)):
            raise ValueError("a trace's tool calls are numbered 1, 2, … in order")
        return self

    def blocks(self) -> list[tuple[int, datetime, str | None, list[TracedPassage]]]:
        """Every block the agent was given in the turn: (call number — 0 for the turn's own —,
        the instant it rendered at, its hash, its passages)."""
        return [(0, self.rendered_at, self.block_sha256, self.passages),
                *((c.call_no, c.rendered_at, c.block_sha256, c.passages) for c in self.tool_calls)]

    def all_passages(self) -> list[TracedPassage]:
        """The passages of every block, the turn's first."""
        return [p for _, _, _, passages in self.blocks() for p in passages]


def rerender(trace: RecallTrace, texts: Mapping[str, str], call_no: int = 0) -> str:
    """Render one of the trace's blocks again (the turn's own, or tool call ``call_no``'s), its
    passages in order, with their texts from ``texts`` (chunk id -> text).

    Raises ``ValueError`` if that block rendered nothing, lost a title or heading path (a deleted
    chunk, or the second retention tier), or a text is missing or is not the one traced.
    """
    rendered_at, traced = next(((at, ps) for n, at, _, ps in trace.blocks() if n == call_no), (None, []))
    if rendered_at is None or not traced:
        raise ValueError("the trace rendered no passages" if call_no == 0 else
                         f"tool call {call_no} of the trace returned no passages")
    passages: list[RetrievedPassage] = []
    for p in traced:
        if p.title is None or p.heading_path is None:
            raise ValueError(f"{p.chunk_id}: the trace no longer holds its title and heading path")
        text = texts.get(p.chunk_id)
        if text is None or hashlib.sha256(text.encode("utf-8")).hexdigest() != p.content_sha256:
            raise ValueError(f"{p.chunk_id}: no text matching the traced content hash")
        passages.append(RetrievedPassage(
            chunk_id=p.chunk_id, document_id=p.document_id, title=p.title, heading_path=p.heading_path, text=text,
            doc_date=p.doc_date, authority=p.authority, score=p.score, arms=p.arms,
            instruction_like=p.instruction_like, tokens=p.tokens))
    return render_knowledge_block(passages, as_of=rendered_at, policy=trace.policy)


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


class ViewedToolCall(BaseModel):
    """A tool call of the turn as the viewer may see it: its passages filtered like the turn's."""

    model_config = _FROZEN

    call_no: int
    tool: str
    query_text: str | None
    block_sha256: str | None
    passages: list[ViewedPassage]
    withheld_passages: int

    def render(self) -> str:
        query = self.query_text if self.query_text is not None else REDUCED_NOTICE
        lines = [f"tool call {self.call_no}: {self.tool} {query!r} returned "
                 f"{len(self.passages) + self.withheld_passages} passage(s)"
                 + (f" (block sha256 {self.block_sha256})" if self.block_sha256 else ""),
                 *(p.render() for p in self.passages)]
        if self.withheld_passages:
            lines.append(f"  withheld from this view: {self.withheld_passages} passage(s)")
        return "\n".join(lines)


class ViewedAnswer(BaseModel):
    """An answer's citations as the viewer may see them: a claim citing a passage this view
    withholds is withheld too (it may quote it)."""

    model_config = _FROZEN

    answer_no: int
    citations: list[TracedCitation]

    def render(self) -> str:
        wrong = sum(not c.shown for c in self.citations)
        supported = sum(c.supported is True for c in self.citations)
        lines = [f"answer {self.answer_no}: {len(self.citations)} citation(s), {supported} supported, "
                 f"{wrong} hallucinated"]
        for c in self.citations:
            verdict = ("hallucinated (the turn never showed it)" if not c.shown
                       else "shown, " + {True: "supported", False: "NOT supported by it",
                                         None: "not assessed"}[c.supported])
            claim = c.claim if c.claim is not None else REDUCED_NOTICE
            lines.append(f"  [{c.chunk_id}] {verdict}: {claim}")
        return "\n".join(lines)


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
    tool_calls: list[ViewedToolCall] = Field(default_factory=list)
    answers: list[ViewedAnswer] = Field(default_factory=list)

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
            lines.append(f"withheld from this view: {self.withheld_beliefs} belief(s), "
                         f"{self.withheld_passages} passage(s)")
        lines += [c.render() for c in self.tool_calls]
        lines += [a.render() for a in self.answers]
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
    reduced = trace.reduced_at is not None
    passages, withheld_passages = _viewed(trace.passages, resolved, ceiling, hidden, reduced)
    calls = []
    for call in trace.tool_calls:
        shown, withheld = _viewed(call.passages, resolved, ceiling, hidden, reduced)
        calls.append(ViewedToolCall(call_no=call.call_no, tool=call.tool, query_text=call.query_text,
                                    block_sha256=call.block_sha256, passages=shown, withheld_passages=withheld))
    return RecallTraceView(
        trace_id=trace.trace_id, rendered_at=trace.rendered_at, surface=trace.surface,
        recall_ceiling=trace.recall_ceiling, viewing_ceiling=viewing_ceiling, effective_ceiling=ceiling,
        query_text=trace.query_text, block_sha256=trace.block_sha256, reduced=reduced,
        beliefs=[ViewedBelief(rank=i, belief_id=b.belief_id, text=b.text) for i, b in enumerate(beliefs, start=1)],
        passages=passages, withheld_beliefs=len(trace.beliefs) - len(beliefs), withheld_passages=withheld_passages,
        budget=trace.budget, tool_calls=calls, answers=_viewed_answers(trace, ceiling, hidden),
    )


def _viewed_answers(trace: RecallTrace, ceiling: Sensitivity, hidden: frozenset[str]) -> list[ViewedAnswer]:
    withheld = {p.chunk_id for p in trace.all_passages() if p.sensitivity > ceiling or p.chunk_id in hidden}
    return [ViewedAnswer(answer_no=a.answer_no, citations=[
        c.model_copy(update={"claim": None}) if c.chunk_id in withheld else c for c in a.citations])
        for a in trace.answers]


def _viewed(
    traced: list[TracedPassage],
    resolved: Mapping[str, KnowledgeChunk | DeletedChunk | None],
    ceiling: Sensitivity,
    hidden: frozenset[str],
    reduced: bool,
) -> tuple[list[ViewedPassage], int]:
    """One block's passages as shown up to ``ceiling`` (minus ``hidden``), and how many were withheld."""
    passages: list[ViewedPassage] = []
    withheld = 0
    for rank, p in enumerate(traced, start=1):
        if p.sensitivity > ceiling or p.chunk_id in hidden:
            withheld += 1
            continue
        now = resolved.get(p.chunk_id)
        if isinstance(now, DeletedChunk):
            passages.append(ViewedPassage(rank=rank, chunk_id=p.chunk_id, state=PassageState.DELETED,
                                          deleted_at=now.deleted_at))
        elif now is None or now.content_sha256 != p.content_sha256:
            passages.append(ViewedPassage(rank=rank, chunk_id=p.chunk_id, state=PassageState.MISSING))
        elif reduced or p.title is None:
            passages.append(ViewedPassage(
                rank=rank, chunk_id=p.chunk_id, state=PassageState.REDUCED, document_id=p.document_id,
                version=p.version, score=p.score, arms=p.arms, instruction_like=p.instruction_like))
        else:
            passages.append(ViewedPassage(
                rank=rank, chunk_id=p.chunk_id, state=PassageState.SHOWN, document_id=p.document_id,
                version=p.version, title=p.title, heading_path=p.heading_path, doc_date=p.doc_date, score=p.score,
                arms=p.arms, instruction_like=p.instruction_like, text=now.text))
    return passages, withheld


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
