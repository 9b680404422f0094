"""MCP's stdio transport on this process's stdin and stdout: one JSON-RPC message per line.

Why not the SDK's ``stdio_server``: it reads stdin in a worker thread (``anyio.wrap_file``), and a
thread blocked in ``readline`` cannot be cancelled — a server told to stop (SIGTERM, SIGINT) while
its client keeps the pipe open would wait for the client's next line. Here both ends are
non-blocking descriptors awaited on the event loop (``anyio.wait_readable``/``wait_writable``),
so cancellation stops the transport at once, under trio or asyncio.

**The wire is claimed.** While serving, the wire's descriptors are private duplicates; fd 0 reads
the null device and fd 1 writes to stderr, so nothing else in the process — a log handler, a
library's ``print``, a child process inheriting the descriptors (the embedded PostgreSQL, a parser
child) — can read the client's messages or corrupt the stream it reads. Both are restored on exit.

**Bounded.** A line longer than `MAX_LINE_BYTES` is dropped (the SDK answers the exception it is
handed with a parse error) and the reader goes on at the next line; a line that is not JSON-RPC is
handed over the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import AsyncIterator, Iterator

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.shared.message import SessionMessage

#: The longest message line read (a search's arguments are at most 10,000 characters; an ingest's a ref).
MAX_LINE_BYTES = 4 * 1024 * 1024
_READ = 64 * 1024


class LineTooLong(ValueError):
    """A message line past `MAX_LINE_BYTES`, dropped."""


@contextlib.contextmanager
def _claimed(fd: int, diversion: int) -> Iterator[int]:
    """``fd``'s wire as a private non-blocking duplicate, ``fd`` itself pointing at ``diversion``
    meanwhile; both as they were on exit."""
    wire = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    flags = fcntl.fcntl(wire, fcntl.F_GETFL)
    saved = os.dup(fd)
    try:
        os.dup2(diversion, fd)
        fcntl.fcntl(wire, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        yield wire
    finally:
        with contextlib.suppress(OSError):
            fcntl.fcntl(wire, fcntl.F_SETFL, flags)  # (a terminal's description is shared with the shell)
        os.dup2(saved, fd)
        os.close(saved)
        os.close(wire)


def _waits(fd: int) -> bool:
    """Whether readiness can be awaited on ``fd`` (a regular file, e.g. ``< messages.jsonl``, is
    always ready and cannot be polled)."""
    return not stat.S_ISREG(os.fstat(fd).st_mode)


async def _read_lines(wire: int, sink: ObjectSendStream[SessionMessage | Exception]) -> None:
    """Messages from ``wire`` until end of file, one per line, into ``sink`` (closed at the end)."""
    pending = bytearray()
    dropping = False  # inside a line past the bound: everything up to its end is dropped
    waits = _waits(wire)
    async with sink:
        while True:
            if waits:
                await anyio.wait_readable(wire)
            else:
                await anyio.lowlevel.checkpoint()
            try:
                data = os.read(wire, _READ)
            except BlockingIOError:
                continue
            if not data:
                return
            pending += data
            while (end := pending.find(b"\n")) >= 0:
                line = bytes(pending[:end])
                del pending[:end + 1]
                if dropping:
                    dropping = False
                elif len(line) > MAX_LINE_BYTES:
                    await sink.send(_too_long())
                elif line.strip():
                    await sink.send(_message(line))
            if dropping:
                pending.clear()
            elif len(pending) > MAX_LINE_BYTES:
                await sink.send(_too_long())
                dropping = True
                pending.clear()


def _too_long() -> LineTooLong:
    return LineTooLong(f"a message line over {MAX_LINE_BYTES} bytes was dropped")


def _message(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except Exception as exc:  # the SDK answers a malformed message; the transport goes on
        return exc


async def _write_lines(wire: int, source: ObjectReceiveStream[SessionMessage]) -> None:
    """Each message from ``source`` as one line on ``wire``, in order, until ``source`` closes."""
    async with source:
        async for message in source:
            data = memoryview((message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode())
            while data:
                try:
                    data = data[os.write(wire, data):]
                except BlockingIOError:
                    await anyio.wait_writable(wire)


@contextlib.asynccontextmanager
async def stdio_streams(stdin: int = 0, stdout: int = 1) -> AsyncIterator[
        tuple[ObjectReceiveStream[SessionMessage | Exception], ObjectSendStream[SessionMessage]]]:
    """The (read, write) streams of an MCP session over ``stdin``/``stdout``, for `Server.run`.

    The read stream ends at the client's end of file. On exit the reader stops; the writer sends
    what the server had handed it, then stops (or stops at once if the client went away: a
    broken pipe ends it, and cancellation always does)."""
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        with _claimed(stdin, null) as wire_in, _claimed(stdout, 2) as wire_out:
            read_sink, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            write_stream, write_source = anyio.create_memory_object_stream[SessionMessage](0)
            async with anyio.create_task_group() as tg:
                reader = anyio.CancelScope()

                async def read() -> None:
                    with reader, contextlib.suppress(anyio.BrokenResourceError):
                        await _read_lines(wire_in, read_sink)

                async def write() -> None:
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        await _write_lines(wire_out, write_source)

                tg.start_soon(read)
                tg.start_soon(write)
                try:
                    yield read_stream, write_stream
                finally:  # the reader first: nothing it reads now has a server to go to
                    reader.cancel()
                    with anyio.CancelScope(shield=True):  # (closing a memory stream does not wait)
                        await read_stream.aclose()
                        await write_stream.aclose()  # the writer sends what it holds, then ends
    finally:
        os.close(null)
