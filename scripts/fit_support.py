"""Fit the claim-support check (`knowledge.core.support.SupportModel`) on the fit part of the
labelled claims (`build_claims.py`) and report it on the check part, which it never saw.

    .venv/bin/python scripts/fit_support.py [--precision 0.95] [--seed 31]

The model is a logistic score over three overlaps (content-word recall in the passage, in its best
sentence, and of adjacent word pairs), fitted by gradient descent on the pairs that reach it (not
contained, numbers and negation agreeing). The threshold is the lowest at which the whole rule —
containment, then numbers, negation and the score — keeps precision for "supported" at or above
``--precision`` on the fit part. Prints the constants to ship (`SUPPORT_MODEL`) and precision and
recall overall and per kind, on both parts.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from typing import Any

from build_claims import build

from knowledge.core.support import SUPPORT_MODEL, SupportFeatures, SupportModel, features


def decide(model: SupportModel, f: SupportFeatures) -> bool:
    if f.contained:
        return True
    if not f.numbers_ok or not f.negation_agrees or f.content_words == 0:
        return False
    return model.score(f) >= model.threshold


def fit_weights(rows: list[tuple[SupportFeatures, bool]], steps: int = 3000, rate: float = 0.5) -> list[float]:
    w = [0.0, 0.0, 0.0, 0.0]
    for _ in range(steps):
        grad = [0.0] * 4
        for f, y in rows:
            x = (1.0, f.recall, f.local, f.bigrams)
            p = 1.0 / (1.0 + math.exp(-sum(a * b for a, b in zip(w, x, strict=True))))
            for k in range(4):
                grad[k] += (p - y) * x[k]
        w = [a - rate * g / len(rows) for a, g in zip(w, grad, strict=True)]
    return w


def report(name: str, model: SupportModel, data: list[tuple[dict[str, Any], SupportFeatures]]) -> list[str]:
    tp = fp = fn = 0
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row, f in data:
        said = decide(model, f)
        tp += said and row["supported"]
        fp += said and not row["supported"]
        fn += (not said) and row["supported"]
        by_kind[row["kind"]][0] += said == row["supported"]
        by_kind[row["kind"]][1] += 1
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    kinds = ", ".join(f"{k} {ok}/{n} ({ok / n:.1%})" for k, (ok, n) in sorted(by_kind.items()))
    return [f"{name}: {len(data)} pairs, 'supported' precision {precision:.3f} recall {recall:.3f}",
            f"   right by kind: {kinds}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()
    rows = [(r, features(r["claim"], r["passage"])) for r in build(seed=args.seed)]
    fit = [(r, f) for r, f in rows if r["part"] == "fit"]
    check = [(r, f) for r, f in rows if r["part"] == "check"]
    reaching = [(f, bool(r["supported"])) for r, f in fit
                if not f.contained and f.numbers_ok and f.negation_agrees and f.content_words]
    bias, w_recall, w_local, w_bigrams = fit_weights(reaching)
    best = None
    for i in range(1000):
        model = SupportModel(bias, w_recall, w_local, w_bigrams, threshold=i / 1000)
        said = [(decide(model, f), r["supported"]) for r, f in fit]
        tp = sum(s and y for s, y in said)
        fp = sum(s and not y for s, y in said)
        if tp and tp / (tp + fp) >= args.precision:
            best = model
            break
    assert best is not None, "no threshold reaches the precision"
    print(f"SUPPORT_MODEL = SupportModel(bias={best.bias:.4f}, w_recall={best.w_recall:.4f}, "
          f"w_local={best.w_local:.4f}, w_bigrams={best.w_bigrams:.4f}, threshold={best.threshold:.3f})")
    for line in report("fit", best, fit) + report("check (unseen files)", best, check):
        print(line)
    if best != SUPPORT_MODEL:
        print("(differs from the shipped SUPPORT_MODEL:", SUPPORT_MODEL, ")")
    print("the shipped model on the check part:")
    for line in report("check (unseen files)", SUPPORT_MODEL, check):
        print(line)


if __name__ == "__main__":
    main()
