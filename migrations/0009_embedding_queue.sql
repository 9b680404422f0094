-- 0009: the semantic arm's queue (issue 18): ingest commits without vectors; vectors follow.
--
-- The ingest (or re-chunk) transaction that writes a chunk set writes one row here per chunk set
-- and model version when the semantic arm is on: a durable record that the set's chunks await
-- embedding. The service's embedding drain (`knowledge.semantic.queue`) claims rows in `seq`
-- order (ingest order) under a lease, embeds the set's chunks that have no vector under the model
-- version, writes them, and deletes the row. A row goes with its chunk set (ON DELETE CASCADE): a
-- deleted document leaves nothing queued. A killed process loses nothing: its lease expires and
-- another drain takes the row; writing vectors twice is a no-op (ON CONFLICT DO NOTHING). A new
-- model version queues every chunk set that lacks its vectors through the same table.
-- No pgvector needed: the table exists on every server.
CREATE TABLE knowledge_embedding_queue (
    tenant_id       text        NOT NULL,
    seq             bigint      GENERATED ALWAYS AS IDENTITY,
    document_id     uuid        NOT NULL,
    version         integer     NOT NULL,
    chunker_version text        NOT NULL,
    model_version   text        NOT NULL,
    chunk_count     integer     NOT NULL,
    queued_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    leased_until    timestamptz,
    -- Claims that ended without progress; a row past the drain's limit is left for an operator
    -- (a passage that crashes the encoder must not block the queue behind it).
    attempts        integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, seq),
    UNIQUE (tenant_id, document_id, version, chunker_version, model_version),
    FOREIGN KEY (tenant_id, document_id, version, chunker_version)
        REFERENCES knowledge_chunk_sets (tenant_id, document_id, version, chunker_version) ON DELETE CASCADE
);

-- The drain's claim: the oldest rows of a model version.
CREATE INDEX knowledge_embedding_queue_order ON knowledge_embedding_queue (model_version, seq);
