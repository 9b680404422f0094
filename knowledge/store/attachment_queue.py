"""The attachment queue's statements (ADR-0120), on the ``artifacts`` table: the upload's inspection
marker, marking a message's attachments, and the queue a worker drains — claim under a lease,
renew, settle, release — with the operator's reads (counts, overview, status). The queue's logic
(`knowledge.ingest.attachments`: the marking rule, `AttachmentQueue`) runs them.

Each statement is a function with named, typed arguments; what it reads comes back as a small frozen
dataclass of this module (`MarkCandidate`, `ClaimedAttachment`, `LeaseHolder`, `OverviewGroup`,
`AttachmentStatus`), built here from the row, and what it writes per attachment goes in as one
(`Marking`, `Settlement`): no caller reads a column or builds a statement's tuple.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from knowledge.models import ArtifactOrigin, ArtifactRef, AttachmentState, TrustLevel
from knowledge.store.artifacts import LIVE, ref_columns, ref_from_row
from knowledge.store.db import Connection, Database, Record

# Keep a PDF's upload inspection marker on its artifact: $1 tenant, $2 artifact, $3 the marker (JSON).
SET_INSPECTION = "UPDATE artifacts SET inspection = $3::jsonb WHERE tenant_id = $1 AND artifact_id = $2"

# The artifacts a message names, locked for marking: $1 tenant, $2 artifact ids.
MARK_READ = f"""
SELECT artifact_id, origin, media_type, sha256, attachment_state, inspection::text AS inspection
FROM artifacts WHERE tenant_id = $1 AND artifact_id = ANY($2::uuid[]) AND {LIVE}
ORDER BY artifact_id FOR UPDATE
"""

# Record a message's attachments (with its conversation; the marked ones with their state, reason,
# principal and document): $1 tenant, $2 conversation, $3 principal, then parallel arrays $4 artifact
# ids, $5 states (NULL: recorded with the conversation only), $6 reasons, $7 documents.
MARK = """
UPDATE artifacts a
SET conversation_id = coalesce(a.conversation_id, $2),
    attachment_state = coalesce(m.state, a.attachment_state),
    refusal_reason = CASE WHEN m.state IS NULL THEN a.refusal_reason ELSE m.reason END,
    attached_by = CASE WHEN m.state IS NULL THEN a.attached_by ELSE $3 END,
    attachment_document_id = coalesce(m.document_id, a.attachment_document_id),
    marked_at = CASE WHEN m.state IS NULL THEN a.marked_at ELSE clock_timestamp() END,
    attachment_updated_at = CASE WHEN m.state IS NULL THEN a.attachment_updated_at
                                 ELSE clock_timestamp() END
FROM unnest($4::uuid[], $5::text[], $6::text[], $7::uuid[]) AS m(artifact_id, state, reason, document_id)
WHERE a.tenant_id = $1 AND a.artifact_id = m.artifact_id
"""

# Claim up to $5 claimable attachments in upload order — pending and due, or ingesting under an
# expired lease (a takeover, recorded in the history) — each under a lease for worker $1 of $2
# seconds: $3 tenant (NULL: all), $4 attempts at most (a takeover of the last is ``exhausted``).
CLAIM = f"""
WITH next AS (
    SELECT tenant_id, artifact_id, attachment_state AS prev_state, lease_owner AS prev_owner,
           attachment_state = 'ingesting' AND attachment_attempts >= $4 AS exhausted
    FROM artifacts
    WHERE attachment_state IN ('pending', 'ingesting')
      AND ($3::text IS NULL OR tenant_id = $3)
      AND {LIVE}
      AND CASE attachment_state
              WHEN 'pending' THEN next_attempt_at IS NULL OR next_attempt_at <= clock_timestamp()
              ELSE lease_expires_at <= clock_timestamp() END
    ORDER BY upload_seq
    LIMIT $5
    FOR UPDATE SKIP LOCKED
)
UPDATE artifacts a
SET attachment_state = 'ingesting',
    lease_owner = $1,
    lease_expires_at = clock_timestamp() + make_interval(secs => $2),
    attachment_attempts = a.attachment_attempts + CASE WHEN next.exhausted THEN 0 ELSE 1 END,
    next_attempt_at = NULL,
    attachment_updated_at = clock_timestamp(),
    attachment_history = CASE WHEN next.prev_state = 'ingesting'
        THEN a.attachment_history || jsonb_build_object(
            'attempt', a.attachment_attempts, 'outcome', 'lease_expired', 'reason', 'lease_expired',
            'worker', next.prev_owner, 'at', clock_timestamp())
        ELSE a.attachment_history END
