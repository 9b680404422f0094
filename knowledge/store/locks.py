"""Per-document advisory locks: every version, delete, attachment withdrawal and trace write of one
document serializes on the same transaction-scoped lock (`knowledge.ingest`, `knowledge.store.deletion`,
`knowledge.ingest.attachments`, `knowledge.store.traces`).

Cancellation: the locks are transaction-scoped; a cancelled transaction rolls back and releases them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from knowledge.store.db import Connection


def document_lock_key(tenant: str, document_id: uuid.UUID) -> str:
    return f"knowledge.document/{tenant}/{document_id}"


async def lock_document(tx: Connection, tenant: str, document_id: uuid.UUID) -> None:
    """Serialize every version and delete of one document (held to the end of the transaction)."""
    await tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", document_lock_key(tenant, document_id))


async def lock_documents(tx: Connection, documents: Iterable[tuple[str, uuid.UUID]], *, shared: bool = False) -> None:
    """`lock_document` for each (tenant, document), in one statement and one order (by key: within
    a tenant, the documents' id order, as `knowledge.store.deletion` takes them); ``shared``: in shared
    mode. Held to the end of ``tx``."""
    keys = sorted({document_lock_key(tenant, document_id) for tenant, document_id in documents})
    if keys:
        lock = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        await tx.execute(f"SELECT {lock}(hashtextextended(k, 0)) FROM (SELECT k FROM unnest($1::text[]) AS k "
                         "ORDER BY k) AS ordered", keys)
