"""Fit the relevance models (`knowledge.core.relevance`) on training data, check them fold by fold, and
write the shipped weights (issue 19).

    .venv/bin/python scripts/fit_relevance.py /tmp/relevance.jsonl.gz [...] [--write] [--ablation]

Reads what `collect_relevance.py` wrote (docs-train and SciFact train candidates with features and
labels). For each mode (``lexical``, ``fused``):

1. **Cross-validation by fold** (5 folds; docs-train's folds are by file): a logistic regression
   (L2, standardized features, Newton's method) fitted on four folds of both sets predicts the
   fifth. Printed per set, over the held-out predictions: hit@1 and R@3 (docs: a candidate holding
   the answer quote; SciFact: a relevant abstract; by the model's order), nDCG@10 (SciFact), the
   same for reciprocal-rank fusion of the arms (today's order), the reliability of the relevance
   (by bins of predicted relevance over each question's top 10: mean prediction vs observed share)
   and the expected calibration error.
2. **The floor**: over the held-out predictions, for each threshold the share of questions whose
   top candidate falls below it (an empty result); the shipped ``min_relevance`` is the largest
   threshold that empties at most ``--empty`` of the answerable training questions (docs-train),
   with the share of unanswerable ones (docs-cross) it empties beside it.
3. With ``--ablation``: the same cross-validation without each feature group.
4. With ``--write``: the models fitted on all folds of both sets, written to
   ``knowledge/core/relevance_models.py`` (with the floor).

Nothing here reads docs-dev or SciFact test.
"""

from __future__ import annotations

import argparse
import gzip
import json
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from retrieval_data import first_occurrences, ndcg_at_k

from knowledge.core.relevance import CLIP, LEXICAL_FEATURES, SEMANTIC_FEATURES, add_document_features

MODELS = Path(__file__).resolve().parents[1] / "knowledge" / "core" / "relevance_models.py"
L2 = 1.0
#: What the floor after the first passage may cost on the training questions (absolute): docs-train R@3,
#: SciFact train nDCG@10.
NOISE_LOSS = 0.01
FLOORS: dict[tuple[str, ...], tuple[float, float]] = {}
GROUPS = {
    "bm25": ("bm25", "bm25_gap"), "coverage": ("coverage", "coverage_gap"), "heading": ("heading",),
    "proximity": ("proximity",), "cosine": ("cosine", "cosine_gap"),
    "document": ("doc_bm25", "doc_coverage", "doc_cosine"),

}


@dataclass
class Question:
    set: str
    fold: int
    qid: str
    labels: np.ndarray  # (n,) bool
    keys: list[str]
    x: np.ndarray  # (n, features)
    rrf: np.ndarray  # (n,) reciprocal-rank fusion of the arm ranks (today's order)


def lines_of(paths: list[Path]) -> Iterator[str]:
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            yield from fh


def load(paths: list[Path], mode: str, names: tuple[str, ...]) -> list[Question]:
    out = []
    for line in lines_of(paths):
        r = json.loads(line)
        if r["mode"] != mode:
            continue
        cands = r["cands"]
        feats = {c["chunk"]: dict(c["x"]) for c in cands}  # the doc_* features as the service computes them
        add_document_features(feats, {c["chunk"]: c.get("doc", c["key"]) for c in cands})
        x = np.array([[feats[c["chunk"]].get(f, 0.0) for f in names] for c in cands], dtype=float)
        rrf = np.array([sum(1 / (60 + rank) for rank in c["ranks"].values()) for c in cands])
        out.append(Question(r["set"], r["fold"], r["qid"], np.array([c["label"] for c in cands], dtype=bool),
                            [c["key"] for c in cands], x.reshape(len(cands), len(names)), rrf))
    return out


@dataclass
class Fit:
    names: tuple[str, ...]
    weights: np.ndarray
    bias: float
    means: np.ndarray
    scales: np.ndarray

    def logit(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.bias + np.clip((x - self.means) / self.scales, -CLIP, CLIP) @ self.weights)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(1 / (1 + np.exp(-self.logit(x))))


