"""Owner-sent attachments (ADR-0120): upload inspection, marking, and the queue workers drain.

A text, Markdown, PDF, HTML or Word file the owner attaches to a chat message is ingested
automatically, and only that (one of another type is kept, ``awaiting_extractor``, until an
extractor for it exists: ``knowledge docs reextract``):

- **Upload** (`upload_attachment`) stores the file as an ``UPLOAD`` artifact with trust
  ``EXTERNAL_UNTRUSTED`` — it stays that, whatever becomes of it — under the media type its bytes
  are (`knowledge.parsers.sniff`), with the thirty-day default expiry, and, for a PDF, runs the parser
  pool's 10-second upload inspection first and keeps its marker on the artifact (``inspection``).
- **Marking** (`mark_attachments`) is what the host calls when a message is sent. An attachment is
  marked ``pending`` only when the message's actor is the principal (a `Principal`, not a
  `SurfaceActor` or a `SchedulerActor`) and the principal holds ``knowledge.write``, the artifact is
  an upload, and its media type has an extractor (else ``awaiting_extractor``, with the principal and
  the document it is to become recorded as for a pending one). A PDF whose upload inspection already refused it
  is recorded ``refused`` with that reason at once. Every attachment passed is recorded as part of
  the conversation, marked or not, so deleting the conversation reaches all of them.
- **The queue** (`AttachmentQueue`) is what a worker (`knowledge.maintenance.worker`) uses: claim the oldest
  claimable attachments (a batch) by upload order with ``FOR UPDATE SKIP LOCKED`` and take a lease
  on each (renewed while working; one that runs out is taken over by another worker), then settle
  each —
  ``ingested`` with its document, ``refused`` with a reason (never retried), ``pending`` again
  after a backoff for a transient failure, or ``failed`` once the retries are spent. Every attempt
  is appended to ``attachment_history``.

The document id is a name-based UUID of (tenant, principal, the file's SHA-256), recorded on the
attachment when it is marked: the same file sent twice, even at once, is one document (the second
claim finds it, or the second ingest loses the race on the document's key and records the winner's).
A document made from attachments lives while a live attachment refers to it (pending, ingesting or
ingested); recording an attachment as ingested and withdrawing a document (`delete_conversation`)
both take the document's lock first, so neither can act on a stale view of the other.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from knowledge.errors import TRANSIENT_PARSER_REASONS, KnowledgeError
from knowledge.models import ArtifactOrigin, ArtifactRef, AttachmentState, Principal, TrustLevel
from knowledge.parsers.base import base_media_type
from knowledge.parsers.sniff import routed, sniff_media_type
from knowledge.store.artifacts import collect_bytes, insert_artifact, store_retrying
from knowledge.store.attachment_queue import (
    AttachmentStatus,
    ClaimedAttachment,
    MarkCandidate,
    Marking,
    Settlement,
    claim_attachments,
    lease_holder,
    mark_read,
    overview_rows,
    record_marks,
    release_attachment,
    renew_leases,
    seconds_until_due,
    set_inspection,
    settle_attachments,
    state_counts,
    status_row,
)
from knowledge.store.db import Connection, Database
from knowledge.store.deletion import withdraw_unreferenced
from knowledge.store.documents import count_outcome
from knowledge.store.locks import lock_documents
from knowledge.vocabulary import WRITE_SCOPE

PDF = "application/pdf"
#: The namespace of attachment document ids (uuid5); never change it: ids would stop matching.
ATTACHMENT_NAMESPACE = uuid.UUID("5b0f3c1e-8a4d-5d2e-9c61-7e2f0a120ada")
#: Refusal reasons of the ingest that are really transient (the parser pool's own failures).
TRANSIENT_REFUSALS = TRANSIENT_PARSER_REASONS

_IDENT = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$"
_FROZEN = ConfigDict(frozen=True, extra="forbid")


def attachment_document_id(tenant_id: str, principal_id: str, sha256: str) -> uuid.UUID:
    """The document an attachment becomes: a name-based UUID (uuid5) of the tenant, the principal and
    the file's SHA-256, so the same file sent twice by the same principal is one document."""
    return uuid.uuid5(ATTACHMENT_NAMESPACE, json.dumps([tenant_id, principal_id, sha256]))


