"""Does a cited passage support the claim it is cited for? (ADR-0033, "citation accuracy": "of the
citations, how many point at a passage that contains the claim they are attached to".)

Deterministic, and cheap enough to run on every citation of every recorded answer:

1. **Containment**: the claim, normalized (case, white space, Markdown emphasis and quotes), is a
   substring of the passage: supported.
2. Otherwise the claim is compared with the passage sentence that holds most of its content
   (Snowball stems; stop words ignored). Each content word of the claim is **weighted by how
   distinctive it is**: the lesser of its weight in the tenant (its BM25 idf there over the largest
   idf the tenant can give, `knowledge.store.evidence.term_weights`) and its rarity in English at
   large (`knowledge.core.english`). So "cluster" in an etcd corpus weighs little and "quorum"
   much, a common word the passage happens not to use ("removes" for "discards") little even in a
   tenant of three documents, and a claim that keeps a passage's template but swaps its
   distinctive words ("the rollback step of the alpha guide" for "the quorum step of the charlie
   guide") is not carried by the words it kept:
   - ``recall``: the weighted share of the claim's content words the passage holds (anywhere), and
     ``local``: the weighted share that sentence holds; ``bigrams``: the share of the claim's
     adjacent content-word pairs found adjacent in the passage (word order, not just vocabulary);
     ``novel``: the weight of the most distinctive claim word the passage lacks (0 when it lacks
     none) — one distinctive word the passage never says is a fact it does not state;
   - ``cosine`` (semantic, when the embedding model serves): the claim's cosine to that sentence by
     the shipped all-MiniLM-L6-v2 — a paraphrase sits near 1, the same words saying another thing
     lower; computed by the caller (`knowledge.retrieval.answers`), absent otherwise;
   - **numbers**: every number in the claim (versions, ports, counts, durations) must be in that
     sentence — a wrong number is unsupported however close the rest, even one the passage uses
     elsewhere;
   - **contrast**: the claim must not say the opposite of what that sentence says ("newer" where it
     says "older", "disable" for "enable", "30 minutes" for "30 seconds": `CONTRASTS`, a lexicon
     of opposites common in technical prose — a rule, not a learned weight);
   - **negation**: the claim and that sentence must negate the same words ("not", "never", "no",
     "cannot", "n't", "without", each taken with the content word after it; the sentence's
     negations of words the claim leaves out do not count) — a flipped claim is unsupported.
3. A `SupportModel` combines them in a logistic score: `SUPPORT_MODEL` with the cosine,
   `LEXICAL_SUPPORT_MODEL` without. Both are fitted by ``scripts/fit_support.py`` on one part of the
   labelled claims of ``scripts/build_claims.py`` and checked on the other; a claim with its numbers
   and negation agreeing is supported when its score reaches the model's threshold.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

import snowballstemmer

from knowledge.core.english import rarity

_TOKEN = re.compile(r"[a-z0-9]+(?:[._/:-][a-z0-9]+)*")
_NUMBER = re.compile(r"^\d+(?:[.,:]\d+)*$|^v\d+(?:\.\d+)*$")
_MARKUP = re.compile(r"[*_`\"“”‘’'\[\]()<>#|]")
_SENTENCE = re.compile(r"(?<=[.!?:;])\s+|\n+")
NEGATIONS = frozenset({"not", "never", "no", "cannot", "without", "none", "nothing", "neither", "nor"})
STOPWORDS = frozenset({
    "a", "an", "the", "and", "or", "but", "if", "then", "else", "of", "to", "in", "on", "at", "by", "for", "with",
    "from", "as", "is", "are", "was", "were", "be", "been", "being", "this", "that", "these", "those", "it", "its",
    "it's", "they", "them", "their", "there", "here", "which", "who", "whom", "whose", "what", "when", "where",
    "how", "why", "can", "could", "should", "would", "will", "shall", "may", "might", "must", "do", "does", "did",
    "done", "has", "have", "had", "having", "so", "such", "than", "too", "very", "also", "just", "only", "into",
    "onto", "over", "under", "about", "above", "below", "up", "down", "out", "off", "again", "further", "once",
    "all", "any", "both", "each", "few", "more", "most", "other", "some", "own", "same", "you", "your", "yours",
    "we", "our", "us", "i", "me", "my", "he", "him", "his", "she", "her", "hers", "one",
})
#: The least weight a word gets (one the tenant holds in every chunk still says something).
MIN_WEIGHT = 0.05
#: Claims are compared on their first this many content words (an answer's sentence can be long).
MAX_CLAIM_WORDS = 200


def normalize(text: str) -> str:
    """Lower case, NFKC, Markdown emphasis and quotes removed, white space collapsed."""
    text = unicodedata.normalize("NFKC", text).lower().replace("n't", " not")
    return " ".join(_MARKUP.sub(" ", text).split())


_STEMMER = snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    """The Snowball English stem (as PostgreSQL's ``english`` configuration stems); numbers as written."""
    return word if _NUMBER.match(word) else _STEMMER.stemWord(word)


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(normalize(text))


def _is_content(word: str) -> bool:
    return word not in STOPWORDS and word not in NEGATIONS


def content(words: list[str]) -> list[str]:
    return [_stem(w) for w in words if _is_content(w)]


def content_words(text: str) -> list[str]:
    """The words of ``text`` that `features` weighs (as written, lower case): what to ask the
    tenant's weights for."""
    return [w for w in tokens(text) if _is_content(w)][:MAX_CLAIM_WORDS]


#: Words that state the opposite of each other in technical prose: a claim saying one where its
#: sentence says the other (and not the one) contradicts it, however close the rest.
CONTRASTS = (
    ("older", "newer"), ("old", "new"), ("before", "after"), ("first", "last"), ("earlier", "later"),
    ("enable", "disable"), ("enabled", "disabled"), ("allow", "deny"), ("allowed", "denied"),
    ("add", "remove"), ("added", "removed"), ("start", "stop"), ("started", "stopped"), ("open", "close"),
    ("more", "less"), ("most", "least"), ("larger", "smaller"), ("higher", "lower"), ("increase", "decrease"),
    ("maximum", "minimum"), ("max", "min"), ("above", "below"), ("inside", "outside"), ("internal", "external"),
    ("include", "exclude"), ("required", "optional"), ("synchronous", "asynchronous"), ("sync", "async"),
    ("public", "private"), ("read", "write"), ("input", "output"), ("upload", "download"), ("client", "server"),
    ("true", "false"), ("success", "failure"), ("valid", "invalid"), ("always", "sometimes"),
    ("automatic", "manual"), ("automatically", "manually"), ("push", "pull"), ("lock", "unlock"),
    ("encrypt", "decrypt"), ("install", "uninstall"), ("upgrade", "downgrade"), ("import", "export"),
    ("ascending", "descending"), ("inbound", "outbound"), ("leader", "follower"), ("primary", "secondary"),
    ("seconds", "minutes"), ("minutes", "hours"), ("seconds", "hours"), ("hours", "days"), ("days", "weeks"),
    ("kb", "mb"), ("mb", "gb"), ("gb", "tb"), ("kib", "mib"), ("mib", "gib"),
)
_CONTRAST: dict[str, set[str]] = {}
for _a, _b in CONTRASTS:
    _CONTRAST.setdefault(_a, set()).add(_b)
    _CONTRAST.setdefault(_b, set()).add(_a)


def _contradicts(claim_words: list[str], sentence_words: list[str]) -> bool:
    """The claim says a word whose contrast (`CONTRASTS`) its sentence says instead, or a number with
    another unit after it ("30 minutes" where the sentence says "30 seconds")."""
    theirs = set(sentence_words)
    if any(w not in theirs and _CONTRAST.get(w, set()) & theirs for w in claim_words):
        return True
    quantities = {(a, b) for a, b in itertools.pairwise(sentence_words) if _NUMBER.match(a)}
    units = {a: b for a, b in quantities}
    return any(_NUMBER.match(a) and a in units and (a, b) not in quantities and b in _CONTRAST.get(units[a], set())
               for a, b in itertools.pairwise(claim_words))


def _negated(words: list[str]) -> set[str]:
    """What each negation in ``words`` negates: the (stemmed) content word after it, or ``""``."""
    heads = set()
    for i, w in enumerate(words):
        if w in NEGATIONS:
            head = next((_stem(x) for x in words[i + 1:] if _is_content(x)), "")
            heads.add(head)
    return heads


@dataclass(frozen=True)
class SupportFeatures:
    contained: bool
    recall: float  # weighted share of the claim's content words anywhere in the passage
    local: float  # weighted share in the passage's best-matching sentence
    bigrams: float  # share of the claim's adjacent content pairs adjacent in the passage
    novel: float  # weight of the most distinctive claim word the passage lacks (0: none)
    numbers_ok: bool  # every number of the claim is in its best sentence
    contrast_free: bool  # the claim says no opposite of what its best sentence says (`CONTRASTS`)
    negation_agrees: bool  # the claim and its best sentence agree on negation
    content_words: int
    claim: str = ""  # the claim, normalized
    sentence: str = ""  # its best sentence in the passage, normalized
    #: The cosine of ``claim`` and ``sentence`` by the shipped embedding model (None: not computed).
    cosine: float | None = None

    @property
    def scored(self) -> bool:
        """Whether the verdict rests on the score: not contained; numbers, contrasts and negation agreeing."""
        return (not self.contained and self.numbers_ok and self.contrast_free and self.negation_agrees
                and self.content_words > 0)


class Passage:
    """A passage read once for many claims: its normalized text, content words, adjacent pairs and
    sentences."""

    __slots__ = ("norm", "pairs", "sentences", "theirs")

    def __init__(self, text: str) -> None:
        self.norm = normalize(text)
        passage_content = content(_TOKEN.findall(self.norm))
        self.theirs = frozenset(passage_content)
        self.pairs = frozenset(itertools.pairwise(passage_content))
        self.sentences = []
        for raw in _SENTENCE.split(text):  # split before white space is collapsed: a line ends one
            sentence = normalize(raw)
            words = _TOKEN.findall(sentence)
            self.sentences.append((frozenset(content(words)), words, sentence))


def features(claim: str, passage: str | Passage, weights: Mapping[str, float] | None = None) -> SupportFeatures:
    """``weights``: a claim word (as `content_words` gives it) -> its distinctiveness in the tenant,
    in [0, 1]; a word it lacks weighs 1 (the tenant never saw it). A word weighs the lesser of that
    and its rarity in English at large (`knowledge.core.english.rarity`), at least `MIN_WEIGHT`.
    None: the English rarity alone."""
    read = passage if isinstance(passage, Passage) else Passage(passage)
    norm_claim = normalize(claim).strip(" .;:,")
    claim_words = _TOKEN.findall(norm_claim)
    surface = [w for w in claim_words if _is_content(w)][:MAX_CLAIM_WORDS]
    mine = [_stem(w) for w in surface]
    weight = [max(MIN_WEIGHT, min(weights.get(w, 1.0) if weights is not None else 1.0, rarity(w))) for w in surface]
    total = sum(weight)
    pairs = list(itertools.pairwise(mine))
    best_local, best_sentence, best_text = 0.0, [w for _, ws, _ in read.sentences for w in ws], read.norm
    for here, words, text in read.sentences:
        share = sum(w for m, w in zip(mine, weight, strict=True) if m in here) / total if total else 0.0
        if share > best_local:
            best_local, best_sentence, best_text = share, words, text
    numbers = {w for w in claim_words if _NUMBER.match(w)}
    claimed = _negated(claim_words)
    stated = {h for h in _negated(best_sentence) if h in set(mine) or h == ""}
    return SupportFeatures(
        contained=bool(norm_claim) and norm_claim in read.norm,
        recall=sum(w for m, w in zip(mine, weight, strict=True) if m in read.theirs) / total if total else 0.0,
        local=best_local,
        bigrams=sum(p in read.pairs for p in pairs) / len(pairs) if pairs else (1.0 if mine else 0.0),
        novel=max((w for m, w in zip(mine, weight, strict=True) if m not in read.theirs), default=0.0),
        numbers_ok=numbers <= set(best_sentence),
        contrast_free=not _contradicts(claim_words, best_sentence),
        negation_agrees=claimed == stated,
        content_words=len(mine),
        claim=norm_claim,
        sentence=best_text,
    )


def vector(f: SupportFeatures, semantic: bool) -> tuple[float, ...]:
    """What a `SupportModel` weighs: 1 (the bias), the overlaps, and with ``semantic`` the cosine and
    its fourth power (a paraphrase sits near 1, a claim with another fact lower: the fourth power
    lets the score rise steeply near 1 without a low cosine counting for much)."""
    base = (1.0, f.recall, f.local, f.bigrams, f.novel)
    if not semantic:
        return base
    if f.cosine is None:
        raise ValueError("this support model needs the claim's cosine to its sentence")
    return (*base, f.cosine, f.cosine ** 4)


@dataclass(frozen=True)
class SupportModel:
    """A logistic score over `vector`, and the threshold at or above which a claim whose numbers and
    negation agree is supported."""

    weights: tuple[float, ...]
    threshold: float

    @property
    def semantic(self) -> bool:
        return len(self.weights) > 5

    def score(self, f: SupportFeatures) -> float:
        z = sum(w * x for w, x in zip(self.weights, vector(f, self.semantic), strict=True))
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))

    def decide(self, f: SupportFeatures) -> bool:
        if f.contained:
            return True
        if not f.scored:
            return False
        return self.score(f) >= self.threshold


