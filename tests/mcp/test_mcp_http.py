"""``knowledge mcp --http`` for real: the server as a subprocess under each loop, driven by the SDK's
own streamable-HTTP client (`streamable_http_client` and `ClientSession`, as a host runs them), and
by raw HTTP where the test sends what a well-behaved client never would.

Each test starts ``knowledge --loop <backend> --json mcp --http --port 0`` (`serving`) and reads its
stderr line by line: its ``{"ready":true,…,"url":…}`` line gives the address. Every wait on the
server is bounded by its progress — a line arriving, or its stderr ending as it exits — with only a
generous fail-safe (`FAIL_SAFE_SECONDS`) against a hang; at the end the server is stopped and waited
for, whatever happened, and any child it left is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types as types
import psutil
import pytest
from anyio.abc import Process
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from knowledge.models import ArtifactOrigin, KnowledgeQuery, Principal, TrustLevel, Visibility
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from tests.mcp.client import server_command, structured, text_of

#: Only against a hang: no test waits for a clock, each waits for the server to do something.
FAIL_SAFE_SECONDS = 120.0
#: How often the server's descendants are listed while it runs.
CHILD_POLL_SECONDS = 0.1

#: Small documents on unrelated subjects, each the first answer to its query below.
DOCUMENTS = {
    "Rollback": "# Rollback\n\nTo roll back a deploy, run deploy --rollback and watch the canary dashboard.\n",
    "Backups": "# Backups\n\nNightly backups of the ledger database are kept for thirty days in cold storage.\n",
    "Pager": "# Pager duty\n\nThe on-call engineer acknowledges every page within five minutes.\n",
    "Certificates": "# Certificates\n\nTLS certificates renew automatically twelve days before they expire.\n",
    "Onboarding": "# Onboarding\n\nA new hire receives a laptop and a building badge on the first morning.\n",
}
QUERIES = {
    "roll back a deploy": "Rollback",
    "how long are ledger backups kept": "Backups",
    "acknowledge a page": "Pager",
    "when do TLS certificates renew": "Certificates",
    "laptop for a new hire": "Onboarding",
}
CALLS_PER_CLIENT = 25

#: An HTML page: the server parses it in a parser child (`knowledge.supervisors.parser_pool`).
PAGE = (b"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Failover runbook</title></head><body><main>"
        b"<h1>Failover runbook</h1><p>Promote the standby when the primary stops answering health checks "
        b"for two minutes.</p><h2>Afterwards</h2><p>Rebuild the old primary as a standby before it rejoins.</p>"
        b"</main></body></html>")

EVIL_HOST = "evil.example"
MCP_ACCEPT = "application/json, text/event-stream"

# The SDK's streamable-HTTP client returns from inside its SSE loops once a response is complete
# (`StreamableHTTPTransport._handle_sse_response`: ``async for sse in EventSource(response)`` …
# ``return``), leaving httpx2's and httpcore2's async generators under it unexhausted for the garbage
# collector. asyncio's finalizer closes such a generator silently; trio's closes it too, but warns
# (ResourceWarning, "… was garbage collected before it had been exhausted") — which this suite's
# "error" turns into an unraisable-exception failure. The client's code, not this project's: ignored
# for those two libraries' stream generators (which ones depends on timing), nothing else.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Async generator '(httpx2|httpcore2)\.[\w.]+\.(__aiter__|aiter_text|aiter_bytes)' was garbage collected "
    r"before it had been exhausted:ResourceWarning")


@dataclass(eq=False)
class Served:
    """A running ``knowledge mcp --http``: its stderr as read so far, line by line, and every
    descendant seen while it ran."""

    process: Process
    url: str = ""
    lines: list[str] = field(default_factory=list)
    ended: bool = False  # its stderr reached its end (the process exited)
    children: set[psutil.Process] = field(default_factory=set)
    exited: anyio.Event = field(default_factory=anyio.Event)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def stderr(self) -> str:
        return "\n".join(self.lines)

    def facts(self) -> list[dict[str, Any]]:
        """The JSON announcements among the lines (a log line or a traceback is text)."""
        found = []
        for line in self.lines:
            with contextlib.suppress(ValueError):
                fact = json.loads(line)
                if isinstance(fact, dict):
                    found.append(fact)
        return found

    async def announced(self, key: str) -> dict[str, Any] | None:
        """The first announcement with ``key`` true (``ready``, ``stopped``), waiting for the next line
        while stderr is open; None once it ended without one."""
        while True:
            for fact in self.facts():
                if fact.get(key) is True:
                    return fact
            if self.ended:
                return None
            await self._changed.wait()

    def _add(self, line: bytes) -> None:
        self.lines.append(line.decode(errors="replace"))
        self._changed.set()
        self._changed = anyio.Event()

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        pending = b""
        async for part in self.process.stderr:
            pending += part
            *complete, pending = pending.split(b"\n")
            for line in complete:
                self._add(line)
        if pending:
            self._add(pending)
        self.ended = True
        self._changed.set()

    async def wait_exit(self) -> None:
        await self.process.wait()
        self.exited.set()

    async def record_children(self) -> None:
        self.children.update(await anyio.to_thread.run_sync(_descendants, self.process.pid))

    async def live_children(self) -> list[psutil.Process]:
        """The server's descendants alive now, once it has one: what its parser pool starts after its
        first parse (spare children), waited for as they start."""
        while True:
            await self.record_children()
            now = await anyio.to_thread.run_sync(_descendants, self.process.pid)
            live = await anyio.to_thread.run_sync(_alive, now)
            if live or self.exited.is_set():
                return live
            with anyio.move_on_after(CHILD_POLL_SECONDS):
                await self.exited.wait()

    async def watch_children(self) -> None:
        """Every descendant the server has while it runs (the service may start parser children)."""
        while not self.exited.is_set():
            await self.record_children()
            with anyio.move_on_after(CHILD_POLL_SECONDS):
                await self.exited.wait()

    async def stop(self) -> None:
        """Whatever happened: SIGTERM to a server still running and a wait for it (SIGKILL to its group
        past the fail-safe), then any descendant still alive killed."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            with anyio.move_on_after(FAIL_SAFE_SECONDS):
                await self.process.wait()
            if self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                await self.process.wait()
        await anyio.to_thread.run_sync(_kill, list(self.children))


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        children: list[psutil.Process] = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    return children


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    found = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def _kill(processes: list[psutil.Process]) -> None:
    for process in _alive(processes):
        with contextlib.suppress(psutil.Error):
            process.kill()


