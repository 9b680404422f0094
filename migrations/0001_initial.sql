-- 0001: every table ADR-0033 names. Every table carries tenant_id and every primary and
-- foreign key includes it, so the schema can be distributed by tenant (Citus) unchanged.

-- The artifact store, reduced to what knowledge needs. The bytes live here so one
-- transaction covers a document and its source.
CREATE TABLE artifacts (
    tenant_id        text        NOT NULL,
    artifact_id      uuid        NOT NULL,
    upload_seq       bigint      GENERATED ALWAYS AS IDENTITY,  -- upload order, ties impossible
    origin           text        NOT NULL CHECK (origin IN ('SANDBOX_EXPORT', 'TOOL_OUTPUT', 'MODEL_OUTPUT',
                                                            'UPLOAD', 'TRAJECTORY_EXPORT', 'KNOWLEDGE_SOURCE')),
    trust            text        NOT NULL CHECK (trust IN ('SYSTEM', 'USER', 'MEMORY', 'KNOWLEDGE',
                                                           'TOOL_OUTPUT', 'EXTERNAL_UNTRUSTED')),
    sha256           text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size_bytes       bigint      NOT NULL CHECK (size_bytes >= 0),
    media_type       text        NOT NULL,
    file_name        text,
    content          bytea       NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at       timestamptz,                     -- NULL: kept until someone sets it
    attachment_state text        CHECK (attachment_state IN ('pending', 'ingesting', 'ingested',
                                                             'refused', 'failed')),
    refusal_reason   text,
    inspection       jsonb,                           -- upload inspection marker (e.g. a PDF's)
    PRIMARY KEY (tenant_id, artifact_id),
    CHECK (octet_length(content) = size_bytes)
);
-- Uncompressed out-of-line storage: substring() then reads a slice without detoasting it all.
ALTER TABLE artifacts ALTER COLUMN content SET STORAGE EXTERNAL;
CREATE INDEX artifacts_expiry ON artifacts (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE knowledge_documents (
    tenant_id                text        NOT NULL,
    document_id              uuid        NOT NULL,
    version                  integer     NOT NULL CHECK (version >= 1),
    ingested_by_principal_id text        NOT NULL,   -- provenance and deletion authority, not the filter
    visibility               text        NOT NULL CHECK (visibility IN ('principal', 'project', 'tenant')),
    project_scope            text,
    title                    text        NOT NULL,
    source_artifact_id       uuid        NOT NULL,
    media_type               text        NOT NULL,
    doc_date                 date,
    authority                text        NOT NULL CHECK (authority IN ('principal_authored',
                                                                      'principal_supplied', 'fetched')),
    chunker_version          text        NOT NULL,   -- the chunk set live retrieval reads
    superseded_by            uuid,
    ingested_at              timestamptz NOT NULL,
    valid_from               timestamptz NOT NULL,
    valid_to                 timestamptz,            -- end of validity; NULL while live
    sensitivity              text        NOT NULL CHECK (sensitivity IN ('public', 'internal',
                                                                        'confidential', 'restricted')),
    PRIMARY KEY (tenant_id, document_id, version),
    FOREIGN KEY (tenant_id, source_artifact_id) REFERENCES artifacts (tenant_id, artifact_id)
        ON DELETE CASCADE,
    CHECK (visibility <> 'project' OR project_scope IS NOT NULL),
    CHECK (valid_to IS NULL OR valid_to >= valid_from)
);
-- At most one live version of a document.
CREATE UNIQUE INDEX knowledge_documents_live ON knowledge_documents (tenant_id, document_id)
    WHERE valid_to IS NULL;
CREATE INDEX knowledge_documents_source ON knowledge_documents (tenant_id, source_artifact_id);

-- A chunk set: one (document version, chunker_version). Re-chunking adds a set beside the old.
CREATE TABLE knowledge_chunk_sets (
    tenant_id       text        NOT NULL,
    document_id     uuid        NOT NULL,
    version         integer     NOT NULL,
    chunker_version text        NOT NULL,
    chunk_count     integer     NOT NULL CHECK (chunk_count >= 0),
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, document_id, version, chunker_version),
    FOREIGN KEY (tenant_id, document_id, version)
        REFERENCES knowledge_documents (tenant_id, document_id, version) ON DELETE CASCADE
);

CREATE TABLE knowledge_chunks (
    tenant_id                      text    NOT NULL,
    chunk_id                       text    NOT NULL,   -- the citation
    document_id                    uuid    NOT NULL,
    version                        integer NOT NULL,
    chunker_version                text    NOT NULL,
    ordinal                        integer NOT NULL CHECK (ordinal >= 0),
    heading_path                   text[]  NOT NULL,
    text                           text    NOT NULL,   -- verbatim after normalization
    tokens                         integer NOT NULL CHECK (tokens >= 0),
    contains_instruction_like_text boolean NOT NULL,
    content_sha256                 text    NOT NULL CHECK (content_sha256 ~ '^[0-9a-f]{64}$'),
    PRIMARY KEY (tenant_id, chunk_id),
    UNIQUE (tenant_id, document_id, version, chunker_version, ordinal),
    FOREIGN KEY (tenant_id, document_id, version, chunker_version)
        REFERENCES knowledge_chunk_sets (tenant_id, document_id, version, chunker_version) ON DELETE CASCADE
);

-- The index rows: full-text search over the chunk text plus its heading path.
CREATE TABLE knowledge_chunk_index (
    tenant_id   text     NOT NULL,
    chunk_id    text     NOT NULL,
    document_id uuid     NOT NULL,
    version     integer  NOT NULL,
    tsv         tsvector NOT NULL,
    PRIMARY KEY (tenant_id, chunk_id),
    FOREIGN KEY (tenant_id, chunk_id) REFERENCES knowledge_chunks (tenant_id, chunk_id) ON DELETE CASCADE
);
CREATE INDEX knowledge_chunk_index_tsv ON knowledge_chunk_index USING gin (tsv);

-- The event log. Events outlive what they name (a deletion event names a deleted document),
-- so they carry no foreign key to documents, and never a passage's text.
CREATE TABLE knowledge_events (
    tenant_id    text        NOT NULL,
    event_id     bigint      GENERATED ALWAYS AS IDENTITY,
    event_type   text        NOT NULL CHECK (event_type ~ '^knowledge\.[a-z_]+(\.[a-z_]+)*$'),
    document_id  uuid,
    version      integer,
    principal_id text,
    payload      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    occurred_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, event_id)
);
CREATE INDEX knowledge_events_document ON knowledge_events (tenant_id, document_id, event_id);
CREATE INDEX knowledge_events_type ON knowledge_events (event_type, occurred_at);
