"""Training data for the relevance model (issue 19): every candidate of every training question,
with its features (`knowledge.core.relevance.features`, through `Searcher.features`) and its label.

    .venv/bin/python scripts/collect_relevance.py --out /tmp/relevance.jsonl.gz [--scifact 2500] [--no-docs]

- **docs-train** (`build_docs_train.py`, 1,227 questions over docs-argocd and docs-etcd, never
  docs-dev's files): both docs corpora ingested once, with every training question's heading hidden
  (`hide_headings`), into a tenant of their own; a candidate is relevant when it contains the
  question's answer quote. Its ``fold`` is the set's (by file).
- **docs-cross** (``--cross``): unanswerable questions for the floor. Each docs-train question
  asked of a tenant holding only the *other* docs corpus (an etcd heading of Argo CD's docs, an
  Argo CD heading of etcd's): a question about software, in software words, that this corpus
  cannot answer. Every candidate is labelled irrelevant; ``answerable`` is false.
- **SciFact train** (809 claims with relevance judgements): every abstract a train claim cites plus
  a seeded sample of the others, up to ``--scifact`` abstracts in all (embedding all 5,183 would
  take a quarter hour on two cores); a candidate is relevant when its abstract is judged relevant.
  Fold: the claim id modulo 5.

Each question is asked through the service's pipeline with the semantic arm on — a `Searcher` built
as the service's own (`retrieval_data.own_searcher`: the service's parts are private): the arms'
candidates (`Searcher.candidates`), then their features twice — ``fused`` (every candidate, cosines
included) and ``lexical`` (only the lexical arm's candidates, as a search that went on without the
semantic arm sees them). One JSON line per question and mode: ``{set, fold, qid, mode, answerable,
cands: [{chunk, key, label, x: {feature: value}}]}``. `fit_relevance.py` reads it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

from build_docs_train import build, hide_headings
from retrieval_data import (
    answers,
    docs_sources,
    ingest_sources,
    load_scifact,
    own_db,
    own_searcher,
    print_run,
    scifact_sources,
)

from knowledge.config import Settings
from knowledge.core.ranking import Candidate
from knowledge.models import KnowledgeQuery
from knowledge.retrieval.search import Searcher
from knowledge.service import KnowledgeService
from knowledge.supervisors.embedded_pg import throwaway_data_dir

FOLDS = 5


def lexical_only(candidates: list[Candidate]) -> list[Candidate]:
    return [replace(c, arm_ranks={"lexical": c.arm_ranks["lexical"]}) for c in candidates if "lexical" in c.arm_ranks]


async def ask(searcher: Searcher, tenant: str, text: str, label: Any, key: Any, *, texts: bool = False
              ) -> dict[str, list[dict[str, Any]]]:
    """Both modes' candidates of one question: chunk id, source key, label, features (and with
    ``texts`` each fused candidate's heading path and text, for experiments with a second stage)."""
    query = KnowledgeQuery(tenant_id=tenant, principal_id="eval", text=text)
    candidates = await searcher.candidates(query)
    out: dict[str, list[dict[str, Any]]] = {}
    for mode, cands in (("fused", candidates), ("lexical", lexical_only(candidates))):
        feats = await searcher.features(query, cands)
        out[mode] = [{"chunk": c.chunk_id, "key": key(c), "label": bool(label(c)), "ranks": dict(c.arm_ranks),
                      "doc": str(c.document_id),
                      "x": {k: round(v, 6) for k, v in feats[c.chunk_id].items()}} for c in cands]
        if texts and mode == "fused":
            for c, row in zip(cands, out[mode], strict=True):
                row["heading_path"], row["text"] = list(c.heading_path), c.text
    return out


async def run(args: argparse.Namespace) -> list[str]:
    lines: list[str] = []
    with throwaway_data_dir("knowledge-fit-") as data_dir, gzip.open(args.out, "wt", encoding="utf-8") as out:
        settings = Settings(data_dir=data_dir, sweep_interval_seconds=None, semantic_arm=True)
        async with KnowledgeService.open(settings) as svc, own_db(svc, "knowledge-collect-relevance") as db, \
                own_searcher(svc, db) as searcher:
            if args.docs:
                questions = build()
                tenant = "train-docs"
                await ingest_sources(svc, tenant, hide_headings(docs_sources(), questions))
                for q in questions:
                    found = await ask(searcher, tenant, q["question"], lambda c, q=q: answers(q, c.text),
                                      lambda c: c.chunk_id, texts=args.texts)
                    for mode, cands in found.items():
                        out.write(json.dumps({"set": "docs-train", "fold": q["fold"], "qid": q["id"], "mode": mode,
                                              "answerable": True, "cands": cands}) + "\n")
                lines.append(f"docs-train: {len(questions)} questions")
            if args.cross:
                questions = build()
                for corpus in ("docs-argocd", "docs-etcd"):
                    tenant = f"train-only-{corpus}"
                    await ingest_sources(svc, tenant, [s for s in docs_sources() if s.key.startswith(corpus + "/")])
                    others = [q for q in questions if not q["file"].startswith(corpus + "/")]
                    for q in others[::args.cross]:
                        found = await ask(searcher, tenant, q["question"], lambda c: False, lambda c: c.chunk_id)
                        for mode, cands in found.items():
                            out.write(json.dumps({"set": "docs-cross", "fold": q["fold"], "qid": q["id"],
                                                  "mode": mode, "answerable": False, "cands": cands}) + "\n")
                    lines.append(f"docs-cross: {len(others[::args.cross])} questions asked of {corpus} alone")
            if args.scifact:
                data = load_scifact(split="train")
                cited = {d for rel in data.qrels.values() for d in rel}
                others = [d for d in data.corpus if d["_id"] not in cited]
                random.Random(19).shuffle(others)
                chosen = [d for d in data.corpus if d["_id"] in cited] + others[:max(args.scifact - len(cited), 0)]
                tenant = "train-scifact"
                keys, _ = await ingest_sources(svc, tenant, scifact_sources(replace(data, corpus=chosen)))
                for qid, text in data.queries.items():
                    rel = data.qrels[qid]
                    found = await ask(searcher, tenant, text, lambda c, rel=rel: keys[c.document_id] in rel,
                                      lambda c: keys[c.document_id])
                    for mode, cands in found.items():
                        out.write(json.dumps({"set": "scifact-train", "fold": int(qid) % FOLDS, "qid": qid,
                                              "mode": mode, "answerable": True, "cands": cands}) + "\n")
                lines.append(f"scifact-train: {len(data.queries)} claims over {len(chosen)} abstracts")
    lines.append(f"wrote {args.out}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scifact", type=int, default=2500, help="abstracts to ingest for SciFact train (0: none)")
    parser.add_argument("--docs", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--cross", type=int, default=2,
                        help="docs-cross: every Nth docs-train question asked of the other corpus alone (0: none)")
    parser.add_argument("--texts", action="store_true",
                        help="docs-train: store each fused candidate's heading path and text as well")
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    print_run(run, parser.parse_args())


if __name__ == "__main__":
    main()
