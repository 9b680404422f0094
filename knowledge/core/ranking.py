"""Ranking (ADR-0033, "Ranking"): fusion, the four-term ranker, and selection. Pure.

``score = w_match·match + w_authority·authority + w_scope·scope_affinity + w_recency·recency − w_penalty·penalty``

Every term is in 0..1. Under ``knowledge-v2`` (the default, issue 19) ``match`` is the passage's
calibrated relevance (`knowledge.core.relevance`) and the floor is on that relevance; under
``knowledge-v1`` ``match`` is reciprocal-rank fusion (k = 60) normalised so that rank 1 in
every arm is 1.0; with one arm, rank 1 → 1.000, rank 2 → 0.984, rank 8 → 0.897, rank 50 → 0.555.

Why these weights (`KNOWLEDGE_V1`, hand-set, to be eval-tuned under a new policy name):

- ``w_match = 1``: relevance decides. The three document terms together are worth at most 0.10,
  about what the top seven places of one arm span (rank 1 vs rank 8 is 0.103), and a fifth of what
  a candidate loses by being absent from one of two arms. So scope, authority and recency reorder
  near-ties; a fetched, ten-year-old, out-of-scope passage eight or more places ahead in an arm
  still outranks an authored, current, in-project one.
- ``w_scope = 0.04`` is the largest of the three: "a document ingested into this project ranks
  above an equally matching tenant-wide one" is the one preference the spec states outright.
- ``w_authority = 0.03`` and ``w_recency = 0.03``: a full ladder step (authored vs fetched), or a
  fresh document vs one many half-lives old, outweighs one place at the top of an arm; a half step
  (one ladder rung, one half-life) only breaks closer ties.
- ``w_penalty = 0.25``: boilerplate or a near-empty chunk is demoted by about what twenty places
  at the top of an arm are worth. It ranks, it does not hide: the relevance floor hides.

Duplicates (the same ``content_sha256`` as a higher-ranked candidate) are not penalised but
dropped by `rank`: the same text twice under two ids is what the spec forbids. Scope affinity
never admits: admission is the SQL predicates' job, and `rank` returns exactly one passage per
distinct content whatever the scope.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from uuid import UUID

from knowledge.core import relevance_models
from knowledge.core.relevance import RelevanceModel
from knowledge.models import Authority, RetrievedPassage


@dataclass(frozen=True)
class RankingPolicy:
    """A versioned, hand-set ranking policy; a change of any value is a new ``name``."""

    name: str = "knowledge-v1"
    rrf_k: int = 60
    w_match: float = 1.0
    w_authority: float = 0.03
    w_scope: float = 0.04
    w_recency: float = 0.03
    w_penalty: float = 0.25
    #: recency(d) = 0.5 ** (age_days / half_life): a document two years old counts half.
    recency_half_life_days: float = 730.0
    #: An undated document ranks as if one half-life old: neither the newest nor stale, so a missing
    #: date neither wins nor loses a near-tie against a dated document of middling age.
    recency_undated: float = 0.5
    #: Below this many tokens a chunk is penalised linearly: 0 tokens → 1.0, this many → 0.0.
    tiny_chunk_tokens: int = 16
    #: Share (by characters) of a chunk's body lines that are links, table-of-contents or navigation:
    #: at or below ``boilerplate_share_floor`` no penalty, rising linearly to 1.0 at ``..._full``.
    boilerplate_share_floor: float = 0.5
    boilerplate_share_full: float = 0.9
    #: License text is boilerplate when at least this many distinct license phrases occur.
    license_markers: int = 2
    #: Relevance floor on the best arm's evidence (lexical: BM25 / its maximum for the query). 0.05
    #: drops a chunk whose only match is a near-stopword or one weak term among many.
    min_strength: float = 0.05
    #: The calibrated relevance models (`knowledge.core.relevance`): with them, ``match`` is a
    #: candidate's relevance instead of its fused rank, and the floor is ``min_relevance``.
    lexical_model: RelevanceModel | None = None
    fused_model: RelevanceModel | None = None
    min_relevance: float = 0.0
    #: The floor for every passage after the first: a second or third passage that probably answers
    #: nothing is noise the agent has to read. It may be lower than ``min_relevance``, which then
    #: only decides whether a search returns anything.
    min_relevance_more: float = 0.0

    def unfloored(self) -> RankingPolicy:
        """The same ranking without its relevance floors (the name is kept: the order is the same)."""
        return replace(self, min_strength=0.0, min_relevance=0.0, min_relevance_more=0.0)

    @property
    def calibrated(self) -> bool:
        return self.lexical_model is not None

    def judge(self, features: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """Each candidate's relevance: the fused model when the features carry semantic evidence
        (and the policy has one), else the lexical model."""
        if self.lexical_model is None:
            raise ValueError(f"ranking policy {self.name} has no relevance model")
        out: dict[str, float] = {}
        for cid, x in features.items():
            model = self.fused_model if self.fused_model is not None and "cosine" in x else self.lexical_model
            out[cid] = model.relevance(x)
        return out

    def __post_init__(self) -> None:
        weights = (self.w_match, self.w_authority, self.w_scope, self.w_recency, self.w_penalty)
        if any(w < 0 for w in weights):
            raise ValueError("ranking weights must be non-negative")
        if self.rrf_k < 0 or self.recency_half_life_days <= 0 or self.tiny_chunk_tokens < 0:
            raise ValueError("rrf_k >= 0, recency_half_life_days > 0 and tiny_chunk_tokens >= 0 are required")
        if not 0.0 <= self.recency_undated <= 1.0:
            raise ValueError("recency_undated must be in 0..1")
        if not 0.0 <= self.boilerplate_share_floor < self.boilerplate_share_full <= 1.0:
            raise ValueError("boilerplate shares must satisfy 0 <= floor < full <= 1")


KNOWLEDGE_V1 = RankingPolicy()
#: The shipped default (issue 19): ``match`` is the calibrated relevance (`knowledge.core.relevance`,
#: fitted by ``scripts/fit_relevance.py``), the floor ``min_relevance``; the document terms as v1.
KNOWLEDGE_V2 = RankingPolicy(name="knowledge-v2", min_strength=0.0, lexical_model=relevance_models.LEXICAL,
                             fused_model=relevance_models.FUSED, min_relevance=relevance_models.MIN_RELEVANCE,
                             min_relevance_more=relevance_models.MIN_RELEVANCE_MORE)
DEFAULT_POLICY = KNOWLEDGE_V2


@dataclass(frozen=True)
class Candidate:
    """One chunk an arm returned, already admitted by the SQL isolation predicates."""

    chunk_id: str
    document_id: UUID
    version: int
    title: str
    heading_path: tuple[str, ...]
    text: str
    tokens: int
    doc_date: date | None
    authority: Authority
    project_scope: str | None
    instruction_like: bool
    content_sha256: str
    arm_ranks: Mapping[str, int]  # arm name -> 1-based rank in that arm
    strength: float  # 0..1, the best arm's evidence; read by the relevance floor, not by score()


def rrf(arm_ranks: Mapping[str, int], n_arms: int, k: int = 60) -> float:
    """Reciprocal-rank fusion normalised to 0..1: ``Σ 1/(k+rank) / (n_arms/(k+1))``.

    Rank 1 in every arm is 1.0; an arm that did not return the candidate contributes 0, so with two
    arms rank 1 in one of them is 0.5.
    """
    if n_arms < 1:
        raise ValueError("n_arms must be at least 1")
    if len(arm_ranks) > n_arms:
        raise ValueError(f"{len(arm_ranks)} arm ranks for {n_arms} arms")
    if any(r < 1 for r in arm_ranks.values()):
        raise ValueError("arm ranks are 1-based")
    # Sum in a fixed order so the float result does not depend on the mapping's insertion order.
    total = sum(1.0 / (k + arm_ranks[arm]) for arm in sorted(arm_ranks))
    return total / (n_arms / (k + 1))


def authority_term(authority: Authority) -> float:
    """The ladder, by how the document was obtained: authored 1.0, supplied 0.5, fetched 0.0."""
    top = max(a.rank for a in Authority)
    return authority.rank / top


def scope_term(project_scope: str | None, current_scope: str | None) -> float:
    """1.0 when the document belongs to the current project, else 0. It ranks; it never admits."""
    return 1.0 if current_scope is not None and project_scope == current_scope else 0.0


def recency_term(doc_date: date | None, today: date, policy: RankingPolicy = KNOWLEDGE_V1) -> float:
    """Half-life decay from the document's own date (never its ingestion date).

    A date after ``today`` counts as today (1.0): a document dated ahead is not fresher than fresh.
    """
    if doc_date is None:
        return policy.recency_undated
    age_days = max((today - doc_date).days, 0)
    return float(0.5 ** (age_days / policy.recency_half_life_days))


# --- penalty: tiny chunks and boilerplate -------------------------------------------------------

_HEADING_LINE = re.compile(r"^(?:#{1,6}(?:\s|$)|[=-]{3,}$)")
_FENCE = re.compile(r"^(?:`{3,}|~{3,})")
# A GFM table's delimiter row: with one, "a | b | c" is a table row, not a navigation bar.
_TABLE_RULE = re.compile(r"^\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)+\|?$")
_MD_LINK = re.compile(r"!?\[[^\]\n]*\]\([^)\n]*\)|!?\[[^\]\n]*\]\[[^\]\n]*\]|<[a-z][a-z0-9+.-]*:[^>\s]*>")
_BARE_URL = re.compile(r"\b(?:https?|ftp)://\S+|\bwww\.\S+", re.IGNORECASE)
_LINK_REFDEF = re.compile(r"^\[[^\]]+\]:\s*\S+")
_LEFTOVER_WORD = re.compile(r"[^\W\d_]{2,}")
# "Introduction ........ 3", "2.1 Rollback …… 14": dot leaders then a page number.
_TOC_LEADER = re.compile(r"(?:\.{4,}|…{2,}|(?:\. ){3,})\s*\d+\s*$")
_NAV_PHRASES = frozenset({
    "skip to content", "skip to main content", "skip to navigation", "back to top", "edit this page",
    "edit on github", "view source", "view on github", "table of contents", "contents", "on this page",
    "in this article", "next", "previous", "prev", "next page", "previous page", "home", "menu",
    "toggle navigation", "was this page helpful?",
})
# Separators of a navigation bar or breadcrumb, always with spaces around (so "read|write" is prose).
_SEPARATOR_CHARS = "|·•›»/>"
_NAV_SEPARATORS = re.compile(rf"\s+[{re.escape(_SEPARATOR_CHARS)}]\s+")
_NAV_SEPARATORS_NO_PIPE = re.compile(rf"\s+[{re.escape(_SEPARATOR_CHARS.replace('|', ''))}]\s+")
# What may surround a navigation phrase ("« Previous", "Next →", "* Home"), besides white space.
_DECOR = "«»‹›←→<>|·•*+-"
_LICENSE_PHRASES = (
    r"permission is hereby granted",
    r"without warranty of any kind",
    r"provided [\"“]?as is[\"”]?",
    r"licensed under the apache license",
    r"gnu (?:lesser |affero )?general public license",
    r"redistribution and use in source and binary forms",
    r"all rights reserved",
    r"without warranties or conditions of any kind",
    r"this (?:program|library) is free software",
    r"spdx-license-identifier",
    r"creative commons attribution",
    r"in no event shall the (?:authors|copyright holders?)",
)
# One pass over the text for all phrases: which one matched is the group that is set.
_LICENSE = re.compile("|".join(f"({p})" for p in _LICENSE_PHRASES), re.IGNORECASE)
# A literal every phrase holds (in `str.casefold` form); a text holding none has no phrase, unscanned.
_LICENSE_ANCHORS = ("permission is hereby granted", "without warranty of any kind", "provided",
                    "licensed under the apache license", "general public license",
                    "redistribution and use in source and binary forms", "all rights reserved",
                    "without warranties or conditions of any kind", "is free software", "spdx-license-identifier",
                    "creative commons attribution", "in no event shall the")
# The letters `re.IGNORECASE` matches to an ASCII one that `str.casefold` leaves apart: dotless ı, and
# İ (casefolded to i + U+0307). K (Kelvin) and ſ casefold to k and s already.
_FOLD_AS_IGNORECASE = {0x131: "i", 0x307: None}


# What each pattern needs, checked first with `in` (a search ranks every candidate's text, and a fresh
# chunk's regex scans cost ~0.36 ms, 18 ms for 50 candidates; ~25 us with these): never a different
# answer, only a cheaper one (`tests/core/test_ranking_text_features.py` holds the regex-only reference
# and checks equality).
_NAV_LONGEST = max(map(len, _NAV_PHRASES))


def _strip_decor(line: str) -> str:
    """``line`` less its leading and trailing runs of white space and `_DECOR`."""
    while True:
        stripped = line.strip().strip(_DECOR)
        if stripped == line:
            return line
        line = stripped


def _is_boilerplate_line(line: str, separators: re.Pattern[str]) -> bool:
    if line.rstrip()[-1:].isdecimal() and _TOC_LEADER.search(line):  # the leader ends in a page number
        return True
    # `_MD_LINK`: "](" or "][" (inline, reference), or "<", ":" and ">" (an autolink)
    if (("](" in line or "][" in line or ("<" in line and ":" in line and ">" in line)) and _MD_LINK.search(line)) or \
            (("://" in line or "www." in line.lower()) and _BARE_URL.search(line)):
        # Links and no words besides them: a link list, a TOC entry, a breadcrumb of links.
        rest = _BARE_URL.sub(" ", _MD_LINK.sub(" ", line))
        if not _LEFTOVER_WORD.search(rest):
            return True
    core = _strip_decor(line)
    if len(core) <= _NAV_LONGEST and core.lower() in _NAV_PHRASES:  # lower() never shortens
        return True
    # "Home | Docs | Blog | About", "Docs › Guides › Deploy": three or more short items. So at least two
    # separators, each a word of its own, and at most 3 words an item: at most 4 words a separator + 3.
    separators_at_most = sum(line.count(c) for c in _SEPARATOR_CHARS)
    if separators_at_most < 2 or len(line.split()) > 4 * separators_at_most + 3:
        return False
    items = [i for i in separators.split(line) if i.strip()]
    return len(items) >= 3 and all(len(i.split()) <= 3 for i in items)


def boilerplate_share(text: str) -> float:
    """The share, by characters, of a chunk's visible body that is links, TOC entries or navigation.

    Headings and blank lines are not body. Lines inside code fences are content: a shell pipeline
    is not a navigation bar. Markdown reference definitions (``[x]: url``) are invisible when
    rendered, so they count for neither side — unless they are all there is (then 1.0). Weighting
    by characters keeps one long prose paragraph from being outvoted by a few short link lines.
    """
    lines = [ln.strip() for ln in text.split("\n")]
    separators = _NAV_SEPARATORS_NO_PIPE if any(_TABLE_RULE.match(ln) for ln in lines) else _NAV_SEPARATORS
    body = boiler = refdefs = 0
    in_fence = False
    for line in lines:
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not line or (not in_fence and _HEADING_LINE.match(line)):
            continue
        if not in_fence and _LINK_REFDEF.match(line):
            refdefs += 1
            continue
        body += len(line)
        if not in_fence and not line.startswith("|") and _is_boilerplate_line(line, separators):
            boiler += len(line)
    if not body:
        return 1.0 if refdefs else 0.0
    return boiler / body


def _license_phrase_count(text: str) -> int:
    folded = text.casefold()
    if "ı" in folded or "\u0307" in folded:
        folded = folded.translate(_FOLD_AS_IGNORECASE)
    if not any(anchor in folded for anchor in _LICENSE_ANCHORS):
        return 0
    return len({m.lastindex for m in _LICENSE.finditer(text)})


def is_license_text(text: str, policy: RankingPolicy = KNOWLEDGE_V1) -> bool:
    """At least ``policy.license_markers`` distinct license phrases: the chunk is a license."""
    return _license_phrase_count(text) >= policy.license_markers


# Chunks never change, so their text features are cached by content hash (bounded: cleared when
# full): a passage retrieved again costs nothing to re-judge.
_FEATURES: dict[tuple[str, int], tuple[bool, float]] = {}
_FEATURES_MAX = 65536


def _text_features(content_sha256: str, text: str, policy: RankingPolicy) -> tuple[bool, float]:
    """(is a license, boilerplate share) of a chunk's text."""
    key = (content_sha256, policy.license_markers)
    found = _FEATURES.get(key)
    if found is None:
        found = (True, 1.0) if is_license_text(text, policy) else (False, boilerplate_share(text))
        if len(_FEATURES) >= _FEATURES_MAX:
            _FEATURES.clear()
        _FEATURES[key] = found
    return found


