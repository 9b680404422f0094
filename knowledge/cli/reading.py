"""The read-only commands' way to the store: one connection, no service.

``docs list | show | versions``, ``chunk show``, ``tenants`` and ``stats`` read the catalog and the
tracked metrics and nothing else, so they skip what `open_service` does for the commands that
write — starting an event-loop bridge, the parser pool, the migration runner, the semantic arm — and
the imports that come with it (`knowledge --help` and a read-only command start in under half a
second; README "Start-up"). They open a one-connection `Database` on the loop they run on, and
fall back to the whole service (which starts the embedded server, creates the database and
migrates it) when that is not possible: no DSN and no running embedded server, a database that
does not exist yet, or a schema this version would migrate first.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from knowledge.cli.context import Options, open_service

if TYPE_CHECKING:
    from knowledge.store.catalog import Catalog
    from knowledge.store.db import Database


def _dsn(opts: Options) -> str | None:
    """The DSN a read can use as it is: the configured one, or the running embedded server's; None
    when only `open_service` can make one (the embedded server is not running)."""
    from knowledge.config import Settings

    settings = Settings.from_env(dsn=opts.dsn, data_dir=opts.data_dir)
    if settings.dsn is not None:
        return settings.dsn
    from knowledge.supervisors.embedded_pg import embedded_status

    server = embedded_status(settings.data_dir)
    return None if server is None else server.dsn(settings.database)


async def _current(db: Database) -> bool:
    """Whether every migration this version ships is applied (else the service migrates first)."""
    import anyio

    from knowledge.store.migrate import applied_versions, discover

    migrations = await anyio.to_thread.run_sync(discover)  # reads the package's files
    return await applied_versions(db) == [m.version for m in migrations]


@contextlib.asynccontextmanager
async def open_reader(opts: Options) -> AsyncIterator[Catalog]:
    """The catalog, to read (see the module docstring). Cancellation propagates; the connection is
    closed on the way out."""
    from knowledge.errors import DatabaseMissing
    from knowledge.store.catalog import Catalog
    from knowledge.store.db import Database, open_bridge, open_pool

    dsn = _dsn(opts)
    if dsn is not None:
        async with contextlib.AsyncExitStack() as stack:
            bridge = await stack.enter_async_context(open_bridge())
            try:
                db = await stack.enter_async_context(Database.open(dsn, bridge=bridge, min_size=1, max_size=1,
                                                                   application_name="knowledge-cli"))
            except DatabaseMissing:
                pass  # the service creates it
            else:
                if await _current(db):
                    yield Catalog(db)
                    return
    # The service creates and migrates the database; the reads go through a connection of their own.
    async with open_service(opts, semantic_arm=False) as svc, \
            open_pool(svc.dsn, min_size=1, max_size=1, application_name="knowledge-cli") as db:
        yield Catalog(db)
