"""Citation accuracy and citation rate on a scripted set of answers, recorded through the service as
a host records them (`KnowledgeService.record_answer`, `citation_stats`).

    .venv/bin/python scripts/eval_citations.py [--loop trio|asyncio] [--lexical] [--questions 68]

Opens the service on a throwaway embedded PostgreSQL, ingests the docs corpora into one tenant
(lexical arm), then opens it again with the embedder child serving unless ``--lexical``, so claims
are judged as a service with the semantic arm judges them (no corpus vectors are needed for that), runs each
docs-dev question as a turn (pre-turn retrieval on, to have passages shown), and records, per turn,
five answers built from a prose sentence of a shown passage P (another shown passage Q):

- ``correct``: the sentence, citing P — a supported citation; drew on P, cites it;
- ``paraphrase``: the sentence reworded by `build_claims.paraphrase`, citing P — supported;
- ``wrong_passage``: the sentence, citing Q — unsupported; drew on P without citing it;
- ``hallucinated``: the sentence, citing an id the turn never showed — unsupported;
- ``uncited``: the sentence alone — no citation; drew on P without citing it.

Prints, per kind, how often the verdict and the drawing were what the script intended, then the
tenant's metrics from `citation_stats` beside what they would be were every verdict right.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import defaultdict

from build_claims import paraphrase, sentences
from retrieval_data import docs_sources, ingest_sources, load_docs_dev, print_run

from knowledge.config import Settings
from knowledge.core.support import features
from knowledge.core.turn import TurnRequest
from knowledge.models import KnowledgeQuery
from knowledge.service import KnowledgeService
from knowledge.supervisors.embedded_pg import throwaway_data_dir

KINDS = ("correct", "paraphrase", "wrong_passage", "hallucinated", "uncited")
#: Per kind: (the citation's intended verdict or None without one, whether the answer cites what it drew on).
INTENDED: dict[str, tuple[bool | None, bool]] = {
    "correct": (True, True), "paraphrase": (True, True), "wrong_passage": (False, False),
    "hallucinated": (False, False), "uncited": (None, False)}


async def run(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    rng = random.Random(31)
    questions = [q for q in load_docs_dev() if not q.get("unanswerable")][: args.questions]
    with throwaway_data_dir("knowledge-eval-citations-") as data_dir:
        lexical = Settings(data_dir=data_dir, sweep_interval_seconds=None, pool_max_size=8, semantic_arm=False)
        async with KnowledgeService.open(lexical) as svc:
            docs, refused = await ingest_sources(svc, "docs", docs_sources())
        judging = lexical.model_copy(update={"semantic_arm": not args.lexical, "semantic_drain": False,
                                             "semantic_backfill": False})
        async with KnowledgeService.open(judging) as svc:
            semantic = "semantic" in svc.retrieval().arms  # the embedder child is this service's
            if semantic and not await svc.semantic_ready(within=600):
                raise SystemExit("the embedder child did not start serving within 10 minutes")
            out.append(f"tenant docs: {len(docs)} files (refused {refused or 0}); claims judged "
                       f"{'with the embedding model' if semantic else 'lexically'}")
            right: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # verdict right, drawing right, n
            turns = 0
            began = time.perf_counter()
            for q in questions:
                turn = await svc.turn(TurnRequest(query=KnowledgeQuery(tenant_id="docs", principal_id="eval",
                                                                       text=str(q["question"])),
                                                  region_tokens=10_000, retrieve=True))
                shown = list(turn.passages)
                own = [(p, s) for p in shown for s in sentences(p.text) if features(s, p.text).contained]
                if len(shown) < 2 or not own:
                    continue
                turns += 1
                p, s = rng.choice(own)
                q_id = next(x.chunk_id for x in shown if x.chunk_id != p.chunk_id)
                said = paraphrase(s, rng) or s
                made = {"correct": f"{s[:-1]} [{p.chunk_id}].", "paraphrase": f"{said.rstrip('.')} [{p.chunk_id}].",
                        "wrong_passage": f"{s[:-1]} [{q_id}].", "hallucinated": f"{s[:-1]} [kc_{'q' * 21}].",
                        "uncited": s}
                for kind in KINDS:
                    recorded = await svc.record_answer(turn.trace.trace_id, made[kind], tenant_id="docs")
                    verdict, cites = INTENDED[kind]
                    got = recorded.citations[0].supported if recorded.citations else None
                    right[kind][0] += got == verdict
                    right[kind][1] += (p.chunk_id in recorded.drawn_on) and recorded.cites_what_it_drew_on == cites
                    right[kind][2] += 1
            stats = await svc.citation_stats("docs")
            out += [f"{turns} turns with two or more passages and a prose sentence to quote, {len(KINDS)} answers "
                    f"each, recorded in {time.perf_counter() - began:.0f}s", "",
                    f"{'answer':<15} {'n':>4} {'verdict right':>14} {'drawing right':>14}"]
            for kind in KINDS:
                ok, drawn, n = right[kind]
                out.append(f"{kind:<15} {n:>4} {ok / n:>14.1%} {drawn / n:>14.1%}")
            # Were every verdict right: 2 supported of 4 citations per turn; 2 of 4 drawing answers cite.
            out += ["", f"{'metric':<20} {'measured':>9} {'if every verdict were right':>28}",
                    f"{'citation accuracy':<20} {stats.accuracy or 0.0:>9.3f} {0.5:>28.3f}",
                    f"{'citation rate':<20} {stats.rate or 0.0:>9.3f} {0.4:>28.3f}",
                    f"hallucinated: {stats.hallucinated} of {stats.citations} citations"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", choices=("trio", "asyncio"), default="trio")
    parser.add_argument("--lexical", action="store_true", help="no embedder child: the lexical model judges")
    parser.add_argument("--questions", type=int, default=68)
    print_run(run, parser.parse_args())


if __name__ == "__main__":
    main()
