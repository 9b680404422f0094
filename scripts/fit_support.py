"""Fit the claim-support check (`knowledge.core.support.SupportModel`) on the fit part of the
labelled claims (`build_claims.py`) and report it on the check part, which it never saw.

    .venv/bin/python scripts/fit_support.py [--precision 0.955] [--seed 31] [--loop trio|asyncio]

The claims' words are weighed as the service weighs them: the docs corpora are ingested into a
tenant of a throwaway embedded PostgreSQL (`KnowledgeService.ingest`, lexical arm), and each claim
word's distinctiveness is read there (`knowledge.store.evidence.term_weights`, the statement
`record_answer` uses). The model is a logistic score over four features (weighted content-word
recall in the passage and in its best sentence, adjacent word pairs, the most distinctive word the
passage lacks), fitted by gradient descent on the pairs that reach it (not contained, numbers and
negation agreeing). The threshold is the lowest at which the whole rule —
containment, then numbers, contrasts, negation and the score — keeps precision for "supported" at or above
``--precision`` on the fit part. Prints the constants to ship (`SUPPORT_MODEL`) and precision and
recall overall and per kind, on both parts.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

from build_claims import build
from retrieval_data import docs_sources, ingest_sources, own_db, print_run

from knowledge.config import Settings
from knowledge.core.support import (
    LEXICAL_SUPPORT_MODEL,
    SUPPORT_MODEL,
    SupportFeatures,
    SupportModel,
    content_words,
    features,
    vector,
)
from knowledge.service import KnowledgeService
from knowledge.store.evidence import term_weights
from knowledge.supervisors.embedded_pg import throwaway_data_dir


def decide(model: SupportModel, f: SupportFeatures) -> bool:
    return model.decide(f)


def fit_weights(rows: list[tuple[SupportFeatures, bool]], semantic: bool, steps: int = 3000,
                rate: float = 0.5) -> tuple[float, ...]:
    """Logistic regression by gradient descent on `vector` (deterministic: starts at 0)."""
    xs = [(vector(f, semantic), y) for f, y in rows]
    w = [0.0] * len(xs[0][0])
    for _ in range(steps):
        grad = [0.0] * len(w)
        for x, y in xs:
            p = 1.0 / (1.0 + math.exp(-sum(a * b for a, b in zip(w, x, strict=True))))
            for k in range(len(w)):
                grad[k] += (p - y) * x[k]
        w = [a - rate * g / len(rows) for a, g in zip(w, grad, strict=True)]
    return tuple(round(a, 4) for a in w)


def fit_model(fit: list[tuple[dict[str, Any], SupportFeatures]], semantic: bool, precision: float) -> SupportModel:
    """The weights, and the lowest threshold keeping precision for "supported" >= ``precision``
    on ``fit``."""
    weights = fit_weights([(f, bool(r["supported"])) for r, f in fit if f.scored], semantic)
    for i in range(1000):
        model = SupportModel(weights, threshold=i / 1000)
        said = [(model.decide(f), r["supported"]) for r, f in fit]
        tp = sum(s and y for s, y in said)
        fp = sum(s and not y for s, y in said)
        if tp and tp / (tp + fp) >= precision:
            return model
    raise SystemExit("no threshold reaches the precision")


def with_cosines(rows: list[tuple[dict[str, Any], SupportFeatures]]) -> list[tuple[dict[str, Any], SupportFeatures]]:
    """Each scored pair with its claim's cosine to its best sentence, by the shipped model (in
    process here; the service asks its embedder child for the same vectors)."""
    from knowledge.semantic.encoder import Encoder

    encoder = Encoder(threads=2)
    scored = [i for i, (_, f) in enumerate(rows) if f.scored]
    claims = encoder.encode([rows[i][1].claim for i in scored])
    sentences = encoder.encode([rows[i][1].sentence for i in scored])
    out = list(rows)
    for i, a, b in zip(scored, claims, sentences, strict=True):
        out[i] = (rows[i][0], replace(rows[i][1], cosine=float((a * b).sum())))
    return out


def shipped(name: str, model: SupportModel) -> str:
    return f"{name} = SupportModel(weights={model.weights!r}, threshold={model.threshold:.3f})"


async def weights_in_a_tenant(claims: list[str], out: list[str]) -> dict[str, float]:
    """Every claim word's weight in a tenant holding the docs corpora, as the service reads it."""
    with throwaway_data_dir("knowledge-fit-support-") as data_dir:
        settings = Settings(data_dir=data_dir, sweep_interval_seconds=None, pool_max_size=8, semantic_arm=False)
        async with KnowledgeService.open(settings) as svc, own_db(svc, "knowledge-fit-support") as db:
            docs, refused = await ingest_sources(svc, "claims", docs_sources())
            out.append(f"tenant: {len(docs)} docs files (refused {refused or 0})")
            words = sorted({w for c in claims for w in content_words(c)})
            return await term_weights(db, "claims", words)  # on a pool of the script's own: the service's is private


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


async def run(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    built = list(build(seed=args.seed))
    weights = await weights_in_a_tenant([r["claim"] for r in built], out)
    lexical = [(r, features(r["claim"], r["passage"], weights)) for r in built]
    semantic = with_cosines(lexical)
    kinds = Counter(f"{r['part']}/{r['kind']}" for r in built)
    out.append(f"{len(built)} labelled pairs: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    for name, rows, use_cosine, ships in (("SUPPORT_MODEL", semantic, True, SUPPORT_MODEL),
                                          ("LEXICAL_SUPPORT_MODEL", lexical, False, LEXICAL_SUPPORT_MODEL)):
        fit = [(r, f) for r, f in rows if r["part"] == "fit"]
        check = [(r, f) for r, f in rows if r["part"] == "check"]
        model = fit_model(fit, use_cosine, args.precision)
        out += ["", shipped(name, model), *report("  fit", model, fit), *report("  check (unseen files)", model, check)]
        if model != ships:
            out += [f"  differs from the shipped {name}; it, on the check part:",
                    *report("  check (unseen files)", ships, check)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", type=float, default=0.955)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--loop", choices=("trio", "asyncio"), default="trio")
    print_run(run, parser.parse_args())


if __name__ == "__main__":
    main()