def fit(questions: list[Question], names: tuple[str, ...]) -> Fit:
    """L2-regularized logistic regression by Newton's method on standardized features; every
    question weighs the same (its candidates share a weight of 1)."""
    x = np.vstack([q.x for q in questions])
    y = np.concatenate([q.labels for q in questions]).astype(float)
    w_obs = np.concatenate([np.full(len(q.labels), 1.0 / max(len(q.labels), 1)) for q in questions])
    w_obs *= len(w_obs) / w_obs.sum()
    means = x.mean(axis=0)
    scales = x.std(axis=0)
    scales[scales < 1e-6] = 1.0
    z = np.hstack([np.ones((len(x), 1)), np.clip((x - means) / scales, -CLIP, CLIP)])
    beta = np.zeros(z.shape[1])
    reg = np.full(z.shape[1], L2)
    reg[0] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-(z @ beta)))
        grad = z.T @ (w_obs * (p - y)) + reg * beta
        hess = (z * (w_obs * p * (1 - p))[:, None]).T @ z + np.diag(reg)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return Fit(names, beta[1:], float(beta[0]), means, scales)


def ranked(q: Question, scores: np.ndarray) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def ndcg10(q: Question, order: list[int]) -> float:
    """nDCG@10 by key (a key at the rank of its first candidate), as eval_retrieval scores SciFact."""
    relevant = {q.keys[i] for i in range(len(q.keys)) if q.labels[i]}
    return ndcg_at_k(first_occurrences(q.keys[i] for i in order), relevant, 10)


@dataclass
class Tally:
    n: int = 0
    hit1: float = 0.0
    r3: float = 0.0
    ndcg: float = 0.0

    def add(self, q: Question, scores: np.ndarray) -> None:
        order = ranked(q, scores)
        self.n += 1
        self.hit1 += bool(order) and bool(q.labels[order[0]])
        self.r3 += any(q.labels[i] for i in order[:3])
        self.ndcg += ndcg10(q, order)

    def cells(self) -> str:
        n = max(self.n, 1)
        return f"{self.hit1 / n:>6.3f} {self.r3 / n:>6.3f} {self.ndcg / n:>7.3f}"


