-- 0012: the agent's answers and their citations (issue 31; ADR-0033's "citation rate" and "citation
-- accuracy"). A host records the answer of a turn against its trace (svc.record_answer); the service
-- finds the chunk ids it cites (knowledge/core/citations.py) and records each with the claim it stands
-- beside and whether the turn showed the agent that passage (shown = false: hallucinated, never
-- resolved). The answer's text is not kept, only its hash and the claims; claims are the trace's
-- content and follow its retention (NULL once the trace is reduced, gone with it).
CREATE TABLE knowledge_trace_answers (
    tenant_id     text        NOT NULL,
    trace_id      uuid        NOT NULL,
    answer_no     integer     NOT NULL CHECK (answer_no >= 1),
    answer_sha256 text        NOT NULL CHECK (answer_sha256 ~ '^[0-9a-f]{64}$'),
    recorded_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, trace_id, answer_no),
    FOREIGN KEY (tenant_id, trace_id) REFERENCES knowledge_traces (tenant_id, trace_id) ON DELETE CASCADE
);

CREATE TABLE knowledge_trace_citations (
    tenant_id   text    NOT NULL,
    trace_id    uuid    NOT NULL,
    answer_no   integer NOT NULL,
    ordinal     integer NOT NULL CHECK (ordinal >= 0),
    chunk_id    text    NOT NULL,          -- as written (at most 64 characters): may be no chunk at all
    well_formed boolean NOT NULL,
    shown       boolean NOT NULL,          -- the turn gave the agent this passage; false: hallucinated
    claim       text,                      -- the sentence it stands beside; NULL once reduced
    supported   boolean,                   -- the claim-support check's verdict; NULL: not assessed
    PRIMARY KEY (tenant_id, trace_id, answer_no, ordinal),
    FOREIGN KEY (tenant_id, trace_id, answer_no)
        REFERENCES knowledge_trace_answers (tenant_id, trace_id, answer_no) ON DELETE CASCADE
);

-- The metric over time, per tenant and UTC day (sharded like the budget-pressure counters); not
-- subject to trace retention, and holding no content.
CREATE TABLE knowledge_citation_stats (
    tenant_id      text     NOT NULL,
    day            date     NOT NULL,
    shard          smallint NOT NULL,
    answers        bigint   NOT NULL DEFAULT 0,
    answers_citing bigint   NOT NULL DEFAULT 0,  -- answers with at least one citation
    citations      bigint   NOT NULL DEFAULT 0,
    hallucinated   bigint   NOT NULL DEFAULT 0,  -- citations of a passage the turn never showed
    PRIMARY KEY (tenant_id, day, shard)
);
