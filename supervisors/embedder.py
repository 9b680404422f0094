"""The embedder: one long-lived child process per service, owned by the service's task group.

The encoder (a transformer on the CPU, ~35 ms per 128-piece window on this machine) must never
run on the event loop nor in the default thread executor, and loading it costs seconds, so it runs
in one child (`knowledge.semantic.child`) started by `Embedder.run` — a background actor of
`KnowledgeService` — and kept for the service's life:

- **Requests queue in the actor; queries go together and alternate with batches.** Every query
  waiting (a search's `embed_query`) goes to the child in one request, and ingest sends at most
  `BATCH_PASSAGES` passages per request; while both wait they alternate, so a search waits for at
  most one batch (not a whole document) and a stream of searches cannot starve ingest.
- **A cancelled caller costs no restart.** The request it left is dropped if not yet sent; if the
  child is computing it, the reply is read and discarded (a batch is bounded), so cancellations —
  which a host does constantly — never kill the model.
- **Death, deadlines and restarts.** A child that exits, sends garbage or overruns a request's
  deadline is killed (process group SIGKILL) and reaped before the actor starts another, with
  backoff; the request in flight fails with `EmbedderUnavailable` (transient: an ingest that gets
  it writes nothing and may be retried). Leaving the service closes the child's stdin, waits, and
  kills and reaps it if it lingers.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import signal
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import Process, TaskStatus

from knowledge.errors import EmbedderUnavailable

_log = logging.getLogger(__name__)

#: Passages per ingest request: at most a second or so of encoding.
BATCH_PASSAGES = 16
#: Queries sent together at most (each is one short window).
MAX_QUERIES = 32
START_SECONDS = 120.0  # importing torch and loading the model, cold
#: A request's deadline: this, plus per window-sized passage.
REQUEST_BASE_SECONDS = 30.0
REQUEST_PER_ITEM_SECONDS = 2.0
_REAP_SECONDS = 10.0
_MAX_FRAME = 64 * 1024 * 1024


@dataclass
class _Request:
    payload: dict[str, Any]
    items: int
    done: anyio.Event = field(default_factory=anyio.Event)
    reply: dict[str, Any] | None = None
    error: BaseException | None = None


@dataclass
class Embedder:
    """The client half (`embed_passages`, `embed_queries`) and the owning actor (`run`)."""

    window: int
    threads: int = 1
    restart_base_seconds: float = 1.0
    restart_max_seconds: float = 30.0
    version: str | None = None  # known once the child said it is ready
    dim: int | None = None
    restarts: int = 0
    #: Children in a row that failed without serving (the last one counts 1 if it had served).
    failures: int = 0
    _queries: collections.deque[_Request] = field(default_factory=collections.deque)
    _batches: collections.deque[_Request] = field(default_factory=collections.deque)
    _wake: anyio.Event = field(default_factory=anyio.Event)
    _ready: anyio.Event = field(default_factory=anyio.Event)
    _closed: bool = False
    _serving: bool = False
    _served: bool = False
    _queries_last: bool = False
    pid: int | None = None

    @property
    def serving(self) -> bool:
        """A child has loaded the model and is serving requests (not starting, not restarting)."""
        return self._serving

    # ------------------------------------------------------------------ the client half

    async def embed_passages(self, passages: Sequence[tuple[Sequence[str], str]]) -> list[list[str]]:
        """Vectors (pgvector literals) of every window of each passage, in passage order."""
        out: list[list[str]] = [[] for _ in passages]
        for first in range(0, len(passages), BATCH_PASSAGES):
            part = passages[first:first + BATCH_PASSAGES]
            reply = await self._call(self._batches, {"op": "passages", "items": [[list(h), t] for h, t in part]},
                                     len(part))
            for owner, vector in zip(reply["owners"], reply["vectors"], strict=True):
                out[first + int(owner)].append(vector)
        return out

    async def embed_query(self, text: str) -> str:
        return (await self.embed_queries([text]))[0]

    async def embed_queries(self, texts: Sequence[str]) -> list[str]:
        """Vectors (pgvector literals) of short texts (queries, claims), in order, in one request."""
        if not texts:
            return []
        reply = await self._call(self._queries, {"op": "queries", "texts": list(texts)}, len(texts))
        return [str(v) for v in reply["vectors"]]

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def _call(self, queue: collections.deque[_Request], payload: dict[str, Any], items: int
                    ) -> dict[str, Any]:
        if self._closed:
            raise EmbedderUnavailable(message="the embedder is closed")
        request = _Request(payload, items)
        queue.append(request)
        self._wake.set()
        try:
            await request.done.wait()
        except BaseException:  # not yet sent: dropped; in flight: its reply is read and discarded
            with contextlib.suppress(ValueError):
                queue.remove(request)
            raise
        if request.error is not None:
            raise request.error
        assert request.reply is not None
        return request.reply

    # ------------------------------------------------------------------ the actor

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep a child and serve requests until cancelled; the caller's task group owns this."""
        task_status.started()
        try:
            while True:
                self._served = False
                try:
                    await self._serve_one_child()
                except Exception as exc:
                    # A child that served before it failed starts the count again: backoff is for
                    # children that fail while starting, not for the occasional crash of a good one.
                    self.failures = 1 if self._served else self.failures + 1
                    self.restarts += 1
                    delay = min(self.restart_base_seconds * 2 ** (self.failures - 1), self.restart_max_seconds)
                    _log.error("embedder child failed (%s, %d in a row); restarting in %.1f s",
                               _reason(exc), self.failures, delay)
                    if self.failures > 1:  # a child that keeps failing must not leave callers waiting
                        self._fail_queued(EmbedderUnavailable(message=f"the embedder child failed: {_reason(exc)}"))
                    await anyio.sleep(delay)
        finally:
            self._closed = True
            self._fail_queued(EmbedderUnavailable(message="the embedder is closed"))

    def _fail_queued(self, error: EmbedderUnavailable) -> None:
        """Fail every request not yet sent to a child."""
        for queue in (self._queries, self._batches):
            while queue:
                request = queue.popleft()
                request.error = error
                request.done.set()

    async def _serve_one_child(self) -> None:
        command = [sys.executable, "-m", "knowledge.semantic.child", "--window", str(self.window),
                   "--threads", str(self.threads)]
        process = await anyio.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=None, start_new_session=True)
        self.pid = process.pid
        reader = _FrameReader(process)
        hello: dict[str, Any] = {}
        try:
            with anyio.fail_after(START_SECONDS):
                hello = await reader.frame()
            if not hello.get("ready"):
                raise RuntimeError(f"embedder child did not start: {hello}")
            self.version, self.dim = str(hello["version"]), int(hello["dim"])
            self._ready.set()
            self._serving = self._served = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(_watch, process)  # an idle child that dies is replaced at once
                await self._serve_requests(process, reader)
        finally:
            self.pid, self._serving = None, False
            with anyio.CancelScope(shield=True):  # a child still loading the model is killed at once
                await _close(process, patience=2.0 if hello.get("ready") else 0.0)

    async def _serve_requests(self, process: Process, reader: _FrameReader) -> None:
        """Send each request and read its reply until the child fails (or the actor is cancelled)."""
        while True:
            group = await self._next()
            queries = group[0].payload["op"] == "queries"
            if queries:  # every waiting query's texts: one request, one forward pass
                payload = {"op": "queries", "texts": [t for r in group for t in r.payload["texts"]]}
                items = len(payload["texts"])
            else:
                payload, items = group[0].payload, group[0].items
            body = json.dumps(payload, separators=(",", ":")).encode()
            try:
                with anyio.fail_after(REQUEST_BASE_SECONDS + REQUEST_PER_ITEM_SECONDS * items):
                    await process.stdin.send(struct.pack(">I", len(body)) + body)  # type: ignore[union-attr]
                    reply = await reader.frame()
            except BaseException as exc:
                for request in group:
                    request.error = EmbedderUnavailable(
                        message=f"the embedder child failed during a request: {exc!r}")
                    request.done.set()
                raise
            first = 0
            for request in group:
                if "error" in reply:
                    request.error = EmbedderUnavailable(
                        message=f"the embedder child refused a request: {reply['error']}")
                elif queries:
                    request.reply = {"vectors": reply["vectors"][first:first + request.items]}
                    first += request.items
                else:
                    request.reply = reply
                request.done.set()

    async def _next(self) -> list[_Request]:
        """What to send next: every waiting query (up to `MAX_QUERIES`), or one batch — queries
        first, unless queries went last and a batch waits. (Every queued request has a caller
        waiting: one that gives up removes its request, `_call`.)"""
        while True:
            if self._queries and not (self._queries_last and self._batches):
                self._queries_last = True
                return [self._queries.popleft() for _ in range(min(len(self._queries), MAX_QUERIES))]
            if self._batches:
                self._queries_last = False
                return [self._batches.popleft()]
            self._wake = anyio.Event()
            await self._wake.wait()


