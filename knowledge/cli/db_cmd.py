"""``knowledge db start | stop | status | dump | restore | psql``: the embedded server of ``--data-dir``.

``db start`` leaves the server running after it exits (every other command then joins it, and leaves
it running); without it, each command starts the server for itself and stops it when it exits.
``db psql``, ``db dump`` and ``db restore`` run the psql, pg_dump and pg_restore that ship with the
embedded server against the service's database (or against ``--dsn``).

On a PostgreSQL of one's own (``--dsn``) the role may own its database but not the ``vector``
extension an administrator created there (or have none: the service is then lexical-only).
``db restore`` leaves an extension the database already has as it is — it restores with the
archive's table of contents minus that extension's entries (``pg_restore --list``, then
``--use-list``), so it never drops or re-creates an extension the role may not own — and refuses
in one line an archive that needs an extension the database lacks and the role may not create.
``db status`` says when the semantic arm is unavailable there, and why.
"""

from __future__ import annotations

import re
import signal
import subprocess
import tempfile
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from knowledge.cli.context import (
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    Options,
    configured_model_version,
    open_service,
    options,
    semantic_arm_state,
)

if TYPE_CHECKING:  # (imported where used: `knowledge --help` loads none of the service)
    from knowledge.service import Health

db_app = typer.Typer(help="The embedded PostgreSQL server (of --data-dir).", no_args_is_help=True)


def _embedded_only(opts: Options, what: str) -> Path:
    settings = opts.settings()
    if settings.dsn is not None:
        raise CliError(f"db {what} manages the embedded server; unset --dsn / $KNOWLEDGE_DSN")
    return settings.data_dir


async def _health(opts: Options, **overrides: Any) -> Health:
    async with open_service(opts, **overrides) as svc:
        return await svc.health()


@db_app.command("start")
def start(ctx: typer.Context) -> int:
    """Start the embedded server (initdb on first use), create and migrate the database, and leave it running."""
    from knowledge.supervisors.embedded_pg import start_embedded

    opts = options(ctx)
    data_dir = _embedded_only(opts, "start")
    server = start_embedded(data_dir, cleanup_mode=None)
    health = opts.run(lambda: _health(opts))
    how = "cold start (initdb)" if server.cold_start else ("already running" if server.reused else "started")
    facts = {"running": True, "pid": server.pid, "pgdata": str(server.pgdata), "how": how,
             "start_seconds": round(server.start_seconds, 3), "dsn": server.dsn(opts.settings().database),
             "server_version": health.server_version, "schema_version": health.schema_version}
    if opts.out.json:
        opts.out.emit_json(facts)
    else:
        opts.out.line(f"embedded PostgreSQL {health.server_version} running (pid {server.pid}, {how} in "
                      f"{server.start_seconds:.2f}s)")
        opts.out.line(f"data: {server.pgdata}\ndsn:  {facts['dsn']}\nschema: {health.schema_version}/"
                      f"{health.schema_expected}; stop it with: knowledge db stop")
    return 0


async def connected_clients(dsn: str) -> dict[str, int]:
    """The server's other client connections, by application name (``knowledge-cli``, a worker…)."""
    from knowledge.store.db import open_pool
    from knowledge.store.server import clients_by_application

    async with open_pool(dsn, min_size=1, max_size=1) as db:
        return await clients_by_application(db)


@db_app.command("stop")
def stop(ctx: typer.Context, force: Annotated[bool, typer.Option(
        "--force", help="Stop even with clients connected: their transactions roll back and their commands end "
                        "with 'database unavailable' (what they committed stays).")] = False) -> int:
    """Stop the embedded server, whoever started it — unless clients are connected (then --force)."""
    from knowledge.supervisors.embedded_pg import embedded_status, stop_embedded

    opts = options(ctx)
    data_dir = _embedded_only(opts, "stop")
    server = embedded_status(data_dir)
    if server is not None and not force:
        clients = opts.run(lambda: connected_clients(server.dsn("postgres")))
        if clients:
            listed = ", ".join(f"{n} {app}" for app, n in clients.items())
            raise CliError(f"{sum(clients.values())} clients connected ({listed}): stop them first, or stop the "
                           "server anyway with: knowledge db stop --force", EXIT_REFUSED)
    stopped = stop_embedded(data_dir)
    if opts.out.json:
        opts.out.emit_json({"stopped": stopped, "data_dir": str(data_dir)})
    else:
        opts.out.line(f"embedded PostgreSQL in {data_dir}: {'stopped' if stopped else 'was not running'}")
    return 0


