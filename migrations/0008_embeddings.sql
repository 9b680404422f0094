-- 0008: the semantic arm's vectors (issue 11), where the server has pgvector.
--
-- One row per window of a chunk per model version: a passage is embedded as windows of its text
-- (`knowledge.semantic.windows`) and scores by its best window. The column has no fixed dimension
-- so that model versions of different dimensions can live side by side; the service creates one
-- HNSW index per model version on `embedding::vector(dim)`, partial on that version
-- (`knowledge.semantic.store.ensure_index`). Rows go with their chunk (ON DELETE CASCADE), so a
-- document's deletion removes its vectors in the same statement that removes its chunks.
--
-- A server without pgvector (or a role that may not create it) gets nothing here and runs
-- lexical-only; the service refuses to enable the semantic arm there with a clear error.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
        RAISE NOTICE 'pgvector is not available: the semantic arm cannot be enabled on this server';
        RETURN;
    END IF;
    BEGIN
        CREATE EXTENSION IF NOT EXISTS vector;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE NOTICE 'may not create the vector extension: the semantic arm cannot be enabled';
        RETURN;
    END;
    EXECUTE $sql$
        CREATE TABLE knowledge_embeddings (
            tenant_id     text     NOT NULL,
            chunk_id      text     NOT NULL,
            model_version text     NOT NULL,
            window_no     smallint NOT NULL,
            embedding     vector   NOT NULL,
            PRIMARY KEY (tenant_id, chunk_id, model_version, window_no),
            FOREIGN KEY (tenant_id, chunk_id) REFERENCES knowledge_chunks (tenant_id, chunk_id) ON DELETE CASCADE
        )
    $sql$;
    -- The exact (small-tenant) path and re-embedding read a tenant's rows of one model version.
    EXECUTE 'CREATE INDEX knowledge_embeddings_tenant ON knowledge_embeddings (tenant_id, model_version)';
END
$$;