FROM next
WHERE a.tenant_id = next.tenant_id AND a.artifact_id = next.artifact_id
RETURNING {ref_columns('a')}, a.attached_by,
          a.attachment_document_id, a.attachment_attempts, a.conversation_id, a.upload_seq, next.prev_state,
          next.prev_owner, next.exhausted,
          EXISTS (SELECT 1 FROM knowledge_documents d WHERE d.tenant_id = a.tenant_id
                  AND d.document_id = a.attachment_document_id AND d.valid_to IS NULL) AS document_exists
"""

# Settle claims still held by worker $1, one row of the arrays per claim: tenant, artifact, new
# state, reason, the document (ingested only), backoff seconds (pending only), the attempt's outcome.
# An ingested attachment is recorded only while its document is live (checked under the document's lock).
SETTLE = f"""
UPDATE artifacts a
SET attachment_state = s.state,
    refusal_reason = s.reason,
    attachment_document_id = coalesce(s.document_id, a.attachment_document_id),
    next_attempt_at = CASE WHEN s.state = 'pending' THEN clock_timestamp() + make_interval(secs => s.delay) END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    attachment_updated_at = clock_timestamp(),
    attachment_history = a.attachment_history || jsonb_build_object(
        'attempt', a.attachment_attempts, 'outcome', s.outcome, 'reason', s.reason, 'worker', $1::text,
        'document_id', s.document_id, 'at', clock_timestamp())
FROM unnest($2::text[], $3::uuid[], $4::text[], $5::text[], $6::uuid[], $7::float8[], $8::text[])
     AS s(tenant_id, artifact_id, state, reason, document_id, delay, outcome)
WHERE a.tenant_id = s.tenant_id AND a.artifact_id = s.artifact_id AND a.lease_owner = $1
  AND a.attachment_state = 'ingesting' AND {LIVE}
  AND (s.state <> 'ingested' OR EXISTS (SELECT 1 FROM knowledge_documents d
                                       WHERE d.tenant_id = s.tenant_id AND d.document_id = s.document_id
                                         AND d.valid_to IS NULL))
RETURNING a.artifact_id
"""

# Give a claim back unfinished, the attempt not counted: $1 tenant, $2 artifact, $3 worker.
RELEASE = f"""
UPDATE artifacts
SET attachment_state = 'pending', lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL,
    attachment_attempts = attachment_attempts - 1, attachment_updated_at = clock_timestamp(),
    attachment_history = attachment_history || jsonb_build_object(
        'attempt', attachment_attempts, 'outcome', 'released', 'reason', 'worker_stopped', 'worker', $3::text,
        'at', clock_timestamp())
WHERE tenant_id = $1 AND artifact_id = $2 AND lease_owner = $3 AND attachment_state = 'ingesting' AND {LIVE}
RETURNING 1
"""

# Extend the leases a worker still holds: $1 tenants, $2 artifact ids, $3 worker, $4 lease seconds.
RENEW = f"""
UPDATE artifacts SET lease_expires_at = clock_timestamp() + make_interval(secs => $4)
WHERE tenant_id = ANY($1::text[]) AND artifact_id = ANY($2::uuid[]) AND lease_owner = $3
  AND attachment_state = 'ingesting' AND {LIVE}
