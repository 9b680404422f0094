"""The artifact store: bytes in, the same bytes out, bounded, tenant-scoped, expired and swept."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from knowledge.errors import ArtifactError, ArtifactNotFound, ArtifactTooLarge
from knowledge.models import ArtifactOrigin, TrustLevel
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from tests.helpers.kit import Kit


@pytest.mark.anyio
async def test_put_and_stream_back_large_artifact(service: KnowledgeService, kit: Kit, tenant: str) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)  # several read slices, not a multiple of the slice size

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(data), 65536):
            yield data[i:i + 65536]

    ref = await service.put_artifact(tenant, chunks(), media_type="application/octet-stream",
                                      origin=ArtifactOrigin.UPLOAD, trust=TrustLevel.EXTERNAL_UNTRUSTED,
                                      file_name="blob.bin")
    assert ref.size_bytes == len(data) and ref.sha256 == hashlib.sha256(data).hexdigest()
    # The spec's thirty-day default, from every path that puts a source.
    assert ref.expires_at is not None and ref.file_name == "blob.bin"
    assert ref.expires_at - ref.created_at == timedelta(days=30)  # from one instant
    slices = [part async for part in kit.artifacts.stream(ref)]
    assert len(slices) == 4
    assert b"".join(slices) == data
    assert await service.artifact_ref(tenant, ref.artifact_id) == ref


@pytest.mark.anyio
async def test_empty_artifact_round_trips(service: KnowledgeService, tenant: str) -> None:
    ref = await service.put_artifact(tenant, b"", media_type="text/plain")
    assert await service.read_artifact(ref) == b""


@pytest.mark.anyio
async def test_too_large_is_refused_and_writes_nothing(service: KnowledgeService, sql: Database, tenant: str) -> None:
    limit = service.settings.max_artifact_bytes
    with pytest.raises(ArtifactTooLarge) as info:
        await service.put_artifact(tenant, b"x" * (limit + 1), media_type="text/plain")
    assert info.value.reason == "artifact_too_large"

    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b"y" * 1024 * 1024

    with pytest.raises(ArtifactTooLarge):
        async with contextlib.aclosing(endless()) as chunks:  # the caller closes what it made
            await service.put_artifact(tenant, chunks, media_type="text/plain")
    assert await sql.fetchval("SELECT count(*) FROM artifacts WHERE tenant_id = $1", tenant) == 0


@pytest.mark.anyio
async def test_artifacts_are_tenant_scoped(service: KnowledgeService, tenant: str) -> None:
    ref = await service.put_artifact(tenant, b"mine", media_type="text/plain")
    with pytest.raises(ArtifactNotFound):
        await service.artifact_ref(tenant + "-other", ref.artifact_id)
    foreign = ref.model_copy(update={"tenant_id": tenant + "-other"})
    with pytest.raises(ArtifactNotFound):
        await service.read_artifact(foreign)


@pytest.mark.anyio
async def test_expiry_hides_then_sweeper_deletes_the_bytes(service: KnowledgeService, kit: Kit, sql: Database,
                                                            tenant: str) -> None:
    keep = await service.put_artifact(tenant, b"keep", media_type="text/plain")
    later = await service.put_artifact(tenant, b"later", media_type="text/plain",
                                        expires_at=datetime.now(UTC) + timedelta(days=30))
    gone = await service.put_artifact(tenant, b"gone", media_type="text/plain")
    await kit.artifacts.set_expiry(tenant, gone.artifact_id, datetime.now(UTC))
    with pytest.raises(ArtifactNotFound):  # expired: unreadable even before the sweep
        await service.read_artifact(gone)
    assert await service.sweep_artifacts() >= 1
    assert await sql.fetchval(
        "SELECT count(*) FROM artifacts WHERE tenant_id = $1 AND artifact_id = $2", tenant, gone.artifact_id) == 0
    assert await service.read_artifact(keep) == b"keep"
    assert await service.read_artifact(later) == b"later"
    with pytest.raises(ArtifactNotFound):
        await kit.artifacts.set_expiry(tenant, gone.artifact_id, None)


@pytest.mark.anyio
async def test_corrupted_bytes_are_detected(service: KnowledgeService, sql: Database, tenant: str) -> None:
    ref = await service.put_artifact(tenant, b"original", media_type="text/plain")
    await sql.execute("UPDATE artifacts SET content = 'tampered'::bytea WHERE tenant_id = $1", tenant)
    with pytest.raises(ArtifactError) as info:
        await service.read_artifact(ref)
    assert info.value.reason == "artifact_corrupt"
