-- 0014: sources no extractor reads yet, kept to be extracted once one exists (build step 7, issue 34).
--
-- An ingest refused as `unsupported_media_type` leaves its source (the caller's upload, which has the
-- thirty-day default expiry) and one row here: what the bytes are and the request as it was admitted
-- (who, title, visibility; never content). `knowledge docs reextract` ingests it once an extractor
-- for its type exists. The row expires with its source (and at most thirty days after the refusal):
-- the sweeper deletes it then, and deleting the source cascades to it, so nothing outlives its bytes.
CREATE TABLE awaiting_extractor (
    tenant_id    text        NOT NULL,
    artifact_id  uuid        NOT NULL,
    media_type   text        NOT NULL,     -- what the bytes are (knowledge.parsers.sniff), not what the name said
    request      jsonb       NOT NULL,     -- the admitted request: principal, title, visibility, scope, dates
    refused_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, artifact_id),
    FOREIGN KEY (tenant_id, artifact_id) REFERENCES artifacts (tenant_id, artifact_id) ON DELETE CASCADE
);
CREATE INDEX awaiting_extractor_expiry ON awaiting_extractor (expires_at);

-- An owner-sent attachment of a type no extractor reads is marked the same way: awaiting one.
ALTER TABLE artifacts DROP CONSTRAINT artifacts_attachment_state_check,
    ADD CONSTRAINT artifacts_attachment_state_check
        CHECK (attachment_state IN ('pending', 'ingesting', 'ingested', 'refused', 'failed', 'awaiting_extractor'));
