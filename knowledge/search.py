"""Retrieval: query -> arms -> fusion -> rank -> cap -> floor -> budget (ADR-0033, "Retrieval").

The lexical arm is BM25 computed inside PostgreSQL from the postings table (migration 0003):

1. One query turns the question into lexemes (``to_tsvector``, the index's own configuration)
   and counts each lexeme's document frequency in the tenant's postings, with the tenant's
   chunk count and total length (sharded counters).
2. One query scores every chunk of the tenant that holds a query lexeme — an index-only range
   scan per lexeme over ``(tenant_id, term)``, carrying tf and the chunk's length — then walks the
   scores in descending order through the isolation predicates (tenant, visibility resolved
   against the principal and the current scope, the sensitivity ceiling, the live version or the
   version valid at ``as_of``) until ``limit`` admissible chunks are found. The predicates are in
   the SQL that fetches candidates; nothing is filtered after ranking.

Arms return ranked candidates into reciprocal-rank fusion (`knowledge.ranking`), so a semantic arm
plugs in beside the lexical one by configuration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

from knowledge.ingest import TS_CONFIG
from knowledge.models import Authority, KnowledgeChunk, KnowledgeQuery, RetrievedPassage
from knowledge.ranking import KNOWLEDGE_V1, Candidate, RankingPolicy, rank, select
from knowledge.store.db import Database, Record

#: BM25 parameters (Lucene's idf, as bm25s uses).
BM25_K1 = 1.2
BM25_B = 0.75
#: How many candidates an arm hands to fusion.
ARM_LIMIT = 50

_TERMS_SQL = f"""
WITH q AS (SELECT DISTINCT u.lexeme AS term FROM unnest(to_tsvector('{TS_CONFIG}', $2)) AS u)
SELECT q.term,
       (SELECT count(*) FROM knowledge_postings p WHERE p.tenant_id = $1 AND p.term = q.term) AS df
FROM q
"""
_STATS_SQL = """
SELECT coalesce(sum(chunks), 0) AS n, coalesce(sum(total_dl), 0) AS total_dl
FROM knowledge_tenant_stats WHERE tenant_id = $1
"""

# Who may read what: principal -> only the ingesting principal; project -> the current scope's
# documents; tenant -> everyone in the tenant. $1 tenant, $5 principal, $6 current scope,
# $7 admitted sensitivities, $8 as_of (NULL: live).
_ADMIT = """
    d.tenant_id = $1
    AND (d.visibility = 'tenant'
         OR (d.visibility = 'principal' AND d.ingested_by_principal_id = $5)
         OR (d.visibility = 'project' AND d.project_scope = $6))
    AND d.sensitivity = ANY($7::text[])
    AND CASE WHEN $8::timestamptz IS NULL THEN d.valid_to IS NULL
             ELSE d.valid_from <= $8 AND (d.valid_to IS NULL OR d.valid_to > $8) END
"""

# $2 terms, $3 idf per term, $4 avgdl, $9 limit, $10 k1, $11 b.
_LEXICAL_SQL = f"""
WITH terms AS (SELECT * FROM unnest($2::text[], $3::float8[]) AS t(term, idf)),
params AS (SELECT $10::float8 AS k1, $11::float8 AS b, $4::float8 AS avgdl),
scored AS MATERIALIZED (
    SELECT p.chunk_id,
           sum(t.idf * p.tf * (k1 + 1) / (p.tf + k1 * (1 - b + b * p.dl / avgdl))) AS bm25
    FROM knowledge_postings p JOIN terms t ON t.term = p.term CROSS JOIN params
    WHERE p.tenant_id = $1 AND p.term = ANY($2::text[])
    GROUP BY p.chunk_id
)
SELECT s.chunk_id, s.bm25, c.document_id, c.version, c.heading_path, c.text, c.tokens,
       c.contains_instruction_like_text, c.content_sha256, d.title, d.doc_date, d.authority, d.project_scope
FROM (SELECT * FROM scored ORDER BY bm25 DESC, chunk_id) AS s
CROSS JOIN LATERAL (
    SELECT * FROM knowledge_chunks c WHERE c.tenant_id = $1 AND c.chunk_id = s.chunk_id) AS c
CROSS JOIN LATERAL (
    SELECT * FROM knowledge_documents d
    WHERE d.tenant_id = $1 AND d.document_id = c.document_id AND d.version = c.version
      AND d.chunker_version = c.chunker_version AND {_ADMIT}) AS d
ORDER BY s.bm25 DESC, s.chunk_id  -- the scan order above is a plan, not a promise
LIMIT $9
"""


@dataclass(frozen=True)
class ArmResult:
    """One arm's ranked, admitted candidates."""

    arm: str
    candidates: list[Candidate]