#: Fitted by ``scripts/fit_support.py`` with the claim's cosine to its sentence (the semantic arm on):
#: precision 0.954, recall 0.923 for "supported" on the check part (unseen files); README,
#: "Recording the agent's answer", has more.
SUPPORT_MODEL = SupportModel(weights=(-3.2974, 2.6778, -2.0092, 0.0516, -4.8118, 1.3211, 4.9373), threshold=0.504)
#: Fitted the same way on the lexical features alone — the verdict while no embedding model serves:
#: precision 0.956, recall 0.857 on the check part.
LEXICAL_SUPPORT_MODEL = SupportModel(weights=(-3.971, 2.8461, 2.8604, 1.4298, -4.2515), threshold=0.596)


def decide(f: SupportFeatures) -> bool:
    """The verdict on ``f``: by `SUPPORT_MODEL` when its cosine was computed, else by
    `LEXICAL_SUPPORT_MODEL`."""
    return (SUPPORT_MODEL if f.cosine is not None else LEXICAL_SUPPORT_MODEL).decide(f)


def supported(claim: str, passage: str | Passage, weights: Mapping[str, float] | None = None) -> bool:
    """The lexical verdict on ``claim`` cited for ``passage`` (no embedding model at hand)."""
    return LEXICAL_SUPPORT_MODEL.decide(features(claim, passage, weights))
