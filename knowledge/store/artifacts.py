"""The artifact store: bytes in PostgreSQL, handed around as `ArtifactRef`.

Bytes live in the ``artifacts`` table (``bytea``, stored uncompressed out of line) so that
one transaction covers a document and its source. A source may be at most
``Settings.max_artifact_bytes`` (32 MiB by default). An artifact is immutable once put; only
its expiry and attachment marks change. The sweeper deletes expired artifacts, bytes and row.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

import anyio

from knowledge.errors import ArtifactError, ArtifactNotFound, ArtifactTooLarge
from knowledge.models import ArtifactOrigin, ArtifactRef, TrustLevel
from knowledge.store.db import Connection, Database, Record, UniqueViolation, is_transient
from knowledge.store.retry import retry_transient

_log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 1024 * 1024
#: The spec's thirty-day default: how long a put artifact lives unless its caller says otherwise.
DEFAULT_LIFETIME_DAYS = 30
#: An artifact opened for reading: its ref and a stream of its bytes (`ArtifactStore.open_read`).
Opened = tuple[ArtifactRef, AsyncIterator[bytes]]

REF_COLUMNS = (
    "tenant_id, artifact_id, origin, trust, sha256, size_bytes, media_type, file_name, created_at, expires_at"
)


def ref_columns(alias: str) -> str:
    """`REF_COLUMNS` qualified by a table alias (``a.tenant_id, a.artifact_id, …``)."""
    return ", ".join(f"{alias}.{c.strip()}" for c in REF_COLUMNS.split(","))


# An artifact past its expiry is gone to readers even before the sweeper reaches it.
LIVE = "(expires_at IS NULL OR expires_at > clock_timestamp())"


def ref_from_row(row: Record) -> ArtifactRef:
    return ArtifactRef(
        tenant_id=row["tenant_id"],
        artifact_id=row["artifact_id"],
        origin=ArtifactOrigin(row["origin"]),
        trust=TrustLevel(row["trust"]),
        sha256=row["sha256"],
        size_bytes=row["size_bytes"],
        media_type=row["media_type"],
        file_name=row["file_name"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
    )


async def collect_bytes(data: bytes | AsyncIterable[bytes], limit: int) -> bytes:
    """Gather ``data`` into one buffer, refusing anything above ``limit`` bytes."""
    if isinstance(data, bytes | bytearray | memoryview):
        buf = bytes(data)
        if len(buf) > limit:
            raise ArtifactTooLarge(message=f"{len(buf)} bytes exceeds the {limit}-byte limit")
        return buf
    parts: list[bytes] = []
    size = 0
    async for part in data:
        size += len(part)
        if size > limit:
            raise ArtifactTooLarge(message=f"more than the {limit}-byte limit")
        parts.append(bytes(part))
    return b"".join(parts)


async def insert_artifact(
    conn: Connection,
    tenant_id: str,
    content: bytes,
    *,
    media_type: str,
    origin: ArtifactOrigin,
    trust: TrustLevel,
    file_name: str | None = None,
    expires_at: datetime | None = None,
    artifact_id: UUID | None = None,
) -> ArtifactRef:
    """Insert an artifact on ``conn`` (inside the caller's transaction, if any). ``expires_at`` None:
    the spec's thirty-day default (`DEFAULT_LIFETIME_DAYS`) from every path that puts one — a
    library ``put``, an attachment, the command line; only a document's own source copy (written by
    the ingest, `knowledge.store.documents`) has none, and `ArtifactStore.set_expiry` can clear it."""
    row = await conn.fetchrow(
        f"""INSERT INTO artifacts (tenant_id, artifact_id, origin, trust, sha256, size_bytes,
                                   media_type, file_name, content, created_at, expires_at)
            SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, t.at,
                   COALESCE($10, t.at + interval '{DEFAULT_LIFETIME_DAYS} days')
            FROM (SELECT clock_timestamp() AS at) AS t  -- one instant: the default is exactly 30 days
            RETURNING {REF_COLUMNS}""",
        tenant_id, artifact_id or uuid4(), origin.value, trust.value, hashlib.sha256(content).hexdigest(),
        len(content), media_type, file_name, content, expires_at,
    )
    assert row is not None
    return ref_from_row(row)


async def store_retrying(db: Database, tenant_id: str,
                         write: Callable[[Connection, UUID], Awaitable[ArtifactRef]]) -> ArtifactRef:
    """Run ``write(tx, artifact_id)`` (which inserts that artifact) in a transaction, retrying
    transient faults with the same new artifact id (`knowledge.store.retry`): after a COMMIT of unknown
    outcome, a retry that finds the id taken returns the artifact already stored. Cancellation:
    either the artifact was committed or nothing was written."""
    artifact_id = uuid4()
    faulted = False

    async def attempt() -> ArtifactRef:
        nonlocal faulted
        try:
            async with db.transaction() as tx:
                return await write(tx, artifact_id)
        except UniqueViolation:
            if not faulted:
                raise
            row = await db.fetchrow(f"SELECT {REF_COLUMNS} FROM artifacts WHERE tenant_id = $1 AND artifact_id = $2",
                                    tenant_id, artifact_id)
            if row is None:
                raise
            return ref_from_row(row)
        except Exception as exc:
            faulted = faulted or is_transient(exc)
            raise

    return await retry_transient(f"storing an artifact of {tenant_id}", attempt)


class ArtifactStore:
    """Put, read back, expire and sweep artifacts. Every method is tenant-scoped."""

    def __init__(self, db: Database, max_bytes: int) -> None:
        self._db = db
        self.max_bytes = max_bytes

    async def put(
        self,
        tenant_id: str,
        data: bytes | AsyncIterable[bytes],
        *,
        media_type: str,
        origin: ArtifactOrigin = ArtifactOrigin.UPLOAD,
        trust: TrustLevel = TrustLevel.EXTERNAL_UNTRUSTED,
        file_name: str | None = None,
        expires_at: datetime | None = None,
    ) -> ArtifactRef:
        """Store ``data`` and return its ref. Refuses above ``max_bytes`` (`ArtifactTooLarge`). It
        expires at ``expires_at``, by default thirty days from now (`insert_artifact`).

        A transient database fault is retried with the same artifact id (`store_retrying`).
        Cancellation: either the artifact was committed or nothing was written.
        """
        content = await collect_bytes(data, self.max_bytes)

        async def write(tx: Connection, artifact_id: UUID) -> ArtifactRef:
            return await insert_artifact(tx, tenant_id, content, media_type=media_type, origin=origin, trust=trust,
                                         file_name=file_name, expires_at=expires_at, artifact_id=artifact_id)

        return await store_retrying(self._db, tenant_id, write)

    async def get_ref(self, tenant_id: str, artifact_id: UUID) -> ArtifactRef:
        """The ref of a live artifact; `ArtifactNotFound` if absent, expired or swept."""
        row = await self._db.fetchrow(
            f"SELECT {REF_COLUMNS} FROM artifacts WHERE tenant_id = $1 AND artifact_id = $2 AND {LIVE}",
            tenant_id, artifact_id,
        )
        if row is None:
            raise ArtifactNotFound(message=f"artifact {artifact_id} of tenant {tenant_id}")
        return ref_from_row(row)

    async def open_read(self, tenant_id: str, artifact_id: UUID) -> tuple[ArtifactRef, AsyncIterator[bytes]]:
        """The ref of a live artifact and a stream of its bytes, the first slice fetched with the
        ref in one query (most sources fit in one slice). `ArtifactNotFound` if absent."""
        row = await self._db.fetchrow(
            f"""SELECT {REF_COLUMNS}, substring(content FROM 1 FOR $3) AS head
                FROM artifacts WHERE tenant_id = $1 AND artifact_id = $2 AND {LIVE}""",
            tenant_id, artifact_id, READ_CHUNK_BYTES,
        )
        if row is None:
            raise ArtifactNotFound(message=f"artifact {artifact_id} of tenant {tenant_id}")
        ref = ref_from_row(row)
        return ref, self.stream(ref, head=bytes(row["head"]))

    async def open_many(self, tenant_id: str, artifact_ids: Sequence[UUID]) -> dict[UUID, Opened]:
        """`open_read` for many artifacts in one query: the live ones' refs and streams, by id (an
        absent or expired one is missing from the result)."""
        rows = await self._db.fetch(
            f"""SELECT {REF_COLUMNS}, substring(content FROM 1 FOR $3) AS head
                FROM artifacts WHERE tenant_id = $1 AND artifact_id = ANY($2::uuid[]) AND {LIVE}""",
            tenant_id, list(artifact_ids), READ_CHUNK_BYTES,
        )
        opened: dict[UUID, Opened] = {}
        for row in rows:
            ref = ref_from_row(row)
            opened[ref.artifact_id] = (ref, self.stream(ref, head=bytes(row["head"])))
        return opened

    async def stream(self, ref: ArtifactRef, chunk_bytes: int = READ_CHUNK_BYTES, head: bytes = b""
                     ) -> AsyncIterator[bytes]:
        """The artifact's bytes as an async stream of slices, checked against its SHA-256.

        No connection is held between slices (each is one short query on immutable bytes), so
        a consumer that stops early or is cancelled leaves nothing checked out. Raises
        `ArtifactNotFound` if the artifact expires or is swept mid-read.
        """
        digest = hashlib.sha256(head)
        offset = len(head)
        if head:
            yield head
        while offset < ref.size_bytes:
            part = await self._db.fetchval(
                f"""SELECT substring(content FROM $3 FOR $4) FROM artifacts
                    WHERE tenant_id = $1 AND artifact_id = $2 AND {LIVE}""",
                ref.tenant_id, ref.artifact_id, offset + 1, chunk_bytes,
            )
            if part is None:
                raise ArtifactNotFound(message=f"artifact {ref.artifact_id} vanished while being read")
            digest.update(part)
            offset += len(part)
            yield bytes(part)
            if not part:
                break
        if offset != ref.size_bytes or digest.hexdigest() != ref.sha256:
            raise ArtifactError("artifact_corrupt", f"artifact {ref.artifact_id} does not match its sha256")

    async def read(self, ref: ArtifactRef) -> bytes:
        """All of the artifact's bytes (bounded by the store's size limit)."""
        return b"".join([part async for part in self.stream(ref)])

    async def set_expiry(self, tenant_id: str, artifact_id: UUID, expires_at: datetime | None) -> None:
        """Set (or clear, with None) when the sweeper may collect the artifact."""
        status = await self._db.execute(
            "UPDATE artifacts SET expires_at = $3 WHERE tenant_id = $1 AND artifact_id = $2",
            tenant_id, artifact_id, expires_at,
        )
        if status.endswith(" 0"):
            raise ArtifactNotFound(message=f"artifact {artifact_id} of tenant {tenant_id}")

    async def expire_now(self, tenant_id: str, artifact_ids: Sequence[UUID]) -> None:
        """Let the sweeper collect these artifacts (uploads that were only a vehicle), in one
        statement, shielded and bounded: an interrupted caller still expires what it put. Ids
        already gone are skipped. Best effort (cleanup, often in a ``finally``): a failure is
        logged, not raised — put such uploads with an expiry, and they go at that time anyway."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(10), _logged_failure("expiring uploads"):
            await self._db.execute(
                "UPDATE artifacts SET expires_at = clock_timestamp() WHERE tenant_id = $1 AND artifact_id = ANY($2)",
                tenant_id, list(artifact_ids))

    async def sweep(self, batch: int = 200) -> int:
        """Delete every expired artifact, bytes and row, in batches; return how many.

        Concurrent sweepers skip each other's rows. Cancellation: batches already committed stay
        deleted; the batch in flight rolls back and is collected by the next pass.
        """
        total = 0
        # Marks of sources awaiting an extractor that expired before their source (0014); a swept
        # source takes its mark with it (ON DELETE CASCADE).
        await self._db.execute("DELETE FROM awaiting_extractor WHERE expires_at <= clock_timestamp()")
        while True:
            rows: list[Any] = await self._db.fetch(
                """DELETE FROM artifacts WHERE (tenant_id, artifact_id) IN (
                       SELECT tenant_id, artifact_id FROM artifacts
                       WHERE expires_at <= clock_timestamp()
                       ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
                   RETURNING artifact_id""",
                batch,
            )
            total += len(rows)
            if len(rows) < batch:
                return total


@contextlib.contextmanager
def _logged_failure(what: str) -> Iterator[None]:
    try:
        yield
    except Exception:
        _log.warning("%s failed; the artifacts expire at their own expiry", what, exc_info=True)