def penalty_term(c: Candidate, policy: RankingPolicy = KNOWLEDGE_V1) -> float:
    """0..1: the worse of the tiny-chunk and boilerplate penalties (duplicates are `rank`'s)."""
    tiny = 0.0
    if policy.tiny_chunk_tokens and c.tokens < policy.tiny_chunk_tokens:
        tiny = 1.0 - c.tokens / policy.tiny_chunk_tokens
    is_license, share = _text_features(c.content_sha256, c.text, policy)
    if is_license:
        boiler = 1.0
    else:
        lo, hi = policy.boilerplate_share_floor, policy.boilerplate_share_full
        boiler = min(max((share - lo) / (hi - lo), 0.0), 1.0)
    return max(tiny, boiler)


# --- score, rank, select ------------------------------------------------------------------------


def score(
    c: Candidate, *, current_scope: str | None, today: date, n_arms: int, policy: RankingPolicy,
    relevance: float | None = None,
) -> tuple[float, dict[str, float]]:
    """The four-term score and its unweighted terms (``match``, ``authority``, ``scope``,
    ``recency``, ``penalty``, each 0..1), for the trace and for tests. ``match`` is the
    candidate's calibrated ``relevance`` when given, else reciprocal-rank fusion."""
    terms = {
        "match": rrf(c.arm_ranks, n_arms, policy.rrf_k) if relevance is None else relevance,
        "authority": authority_term(c.authority),
        "scope": scope_term(c.project_scope, current_scope),
        "recency": recency_term(c.doc_date, today, policy),
        "penalty": penalty_term(c, policy),
    }
    total = (
        policy.w_match * terms["match"]
        + policy.w_authority * terms["authority"]
        + policy.w_scope * terms["scope"]
        + policy.w_recency * terms["recency"]
        - policy.w_penalty * terms["penalty"]
    )
    return total, terms


