"""Retrieval: query -> arms -> relevance -> rank -> floor -> cap -> budget (ADR-0033, "Retrieval").

The lexical arm is BM25 computed inside PostgreSQL from the postings table (migration 0003):

One statement: the question becomes lexemes (``to_tsvector``, the index's own configuration);
their postings in the tenant are read once (an index-only range scan per lexeme over
``(tenant_id, term)``, carrying tf and the chunk's length); document frequencies come from those
postings and N and the average length from the tenant's sharded counters; every chunk holding a
lexeme is scored; then the scores are walked in descending order through the isolation
predicates (tenant, visibility resolved against the principal and the current scope, the
sensitivity ceiling, the live version or the version valid at ``as_of``) until ``limit``
admissible chunks are found. The predicates are in the SQL that fetches candidates; nothing is
filtered after ranking.

Arms return ranked candidates; the union is judged by the calibrated relevance model
(`Searcher.features`: `knowledge.store.evidence` reads every candidate's lexical evidence again, and the
semantic arm every candidate's cosine; `knowledge.core.relevance` scores them), then ranked by the
policy (`knowledge.core.ranking`: ``knowledge-v2`` ranks and floors by that relevance; ``knowledge-v1``,
reciprocal-rank fusion, needs no evidence), so a semantic arm plugs in beside the lexical one by
configuration. An arm that cannot answer for now raises
`ArmUnavailable` (the semantic arm while its embedder child restarts): the search goes on with the
arms that answered, fused as if only they were configured — exactly the lexical-only search, never a
failed one — and `Searcher.without` counts it per arm (`KnowledgeService.health` reports it).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import NamedTuple, Protocol, runtime_checkable

import anyio
from anyio.abc import TaskGroup

from knowledge.config import LEXICAL_DEPTH
from knowledge.core.ranking import DEFAULT_POLICY, Candidate, RankingPolicy, rank, select
from knowledge.core.relevance import BM25_B, BM25_K1, LexicalEvidence, features
from knowledge.errors import ArmUnavailable
from knowledge.models import KnowledgeQuery, RetrievedPassage
from knowledge.store.db import Database
from knowledge.store.evidence import lexical_evidence
from knowledge.store.faults import Faults
from knowledge.store.retrieval import lexical_hits
from knowledge.structured import run_both

_log = logging.getLogger(__name__)

#: How many candidates an arm hands to fusion.
ARM_LIMIT = 50




@dataclass(frozen=True)
class ArmResult:
    """One arm's ranked, admitted candidates, and the query's lexical statistics when the arm
    computed them on the way (`EvidenceArm`)."""

    arm: str
    candidates: list[Candidate]
    terms: LexicalEvidence | None = None


class Gathered(NamedTuple):
    """A search's candidates from every arm that answered (`Searcher.gather`)."""

    candidates: list[Candidate]
    answered: int
    #: The query's idf and mean length, from the lexical arm when it answered with candidates.
    terms: LexicalEvidence | None


class Arm(Protocol):
    @property
    def name(self) -> str: ...

    async def search(self, db: Database, query: KnowledgeQuery, limit: int) -> list[Candidate]: ...


@runtime_checkable
class CosineArm(Arm, Protocol):
    """An arm that can also tell the cosine of any admitted candidate to the query."""

    async def cosines(self, db: Database, query: KnowledgeQuery, chunk_ids: Sequence[str]) -> dict[str, float]: ...


@runtime_checkable
class EvidenceArm(Arm, Protocol):
    """An arm whose search also yields the query's lexical statistics (`ArmResult.terms`)."""

    async def search_result(self, db: Database, query: KnowledgeQuery, limit: int) -> ArmResult: ...


@dataclass(frozen=True)
class LexicalArm:
    """BM25 over the postings table, with the isolation predicates in the candidate query."""

    name: str = "lexical"
    k1: float = BM25_K1
    b: float = BM25_B
    #: Postings read per query lexeme, strongest first (`knowledge.store.retrieval.LEXICAL_SQL`);
    #: None: every posting (the exhaustive reference).
    depth: int | None = LEXICAL_DEPTH

    async def search(self, db: Database, query: KnowledgeQuery, limit: int) -> list[Candidate]:
        return (await self.search_result(db, query, limit)).candidates

    async def search_result(self, db: Database, query: KnowledgeQuery, limit: int) -> ArmResult:
        found = await lexical_hits(db, query=query, k1=self.k1, b=self.b, limit=limit, arm=self.name,
                                   depth=self.depth)
        return ArmResult(self.name, [hit.ranked(rank_no, hit.score)
                                     for rank_no, hit in enumerate(found.hits, start=1)], found.evidence)


async def arm_result(arm: Arm, db: Database, query: KnowledgeQuery, limit: int) -> ArmResult:
    """One arm's search, with the query's lexical statistics when the arm computes them."""
    if isinstance(arm, EvidenceArm):
        return await arm.search_result(db, query, limit)
    return ArmResult(arm.name, await arm.search(db, query, limit))


def merge_arms(results: Sequence[ArmResult]) -> list[Candidate]:
    """One candidate per chunk, carrying its rank in every arm that returned it and its strongest
    evidence; ranking them is the ranker's (the relevance model by default, RRF under ``knowledge-v1``)."""
    merged: dict[str, Candidate] = {}
    for result in results:
        for cand in result.candidates:
            prior = merged.get(cand.chunk_id)
            if prior is None:
                merged[cand.chunk_id] = cand
            else:
                merged[cand.chunk_id] = replace(prior, arm_ranks={**prior.arm_ranks, **cand.arm_ranks},
                                                strength=max(prior.strength, cand.strength))
    return list(merged.values())