class SurfaceActor(BaseModel):
    """A message a surface (an integration, a channel bridge) sent: it never marks an attachment."""

    model_config = _FROZEN

    tenant_id: str = Field(pattern=_IDENT)
    surface_id: str = Field(min_length=1, max_length=256)


class SchedulerActor(BaseModel):
    """A message the scheduler sent (a scheduled run): it never marks an attachment."""

    model_config = _FROZEN

    tenant_id: str = Field(pattern=_IDENT)
    schedule_id: str | None = Field(default=None, max_length=256)


#: Who sent a message: the principal itself, a surface, or the scheduler.
MessageActor = Principal | SurfaceActor | SchedulerActor


class NotMarked(StrEnum):
    """Why an attachment passed to `mark_attachments` was not marked pending."""

    ACTOR_NOT_PRINCIPAL = "actor_not_principal"  # a surface or scheduler message
    MISSING_SCOPE = "missing_scope"  # the principal lacks knowledge.write
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    NOT_AN_UPLOAD = "not_an_upload"  # only uploaded files are attachments
    ARTIFACT_NOT_FOUND = "artifact_not_found"  # absent from the tenant, or expired
    ALREADY_MARKED = "already_marked"  # an earlier send marked it; its state is reported as is


class AttachmentMark(BaseModel):
    """What marking did to one attachment: its state afterwards (None: not an ingestion candidate)
    and, when it was not marked pending by this call, why (`NotMarked`, or an inspection refusal)."""

    model_config = _FROZEN

    artifact_id: uuid.UUID
    state: AttachmentState | None
    reason: str | None = None


class QueueOverview(BaseModel):
    """A tenant's attachments as an operator audits them (`AttachmentQueue.overview`): live attachments
    by state, refusal and failure reasons, and the signs of a worker that is gone — an ``ingesting``
    attachment whose lease expired (its worker died or stalls; another worker takes it over) and the
    age of the oldest pending one (no worker is draining the queue)."""

    model_config = _FROZEN

    by_state: dict[str, int]
    reasons: dict[str, dict[str, int]]  # state ("refused" | "failed") -> reason -> count
    expired_leases: int
    oldest_pending_seconds: float | None


#: The parser pool's upload inspection (`ParserPool.inspect`): a dict, or a typed refusal/failure.
Inspect = Callable[[bytes], Awaitable[dict[str, Any]]]


async def inspection_marker(inspect: Inspect, data: bytes) -> dict[str, Any]:
    """Run upload inspection and return the marker kept on the artifact: ``{"ok": true, "pages": …,
    "encrypted": false, "has_outline": …, "pdf_version": …}`` or ``{"ok": false, "reason": …,
    "transient": …}``. Never raises for the PDF's own faults. Cancellation: the child is killed and
    reaped first (`ParserPool.inspect`), then it propagates."""
    try:
        found = await inspect(data)
    except KnowledgeError as exc:  # ExtractionRefused, ParserFailure
        return {"ok": False, "reason": exc.reason, "transient": bool(getattr(exc, "transient", False))}
    return {"ok": True, **found}


async def upload_attachment(db: Database, inspect: Inspect, tenant_id: str, data: bytes | AsyncIterable[bytes], *,
                            media_type: str, file_name: str | None, max_bytes: int,
                            expires_at: datetime | None = None) -> ArtifactRef:
    """Store a chat attachment: an ``UPLOAD`` artifact, trust ``EXTERNAL_UNTRUSTED``. A PDF is
    inspected first (`inspection_marker`, 10 s) and the marker is stored with it, in one
    transaction (retried after a transient fault, `store_retrying`). Raises `ArtifactTooLarge` above
    ``max_bytes``. Cancellation: nothing is stored."""
    content = await collect_bytes(data, max_bytes)
    media_type = routed(media_type, sniff_media_type(content, media_type))  # what the bytes are
    marker = await inspection_marker(inspect, content) if base_media_type(media_type) == PDF else None

    async def write(tx: Connection, artifact_id: uuid.UUID) -> ArtifactRef:
        ref = await insert_artifact(tx, tenant_id, content, media_type=media_type, origin=ArtifactOrigin.UPLOAD,
                                    trust=TrustLevel.EXTERNAL_UNTRUSTED, file_name=file_name, expires_at=expires_at,
                                    artifact_id=artifact_id)
        if marker is not None:
            await set_inspection(tx, tenant_id=tenant_id, artifact_id=ref.artifact_id, marker=marker)
        return ref

    return await store_retrying(db, tenant_id, write)  # transient faults retried, the inspection not repeated