def rank(
    candidates: Sequence[Candidate],
    *,
    current_scope: str | None,
    today: date,
    n_arms: int,
    policy: RankingPolicy = KNOWLEDGE_V1,
    relevances: Mapping[str, float] | None = None,
) -> list[RetrievedPassage]:
    """Score every candidate, sort by score descending (ties by ``chunk_id``), and drop any
    candidate whose ``content_sha256`` a higher-ranked one already carries. With ``relevances``
    (chunk id -> calibrated relevance; a missing id counts 0) they are the match term and each
    passage carries its own.

    Nothing else is added or removed: admission happened in SQL, the floor and caps are `select`'s.
    """
    def relevance(c: Candidate) -> float | None:
        return None if relevances is None else relevances.get(c.chunk_id, 0.0)

    scored = [(score(c, current_scope=current_scope, today=today, n_arms=n_arms, policy=policy,
                     relevance=relevance(c))[0], c)
              for c in candidates]
    scored.sort(key=lambda sc: (-sc[0], sc[1].chunk_id))
    seen: set[str] = set()
    out: list[RetrievedPassage] = []
    for total, c in scored:
        if c.content_sha256 in seen:
            continue
        seen.add(c.content_sha256)
        out.append(RetrievedPassage(
            chunk_id=c.chunk_id, document_id=c.document_id, title=c.title, heading_path=list(c.heading_path),
            text=c.text, doc_date=c.doc_date, authority=c.authority, score=total, arms=sorted(c.arm_ranks),
            instruction_like=c.instruction_like, tokens=c.tokens, relevance=relevance(c),
        ))
    return out


