"""An asyncio host keeps its own plain event loop (issue 20).

trio-asyncio patches asyncio's loop functions for the whole process when it is imported; the
library imports it only when it opens a database under trio. Run in a fresh interpreter, as a host
process starts: importing the library and using it under ``asyncio.run`` leaves the loop plain and
trio-asyncio unimported; a later trio run in the same process works; and an asyncio run after it,
on a loop the host makes itself, still awaits asyncpg directly.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from knowledge.config import Settings

HOST = textwrap.dedent('''
    import asyncio, sys, uuid

    import knowledge.service  # what a host imports first
    from knowledge.config import Settings
    from knowledge.models import ArtifactOrigin, KnowledgeQuery, Principal, TrustLevel

    assert "trio_asyncio" not in sys.modules, "importing the library imported trio-asyncio"
    DSN = sys.argv[1]

    async def use(tag):
        settings = Settings(dsn=DSN, pool_min_size=1, pool_max_size=2, sweep_interval_seconds=None)
        tenant = "host-loop-" + uuid.uuid4().hex[:8]
        writer = Principal(tenant_id=tenant, principal_id="p", scopes=frozenset({"knowledge.write"}))
        async with knowledge.service.KnowledgeService.open(settings) as svc:
            ref = await svc.put_artifact(tenant, b"# Pelicans\\n\\nPelicans glide over the harbour.\\n",
                                          media_type="text/markdown", origin=ArtifactOrigin.UPLOAD,
                                          trust=TrustLevel.USER, file_name="p.md")
            await svc.ingest(ref, "p.md", "tenant", writer, origin_trust=TrustLevel.USER)
            found = await svc.search(KnowledgeQuery(tenant_id=tenant, principal_id="p", text="pelicans harbour"))
            assert [p.heading_path for p in found] == [["p.md", "Pelicans"]], found
            backend = (await svc.health()).backend
        print(tag, backend, type(asyncio.get_running_loop()).__module__ if backend == "asyncio" else "-")

    async def asyncio_host():
        await use("asyncio-host")

    asyncio.run(asyncio_host())
    assert "trio_asyncio" not in sys.modules, "an asyncio host's search imported trio-asyncio"

    import trio
    trio.run(use, "trio-run")
    assert "trio_asyncio" in sys.modules

    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        runner.run(use("asyncio-after-trio"))
''')


def test_an_asyncio_host_keeps_its_plain_loop_and_trio_still_works(settings: Settings, tmp_path: Path) -> None:
    script = tmp_path / "host.py"
    script.write_text(HOST)
    assert settings.dsn is not None
    done = subprocess.run([sys.executable, str(script), settings.dsn], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["asyncio-host asyncio asyncio.unix_events",
                                           "trio-run trio -",
                                           "asyncio-after-trio asyncio asyncio.unix_events"], done.stdout

