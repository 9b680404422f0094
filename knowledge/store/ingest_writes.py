"""The ingest path's statements (`knowledge.store.documents`) run end to end: typed functions with named
arguments that return domain values, so the shells (`knowledge.ingest.ingestor`, `knowledge.ingest.bulk`)
never build a positional tuple or read a column. Chunk identity (`knowledge.core.chunking.chunk_id`) is
decided here, from the prepared chunks, as their rows are written."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from knowledge.core.prepare import PreparedDocument
from knowledge.models import ArtifactRef
from knowledge.store.artifacts import ref_from_row
from knowledge.store.db import Connection, Database
from knowledge.store.documents import (
    BULK_SQL,
    CHUNK_SET,
    CHUNKS_SQL,
    COMMITTED,
    END_LIVE_SET,
    INGEST_SQL,
    INSERT_CHUNK_SET,
    LIVE_DOCUMENT,
    LIVE_VERSION,
    NOW,
    QUEUE_SET_SQL,
    RECHUNKED_EVENT,
    REVIVE_CHUNK_SET,
    SET_CHUNKER_VERSION,
    chunk_columns,
)
from knowledge.vocabulary import INGESTED_EVENT


@dataclass(frozen=True)
class DocumentWrite:
    """One document version as an ingest writes it: the uploaded input it is copied from (its id and
    SHA-256 must still match), who wrote it and how it may be seen, and its prepared chunk set."""

    source: ArtifactRef
    document_id: uuid.UUID
    version: int
    principal_id: str
    visibility: str
    project_scope: str | None
    title: str
    doc_date: date | None
    authority: str
    sensitivity: str
    prepared: PreparedDocument

    def event_payload(self) -> str:
        """The ingested event's payload (the statement adds the retained source's id)."""
        return json.dumps({"chunk_count": len(self.prepared.chunks), "chunker_version": self.prepared.chunker_version,
                           "source_sha256": self.source.sha256, "media_type": self.source.media_type,
                           "instruction_like_chunks": self.prepared.instruction_like_count})


@dataclass(frozen=True)
class Written:
    """What a write found: the retained copy of the source (None: the input vanished or changed) and
    when the document was ingested (None: a document with that id and version exists already)."""

    source: ArtifactRef | None
    ingested_at: datetime | None


def _written(row: Any) -> Written:
    if row is None or row["artifact_id"] is None:
        return Written(None, None)
    return Written(ref_from_row(row), row["ingested_at"])


async def write_document(tx: Connection, *, tenant_id: str, document: DocumentWrite,
                         embed_version: str | None) -> Written:
    """The whole ingest of one document in one statement (`INGEST_SQL`): the source's retained copy
    (made inside the server), the document, its chunk set and chunks with their index rows and
    postings, the event, the outcome counter and — with ``embed_version`` — the embedding queue row.
    Every write or none of them."""
    prepared = document.prepared
    columns = chunk_columns(tenant_id, document.document_id, document.version, prepared)
    row = await tx.fetchrow(
        INGEST_SQL, tenant_id, document.source.artifact_id, uuid.uuid4(), document.source.sha256,
        document.document_id, document.version, document.principal_id, document.visibility, document.project_scope,
        document.title, document.doc_date, document.authority, prepared.chunker_version, document.sensitivity,
        len(prepared.chunks), INGESTED_EVENT, document.event_payload(), *columns[4:], embed_version)
    return _written(row)


async def write_documents(tx: Connection, *, tenant_id: str, documents: Sequence[DocumentWrite],
                          embed_version: str | None) -> dict[uuid.UUID, Written]:
    """Every document of a group (all new: version 1) in one statement (`BULK_SQL`), by document id.
    A document whose id exists writes nothing, nor do its chunks: the caller rolls the group back."""
    docs: list[list[Any]] = [[] for _ in range(14)]
    chunks: list[list[Any]] = [[] for _ in range(9)]
    for d in documents:
        prepared = d.prepared
        for column, value in zip(docs, (
                d.source.artifact_id, uuid.uuid4(), d.source.sha256, d.document_id, d.principal_id, d.visibility,
                d.project_scope, d.title, d.doc_date, d.authority, prepared.chunker_version, d.sensitivity,
                len(prepared.chunks), d.event_payload()), strict=True):
            column.append(value)
        chunks[0].extend([d.document_id] * len(prepared.chunks))
        chunks[1].extend([prepared.chunker_version] * len(prepared.chunks))
        for target, values in zip(chunks[2:], chunk_columns(tenant_id, d.document_id, 1, prepared)[4:], strict=True):
            target.extend(values)
    rows = await tx.fetch(BULK_SQL, tenant_id, *docs, INGESTED_EVENT, embed_version, *chunks)
    return {row["document_id"]: _written(row) for row in rows}


@dataclass(frozen=True)
class CommittedVersion:
    """A document version an attempt wrote, found after its COMMIT's answer was lost."""

    source: ArtifactRef
    chunker_version: str
    ingested_at: datetime


