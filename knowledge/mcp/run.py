"""A process that serves MCP: the service opened, the transport run, everything closed in order.

`serve` owns, in one task group: the service (its pool, parser children, embedder, an embedded
server it started), the MCP server on it and a watcher of SIGINT and SIGTERM. It ends when

- the client disconnects (stdio: end of file on stdin, as the MCP specification's shutdown
  begins), or
- a signal arrives (SIGTERM, the specification's next step; SIGINT, a person's ^C): calls in
  flight are cancelled — an ingest commits nothing — and the HTTP server, given a signal, lets
  requests finish for `knowledge.mcp.http.GRACE_SECONDS` first, or
- the caller is cancelled;

and in each case the transport stops, then the service closes (its children reaped, its
connections closed), before `serve` returns.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, Literal

import anyio

from knowledge.mcp.http import GRACE_SECONDS, serve_http
from knowledge.mcp.server import build_server, offered
from knowledge.mcp.stdio import stdio_streams
from knowledge.tools import KNOWLEDGE_DOMAIN

if TYPE_CHECKING:
    from knowledge.config import Settings
    from knowledge.mcp.identity import McpIdentity

_log = logging.getLogger(__name__)

Transport = Literal["stdio", "http"]


async def serve(settings: Settings, identity: McpIdentity, *, transport: Transport = "stdio",
                host: str = "127.0.0.1", port: int = 8765,
                announce: Callable[[dict[str, Any]], None] = lambda facts: None) -> None:
    """Serve MCP as ``identity`` until the client leaves, a signal arrives or the caller is
    cancelled (see the module docstring); ``announce`` hears when it is ready and when it stopped."""
    from knowledge.service import KnowledgeService

    stopping = anyio.Event()
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with KnowledgeService.open(settings) as svc, anyio.create_task_group() as tg:
            server = build_server(svc, identity, version=version("knowledge"))
            facts = {"ready": True, "transport": transport, "tenant": identity.principal.tenant_id,
                     "principal": identity.principal.principal_id,
                     "tools": [t.name for t in KNOWLEDGE_DOMAIN.tools if offered(t, identity)]}

            async def watch() -> None:
                async for signum in signals:
                    _log.info("signal %d: stopping the MCP server", signum)
                    stopping.set()
                    if transport == "stdio":
                        tg.cancel_scope.cancel()
                    else:  # a grace period for requests in flight, then hypercorn cancels them
                        with anyio.move_on_after(2 * GRACE_SECONDS):
                            await anyio.sleep_forever()
                        tg.cancel_scope.cancel()
                    return

            tg.start_soon(watch)
            if transport == "stdio":
                async with stdio_streams() as (read_stream, write_stream):
                    announce(facts)
                    await server.run(read_stream, write_stream, server.create_initialization_options())
            else:
                await serve_http(server, host, port, ready=lambda url: announce({**facts, "url": url}),
                                 stop=stopping.wait)
            tg.cancel_scope.cancel()
    announce({"stopped": True, "why": "signal" if stopping.is_set() else "client"})

