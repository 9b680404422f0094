"""An MCP client as a host runs one: the SDK's `ClientSession` over stdio, spawning ``knowledge mcp``
as a subprocess against the test database (`connect`), and the server process found among this
process's children (`server_process`), so a test can signal it or count its children."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import psutil
from mcp import ClientSession, StdioServerParameters, stdio_client

#: What the server's environment carries beyond the SDK's default (HOME, PATH …).
_PASSED = ("KNOWLEDGE_SEMANTIC_ARM", "PYTHONPATH", "TMPDIR", "CI")


def server_command(dsn: str, tenant: str, backend: str, *flags: str, principal: str = "alice") -> list[str]:
    return [sys.executable, "-m", "knowledge", "--dsn", dsn, "--tenant", tenant, "--principal", principal,
            "--loop", backend, "--json", "mcp", *flags]


@contextlib.asynccontextmanager
async def connect(dsn: str, tenant: str, backend: str, *flags: str, log: Path, principal: str = "alice",
                  env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """An initialized client session with a fresh ``knowledge mcp`` (stderr to ``log``); on exit
    the SDK closes the server's stdin and waits for it, as a host does."""
    command = server_command(dsn, tenant, backend, *flags, principal=principal)
    passed = {k: os.environ[k] for k in _PASSED if k in os.environ}
    params = StdioServerParameters(command=command[0], args=command[1:], env={**passed, **(env or {})})
    with log.open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def server_process(tenant: str) -> psutil.Process:
    """The ``knowledge mcp`` child of this process serving ``tenant`` (one at a time per tenant)."""
    found = [p for p in psutil.Process().children(recursive=True)
             if "mcp" in _cmdline(p) and tenant in _cmdline(p)]
    assert len(found) == 1, found
    return found[0]


def _cmdline(process: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):
        return process.cmdline()
    return []


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def structured(result: types.CallToolResult | Any) -> dict[str, Any]:
    assert isinstance(result, types.CallToolResult), result
    assert isinstance(result.structured_content, dict), result
    return result.structured_content