class Arm(Protocol):
    @property
    def name(self) -> str: ...

    async def search(self, db: Database, query: KnowledgeQuery, limit: int) -> list[Candidate]: ...


def bm25_idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class LexicalArm:
    """BM25 over the postings table, with the isolation predicates in the candidate query."""

    name: str = "lexical"
    k1: float = BM25_K1
    b: float = BM25_B

    async def search(self, db: Database, query: KnowledgeQuery, limit: int) -> list[Candidate]:
        async with db.connection() as conn:
            term_rows = await conn.fetch(_TERMS_SQL, query.tenant_id, query.text)
            terms = [(r["term"], int(r["df"])) for r in term_rows if r["df"]]
            if not terms:
                return []
            stats = await conn.fetchrow(_STATS_SQL, query.tenant_id)
            assert stats is not None
            n = max(int(stats["n"]), max(df for _, df in terms))
            avgdl = max(float(stats["total_dl"]) / max(n, 1), 1.0)
            idf = [bm25_idf(n, df) for _, df in terms]
            best_possible = sum(i * (self.k1 + 1) for i in idf)
            rows = await conn.fetch(
                _LEXICAL_SQL, query.tenant_id, [t for t, _ in terms], idf, avgdl, query.principal_id,
                query.current_scope, query.sensitivity_ceiling.admitted(), query.as_of, limit, self.k1, self.b,
            )
        return [_candidate(r, rank_no, self.name, float(r["bm25"]) / best_possible)
                for rank_no, r in enumerate(rows, start=1)]


def _candidate(row: Record, rank_no: int, arm: str, strength: float) -> Candidate:
    return Candidate(
        chunk_id=row["chunk_id"], document_id=row["document_id"], version=row["version"], title=row["title"],
        heading_path=tuple(row["heading_path"]), text=row["text"], tokens=row["tokens"], doc_date=row["doc_date"],
        authority=Authority(row["authority"]), project_scope=row["project_scope"],
        instruction_like=row["contains_instruction_like_text"], content_sha256=row["content_sha256"],
        arm_ranks={arm: rank_no}, strength=min(max(strength, 0.0), 1.0),
    )


def merge_arms(results: Sequence[ArmResult]) -> list[Candidate]:
    """One candidate per chunk, carrying its rank in every arm that returned it and its strongest
    evidence; fusion itself (RRF) is the ranker's."""
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
    """The retrieval pipeline over a set of arms (today: lexical)."""

    db: Database
    arms: Sequence[Arm]
    policy: RankingPolicy = KNOWLEDGE_V1
    arm_limit: int = ARM_LIMIT

    async def candidates(self, query: KnowledgeQuery) -> list[Candidate]:
        results = [ArmResult(arm.name, await arm.search(self.db, query, self.arm_limit)) for arm in self.arms]
        return merge_arms(results)

    async def search(self, query: KnowledgeQuery) -> list[RetrievedPassage]:
        """Ranked, capped, floored and budgeted passages; never truncated."""
        candidates = await self.candidates(query)
        today = (query.as_of or datetime.now(UTC)).date()
        ranked = rank(candidates, current_scope=query.current_scope, today=today, n_arms=len(self.arms),
                      policy=self.policy)
        strengths = {c.chunk_id: c.strength for c in candidates}
        return select(ranked, min_score=query.min_score, max_passages=query.max_passages,
                      max_per_document=query.max_per_document, budget_tokens=query.budget_tokens,
                      strengths=strengths, min_strength=self.policy.min_strength)


_CHUNK_SQL = """
SELECT c.chunk_id, c.document_id, c.version, c.ordinal, c.heading_path, c.text, c.tokens,
       c.contains_instruction_like_text, c.content_sha256
FROM knowledge_chunks c WHERE c.tenant_id = $1 AND c.chunk_id = $2
"""


async def get_chunk(db: Database, tenant_id: str, chunk_id: str) -> KnowledgeChunk | None:
    """Resolve a citation within a tenant: the chunk, whichever version or chunk set it is in."""
    row = await db.fetchrow(_CHUNK_SQL, tenant_id, chunk_id)
    if row is None:
        return None
    return KnowledgeChunk(
        chunk_id=row["chunk_id"], document_id=row["document_id"], version=row["version"], ordinal=row["ordinal"],
        heading_path=list(row["heading_path"]), text=row["text"], tokens=row["tokens"],
        contains_instruction_like_text=row["contains_instruction_like_text"], content_sha256=row["content_sha256"],
    )