def _described(processes: list[psutil.Process]) -> list[str]:
    described = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            described.append(f"{process.pid}: {' '.join(process.cmdline()[:5])}")
    return described


def _listening(pid: int) -> list[tuple[str, int]]:
    """The addresses the process listens on (TCP, IPv4 and IPv6)."""
    return sorted((c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
                  if c.status == psutil.CONN_LISTEN)


@contextlib.asynccontextmanager
async def serving(dsn: str, tenant: str, backend: str, *flags: str) -> AsyncIterator[Served]:
    """``knowledge mcp --http --port 0 [flags]`` under ``backend``, ready (its URL known); on exit
    stopped and waited for, its leftover children killed. The server's environment is this
    process's, less any ``KNOWLEDGE_MCP_*`` (so no scope reaches it from the developer's shell)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNOWLEDGE_MCP_")}
    command = server_command(dsn, tenant, backend, "--http", "--port", "0", *flags)
    process = await anyio.open_process(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, env=env, start_new_session=True)
    served = Served(process)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(served.read_stderr)
            tg.start_soon(served.wait_exit)
            tg.start_soon(served.watch_children)
            try:
                with anyio.fail_after(FAIL_SAFE_SECONDS):
                    ready = await served.announced("ready")
                assert ready is not None, f"the server ended before it was ready:\n{served.stderr()}"
                served.url = ready["url"]
                try:
                    yield served
                except BaseException as exc:  # the server's side of the story, complete, beside the failure
                    with anyio.CancelScope(shield=True):
                        await served.stop()
                        with anyio.move_on_after(FAIL_SAFE_SECONDS):
                            await served.announced("never announced: until its stderr ends")
                    exc.add_note(f"knowledge mcp exited {process.returncode}; its stderr:\n{served.stderr()}")
                    raise
            finally:
                with anyio.CancelScope(shield=True):
                    await served.stop()
    finally:
        with anyio.CancelScope(shield=True):
            await process.aclose()


@contextlib.asynccontextmanager
async def session(url: str, http: httpx2.AsyncClient | None = None) -> AsyncIterator[ClientSession]:
    """An initialized MCP session over the SDK's streamable-HTTP client (``http``: a client of the
    test's own, which it then closes itself)."""
    async with (streamable_http_client(url, http_client=http) as (read, write),
                ClientSession(read, write) as client):
        await client.initialize()
        yield client


async def ingest(service: KnowledgeService, tenant: str, documents: dict[str, str]) -> None:
    who = Principal(tenant_id=tenant, principal_id="alice", scopes=frozenset({"knowledge.write"}))
    for title, text in documents.items():
        ref = await service.put_artifact(tenant, text.encode(), media_type="text/markdown")
        await service.ingest(ref, title, Visibility.TENANT, who, origin_trust=TrustLevel.USER)


async def test_http_two_clients_search_at_once(anyio_backend_name: str, service: KnowledgeService,
                                               database_dsn: str, tenant: str) -> None:
    """Two sessions on one server, 25 searches each, all 50 at once: each answers what the service
    answers in process, as the block the model reads; with no ``--scope``, search is the only tool."""
    await ingest(service, tenant, DOCUMENTS)
    expected: dict[str, str] = {}
    for query, title in QUERIES.items():
        passages = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text=query))
        assert passages and passages[0].title == title, (query, passages)
        expected[query] = passages[0].chunk_id
    queries = list(QUERIES)
    results: list[tuple[str, types.CallToolResult]] = []
    async with (serving(database_dsn, tenant, anyio_backend_name) as served,
                session(served.url) as first, session(served.url) as second):
        tools = await first.list_tools()
        assert [t.name for t in tools.tools] == ["knowledge.search"]

        async def search(client: ClientSession, query: str) -> None:
            results.append((query, await client.call_tool("knowledge.search", {"text": query})))

        async with anyio.create_task_group() as tg:
            for i in range(CALLS_PER_CLIENT):
                for client in (first, second):
                    tg.start_soon(search, client, queries[i % len(queries)])
    assert len(results) == 2 * CALLS_PER_CLIENT
    for query, result in results:
        assert not result.is_error, text_of(result)
        assert structured(result)["passages"][0]["chunk_id"] == expected[query], (query, structured(result))
        assert isinstance(result.content[0], types.TextContent), result.content
        assert result.content[0].text.startswith("<knowledge"), result.content[0].text
    assert len({structured(r)["trace_id"] for _, r in results}) == len(results)  # each call traced on its own
    # Nothing went wrong inside the server: its stderr holds its announcements only.
    assert all(line.startswith("{") for line in served.lines if line.strip()), served.stderr()