def cross_validate(questions: list[Question], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Held-out predictions per question (by set and qid), each from the model fitted on the other folds."""
    out: dict[str, np.ndarray] = {}
    for fold in sorted({q.fold for q in questions}):
        model = fit([q for q in questions if q.fold != fold], names)
        for q in questions:
            if q.fold == fold:
                out[f"{q.set}/{q.qid}"] = model.predict(q.x)
    return out


def reliability(questions: list[Question], preds: dict[str, np.ndarray]) -> list[str]:
    bins = np.linspace(0, 1, 11)
    total = np.zeros(10)
    hits = np.zeros(10)
    mass = np.zeros(10)
    for q in questions:
        p = preds[f"{q.set}/{q.qid}"]
        for i in ranked(q, p)[:10]:
            b = min(int(p[i] * 10), 9)
            total[b] += 1
            hits[b] += q.labels[i]
            mass[b] += p[i]
    rows = [f"  {'relevance':<10} {'passages':>8} {'mean':>6} {'observed':>8}"]
    ece = 0.0
    for b in range(10):
        if total[b]:
            rows.append(f"  {bins[b]:.1f}-{bins[b + 1]:.1f}    {int(total[b]):>8} {mass[b] / total[b]:>6.3f} "
                        f"{hits[b] / total[b]:>8.3f}")
            ece += abs(mass[b] - hits[b]) / total.sum()
    rows.append(f"  expected calibration error (top 10): {ece:.3f}")
    return rows


def floor_table(questions: list[Question], preds: dict[str, np.ndarray], empty: float) -> tuple[float, list[str]]:
    """Per threshold, the share of questions emptied (their top relevance below it): docs-train's
    (answerable), those of them whose top 10 holds the answer, and docs-cross's (unanswerable); the
    chosen floor is the largest that empties at most ``empty`` of the answerable ones."""
    def top(q: Question) -> float:
        p = preds[f"{q.set}/{q.qid}"]
        return float(p.max()) if len(p) else 0.0

    answerable = [q for q in questions if q.set == "docs-train"]
    found = [q for q in answerable if any(q.labels[i] for i in ranked(q, preds[f"{q.set}/{q.qid}"])[:10])]
    unanswerable = [q for q in questions if q.set == "docs-cross"]
    rows = [f"  {'floor':>6} {'answerable':>10} {'answer in top 10':>16} {'unanswerable':>12}"]
    chosen = 0.0
    for t in np.round(np.arange(0.005, 0.205, 0.005), 3):
        def emptied(qs: list[Question], t: float = t) -> float:
            return sum(top(q) < t for q in qs) / max(len(qs), 1)

        rows.append(f"  {t:>6.3f} {emptied(answerable):>10.3f} {emptied(found):>16.3f} {emptied(unanswerable):>12.3f}")
        if emptied(answerable) <= empty:
            chosen = float(t)
    return chosen, rows


def noise_table(questions: list[Question], preds: dict[str, np.ndarray], first: float, loss: float,
                metric: str) -> tuple[float, list[str]]:
    """Per floor for the passages after the first: R@3, nDCG@10 (over 10 passages), noise (returned
    passages of the first 3 that do not answer / returned) and passages returned per question. The
    first floor only empties a search (its top candidate below ``first``), as `knowledge.core.ranking.select`
    applies it; the chosen floor is the highest that costs at most ``loss`` of ``metric`` ("r3" or
    "ndcg") against no floor after the first passage."""
    rows = [f"  {'floor 2nd+':>10} {'R@3':>6} {'nDCG@10':>7} {'noise@3':>7} {'returned':>8}"]
    chosen, base = 0.0, None
    for t in np.round(np.arange(0.0, 0.305, 0.005), 3):
        hits = returned = wrong = 0
        ndcg = 0.0
        for q in questions:
            p = preds[f"{q.set}/{q.qid}"]
            order = ranked(q, p)[:10]
            kept = order[:1] + [i for i in order[1:] if p[i] >= t] if order and p[order[0]] >= first else []
            hits += any(q.labels[i] for i in kept[:3])
            returned += len(kept[:3])
            wrong += sum(not q.labels[i] for i in kept[:3])
            ndcg += ndcg10(q, kept)
        r3, nd = hits / len(questions), ndcg / len(questions)
        value = r3 if metric == "r3" else nd
        base = value if base is None else base
        rows.append(f"  {t:>10.3f} {r3:>6.3f} {nd:>7.3f} {wrong / max(returned, 1):>7.3f} "
                    f"{returned / len(questions):>8.2f}")
        if value >= base - loss:
            chosen = float(t)
    return chosen, rows


def report(questions: list[Question], names: tuple[str, ...], empty: float) -> tuple[float, list[str]]:
    preds = cross_validate(questions, names)
    lines = [f"  {'set':<14} {'order':<10} {'n':>5} {'hit@1':>6} {'R@3':>6} {'nDCG@10':>7}"]
    for s in sorted({q.set for q in questions} - {"docs-cross"}):
        model, rrf = Tally(), Tally()
        for q in questions:
            if q.set == s:
                model.add(q, preds[f"{q.set}/{q.qid}"])
                rrf.add(q, q.rrf)
        lines.append(f"  {s:<14} {'RRF':<10} {rrf.n:>5} {rrf.cells()}")
        lines.append(f"  {s:<14} {'relevance':<10} {model.n:>5} {model.cells()}")
    lines += reliability(questions, preds)
    chosen, rows = floor_table(questions, preds, empty)
    lines += ["  the floor, questions emptied (held-out predictions):", *rows, f"  chosen floor: {chosen:.3f}"]
    docs = [q for q in questions if q.set in ("docs-train", "docs-cross")]
    more, rows = noise_table(docs, preds, chosen, NOISE_LOSS, "r3")
    lines += ["  the floor for the passages after the first on docs-train and docs-cross:", *rows]
    scifact = [q for q in questions if q.set == "scifact-train"]
    if scifact:
        more_sci, rows = noise_table(scifact, preds, chosen, NOISE_LOSS, "ndcg")
        lines += ["  ... on SciFact train:", *rows]
        more = min(more, more_sci)
    lines.append(f"  chosen: {more:.3f} (the highest that costs at most {NOISE_LOSS} of docs R@3 and of SciFact"
                 " nDCG@10 against no floor after the first passage)")
    FLOORS[names] = (chosen, more)
    return chosen, lines


def ablation(questions: list[Question], names: tuple[str, ...]) -> list[str]:
    sets = sorted({q.set for q in questions} - {"docs-cross"})
    lines = [f"  {'without':<12} " + " ".join(f"{s + ' R@3':>18} {s + ' nDCG':>18}" for s in sets)]
    for group, feats in [("(nothing)", ()), *sorted(GROUPS.items())]:
        kept = tuple(n for n in names if n not in feats)
        if len(kept) == len(names) and feats:
            continue
        cols = [names.index(n) for n in kept]
        preds = cross_validate([replace(q, x=q.x[:, cols]) for q in questions], kept)
        cells = []
        for s in sets:
            t = Tally()
            for q in questions:
                if q.set == s:
                    t.add(q, preds[f"{q.set}/{q.qid}"])
            n = max(t.n, 1)
            cells.append(f"{t.r3 / n:>18.3f} {t.ndcg / n:>18.3f}")
        lines.append(f"  {group:<12} " + " ".join(cells))
    return lines


def literal(name: str, f: Fit) -> str:
    def tup(xs: Any, fmt: str = "{:.6g}") -> str:
        body = textwrap.fill(", ".join(fmt.format(v if isinstance(v, str) else float(v)) for v in xs) + ",",
                             width=108, initial_indent=" " * 8, subsequent_indent=" " * 8)
        return f"(\n{body}\n    )"

    return (f"RelevanceModel(\n    name={name!r},\n    features={tup(f.names, '{!r}')},\n"
            f"    weights={tup(f.weights)},\n    bias={f.bias:.6g},\n    means={tup(f.means)},\n"
            f"    scales={tup(f.scales)},\n)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, nargs="+", help="collect_relevance.py's output files")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--ablation", action="store_true")
    parser.add_argument("--empty", type=float, default=0.015,
                        help="the largest share of answerable training questions the floor may empty")
    args = parser.parse_args()
    models: dict[str, Fit] = {}
    floors: dict[str, float] = {}
    for mode, names in (("lexical", LEXICAL_FEATURES), ("fused", LEXICAL_FEATURES + SEMANTIC_FEATURES)):
        questions = load(args.data, mode, names)
        print(f"{mode}: {len(questions)} questions, {sum(len(q.labels) for q in questions)} candidates")
        floors[mode], lines = report(questions, names, args.empty)
        print("\n".join(lines))
        if args.ablation:
            print("\n".join(ablation(questions, names)))
        models[mode] = fit(questions, names)
    if args.write:
        MODELS.write_text(
            '"""The shipped relevance models: written by ``scripts/fit_relevance.py --write`` from\n'
            '``scripts/collect_relevance.py``\'s training data (docs-train and SciFact train; never docs-dev\n'
            'or SciFact test). Do not edit by hand: refit."""\n\n'
            "from knowledge.core.relevance import RelevanceModel\n\n"
            f"LEXICAL = {literal('lexical', models['lexical'])}\n\n"
            f"FUSED = {literal('fused', models['fused'])}\n\n"
            "#: The relevance floor (the fused model's): the largest\n"
            "#: threshold that empties at most "
            f"{args.empty:.1%} of the answerable\n#: training questions (docs-train).\n"
            f"MIN_RELEVANCE = {floors['fused']:.3f}\n"
            f"#: The floor of the passages after the first: the highest that costs at most {NOISE_LOSS} of\n"
            "#: recall@3 on docs-train and of nDCG@10 on SciFact train against none (the first floor\n"
            "#: only empties a search whose best passage is under it).\n"
            f"MIN_RELEVANCE_MORE = {FLOORS[LEXICAL_FEATURES + SEMANTIC_FEATURES][1]:.3f}\n", encoding="utf-8")
        print(f"wrote {MODELS}")


if __name__ == "__main__":
    main()
