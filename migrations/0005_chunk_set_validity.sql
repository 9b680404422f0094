-- 0005: a chunk set's end of validity, so that as_of reads the chunk set that was live at that
-- instant even after a re-chunk (a version's validity alone cannot tell two sets apart).
ALTER TABLE knowledge_chunk_sets ADD COLUMN superseded_at timestamptz;
UPDATE knowledge_chunk_sets cs SET superseded_at = cs.created_at
FROM knowledge_documents d
WHERE d.tenant_id = cs.tenant_id AND d.document_id = cs.document_id AND d.version = cs.version
  AND d.chunker_version <> cs.chunker_version;
