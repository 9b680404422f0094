"""Tool-call latency of ``knowledge.search`` through MCP (``knowledge mcp``) beside a direct
`KnowledgeService.search` measured in the same run, against the same database and corpus.

    .venv/bin/python scripts/bench_mcp.py [--loop both|trio|asyncio] [--queries 50] [--rounds 3]
                                          [--concurrency 8] [--starts 3] [--dsn DSN]

Setup (not timed in the tables): without ``--dsn`` an embedded PostgreSQL in a throwaway data
directory (stopped and removed at the end); with it, that server, where the run leaves its tenant
behind. Every Markdown file of ../shared/corpus/docs-etcd (96) is put and ingested through
`KnowledgeService.ingest` (`retrieval_data.ingest_sources`, titled by path) into a fresh tenant
``bench-mcp-<hex>``, visibility ``tenant``. Lexical arm only: ``$KNOWLEDGE_SEMANTIC_ARM`` is ``off``
unless the environment says otherwise (as in the tests), in this process and in the servers (passed
in their environment: the SDK's stdio client passes only HOME, PATH and a few more).

Queries (``--queries N``, default 50): the docs-dev questions about etcd (``qa/docs-dev.jsonl``: 23
answerable, then the 8 the corpus does not answer), then etcd section headings (the docs-train
questions of `build_docs_train.build`, spread evenly over their list) up to N.

Paths, for each event loop (``--loop``, default both: this process under ``anyio.run(...,
backend=loop)``, every server spawned with ``--loop`` equal to it), all as one principal of the
tenant (no scopes, origin trust USER, ceiling internal: the MCP server's defaults):

1. ``direct: svc.search`` — `KnowledgeService.search(KnowledgeQuery(...))` in this process: the
   baseline;
2. ``direct tool path: svc.tool_search`` — what the MCP tool runs: the search, the ``<knowledge>``
   block rendered and its trace committed (one transaction);
3. ``MCP stdio`` — one `mcp.ClientSession` over `mcp.stdio_client` spawning ``knowledge mcp``,
   ``session.call_tool("knowledge.search", {"text": q})`` (the SDK's client validates each result
   against the tool's output schema, as a host's does);
4. ``MCP streamable HTTP`` — ``knowledge mcp --http --port 0`` spawned, its URL read from its ready
   line on stderr, one `ClientSession` over `mcp.client.streamable_http.streamable_http_client`.

This process's service has the servers' pool size (`knowledge.cli.mcp_cmd.MCP_POOL_SIZE`). The four
paths are open at once and measured interleaved, so that a change in the machine's load weighs on
all of them alike: a warm-up (every query once per path, ``--concurrency`` at a time, which also
fills the pools); then ``--rounds`` sequential passes over the queries, each query sent down every
path in turn (the order rotating per query) — p50, p90 and mean ms over all those calls (wall time
per call, ``time.perf_counter``); then queries/s: each round, each path in turn (rotating) gets
every query twice with ``--concurrency`` calls in flight (tasks of one task group; one MCP session
per transport), and the median round is shown. Ratios are "× direct search": a row's latency over
the baseline's (above 1: slower), its queries/s over the baseline's (below 1: fewer). The chunk ids
(in order) of every sequential call are compared with the baseline's first-round answer to the same
query, and the calls that differ counted (for the baseline: its later rounds).

Server start (spawn → ``initialize`` answered): stdio, ``--starts`` cold starts (spawn, initialize,
close) and the measured session's own; HTTP, the measured session's (and when its ready line came).
Stop: stdio, stdin closed → exited (the SDK's shutdown); HTTP, SIGTERM → exited. Asserts nothing
about time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.abc
import mcp_types as types
from build_docs_train import build
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client import Transport
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from retrieval_data import CORPUS, docs_sources, ingest_sources, load_docs_dev

from knowledge.cli.mcp_cmd import MCP_POOL_SIZE
from knowledge.config import Settings
from knowledge.models import KnowledgeQuery
from knowledge.service import KnowledgeService
from knowledge.supervisors.embedded_pg import throwaway_data_dir

CORPUS_SET = "docs-etcd"
PRINCIPAL = "bench"
TOOL = "knowledge.search"
#: What a server's environment carries beyond the SDK's default (HOME, PATH …), as the tests pass.
PASSED_ENV = ("KNOWLEDGE_SEMANTIC_ARM", "PYTHONPATH", "TMPDIR")
#: Seconds a server gets to announce it is ready, and to exit once told to stop.
START_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0

#: One call of a path: a query's text -> its passages' chunk ids, in order.
Call = Callable[[str], Awaitable[list[str]]]


class BenchError(RuntimeError):
    pass


@dataclass
class PathRun:
    name: str
    call: Call | None = None  # None: it could not be opened (`failed` says why)
    seconds: list[float] = field(default_factory=list)  # every sequential call
    ids: list[list[str]] = field(default_factory=list)  # and its chunk ids, in the same order
    queries: list[int] = field(default_factory=list)  # and its query's index
    qps: list[float] = field(default_factory=list)  # one per round
    failed: str | None = None


@dataclass
class Server:
    transport: str
    starts: list[float] = field(default_factory=list)  # spawn -> initialize answered
    ready: float | None = None  # spawn -> ready line (HTTP)
    stops: list[float] = field(default_factory=list)
    exit_code: int | None = None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=40))  # its stderr's last lines (HTTP)


@dataclass
class LoopResult:
    loop: str
    paths: list[PathRun]
    servers: list[Server]


# --------------------------------------------------------------------------- setup


def queries(n: int) -> tuple[list[str], str]:
    """The query texts, and a line saying where they come from."""
    dev = load_docs_dev()
    asked = [q["question"] for q in dev if str(q.get("file") or "").startswith(CORPUS_SET + "/")]
    unanswerable = [q["question"] for q in dev if q.get("unanswerable")]
    texts = list(dict.fromkeys([*asked, *unanswerable]))[:n]
    wanted = n - len(texts)
    headings = [q["question"] for q in build() if q["file"].startswith(CORPUS_SET + "/")]
    spread = [headings[i * len(headings) // wanted] for i in range(min(wanted, len(headings)))]
    picked = [h for h in dict.fromkeys(spread) if h not in texts]
    n_asked = sum(t in asked for t in texts)
    where = (f"{n_asked} docs-dev etcd questions + {len(texts) - n_asked} unanswerable docs-dev questions + "
             f"{len(picked)} of the {len(headings)} etcd section headings of docs-train")
    return texts + picked, where


async def set_up(settings: Settings, tenant: str) -> tuple[str, list[str]]:
    """The corpus ingested into ``tenant``: the service's DSN and lines describing the setup."""
    sources = [s for s in docs_sources() if s.key.startswith(CORPUS_SET + "/")]
    async with KnowledgeService.open(settings) as svc:
        began = time.perf_counter()
        docs, refused = await ingest_sources(svc, tenant, sources)
        seconds = time.perf_counter() - began
        size = await svc.corpus_size(tenant)
        status = svc.retrieval()
        return svc.dsn, [
            f"corpus: {CORPUS / CORPUS_SET}: {len(sources)} Markdown files -> {len(docs)} documents, {size.chunks} "
            f"chunks, {size.tokens} tokens through KnowledgeService.ingest in {seconds:.1f}s "
            f"(refused {refused or 0}); tenant {tenant}",
            f"retrieval: arms {status.arms}, ranking {status.ranking} "
            f"(KNOWLEDGE_SEMANTIC_ARM={os.environ.get('KNOWLEDGE_SEMANTIC_ARM')})",
        ]


