-- 0016: impact-ordered postings and per-term document frequencies (issue 36).
--
-- Each posting carries its impact: its BM25 term-frequency part, computed with the default k1 = 1.2,
-- b = 0.75 and a fixed reference chunk length of 128 (not the tenant's current mean: a stored impact
-- never has to be rewritten as documents arrive and leave), scaled by 1000 and floored to an integer.
-- The primary key orders a term's postings by impact, so the lexical arm reads each query term's
-- strongest postings first and stops (knowledge.store.lexical); the chosen chunks are then scored with
-- exact BM25 from their own index rows, so the impact only decides which postings are read first.
-- The impact is a function of (tf, dl), so a posting is still found by (tenant, term, chunk) at
-- deletion: the deletion recomputes it (knowledge.store.deletion).
--
-- knowledge_term_stats holds each term's document frequency in the tenant (the number of its
-- postings), as sharded counters like knowledge_tenant_stats: concurrent ingests add to their own
-- backend's shard row, so idf no longer counts a common term's postings at query time.
ALTER TABLE knowledge_postings ADD COLUMN impact integer;
UPDATE knowledge_postings
SET impact = floor(1000.0 * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / 128.0)))::int;
ALTER TABLE knowledge_postings ALTER COLUMN impact SET NOT NULL;
ALTER TABLE knowledge_postings DROP CONSTRAINT knowledge_postings_pkey;
ALTER TABLE knowledge_postings ADD PRIMARY KEY (tenant_id, term, impact, chunk_id) INCLUDE (tf, dl);

CREATE TABLE knowledge_term_stats (
    tenant_id text     NOT NULL,
    term      text     NOT NULL,
    shard     smallint NOT NULL,
    df        bigint   NOT NULL,
    PRIMARY KEY (tenant_id, term, shard)
);
INSERT INTO knowledge_term_stats (tenant_id, term, shard, df)
SELECT tenant_id, term, 0, count(*) FROM knowledge_postings GROUP BY tenant_id, term;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM create_distributed_table('knowledge_term_stats', 'tenant_id', colocate_with => 'artifacts');
    END IF;
END
$$;
