"""The main job: start the embedded database, migrate, put and read back an artifact, and
print the health check. Run with ``bash scripts/main.sh`` (or ``python -m knowledge.demo``)."""

from __future__ import annotations

import argparse
import json

import anyio

from knowledge.models import ArtifactOrigin, TrustLevel
from knowledge.service import KnowledgeService

SAMPLE = b"# Rollback\n\nRoll back by reverting the release tag and re-running the deploy job.\n"


async def run() -> None:
    async with KnowledgeService.open() as svc:
        server = svc.embedded_server
        if server is not None:
            kind = "cold (initdb)" if server.cold_start else ("joined running" if server.reused else "warm")
            print(f"embedded PostgreSQL: {server.pgdata}  {kind} start in {server.start_seconds:.2f}s")
        ref = await svc.artifacts.put(
            "demo", SAMPLE, media_type="text/markdown", origin=ArtifactOrigin.UPLOAD,
            trust=TrustLevel.USER, file_name="rollback.md",
        )
        back = await svc.artifacts.read(ref)
        assert back == SAMPLE, "artifact did not read back byte for byte"
        print(f"artifact {ref.artifact_id}: {ref.size_bytes} bytes, sha256 {ref.sha256[:16]}…, read back intact")
        print(json.dumps((await svc.health()).model_dump(), indent=2))


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    anyio.run(run, backend="trio")


if __name__ == "__main__":
    main()
