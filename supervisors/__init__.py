"""``knowledge.supervisors`` (this folder, mapped under the package): every process's and actor's
owner — the embedded PostgreSQL, the PDF parser pool, the embedder child, the actor supervisor."""
