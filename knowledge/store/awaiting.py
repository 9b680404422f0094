"""Sources awaiting an extractor, and the documents an extractor's new version re-reads (build step 7:
"re-running ingestion over already-stored sources rather than asking for re-upload").

- An ingest refused as ``unsupported_media_type`` keeps its source (at least `AWAITING_DAYS` more): one
  ``awaiting_extractor`` row (migration 0014) records what the bytes are and the request as admitted,
  expiring with the source and at most `AWAITING_DAYS` after the refusal (`keep_awaiting`); the artifact sweep
  deletes expired marks (`knowledge.store.artifacts.ArtifactStore.sweep`).
- An owner-sent attachment of such a type is marked ``awaiting_extractor`` on its artifact
  (`release_awaiting_attachments` makes it pending once an extractor exists).
- `awaiting_sources` and `extracted_documents` are what ``knowledge docs reextract`` reads.

Nothing here reads or returns a source's bytes. Expired or deleted sources are never returned: a
deleted document's source expired at its deletion, and an expired source is gone to readers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from knowledge.store.artifacts import DEFAULT_LIFETIME_DAYS, LIVE
from knowledge.store.db import Connection, Database

#: How long a source awaits an extractor at most: the spec's thirty-day default for an upload.
AWAITING_DAYS = DEFAULT_LIFETIME_DAYS

_LIVE_A = LIVE.replace("expires_at", "a.expires_at")

KEEP = f"""
WITH kept AS (
  UPDATE artifacts a SET expires_at = GREATEST(a.expires_at, clock_timestamp() + $5::interval)
  WHERE a.tenant_id = $1 AND a.artifact_id = $2 AND {_LIVE_A}
    AND a.attachment_state IS NULL AND a.origin <> 'KNOWLEDGE_SOURCE'
  RETURNING a.tenant_id, a.artifact_id, a.expires_at
)
INSERT INTO awaiting_extractor (tenant_id, artifact_id, media_type, request, expires_at)
SELECT tenant_id, artifact_id, $3, $4::jsonb, LEAST(COALESCE(expires_at, 'infinity'), clock_timestamp() + $5::interval)
FROM kept
ON CONFLICT (tenant_id, artifact_id) DO UPDATE
  SET media_type = EXCLUDED.media_type, request = EXCLUDED.request, refused_at = clock_timestamp(),
      expires_at = EXCLUDED.expires_at
RETURNING expires_at
"""

AWAITING = f"""
SELECT w.tenant_id, w.artifact_id, w.media_type, w.request, w.refused_at, w.expires_at
FROM awaiting_extractor w JOIN artifacts a USING (tenant_id, artifact_id)
WHERE ($1::text IS NULL OR w.tenant_id = $1) AND w.expires_at > clock_timestamp() AND {_LIVE_A}
  AND lower(split_part(w.media_type, ';', 1)) = ANY($2::text[])
ORDER BY w.refused_at, w.artifact_id
"""

FORGET = "DELETE FROM awaiting_extractor WHERE tenant_id = $1 AND artifact_id = $2"

COUNTS = """
SELECT lower(split_part(media_type, ';', 1)) AS media_type, count(*) AS n FROM awaiting_extractor
WHERE ($1::text IS NULL OR tenant_id = $1) AND expires_at > clock_timestamp()
GROUP BY 1 ORDER BY 1
"""

RELEASE_ATTACHMENTS = f"""
UPDATE artifacts a SET attachment_state = 'pending', next_attempt_at = NULL, refusal_reason = NULL,
       attachment_updated_at = clock_timestamp()
WHERE a.attachment_state = 'awaiting_extractor' AND ($1::text IS NULL OR a.tenant_id = $1) AND {_LIVE_A}
  AND lower(split_part(a.media_type, ';', 1)) = ANY($2::text[])
RETURNING a.tenant_id, a.artifact_id
"""

EXTRACTED = """
SELECT tenant_id, document_id, version, ingested_by_principal_id, visibility, project_scope, title,
       source_artifact_id, media_type, doc_date, authority, sensitivity, chunker_version
FROM knowledge_documents
WHERE ($1::text IS NULL OR tenant_id = $1) AND valid_to IS NULL
  AND lower(split_part(media_type, ';', 1)) = ANY($2::text[])
ORDER BY tenant_id, ingested_at, document_id
"""


@dataclass(frozen=True)
class AwaitingSource:
    """A source kept for an extractor: what it is, and the request as it was admitted."""

    tenant_id: str
    artifact_id: uuid.UUID
    media_type: str
    request: dict[str, Any]
    refused_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class ExtractedDocument:
    """A live document version as re-extraction reads it."""

    tenant_id: str
    document_id: uuid.UUID
    version: int
    principal_id: str
    visibility: str
    project_scope: str | None
    title: str
    source_artifact_id: uuid.UUID
    media_type: str
    doc_date: date | None
    authority: str
    sensitivity: str
    chunker_version: str


async def keep_awaiting(db: Database | Connection, *, tenant_id: str, artifact_id: uuid.UUID, media_type: str,
                        request: dict[str, Any], days: int = AWAITING_DAYS) -> datetime | None:
    """Record that this source awaits an extractor for ``media_type``, and keep it at least ``days``
    more (a source that would expire sooner — the command line's one-hour vehicle — now expires
    then; one with no expiry keeps none). When the mark expires, or None when the source is not kept
    (gone, expired, an attachment: marked on its own row, or a document's own source copy)."""
    found = await db.fetchval(KEEP, tenant_id, artifact_id, media_type, json.dumps(request), timedelta(days=days))
    return found if isinstance(found, datetime) else None


async def awaiting_sources(db: Database, *, tenant_id: str | None, media_types: Collection[str]
                           ) -> list[AwaitingSource]:
    """Live sources (not expired, not swept) awaiting one of ``media_types``, oldest refusal first."""
    rows = await db.fetch(AWAITING, tenant_id, sorted(media_types))
    return [AwaitingSource(r["tenant_id"], r["artifact_id"], r["media_type"], json.loads(r["request"]),
                           r["refused_at"], r["expires_at"]) for r in rows]


async def forget_awaiting(db: Database | Connection, *, tenant_id: str, artifact_id: uuid.UUID) -> None:
    """The source was extracted (or refused for a reason of its own): no longer awaiting."""
    await db.execute(FORGET, tenant_id, artifact_id)


async def awaiting_counts(db: Database, *, tenant_id: str | None) -> dict[str, int]:
    """Live marks by media type."""
    return {r["media_type"]: int(r["n"]) for r in await db.fetch(COUNTS, tenant_id)}


async def release_awaiting_attachments(db: Database, *, tenant_id: str | None, media_types: Collection[str]
                                       ) -> list[tuple[str, uuid.UUID]]:
    """Attachments awaiting one of ``media_types`` become pending (the workers ingest them); which."""
    rows = await db.fetch(RELEASE_ATTACHMENTS, tenant_id, sorted(media_types))
    return [(r["tenant_id"], r["artifact_id"]) for r in rows]


async def extracted_documents(db: Database, *, tenant_id: str | None, media_types: Collection[str]
                              ) -> list[ExtractedDocument]:
    """Live document versions of ``media_types``, oldest first."""
    rows = await db.fetch(EXTRACTED, tenant_id, sorted(media_types))
    return [ExtractedDocument(r["tenant_id"], r["document_id"], int(r["version"]), r["ingested_by_principal_id"],
                              r["visibility"], r["project_scope"], r["title"], r["source_artifact_id"],
                              r["media_type"], r["doc_date"], r["authority"], r["sensitivity"],
                              r["chunker_version"]) for r in rows]