RETURNING artifact_id
"""

# An attachment's state, lease holder and whether it is live: $1 tenant, $2 artifact.
LEASE_HOLDER = f"""
SELECT attachment_state, lease_owner, {LIVE} AS live FROM artifacts
WHERE tenant_id = $1 AND artifact_id = $2
"""

# Seconds until some attachment may become claimable (NULL: none pending or ingesting): $1 tenant
# (NULL: all).
NEXT_DUE = f"""
SELECT extract(epoch FROM min(CASE attachment_state
           WHEN 'pending' THEN coalesce(next_attempt_at, clock_timestamp())
           ELSE lease_expires_at END) - clock_timestamp())
FROM artifacts
WHERE attachment_state IN ('pending', 'ingesting') AND ($1::text IS NULL OR tenant_id = $1)
  AND {LIVE}
"""

# Live attachments by state: $1 tenant (NULL: all).
COUNTS = f"""
SELECT attachment_state AS state, count(*) AS n FROM artifacts
WHERE attachment_state IS NOT NULL AND ($1::text IS NULL OR tenant_id = $1) AND {LIVE}
GROUP BY 1
"""

# One tenant's live attachments by state and reason, with expired leases and the oldest pending
# attachment's age: $1 tenant.
OVERVIEW = f"""
SELECT attachment_state AS state, refusal_reason AS reason, count(*) AS n,
       count(*) FILTER (WHERE attachment_state = 'ingesting'
                        AND lease_expires_at < clock_timestamp()) AS expired,
       extract(epoch FROM clock_timestamp() - min(created_at)
               FILTER (WHERE attachment_state = 'pending')) AS oldest
FROM artifacts
WHERE tenant_id = $1 AND attachment_state IS NOT NULL AND {LIVE}
GROUP BY 1, 2
"""

# One attachment as the queue sees it, expired or not: $1 tenant, $2 artifact.
STATUS = f"""
SELECT tenant_id, artifact_id, conversation_id, file_name, media_type, trust, upload_seq,
       attachment_state, refusal_reason, attachment_attempts, attachment_history::text AS history,
       attachment_document_id, lease_owner, lease_expires_at, next_attempt_at,
       inspection::text AS inspection, attached_by, NOT {LIVE} AS expired
FROM artifacts WHERE tenant_id = $1 AND artifact_id = $2
"""


# --- what the statements read and write, typed ------------------------------------------------------------


@dataclass(frozen=True)
class MarkCandidate:
    """An artifact a message names, as marking reads it (`mark_read`)."""

    artifact_id: uuid.UUID
    origin: ArtifactOrigin
    media_type: str
    sha256: str
    state: AttachmentState | None  # set by an earlier send
    inspection: dict[str, Any] | None  # the upload inspection marker (a PDF's)


@dataclass(frozen=True)
class Marking:
    """One attachment of a message to record (`record_marks`): with the conversation only (``state``
    None), or marked with its state, reason and the document it is to become."""

    artifact_id: uuid.UUID
    state: AttachmentState | None = None
    reason: str | None = None
    document_id: uuid.UUID | None = None


@dataclass(frozen=True)
class ClaimedAttachment:
    """An attachment `claim_attachments` took under a lease, with what it was before the claim."""

    source: ArtifactRef
    attached_by: str | None  # the principal whose message marked it
    document_id: uuid.UUID | None  # the document it is to become, as recorded when marked
    attempts: int  # counting this one (a takeover of the last is not counted: ``exhausted``)
    conversation_id: str | None
    upload_seq: int
    previous_state: AttachmentState  # pending, or ingesting under an expired lease (a takeover)
    previous_owner: str | None  # the worker whose lease expired, if any
    exhausted: bool  # a takeover of the last allowed attempt
    document_exists: bool  # that document was live when claimed


@dataclass(frozen=True)
class Settlement:
    """One claim's outcome to record (`settle_attachments`)."""

    tenant_id: str
    artifact_id: uuid.UUID
    state: str  # the new state: ingested, refused, pending or failed
    reason: str | None
    document_id: uuid.UUID | None  # ingested only
    delay: float  # seconds of backoff (pending only)
    outcome: str  # the attempt's outcome, as the history records it


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds an attachment's lease (`lease_holder`)."""

    state: AttachmentState | None
    lease_owner: str | None
    live: bool  # not expired


