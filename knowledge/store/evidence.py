"""Evidence about a search's candidates for the relevance model (`knowledge.core.relevance`).

The arms each rank their own top candidates; the relevance model judges the union of them on the
same footing, so every candidate's evidence is gathered again whichever arm found it:

- **lexical** — one statement: the query's lexemes and their BM25 idf in the tenant (document
  frequencies, N and the mean length from the sharded counters, exactly as the lexical arm computes
  them), and for each candidate chunk, from its index row's tsvector, every
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
from dataclasses import replace

from knowledge.core.relevance import LexicalEvidence, Match
from knowledge.store.db import Database, Record
from knowledge.store.documents import TS_CONFIG

# The SQL both this module and the lexical arm (`knowledge.search`) compute the query's lexemes and
# their BM25 idf with, so the two agree to the last bit. $1 tenant, $2 query text.
QUERY_LEXEMES = f"q AS (SELECT DISTINCT u.lexeme AS term FROM unnest(to_tsvector('{TS_CONFIG}', $2)) AS u)"
TENANT_STATS = """stats AS (
    SELECT greatest(coalesce(sum(chunks), 0), 1)::float8 AS n, greatest(coalesce(sum(total_dl), 0), 1)::float8 AS len
    FROM knowledge_tenant_stats WHERE tenant_id = $1
)"""

def document_frequency(term: str) -> str:
    """A lexeme's document frequency in tenant $1 (``term``: its SQL expression): its postings, as the
    sharded counters of migration 0016 count them."""
    return f"""SELECT coalesce(sum(ts.df), 0)::float8 AS df FROM knowledge_term_stats ts
                        WHERE ts.tenant_id = $1 AND ts.term = {term}"""


def idf_sql(df: str) -> str:
    """BM25's idf of a lexeme held by ``df`` chunks of the tenant (``s`` is `TENANT_STATS`)."""
    return f"ln(1 + (greatest(s.n, {df}) - {df} + 0.5) / ({df} + 0.5))"


# Every candidate's matches: from its index row's tsvector, each query lexeme it holds with its
# positions and weights. $3 candidate chunk ids.
_MATCHES = """
SELECT ci.chunk_id, u.lexeme AS term, NULL::float8 AS idf, ci.dl::float8 AS dl, u.positions::int[] AS positions,
       u.weights::text[] AS weights
FROM knowledge_chunk_index ci CROSS JOIN LATERAL unnest(ci.tsv) AS u
WHERE ci.tenant_id = $1 AND ci.chunk_id = ANY($3::text[])
  AND u.lexeme = ANY ((SELECT array_agg(term) FROM q)::text[])  -- (IN would join: one unnest per lexeme)
"""

# The matches, and rows with a NULL chunk id carrying a query lexeme's idf (every lexeme, matched
# or not) and the tenant's mean chunk length.
_SQL = f"""
WITH {QUERY_LEXEMES},
{TENANT_STATS},
terms AS (
    SELECT q.term, {idf_sql("f.df")} AS idf, greatest(s.len / s.n, 1) AS avgdl
    FROM q CROSS JOIN stats s
    CROSS JOIN LATERAL ({document_frequency("q.term")}) AS f
)
SELECT NULL::text AS chunk_id, t.term, t.idf, t.avgdl AS dl, NULL::int[] AS positions, NULL::text[] AS weights
FROM terms t
UNION ALL{_MATCHES}"""

# The matches alone, when the lexical arm has already counted the postings (`known` below).
_MATCHES_SQL = f"WITH {QUERY_LEXEMES}{_MATCHES}"


async def lexical_evidence(db: Database, tenant_id: str, text: str, chunk_ids: Sequence[str],
                           known: LexicalEvidence | None = None) -> LexicalEvidence:
    """The lexical evidence for ``chunk_ids`` (see the module docstring), in one statement.
    ``known``: the query's idf and the mean length as the lexical arm computed them for this very
    query, with the matches of the chunks it found — then the statement reads only the other
    candidates' matches (none at all when the lexical arm found every one)."""
    if known is not None:
        missing = [c for c in chunk_ids if c not in known.lengths]
        if not missing:
            return known
        rows = await db.fetch(_MATCHES_SQL, tenant_id, text, missing)
        return _matches(rows, known)
    rows = await db.fetch(_SQL, tenant_id, text, list(chunk_ids))
    terms = [r for r in rows if r["chunk_id"] is None]
    known = LexicalEvidence(idf={r["term"]: float(r["idf"]) for r in terms},
                            avgdl=float(terms[0]["dl"]) if terms else 1.0)
    return _matches([r for r in rows if r["chunk_id"] is not None], known)


def _matches(rows: Sequence[Record], known: LexicalEvidence) -> LexicalEvidence:
    matches: dict[str, list[Match]] = {c: list(m) for c, m in known.matches.items()}
    lengths: dict[str, int] = dict(known.lengths)
    for r in rows:
        lengths[r["chunk_id"]] = int(r["dl"])
        matches.setdefault(r["chunk_id"], []).append(
            Match(r["term"], tuple(r["positions"] or ()), "A" in (r["weights"] or ())))
    return replace(known, lengths=lengths, matches=matches)


# How distinctive each word is in the tenant: the largest BM25 idf among its lexemes (a word such as
# ``kubectl-apply`` has several), over the idf of a lexeme no chunk holds; 0 for a word with no
# lexeme (a text-search stop word). $1 tenant, $2 the words.
_TERM_WEIGHTS = f"""
WITH {TENANT_STATS}
SELECT w.word, coalesce((
    SELECT max({idf_sql("f.df")}) FROM unnest(to_tsvector('{TS_CONFIG}', w.word)) AS u
    CROSS JOIN LATERAL ({document_frequency("u.lexeme")}) AS f), 0) / {idf_sql("0")} AS weight
FROM (SELECT DISTINCT unnest($2::text[]) AS word) AS w CROSS JOIN stats s
"""


async def term_weights(db: Database, tenant_id: str, words: Sequence[str]) -> dict[str, float]:
    """Each word's distinctiveness in the tenant, in [0, 1] (see `_TERM_WEIGHTS`): what the claim-
    support check (`knowledge.core.support.features`) weighs a claim's words by. One statement."""
    if not words:
        return {}
    rows = await db.fetch(_TERM_WEIGHTS, tenant_id, list(words))
    return {r["word"]: float(r["weight"]) for r in rows}