# --------------------------------------------------------------------------- the MCP clients


def server_command(dsn: str, tenant: str, loop: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", "knowledge", "--dsn", dsn, "--tenant", tenant, "--principal", PRINCIPAL,
            "--loop", loop, "--json", "mcp", *flags]


def passed_env() -> dict[str, str]:
    return {k: os.environ[k] for k in PASSED_ENV if k in os.environ}


def stdio_transport(dsn: str, tenant: str, loop: str, errlog: TextIO) -> Transport:
    command = server_command(dsn, tenant, loop)
    return stdio_client(StdioServerParameters(command=command[0], args=command[1:], env=passed_env()),
                        errlog=errlog)


async def _read_announcements(process: anyio.abc.Process, errlog: TextIO, server: Server, began: float, *,
                              task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
    """The server's stderr copied to ``errlog`` until it closes; the URL of its ready line handed
    to ``task_status`` (the server ending before it is ready: `BenchError`)."""
    assert process.stderr is not None
    pending = b""
    ready = False
    async for chunk in process.stderr:
        *lines, pending = (pending + chunk).split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            errlog.write(line + "\n")
            server.tail.append(line)
            facts = json.loads(line) if not ready and line.startswith("{") else {}
            if facts.get("ready") and facts.get("url"):
                ready = True
                server.ready = time.perf_counter() - began
                task_status.started(str(facts["url"]))
        errlog.flush()
    if not ready:
        raise BenchError("the HTTP server ended before it was ready")


@contextlib.asynccontextmanager
async def http_transport(command: list[str], server: Server, errlog: TextIO) -> AsyncIterator[Any]:
    """``knowledge mcp --http --port 0`` spawned, and the SDK's streamable-HTTP client on the URL
    it announces; on exit the client ends its session, then the server gets SIGTERM and is waited
    for (killed after `STOP_TIMEOUT`, or at once if the block failed)."""
    began = time.perf_counter()
    process = await anyio.open_process(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, env=get_default_environment() | passed_env())
    try:
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(START_TIMEOUT):
                url = await tg.start(_read_announcements, process, errlog, server, began)
            async with streamable_http_client(url) as streams:
                yield streams
            closing = time.perf_counter()
            process.terminate()
            with anyio.move_on_after(STOP_TIMEOUT):
                await process.wait()
            server.stops.append(time.perf_counter() - closing)
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            server.exit_code = await process.wait()
            await process.aclose()


@contextlib.asynccontextmanager
async def mcp_session(server: Server, transport: Transport) -> AsyncIterator[ClientSession]:
    """An initialized session over ``transport`` (entering it spawns the server), the tools listed
    as a host does; ``server`` gets its start time, and its stop time for stdio (HTTP: timed from
    the SIGTERM, in `http_transport`)."""
    began = time.perf_counter()
    async with transport as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            server.starts.append(time.perf_counter() - began)
            tools = [t.name for t in (await session.list_tools()).tools]
            if TOOL not in tools:
                raise BenchError(f"the server does not offer {TOOL}: {tools}")
            yield session
        closing = time.perf_counter()
    if server.transport == "stdio":
        server.stops.append(time.perf_counter() - closing)


def mcp_call(session: ClientSession) -> Call:
    async def call(text: str) -> list[str]:
        result = await session.call_tool(TOOL, {"text": text})
        content = result.structured_content
        if result.is_error or not isinstance(content, dict):
            shown = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
            raise BenchError(f"{TOOL} over MCP failed for {text!r}: {shown[:300]}")
        return [str(p["chunk_id"]) for p in content["passages"]]

    return call


def leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def failure(exc: Exception, server: Server) -> str:
    """Why a server's session could not be opened: the client's error, the server's last words."""
    first = leaves(exc)[0]
    why = f"client: {type(first).__name__}: {first}"
    said = [line for line in server.tail if not line.startswith("{")]
    if said:
        why += f"; server: {said[-1].strip()}"
    if server.exit_code is not None:
        why += f"; server exit code {server.exit_code}"
    return why


# --------------------------------------------------------------------------- measuring


async def run_concurrently(texts: Sequence[str], call: Call, concurrency: int) -> None:
    pending = list(reversed(texts))

    async def worker() -> None:
        while pending:
            await call(pending.pop())

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)


