"""Calibrated relevance: the chance that a passage answers the question (ADR-0033, "Ranking"). Pure.

Each candidate of a search — whichever arm found it — is described by the same features
(`features`), computed from `knowledge.store.evidence`:

``bm25``       BM25 over its index row, divided by the query's best possible score (Σ idf·(k1+1))
``coverage``   the idf-weighted share of the query's lexemes the chunk holds (heading path or body)
``heading``    the idf-weighted share held by its heading path (the section's own name)
``proximity``  the largest idf-weighted share of the query's lexemes within any `PROXIMITY_SPAN`
               consecutive positions: the terms asked together, found together
``*_gap``      how far behind the search's best candidate it is, for bm25, coverage and cosine
``cosine``     its best window's cosine to the query (semantic model only)
``doc_*``      its document's best bm25, coverage and cosine among the candidates: a section of
               the document the question is about

and a logistic model over them (`RelevanceModel`) gives ``relevance`` in [0, 1]. The weights are
fitted (`scripts/fit_relevance.py`) on training data only — the weakly labelled docs set of
`scripts/build_docs_train.py` (section headings asked of the corpus with those headings hidden)
and SciFact's train split — with folds held out to check calibration. What a relevance means:
of the training passages given about 0.5, about half contained the answer; the reliability table
of `scripts/eval_retrieval.py` shows how that holds by bins on docs-dev and SciFact test.

Two models ship: `LEXICAL` (no semantic evidence: the arm is off or went on without it) and
`FUSED`. The relevance floor (`RankingPolicy.min_relevance`) is a relevance, so a host reads it
in the same unit it thresholds.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

#: Positions (lexeme occurrences) a proximity window spans.
PROXIMITY_SPAN = 8
#: BM25 parameters (Lucene's idf, as bm25s uses): the lexical arm's and the relevance features'.
BM25_K1 = 1.2
BM25_B = 0.75

LEXICAL_FEATURES = ("bm25", "coverage", "heading", "proximity", "bm25_gap", "coverage_gap",
                    "doc_bm25", "doc_coverage")
SEMANTIC_FEATURES = ("cosine", "cosine_gap", "doc_cosine")


@dataclass(frozen=True)
class Match:
    """One query lexeme in one chunk: its positions (heading path first, then body) and whether it
    occurs in the heading path."""

    term: str
    positions: tuple[int, ...]
    in_heading: bool


@dataclass(frozen=True)
class LexicalEvidence:
    """The query's lexemes with their idf, the tenant's mean chunk length, and per candidate chunk
    its length and matches (`knowledge.store.evidence` reads them)."""

    idf: dict[str, float]
    avgdl: float
    lengths: dict[str, int] = field(default_factory=dict)
    matches: dict[str, list[Match]] = field(default_factory=dict)


def _bm25(matches: Sequence[Match], idf: Mapping[str, float], dl: int, avgdl: float) -> float:
    norm = BM25_K1 * (1 - BM25_B + BM25_B * dl / max(avgdl, 1.0))
    return sum(idf.get(m.term, 0.0) * len(m.positions) * (BM25_K1 + 1) / (len(m.positions) + norm) for m in matches)


def proximity(matches: Sequence[Match], idf: Mapping[str, float], span: int = PROXIMITY_SPAN) -> float:
    """The largest idf mass of distinct query lexemes within ``span`` consecutive positions, as a
    share of the query's whole idf mass."""
    total = sum(idf.values())
    if total <= 0:
        return 0.0
    hits = sorted((p, m.term) for m in matches for p in m.positions)
    best = 0.0
    inside: dict[str, int] = {}
    mass = 0.0
    lo = 0
    for pos, term in hits:
        inside[term] = inside.get(term, 0) + 1
        if inside[term] == 1:
            mass += idf.get(term, 0.0)
        while pos - hits[lo][0] >= span:
            left = hits[lo][1]
            inside[left] -= 1
            if inside[left] == 0:
                mass -= idf.get(left, 0.0)
            lo += 1
        best = max(best, mass)
    return best / total


def features(
    chunk_ids: Sequence[str],
    lexical: LexicalEvidence,
    *,
    documents: Mapping[str, Hashable],
    cosines: Mapping[str, float] | None = None,
) -> dict[str, dict[str, float]]:
    """Every candidate's features by chunk id (see the module docstring); ``documents`` maps each
    to its document. The semantic ones only when ``cosines`` is given, and only for the candidates
    it holds: one without a stored vector yet (its chunk set still queued for the embedder) has the
    lexical features only, and is judged by the lexical model — not as a candidate of cosine 0."""
    idf = lexical.idf
    total = sum(idf.values())
    best = total * (BM25_K1 + 1)
    out: dict[str, dict[str, float]] = {}
    for cid in chunk_ids:
        matches = lexical.matches.get(cid, [])
        held = sum(idf.get(m.term, 0.0) for m in matches)
        in_heading = sum(idf.get(m.term, 0.0) for m in matches if m.in_heading)
        f = {
            "bm25": _bm25(matches, idf, lexical.lengths.get(cid, 0), lexical.avgdl) / best if best > 0 else 0.0,
            "coverage": held / total if total > 0 else 0.0,
            "heading": in_heading / total if total > 0 else 0.0,
            "proximity": proximity(matches, idf),
        }
        if cosines is not None and cid in cosines:
            f["cosine"] = cosines[cid]
        out[cid] = f
    for name in ("bm25", "coverage", "cosine"):
        having = [f for f in out.values() if name in f]
        top = max((f[name] for f in having), default=0.0)
        for f in having:
            f[f"{name}_gap"] = top - f[name]
    add_document_features(out, documents)
    return out


def add_document_features(feats: dict[str, dict[str, float]], documents: Mapping[str, Hashable]) -> None:
    """The ``doc_*`` features of every candidate, from its document's candidates' features."""
    by_doc: dict[Hashable, list[dict[str, float]]] = {}
    for cid, f in feats.items():
        by_doc.setdefault(documents.get(cid, cid), []).append(f)
    for group in by_doc.values():
        best = {name: max(f[name] for f in group if name in f) for name in ("bm25", "coverage", "cosine")
                if any(name in f for f in group)}
        for f in group:
            for name, value in best.items():
                if name in f:
                    f[f"doc_{name}"] = value


#: Standardized features are clipped to this many scales from their training mean: a search unlike
#: any the model was fitted on (a tenant of three documents, a one-word query) must not push a
#: feature far outside the range its weight was fitted over.
CLIP = 4.0


@dataclass(frozen=True)
class RelevanceModel:
    """``relevance = 1 / (1 + exp(-(bias + Σ weight·clip((x - mean) / scale))))`` over named
    features (`CLIP`)."""

    name: str
    features: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float
    means: tuple[float, ...]
    scales: tuple[float, ...]

    def __post_init__(self) -> None:
        n = len(self.features)
        if not (len(self.weights) == len(self.means) == len(self.scales) == n):
            raise ValueError("one weight, mean and scale per feature")
        if any(s <= 0 for s in self.scales):
            raise ValueError("scales must be positive")

    def logit(self, x: Mapping[str, float]) -> float:
        return self.bias + sum(w * min(max((x[f] - m) / s, -CLIP), CLIP) for f, w, m, s in
                               zip(self.features, self.weights, self.means, self.scales, strict=True))

    def relevance(self, x: Mapping[str, float]) -> float:
        z = self.logit(x)
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
