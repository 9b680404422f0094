"""The retrieval statements: who may read what (`ADMIT`), which chunk set is live (`LIVE_SET`), the
lexical arm's one statement (`LEXICAL_SQL`, impact-ordered; `EXHAUSTIVE_LEXICAL_SQL`, its reference),
and an arm's row as a ranking candidate. Every arm's candidate query carries the same two predicates
(`knowledge.retrieval.search`, `knowledge.semantic.arm`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from knowledge.config import LEXICAL_DEPTH
from knowledge.core.ranking import Candidate
from knowledge.core.relevance import LexicalEvidence, Match
from knowledge.models import KnowledgeQuery
from knowledge.store.db import Database, Record
from knowledge.store.evidence import QUERY_LEXEMES, TENANT_STATS, document_frequency, idf_sql
from knowledge.store.vectors import WINDOW_COUNT, cosines_sql, model_literal, scan_options_sql
from knowledge.store.visibility import visible
from knowledge.vocabulary import Authority

# Who may read what (every arm's candidate query carries it; ``d`` is the document version):
# principal -> only the ingesting principal; project -> the current scope's
# documents; tenant -> everyone in the tenant. $1 tenant, $5 principal, $6 current scope,
# $7 admitted sensitivities, $8 as_of (NULL: live).
ADMIT = f"""
    d.tenant_id = $1
    AND {visible("$5", "$6", "$7")}
    AND CASE WHEN $8::timestamptz IS NULL THEN d.valid_to IS NULL
             ELSE d.valid_from <= $8 AND (d.valid_to IS NULL OR d.valid_to > $8) END
"""

# The chunk set live then: the current one, or the one valid at as_of (re-chunking ends a set;
# re-chunking back to an earlier chunker version makes that set live again: `earlier_periods`).
# ``c`` is the chunk; $1 tenant, $8 as_of.
LIVE_SET = """
    EXISTS (
        SELECT 1 FROM knowledge_chunk_sets cs
        WHERE cs.tenant_id = $1 AND cs.document_id = c.document_id AND cs.version = c.version
          AND cs.chunker_version = c.chunker_version
          AND CASE WHEN $8::timestamptz IS NULL THEN cs.superseded_at IS NULL
                   ELSE (cs.created_at <= $8 AND (cs.superseded_at IS NULL OR cs.superseded_at > $8))
                        OR $8 <@ ANY (cs.earlier_periods) END)
"""

# A scored chunk ``s`` (by ``s.chunk_id``) with its chunk row ``c`` and document version ``d``, when
# admitted (`ADMIT`, `LIVE_SET`): walked in score order, each candidate costs two index probes.
_ADMITTED = f"""CROSS JOIN LATERAL (
    SELECT * FROM knowledge_chunks c WHERE c.tenant_id = $1 AND c.chunk_id = s.chunk_id) AS c
