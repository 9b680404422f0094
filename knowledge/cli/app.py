"""``knowledge``: the operator's command line.

    knowledge [--dsn DSN | --data-dir DIR] [--tenant T] [--principal P] [--loop trio|asyncio] [--json] COMMAND

Commands: ``ingest``, ``search``, ``docs list|show|versions|delete|rechunk|reembed|reextract``, ``chunk show``,
``stats``, ``worker``, ``mcp``, ``db start|stop|status|psql``. Human output by default (tables, a progress
bar); ``--json`` prints one JSON document on stdout instead. Errors are one line on stderr; exit codes are in
`knowledge.cli.context` (0 done, 1 refused, 2 bad arguments or configuration, 3 database unavailable, 130
interrupted). ``-h`` is ``--help`` everywhere.

The CLI's principal (``--principal``, default ``operator``) holds ``knowledge.write`` and ingests with
``USER`` origin trust: an operator at a terminal is the user.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from knowledge.cli.context import (
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    Options,
)
from knowledge.cli.db_cmd import db_app
from knowledge.cli.docs_cmd import chunk_app, docs_app
from knowledge.cli.help import plain_help
from knowledge.cli.ingest_cmd import ingest
from knowledge.cli.mcp_cmd import mcp
from knowledge.cli.output import Output, safe
from knowledge.cli.search_cmd import search
from knowledge.cli.signals import Interrupted
from knowledge.cli.stats_cmd import stats, tenants
from knowledge.cli.worker_cmd import worker
from knowledge.errors import ConfigurationError, DatabaseUnavailable, KnowledgeError

app = typer.Typer(
    name="knowledge", help="Store documents and retrieve verbatim, cited passages: the operator's CLI.",
    no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False,
    # -h as --help, here and in every subcommand (click's contexts inherit it; `db psql` keeps -h for psql)
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Exit codes: 0 done; 1 refused (for ingest: any file refused); 2 bad arguments or configuration; "
           "3 database unavailable; 130 interrupted.",
)


class Loop(StrEnum):
    AUTO = "auto"
    TRIO = "trio"
    ASYNCIO = "asyncio"


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        sys.stdout.write(f"knowledge {version('knowledge')}\n")
        raise typer.Exit(0)


#: Global options a command's arguments may carry too (moved before the command): flags, and
#: options with a value (``--tenant T`` or ``--tenant=T``). `db psql` passes everything after it to psql.
_HOISTED = ("--json", "--jsonl")
_HOISTED_VALUED = ("--tenant", "--principal", "--dsn", "--data-dir", "--loop")


def _command_index(args: list[str]) -> int | None:
    """Where the command word is among ``args`` (global options and their values skipped)."""
    i = 0
    while i < len(args):
        if args[i] in _HOISTED_VALUED:
            i += 2
        elif args[i].startswith("-"):
            i += 1
        else:
            return i
    return None


def hoist_global_flags(args: list[str]) -> list[str]:
    """``knowledge search q --json --tenant t`` as ``knowledge --json --tenant t search q``: a global
    option after the command is moved just before it (a repeated one: the last wins, as click
    takes it), but not after ``--``, and not into ``db psql``'s arguments."""
    out: list[str] = []
    moved: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or (arg == "psql" and i > 0 and args[i - 1] == "db"):
            out += args[i:]
            break
        after_command = _command_index(out) is not None
        if after_command and arg in _HOISTED:
            moved.append(arg)
        elif after_command and arg.split("=", 1)[0] in _HOISTED_VALUED and ("=" in arg or i + 1 < len(args)):
            moved += [arg] if "=" in arg else [arg, args[i + 1]]
            i += 0 if "=" in arg else 1
        else:
            out.append(arg)
        i += 1
    at = _command_index(out)
    return out if at is None else out[:at] + moved + out[at:]


