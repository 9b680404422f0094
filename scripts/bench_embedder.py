"""Passages per second through the embedder child: issue 11's settings beside today's (issue 18).

    .venv/bin/python scripts/bench_embedder.py [--passages 300] [--loop trio|asyncio]

The same passages — a fixed sample of the chunks `prepare` makes of both docs corpora — go through
the real embedder (`supervisors.embedder.Embedder`: the child process, framed JSON, the model) in
requests as the service sends them, with the other core idle and then busy (a spinning process of
this script's, as the host's event loop and PostgreSQL keep it busy in a service):

- issue 11's: 2 encoder threads that spin while waiting (OMP_WAIT_POLICY=ACTIVE, OpenMP's default
  here), 16 passages per request;
- 1 thread, requests of ~16 estimated windows;
- today's: 2 threads that wait passively (the child's default), ~16 windows per request.

The windows are today's for every row (issue 18 also halved the windows per passage:
`scripts/survey_embedding_cost.py`; the two gains multiply). Prints passages/s, windows/s and the
ratio to issue 11's settings on the idle machine; the vectors agree across rows (largest cosine
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

from knowledge.ingest import IngestRefused, prepare
from knowledge.semantic.queue import BATCH_WINDOWS, batches, estimated_windows
from supervisors.embedder import BATCH_PASSAGES, Embedder

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


async def through_child(passages: Sequence[Passage], threads: int, by_windows: bool, wait_policy: str
                        ) -> tuple[float, list[str]]:
    embedder = Embedder(window=128, threads=threads)
    before = os.environ.get("OMP_WAIT_POLICY")
    os.environ["OMP_WAIT_POLICY"] = wait_policy  # the child inherits it (it only sets a default)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(embedder.run)
            await embedder.wait_ready()
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
        if before is None:
            os.environ.pop("OMP_WAIT_POLICY", None)
        else:
            os.environ["OMP_WAIT_POLICY"] = before
    return seconds, vectors


CONFIGS = (("issue 11: 2 threads spinning, 16 passages per request", 2, False, "ACTIVE"),
           ("1 thread, ~16 windows per request", 1, True, "PASSIVE"),
           ("today: 2 threads waiting passively, ~16 windows per request", 2, True, "PASSIVE"))


async def run(args: argparse.Namespace) -> list[str]:
    passages = sample(args.passages)
    out = [f"{len(passages)} passages sampled from both docs corpora; loop={args.loop}", "",
           f"{'embedder child':<62} {'other core':>10} {'seconds':>8} {'passages/s':>10} {'windows/s':>9} "
           f"{'ratio':>6}"]
    base_s = 0.0
    first: list[str] = []
    worst = 0.0
    for busy in (False, True):
        for name, threads, by_windows, policy in CONFIGS:
            async with _busy_core() if busy else _nothing():
                seconds, vectors = await through_child(passages, threads, by_windows, policy)
            base_s = base_s or seconds
            if not first:
                first = vectors
            else:
                worst = max(worst, max(1 - _cos(a, b) for a, b in zip(first, vectors, strict=True)))
            out.append(f"{name:<62} {'busy' if busy else 'idle':>10} {seconds:>8.1f} {len(passages) / seconds:>10.1f} "
                       f"{len(vectors) / seconds:>9.1f} {base_s / seconds:>5.2f}x")
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
