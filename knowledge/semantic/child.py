"""The embedder child: ``python -m knowledge.semantic.child --window N --threads T``.

Loads the encoder once, then answers framed requests on stdin with framed replies on stdout, one
at a time, until stdin closes (so it ends with its parent, however the parent ends). A frame is a
4-byte big-endian length and that many bytes of JSON.

- ``{"op": "passages", "items": [[heading_path, text], ...]}`` → ``{"vectors": [...], "owners": [...]}``:
  every window of every passage, its vector as a pgvector text literal, and its passage's index.
- ``{"op": "queries", "texts": [...]}`` → ``{"vectors": [...]}``.

The first frame written is ``{"ready": true, "version": ..., "dim": ...}``; an error answers
``{"error": "..."}`` and the child goes on. Vectors are formatted here, off the host's event loop.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import struct
import sys
from typing import Any, BinaryIO

MAX_FRAME = 64 * 1024 * 1024


def read_frame(stream: BinaryIO) -> Any | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">I", head)
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes")
    body = stream.read(size)
    if len(body) < size:
        return None
    return json.loads(body)


def write_frame(stream: BinaryIO, obj: Any) -> None:
    body = json.dumps(obj, separators=(",", ":")).encode()
    stream.write(struct.pack(">I", len(body)) + body)
    stream.flush()


def literal(vector: Any) -> str:
    """A pgvector text literal (7 significant digits: float32 precision)."""
    return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing a library prints may corrupt the frames
    # Nor land in the host's terminal: no progress bars or chatter while the model loads.
    for name, value in (("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("TQDM_DISABLE", "1"),
                        ("TRANSFORMERS_VERBOSITY", "error"), ("TOKENIZERS_PARALLELISM", "false"),
                        # Encoder threads that wait sleep instead of spinning: with the other core busy
                        # (the host's loop, PostgreSQL) spinning threads collapse (scripts/bench_embedder.py).
                        ("OMP_WAIT_POLICY", "PASSIVE")):
        os.environ.setdefault(name, value)

    from knowledge.semantic.encoder import DIM, Encoder

    encoder = Encoder(window=args.window, threads=args.threads)
    write_frame(stdout, {"ready": True, "version": encoder.version, "dim": DIM})
    while (request := read_frame(stdin)) is not None:
        try:
            if request["op"] == "passages":
                vectors, owners = encoder.encode_passages([(tuple(h), t) for h, t in request["items"]])
                write_frame(stdout, {"vectors": [literal(v) for v in vectors], "owners": owners})
            elif request["op"] == "queries":
                write_frame(stdout, {"vectors": [literal(v) for v in encoder.encode(request["texts"])]})
            else:
                write_frame(stdout, {"error": f"unknown op {request['op']!r}"})
        except Exception as exc:
            write_frame(stdout, {"error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the parent is gone (it exited at once on a second signal): nobody to answer
        os._exit(0)
