"""``knowledge mcp``: the tool domain as a Model Context Protocol server (`knowledge.mcp`).

Over stdio by default — what an MCP client (Claude Desktop, Claude Code, Cursor, VS Code) spawns —
or, with ``--http``, as streamable HTTP on a local port. Who asks is this command's configuration:
the global ``--tenant`` and ``--principal``, and ``--scope``/``--project``/``--sensitivity``/
``--origin-trust`` (or ``$KNOWLEDGE_MCP_SCOPES`` …); a tool's arguments cannot change it.

Its announcements (ready, stopped) go to stderr — over stdio, stdout is the protocol's — as one
line each, JSON with ``--json``. It stops when the client disconnects or on SIGINT/SIGTERM, and
exits 0.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from knowledge.cli.context import Options, log_to_stderr, options

#: The pool of a server that answers several clients' calls at once.
MCP_POOL_SIZE = 8


def _announce(opts: Options, facts: dict[str, Any]) -> None:
    if opts.out.json or opts.out.lines:
        import json

        line = json.dumps(facts, separators=(",", ":"))
    elif facts.get("ready"):
        where = facts.get("url") or "stdio"
        line = (f"knowledge mcp: serving tenant {facts['tenant']!r} as {facts['principal']!r} over {where}; "
                f"tools: {', '.join(facts['tools'])}")
    else:
        line = f"knowledge mcp: stopped ({facts.get('why')})"
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def mcp(
    ctx: typer.Context,
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP on --host:--port instead of stdio.")]
    = False,
    host: Annotated[str, typer.Option(help="The HTTP server's address (the loopback only, unless you mean it).")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="The HTTP server's port (0: any free port).")] = 8765,
    scope: Annotated[list[str] | None, typer.Option(
        "--scope", help="A scope the principal holds (repeat; knowledge.write offers knowledge.ingest); "
                        "default $KNOWLEDGE_MCP_SCOPES, else none: search only.")] = None,
    project: Annotated[str | None, typer.Option(help="The project a project-visibility document must belong to "
                                                     "(default $KNOWLEDGE_MCP_PROJECT).")] = None,
    sensitivity: Annotated[str | None, typer.Option(help="The sensitivity ceiling: public, internal, confidential, "
                                                         "restricted (default $KNOWLEDGE_MCP_SENSITIVITY, else "
                                                         "internal).")] = None,
    origin_trust: Annotated[str | None, typer.Option(help="The origin trust of every call: TOOL_OUTPUT (default: "
                                                          "ingest is neither offered nor accepted), or USER where "
                                                          "the client asks the person before each call; "
                                                          "$KNOWLEDGE_MCP_ORIGIN_TRUST.")] = None,
    log_level: Annotated[str, typer.Option(help="Logging level on stderr.")] = "WARNING",
) -> int:
    """Serve the knowledge tools over MCP (stdio, or --http) until the client leaves or SIGINT/SIGTERM."""
    from knowledge.mcp.identity import McpIdentity
    from knowledge.mcp.run import serve

    opts = options(ctx)
    log_to_stderr(log_level)
    identity = McpIdentity.configured(opts.tenant, opts.principal_id, scopes=scope, project=project,
                                      sensitivity=sensitivity, origin_trust=origin_trust)
    settings = opts.settings(application_name="knowledge-mcp", pool_max_size=MCP_POOL_SIZE)
    opts.run(lambda: serve(settings, identity, transport="http" if http else "stdio", host=host, port=port,
                           announce=lambda facts: _announce(opts, facts)))
    return 0
