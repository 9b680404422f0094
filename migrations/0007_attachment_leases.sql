-- 0007: owner-sent attachments (ADR-0120) and the maintenance worker's leases.
--
-- An attachment is an UPLOAD artifact a chat message carried. Marking records the conversation,
-- the principal whose message marked it and, for PDFs, the upload inspection (column
-- `inspection`, 0001). A worker claims a pending attachment by taking a lease (owner and expiry,
-- renewed while it works): a worker that dies mid-job stops renewing, the lease runs out, and
-- another worker takes the attachment over. Attempts and their outcomes are kept on the row;
-- `attachment_document_id` is the document the attachment became, which conversation deletion
-- follows. No new key: the queue and the lookups are plain indexes, tenant first where a
-- tenant is the predicate.
ALTER TABLE artifacts
    ADD COLUMN conversation_id        text,
    ADD COLUMN attached_by            text,          -- the principal whose message marked it
    ADD COLUMN marked_at              timestamptz,
    ADD COLUMN attachment_attempts    integer NOT NULL DEFAULT 0 CHECK (attachment_attempts >= 0),
    ADD COLUMN attachment_history     jsonb   NOT NULL DEFAULT '[]'::jsonb,  -- one entry per attempt
    ADD COLUMN next_attempt_at        timestamptz,   -- a retry waits for its backoff
    ADD COLUMN lease_owner            text,          -- the worker holding an 'ingesting' attachment
    ADD COLUMN lease_expires_at       timestamptz,
    ADD COLUMN attachment_document_id uuid,          -- what an 'ingested' attachment became
    ADD COLUMN attachment_updated_at  timestamptz,
    ADD CONSTRAINT artifacts_attachment_lease
        CHECK (attachment_state IS DISTINCT FROM 'ingesting'
               OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)),
    ADD CONSTRAINT artifacts_attachment_document
        CHECK (attachment_state IS DISTINCT FROM 'ingested' OR attachment_document_id IS NOT NULL);

-- The work queue, in upload order: only rows a worker may have to look at.
CREATE INDEX artifacts_attachment_queue ON artifacts (upload_seq)
    WHERE attachment_state IN ('pending', 'ingesting');
CREATE INDEX artifacts_conversation ON artifacts (tenant_id, conversation_id)
    WHERE conversation_id IS NOT NULL;
CREATE INDEX artifacts_attachment_document ON artifacts (tenant_id, attachment_document_id)
    WHERE attachment_document_id IS NOT NULL;
