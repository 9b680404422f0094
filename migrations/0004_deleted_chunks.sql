-- 0004: tombstones of deleted chunks: the citation (chunk id) and nothing of the passage, so a trace
-- that cited a deleted passage renders "this passage has been deleted" instead of a dangling id.
CREATE TABLE knowledge_deleted_chunks (
    tenant_id   text        NOT NULL,
    chunk_id    text        NOT NULL,
    document_id uuid        NOT NULL,
    deleted_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, chunk_id)
);
