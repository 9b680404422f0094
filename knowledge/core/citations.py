"""Citations in an agent's answer (ADR-0033, "citation rate" and "citation accuracy"): found, tied
to the claim they stand beside, and checked against what the turn showed the agent.

**What counts as a citation.** The envelope shows every passage with its chunk id
(``<passage … chunk="kc_…">``) and the tool tells the model to cite chunk ids, so a citation is a
chunk id written in the answer, in whatever wrapping the model chose: ``[kc_…]``, ``(kc_…)``,
``[kc_…, kc_…]``, ``【kc_…】``, ``chunk kc_…`` or bare. A token that starts ``kc_`` is an attempt
to cite even where it is not a well-formed id (``kc_`` + 21 of ``a-z2-7``: 104 bits), so a garbled or
invented id is counted, never skipped.

**Its claim.** The sentence the citation stands in (sentences end at ``.``, ``!`` or ``?`` before
white space, or at a line break), with the citations removed; a citation standing alone on its
line, or at the start of a sentence with nothing before it, belongs to the sentence before it.

**Hallucinated.** A cited id the turn never showed the agent — in neither the turn's block nor any
``knowledge.search`` result of the turn — is hallucinated. It is never resolved, so an id from
another turn, another principal or another tenant tells the agent nothing (resolution would be an
oracle).

Pure: `find_citations` and `judge`. Storing them is `knowledge.store.answers`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Collection
from dataclasses import dataclass

#: A well-formed chunk id (`knowledge.core.chunking.chunk_id`).
CHUNK_ID = re.compile(r"^kc_[a-z2-7]{21}$")
#: Anything written as a chunk id: ``kc_`` and the id-like characters after it.
_CITED = re.compile(r"(?<![A-Za-z0-9_])kc_[A-Za-z0-9]*")
#: Wrapping around citations, removed from the claim with them.
_WRAPPING = re.compile(r"[\[\(【<]\s*(?:(?:chunk|source|see)\s*:?\s*)?(?:kc_[A-Za-z0-9]*[\s,;]*)+[\]\)】>]"
                       r"|(?:\b(?:chunk|source|see)\s*:?\s*)?kc_[A-Za-z0-9]*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")
MAX_CLAIM_CHARS = 2000


@dataclass(frozen=True)
class FoundCitation:
    """One citation in an answer: the id as written, where, and the claim it stands beside."""

    chunk_id: str
    start: int
    end: int
    claim: str
    well_formed: bool


def _sentences(text: str) -> list[tuple[int, int]]:
    spans = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        spans.append((start, m.end()))
        start = m.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans


_SPACE_BEFORE_MARK = re.compile(r"\s+([.,;:!?])")


def _claim(text: str) -> str:
    """``text`` without its citations and their wrapping, white space collapsed."""
    bare = " ".join(_WRAPPING.sub(" ", text).split())
    return _SPACE_BEFORE_MARK.sub(r"\1", bare).strip(" ,;:—-[(【<")[:MAX_CLAIM_CHARS]


def find_citations(answer: str) -> list[FoundCitation]:
    """Every citation in ``answer``, in order, each with its claim (see the module docstring).
    Linear in the answer: each sentence and each stretch between citations is read once."""
    spans = _sentences(answer)
    starts = [a for a, _ in spans]
    claims = [_claim(answer[a:b]) for a, b in spans]
    before: list[str] = []  # the nearest sentence with words before each one
    last = ""
    for claim in claims:
        before.append(last)
        last = claim or last
    found = []
    sentence, cursor, worded = -1, 0, False
    for m in _CITED.finditer(answer):
        index = bisect.bisect_right(starts, m.start()) - 1
        if index != sentence:
            sentence, cursor, worded = index, spans[index][0], False
        worded = worded or bool(_claim(answer[cursor:m.start()]))  # words before it in its sentence
        cursor = m.end()
        claim = claims[index] if worded else (before[index] or claims[index])  # alone, or first: the one before
        found.append(FoundCitation(chunk_id=m.group(), start=m.start(), end=m.end(), claim=claim,
                                   well_formed=CHUNK_ID.match(m.group()) is not None))
    return found


def answer_sentences(answer: str) -> list[str]:
    """Every sentence of ``answer`` that has words once its citations are removed (the claims an
    answer makes, cited or not), in order."""
    return [c for c in (_claim(answer[a:b]) for a, b in _sentences(answer)) if c]


@dataclass(frozen=True)
class JudgedCitation:
    """A citation, whether the turn showed the agent the passage it names, and whether that passage
    supports its claim (`knowledge.core.grounding`; None: not assessed)."""

    citation: FoundCitation
    shown: bool
    supported: bool | None = None

    @property
    def hallucinated(self) -> bool:
        return not self.shown


def judge(answer: str, shown: Collection[str]) -> list[JudgedCitation]:
    """The citations of ``answer``, each marked shown (its id was in what the turn gave the agent:
    ``shown``) or hallucinated."""
    return [JudgedCitation(c, c.chunk_id in shown) for c in find_citations(answer)]