def rotated(items: Sequence[tuple[PathRun, Call]], by: int) -> list[tuple[PathRun, Call]]:
    k = by % len(items)
    return [*items[k:], *items[:k]]


async def measure(paths: Sequence[PathRun], texts: Sequence[str], rounds: int, concurrency: int) -> None:
    """Every open path, interleaved (see the module docstring)."""
    live = [(p, p.call) for p in paths if p.call is not None]
    for _, call in live:
        await run_concurrently(texts, call, concurrency)  # warm-up
    for r in range(rounds):
        for i, text in enumerate(texts):
            for p, call in rotated(live, i + r):
                began = time.perf_counter()
                ids = await call(text)
                p.seconds.append(time.perf_counter() - began)
                p.ids.append(ids)
                p.queries.append(i)
    calls = [*texts, *texts]
    for r in range(rounds):
        for p, call in rotated(live, r):
            began = time.perf_counter()
            await run_concurrently(calls, call, concurrency)
            p.qps.append(len(calls) / (time.perf_counter() - began))


async def cold_starts(n: int, server: Server, dsn: str, tenant: str, loop: str, errlog: TextIO) -> None:
    for _ in range(n):
        async with mcp_session(server, stdio_transport(dsn, tenant, loop, errlog)):
            pass


async def bench_loop(loop: str, settings: Settings, dsn: str, tenant: str, texts: Sequence[str],
                     args: argparse.Namespace, errlog: TextIO) -> LoopResult:
    stdio, http = Server("stdio"), Server("streamable HTTP")
    with contextlib.suppress(Exception):  # (a failure shows in the session's own attempt below)
        await cold_starts(args.starts, stdio, dsn, tenant, loop, errlog)
    paths = [PathRun("direct: svc.search (baseline)"), PathRun("direct tool path: svc.tool_search"),
             PathRun("MCP stdio: call_tool"), PathRun("MCP streamable HTTP: call_tool")]
    async with contextlib.AsyncExitStack() as stack:
        svc = await stack.enter_async_context(KnowledgeService.open(settings))

        def query(text: str) -> KnowledgeQuery:
            return KnowledgeQuery(tenant_id=tenant, principal_id=PRINCIPAL, text=text)

        async def search(text: str) -> list[str]:
            return [p.chunk_id for p in await svc.search(query(text))]

        async def tool_search(text: str) -> list[str]:
            return [p.chunk_id for p in (await svc.tool_search(query(text))).passages]

        paths[0].call, paths[1].call = search, tool_search
        http_command = server_command(dsn, tenant, loop, "--http", "--port", "0")
        for path, server, transport in ((paths[2], stdio, stdio_transport(dsn, tenant, loop, errlog)),
                                        (paths[3], http, http_transport(http_command, http, errlog))):
            try:
                path.call = mcp_call(await stack.enter_async_context(mcp_session(server, transport)))
            except Exception as exc:
                path.failed = failure(exc, server)
        await measure(paths, texts, args.rounds, args.concurrency)
    return LoopResult(loop, paths, [stdio, http])


