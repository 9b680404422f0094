-- 0011: the tool path traced (issue 31). A turn's trace holds, beside the block the turn rendered
-- (call 0, described by the knowledge_traces row), every knowledge.search result the agent got in
-- that turn (calls 1, 2, …): its query, the instant it rendered and the hash of the block the tool
-- returned; its passages are rows of knowledge_trace_passages with that call's number. A search
-- outside a turn writes a trace of its own (no turn block), so no tool result goes untraced.
-- Retention and deletion reach them as they reach the turn's own passages.
CREATE TABLE knowledge_trace_tool_calls (
    tenant_id    text        NOT NULL,
    trace_id     uuid        NOT NULL,
    call_no      integer     NOT NULL CHECK (call_no >= 1),
    tool         text        NOT NULL,
    query_text   text,                    -- NULL once reduced
    query_as_of  timestamptz,
    rendered_at  timestamptz NOT NULL,    -- the block's as_of
    block_sha256 text        CHECK (block_sha256 ~ '^[0-9a-f]{64}$'),  -- NULL: the tool found nothing
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, trace_id, call_no),
    FOREIGN KEY (tenant_id, trace_id) REFERENCES knowledge_traces (tenant_id, trace_id) ON DELETE CASCADE
);

ALTER TABLE knowledge_trace_passages ADD COLUMN call_no integer NOT NULL DEFAULT 0 CHECK (call_no >= 0);
ALTER TABLE knowledge_trace_passages DROP CONSTRAINT knowledge_trace_passages_pkey,
    ADD PRIMARY KEY (tenant_id, trace_id, call_no, ordinal);

-- Budget pressure counts the tool path too: calls, and the passages they returned.
ALTER TABLE knowledge_budget_pressure ADD COLUMN tool_calls bigint NOT NULL DEFAULT 0,
    ADD COLUMN tool_passages bigint NOT NULL DEFAULT 0;