@dataclass(frozen=True)
class OverviewGroup:
    """One (state, reason) group of a tenant's live attachments (`overview_rows`)."""

    state: AttachmentState
    reason: str | None
    count: int
    expired_leases: int  # ingesting under an expired lease
    oldest_pending_seconds: float | None  # the age of the group's oldest pending attachment


class AttachmentStatus(BaseModel):
    """An attachment as the queue sees it (`KnowledgeService.attachment`); its document only once it
    was ingested (the id recorded for a claim in flight is not one yet)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: str
    artifact_id: uuid.UUID
    conversation_id: str | None
    file_name: str | None
    media_type: str
    trust: TrustLevel
    upload_seq: int
    state: AttachmentState | None
    reason: str | None  # a refusal's reason code, or a retry's / failure's last reason
    attempts: int
    history: list[dict[str, Any]]
    document_id: uuid.UUID | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    next_attempt_at: datetime | None
    inspection: dict[str, Any] | None
    attached_by: str | None
    expired: bool


def _state(value: str | None) -> AttachmentState | None:
    return AttachmentState(value) if value else None


def _json(text: str | None) -> Any:
    return json.loads(text) if text is not None else None


# --- the statements, each a function with named arguments (issue 33: the store owns its statements) ---------


async def set_inspection(tx: Connection, *, tenant_id: str, artifact_id: uuid.UUID, marker: dict[str, Any]) -> None:
    """`SET_INSPECTION`: keep a PDF's upload inspection marker on its artifact."""
    await tx.execute(SET_INSPECTION, tenant_id, artifact_id, json.dumps(marker))


def _candidate(row: Record) -> MarkCandidate:
    return MarkCandidate(artifact_id=row["artifact_id"], origin=ArtifactOrigin(row["origin"]),
                         media_type=row["media_type"], sha256=row["sha256"], state=_state(row["attachment_state"]),
                         inspection=_json(row["inspection"]))


async def mark_read(tx: Connection, *, tenant_id: str, artifact_ids: Sequence[uuid.UUID]) -> list[MarkCandidate]:
    """`MARK_READ`: the artifacts a message names, locked for marking."""
    return [_candidate(row) for row in await tx.fetch(MARK_READ, tenant_id, list(artifact_ids))]


async def record_marks(tx: Connection, *, tenant_id: str, conversation_id: str | None, principal_id: str | None,
                       marks: Sequence[Marking]) -> None:
    """`MARK`: record a message's attachments, each with its state, reason and document."""
    await tx.execute(MARK, tenant_id, conversation_id, principal_id, [m.artifact_id for m in marks],
                     [None if m.state is None else m.state.value for m in marks], [m.reason for m in marks],
                     [m.document_id for m in marks])


def _claimed(row: Record) -> ClaimedAttachment:
    return ClaimedAttachment(
        source=ref_from_row(row), attached_by=row["attached_by"], document_id=row["attachment_document_id"],
        attempts=int(row["attachment_attempts"]), conversation_id=row["conversation_id"],
        upload_seq=int(row["upload_seq"]), previous_state=AttachmentState(row["prev_state"]),
        previous_owner=row["prev_owner"], exhausted=bool(row["exhausted"]),
        document_exists=bool(row["document_exists"]))


async def claim_attachments(db: Database, *, worker_id: str, lease_seconds: float, tenant_id: str | None,
                            max_attempts: int, limit: int) -> list[ClaimedAttachment]:
    """`CLAIM`: up to ``limit`` claimable attachments, each under a lease for ``worker_id``."""
    rows = await db.fetch(CLAIM, worker_id, float(lease_seconds), tenant_id, max_attempts, limit)
    return [_claimed(row) for row in rows]


