"""Evidence about a search's candidates for the relevance model (`knowledge.relevance`).

The arms each rank their own top candidates; the relevance model judges the union of them on the
same footing, so every candidate's evidence is gathered again whichever arm found it:

- **lexical** — one statement: the query's lexemes and their BM25 idf in the tenant (document
  frequencies from the postings, N and the mean length from the sharded counters, exactly as the
  lexical arm computes them), and for each candidate chunk, from its index row's tsvector, every
  query lexeme it holds with its positions and whether it occurs in the heading path (weight A)
  or only in the body (weight B). BM25, the idf-weighted coverage of the query, coverage by the
  heading path and the proximity of the matches are computed from that (`LexicalEvidence`);
- **semantic** — the best window's cosine to the query for every candidate, from the stored
  vectors (`knowledge.semantic.arm.SemanticArm.cosines`), not only for the semantic arm's own top.

The candidates were admitted by their arm's SQL (tenant, visibility, sensitivity, version); this
statement only reads the index rows of those chunk ids, within the tenant.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowledge.ingest import TS_CONFIG
from knowledge.relevance import LexicalEvidence, Match
from knowledge.store.db import Database

# $1 tenant, $2 query text, $3 candidate chunk ids. Rows with a NULL chunk id carry a query
# lexeme's idf (every lexeme, matched or not) and the tenant's mean chunk length.
_SQL = f"""
WITH q AS (SELECT DISTINCT u.lexeme AS term FROM unnest(to_tsvector('{TS_CONFIG}', $2)) AS u),
stats AS (
    SELECT greatest(coalesce(sum(chunks), 0), 1)::float8 AS n, greatest(coalesce(sum(total_dl), 0), 1)::float8 AS len
    FROM knowledge_tenant_stats WHERE tenant_id = $1
),
terms AS (
    SELECT q.term, ln(1 + (greatest(s.n, f.df) - f.df + 0.5) / (f.df + 0.5)) AS idf, greatest(s.len / s.n, 1) AS avgdl
    FROM q CROSS JOIN stats s
    CROSS JOIN LATERAL (SELECT count(*)::float8 AS df FROM knowledge_postings p
                        WHERE p.tenant_id = $1 AND p.term = q.term) AS f
)
SELECT NULL::text AS chunk_id, t.term, t.idf, t.avgdl AS dl, NULL::int[] AS positions, NULL::text[] AS weights
FROM terms t
UNION ALL
SELECT ci.chunk_id, u.lexeme, NULL, ci.dl::float8, u.positions::int[], u.weights::text[]
FROM knowledge_chunk_index ci CROSS JOIN LATERAL unnest(ci.tsv) AS u
WHERE ci.tenant_id = $1 AND ci.chunk_id = ANY($3::text[]) AND u.lexeme IN (SELECT term FROM q)
"""


async def lexical_evidence(db: Database, tenant_id: str, text: str, chunk_ids: Sequence[str]) -> LexicalEvidence:
    """The lexical evidence for ``chunk_ids`` (see the module docstring), in one statement."""
    rows = await db.fetch(_SQL, tenant_id, text, list(chunk_ids))
    idf: dict[str, float] = {}
    avgdl = 1.0
    matches: dict[str, list[Match]] = {}
    lengths: dict[str, int] = {}
    for r in rows:
        if r["chunk_id"] is None:
            idf[r["term"]] = float(r["idf"])
            avgdl = float(r["dl"])
        else:
            lengths[r["chunk_id"]] = int(r["dl"])
            matches.setdefault(r["chunk_id"], []).append(
                Match(r["term"], tuple(r["positions"] or ()), "A" in (r["weights"] or ())))
    return LexicalEvidence(idf=idf, avgdl=avgdl, lengths=lengths, matches=matches)