def _decide(actor: MessageActor, found: MarkCandidate,
            media_types: set[str]) -> tuple[AttachmentState | None, str | None]:
    """The marking rule for one attachment (pure): the state to record and why."""
    if found.state is not None:
        return found.state, NotMarked.ALREADY_MARKED.value
    if not isinstance(actor, Principal):
        return None, NotMarked.ACTOR_NOT_PRINCIPAL.value
    if not actor.has_scope(WRITE_SCOPE):
        return None, NotMarked.MISSING_SCOPE.value
    if found.origin is not ArtifactOrigin.UPLOAD:
        return None, NotMarked.NOT_AN_UPLOAD.value
    if base_media_type(found.media_type) not in media_types:  # kept for a later extractor, as an ingest's source
        return AttachmentState.AWAITING_EXTRACTOR, NotMarked.UNSUPPORTED_MEDIA_TYPE.value
    inspection = found.inspection
    if inspection is not None and not inspection.get("ok", True) and not inspection.get("transient", False):
        return AttachmentState.REFUSED, str(inspection.get("reason") or "pdf_unreadable")
    return AttachmentState.PENDING, None


async def mark_attachments(db: Database, actor: MessageActor, artifact_ids: Iterable[uuid.UUID], *,
                           conversation_id: str, media_types: set[str]) -> list[AttachmentMark]:
    """Mark a sent message's attachments (see the module docstring); one result per id, in order.
    A pending attachment records its principal and the document it is to become.

    Idempotent: an attachment an earlier call marked keeps its state. One transaction.
    Cancellation: it rolls back; nothing is marked.
    """
    ids = list(dict.fromkeys(artifact_ids))
    supported = {base_media_type(m) for m in media_types}
    principal_id = actor.principal_id if isinstance(actor, Principal) else None
    marks: dict[uuid.UUID, AttachmentMark] = {}
    async with db.transaction() as tx:
        fresh: list[Marking] = []
        for found in await mark_read(tx, tenant_id=actor.tenant_id, artifact_ids=ids):
            state, reason = _decide(actor, found, supported)
            marks[found.artifact_id] = AttachmentMark(artifact_id=found.artifact_id, state=state, reason=reason)
            if state is None or reason == NotMarked.ALREADY_MARKED.value:
                fresh.append(Marking(artifact_id=found.artifact_id))  # recorded with the conversation only
            else:
                assert principal_id is not None
                fresh.append(Marking(artifact_id=found.artifact_id, state=state, reason=reason,
                                     document_id=attachment_document_id(actor.tenant_id, principal_id, found.sha256)))
        await record_marks(tx, tenant_id=actor.tenant_id, conversation_id=conversation_id,
                           principal_id=principal_id, marks=fresh)
        for mark in marks.values():  # a file the service cannot read is a refusal by cause, like an ingest's
            if mark.reason == NotMarked.UNSUPPORTED_MEDIA_TYPE.value:
                await count_outcome(tx, actor.tenant_id, "refused", mark.reason)
    return [marks.get(i) or AttachmentMark(artifact_id=i, state=None, reason=NotMarked.ARTIFACT_NOT_FOUND.value)
            for i in ids]