def select(
    passages: Sequence[RetrievedPassage],
    *,
    min_score: float,
    max_passages: int,
    max_per_document: int,
    budget_tokens: int,
    strengths: Mapping[str, float] | None = None,
    min_strength: float = 0.0,
    min_relevance: float = 0.0,
    min_relevance_more: float = 0.0,
) -> list[RetrievedPassage]:
    """Walk ``passages`` in rank order and keep what the read path may render.

    - The relevance floor: a passage scoring below ``min_score``, or (when ``strengths`` maps chunk
      ids to evidence strength) whose strength is below ``min_strength``, is skipped. A chunk id
      missing from ``strengths`` has no recorded evidence and counts as strength 0. A passage that
      carries a calibrated relevance below ``min_relevance`` is skipped too, and once one passage
      is chosen, so is one below ``min_relevance_more``.
    - At most ``max_per_document`` passages per document (later ones are skipped), at most
      ``max_passages`` in all.
    - The token budget: passages are taken whole, and the first one that does not fit ends the
      selection — a smaller one further down is not slipped in, and nothing is ever truncated.
    """
    chosen: list[RetrievedPassage] = []
    per_document: dict[UUID, int] = {}
    used = 0
    for p in passages:
        if len(chosen) >= max_passages:
            break
        if p.score < min_score:
            continue
        if strengths is not None and strengths.get(p.chunk_id, 0.0) < min_strength:
            continue
        if p.relevance is not None and p.relevance < (min_relevance_more if chosen else min_relevance):
            continue
        if per_document.get(p.document_id, 0) >= max_per_document:
            continue
        if used + p.tokens > budget_tokens:
            break  # drop whole; the spec's "when the budget cannot fit the third passage, two are rendered"
        chosen.append(p)
        used += p.tokens
        per_document[p.document_id] = per_document.get(p.document_id, 0) + 1
    return chosen