@dataclass
class Searcher:
    """The retrieval pipeline over a set of arms (lexical, and the semantic arm when enabled)."""

    db: Database
    arms: Sequence[Arm]
    policy: RankingPolicy = DEFAULT_POLICY
    arm_limit: int = ARM_LIMIT
    #: The fault-injection seam (`knowledge.store.faults.SearchHook`: "before", "after").
    faults: Faults = field(default_factory=Faults)

    #: Searches that went on without an arm (`ArmUnavailable`), by arm name.
    without: Counter[str] = field(default_factory=Counter)
    #: Arms whose last search went on without them (logged once per outage, not per search).
    _down: set[str] = field(default_factory=set)

    async def candidates(self, query: KnowledgeQuery) -> list[Candidate]:
        """Every answering arm's candidates, merged."""
        return (await self.gather(query)).candidates

    async def gather(self, query: KnowledgeQuery) -> Gathered:
        """Every arm's candidates, the arms running concurrently in this call's task group, and how
        many arms answered (an `ArmUnavailable` arm did not; any other failure is raised, unwrapped,
        the other arms cancelled)."""
        if len(self.arms) == 1:
            only = await arm_result(self.arms[0], self.db, query, self.arm_limit)
            return Gathered(merge_arms([only]), 1, only.terms)
        results: list[ArmResult | None] = [None] * len(self.arms)
        errors: list[Exception] = []
        down: list[ArmUnavailable] = []

        async def one(i: int, arm: Arm, tg: TaskGroup) -> None:
            try:
                results[i] = await arm_result(arm, self.db, query, self.arm_limit)
                if arm.name in self._down:
                    self._down.discard(arm.name)
                    _log.warning("searches have the %s arm again (%d went on without it so far)",
                                 arm.name, self.without[arm.name])
            except ArmUnavailable as exc:
                down.append(exc)
                self.without[arm.name] += 1
                if arm.name not in self._down:
                    self._down.add(arm.name)
                    _log.warning("searches go on without the %s arm: %s", arm.name, exc)
            except Exception as exc:  # the first failure, raised unwrapped; the other arms stop
                errors.append(exc)
                tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            for i, arm in enumerate(self.arms):
                tg.start_soon(one, i, arm, tg)
        if errors:
            raise errors[0]
        answered = [r for r in results if r is not None]
        if not answered:
            raise down[0].error
        terms = next((r.terms for r in answered if r.terms is not None), None)
        return Gathered(merge_arms(answered), len(answered), terms)

    async def features(self, query: KnowledgeQuery, candidates: Sequence[Candidate],
                       terms: LexicalEvidence | None = None) -> dict[str, dict[str, float]]:
        """Every candidate's relevance features (`knowledge.core.relevance.features`): its lexical
        evidence and, when a semantic arm answered this search, every candidate's cosine — the two
        statements run concurrently (`run_both`: the first failure raised unwrapped). ``terms``:
        the query's lexical statistics from the lexical arm (`Gathered.terms`), not read again."""
        ids = [c.chunk_id for c in candidates]
        semantic = next((a for a in self.arms if isinstance(a, CosineArm)
                         and any(a.name in c.arm_ranks for c in candidates)), None)
        lexical = LexicalEvidence(idf={}, avgdl=1.0)
        cosines: dict[str, float] | None = None

        async def read_lexical() -> None:
            nonlocal lexical
            lexical = await lexical_evidence(self.db, query.tenant_id, query.text, ids, terms)

        async def read_cosines() -> None:
            nonlocal cosines
            assert semantic is not None
            try:
                cosines = await semantic.cosines(self.db, query, ids)
            except ArmUnavailable:
                cosines = None  # judged by the lexical model, as if the arm had not answered

        if ids and semantic is not None:
            await run_both(read_lexical, read_cosines)
        elif ids:
            await read_lexical()
        return features(ids, lexical, documents={c.chunk_id: c.document_id for c in candidates}, cosines=cosines)

    async def search(self, query: KnowledgeQuery) -> list[RetrievedPassage]:
        """Ranked, capped, floored and budgeted passages; never truncated."""
        await self.faults.search("before", query)
        candidates, n_arms, terms = await self.gather(query)
        today = (query.as_of or datetime.now(UTC)).date()
        relevances = None
        if self.policy.calibrated:
            relevances = self.policy.judge(await self.features(query, candidates, terms))
        ranked = rank(candidates, current_scope=query.current_scope, today=today, n_arms=n_arms,
                      policy=self.policy, relevances=relevances)
        strengths = {c.chunk_id: c.strength for c in candidates}
        selected = select(ranked, min_score=query.min_score, max_passages=query.max_passages,
                          max_per_document=query.max_per_document, budget_tokens=query.budget_tokens,
                          strengths=strengths, min_strength=self.policy.min_strength,
                          min_relevance=max(self.policy.min_relevance, query.min_relevance),
                          min_relevance_more=max(self.policy.min_relevance_more, query.min_relevance))
        await self.faults.search("after", query)
        return selected
