"""Passages per second through the embedder child, and its start: the encoder backends and thread
settings side by side (issues 11, 18 and 20).

    .venv/bin/python scripts/bench_embedder.py [--passages 300] [--loop trio|asyncio]

The same passages — a fixed sample of the chunks `prepare` makes of both docs corpora — go through
the real embedder (`knowledge.supervisors.embedder.Embedder`: the child process, framed JSON, the model) in
requests as the service sends them, with the other core idle and then busy (a spinning process of
this script's, as the host's event loop and PostgreSQL keep it busy in a service):

- issue 11's: sentence-transformers (torch), 2 encoder threads that spin while waiting
  (OMP_WAIT_POLICY=ACTIVE, OpenMP's default here), 16 passages per request — the baseline;
- issue 18's: torch, 2 threads that wait passively, ~16 estimated windows per request;
- today's: the install-time ONNX export under onnxruntime (`knowledge.semantic.onnx_model`), 2
  threads that do not spin, ~16 windows per request; and the same with 1 thread.

Prints, per row, the child's start (spawn to ready: loading the model), passages/s, windows/s and
the ratio to the baseline on the idle machine; the vectors agree across rows (largest cosine
distance printed). Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Sequence

import anyio
from retrieval_data import docs_sources, print_run

from knowledge.core.prepare import prepare
from knowledge.errors import IngestRefused
from knowledge.semantic.queue import BATCH_WINDOWS, batches, estimated_windows
from knowledge.supervisors.embedder import BATCH_PASSAGES, Embedder

Passage = tuple[tuple[str, ...], str, int]


def sample(n: int, seed: int = 7) -> list[Passage]:
    passages: list[Passage] = []
    for src in docs_sources():
        try:
            prepared = prepare(src.data.decode("utf-8"), src.title, "markdown")
        except IngestRefused:
            continue
        passages.extend((tuple(c.draft.heading_path), c.draft.text, c.draft.tokens) for c in prepared.chunks)
    return random.Random(seed).sample(passages, min(n, len(passages)))


async def through_child(passages: Sequence[Passage], threads: int, by_windows: bool, wait_policy: str,
                        encoder: str) -> tuple[float, float, list[str]]:
    """The start (spawn to ready) and the seconds to embed every passage, and the vectors."""
    embedder = Embedder(window=128, threads=threads)
    before = {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "KNOWLEDGE_ENCODER")}
    os.environ["OMP_WAIT_POLICY"] = wait_policy  # the child inherits it (it only sets a default)
    os.environ["KNOWLEDGE_ENCODER"] = encoder
    try:
        async with anyio.create_task_group() as tg:
            spawned = time.perf_counter()
            await tg.start(embedder.run)
            await embedder.wait_ready()
            start = time.perf_counter() - spawned
            await embedder.embed_passages([passages[0][:2]])  # warm
            if by_windows:
                ranges = batches([estimated_windows(t) for _, _, t in passages], BATCH_WINDOWS)
            else:
                ranges = [(i, min(i + BATCH_PASSAGES, len(passages))) for i in range(0, len(passages), BATCH_PASSAGES)]
            vectors: list[str] = []
            began = time.perf_counter()
            for first, last in ranges:
                for windows in await embedder.embed_passages([(h, t) for h, t, _ in passages[first:last]]):
                    vectors.extend(windows)
            seconds = time.perf_counter() - began
            tg.cancel_scope.cancel()
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return start, seconds, vectors


CONFIGS = (("issue 11: torch, 2 threads spinning, 16 passages/request", 2, False, "ACTIVE", "torch"),
           ("issue 18: torch, 2 threads passive, ~16 windows/request", 2, True, "PASSIVE", "torch"),
           ("today: onnx, 2 threads not spinning, ~16 windows/request", 2, True, "PASSIVE", "onnx"),
           ("onnx, 1 thread, ~16 windows/request", 1, True, "PASSIVE", "onnx"))


async def run(args: argparse.Namespace) -> list[str]:
    passages = sample(args.passages)
    out = [f"{len(passages)} passages sampled from both docs corpora; loop={args.loop}", "",
           f"{'embedder child':<58} {'other core':>10} {'start s':>7} {'seconds':>8} {'passages/s':>10} "
           f"{'windows/s':>9} {'ratio':>6}"]
    base_s = 0.0
    first: list[str] = []
    worst = 0.0
    for busy in (False, True):
        for name, threads, by_windows, policy, encoder in CONFIGS:
            async with _busy_core() if busy else _nothing():
                start, seconds, vectors = await through_child(passages, threads, by_windows, policy, encoder)
            base_s = base_s or seconds
            if not first:
                first = vectors
            else:
                worst = max(worst, max(1 - _cos(a, b) for a, b in zip(first, vectors, strict=True)))
            out.append(f"{name:<58} {'busy' if busy else 'idle':>10} {start:>7.2f} {seconds:>8.1f} "
                       f"{len(passages) / seconds:>10.1f} {len(vectors) / seconds:>9.1f} {base_s / seconds:>5.2f}x")
    out.append(f"largest cosine distance between the runs' vectors: {worst:.2e} ({len(first)} windows)")
    return out


@contextlib.asynccontextmanager
async def _busy_core() -> AsyncIterator[None]:
    """A process that spins on one core for the block's duration (killed and reaped after)."""
    async with await anyio.open_process([sys.executable, "-c", "while True: pass"]) as hog:
        try:
            yield
        finally:
            hog.kill()
            with anyio.CancelScope(shield=True):
                await hog.wait()


@contextlib.asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


def _cos(a: str, b: str) -> float:
    x = [float(v) for v in a.strip("[]").split(",")]
    y = [float(v) for v in b.strip("[]").split(",")]
    return sum(p * q for p, q in zip(x, y, strict=True))  # normalised vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    print_run(run, parser.parse_args())


if __name__ == "__main__":
    main()