def _without_password(dsn: str) -> str:
    """A DSN to show: its password (if any) replaced by ``***``."""
    parts = urllib.parse.urlsplit(dsn)
    if parts.password is None:
        return dsn
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)))


async def _dsn_health(opts: Options, version: str | None) -> tuple[Health, str | None]:
    """--dsn's health, without migrating and without the semantic arm (a status loads no model), and
    why the semantic arm has no vectors there (no pgvector), when it is configured on and the
    schema is current."""
    async with open_service(opts, migrate=False, semantic_arm=False) as svc:
        health = await svc.health()
        current = health.error is None and health.schema_version == health.schema_expected
        return health, health.semantic_unavailable if version is not None and current else None


@db_app.command("status")
def status(ctx: typer.Context) -> int:
    """Whether the server answers (exit 0) or not (exit 3): the embedded one of --data-dir, or --dsn's
    (with its schema, and whether the semantic arm can run there)."""
    from knowledge.supervisors.embedded_pg import embedded_status

    opts = options(ctx)
    settings = opts.settings()
    if settings.dsn is not None:
        version = configured_model_version(settings)
        health, missing = opts.run(lambda: _dsn_health(opts, version))
        arm = semantic_arm_state(version, missing) if health.schema_version == health.schema_expected else None
        facts: dict[str, Any] = {"running": health.ok or health.error is None, "embedded": False,
                                 "server_version": health.server_version, "database": health.database,
                                 "schema_version": health.schema_version, "schema_expected": health.schema_expected,
                                 "latency_ms": round(health.latency_ms, 2), "dsn": _without_password(settings.dsn),
                                 "semantic_arm": arm}
    else:
        server = embedded_status(settings.data_dir)
        facts = {"running": server is not None, "embedded": True, "data_dir": str(settings.data_dir)}
        if server is not None:
            facts.update(pid=server.pid, pgdata=str(server.pgdata), socket_dir=str(server.socket_dir),
                         dsn=server.dsn(settings.database))
    if opts.out.json:
        opts.out.emit_json(facts)
    elif not facts["running"]:
        opts.out.line(f"embedded PostgreSQL in {settings.data_dir}: not running (start it with: knowledge db start)")
    elif facts["embedded"]:
        opts.out.line(f"embedded PostgreSQL running: pid {facts['pid']}, data {facts['pgdata']}\ndsn: {facts['dsn']}")
    else:
        opts.out.line(f"PostgreSQL {facts['server_version']} at --dsn: database {facts['database']}, schema "
                      f"{facts['schema_version']}/{facts['schema_expected']}, {facts['latency_ms']} ms\n"
                      f"dsn: {facts['dsn']}")
        if arm is not None and arm["state"] == "unavailable":
            opts.out.line(f"semantic arm: unavailable, search is lexical-only — {arm['reason']}")
    return 0 if facts["running"] else EXIT_UNAVAILABLE


def _tool(opts: Options, name: str) -> tuple[Path, str]:
    """A client program bundled with the embedded server, and the DSN of the service's database
    (--dsn's, or the embedded server's: started or joined, the database created and migrated)."""
    from knowledge.supervisors.embedded_pg import BIN, embedded_status

    settings = opts.settings()
    dsn = settings.dsn
    if dsn is None:
        opts.run(lambda: _health(opts))
        server = embedded_status(settings.data_dir)
        if server is None:
            raise CliError("the embedded server is not running", EXIT_UNAVAILABLE)
        dsn = server.dsn(settings.database)
    binary = BIN / name
    if not binary.exists():
        raise CliError(f"{name} not found at {binary}", EXIT_UNAVAILABLE)
    return binary, dsn


