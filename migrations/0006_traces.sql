-- 0006: the recall trace's knowledge side (ADR-0033, "The trace") and the budget-pressure counters.
--
-- One trace per turn carries the beliefs and the passages the turn rendered, and the SHA-256 of
-- the rendered <knowledge> block, so the listed passages can be shown to reproduce it. A trace
-- holds no passage text: a trace that cited a deleted passage keeps the chunk id and loses the text
-- with the chunk, and the trigger below also forgets the passage's title and heading path.
-- Retention is two-tier (knowledge/trace.py, TraceRetention): full for 30 days, then reduced to a
-- skeleton (query text, belief texts, titles and heading paths set to NULL, reduced_at set) until
-- 365 days, then deleted.
CREATE TABLE knowledge_traces (
    tenant_id      text        NOT NULL,
    trace_id       uuid        NOT NULL,
    principal_id   text        NOT NULL,
    session_id     text,
    turn_id        text,
    surface        text        NOT NULL,   -- the recall surface
    recall_ceiling text        NOT NULL CHECK (recall_ceiling IN ('public', 'internal', 'confidential',
                                                                  'restricted')),
    query_text     text,                   -- NULL once reduced
    query_as_of    timestamptz,
    rendered_at    timestamptz NOT NULL,   -- the block's as_of
    policy         text        NOT NULL,
    block_sha256   text        CHECK (block_sha256 ~ '^[0-9a-f]{64}$'),  -- NULL: no passage rendered
    beliefs        jsonb       NOT NULL DEFAULT '[]'::jsonb,  -- rendered beliefs, in order
    budget         jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    reduced_at     timestamptz,            -- set when the trace moved to the second retention tier
    PRIMARY KEY (tenant_id, trace_id)
);
CREATE INDEX knowledge_traces_session ON knowledge_traces (tenant_id, session_id, created_at);
CREATE INDEX knowledge_traces_created ON knowledge_traces (created_at);  -- the retention sweep

-- The rendered passages of a trace, in rendered order. No foreign key to chunks: a trace outlives
-- what it cites, and renders a deleted citation as deleted.
CREATE TABLE knowledge_trace_passages (
    tenant_id        text             NOT NULL,
    trace_id         uuid             NOT NULL,
    ordinal          integer          NOT NULL CHECK (ordinal >= 0),
    chunk_id         text             NOT NULL,
    document_id      uuid             NOT NULL,
    version          integer          NOT NULL,
    title            text,            -- NULL once reduced, or once the chunk is deleted
    heading_path     text[],          -- likewise
    doc_date         date,
    authority        text             NOT NULL,
    score            double precision NOT NULL,
    arms             text[]           NOT NULL,
    instruction_like boolean          NOT NULL,
    sensitivity      text             NOT NULL CHECK (sensitivity IN ('public', 'internal', 'confidential',
                                                                      'restricted')),
    tokens           integer          NOT NULL CHECK (tokens >= 0),
    content_sha256   text             NOT NULL CHECK (content_sha256 ~ '^[0-9a-f]{64}$'),
    PRIMARY KEY (tenant_id, trace_id, ordinal),
    FOREIGN KEY (tenant_id, trace_id) REFERENCES knowledge_traces (tenant_id, trace_id) ON DELETE CASCADE
);
CREATE INDEX knowledge_trace_passages_chunk ON knowledge_trace_passages (tenant_id, chunk_id);

-- Deleting a document leaves a tombstone per chunk (0004); its traces forget the passage's title
-- and heading path in the same transaction. A trace written concurrently takes the document's lock
-- (shared) first, so it either sees the tombstone or is seen by this trigger.
CREATE FUNCTION knowledge_traces_forget_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE knowledge_trace_passages tp SET title = NULL, heading_path = NULL
    FROM deleted d
    WHERE tp.tenant_id = d.tenant_id AND tp.chunk_id = d.chunk_id
      AND (tp.title IS NOT NULL OR tp.heading_path IS NOT NULL);
    RETURN NULL;
END
$$;
CREATE TRIGGER knowledge_deleted_chunks_forget_in_traces
    AFTER INSERT ON knowledge_deleted_chunks
    REFERENCING NEW TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_traces_forget_deleted();

-- Budget pressure (the tracked metric): per tenant and day, how often and how much the knowledge
-- class yielded. Sharded by backend like knowledge_tenant_stats, so concurrent turns do not queue
-- on one row. Counters hold no content and are not subject to trace retention.
CREATE TABLE knowledge_budget_pressure (
    tenant_id            text     NOT NULL,
    day                  date     NOT NULL,
    shard                smallint NOT NULL,
    turns                bigint   NOT NULL DEFAULT 0,
    knowledge_turns      bigint   NOT NULL DEFAULT 0,  -- turns whose knowledge class admitted a passage
    yielded_turns        bigint   NOT NULL DEFAULT 0,  -- turns in which knowledge yielded under pressure
    passages_admitted    bigint   NOT NULL DEFAULT 0,
    passages_rendered    bigint   NOT NULL DEFAULT 0,
    passages_yielded     bigint   NOT NULL DEFAULT 0,
    tokens_yielded       bigint   NOT NULL DEFAULT 0,
    recall_yielded_turns bigint   NOT NULL DEFAULT 0,  -- turns in which in-turn recall yielded too
    beliefs_yielded      bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, shard)
);
