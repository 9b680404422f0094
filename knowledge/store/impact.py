"""Impact-ordered postings (migration 0016): a posting's stored impact, and the per-term document
frequency counters, as SQL the writes and the lexical arm share.

A posting's impact is its BM25 term-frequency part with the default parameters and a fixed
reference chunk length (`REFERENCE_DL`), times `IMPACT_SCALE`, floored: a function of the posting's
own (tf, dl) only, so it never changes while the posting lives, and a deletion can recompute it to
find the posting by its key. It orders a term's postings for reading; it never scores one (the
lexical arm rescores the chunks it chose with the tenant's current statistics).
"""

from __future__ import annotations

import math

from knowledge.core.relevance import BM25_B, BM25_K1

#: The chunk length the stored impacts are computed with (the tenant's mean is not fixed).
REFERENCE_DL = 128.0
#: Impacts are stored as integers: the tf part (at most k1 + 1) times this, floored.
IMPACT_SCALE = 1000.0


def impact_sql(tf: str, dl: str) -> str:
    """A posting's stored impact from its ``tf`` and ``dl`` (SQL expressions); the same expression,
    written out, is migration 0016's."""
    return (f"floor({IMPACT_SCALE} * {tf} * {BM25_K1 + 1} / "
            f"({tf} + {BM25_K1} * ({1 - BM25_B} + {BM25_B} * {dl} / {REFERENCE_DL})))::int")


def impact(tf: int, dl: int) -> int:
    """`impact_sql` in Python (the tests compare the two)."""
    return math.floor(IMPACT_SCALE * tf * (BM25_K1 + 1) / (tf + BM25_K1 * ((1 - BM25_B) + BM25_B * dl / REFERENCE_DL)))


def term_stats_upsert(rows: str) -> str:
    """Add to each term's document frequency on this backend's shard, from ``rows`` (a SELECT of
    tenant, term, count), in term order: two statements adding to the same shard's rows lock them in
    one order, so they wait for each other but never deadlock."""
    return f"""
    INSERT INTO knowledge_term_stats (tenant_id, term, shard, df)
    SELECT tenant_id, term, pg_backend_pid() % 16, n FROM ({rows}) AS r(tenant_id, term, n) ORDER BY term
    ON CONFLICT (tenant_id, term, shard) DO UPDATE SET df = knowledge_term_stats.df + excluded.df"""
