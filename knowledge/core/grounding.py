"""Is an answer grounded? Each citation's claim checked against the passage it cites, and the
passages the answer drew on (ADR-0033's two citation metrics):

- **citation accuracy** — "of the citations, how many point at a passage that contains the claim
  they are attached to": a citation of a passage the turn showed is *supported* when the claim-
  support check (`knowledge.core.support`) says that passage supports its claim; a hallucinated
  citation (`knowledge.core.citations`) is unsupported — it points at nothing the agent saw. A
  citation whose passage is no longer stored, or past `MAX_ASSESSED_CITATIONS`, has no verdict.
- **citation rate** — "of answers that drew on a passage, how many cite it": an answer *drew on*
  a passage the turn showed when one of its sentences is supported by it (cited or not, the same
  check; sentences past `MAX_DRAWN_SENTENCES` are not read). An answer that drew on passages *cites
  what it drew on* when every one of them is cited somewhere in it.

`AnswerCheck` does the work in steps (`steps`), so an event loop can take a checkpoint between
them; the semantic part of the check (the claim's cosine to its sentence, from the shipped
embedding model) is asked for the citations only (`semantic_pairs`, at most `MAX_SEMANTIC_PAIRS`)
and supplied by the caller — without it, or past the cap, the lexical model decides. Sentences are
tested for drawing with the lexical model alone (cheap; a sentence that shares little with a
passage is skipped before its features are computed).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from knowledge.core.citations import JudgedCitation, answer_sentences
from knowledge.core.support import (
    LEXICAL_SUPPORT_MODEL,
    SUPPORT_MODEL,
    Passage,
    SupportFeatures,
    content,
    content_words,
    features,
    tokens,
)

MAX_ASSESSED_CITATIONS = 1000
MAX_DRAWN_SENTENCES = 400
MAX_SEMANTIC_PAIRS = 128
#: A sentence shares fewer of its content words with a passage than this: not drawn from it.
DRAWN_MIN_SHARE = 0.5
#: Features computed per step (`AnswerCheck.steps`).
STEP = 64


@dataclass(frozen=True)
class Grounding:
    """An answer's citations with their verdicts, the shown passages it drew on, and those it cited."""

    citations: tuple[JudgedCitation, ...]
    drawn_on: frozenset[str]
    cited: frozenset[str]

    @property
    def supported(self) -> int:
        return sum(c.supported is True for c in self.citations)

    @property
    def unsupported(self) -> int:
        return sum(c.supported is False for c in self.citations)

    @property
    def cites_what_it_drew_on(self) -> bool:
        return self.drawn_on <= self.cited


class AnswerCheck:
    """The grounding of one answer (see the module docstring). ``passages``: the text of each
    passage the turn showed that is still stored; ``weights``: the tenant's weights of the words of
    the answer (`knowledge.store.evidence.term_weights` of `words`)."""

    def __init__(self, answer: str, judged: list[JudgedCitation], passages: Mapping[str, str],
                 weights: Mapping[str, float]) -> None:
        self.answer = answer
        self.judged = judged
        self.passages = {cid: Passage(text) for cid, text in passages.items()}
        self.weights = weights
        self._features: dict[int, SupportFeatures] = {}  # citation index -> its features
        self._drawn: set[str] = set()

    @staticmethod
    def words(answer: str, judged: list[JudgedCitation]) -> list[str]:
        """The words whose weights the check needs."""
        texts = [j.citation.claim for j in judged[:MAX_ASSESSED_CITATIONS]] + answer_sentences(answer)[
            :MAX_DRAWN_SENTENCES]
        return sorted({w for t in texts for w in content_words(t)})

    def steps(self) -> Iterator[None]:
        """Compute the lexical features, yielding every `STEP` of them."""
        done = 0
        checked: set[tuple[tuple[str, ...], str]] = set()  # (claim's words, passage) pairs a citation decides
        for i, j in enumerate(self.judged[:MAX_ASSESSED_CITATIONS]):
            passage = self.passages.get(j.citation.chunk_id) if j.shown else None
            if passage is not None:
                self._features[i] = features(j.citation.claim, passage, self.weights)
                checked.add((tuple(tokens(j.citation.claim)), j.citation.chunk_id))
                done += 1
                if done % STEP == 0:
                    yield
        for sentence in answer_sentences(self.answer)[:MAX_DRAWN_SENTENCES]:
            words = tokens(sentence)
            mine = content(words)
            if not mine:
                continue
            for cid, passage in self.passages.items():
                if cid in self._drawn or sum(w in passage.theirs for w in mine) < DRAWN_MIN_SHARE * len(mine):
                    continue
                if (tuple(words), cid) in checked:
                    continue  # the sentence cites this passage: its citation's verdict decides (`result`)
                if LEXICAL_SUPPORT_MODEL.decide(features(sentence, passage, self.weights)):
                    self._drawn.add(cid)
                done += 1
                if done % STEP == 0:
                    yield

    def semantic_pairs(self) -> list[tuple[str, str]]:
        """The (claim, sentence) texts, normalized, whose cosine would let `SUPPORT_MODEL` decide: the
        citations whose verdict rests on the score, the first `MAX_SEMANTIC_PAIRS` distinct ones."""
        pairs = dict.fromkeys((f.claim, f.sentence) for f in self._features.values() if f.scored)
        return list(pairs)[:MAX_SEMANTIC_PAIRS]

    def result(self, cosines: Mapping[tuple[str, str], float] | None = None) -> Grounding:
        """The verdicts, with ``cosines`` (from `semantic_pairs`) where given."""
        cosines = cosines or {}
        drawn = set(self._drawn)
        judged = []
        for i, j in enumerate(self.judged):
            f = self._features.get(i)
            verdict: bool | None
            if f is not None:
                cosine = cosines.get((f.claim, f.sentence))
                verdict = (SUPPORT_MODEL.decide(replace(f, cosine=cosine)) if cosine is not None
                           else LEXICAL_SUPPORT_MODEL.decide(f))
                if verdict:
                    drawn.add(j.citation.chunk_id)
            else:
                verdict = False if not j.shown and i < MAX_ASSESSED_CITATIONS else None
            judged.append(replace(j, supported=verdict))
        cited = frozenset(j.citation.chunk_id for j in self.judged if j.shown)
        return Grounding(citations=tuple(judged), drawn_on=frozenset(drawn), cited=cited)