@app.callback()
def _global(
    ctx: typer.Context,
    dsn: Annotated[str | None, typer.Option(envvar="KNOWLEDGE_DSN", show_envvar=True,
                                            help="PostgreSQL DSN; default: the embedded server of --data-dir.",
                                            show_default=False)] = None,
    data_dir: Annotated[Path | None, typer.Option(help="The embedded server's data directory (default "
                                                       "$KNOWLEDGE_DATA_DIR, else a per-user folder).",
                                                  show_default=False)] = None,
    tenant: Annotated[str, typer.Option(help="The tenant (isolation boundary).")] = "default",
    principal: Annotated[str, typer.Option(help="Who acts: ingests, searches, deletes.")] = "operator",
    loop: Annotated[Loop, typer.Option(help="The event loop; auto: asyncio for the read-only commands (docs list, "
                                            "show, versions; chunk show; tenants; stats), which start faster on "
                                            "it, and trio for the rest.")] = Loop.AUTO,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output (one JSON document); also "
                                                             "accepted after the command.")] = False,
    json_lines: Annotated[bool, typer.Option("--jsonl", help="JSON Lines: one record per line as results come "
                                                            "(search passages, ingest outcomes, list rows); "
                                                            "also accepted after the command.")] = False,
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the version and exit.")] = False,
) -> None:
    ctx.obj = Options(dsn=dsn or None, data_dir=data_dir, tenant=tenant, principal_id=principal, loop=loop.value,
                      out=Output(json_output, lines=json_lines))


#: Examples under a command's help (typer keeps single newlines inside a paragraph).
INGEST_EXAMPLES = """Examples:

  knowledge ingest ~/runbooks --glob '*.md'            # a folder's Markdown files

  knowledge ingest ~/src/site/docs --as site-docs       # a name that survives moving the folder

  knowledge ingest notes.txt --visibility project --project infra

  curl -s https://example.org/faq.md | knowledge ingest - --name faq.md

  knowledge ingest docs/ --jsonl | jq -c 'select(.reason)'   # the refusals, as they come"""

SEARCH_EXAMPLES = """Examples:

  knowledge search 'how do I restore a backup'          # for a person on a terminal

  knowledge search 'rotate the TLS certificate' --format envelope   # what the agent is given

  knowledge search 'pg_dump --clean' --as-of 2026-12-01 --min-relevance 0.5 --json"""

app.command(help="Ingest files and folders (recursive); exit 1 if any file was refused.",
            epilog=INGEST_EXAMPLES)(ingest)
app.command(help="Search: passages for a person on a terminal, the agent's <knowledge> block when piped.",
            epilog=SEARCH_EXAMPLES)(search)
app.add_typer(docs_app, name="docs")
app.add_typer(chunk_app, name="chunk")
app.command(help="The tracked metrics: corpus size, ingestion outcomes, instruction-like rate, budget "
                 "pressure, citation counts.")(stats)
app.command(help="Every tenant of the store, with its live documents.")(tenants)
app.command(help="Run the maintenance worker until SIGINT/SIGTERM.")(worker)
app.command(help="Serve the knowledge tools to MCP clients (stdio, or --http on 127.0.0.1).")(mcp)
app.add_typer(db_app, name="db")

