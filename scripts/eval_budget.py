"""Budget pressure on the docs corpora: how often, and how much, the knowledge class yields.

    .venv/bin/python scripts/eval_budget.py [--regions 5000,4000,3500,3000,2500] [--beliefs 0,500,1000,1500,2000]
                                            [--belief-tokens 25] [--loop trio|asyncio]

Opens the service on a throwaway embedded PostgreSQL, ingests docs-argocd and docs-etcd through
`KnowledgeService.ingest` (as `eval_retrieval.py` does), and asks the 68 docs-dev questions. For
each question the knowledge class's candidates are what `knowledge.search` returns under the class's
allowance (3 passages / 3,000 tokens), exactly as `KnowledgeService.turn` retrieves them. Then, for
each Region B total and each belief load (beliefs of ``--belief-tokens`` tokens each, the spec's
"a belief's twenty-five"), the allocator (`knowledge.core.budget.allocate_turn`, the one a turn uses)
decides what renders, and the tally reports:

- ``yield rate``: turns in which knowledge yielded under pressure / turns with a passage admitted;
- ``passages``: yielded / admitted, and the distribution of passages yielded per turn (0/1/2/3);
- ``tokens``: tokens yielded in all, and per yielding turn;
- ``recall lost``: turns in which in-turn recall lost beliefs too (only once knowledge had nothing left);
- ``answer lost``: questions whose admitted passages held an answer that every rendered passage lacks.

The class allowances are 2,000 (in-turn recall) + 3,000 (knowledge) = 5,000 tokens, so a region of
5,000 never presses; below it, pressure depends on how much of their allowance the classes use.
Finally one configuration is run through `KnowledgeService.turn` end to end, and its persisted
counters (`KnowledgeService.budget_pressure`) are checked against the in-memory tally.
"""

from __future__ import annotations

import argparse
import statistics
import time

from retrieval_data import answers, docs_sources, ingest_sources, load_docs_dev, print_run

from knowledge.config import Settings
from knowledge.core.budget import KNOWLEDGE, PressureTally, allocate_turn
from knowledge.core.memory_boundary import Belief
from knowledge.core.turn import TurnRequest, class_allowance
from knowledge.models import KnowledgeQuery, RetrievedPassage
from knowledge.service import KnowledgeService
from knowledge.supervisors.embedded_pg import throwaway_data_dir

TENANT = "eval-budget"
PRINCIPAL = "eval"


def belief_load(tokens: int, per_belief: int) -> tuple[Belief, ...]:
    n, rest = divmod(tokens, per_belief)
    sizes = [per_belief] * n + ([rest] if rest else [])
    return tuple(Belief(belief_id=f"b{i}", text=f"belief {i}", tokens=t) for i, t in enumerate(sizes))


def table(questions: list[dict[str, object]], retrieved: list[list[RetrievedPassage]], regions: list[int],
          loads: list[int], per_belief: int) -> list[str]:
    lines = [f"{'region':>6} {'beliefs':>7} {'yield rate':>10} {'passages yielded':>16} {'per turn 0/1/2/3':>16} "
             f"{'tokens yielded':>14} {'/yielding turn':>14} {'recall lost':>11} {'answer lost':>11}"]
    for region in regions:
        for load in loads:
            tally = PressureTally()
            recall_turns = lost_answers = 0
            beliefs = belief_load(load, per_belief)
            for question, passages in zip(questions, retrieved, strict=True):
                got = allocate_turn(region, beliefs, passages)
                tally.add(got.allocation)
                recall_turns += got.recall.yielded
                # An answering passage that was admitted but yielded: the cost of pressure in recall@3.
                had = any(answers(question, p.text) for p in passages)
                lost_answers += had and not any(answers(question, p.text) for p in got.passages)
            per_turn = "/".join(str(tally.yielded_per_turn.get(i, 0)) for i in range(4))
            per_yield = tally.yielded_tokens / tally.yielded_turns if tally.yielded_turns else 0.0
            lines.append(
                f"{region:>6} {load:>7} {f'{tally.yielded_turns}/{tally.turns_with_candidates}':>5} "
                f"{tally.yield_rate:>4.0%} {f'{tally.yielded_items}/{tally.admitted_items}':>9} "
                f"{tally.yielded_item_share:>5.0%} {per_turn:>16} {tally.yielded_tokens:>14} {per_yield:>14.0f} "
                f"{recall_turns:>11} {lost_answers:>11}")
    return lines


async def run(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    with throwaway_data_dir("knowledge-eval-budget-") as data_dir:
        settings = Settings(data_dir=data_dir, sweep_interval_seconds=None, pool_max_size=8)
        async with KnowledgeService.open(settings) as svc:
            began = time.perf_counter()
            docs, refused = await ingest_sources(svc, TENANT, docs_sources())
            out.append(f"ingested {len(docs)} documents (refused {refused or 0}) in {time.perf_counter() - began:.1f}s")
            questions = load_docs_dev()
            retrieved: list[list[RetrievedPassage]] = []
            for q in questions:
                query = KnowledgeQuery(tenant_id=TENANT, principal_id=PRINCIPAL, text=str(q["question"]))
                retrieved.append(await svc.search(class_allowance(query, KNOWLEDGE)))
            counts = [len(r) for r in retrieved]
            used = [sum(p.tokens for p in r) for r in retrieved]
            sizes = sorted(p.tokens for r in retrieved for p in r)
            out.append(
                f"{len(questions)} docs-dev questions; knowledge admitted {sum(counts)} passages "
                f"(per question: {'/'.join(str(counts.count(i)) for i in range(4))} with 0/1/2/3), "
                f"tokens per question median {statistics.median(used):.0f} max {max(used)}, "
                f"passage tokens median {statistics.median(sizes):.0f} p90 {sizes[int(0.9 * (len(sizes) - 1))]}")
            out.append(f"beliefs of {args.belief_tokens} tokens; the classes' allowances sum to 5000 tokens")
            out += table(questions, retrieved, args.regions, args.beliefs, args.belief_tokens)

            # One configuration end to end through the turn, and the persisted counters against the tally.
            region, load = args.check
            tally = PressureTally()
            for q in questions:
                result = await svc.turn(TurnRequest(
                    query=KnowledgeQuery(tenant_id=TENANT, principal_id=PRINCIPAL, text=str(q["question"])),
                    region_tokens=region, beliefs=belief_load(load, args.belief_tokens), session_id="eval",
                    retrieve=True))
                tally.add(result.budget.allocation)
            stored = await svc.budget_pressure(TENANT)
            same = (stored.turns, stored.yielded_turns, stored.passages_yielded, stored.tokens_yielded) == (
                tally.turns, tally.yielded_turns, tally.yielded_items, tally.yielded_tokens)
            out.append(f"end to end (region {region}, beliefs {load}): persisted budget pressure: "
                       f"{stored.yielded_turns}/{stored.knowledge_turns} turns yielded ({stored.yield_rate:.0%}), "
                       f"{stored.passages_yielded}/{stored.passages_admitted} passages, {stored.tokens_yielded} "
                       f"tokens; matches the in-memory tally: {same}")
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regions", type=_ints, default=[5000, 4000, 3500, 3000, 2500])
    parser.add_argument("--beliefs", type=_ints, default=[0, 500, 1000, 1500, 2000])
    parser.add_argument("--belief-tokens", type=int, default=25)
    parser.add_argument("--check", type=_ints, default=[3000, 2000], help="region,beliefs for the end-to-end run")
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    print_run(run, parser.parse_args())


if __name__ == "__main__":
    main()
