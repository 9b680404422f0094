-- 0002: ingestion outcomes, the spec's tracked metric "refusals by cause", as counters.
-- A counter row holds no content: a refused ingest still leaves no document, chunk, index row,
-- event or artifact, and this is how an operator sees that it happened.
CREATE TABLE knowledge_ingest_outcomes (
    tenant_id text   NOT NULL,
    day       date   NOT NULL,
    outcome   text   NOT NULL CHECK (outcome IN ('accepted', 'refused', 'failed')),
    reason    text   NOT NULL DEFAULT '',
    count     bigint NOT NULL DEFAULT 0 CHECK (count >= 0),
    PRIMARY KEY (tenant_id, day, outcome, reason)
);