async def committed_version(db: Database, *, tenant_id: str, document_id: uuid.UUID, version: int,
                            principal_id: str, source_sha256: str) -> CommittedVersion | None:
    """The version, if it exists as that attempt would have written it: same id and version, by the
    same principal, from a source with the same SHA-256 (`COMMITTED`)."""
    row = await db.fetchrow(COMMITTED, tenant_id, document_id, version, principal_id, source_sha256)
    if row is None:
        return None
    return CommittedVersion(ref_from_row(row), row["chunker_version"], row["ingested_at"])


@dataclass(frozen=True)
class LiveVersion:
    """A document's live version as a re-chunk reads it."""

    version: int
    source_artifact_id: uuid.UUID
    title: str
    chunker_version: str
    ingested_by: str


async def live_version(db: Database | Connection, *, tenant_id: str, document_id: uuid.UUID) -> LiveVersion | None:
    """The document's live version (`LIVE_DOCUMENT`), or None."""
    row = await db.fetchrow(LIVE_DOCUMENT, tenant_id, document_id)
    if row is None:
        return None
    return LiveVersion(int(row["version"]), row["source_artifact_id"], row["title"], row["chunker_version"],
                       row["ingested_by_principal_id"])


async def live_version_number(tx: Connection, *, tenant_id: str, document_id: uuid.UUID) -> int | None:
    """The live version's number (`LIVE_VERSION`; re-read under the document's lock), or None."""
    found = await tx.fetchval(LIVE_VERSION, tenant_id, document_id)
    return None if found is None else int(found)


async def chunk_set_live(tx: Connection, *, tenant_id: str, document_id: uuid.UUID, version: int,
                         chunker_version: str) -> bool | None:
    """Whether the version's chunk set under ``chunker_version`` is live (True), superseded (False), or
    absent (None) (`CHUNK_SET`)."""
    row = await tx.fetchrow(CHUNK_SET, tenant_id, document_id, version, chunker_version)
    return None if row is None else row["superseded_at"] is None


async def switch_chunk_set(tx: Connection, *, tenant_id: str, document_id: uuid.UUID, version: int,
                           prepared: PreparedDocument, revive: bool, embed_version: str | None,
                           principal_id: str, from_chunker_version: str) -> None:
    """Make ``prepared``'s chunk set the version's live one, at the transaction's clock: the live set
    ends; the new set and its chunks are written — or, with ``revive``, the set the version had under
    that chunker version is live again (its earlier periods kept for ``as_of``); with
    ``embed_version`` the set is queued for the semantic arm; the document records its chunker
    version; and the re-chunk's event is written."""
    chunker_version = prepared.chunker_version
    now = await tx.fetchval(NOW)
    await tx.execute(END_LIVE_SET, tenant_id, document_id, version, now)
    if revive:
        await tx.execute(REVIVE_CHUNK_SET, tenant_id, document_id, version, chunker_version, now)
    else:
        await tx.execute(INSERT_CHUNK_SET, tenant_id, document_id, version, chunker_version, len(prepared.chunks), now)
        await tx.execute(CHUNKS_SQL, *chunk_columns(tenant_id, document_id, version, prepared))
    if embed_version is not None:  # (a set made live again: only its chunks without vectors)
        await tx.execute(QUEUE_SET_SQL, tenant_id, document_id, version, chunker_version, embed_version,
                         len(prepared.chunks))
    await tx.execute(SET_CHUNKER_VERSION, tenant_id, document_id, version, chunker_version)
    await tx.execute(RECHUNKED_EVENT, tenant_id, document_id, version, principal_id,
                     json.dumps({"from": from_chunker_version, "to": chunker_version,
                                 "chunk_count": len(prepared.chunks)}))
