"""PDF extraction throughput: the parser pool (two disposable children) beside in-process
pdfminer.six on the same files in the same run, and the per-job overhead of a child.

    .venv/bin/python scripts/bench_pdf.py [--loop trio|asyncio] [--overhead-runs 20]

Files: the corpus's `text` and `large` PDFs. Prints a table; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pikepdf
from pdfminer.high_level import extract_text

from knowledge.parsers.pdf import PdfExtractor
from knowledge.supervisors.parser_pool import ParserPool

PDFS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "pdf"


def files() -> list[Path]:
    with (PDFS / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return [PDFS / r["file"] for r in rows if r["category"] in {"text", "large"}]


def pages(path: Path) -> int:
    with pikepdf.open(path) as pdf:
        return len(pdf.pages)


async def _one(extractor: PdfExtractor, data: bytes) -> None:
    async def source() -> AsyncIterator[bytes]:
        yield data

    await extractor.extract(source(), "application/pdf")


async def through_pool(blobs: list[bytes]) -> float:
    """The service's path: the PDF extractor (which splits a large PDF across both slots) on the pool."""
    pool = ParserPool()
    extractor = PdfExtractor(pool, deadline=600.0)  # bench: no deadline pressure
    async with anyio.create_task_group() as keeper:
        keeper.start_soon(pool.keep_spares)  # as the service runs it
        began = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for data in blobs:
                tg.start_soon(_one, extractor, data)
        elapsed = time.perf_counter() - began
        keeper.cancel_scope.cancel()
    return elapsed


async def overhead(data: bytes, path: Path, runs: int, spares: bool) -> tuple[float, float]:
    """Median wall ms of one job through the pool (with or without spare children kept warm, a pause
    between jobs as a host would have), and of the same extraction in process."""
    pool = ParserPool()
    through: list[float] = []
    inside: list[float] = []
    async with anyio.create_task_group() as tg:
        if spares:
            tg.start_soon(pool.keep_spares)
        await pool.extract(data)  # the first job on the loop starts the spares
        for _ in range(runs):
            await anyio.sleep(0.5)
            began = time.perf_counter()
            await pool.extract(data)
            through.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            extract_text(str(path))
            inside.append((time.perf_counter() - began) * 1000)
        tg.cancel_scope.cancel()
    return statistics.median(through), statistics.median(inside)


async def run(args: argparse.Namespace) -> None:
    paths = files()
    total_pages = sum(pages(p) for p in paths)
    began = time.perf_counter()
    for path in paths:
        extract_text(str(path))
    inproc = time.perf_counter() - began
    pooled = await through_pool([p.read_bytes() for p in paths])
    small = min(paths, key=lambda p: p.stat().st_size)
    small_data = small.read_bytes()
    cold_ms, inside_ms = await overhead(small_data, small, args.overhead_runs, spares=False)
    warm_ms, _ = await overhead(small_data, small, args.overhead_runs, spares=True)
    print(f"{len(paths)} PDFs (text + large), {total_pages} pages; loop={args.loop}")
    print(f"{'path':<44} {'seconds':>8} {'pages/s':>8} {'ratio':>7}")
    print(f"{'in-process pdfminer.six, one at a time':<44} {inproc:>8.2f} {total_pages / inproc:>8.1f} {1.0:>7.2f}")
    name = "PdfExtractor on the pool, 2 children"
    print(f"{name:<44} {pooled:>8.2f} {total_pages / pooled:>8.1f} {inproc / pooled:>7.2f}")
    print(f"per-job overhead on {small.name} (median of {args.overhead_runs}; in process {inside_ms:.0f} ms):")
    print(f"  fresh child per job: {cold_ms:.0f} ms = {cold_ms - inside_ms:.0f} ms overhead")
    print(f"  spare child (started and imported ahead): {warm_ms:.0f} ms = {warm_ms - inside_ms:.0f} ms overhead")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    parser.add_argument("--overhead-runs", type=int, default=20)
    args = parser.parse_args()
    anyio.run(run, args, backend=args.loop)


if __name__ == "__main__":
    main()