class _FrameReader:
    def __init__(self, process: Process) -> None:
        self.stream = process.stdout
        self.buffer = bytearray()

    async def _fill(self, size: int) -> None:
        while len(self.buffer) < size:
            try:
                chunk = await self.stream.receive(1 << 20)  # type: ignore[union-attr]
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                raise RuntimeError("the embedder child exited") from None
            self.buffer += chunk

    async def frame(self) -> dict[str, Any]:
        await self._fill(4)
        (size,) = struct.unpack(">I", self.buffer[:4])
        if size > _MAX_FRAME:
            raise RuntimeError(f"the embedder child sent a frame of {size} bytes")
        await self._fill(4 + size)
        body = bytes(self.buffer[4:4 + size])
        del self.buffer[:4 + size]
        reply = json.loads(body)
        if not isinstance(reply, dict):
            raise TypeError("the embedder child sent a non-object frame")
        return reply


async def _watch(process: Process) -> None:
    """Fail when the child exits: a child that dies while idle is noticed (and replaced) at once,
    not by the next request."""
    code = await process.wait()
    raise RuntimeError(f"the embedder child exited (status {code})")


def _reason(exc: BaseException) -> str:
    """A failure's message (an exception group's leaves, joined)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in exc.exceptions)
    return str(exc) or type(exc).__name__


async def _close(process: Process, patience: float) -> None:
    """End the child: close its stdin (it exits on EOF), then kill its group if it lingers past
    ``patience`` seconds; reap."""
    with contextlib.suppress(Exception):
        await process.stdin.aclose()  # type: ignore[union-attr]
    with anyio.move_on_after(patience):
        await process.wait()
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with anyio.move_on_after(_REAP_SECONDS):
            await process.wait()
    with contextlib.suppress(Exception):
        await process.aclose()