async def test_http_listens_on_the_loopback_and_refuses_a_foreign_host_header(
        anyio_backend_name: str, service: KnowledgeService, sql: Database, database_dsn: str, tenant: str) -> None:
    """It listens on 127.0.0.1 only, and a request naming another host (what a page the user visits
    sends after a DNS rebinding) is refused by the SDK's protection before anything is served: no
    session opened, and a search — the client's own request replayed with only its Host changed —
    not run (the client's own is: one trace, the client's)."""
    await ingest(service, tenant, {"Rollback": DOCUMENTS["Rollback"]})
    requests: list[httpx2.Request] = []
    responses: list[httpx2.Response] = []

    async def seen_request(request: httpx2.Request) -> None:
        requests.append(request)

    async def seen_response(response: httpx2.Response) -> None:
        responses.append(response)

    async with serving(database_dsn, tenant, anyio_backend_name) as served:
        url = urlsplit(served.url)
        assert (url.scheme, url.hostname, url.path) == ("http", "127.0.0.1", "/mcp"), served.url
        assert await anyio.to_thread.run_sync(_listening, served.process.pid) == [("127.0.0.1", url.port)]
        async with httpx2.AsyncClient(event_hooks={"request": [seen_request], "response": [seen_response]}) as http:
            # A session opened from a foreign page: refused, and no session id handed out.
            opening = await http.post(served.url, headers={"Host": EVIL_HOST, "Accept": MCP_ACCEPT}, json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "page", "version": "0"}}})
            assert (opening.status_code, opening.text) == (421, "Invalid Host header"), opening
            assert "mcp-session-id" not in opening.headers
            async with session(served.url, http) as client:
                ids = {r.headers["mcp-session-id"] for r in responses if "mcp-session-id" in r.headers}
                assert len(ids) == 1, ids
                session_id = ids.pop()
                # A search through the session, from the client itself: served.
                result = await client.call_tool("knowledge.search", {"text": "roll back a deploy"})
                assert not result.is_error, text_of(result)
                assert structured(result)["passages"], structured(result)
                # The very same request, sent from a foreign page (its Host the page's): refused, nothing run.
                sent = [r for r in requests if b'"tools/call"' in r.content]
                assert len(sent) == 1 and sent[0].headers["mcp-session-id"] == session_id, sent
                headers = {k: v for k, v in sent[0].headers.items() if k.lower() not in ("host", "content-length")}
                replayed = await http.post(served.url, content=sent[0].content, headers={**headers, "Host": EVIL_HOST})
                assert (replayed.status_code, replayed.text) == (421, "Invalid Host header"), replayed
    traces = await sql.fetch("SELECT trace_id::text AS trace_id, session_id FROM knowledge_traces WHERE tenant_id = $1",
                             tenant)
    assert [(t["trace_id"], t["session_id"]) for t in traces] == [(structured(result)["trace_id"],
                                                                   f"mcp-{session_id}")]
    # Refused by the SDK's DNS-rebinding protection (it logs each refusal), twice and nothing else.
    refusals = [line for line in served.lines if f"Invalid Host header: {EVIL_HOST}" in line]
    assert len(refusals) == 2, served.stderr()
    assert all(line.startswith("{") or line in refusals for line in served.lines if line.strip()), served.stderr()


