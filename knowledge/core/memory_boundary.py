"""The boundary with memory (ADR-0033, "Why knowledge is not memory"; gate "No belief from a document"). Pure.

Knowledge is never formed, and beliefs are never formed from knowledge. This module is the whole of
the contact surface between the two stores, and both crossings are one-directional:

- **Memory to knowledge: `Belief`.** A host's memory read path hands a turn its in-turn recall
  candidates as beliefs. This package only reads them — to budget them beside passages
  (`knowledge.core.budget`) and to record them in the same trace (`knowledge.store.traces`). No module here
  constructs a `Belief`, stores one as a belief, or changes one; `tests/core/test_memory_boundary.py`
  checks that over the source of every module.
- **Knowledge to memory: nothing.** Formation reads episodes only. `consolidation_input` is the
  typed view of a session that a host's consolidation pass reads, and in it rendered context (a
  ``<knowledge>`` block, an in-turn recall block) and knowledge tool results are *not episodes*:
  they are left out and counted. `EpisodeSource` has no member a document could stand behind, so an
  episode whose provenance is a document cannot be expressed. Because an agent may repeat what it
  was shown, ``<knowledge>`` envelopes are cut out of every episode's text, and sentences the session
  was shown verbatim in a passage (or a knowledge tool result) are cut out of the agent's and tools'
  episodes; each cut leaves a marker naming what was removed, never the text.

What remains an episode is what the principal said, what the agent said in its own words, and what
non-knowledge tools returned — the spec's "formation reads episodes only", made a type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from knowledge.core.render import parse_knowledge_block, unescape
from knowledge.models import Sensitivity, TrustLevel

_FROZEN = ConfigDict(frozen=True, extra="forbid")

#: The knowledge tool domain: results of these tools are knowledge, never episodes.
KNOWLEDGE_TOOL_DOMAIN = "knowledge"
#: A shown sentence shorter than this is not treated as a quote ("Yes.", "See below." recur anywhere).
MIN_QUOTE_CHARS = 40

_ENVELOPE = re.compile(r"<knowledge\b[^>]*>.*?</knowledge>", re.DOTALL)
_UNCLOSED_ENVELOPE = re.compile(r'<knowledge as_of="[^>]*>.*\Z', re.DOTALL)  # a rendered block, cut off
_TAG = re.compile(r"<[^>]*>")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|\n+")
_ENVELOPE_MARK = "[knowledge block omitted]"
_QUOTE_MARK = "[passage quoted]"


class Belief(BaseModel):
    """One in-turn recall candidate, as a host's memory read path hands it to a turn (read only here).

    ``tokens`` is what rendering it costs in Region B (a belief is about twenty-five); ``sensitivity``
    is checked against the recall surface's ceiling before it is budgeted, and against the viewing
    surface's when a trace is viewed.
    """

    model_config = _FROZEN

    belief_id: str = Field(min_length=1, max_length=256)
    text: str
    tokens: int = Field(ge=0)
    sensitivity: Sensitivity = Sensitivity.INTERNAL


# --- the session, as a host's log holds it ------------------------------------------------------


class UserMessage(BaseModel):
    """What the principal said."""

    model_config = _FROZEN

    kind: Literal["user_message"] = "user_message"
    item_id: str = Field(min_length=1)
    text: str
    occurred_at: datetime | None = None


class AgentMessage(BaseModel):
    """What the agent said (which may repeat what it was shown: see `consolidation_input`)."""

    model_config = _FROZEN

    kind: Literal["agent_message"] = "agent_message"
    item_id: str = Field(min_length=1)
    text: str
    occurred_at: datetime | None = None


class ToolResult(BaseModel):
    """What a tool returned, with the tool's name (``knowledge.search`` …) and the result's trust label."""

    model_config = _FROZEN

    kind: Literal["tool_result"] = "tool_result"
    item_id: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    trust: TrustLevel
    text: str
    occurred_at: datetime | None = None


class RenderedContext(BaseModel):
    """A block the context engine rendered into a turn (``region`` names its class: ``knowledge``,
    ``in_turn_recall`` …). Context is what the agent was shown, not something that happened."""

    model_config = _FROZEN

    kind: Literal["rendered_context"] = "rendered_context"
    item_id: str = Field(min_length=1)
    region: str = Field(min_length=1)
    text: str
    occurred_at: datetime | None = None


SessionItem = Annotated[UserMessage | AgentMessage | ToolResult | RenderedContext, Field(discriminator="kind")]


# --- what consolidation reads -------------------------------------------------------------------


class EpisodeSource(StrEnum):
    """Who an episode came from. Deliberately closed: there is no member for a document, a passage, a
    knowledge tool, or rendered context, so an episode with that provenance cannot exist."""

    USER = "user"
    AGENT = "agent"
    TOOL = "tool"  # a tool outside the knowledge domain


class Exclusion(StrEnum):
    """Why a session item is not an episode."""

    RENDERED_CONTEXT = "rendered_context"
    KNOWLEDGE_TOOL_RESULT = "knowledge_tool_result"


class Episode(BaseModel):
    """One thing that happened in a session, as formation may read it."""

    model_config = _FROZEN

    episode_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    ordinal: int = Field(ge=0)  # position in the session's log
    source: EpisodeSource
    tool: str | None = None  # set exactly when source is TOOL
    text: str
    occurred_at: datetime | None = None

    @model_validator(mode="after")
    def _tool_names_tool_episodes(self) -> Self:
        if (self.source is EpisodeSource.TOOL) != (self.tool is not None):
            raise ValueError("tool is set exactly on episodes whose source is TOOL")
        if self.tool is not None and self.tool.split(".", 1)[0] == KNOWLEDGE_TOOL_DOMAIN:
            raise ValueError("a knowledge tool result is not an episode")
        return self


class ConsolidationInput(BaseModel):
    """The episodes of one session, in log order, and what was kept out of them (counts, no content)."""

    model_config = _FROZEN

    session_id: str
    episodes: tuple[Episode, ...]
    excluded: dict[Exclusion, int]  # session items that are not episodes, by reason
    envelopes_removed: int  # <knowledge> envelopes cut out of episode texts
    quotes_removed: int  # sentences shown in a passage, cut out of agent and tool episodes



def is_knowledge_tool(tool: str, trust: TrustLevel) -> bool:
    """A result of the ``knowledge`` tool domain, or any result labelled `TrustLevel.KNOWLEDGE`."""
    return trust is TrustLevel.KNOWLEDGE or tool.split(".", 1)[0] == KNOWLEDGE_TOOL_DOMAIN


def _unescape_lenient(text: str) -> str:
    try:
        return unescape(text)
    except ValueError:  # a bare "&": not our escaping, so nothing to undo
        return text


def _shown_texts(text: str) -> list[str]:
    """The passage texts in something shown: each ``<knowledge>`` block's passages (unescaped), and
    the text itself when it holds no block (a knowledge tool result in another format)."""
    blocks = _ENVELOPE.findall(text)
    if not blocks:
        return [text]
    texts: list[str] = []
    for block in blocks:
        try:
            texts.extend(p.text for p in parse_knowledge_block(block)[1])
        except ValueError:  # not canonical: its text between the tags, references undone
            texts.append(_unescape_lenient(_TAG.sub("\n", block)))
    return texts


def _sentences(texts: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for text in texts:
        for piece in _SENTENCE_END.split(text):
            piece = piece.strip()
            if len(piece) >= MIN_QUOTE_CHARS:
                out.add(piece)
    return out


def _strip_envelopes(text: str) -> tuple[str, int]:
    text, n = _ENVELOPE.subn(_ENVELOPE_MARK, text)
    text, m = _UNCLOSED_ENVELOPE.subn(_ENVELOPE_MARK, text)
    return text, n + m


def _strip_quotes(text: str, quotes: list[str]) -> tuple[str, int]:
    removed = 0
    for quote in quotes:  # longest first, so a sentence inside a longer one does not split it
        if quote in text:
            removed += text.count(quote)
            text = text.replace(quote, _QUOTE_MARK)
    return text, removed


def consolidation_input(session_id: str, items: Iterable[SessionItem]) -> ConsolidationInput:
    """The episodes of a session for formation: user messages, agent messages and non-knowledge tool
    results, in log order. Rendered context and knowledge tool results are excluded (and counted);
    ``<knowledge>`` envelopes are cut from every episode, and sentences shown in a passage or a
    knowledge tool result earlier *or later* in the session are cut from agent and tool episodes."""
    items = list(items)
    shown: list[str] = []
    for item in items:
        if isinstance(item, RenderedContext) or (
            isinstance(item, ToolResult) and is_knowledge_tool(item.tool, item.trust)
        ):
            shown.extend(_shown_texts(item.text))
    quotes = sorted(_sentences(shown), key=lambda s: (-len(s), s))
    episodes: list[Episode] = []
    excluded: dict[Exclusion, int] = {}
    envelopes = quoted = 0
    for ordinal, item in enumerate(items):
        if isinstance(item, RenderedContext):
            excluded[Exclusion.RENDERED_CONTEXT] = excluded.get(Exclusion.RENDERED_CONTEXT, 0) + 1
            continue
        if isinstance(item, ToolResult) and is_knowledge_tool(item.tool, item.trust):
            excluded[Exclusion.KNOWLEDGE_TOOL_RESULT] = excluded.get(Exclusion.KNOWLEDGE_TOOL_RESULT, 0) + 1
            continue
        text, n = _strip_envelopes(item.text)
        envelopes += n
        if isinstance(item, UserMessage):
            source, tool = EpisodeSource.USER, None  # what the principal says is the principal's
        else:
            text, q = _strip_quotes(text, quotes)
            quoted += q
            source, tool = (EpisodeSource.AGENT, None) if isinstance(item, AgentMessage) else (
                EpisodeSource.TOOL, item.tool)
        episodes.append(Episode(episode_id=item.item_id, session_id=session_id, ordinal=ordinal, source=source,
                                tool=tool, text=text, occurred_at=item.occurred_at))
    return ConsolidationInput(session_id=session_id, episodes=tuple(episodes), excluded=excluded,
                              envelopes_removed=envelopes, quotes_removed=quoted)
