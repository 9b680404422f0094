"""`knowledge.search` on the weakly labelled docs training set (`build_docs_train.py`): each
section's heading asked of the corpus with that fold's headings hidden.

    .venv/bin/python scripts/eval_docs_train.py [--semantic] [--folds 0 1 2 3 4] [--loop trio|asyncio]

For each fold: the docs corpora are ingested into a tenant of their own with the fold's question
headings replaced by ``Section`` (`hide_headings`), and every question of the fold is asked
through `KnowledgeService.search` at its defaults (3 passages / 3000 tokens) and with 10 passages.
Prints hit@1, R@3 and R@10 (an answering passage — one containing the answer quote — at rank 1,
in the top 3, in the top 10), empty results, the rank-1 score of hits and misses (what a
relevance floor would have to separate), and per arm the AUC of its best candidate's strength
for "the top 3 answers" — per fold, per corpus and overall. A baseline to fit and
check second stages against without touching docs-dev; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from build_docs_train import build, hide_headings
from retrieval_data import add_semantic_option, answers, docs_sources, ingest_sources, own_db, own_searcher, print_run

from knowledge.config import Settings
from knowledge.models import KnowledgeQuery
from knowledge.service import KnowledgeService
from knowledge.supervisors.embedded_pg import throwaway_data_dir


@dataclass
class Tally:
    n: int = 0
    hit1: int = 0
    r3: int = 0
    r10: int = 0
    empty: int = 0
    top_hit: list[float] = field(default_factory=list)  # rank-1 score when rank 1 answers
    top_miss: list[float] = field(default_factory=list)  # rank-1 score when it does not
    strengths: dict[str, list[tuple[float, bool]]] = field(default_factory=lambda: defaultdict(list))

    def add_strength(self, arm: str, strength: float, answered: bool) -> None:
        """An arm's best candidate's strength, and whether the search's top 3 answered."""
        self.strengths[arm].append((strength, answered))

    def add(self, question: dict[str, Any], default: list[Any], ten: list[Any]) -> None:
        self.n += 1
        self.hit1 += bool(default) and answers(question, default[0].text)
        self.r3 += any(answers(question, p.text) for p in default[:3])
        self.r10 += any(answers(question, p.text) for p in ten[:10])
        self.empty += not default
        if default:
            (self.top_hit if answers(question, default[0].text) else self.top_miss).append(default[0].score)

    def line(self, label: str) -> str:
        def median(xs: list[float]) -> str:
            return f"{statistics.median(xs):.3f}" if xs else "-"

        n = self.n
        aucs = " ".join(f"{auc(self.strengths[arm]):>8.3f}" for arm in sorted(self.strengths))
        return (f"{label:<22} {n:>5} {self.hit1 / n:>6.3f} {self.r3 / n:>6.3f} {self.r10 / n:>6.3f} "
                f"{self.empty:>5} {median(self.top_hit):>9} {median(self.top_miss):>10} {aucs}")


def auc(pairs: list[tuple[float, bool]]) -> float:
    """The probability that an answered question's strength exceeds an unanswered one's (ties half):
    how well the strength alone could tell them apart (0.5: not at all)."""
    positives = [x for x, y in pairs if y]
    negatives = [x for x, y in pairs if not y]
    if not positives or not negatives:
        return float("nan")
    wins = sum((p > q) + 0.5 * (p == q) for p in positives for q in negatives)
    return wins / (len(positives) * len(negatives))


async def run(args: argparse.Namespace) -> list[str]:
    questions = build()
    by_fold: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for q in questions:
        by_fold[q["fold"]].append(q)
    tallies: dict[str, Tally] = defaultdict(Tally)
    out = [f"{len(questions)} training questions; folds {sorted(args.folds)}; semantic arm "
           f"{'on' if args.semantic else 'off'}"]
    with throwaway_data_dir("knowledge-train-") as data_dir:
        settings = Settings(data_dir=data_dir, sweep_interval_seconds=None, semantic_arm=args.semantic)
        # Each arm's best candidate: the arms of a searcher of the script's own, built as the service's
        # (whose parts are private), over a pool of its own.
        async with KnowledgeService.open(settings) as svc, own_db(svc, "knowledge-eval-docs-train") as db, \
                own_searcher(svc, db) as searcher:
            for fold in sorted(args.folds):
                tenant = f"train-fold-{fold}"
                await ingest_sources(svc, tenant, hide_headings(docs_sources(), by_fold[fold]))
                for q in by_fold[fold]:
                    asked = KnowledgeQuery(tenant_id=tenant, principal_id="eval", text=q["question"])
                    default = await svc.search(asked)
                    ten = await svc.search(asked.model_copy(update={"max_passages": 10, "budget_tokens": 10_000}))
                    answered = any(answers(q, p.text) for p in default[:3])
                    best = {arm.name: await arm.search(db, asked, 1) for arm in searcher.arms}
                    for key in (f"fold {fold}", q["file"].split("/")[0], "all"):
                        tallies[key].add(q, default, ten)
                        for name, found in best.items():
                            tallies[key].add_strength(name, found[0].strength if found else 0.0, answered)
    arms = " ".join(f"{'AUC ' + name[:3]:>8}" for name in sorted(tallies["all"].strengths))
    out.append(f"{'':<22} {'n':>5} {'hit@1':>6} {'R@3':>6} {'R@10':>6} {'empty':>5} {'score hit':>9} "
               f"{'score miss':>10} {arms}")
    out += [tallies[k].line(k) for k in sorted(tallies, key=lambda k: (k == "all", k))]
    out.append("score hit / miss: the median rank-1 score when rank 1 answers / does not. AUC arm: how well that "
               "arm's best candidate's strength alone separates questions whose top 3 answers from the rest.")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    add_semantic_option(parser)
    print_run(run, parser.parse_args())


if __name__ == "__main__":
    main()
