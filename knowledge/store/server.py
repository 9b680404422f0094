"""The server's own state, not the store's: its version and database, and its client sessions
(``pg_stat_activity``) — for health, ``knowledge db stop``, the leftover audit and the stress tools.
"""

from __future__ import annotations

from dataclasses import dataclass

from knowledge.store.db import Connection, Database

# The server's version and the database connected to. No parameters.
SERVER_IDENTITY = "SELECT current_setting('server_version') AS v, current_database() AS d"

# The server's client connections other than the asking one, by application name. No parameters.
CLIENTS_BY_APPLICATION = """
SELECT coalesce(nullif(application_name, ''), '(unnamed)') AS app, count(*) AS n FROM pg_stat_activity
WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() GROUP BY 1 ORDER BY 2 DESC, 1
"""

# Sessions of an application other than the asking one: $1 application name.
SESSIONS_OF = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()"

# Sessions of an application in the asking session's database: $1 application name. (Other
# databases of the server are other users': the signal harness runs both loops at once, each in its own.)
DATABASE_SESSIONS_OF = """
SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()
"""

# Terminate about half the sessions of an application other than the asking one (a fault the stress
# engine injects): $1 application name.
TERMINATE_HALF_OF = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE application_name = $1 AND pid <> pg_backend_pid() AND random() < 0.5
"""


# --- the statements, each a function (issue 33: the store owns its statements) ------------------------------


@dataclass(frozen=True)
class ServerIdentity:
    version: str
    database: str


async def server_identity(db: Database) -> ServerIdentity:
    """The server's version and the database connected to (`SERVER_IDENTITY`)."""
    row = await db.fetchrow(SERVER_IDENTITY)
    assert row is not None  # one row, always
    return ServerIdentity(version=row["v"], database=row["d"])


async def clients_by_application(db: Database) -> dict[str, int]:
    """The server's client connections other than the asking one, by application name."""
    return {r["app"]: int(r["n"]) for r in await db.fetch(CLIENTS_BY_APPLICATION)}


async def database_sessions_of(db: Database, *, application_name: str) -> int:
    """Sessions of ``application_name`` in the asking session's database (`DATABASE_SESSIONS_OF`)."""
    return int(await db.fetchval(DATABASE_SESSIONS_OF, application_name))


async def terminate_half_of(conn: Connection, *, application_name: str) -> None:
    """Terminate about half the sessions of ``application_name`` but ``conn``'s (`TERMINATE_HALF_OF`):
    a fault the stress engine injects."""
    await conn.execute(TERMINATE_HALF_OF, application_name)


# The bytes each table of the schema holds, its indexes and TOAST included (the capacity note).
TABLE_BYTES = """
SELECT c.relname AS name, pg_total_relation_size(c.oid) AS bytes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
"""


async def table_bytes(db: Database) -> dict[str, int]:
    """Each table's total size in bytes (`TABLE_BYTES`): heap, indexes and TOAST."""
    return {r["name"]: int(r["bytes"]) for r in await db.fetch(TABLE_BYTES)}
