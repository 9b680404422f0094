"""Stress the parser pool with the whole PDF corpus, hostile files included, N times, with random
cancellations and deadlines; then print jobs run, outcomes by reason, pages/s, peak child RSS and
leaked processes (must be 0). Exits non-zero on a leak.

    .venv/bin/python scripts/stress_parser_pool.py [--rounds 3] [--loop trio|asyncio] [--seed 1]

``--hostile-mix`` instead submits, all at once on one loop, ``--bombs`` (4) decompression bombs ahead
of ``--texts`` (20) ordinary text PDFs (the corpus's ``text`` and ``nonlatin`` rows whose expected
outcome is text, cycled), each with the pool's default extraction deadline, and prints text PDFs ok /
timed out / other, bombs by outcome, the most children alive at once and the wall time. Exits non-zero
on a leak, a text PDF that did not extract, a bomb that was not refused, or more than two children.
No corpus bomb stalls a slot (the slowest, ``pdfjs__bug1978317.pdf``, takes ~8 s alone), so the bombs
are made here, by MANIFEST-style kind: ``flate-ops`` is a ~0.1 MB PDF whose one content stream inflates
to 100 MiB of ``q Q`` operators (pdfminer interprets it for minutes, within the memory limit).

    .venv/bin/python scripts/stress_parser_pool.py --hostile-mix [--loop trio|asyncio]

``--fairness`` is the issue-34 run: four *slow* hostile PDFs — files whose every page costs pdfminer
about a CPU second, or a long steady file, so that they report pages steadily and never stall
(`tests/supervisors/hostile_pdfs.py`: ``text-ops`` 100 pages of 40,000 tiny text operations,
``nested-forms`` 100 pages of 18^3 nested form XObjects, ``text-ops-60`` 60 such pages — one that a
quiet core could finish within its budget, so only the floor stops it while others wait — and
``steady`` 2,000 pages of ~0.1 CPU second, 0.9 MB: inspected, split while nobody waits) — submitted
first, then ``--texts`` (20) small text PDFs (MANIFEST ``expected=text``, ``text``/``nonlatin``, under
512 KiB, cycled), all at once on one loop, each through the PDF extractor with its 60 s budget as
the ingestor runs it. It prints, per kind: outcomes, the longest a file waited for slots, the
longest a file took in all; the most children alive at once; and the verdict against the goal (no
text PDF times out, none waits more than 60 s, every bomb refused with a reason, never more than
two children). Exits non-zero when the goal is missed.

    .venv/bin/python scripts/stress_parser_pool.py --fairness [--loop trio|asyncio]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import io
import random
import sys
import time
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import pikepdf
import psutil

from knowledge.errors import ExtractionRefused
from knowledge.parsers.pdf import SPLIT_BYTES, PdfExtractor
from knowledge.supervisors.parser_pool import ParserPool

ROOT = Path(__file__).resolve().parents[1]
PDFS = ROOT.parent / "shared" / "corpus" / "pdf"
sys.path.insert(0, str(ROOT))  # the tests package holds the hostile PDFs' makers

from tests.supervisors import hostile_pdfs  # noqa: E402


@dataclass
class ChildPeak:
    """The most parser children seen at once: this process's live children (zombies not counted), or
    the jobs the pools hold (``in_jobs``), whichever is more, sampled every 10 ms by `watch`."""

    in_jobs: Callable[[], int]
    peak: int = 0

    async def watch(self) -> None:
        me = psutil.Process()
        while True:
            alive = 0
            for child in me.children():
                with contextlib.suppress(psutil.Error):
                    alive += child.status() != psutil.STATUS_ZOMBIE
            self.peak = max(self.peak, alive, self.in_jobs())
            await anyio.sleep(0.01)


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
    leaked = [c.pid for c in psutil.Process().children(recursive=True)] + sorted(pool.live)
    print(f"jobs run: {sum(outcomes.values())} ({args.rounds} rounds x {len(rows)} PDFs) in {elapsed:.1f}s; "
          f"loop={args.loop}")
    for reason, count in outcomes.most_common():
        print(f"  {reason:<16} {count}")
    print(f"pages extracted: {pages_done} ({pages_done / elapsed:.1f} pages/s, form feeds + 1 per text)")
    print(f"peak child RSS: {peak_rss / 2**20:.0f} MiB; leaked processes: {len(leaked)}")
    return 1 if leaked else 0


def flate_ops_bomb(mib: int = 100, unit: bytes = b"q Q ") -> bytes:
    """A ~0.1 MB one-page PDF whose content stream inflates to ``mib`` MiB of ``unit`` operators:
    small enough for the memory limit, far too many operators for any deadline."""
    deflate = zlib.compressobj(9)
    chunk = unit * ((1 << 20) // len(unit))
    compressed = b"".join([*(deflate.compress(chunk) for _ in range(mib)), deflate.flush()])
    pdf = pikepdf.new()
    page = pdf.add_blank_page(page_size=(612, 792))
    stream = pdf.make_stream(b"")
    stream.write(compressed, filter=pikepdf.Name.FlateDecode)
    page.Contents = stream
    buf = io.BytesIO()
    pdf.save(buf, stream_decode_level=pikepdf.StreamDecodeLevel.none)
    return buf.getvalue()


async def hostile_mix(args: argparse.Namespace) -> int:
    """Bombs and text PDFs submitted together on one loop; see the module docstring."""
    with (PDFS / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        rows = [row for row in csv.DictReader(fh, delimiter="\t")
                if row["category"] in ("text", "nonlatin") and row["expected"] == "text"]
    texts = [(PDFS / rows[i % len(rows)]["file"]).read_bytes() for i in range(args.texts)]
    bomb = flate_ops_bomb()
    pool = ParserPool()
    text_outcomes: collections.Counter[str] = collections.Counter()
    bomb_outcomes: collections.Counter[str] = collections.Counter()
    bomb_messages: set[str] = set()
    children = ChildPeak(lambda: len(pool.live))

    async def job(data: bytes, into: collections.Counter[str], messages: set[str] | None) -> None:
        try:
            await pool.extract(data)
            into["text"] += 1
        except ExtractionRefused as exc:
            into[exc.reason] += 1
            if messages is not None:
                messages.add(f"{exc.reason}: {exc}"[:120])

    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(children.watch)
        tg.start_soon(pool.keep_spares)
        async with anyio.create_task_group() as jobs:
            for _ in range(args.bombs):
                jobs.start_soon(job, bomb, bomb_outcomes, bomb_messages)
            for data in texts:
                jobs.start_soon(job, data, text_outcomes, None)
        tg.cancel_scope.cancel()
    elapsed = time.perf_counter() - began
    await anyio.sleep(0.2)
    leaked = [c.pid for c in psutil.Process().children(recursive=True)] + sorted(pool.live)
    other = args.texts - text_outcomes["text"] - text_outcomes["pdf_timeout"]
    refused = {reason: n for reason, n in bomb_outcomes.items() if reason != "text"}
    print(f"hostile mix, loop={args.loop}: {args.bombs} bombs (flate-ops) + {args.texts} text PDFs, all at once")
    print("| loop | text ok | text timed out | text other | bombs refused (by reason) | bombs not refused "
          "| max children | wall s | leaked |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {args.loop} | {text_outcomes['text']} | {text_outcomes['pdf_timeout']} | {other} "
          f"| {sum(refused.values())} ({', '.join(f'{k} {v}' for k, v in sorted(refused.items()))}) "
          f"| {bomb_outcomes['text']} | {children.peak} | {elapsed:.1f} | {len(leaked)} |")
    for message in sorted(bomb_messages):
        print(f"  bomb: {message}")
    good = (not leaked and text_outcomes["text"] == args.texts and not bomb_outcomes["text"] and children.peak <= 2)
    return 0 if good else 1


#: The fairness run's slow hostile PDFs (see the module docstring), by kind.
SLOW_BOMBS: dict[str, Callable[[], bytes]] = {
    "text-ops": hostile_pdfs.text_ops_pdf,
    "nested-forms": hostile_pdfs.nested_forms_pdf,
    "text-ops-60": lambda: hostile_pdfs.text_ops_pdf(pages=60),
    "steady": hostile_pdfs.steady_pdf,
}
#: The goal of issue 34: no text PDF waits longer than this for slots (its whole budget).
GOAL_WAIT_SECONDS = 60.0


@dataclass
class _Run:
    """One file of the fairness run: what it is, how it ended, and its pool's records of its jobs."""

    kind: str
    name: str
    data: bytes
    pool: ParserPool
    outcome: str = "pending"
    message: str = ""
    took: float = 0.0

    @property
    def waited(self) -> float:
        """Seconds its jobs spent queued for a slot, in all."""
        return sum(r.waited for r in self.pool.history)


