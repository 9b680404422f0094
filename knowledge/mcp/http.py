"""The MCP server as streamable HTTP on a local port: the SDK's ASGI app, served by hypercorn.

hypercorn serves under trio and under asyncio alike (uvicorn, the SDK's own choice, only under
asyncio), so ``knowledge mcp --http`` runs on the service's own loop either way. The socket is
bound and listening before the server starts (port 0: the kernel picks one), so the caller can
announce the address it really listens on.

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

import anyio
import sniffio
from hypercorn.config import Config, Sockets
from hypercorn.utils import wrap_app
from mcp.server.lowlevel import Server

if TYPE_CHECKING:
    from hypercorn.typing import ASGIFramework
    from starlette.types import ASGIApp, Receive, Scope, Send

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
    # Listening now, not when hypercorn starts: its trio worker takes the sockets as given (it calls
    # listen() only on sockets it creates itself), so under trio an unlistened socket is refused by
    # trio.SocketListener; and the announced URL accepts connections (queued) from this moment.
    for sock in [*sockets.secure_sockets, *sockets.insecure_sockets]:
        sock.listen(config.backlog)
    bound = sockets.insecure_sockets[0].getsockname()
    shown = f"[{bound[0]}]" if sockets.insecure_sockets[0].family == socket.AF_INET6 else bound[0]
    return config, sockets, f"http://{shown}:{bound[1]}/mcp"


class _GetStreamsEndOnStop:
    """The ASGI app, each GET it serves — a session's server-to-client stream, open for as long as
    its client stays, with no request in flight on it — ended when the server stops (`stop`), and a
    GET refused (503) from then on. hypercorn's graceful stop then waits for the requests in flight
    only, not its whole grace period for streams that never end on their own, after which it
    cancels their connections (under asyncio on Python 3.11, asyncio.start_server's callback then
    logs "Exception in callback … CancelledError" for each)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.stopped = False
        self.streams: set[anyio.CancelScope] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        if self.stopped:
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8")]})
            await send({"type": "http.response.body", "body": b"the server is stopping"})
            return
        with anyio.CancelScope() as stream:
            self.streams.add(stream)
            try:
                await self.app(scope, receive, send)
            finally:
                self.streams.discard(stream)

    def stop(self) -> None:
        self.stopped = True
        for stream in self.streams:
            stream.cancel()


async def serve_http(server: Server[Any], host: str, port: int, *, ready: Callable[[str], None],
                     stop: Callable[[], Awaitable[None]]) -> None:
    """Serve ``server`` at ``host:port`` until ``stop`` returns (then requests in flight have
    `GRACE_SECONDS` to finish) or this call is cancelled; ``ready`` gets the endpoint's URL once
    the socket listens."""
    app = _GetStreamsEndOnStop(server.streamable_http_app(host=host))
    config, sockets, url = bind(host, port)
    asgi = wrap_app(cast("ASGIFramework", app), config.wsgi_max_body_size, "asgi")

    async def stopping() -> None:  # hypercorn's shutdown trigger: its graceful stop begins as this returns
        await stop()
        app.stop()

    ready(url)
    if sniffio.current_async_library() == "trio":
        from hypercorn.trio.run import worker_serve as trio_serve

        await trio_serve(asgi, config, sockets=sockets, shutdown_trigger=stopping)
    else:
        from hypercorn.asyncio.run import worker_serve as asyncio_serve

        await asyncio_serve(asgi, config, sockets=sockets, shutdown_trigger=stopping)
