"""HTML and DOCX extraction throughput: in process, through the parser pool, and through the service's ingest.

    .venv/bin/python scripts/bench_markup.py [--loop trio|asyncio|both] [--skip-service] [--docs-every N]

Sets (bytes as the extractor gets them):

- ``html corpus``: the 181 pages of ``../shared/corpus/html/pages/*.html.gz``, gunzipped;
- ``html docs``: every third docs-argocd/docs-etcd Markdown file (every Nth: ``--docs-every N``) rendered
  as a docs-site page (`tests.helpers.render_html.render_docs_page`, titled as
  `retrieval_data.docs_sources` titles them);
- ``docx docs``: the same files rendered as Word documents (`tests.helpers.render_docx.render_docs_docx`);
- ``docx corpus``: ``../shared/corpus/docx/*.docx`` (python-docx's test files; some hold no text and
  are refused ``no_text``: counted, and their time counts).

Paths, each after one warm-up job on the set's first file:

- ``in-process``: `extract_html` / `extract_docx` one file after another (the baseline, ratio 1);
- ``pool, bare``: a `ParserPool` (its two slots per loop), every file submitted at once from one
  task group, 600 s deadlines (queueing counts toward a job's deadline; a bench has no deadline
  pressure): each job spawns a child that imports the parser libraries (no spares kept);
- ``pool + keep_spares``: the same with ``pool.keep_spares`` running in the task group (started after
  one job has run, as the service's background task is): a job takes a child already started with its
  libraries imported;
- ``service ingest`` (docs renderings only, and the Markdown itself for reference): a throwaway
  service (embedded PostgreSQL, semantic arm off), ``put_artifact`` + ``ingest`` two at a time
  (`retrieval_data.ingest_sources` with concurrency 2), each set into its own tenant: the parse
  through the service's pool with its spares, plus chunking, scanning and the database writes.

Seconds are wall time (``time.perf_counter``) for the whole set; the ratio is the path's files/s over
the in-process files/s of the same set (above 1: faster than in process). Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from retrieval_data import CORPUS, Source, docs_sources, ingest_sources

from knowledge.config import Settings
from knowledge.errors import ExtractionRefused, ParserFailure
from knowledge.parsers.docx_extract import DocxRefused, extract_docx
from knowledge.parsers.html_extract import HtmlRefused, extract_html
from knowledge.parsers.sniff import DOCX, HTML
from knowledge.service import KnowledgeService
from knowledge.supervisors.embedded_pg import throwaway_data_dir
from knowledge.supervisors.parser_pool import ParserPool, loop_slots

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package holds the renderers

from tests.helpers.render_docx import render_docs_docx
from tests.helpers.render_html import render_docs_page

DEADLINE = 600.0


@dataclass(frozen=True)
class FileSet:
    name: str
    fmt: str  # html | docx
    blobs: list[bytes]
    sources: list[Source] | None = None  # for the service's ingest (docs renderings)

    @property
    def megabytes(self) -> float:
        return sum(map(len, self.blobs)) / 1e6


@dataclass
class Result:
    set: str
    files: int
    megabytes: float
    path: str
    seconds: float
    outcomes: Counter[str]
    baseline: float | None = None  # in-process seconds of the same set

    def line(self) -> str:
        ratio = f"{self.baseline / self.seconds:>6.2f}" if self.baseline else f"{'-':>6}"
        bad = {k: v for k, v in self.outcomes.items() if k != "ok"}
        refused = ", ".join(f"{k} {v}" for k, v in sorted(bad.items())) or ""
        return (f"{self.set:<12} {self.files:>5} {self.megabytes:>6.2f} {self.path:<36} {self.seconds:>8.2f} "
                f"{self.files / self.seconds:>8.1f} {self.megabytes / self.seconds:>6.2f} {ratio}  {refused}")


def load_sets(every: int = 1) -> list[FileSet]:
    pages = sorted((CORPUS / "html" / "pages").glob("*.html.gz"))
    docs = docs_sources()[::every]
    html_docs = [Source(s.key, s.title, render_docs_page(s.data.decode("utf-8"), s.title), HTML) for s in docs]
    docx_docs = [Source(s.key, s.title, render_docs_docx(s.data.decode("utf-8"), s.title), DOCX) for s in docs]
    return [
        FileSet("html corpus", "html", [gzip.decompress(p.read_bytes()) for p in pages]),
        FileSet("html docs", "html", [s.data for s in html_docs], html_docs),
        FileSet("docx docs", "docx", [s.data for s in docx_docs], docx_docs),
        FileSet("docx corpus", "docx", [p.read_bytes() for p in sorted((CORPUS / "docx").glob("*.docx"))]),
    ]


# --------------------------------------------------------------------------- in process


def in_process(fs: FileSet) -> Result:
    extract: Callable[[bytes], Any] = extract_html if fs.fmt == "html" else extract_docx
    refused = (HtmlRefused, DocxRefused)

    def one(data: bytes) -> str:
        try:
            extract(data)
        except refused as exc:
            return str(exc.reason)
        return "ok"

    one(fs.blobs[0])  # warm-up: the libraries imported, caches filled
    began = time.perf_counter()
    outcomes = Counter(one(b) for b in fs.blobs)
    return Result(fs.name, len(fs.blobs), fs.megabytes, "in-process", time.perf_counter() - began, outcomes)


# --------------------------------------------------------------------------- the pool


async def _job(pool: ParserPool, fmt: str, data: bytes, outcomes: Counter[str]) -> None:
    try:
        await pool.extract(data, DEADLINE, fmt=fmt)
    except (ExtractionRefused, ParserFailure) as exc:
        outcomes[str(getattr(exc, "reason", type(exc).__name__))] += 1
    else:
        outcomes["ok"] += 1


async def through_pool(fs: FileSet, spares: bool) -> Result:
    pool = ParserPool()
    outcomes: Counter[str] = Counter()
    async with anyio.create_task_group() as keeper:
        await _job(pool, fs.fmt, fs.blobs[0], Counter())  # warm-up; the loop has parsed: spares may start
        if spares:
            keeper.start_soon(pool.keep_spares)
            slots = loop_slots()
            with anyio.fail_after(60):
                async with slots.changed:  # both slots hold a spare child before the clock starts
                    while len(slots.spares) < slots.size:
                        await slots.changed.wait()
            await anyio.sleep(1.0)  # and its imports are done (a spare imports right after it starts)
        began = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for data in fs.blobs:
                tg.start_soon(_job, pool, fs.fmt, data, outcomes)
        seconds = time.perf_counter() - began
        keeper.cancel_scope.cancel()
    path = "pool + keep_spares" if spares else "pool, bare (spawn per job)"
    return Result(fs.name, len(fs.blobs), fs.megabytes, path, seconds, outcomes)


# --------------------------------------------------------------------------- the service


async def through_service(sets: list[FileSet], every: int) -> list[Result]:
    markdown = docs_sources()[::every]
    md = FileSet("md docs", "markdown", [s.data for s in markdown], markdown)
    out = []
    with throwaway_data_dir("knowledge-bench-markup-") as data_dir:
        settings = Settings(data_dir=data_dir, sweep_interval_seconds=None, pool_max_size=10, semantic_arm=False)
        async with KnowledgeService.open(settings) as svc:
            for fs in [md, *(s for s in sets if s.sources)]:
                assert fs.sources is not None
                await ingest_sources(svc, f"warm-{fs.fmt}", fs.sources[:1], concurrency=1)  # warm-up
                began = time.perf_counter()
                keys, refused = await ingest_sources(svc, f"bench-{fs.fmt}", fs.sources, concurrency=2)
                seconds = time.perf_counter() - began
                outcomes = Counter({"ok": len(keys), **refused})
                out.append(Result(fs.name, len(fs.blobs), fs.megabytes, "service ingest, 2 concurrent", seconds,
                                  outcomes))
    return out


# --------------------------------------------------------------------------- main


async def pooled(sets: list[FileSet]) -> list[Result]:
    return [await through_pool(fs, spares) for fs in sets for spares in (False, True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", choices=["trio", "asyncio", "both"], default="trio")
    parser.add_argument("--skip-service", action="store_true", help="no service ingest rows")
    parser.add_argument("--docs-every", type=int, default=3, metavar="N",
                        help="every Nth docs file only, sorted by path (default 3: the run stays near 10 minutes "
                             "on a busy 2-core host; 1: all 551)")
    args = parser.parse_args()
    began = time.perf_counter()
    sets = load_sets(args.docs_every)
    print(f"rendered and loaded in {time.perf_counter() - began:.1f}s")
    results = [in_process(fs) for fs in sets]
    baseline = {r.set: r.seconds for r in results}
    loops = ["trio", "asyncio"] if args.loop == "both" else [args.loop]
    for loop in loops:
        for r in anyio.run(pooled, sets, backend=loop):
            r.path += f" [{loop}]"
            results.append(r)
    if not args.skip_service:
        for r in anyio.run(through_service, sets, args.docs_every, backend=loops[0]):
            r.path += f" [{loops[0]}]"
            results.append(r)
    for r in results:
        r.baseline = baseline.get(r.set)
    order = {fs.name: i for i, fs in enumerate(sets)}
    results.sort(key=lambda r: order.get(r.set, len(order)))  # stable: paths in the order run
    print(f"{'set':<12} {'files':>5} {'MB':>6} {'path':<36} {'seconds':>8} {'files/s':>8} {'MB/s':>6} {'ratio':>6}"
          "  refused")
    for r in results:
        print(r.line())
    print("ratio: files/s over the in-process files/s of the same set; MB: input bytes (HTML gunzipped); "
          "md docs: the Markdown itself through the service, for reference")
    print(f"\ntotal {time.perf_counter() - began:.0f}s")


if __name__ == "__main__":
    main()
