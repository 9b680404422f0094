"""`knowledge.mcp.stdio`: the newline-delimited JSON-RPC transport on a pair of descriptors (pipes
here; the process's own stdin/stdout in `knowledge mcp`), under both loops."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage

from knowledge.mcp import stdio
from knowledge.mcp.stdio import LineTooLong, stdio_streams

pytestmark = pytest.mark.anyio

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@contextmanager
def pipes() -> Iterator[tuple[int, int, int, int]]:
    """(the transport's stdin, what the test writes to it, the transport's stdout, what the test reads)."""
    stdin, feed = os.pipe()
    drain, stdout = os.pipe()
    try:
        yield stdin, feed, stdout, drain
    finally:
        for fd in (stdin, feed, stdout, drain):
            with suppress(OSError):
                os.close(fd)


async def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        await anyio.wait_writable(fd)
        view = view[os.write(fd, view):]


async def _read_line(fd: int) -> bytes:
    got = b""
    while not got.endswith(b"\n"):
        await anyio.wait_readable(fd)
        got += os.read(fd, 65536)
    return got


async def test_messages_in_order_malformed_lines_handed_over_and_end_of_file_ends_the_stream() -> None:
    with pipes() as (stdin, feed, stdout, drain):
        os.set_blocking(feed, False)
        os.set_blocking(drain, False)
        async with stdio_streams(stdin, stdout) as (read, write):
            await _write(feed, json.dumps(PING).encode() + b"\n\n   \nnot json\n" + json.dumps({**PING, "id": 2})
                         .encode()[:10])  # a blank line is skipped; a message split across writes is joined
            first = await read.receive()
            assert isinstance(first, SessionMessage) and first.message.id == 1  # type: ignore[union-attr]
            assert isinstance(await read.receive(), Exception)  # "not json": the SDK answers a parse error
            await _write(feed, json.dumps({**PING, "id": 2}).encode()[10:] + b"\n")
            second = await read.receive()
            assert isinstance(second, SessionMessage) and second.message.id == 2  # type: ignore[union-attr]
            response = types.JSONRPCResponse(jsonrpc="2.0", id=1, result={})
            await write.send(SessionMessage(response))
            assert json.loads(await _read_line(drain)) == {"jsonrpc": "2.0", "id": 1, "result": {}}
            os.close(feed)  # the client's end of file
            with pytest.raises(anyio.EndOfStream):
                await read.receive()


async def test_a_line_past_the_bound_is_dropped_and_the_next_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stdio, "MAX_LINE_BYTES", 1000)
    with pipes() as (stdin, feed, stdout, _drain):
        os.set_blocking(feed, False)
        async with stdio_streams(stdin, stdout) as (read, _write_stream), anyio.create_task_group() as tg:
            tg.start_soon(_write, feed, b"x" * 5000 + b"\n" + json.dumps(PING).encode() + b"\n")
            assert isinstance(await read.receive(), LineTooLong)
            after = await read.receive()
            assert isinstance(after, SessionMessage) and after.message.id == 1  # type: ignore[union-attr]
            await _write(feed, b"y" * 3000)  # past the bound before its end has arrived: dropped to its end
            assert isinstance(await read.receive(), LineTooLong)
            await _write(feed, b"y" * 3000 + b'"}\n' + json.dumps({**PING, "id": 3}).encode() + b"\n")
            last = await read.receive()
            assert isinstance(last, SessionMessage) and last.message.id == 3  # type: ignore[union-attr]


async def test_cancellation_stops_the_transport_at_once_while_the_client_stays_silent() -> None:
    with pipes() as (stdin, _feed, stdout, _drain):
        with anyio.CancelScope() as scope:
            async with stdio_streams(stdin, stdout) as (read, _write_stream):
                scope.cancel()  # a signal, in `knowledge mcp`: no thread is left blocked in a read
                await read.receive()
        assert scope.cancelled_caught


def test_the_descriptors_are_restored_after_serving(anyio_backend_name: str) -> None:
    """While serving, the descriptors given read the null device and write to stderr (nothing else
    in the process reaches the wire); afterwards they are the pipes again, blocking as before."""
    with pipes() as (stdin, feed, stdout, drain):
        before = (os.fstat(stdin).st_ino, os.fstat(stdout).st_ino, os.get_blocking(stdin))

        async def serve() -> None:
            async with stdio_streams(stdin, stdout):
                assert await anyio.to_thread.run_sync(os.read, stdin, 10) == b""  # /dev/null, not the pipe
                assert os.fstat(stdout).st_ino == os.fstat(2).st_ino

        anyio.run(serve, backend=anyio_backend_name)
        assert (os.fstat(stdin).st_ino, os.fstat(stdout).st_ino, os.get_blocking(stdin)) == before
        os.write(feed, b"still the pipe\n")
        assert os.read(stdin, 100) == b"still the pipe\n"
        os.write(stdout, b"out\n")
        assert os.read(drain, 100) == b"out\n"