# --------------------------------------------------------------------------- report


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile, in ms."""
    ordered = sorted(seconds)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] * 1000


def table(result: LoopResult, concurrency: int) -> list[str]:
    base = result.paths[0]
    reference = {q: ids for q, ids in reversed(list(zip(base.queries, base.ids, strict=True)))}  # the 1st round's
    base_p50, base_mean = percentile_ms(base.seconds, 0.5), statistics.fmean(base.seconds) * 1000
    base_qps = statistics.median(base.qps)
    head = ["path", "p50 ms", "p90 ms", "mean ms", "p50 × direct", "mean × direct", f"q/s ({concurrency} in flight)",
            "q/s × direct", "ids ≠ direct"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---", *["--:"] * (len(head) - 1)]) + "|"]
    for p in result.paths:
        if p.failed is not None:
            lines.append("| " + " | ".join([p.name, *["failed"] * (len(head) - 1)]) + " |")
            continue
        p50, mean, qps = percentile_ms(p.seconds, 0.5), statistics.fmean(p.seconds) * 1000, statistics.median(p.qps)
        compared = [(q, ids) for n, (q, ids) in enumerate(zip(p.queries, p.ids, strict=True))
                    if p is not base or n >= len(reference)]
        differ = f"{sum(ids != reference[q] for q, ids in compared)}/{len(compared)}"
        cells = [p.name, f"{p50:.2f}", f"{percentile_ms(p.seconds, 0.9):.2f}", f"{mean:.2f}", f"{p50 / base_p50:.2f}",
                 f"{mean / base_mean:.2f}", f"{qps:.1f}", f"{qps / base_qps:.2f}",
                 differ if p is not base else f"{differ} (its later rounds)" if compared else "- (one round)"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report(result: LoopResult, texts: Sequence[str], args: argparse.Namespace) -> list[str]:
    base = result.paths[0]
    first = base.ids[:len(texts)]
    lines = ["", f"### loop: {result.loop}", "",
             f"{len(texts)} queries × {args.rounds} rounds sequential (p50/p90/mean over "
             f"{len(texts) * args.rounds} calls per path, paths interleaved), then q/s: {2 * len(texts)} calls "
             f"{args.concurrency} in flight, median of {args.rounds} rounds; passages per query "
             f"{statistics.fmean(len(ids) for ids in first):.2f} ({sum(not ids for ids in first)} queries with none)",
             "", *table(result, args.concurrency), ""]
    for s in result.servers:
        stop = "stdin closed -> exited" if s.transport == "stdio" else "SIGTERM -> exited"
        starts = "-" if not s.starts else (
            f"{statistics.median(s.starts):.2f}s" if len(s.starts) == 1 else
            f"median {statistics.median(s.starts):.2f}s of {len(s.starts)} (min {min(s.starts):.2f}, max "
            f"{max(s.starts):.2f})")
        ready = f", its ready line after {s.ready:.2f}s" if s.ready is not None else ""
        stops = "-" if not s.stops else f"{statistics.median(s.stops):.2f}s" + (
            f" (median of {len(s.stops)})" if len(s.stops) > 1 else "")
        lines.append(f"- {s.transport} server: start (spawn -> initialize answered) {starts}{ready}; "
                     f"stop ({stop}) {stops}")
    lines += [f"- FAILED {p.name}: {p.failed}" for p in result.paths if p.failed is not None]
    return lines


# --------------------------------------------------------------------------- main


def run(args: argparse.Namespace, errlog: TextIO) -> list[str]:
    texts, where = queries(args.queries)
    loops = ["trio", "asyncio"] if args.loop == "both" else [args.loop]
    tenant = f"bench-mcp-{uuid.uuid4().hex[:8]}"
    out: list[str] = []
    with throwaway_data_dir("knowledge-bench-mcp-", dsn=args.dsn) as data_dir:
        # This process's service as the MCP server's (`knowledge.cli.context.Options.settings`): its
        # pool, no sweeper, no attachment workers.
        settings = Settings(dsn=args.dsn, data_dir=data_dir, pool_min_size=1, pool_max_size=MCP_POOL_SIZE,
                            sweep_interval_seconds=None, attachment_workers=0)
        began = time.perf_counter()
        dsn, setup = anyio.run(set_up, settings, tenant, backend=loops[0])
        out += [*setup, f"database: {'external (--dsn)' if args.dsn else 'embedded, throwaway'}; setup "
                        f"{time.perf_counter() - began:.1f}s under {loops[0]}", f"queries: {where}"]
        for loop in loops:
            out += report(anyio.run(bench_loop, loop, settings, dsn, tenant, texts, args, errlog, backend=loop),
                          texts, args)
    out += ["", "× direct: the row's latency / svc.search's (above 1: slower); its q/s / svc.search's (below 1: "
                "fewer). ids ≠ direct: sequential calls whose chunk ids (in order) differ from svc.search's first "
                "answer to the same query."]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", choices=["both", "trio", "asyncio"], default="both")
    parser.add_argument("--queries", type=int, default=50, help="how many queries (default 50)")
    parser.add_argument("--rounds", type=int, default=3, help="sequential passes and q/s rounds (default 3)")
    parser.add_argument("--concurrency", type=int, default=8, help="calls in flight for q/s (default 8)")
    parser.add_argument("--starts", type=int, default=3, help="extra cold starts of the stdio server (default 3)")
    parser.add_argument("--dsn", default=None, help="an external server (default: a throwaway embedded one)")
    args = parser.parse_args()
    if min(args.queries, args.rounds, args.concurrency) < 1 or args.starts < 0:
        parser.error("--queries, --rounds and --concurrency must be at least 1, --starts at least 0")
    os.environ.setdefault("KNOWLEDGE_SEMANTIC_ARM", "off")  # lexical, as the tests (and passed to the servers)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="knowledge-bench-mcp-") as logs:
        log = Path(logs) / "servers.log"
        with log.open("a", encoding="utf-8") as errlog:
            try:
                lines = run(args, errlog)
            except BaseException:
                errlog.flush()
                sys.stderr.write("--- the servers' stderr, last 60 lines:\n" +
                                 "\n".join(log.read_text(encoding="utf-8").splitlines()[-60:]) + "\n")
                raise
    print("\n".join(lines))
    print(f"\ntotal {time.perf_counter() - began:.0f}s")


if __name__ == "__main__":
    main()