async def fairness(args: argparse.Namespace) -> int:
    """Slow hostile PDFs and text PDFs at once on one loop; see the module docstring."""
    with (PDFS / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        rows = [row for row in csv.DictReader(fh, delimiter="\t")
                if row["expected"] == "text" and row["category"] in ("text", "nonlatin")
                and (PDFS / row["file"]).stat().st_size < SPLIT_BYTES]
    runs = [_Run(kind, kind, make(), ParserPool()) for kind, make in SLOW_BOMBS.items()]
    runs += [_Run("text", rows[i % len(rows)]["file"], (PDFS / rows[i % len(rows)]["file"]).read_bytes(), ParserPool())
             for i in range(args.texts)]
    children = ChildPeak(lambda: sum(len(r.pool.live) for r in runs))

    async def one(run: _Run) -> None:
        async def source() -> AsyncIterator[bytes]:
            yield run.data

        began = time.perf_counter()
        try:
            text = await PdfExtractor(run.pool).extract(source(), "application/pdf")
            run.outcome = "text" if text.strip() else "empty"
        except ExtractionRefused as exc:
            run.outcome, run.message = exc.reason, exc.message
        run.took = time.perf_counter() - began

    began = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(children.watch)
        tg.start_soon(runs[0].pool.keep_spares)  # as the service runs it (spares belong to the loop)
        async with anyio.create_task_group() as jobs:
            bombs = [r for r in runs if r.kind != "text"]
            for run in bombs:
                jobs.start_soon(one, run)
            while not all(r.pool.history or r.outcome != "pending" for r in bombs):  # noqa: ASYNC110
                await anyio.sleep(0.001)  # the bombs asked for their slots first (trio starts tasks in any order)
            for run in runs[len(bombs):]:
                jobs.start_soon(one, run)
        tg.cancel_scope.cancel()
    elapsed = time.perf_counter() - began
    await anyio.sleep(0.2)
    leaked = [c.pid for c in psutil.Process().children(recursive=True)] + [pid for r in runs for pid in r.pool.live]
    print(f"fairness run, loop={args.loop}: {len(SLOW_BOMBS)} slow hostile PDFs + {args.texts} text PDFs, all at "
          f"once, bombs first; {elapsed:.1f} s in all")
    print("| kind | files | outcomes | max queue wait s | max total s |")
    print("|---|---|---|---|---|")
    for kind in [*SLOW_BOMBS, "text"]:
        mine = [r for r in runs if r.kind == kind]
        outcomes = collections.Counter(r.outcome for r in mine)
        print(f"| {kind} | {len(mine)} | {', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))} "
              f"| {max(r.waited for r in mine):.1f} | {max(r.took for r in mine):.1f} |")
    print(f"max children alive at once: {children.peak}; leaked processes: {len(leaked)}")
    for run in runs:
        if run.kind != "text":
            stops = ", ".join(f"{r.op}:{r.stopped or r.outcome}" for r in run.pool.history)
            print(f"  {run.kind}: {run.outcome} after {run.took:.1f} s [{stops}] {run.message}")
    texts = [r for r in runs if r.kind == "text"]
    checks = {
        "no text PDF timed out (all extracted)": all(r.outcome == "text" for r in texts),
        f"no text PDF waited more than {GOAL_WAIT_SECONDS:.0f} s": all(r.waited <= GOAL_WAIT_SECONDS for r in texts),
        "every bomb refused with a reason": all(r.outcome not in ("text", "empty") and r.message
                                                for r in runs if r.kind != "text"),
        "never more than two children": children.peak <= 2,
        "no process left": not leaked,
    }
    for check, ok in checks.items():
        print(f"  [{'met' if ok else 'MISSED'}] {check}")
    print(f"verdict: {'goal met' if all(checks.values()) else 'goal missed'}")
    return 0 if all(checks.values()) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hostile-mix", action="store_true", help="bombs and text PDFs at once (see above)")
    parser.add_argument("--fairness", action="store_true", help="slow hostile PDFs and text PDFs at once (see above)")
    parser.add_argument("--bombs", type=int, default=4)
    parser.add_argument("--texts", type=int, default=20)
    args = parser.parse_args()
    mode = fairness if args.fairness else hostile_mix if args.hostile_mix else run
    sys.exit(anyio.run(mode, args, backend=args.loop))


if __name__ == "__main__":
    main()