CROSS JOIN LATERAL (
    SELECT * FROM knowledge_documents d
    WHERE d.tenant_id = $1 AND d.document_id = c.document_id AND d.version = c.version
      AND {ADMIT} AND {LIVE_SET}
    ) AS d"""

# The exhaustive arm (`EXHAUSTIVE_LEXICAL_SQL`): every posting of each query lexeme in this tenant,
# the score of every chunk holding one, then, in descending score order, the isolation predicates
# until $9 chunks are admitted. Its cost grows with the query terms' document frequencies; kept as
# the reference the impact-ordered arm is measured and tested against. $2 query text, $3 k1, $4 b,
# $9 limit.
EXHAUSTIVE_LEXICAL_SQL = f"""
WITH {QUERY_LEXEMES},
hits AS MATERIALIZED (
    SELECT p.term, p.chunk_id, p.tf, p.dl FROM knowledge_postings p
    WHERE p.tenant_id = $1 AND p.term IN (SELECT term FROM q)
),
{TENANT_STATS},
terms AS (
    SELECT h.term, {idf_sql("count(*)")} AS idf FROM hits h CROSS JOIN stats s GROUP BY h.term, s.n
),
params AS (
    SELECT $3::float8 AS k1, $4::float8 AS b, greatest(s.len / s.n, 1) AS avgdl,
           (SELECT sum(idf) FROM terms) * ($3::float8 + 1) AS best
    FROM stats s
),
query_idf AS (
    SELECT q.term, coalesce(t.idf, {idf_sql("0")}) AS idf
    FROM q LEFT JOIN terms t USING (term) CROSS JOIN stats s
),
scored AS MATERIALIZED (
    SELECT h.chunk_id, sum(t.idf * h.tf * (k1 + 1) / (h.tf + k1 * (1 - b + b * h.dl / avgdl))) AS bm25
    FROM hits h JOIN terms t USING (term) CROSS JOIN params
    GROUP BY h.chunk_id
)
SELECT s.chunk_id, s.bm25, s.bm25 / (SELECT best FROM params) AS strength, c.document_id, c.version,
       c.heading_path, c.text, c.tokens, c.contains_instruction_like_text, c.content_sha256,
       d.title, d.doc_date, d.authority, d.project_scope,
       (SELECT array_agg(term ORDER BY term) FROM query_idf) AS query_terms,
       (SELECT array_agg(idf ORDER BY term) FROM query_idf) AS query_idf,
       (SELECT avgdl FROM params) AS avgdl
