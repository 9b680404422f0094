-- Ready for Citus (issue 36): the schema's distribution plan, applied only where the citus extension
-- is installed (it is not on plain PostgreSQL, the embedded server, or these machines: there this
-- migration does nothing).
--
-- Every tenant table is distributed by tenant_id and co-located with artifacts, so each foreign key,
-- key and join — all of which include tenant_id (tests/store/test_citus_rules.py) — stays on one node,
-- and a statement bound to one tenant routes to one shard. Parents come before children (a foreign key
-- needs its referenced table distributed first). No reference table: the vocabularies and model
-- versions live in code, not in tables. The migration ledger (knowledge_schema_migrations) stays a
-- local table of the coordinator, the one node that migrates. knowledge_embeddings exists only where
-- pgvector does (migration 0008).
DO $$
DECLARE
    tbl text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    FOREACH tbl IN ARRAY ARRAY[
        'artifacts', 'awaiting_extractor',
        'knowledge_documents', 'knowledge_chunk_sets', 'knowledge_chunks', 'knowledge_chunk_index',
        'knowledge_postings', 'knowledge_tenant_stats', 'knowledge_deleted_chunks', 'knowledge_events',
        'knowledge_ingest_outcomes', 'knowledge_embedding_queue', 'knowledge_embeddings',
        'knowledge_traces', 'knowledge_trace_passages', 'knowledge_trace_tool_calls', 'knowledge_trace_answers',
        'knowledge_trace_citations', 'knowledge_budget_pressure', 'knowledge_citation_stats'
    ] LOOP
        IF to_regclass(tbl) IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass(tbl)) THEN
            IF tbl = 'artifacts' THEN
                PERFORM create_distributed_table(tbl, 'tenant_id');
            ELSE
                PERFORM create_distributed_table(tbl, 'tenant_id', colocate_with => 'artifacts');
            END IF;
        END IF;
    END LOOP;
END
$$;
