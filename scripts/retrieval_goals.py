"""Issue 19's goal table, reliability table and candidates-vs-recall curve, for `eval_retrieval.py`.

Each configuration is a `Searcher` built as the service's own (`retrieval_data.own_searcher`: the
service's parts are private) with its arms, ranking policy and arm limit swapped for the run
(`configured`): ``lexical`` / ``semantic`` / ``fused`` arms, ``knowledge-v1`` (reciprocal-rank
fusion, no relevance), the shipped default without its floors (the relevance model's order alone)
and the shipped default (the calibrated relevance model and its floor).

docs-dev columns (answerable questions unless said): R@3, R@3 of the paraphrased and the plain
ones, hit@1, noise@3 (returned passages that answer nothing / passages returned, every question),
unanswerable questions that came back empty, answerable ones that did, p50 and p99 latency of
the default search (3 passages / 3000 tokens). SciFact: nDCG@10 (10 passages, one per abstract),
R@3 of the default search, and the same empties.

Reliability: the passages of each question's 10-passage search, binned by their relevance: the
mean relevance against the share that answered (docs: holds an answer quote; SciFact: a relevant
abstract). A calibrated score has the two columns close.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from retrieval_data import answers, median_ms, ndcg_at_k, p99_ms, recall_at_k, searching_with

from knowledge.core.ranking import KNOWLEDGE_V1, RankingPolicy
from knowledge.models import KnowledgeQuery
from knowledge.retrieval.search import ARM_LIMIT, Searcher
from knowledge.service import KnowledgeService


@dataclass(frozen=True)
class Config:
    name: str
    arms: tuple[str, ...]
    policy: RankingPolicy
    arm_limit: int = ARM_LIMIT


def configs(svc: KnowledgeService, default: RankingPolicy) -> list[Config]:
    """lexical and (with the semantic arm) fused, under knowledge-v1 and under ``default``."""
    names = tuple(svc.retrieval().arms)
    arm_sets = [("lexical", ("lexical",))] + ([("fused", names)] if len(names) > 1 else [])
    if len(names) > 1:
        arm_sets.insert(1, ("semantic", ("semantic",)))
    policies = [(KNOWLEDGE_V1.name, KNOWLEDGE_V1), (f"{default.name} unfloored", default.unfloored()),
                (default.name, default)]
    return [Config(f"{label}, {name}", arms, policy) for label, arms in arm_sets for name, policy in policies]


def configured(searcher: Searcher, cfg: Config) -> contextlib.AbstractContextManager[None]:
    return searching_with(searcher, arms=[a for a in searcher.arms if a.name in cfg.arms], policy=cfg.policy,
                          arm_limit=cfg.arm_limit)


def ask(tenant: str, text: str, **kw: Any) -> KnowledgeQuery:
    return KnowledgeQuery(tenant_id=tenant, principal_id="eval", text=text, **kw)


@dataclass
class Pairs:
    """(relevance, answered) of returned passages, for the reliability table."""

    items: list[tuple[float, bool]] = field(default_factory=list)

    def table(self, title: str) -> list[str]:
        if not self.items:
            return []
        rows = [title, f"  {'relevance':<10} {'passages':>8} {'mean':>6} {'answered':>8}"]
        ece = 0.0
        for b in range(10):
            inside = [(p, y) for p, y in self.items if min(int(p * 10), 9) == b]
            if inside:
                mean = sum(p for p, _ in inside) / len(inside)
                share = sum(y for _, y in inside) / len(inside)
                ece += abs(mean - share) * len(inside) / len(self.items)
                rows.append(f"  {b / 10:.1f}-{(b + 1) / 10:.1f}    {len(inside):>8} {mean:>6.3f} {share:>8.3f}")
        rows.append(f"  expected calibration error: {ece:.3f} over {len(self.items)} passages")
        return rows


async def docs_goals(searcher: Searcher, tenant: str, questions: Sequence[dict[str, Any]],
                     cfgs: Sequence[Config], pairs: Pairs | None = None) -> list[str]:
    answerable = [i for i, q in enumerate(questions) if not q["unanswerable"]]
    para = [i for i in answerable if questions[i]["paraphrase"]]
    plain = [i for i in answerable if not questions[i]["paraphrase"]]
    unans = [i for i, q in enumerate(questions) if q["unanswerable"]]
    lines = [f"docs-dev goal table ({len(answerable)} answerable: {len(para)} paraphrased, {len(plain)} plain; "
             f"{len(unans)} unanswerable; default search 3 passages / 3000 tokens)",
             f"  {'configuration':<34} {'R@3':>6} {'para':>6} {'plain':>6} {'hit@1':>6} {'noise@3':>7} "
             f"{'unans→∅':>8} {'ans→∅':>6} {'p50 ms':>7} {'p99 ms':>7}"]
    for cfg in cfgs:
        with configured(searcher, cfg):
            results, seconds = [], []
            for q in questions:
                began = time.perf_counter()
                results.append([p.text for p in await searcher.search(ask(tenant, q["question"]))])
                seconds.append(time.perf_counter() - began)
                if pairs is not None and cfg is cfgs[-1] and not q["unanswerable"]:
                    ten = await searcher.search(ask(tenant, q["question"], max_passages=10, budget_tokens=10_000))
                    pairs.items += [(p.relevance or 0.0, answers(q, p.text)) for p in ten]

        def rate(idx: list[int], k: int = 3, results: list[list[str]] = results) -> float:
            return sum(any(answers(questions[i], t) for t in results[i][:k]) for i in idx) / max(len(idx), 1)

        returned = sum(len(r) for r in results)
        noise = sum(not answers(questions[i], t) for i, r in enumerate(results) for t in r) / max(returned, 1)
        lines.append(f"  {cfg.name:<34} {rate(answerable):>6.3f} {rate(para):>6.3f} {rate(plain):>6.3f} "
                     f"{rate(answerable, 1):>6.3f} {noise:>7.3f} "
                     f"{f'{sum(not results[i] for i in unans)}/{len(unans)}':>8} "
                     f"{f'{sum(not results[i] for i in answerable)}/{len(answerable)}':>6} "
                     f"{median_ms(seconds):>7.1f} {p99_ms(seconds):>7.1f}")
    return lines


async def scifact_goals(searcher: Searcher, tenant: str, queries: dict[str, str], qrels: dict[str, set[str]],
                        keys: dict[UUID, str], cfgs: Sequence[Config], pairs: Pairs | None = None) -> list[str]:
    lines = [f"SciFact test goal table ({len(queries)} claims)",
             f"  {'configuration':<34} {'nDCG@10':>7} {'R@3':>6} {'empty':>6} {'p50 ms':>7}"]
    for cfg in cfgs:
        with configured(searcher, cfg):
            ndcg = r3 = 0.0
            empty = 0
            seconds = []
            for qid, text in queries.items():
                began = time.perf_counter()
                ten = await searcher.search(ask(tenant, text, max_passages=10, max_per_document=1,
                                                budget_tokens=100_000))
                seconds.append(time.perf_counter() - began)
                docs = [keys[p.document_id] for p in ten]
                ndcg += ndcg_at_k(docs, qrels[qid], 10)
                r3 += recall_at_k(docs, qrels[qid], 3)
                empty += not ten
                if pairs is not None and cfg is cfgs[-1]:
                    pairs.items += [(p.relevance or 0.0, keys[p.document_id] in qrels[qid]) for p in ten]
        n = len(queries)
        lines.append(f"  {cfg.name:<34} {ndcg / n:>7.3f} {r3 / n:>6.3f} {empty:>6} {median_ms(seconds):>7.1f}")
    return lines


async def limit_curve(searcher: Searcher, tenant: str, questions: Sequence[dict[str, Any]], cfg: Config,
                      limits: Sequence[int] = (5, 10, 20, 30, 50)) -> list[str]:
    """Candidates judged (each arm's limit) against docs-dev R@3 and latency, for a host to pick its point."""
    answerable = [q for q in questions if not q["unanswerable"]]
    lines = [f"candidates per arm judged vs docs-dev R@3 and latency ({cfg.name})",
             f"  {'per arm':>7} {'R@3':>6} {'p50 ms':>7} {'p99 ms':>7}"]
    for limit in limits:
        with configured(searcher, Config(cfg.name, cfg.arms, cfg.policy, limit)):
            hits, seconds = 0, []
            for q in answerable:
                began = time.perf_counter()
                found = await searcher.search(ask(tenant, q["question"]))
                seconds.append(time.perf_counter() - began)
                hits += any(answers(q, p.text) for p in found)
        lines.append(f"  {limit:>7} {hits / len(answerable):>6.3f} {median_ms(seconds):>7.1f} {p99_ms(seconds):>7.1f}")
    return lines