FROM (SELECT * FROM scored ORDER BY bm25 DESC, chunk_id) AS s
{_ADMITTED}
ORDER BY s.bm25 DESC, s.chunk_id  -- the scan order above is a plan, not a promise
LIMIT $9
"""

# The lexical arm's one statement, impact-ordered (issue 36): its cost follows the query's terms and
# the depth read, not the tenant's size.
#
# 1. The query's lexemes, each with its document frequency from the sharded counters
#    (`knowledge_term_stats`) and BM25 idf: no posting is counted.
# 2. Each lexeme's $10 strongest postings, by stored impact (`knowledge.store.impact`), through the
#    primary key read backwards, index-only; a lexeme held by at most $10 chunks is read whole.
# 3. Each chunk found: its BM25 over the postings read (exact where every lexeme was read whole,
#    otherwise a lower bound: a posting beyond the depth is missing), in that order the isolation
#    predicates until $11 chunks are admitted (the pool; $9 where every lexeme was read whole).
# 4. The pool's index rows, once: each query lexeme a chunk holds, with its positions and whether it is
#    in the heading (weight A) — exact BM25 with the tenant's current statistics, and the relevance
#    model's evidence in the same pass (`knowledge.store.evidence.lexical_evidence` need not read
#    these chunks again).
# 5. The pool in exact BM25 order, the first $9.
#
# Where every query lexeme is read whole, the answer is the exhaustive arm's, chunk for chunk. Every
# row also carries every query lexeme's idf, the mean length, and ``whole`` (every lexeme read whole);
# fewer than $9 admitted where a lexeme was not read whole — the strongest postings were another
# principal's, another project's, or history's — and `lexical_hits` reads deeper. $2 query text, $3 k1,
# $4 b, $9 limit, $10 depth (postings read per lexeme), $11 pool.
LEXICAL_SQL = f"""
WITH {QUERY_LEXEMES},
{TENANT_STATS},
terms AS MATERIALIZED (
    SELECT q.term, f.df, {idf_sql("f.df")} AS idf
    FROM q CROSS JOIN stats s
    CROSS JOIN LATERAL ({document_frequency("q.term")}) AS f
),
params AS (
    SELECT $3::float8 AS k1, $4::float8 AS b, greatest(s.len / s.n, 1) AS avgdl,
           (SELECT sum(idf) FROM terms WHERE df > 0) * ($3::float8 + 1) AS best
    FROM stats s
),
partial AS MATERIALIZED (
    SELECT p.chunk_id, sum(p.w) AS score
    FROM terms t CROSS JOIN params CROSS JOIN LATERAL (
        SELECT p.chunk_id, t.idf * p.tf * (k1 + 1) / (p.tf + k1 * (1 - b + b * p.dl / avgdl)) AS w
        FROM knowledge_postings p
        WHERE p.tenant_id = $1 AND p.term = t.term
        ORDER BY p.impact DESC, p.chunk_id DESC LIMIT $10) AS p
    WHERE t.df > 0
    GROUP BY p.chunk_id
),
pool AS MATERIALIZED (
    SELECT s.chunk_id, c.document_id, c.version, c.heading_path, c.text, c.tokens,
           c.contains_instruction_like_text, c.content_sha256, d.title, d.doc_date, d.authority, d.project_scope
    FROM (SELECT * FROM partial ORDER BY score DESC, chunk_id) AS s
    {_ADMITTED}
    ORDER BY s.score DESC, s.chunk_id  -- the nested loops keep the scan's order: no sort, an early stop
    -- every lexeme read whole: the scores are exact already, and the pool need hold no more than $9
    LIMIT (SELECT CASE WHEN bool_and(df <= $10::int) THEN $9::int ELSE $11::int END FROM terms)
),
query_terms AS (SELECT array_agg(term)::text[] AS terms FROM q),
matched AS MATERIALIZED (
    SELECT ci.chunk_id, ci.dl, u.lexeme AS term, coalesce(array_length(u.positions, 1), 1) AS tf,
           array_to_string(u.positions, ',') AS positions, 'A' = ANY (u.weights) AS heading
    FROM pool JOIN knowledge_chunk_index ci ON ci.tenant_id = $1 AND ci.chunk_id = pool.chunk_id
    -- the query's lexemes alone: the tsvector less every lexeme not among them
    CROSS JOIN LATERAL unnest(ts_delete(
        ci.tsv, tsvector_to_array(ts_delete(ci.tsv, (SELECT terms FROM query_terms))))) AS u
),
exact AS (
    SELECT m.chunk_id, min(m.dl) AS dl,
           sum(t.idf * m.tf * (k1 + 1) / (m.tf + k1 * (1 - b + b * m.dl / avgdl))) AS bm25,
           array_agg(m.term ORDER BY m.term) AS match_terms,
           array_agg(m.positions ORDER BY m.term) AS match_positions,
           array_agg(m.heading ORDER BY m.term) AS match_heading
    FROM matched m JOIN terms t USING (term) CROSS JOIN params
    GROUP BY m.chunk_id
)
SELECT p.*, e.bm25, e.bm25 / (SELECT best FROM params) AS strength, e.dl,
       e.match_terms, e.match_positions, e.match_heading,
       (SELECT array_agg(term ORDER BY term) FROM terms) AS query_terms,
       (SELECT array_agg(idf ORDER BY term) FROM terms) AS query_idf,
       (SELECT avgdl FROM params) AS avgdl, w.whole
