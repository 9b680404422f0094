-- 0010: a chunk set may be live more than once (issue 20: `docs rechunk` back to a chunker version
-- the document had before). `created_at .. superseded_at` is the set's latest live period; the
-- periods before it are kept here, so that as_of still reads the set that was live at any instant.
-- An array of ranges rather than a multirange: any PostgreSQL the service supports has it.
ALTER TABLE knowledge_chunk_sets ADD COLUMN earlier_periods tstzrange[] NOT NULL DEFAULT '{}';