def _first_error(stderr: str, program: str) -> str:
    """The line of a bundled tool's stderr that says what went wrong (its first error), without the
    program's prefix: pg_restore writes the failed statement after it, over several lines."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    line = next((line for line in lines if "error:" in line), lines[0] if lines else "no message")
    return re.sub(rf"^{program}: (error: )?", "", line)


@db_app.command("dump")
def dump(ctx: typer.Context,
         file: Annotated[Path, typer.Argument(help="The archive to write.", metavar="FILE")]) -> int:
    """Back up the service's database (every tenant) to FILE with the bundled pg_dump (custom format).
    Consistent while the service runs: one snapshot. Restore with: knowledge db restore FILE."""
    binary, dsn = _tool(options(ctx), "pg_dump")
    done = subprocess.run([str(binary), "--format=custom", "--no-owner", "--file", str(file), dsn], check=False,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise CliError(f"pg_dump failed (exit {done.returncode}): {_first_error(done.stderr, 'pg_dump')}",
                       EXIT_UNAVAILABLE)
    options(ctx).out.line(f"dumped to {file} ({file.stat().st_size:,} bytes)")
    return 0


# An archive's table of contents (``pg_restore --list``): an extension, and the comment on one —
# ``<dump id>; <catalog oids> EXTENSION - <name> `` (the name as it is) and ``… COMMENT - EXTENSION
# <name> `` (quoted where SQL needs it); pg_dump records no owner for either.
_TOC_EXTENSION = re.compile(r"^\d+; \d+ \d+ (?:EXTENSION - |COMMENT - EXTENSION )(.+?)\s*$")


def archive_extensions(toc: str) -> set[str]:
    """The extensions an archive creates (from its ``pg_restore --list``)."""
    return {_unquoted(m[1]) for line in toc.splitlines() if (m := _TOC_EXTENSION.match(line))}


def without_extensions(toc: str, names: set[str]) -> str:
    """The table of contents with the entries of the ``names`` extensions (the extension and the
    comment on it) commented out: what ``pg_restore --use-list`` restores then leaves them alone."""
    return "".join(f";{line}" if (m := _TOC_EXTENSION.match(line)) and _unquoted(m[1]) in names else line
                   for line in toc.splitlines(keepends=True))


def _unquoted(name: str) -> str:
    return name[1:-1].replace('""', '"') if len(name) > 1 and name[0] == name[-1] == '"' else name


async def _extension_access(dsn: str, names: set[str]) -> tuple[set[str], list[str]]:
    """Of ``names``: those the database has already, and why (one line each) each other one cannot
    be restored by this role (not offered by the server, or not the role's to create)."""
    from knowledge.store.db import open_pool
    from knowledge.store.vectors import extension_access

    async with open_pool(dsn, min_size=1, max_size=1, application_name="knowledge-cli") as db:
        access = await extension_access(db, sorted(names))
    installed = {a.name for a in access.extensions if a.installed}
    refusals = [f"the archive needs the {a.name} extension, which this server does not offer" if not a.offered
                else f"the archive needs the {a.name} extension, which database {access.database} does not have "
                     f"and role {access.role} may not create: have an administrator run CREATE EXTENSION "
                     f"{a.name} in it, then restore again"
                for a in access.extensions if not a.installed and not (a.offered and a.creatable)]
    return installed, refusals


@db_app.command("restore")
def restore(ctx: typer.Context, file: Annotated[Path, typer.Argument(help="An archive written by knowledge db dump.",
                                                                  metavar="FILE", exists=True, dir_okay=False)],
            ) -> int:
    """Restore the service's database from FILE (bundled pg_restore): what it holds is replaced by the
    archive's contents (--clean). Stop other clients first. An extension the database has already
    (pgvector's vector, which an administrator may own) is left as it is, not dropped and re-created."""
    opts = options(ctx)
    binary, dsn = _tool(opts, "pg_restore")
    toc = subprocess.run([str(binary), "--list", str(file)], capture_output=True, text=True, check=False)
    if toc.returncode != 0:
        raise CliError(f"{file} is not an archive pg_restore can read: {_first_error(toc.stderr, 'pg_restore')}",
                       EXIT_USAGE)
    command = [str(binary), "--clean", "--if-exists", "--no-owner", "--single-transaction", "--dbname", dsn]
    with tempfile.TemporaryDirectory(prefix="knowledge-restore-") as scratch:
        if wanted := archive_extensions(toc.stdout):
            installed, refusals = opts.run(lambda: _extension_access(dsn, wanted), read_only=True)
            if refusals:
                raise CliError(f"{refusals[0]} (nothing was restored)", EXIT_USAGE)
            if installed:
                listing = Path(scratch) / "toc.list"
                listing.write_text(without_extensions(toc.stdout, installed), encoding="utf-8")
                command += ["--use-list", str(listing)]
        done = subprocess.run([*command, str(file)], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    if done.returncode != 0:
        raise CliError(f"pg_restore failed (exit {done.returncode}): {_first_error(done.stderr, 'pg_restore')}; "
                       "the database is as it was (one transaction)", EXIT_UNAVAILABLE)
    opts.out.line(f"restored from {file}")
    return 0


@db_app.command("psql", context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                          "help_option_names": ["--help"]})  # -h is psql's (the host)
def psql(ctx: typer.Context) -> int:
    """psql (bundled with the embedded server) on the service's database; extra arguments go to psql."""
    binary, dsn = _tool(options(ctx), "psql")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # psql handles ^C itself (cancels the query)
    try:
        return subprocess.run([str(binary), dsn, *ctx.args], check=False).returncode
    finally:
        signal.signal(signal.SIGINT, previous)
