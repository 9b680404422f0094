"""The MCP server as streamable HTTP on a local port: the SDK's ASGI app, served by hypercorn.

hypercorn serves under trio and under asyncio alike (uvicorn, the SDK's own choice, only under
asyncio), so ``knowledge mcp --http`` runs on the service's own loop either way. The listening
socket is bound before the server starts (port 0: the kernel picks one), so the caller can announce
the address it really listens on.

Bound to 127.0.0.1 by default, with the SDK's DNS-rebinding protection (``Host`` and ``Origin``
must name the loopback): a web page the user visits cannot reach the server through the browser.
Every request acts as the server's one configured identity — there is no per-request
authentication, which is why the server listens on the loopback only unless told otherwise.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import sniffio
from hypercorn.config import Config, Sockets
from hypercorn.utils import wrap_app
from mcp.server.lowlevel import Server

if TYPE_CHECKING:
    from hypercorn.typing import ASGIFramework

#: Seconds a graceful stop waits for requests in flight before cancelling them.
GRACE_SECONDS = 5.0


def bind(host: str, port: int) -> tuple[Config, Sockets, str]:
    """hypercorn's configuration with its socket bound now, and the URL of the MCP endpoint."""
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.graceful_timeout = GRACE_SECONDS
    config.accesslog = None
    config.errorlog = logging.getLogger("knowledge.mcp.http")
    sockets = config.create_sockets()
    bound = sockets.insecure_sockets[0].getsockname()
    shown = f"[{bound[0]}]" if sockets.insecure_sockets[0].family == socket.AF_INET6 else bound[0]
    return config, sockets, f"http://{shown}:{bound[1]}/mcp"


async def serve_http(server: Server[Any], host: str, port: int, *, ready: Callable[[str], None],
                     stop: Callable[[], Awaitable[None]]) -> None:
    """Serve ``server`` at ``host:port`` until ``stop`` returns (then requests in flight have
    `GRACE_SECONDS` to finish) or this call is cancelled; ``ready`` gets the endpoint's URL once
    the socket listens."""
    app = server.streamable_http_app(host=host)
    config, sockets, url = bind(host, port)
    asgi = wrap_app(cast("ASGIFramework", app), config.wsgi_max_body_size, "asgi")
    ready(url)
    if sniffio.current_async_library() == "trio":
        from hypercorn.trio.run import worker_serve as trio_serve

        await trio_serve(asgi, config, sockets=sockets, shutdown_trigger=stop)
    else:
        from hypercorn.asyncio.run import worker_serve as asyncio_serve

        await asyncio_serve(asgi, config, sockets=sockets, shutdown_trigger=stop)