#: click's base exception, whichever click typer brings (its own copy, or the click package).
_ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _leaf(exc: BaseException) -> BaseException:
    """The one exception inside (nested) exception groups, or the group itself if there are several."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _one_line(text: str) -> str:
    return safe(" ".join(text.split()) if "\n" not in text else text.strip().splitlines()[0])


def describe(exc: BaseException) -> tuple[int, str]:
    """The exit code and the one line of stderr for an exception that ended a command."""
    exc = _leaf(exc)
    if isinstance(exc, CliError):
        return exc.code, exc.message
    if isinstance(exc, DatabaseUnavailable):
        return EXIT_UNAVAILABLE, f"database unavailable: {_one_line(exc.message)}"
    if isinstance(exc, ConfigurationError):  # what the operator must set up (e.g. pgvector for the semantic arm)
        return EXIT_USAGE, f"configuration: {_one_line(exc.message)}"
    if isinstance(exc, KnowledgeError):
        chunk = getattr(exc, "chunk_ordinal", None)
        where = f" (chunk {chunk} under {' > '.join(getattr(exc, 'heading_path', None) or ())})" \
            if chunk is not None else ""
        detail = "" if exc.message == exc.reason else f": {_one_line(exc.message)}"
        return EXIT_REFUSED, f"refused: {exc.reason}{detail}{where}"
    pydantic = sys.modules.get("pydantic")  # (loaded if it raised: `--help` does not import it)
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "value"
        return EXIT_USAGE, f"invalid {loc}: {first.get('msg', 'invalid')}"
    if isinstance(exc, Interrupted):
        return exc.exit_code, exc.message
    if isinstance(exc, (KeyboardInterrupt, typer.Abort)):
        return EXIT_INTERRUPTED, "interrupted"
    if isinstance(exc, _ClickException):
        return int(getattr(exc, "exit_code", EXIT_USAGE)), _one_line(exc.format_message())  # type: ignore[attr-defined]
    if isinstance(exc, OSError):
        return EXIT_REFUSED, f"{exc.strerror or type(exc).__name__}: {exc.filename or _one_line(str(exc))}"
    return EXIT_REFUSED, f"unexpected error: {type(exc).__name__}: {_one_line(str(exc))}"


class _OneLine(logging.Formatter):
    """A library's warning as one line on stderr, without its traceback (``KNOWLEDGE_TRACEBACK=1``
    keeps them)."""

    def format(self, record: logging.LogRecord) -> str:
        if os.environ.get("KNOWLEDGE_TRACEBACK"):
            return super().format(record)
        return "knowledge: " + _one_line(record.getMessage())


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record comes (a caller that swaps it — a test
    capturing an in-process run — never leaves the handler holding a closed stream)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


def log_to_stderr() -> None:
    """Warnings from the libraries below as single lines (once per process); asyncpg's pool, which
    logs every failed reconnect with a traceback while a server is away, only when it is an error."""
    root = logging.getLogger()
    if not any(isinstance(h.formatter, _OneLine) for h in root.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(_OneLine())
        handler.setLevel(logging.WARNING)
        root.addHandler(handler)
        root.setLevel(min(root.level or logging.WARNING, logging.WARNING))
    logging.getLogger("asyncpg").setLevel(logging.ERROR)


def quiet_short_help(command: Any) -> Any:
    """``command`` and its subcommands with ``-h`` parsed as ``--help`` (the app's ``context_settings``)
    but listed in the help option's text rather than in a column of its own: the only short option
    besides ``docs delete -y``, that column would take the width an 80-column terminal needs to
    print the long option names whole."""
    help_option = command.get_help_option

    def get_help_option(ctx: Any) -> Any:
        opt = help_option(ctx)
        if opt is None or "-h" not in opt.opts:
            return opt
        every, shown = list(opt.opts), [o for o in opt.opts if o != "-h"]
        add_to_parser = opt.add_to_parser

        def parsed_with_every_name(parser: Any, ctx: Any) -> None:
            opt.opts = every
            try:
                add_to_parser(parser, ctx)
            finally:
                opt.opts = shown

        opt.opts, opt.add_to_parser = shown, parsed_with_every_name
        opt.help = f"{(opt.help or '').rstrip('.')} (also -h)."
        return opt

    command.get_help_option = get_help_option
    for sub in getattr(command, "commands", {}).values():
        quiet_short_help(sub)
    return command


def main(argv: list[str] | None = None) -> int:
    """The console script ``knowledge``: run one command; return its exit code, never a traceback
    (set ``KNOWLEDGE_TRACEBACK=1`` to see one on stderr as well)."""
    log_to_stderr()
    try:
        command = quiet_short_help(plain_help(typer.main.get_command(app)))
        result = command.main(args=hoist_global_flags(argv if argv is not None else sys.argv[1:]),
                              prog_name="knowledge",
                              standalone_mode=False)
    except BaseException as exc:  # every way out: one line and an exit code
        if isinstance(exc, SystemExit):
            return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
        if type(exc).__name__ == "NoArgsIsHelpError":  # a group without a command: its help (rich prints it)
            if help_text := str(exc.format_message()):  # type: ignore[attr-defined]
                sys.stdout.write(help_text + "\n")
            return EXIT_USAGE
        code, message = describe(exc)
        if os.environ.get("KNOWLEDGE_TRACEBACK"):
            traceback.print_exception(exc)
        sys.stderr.write(f"knowledge: {message}\n")
        sys.stderr.flush()
        return code
    return result if isinstance(result, int) else 0