async def renew_leases(db: Database, *, tenant_ids: Sequence[str], artifact_ids: Sequence[uuid.UUID],
                       worker_id: str, lease_seconds: float) -> set[uuid.UUID]:
    """`RENEW`: extend one worker's leases; the attachments still the worker's."""
    rows = await db.fetch(RENEW, list(tenant_ids), list(artifact_ids), worker_id, float(lease_seconds))
    return {row["artifact_id"] for row in rows}


async def settle_attachments(tx: Connection, *, worker_id: str,
                             settlements: Sequence[Settlement]) -> set[uuid.UUID]:
    """`SETTLE`: record each claim's outcome and release its lease; the settled ones."""
    s = settlements
    rows = await tx.fetch(SETTLE, worker_id, [x.tenant_id for x in s], [x.artifact_id for x in s],
                          [x.state for x in s], [x.reason for x in s], [x.document_id for x in s],
                          [float(x.delay) for x in s], [x.outcome for x in s])
    return {row["artifact_id"] for row in rows}


async def release_attachment(db: Database, *, tenant_id: str, artifact_id: uuid.UUID, worker_id: str) -> bool:
    """`RELEASE`: give a claim back unfinished; whether it was still the worker's."""
    return bool(await db.fetchval(RELEASE, tenant_id, artifact_id, worker_id))


async def lease_holder(db: Database, *, tenant_id: str, artifact_id: uuid.UUID) -> LeaseHolder | None:
    """`LEASE_HOLDER`: who holds an attachment's lease, its state, and whether it is live; None if gone."""
    row = await db.fetchrow(LEASE_HOLDER, tenant_id, artifact_id)
    if row is None:
        return None
    return LeaseHolder(state=_state(row["attachment_state"]), lease_owner=row["lease_owner"], live=bool(row["live"]))


async def seconds_until_due(db: Database, *, tenant_id: str | None) -> float | None:
    """`NEXT_DUE`: seconds until some attachment may become claimable; None when none waits."""
    value = await db.fetchval(NEXT_DUE, tenant_id)
    return None if value is None else float(value)


async def state_counts(db: Database, *, tenant_id: str | None) -> dict[str, int]:
    """`COUNTS`: live attachments by state."""
    return {r["state"]: int(r["n"]) for r in await db.fetch(COUNTS, tenant_id)}


def _group(row: Record) -> OverviewGroup:
    return OverviewGroup(state=AttachmentState(row["state"]), reason=row["reason"], count=int(row["n"]),
                         expired_leases=int(row["expired"]),
                         oldest_pending_seconds=None if row["oldest"] is None else float(row["oldest"]))


async def overview_rows(db: Database, *, tenant_id: str) -> list[OverviewGroup]:
    """`OVERVIEW`: one tenant's live attachments by state and reason, with expired leases and ages."""
    return [_group(row) for row in await db.fetch(OVERVIEW, tenant_id)]


def _attachment(row: Record) -> AttachmentStatus:
    state = _state(row["attachment_state"])
    return AttachmentStatus(
        tenant_id=row["tenant_id"], artifact_id=row["artifact_id"], conversation_id=row["conversation_id"],
        file_name=row["file_name"], media_type=row["media_type"], trust=TrustLevel(row["trust"]),
        upload_seq=row["upload_seq"], state=state, reason=row["refusal_reason"],
        attempts=row["attachment_attempts"], history=json.loads(row["history"]),
        document_id=row["attachment_document_id"] if state is AttachmentState.INGESTED else None,
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"], next_attempt_at=row["next_attempt_at"],
        inspection=_json(row["inspection"]), attached_by=row["attached_by"], expired=row["expired"])


async def status_row(db: Database, *, tenant_id: str, artifact_id: uuid.UUID) -> AttachmentStatus | None:
    """`STATUS`: one attachment's status; None if the artifact is gone."""
    row = await db.fetchrow(STATUS, tenant_id, artifact_id)
    return None if row is None else _attachment(row)
