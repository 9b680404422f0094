-- 0003: the lexical arm's BM25 postings, and per-tenant statistics.
--
-- Scoring reads postings (term -> chunk, term frequency, chunk length) through a btree keyed by
-- tenant first, index-only, so a query touches only its own tenant's postings and no heap;
-- document frequencies are counted from the postings at query time (always exact under
-- concurrent ingests and deletes, no counter rows to contend on). A chunk never changes, so its
-- length can be copied into each of its postings. The GIN index over tsvectors is dropped: no query uses it any more, and its
-- maintenance was the largest single cost of an ingest.
DROP INDEX knowledge_chunk_index_tsv;

ALTER TABLE knowledge_chunk_index
    ADD COLUMN chunker_version text,
    ADD COLUMN dl integer;   -- the chunk's length in indexed lexeme occurrences (BM25's |d|)
UPDATE knowledge_chunk_index ci
SET chunker_version = c.chunker_version,
    dl = (SELECT coalesce(sum(array_length(u.positions, 1)), 0) FROM unnest(ci.tsv) AS u)
FROM knowledge_chunks c
WHERE c.tenant_id = ci.tenant_id AND c.chunk_id = ci.chunk_id;
ALTER TABLE knowledge_chunk_index
    ALTER COLUMN chunker_version SET NOT NULL,
    ALTER COLUMN dl SET NOT NULL;

-- No foreign key to the index rows: that would need a second index on (tenant_id, chunk_id)
-- maintained on every ingest; deletion removes postings by (tenant, term, chunk) from the
-- chunk's own tsvector instead.
CREATE TABLE knowledge_postings (
    tenant_id text    NOT NULL,
    term      text    NOT NULL,
    chunk_id  text    NOT NULL,
    tf        integer NOT NULL CHECK (tf > 0),
    dl        integer NOT NULL,
    PRIMARY KEY (tenant_id, term, chunk_id) INCLUDE (tf, dl)
);
INSERT INTO knowledge_postings (tenant_id, term, chunk_id, tf, dl)
SELECT ci.tenant_id, u.lexeme, ci.chunk_id, coalesce(array_length(u.positions, 1), 1), ci.dl
FROM knowledge_chunk_index ci, unnest(ci.tsv) AS u;

-- Chunk count and total length per tenant, as sharded counters: concurrent ingests add to
-- different shard rows (by backend), so they never wait on each other.
CREATE TABLE knowledge_tenant_stats (
    tenant_id text     NOT NULL,
    shard     smallint NOT NULL,
    chunks    bigint   NOT NULL DEFAULT 0,
    total_dl  bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, shard)
);
INSERT INTO knowledge_tenant_stats (tenant_id, shard, chunks, total_dl)
SELECT tenant_id, 0, count(*), coalesce(sum(dl), 0) FROM knowledge_chunk_index GROUP BY tenant_id;
