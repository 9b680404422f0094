"""Stress the parser pool with the whole PDF corpus, hostile files included, N times, with random
cancellations and deadlines; then print jobs run, outcomes by reason, pages/s, peak child RSS and
leaked processes (must be 0). Exits non-zero on a leak.

    .venv/bin/python scripts/stress_parser_pool.py [--rounds 3] [--loop trio|asyncio] [--seed 1]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import random
import sys
import time
from pathlib import Path

import anyio
import psutil

from parsers.base import ExtractionRefused
from supervisors.parser_pool import ParserPool

PDFS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "pdf"


async def run(args: argparse.Namespace) -> int:
    with (PDFS / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    rng = random.Random(args.seed)
    pool = ParserPool()
    outcomes: collections.Counter[str] = collections.Counter()
    pages_done = 0
    peak_rss = 0
    me = psutil.Process()

    async def watch() -> None:
        nonlocal peak_rss
        while True:
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    peak_rss = max(peak_rss, child.memory_info().rss)
            await anyio.sleep(0.05)

    async def job(row: dict[str, str], limiter: anyio.Semaphore) -> None:
        nonlocal pages_done
        data = (PDFS / row["file"]).read_bytes()
        deadline = rng.choice([1.0, 5.0, 20.0, 60.0])
        cancel_after = rng.choice([None, None, None, 0.2, 1.0])
        async with limiter:
            with anyio.CancelScope() as scope:
                if cancel_after is not None:
                    scope.deadline = anyio.current_time() + cancel_after
                try:
                    text = await pool.extract(data, deadline)
                    outcomes["text"] += 1
                    pages_done += text.count("\f") + 1
                except ExtractionRefused as exc:
                    outcomes[exc.reason] += 1
            if scope.cancelled_caught:
                outcomes["cancelled"] += 1

    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        tg.start_soon(pool.keep_spares)  # as the service runs it: spares must not leak either
        limiter = anyio.Semaphore(4)  # more callers than slots: queueing and deadlines interact
        async with anyio.create_task_group() as jobs:
            for _ in range(args.rounds):
                for row in rng.sample(rows, len(rows)):
                    jobs.start_soon(job, row, limiter)
        tg.cancel_scope.cancel()
    elapsed = time.perf_counter() - began
    await anyio.sleep(0.2)
    leaked = [c.pid for c in me.children(recursive=True)] + sorted(pool.live)
    print(f"jobs run: {sum(outcomes.values())} ({args.rounds} rounds x {len(rows)} PDFs) in {elapsed:.1f}s; "
          f"loop={args.loop}")
    for reason, count in outcomes.most_common():
        print(f"  {reason:<16} {count}")
    print(f"pages extracted: {pages_done} ({pages_done / elapsed:.1f} pages/s, form feeds + 1 per text)")
    print(f"peak child RSS: {peak_rss / 2**20:.0f} MiB; leaked processes: {len(leaked)}")
    return 1 if leaked else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sys.exit(anyio.run(run, args, backend=args.loop))


if __name__ == "__main__":
    main()
