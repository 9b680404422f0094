"""The ingest shell: read a source, `knowledge.core.prepare.prepare` it, commit it in one transaction —
one document (`ingestor`), many at once (`bulk`), owner-sent attachments (`attachments`)."""