# --- The queue -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A claimed attachment: the worker holds its lease until it settles it."""

    source: ArtifactRef
    worker_id: str
    attempt: int  # this attempt's number, 1-based (retries are attempts 2..)
    principal_id: str  # who sent it ("" only for a row marked by hand, which the worker refuses)
    document_id: uuid.UUID  # the document it is to become (`attachment_document_id`)
    document_exists: bool  # that document was live when claimed: the same file, sent before
    conversation_id: str | None
    upload_seq: int
    taken_over_from: str | None  # the worker whose lease had expired, when this is a takeover
    exhausted: bool = False  # a takeover of the last allowed attempt: to be recorded failed, not run

    @property
    def tenant_id(self) -> str:
        return self.source.tenant_id

    @property
    def artifact_id(self) -> uuid.UUID:
        return self.source.artifact_id

    @property
    def title(self) -> str:
        name = (self.source.file_name or "").strip()
        return name[:1024] if name else f"attachment {self.source.sha256[:12]}"


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended: ``ingested`` (its document exists), ``refused`` (never retried),
    ``retry`` (transient; retried after a backoff while retries remain) or ``failed``."""

    kind: Literal["ingested", "refused", "retry", "failed"]
    reason: str | None = None


#: What settling a claim found: the attachment's new state, or why it was not the claimer's to settle.
Settled = Literal["ingested", "refused", "pending", "failed", "lease_lost", "withdrawn", "released"]

_STATE_OF: dict[str, Settled] = {"ingested": "ingested", "refused": "refused", "retry": "pending", "failed": "failed"}

def _claim_of(claimed: ClaimedAttachment, worker_id: str) -> Claim:
    principal_id = claimed.attached_by or ""
    source = claimed.source
    return Claim(
        source=source, worker_id=worker_id, attempt=claimed.attempts, principal_id=principal_id,
        document_id=claimed.document_id or attachment_document_id(source.tenant_id, principal_id, source.sha256),
        document_exists=claimed.document_exists, conversation_id=claimed.conversation_id,
        upload_seq=claimed.upload_seq,
        taken_over_from=claimed.previous_owner if claimed.previous_state is AttachmentState.INGESTING else None,
        exhausted=claimed.exhausted,
    )


class AttachmentQueue:
    """The attachments' work queue, in the ``artifacts`` table. Every method is one statement or one
    short transaction; none is held across an ingest, and none locks an attachment's row for longer
    than its own statement (claims skip rows being claimed)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def claim(self, worker_id: str, lease_seconds: float, tenant_id: str | None = None, *,
                    max_attempts: int = 4, limit: int = 1) -> list[Claim]:
        """Claim up to ``limit`` claimable attachments, first in upload order — pending and due, or
        ingesting under an expired lease (a takeover) — each under its own lease for ``worker_id``;
        empty when nothing is claimable. Workers skip each other's rows being claimed (``SKIP
        LOCKED``). A takeover of attempt ``max_attempts`` is not a new attempt: the claim is
        ``exhausted``. Cancellation: the statement rolls back; nothing is claimed."""
        claimed = await claim_attachments(self._db, worker_id=worker_id, lease_seconds=lease_seconds,
                                          tenant_id=tenant_id, max_attempts=max_attempts, limit=limit)
        claims = [_claim_of(c, worker_id) for c in claimed]
        return sorted(claims, key=lambda c: c.upload_seq)

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> set[uuid.UUID]:
        """Extend the leases of one worker's claims in one statement; return the attachments still
        the worker's (a claim is not once it expired and another worker took it over, or its
        conversation was deleted)."""
        if not claims:
            return set()
        return await renew_leases(self._db, tenant_ids=sorted({c.tenant_id for c in claims}),
                                  artifact_ids=[c.artifact_id for c in claims], worker_id=claims[0].worker_id,
                                  lease_seconds=lease_seconds)

    async def settle(self, claims: Sequence[Claim], outcomes: Sequence[Outcome], *, max_attempts: int,
                     backoff: Callable[[int], float]) -> list[Settled]:
        """Record each claim's outcome and release its lease, in one transaction. ``ingested`` is
        recorded only while the document is live, checked under the document's lock (taken for
        every such document first, in one order; else the attempt is a transient
        ``document_withdrawn``); a ``retry`` after ``max_attempts`` attempts is recorded ``failed``
        with its reason; otherwise the attachment is ``pending`` again after ``backoff(attempt)``
        seconds. Returns each claim's new state, or ``lease_lost``/``withdrawn`` for one that was no
        longer its claimer's (`_unheld`). All claims are one worker's. Cancellation: it rolls back;
        the leases stay held until released or expired."""
        if not claims:
            return []
        final = [Outcome("failed", o.reason) if o.kind == "retry" and c.attempt >= max_attempts else o
                 for c, o in zip(claims, outcomes, strict=True)]
        states = [_STATE_OF[o.kind] for o in final]
        async with self._db.transaction() as tx:
            await lock_documents(tx, [(c.tenant_id, c.document_id)
                                      for c, s in zip(claims, states, strict=True) if s == "ingested"])
            done = await settle_attachments(tx, worker_id=claims[0].worker_id, settlements=[
                Settlement(tenant_id=c.tenant_id, artifact_id=c.artifact_id, state=s, reason=o.reason,
                           document_id=c.document_id if s == "ingested" else None,
                           delay=float(backoff(c.attempt)) if s == "pending" else 0.0, outcome=o.kind)
                for c, o, s in zip(claims, final, states, strict=True)])
        settled: list[Settled] = []
        for claim, state in zip(claims, states, strict=True):
            if claim.artifact_id in done:
                settled.append(state)
            elif (unheld := await self._unheld(claim)) is not None:
                settled.append(unheld)
            else:  # still ours: the document was withdrawn after the ingest committed
                settled.extend(await self.settle([claim], [Outcome("retry", "document_withdrawn")],
                                                 max_attempts=max_attempts, backoff=backoff))
        return settled

    async def release(self, claim: Claim) -> Settled:
        """Give a claim back unfinished (the worker is stopping): ``pending`` again at once, this
        attempt not counted; a claim whose attachment was withdrawn meanwhile withdraws what it may
        have made. Call it shielded."""
        if await release_attachment(self._db, tenant_id=claim.tenant_id, artifact_id=claim.artifact_id,
                                    worker_id=claim.worker_id):
            return "released"
        return await self._unheld(claim) or "lease_lost"

    async def _unheld(self, claim: Claim) -> Literal["lease_lost", "withdrawn"] | None:
        """Why a claim could not be settled: ``withdrawn`` — the attachment is gone or expired (its
        conversation was deleted), and the document this claim may have made is withdrawn unless a
        live attachment still refers to it; ``lease_lost`` — another worker holds it; None — it is
        still this claim's."""
        holder = await lease_holder(self._db, tenant_id=claim.tenant_id, artifact_id=claim.artifact_id)
        if holder is None or not holder.live:
            async with self._db.transaction() as tx:
                await withdraw_unreferenced(tx, claim.tenant_id, [claim.document_id],
                                            {"cause": "attachment_withdrawn", "artifact_id": str(claim.artifact_id)})
            return "withdrawn"
        if holder.lease_owner != claim.worker_id or holder.state is not AttachmentState.INGESTING:
            return "lease_lost"
        return None

    async def next_due(self, tenant_id: str | None = None) -> float | None:
        """Seconds until some attachment may become claimable (a retry's backoff ends, a lease
        expires; 0 or less: now), or None when none is pending or ingesting."""
        return await seconds_until_due(self._db, tenant_id=tenant_id)

    async def counts(self, tenant_id: str | None = None) -> dict[str, int]:
        """Live attachments by state (the queue depth is ``pending`` + ``ingesting``)."""
        return await state_counts(self._db, tenant_id=tenant_id)

    async def overview(self, tenant_id: str) -> QueueOverview:
        """`QueueOverview` of one tenant's live attachments, in one statement."""
        groups = await overview_rows(self._db, tenant_id=tenant_id)
        by_state: dict[str, int] = {}
        reasons: dict[str, dict[str, int]] = {}
        oldest = [g.oldest_pending_seconds for g in groups if g.oldest_pending_seconds is not None]
        for g in groups:
            by_state[g.state.value] = by_state.get(g.state.value, 0) + g.count
            if g.state in (AttachmentState.REFUSED, AttachmentState.FAILED, AttachmentState.AWAITING_EXTRACTOR) \
                    and g.reason:
                reasons.setdefault(g.state.value, {})[g.reason] = g.count
        return QueueOverview(by_state=by_state, reasons=reasons, expired_leases=sum(g.expired_leases for g in groups),
                             oldest_pending_seconds=max(oldest) if oldest else None)

    async def status(self, tenant_id: str, artifact_id: uuid.UUID) -> AttachmentStatus | None:
        """One attachment's state, attempts, history and document; None if the artifact is gone."""
        return await status_row(self._db, tenant_id=tenant_id, artifact_id=artifact_id)