-- one row with a NULL chunk_id when nothing was admitted: ``whole`` still says whether to read deeper
FROM (SELECT coalesce(bool_and(df <= $10::int), true) AS whole FROM terms) AS w
LEFT JOIN (pool p JOIN exact e USING (chunk_id)) ON true
ORDER BY e.bm25 DESC NULLS LAST, p.chunk_id
LIMIT $9
"""

#: The pool of admitted chunks the impact-ordered arm rescores exactly: the candidates asked for and
#: this many more (where a lexeme was not read whole; chosen with the depth, `scripts/fit_lexical_depth.py`).
POOL_MARGIN = 10
#: Where the postings read admitted fewer chunks than asked for and a lexeme was not read whole, the
#: statement runs again reading this many times as deep (until enough are admitted or all is read).
DEEPEN = 8


@dataclass(frozen=True)
class ArmHit:
    """A chunk an arm's statement found, in its rank order, and the statement's score for it (the
    lexical arm's BM25 strength, the semantic arm's best window's cosine)."""

    candidate: Candidate  # ranked 1 by this arm, with strength 0: `ranked` sets both
    score: float

    def ranked(self, rank_no: int, strength: float) -> Candidate:
        """The candidate at ``rank_no`` of its arm, with ``strength`` (clamped to [0, 1])."""
        arm = next(iter(self.candidate.arm_ranks))
        return replace(self.candidate, arm_ranks={arm: rank_no}, strength=min(max(strength, 0.0), 1.0))


def _hit(row: Record, arm: str, score: str) -> ArmHit:
    return ArmHit(Candidate(
        chunk_id=row["chunk_id"], document_id=row["document_id"], version=row["version"], title=row["title"],
        heading_path=tuple(row["heading_path"]), text=row["text"], tokens=row["tokens"], doc_date=row["doc_date"],
        authority=Authority(row["authority"]), project_scope=row["project_scope"],
        instruction_like=row["contains_instruction_like_text"], content_sha256=row["content_sha256"],
        arm_ranks={arm: 1}, strength=0.0,
    ), float(row[score]))


@dataclass(frozen=True)
class LexicalHits:
    """The lexical arm's hits, and the query's lexical evidence as its statement read it: each query
    term's idf and the tenant's mean chunk length, and (the impact-ordered statement) every hit's
    length and matches; None when nothing matched."""

    hits: list[ArmHit]
    evidence: LexicalEvidence | None


def nearest_sql(version: str, dim: int, exact: bool) -> str:
    """The nearest windows of model ``version`` (vectors of ``dim``) under `ADMIT` and `LIVE_SET`,
    folded into chunks by their best window. ``exact``: order by an expression the index cannot
    serve, so the tenant's rows are read through the (tenant, model) btree and sorted exactly.
    $1 tenant, $2 query vector, $3 windows fetched, $4 chunks returned, $5 principal, $6 current
    scope, $7 admitted sensitivities, $8 as_of (NULL: live)."""
    distance = f"e.embedding::vector({dim}) <=> $2::vector({dim})"
    # An expression the index cannot serve: the exact pass, through the (tenant, model) btree.
    order = f"({distance}) + 0" if exact else distance
    return f"""
WITH nearest AS MATERIALIZED (
    SELECT e.chunk_id, {distance} AS distance
    FROM knowledge_embeddings e
    JOIN knowledge_chunks c ON c.tenant_id = e.tenant_id AND c.chunk_id = e.chunk_id
    JOIN knowledge_documents d ON d.tenant_id = c.tenant_id AND d.document_id = c.document_id AND d.version = c.version
    WHERE e.tenant_id = $1 AND e.model_version = {model_literal(version)}
      AND {ADMIT} AND {LIVE_SET}
    ORDER BY {order}
    LIMIT $3
), best AS (
    SELECT chunk_id, min(distance) AS distance FROM nearest GROUP BY chunk_id
    ORDER BY min(distance), chunk_id LIMIT $4
)
SELECT b.chunk_id, 1 - b.distance AS cosine, c.document_id, c.version, c.heading_path, c.text, c.tokens,
       c.contains_instruction_like_text, c.content_sha256, d.title, d.doc_date, d.authority, d.project_scope
FROM best b
JOIN knowledge_chunks c ON c.tenant_id = $1 AND c.chunk_id = b.chunk_id
JOIN knowledge_documents d ON d.tenant_id = $1 AND d.document_id = c.document_id AND d.version = c.version
ORDER BY b.distance, b.chunk_id
"""


async def lexical_hits(db: Database, *, query: KnowledgeQuery, k1: float, b: float, limit: int,
                       arm: str = "lexical", depth: int | None = LEXICAL_DEPTH,
                       pool_margin: int = POOL_MARGIN) -> LexicalHits:
    """The lexical arm's candidates for ``query``: BM25 with ``k1`` and ``b``, the query's visibility,
    ceiling and ``as_of`` applied, at most ``limit``. ``depth``: the postings read per query lexeme
    (`LEXICAL_SQL`), and ``pool_margin`` more chunks than ``limit`` rescored; None reads them all
    (`EXHAUSTIVE_LEXICAL_SQL`, which gathers no matches). Never fewer hits than the exhaustive arm's
    (up to ``limit``): where the postings read admit fewer than ``limit`` — a principal who sees a
    small part of the tenant, a term whose strongest postings are superseded versions' — it reads
    `DEEPEN` times as deep, until enough are admitted or every lexeme is read whole."""
    args = (query.tenant_id, query.text, k1, b, query.principal_id, query.current_scope,
            query.sensitivity_ceiling.admitted(), query.as_of, limit)
    if depth is None:
        rows = await db.fetch(EXHAUSTIVE_LEXICAL_SQL, *args)
    else:
        while True:
            read = await db.fetch(LEXICAL_SQL, *args, depth, limit + pool_margin)
            rows = [r for r in read if r["chunk_id"] is not None]
            if len(rows) >= limit or read[0]["whole"]:
                break
            depth *= DEEPEN
    if not rows:
        return LexicalHits([], None)
    first = rows[0]
    evidence = LexicalEvidence(idf=dict(zip(first["query_terms"], map(float, first["query_idf"]), strict=True)),
                               avgdl=float(first["avgdl"]))
    if depth is not None:
        evidence = replace(evidence, lengths={r["chunk_id"]: int(r["dl"]) for r in rows}, matches={
            r["chunk_id"]: [Match(term, tuple(map(int, positions.split(","))) if positions else (), heading)
                            for term, positions, heading in zip(r["match_terms"], r["match_positions"],
                                                                r["match_heading"], strict=True)]
            for r in rows})
    return LexicalHits([_hit(r, arm, "strength") for r in rows], evidence)


class VectorStatements:
    """The semantic arm's statements for one model ``version`` of vectors of ``dim`` (issue 33: the
    store owns them; the arm asks in named arguments and gets rows or cosines back)."""

    def __init__(self, version: str, dim: int, *, ef_search: int, max_scan_tuples: int) -> None:
        self.version = version
        self._ann = nearest_sql(version, dim, exact=False)
        self._exact = nearest_sql(version, dim, exact=True)
        self._cosines = cosines_sql(version, dim)
        self._scan_options = scan_options_sql(ef_search, max_scan_tuples)

    async def nearest(self, db: Database, *, query: KnowledgeQuery, vector: str, windows: int, limit: int,
                      exact_max_windows: int, arm: str = "semantic") -> list[ArmHit]:
        """The chunks of the nearest ``windows`` windows, at most ``limit``: an exact scan of the tenant's
        windows where it holds at most ``exact_max_windows`` of them, else the HNSW index."""
        args = (query.tenant_id, vector, windows, limit, query.principal_id, query.current_scope,
                query.sensitivity_ceiling.admitted(), query.as_of)
        async with db.transaction() as tx:
            held = await tx.fetchval(WINDOW_COUNT, query.tenant_id, self.version, exact_max_windows + 1)
            if held <= exact_max_windows:
                rows = await tx.fetch(self._exact, *args)
            else:
                await tx.execute(self._scan_options)
                rows = await tx.fetch(self._ann, *args)
        return [_hit(r, arm, "cosine") for r in rows]

    async def cosines(self, db: Database, *, tenant_id: str, vector: str, chunk_ids: Sequence[str]) -> dict[str, float]:
        """The best window's cosine to ``vector`` of each of ``chunk_ids`` that has vectors of this version."""
        rows = await db.fetch(self._cosines, tenant_id, vector, list(chunk_ids))
        return {r["chunk_id"]: float(r["cosine"]) for r in rows}