@pytest.mark.parametrize(("signum", "parsed"),
                         [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGTERM, True)],
                         ids=["SIGTERM", "SIGINT", "SIGTERM-with-parser-children"])
async def test_http_sigterm_and_sigint_stop_the_server_and_its_children(
        anyio_backend_name: str, service: KnowledgeService, database_dsn: str, tenant: str,
        signum: signal.Signals, parsed: bool) -> None:
    """A signal while a client is connected (its search done, its session open): the server stops,
    says why, exits 0, and leaves none of its children behind. A search alone starts no child; so,
    once (``parsed``), the client first ingests an HTML page through the server (with the scope that
    offers ``knowledge.ingest``): its parser pool parses it in a child, then keeps spare children
    running — alive when the signal comes."""
    await ingest(service, tenant, {"Rollback": DOCUMENTS["Rollback"]})
    flags = ("--scope", "knowledge.write", "--origin-trust", "USER") if parsed else ()
    async with serving(database_dsn, tenant, anyio_backend_name, *flags) as served:
        async with session(served.url) as client:
            if parsed:
                ref = await service.put_artifact(tenant, PAGE, media_type="text/html", origin=ArtifactOrigin.UPLOAD,
                                                  trust=TrustLevel.USER, file_name="failover.html")
                done = await client.call_tool("knowledge.ingest", {
                    "source": json.loads(ref.model_dump_json()), "title": "Failover", "visibility": "tenant"})
                assert not done.is_error, text_of(done)
                live = await served.live_children()
                assert live, f"no parser child alive after a parse:\n{served.stderr()}"
            result = await client.call_tool("knowledge.search", {"text": "roll back a deploy"})
            assert not result.is_error and structured(result)["passages"], text_of(result)
            await served.record_children()
            signalled = anyio.current_time()
            served.process.send_signal(signum)
            with anyio.fail_after(FAIL_SAFE_SECONDS):
                await served.exited.wait()
            took = anyio.current_time() - signalled
        with anyio.fail_after(FAIL_SAFE_SECONDS):
            stopped = await served.announced("stopped")
        left = await anyio.to_thread.run_sync(_alive, list(served.children))
        described = await anyio.to_thread.run_sync(_described, left)
    print(f"{signum.name}{' after a parse' if parsed else ''}: stopped {took:.1f} s after it; "
          f"{len(served.children)} children seen while it ran")
    assert served.process.returncode == 0, served.stderr()
    assert stopped == {"stopped": True, "why": "signal"}, served.stderr()
    assert described == [] and left == [], described
    # A clean stop: its announcements and nothing else (no traceback from a connection cut short).
    assert all(line.startswith("{") for line in served.lines if line.strip()), served.stderr()
