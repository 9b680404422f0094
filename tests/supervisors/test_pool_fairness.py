"""No file holds the parser pool (issue 34): a document that cannot finish in its budget is stopped
once its page rate shows it (the projection), a slow one while others wait (the floor), one document
takes both slots only while nobody waits, and every failure of a page range is one typed refusal.
Waits are bounded by progress (the pool's own state), never by a clock."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import psutil
import pytest

from knowledge.errors import ExtractionRefused, ParserFailure
from knowledge.parsers import pdf as pdf_module
from knowledge.parsers.pdf import SPLIT_BYTES, PdfExtractor
from knowledge.supervisors.parser_pool import (
    EXTRACT_SECONDS,
    FLOOR_PAGES_PER_CPU_SECOND,
    JobRecord,
    ParserPool,
    verdict,
)
from tests.conftest import corpus_missing
from tests.helpers.progress import hang_detector
from tests.supervisors import hostile_pdfs

PACED = (sys.executable, "-m", "tests.supervisors.paced_child")
PDFS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "pdf"


def paced_pool() -> ParserPool:
    return ParserPool(command=PACED)


def spec(**parts: object) -> bytes:
    """A paced child's payload (`tests.supervisors.paced_child`)."""
    return json.dumps(parts).encode()


def large(**parts: object) -> bytes:
    """A payload the PDF extractor takes for a large PDF (inspected, split while nobody waits)."""
    return spec(**parts).ljust(SPLIT_BYTES + 1)


async def source(data: bytes) -> AsyncIterator[bytes]:
    yield data


def gone(pid: int | None) -> bool:
    return pid is not None and not psutil.pid_exists(pid)


async def wait_until(condition: Callable[[], bool]) -> None:
    with hang_detector():
        while not condition():  # noqa: ASYNC110 - polling the pool's state, not an event
            await anyio.sleep(0.02)


def running(pages: int, done: int, *, wall: float, cpu: float | None, due: float = 60.0) -> tuple[JobRecord, float]:
    """A record of an extraction ``wall`` seconds into its pages (asked for at 0), and now."""
    record = JobRecord("extract", EXTRACT_SECONDS, due=due, pages=pages, pages_done=done, document_at=1.0,
                       document_cpu=0.5 if cpu is not None else None)
    return record, 1.0 + wall


# The rules (`verdict`), pure: no process, no clock.

def test_a_document_that_cannot_finish_in_its_budget_is_stopped_once_its_grace_is_over() -> None:
    # 2,000 pages at ~11 pages per CPU second need ~180 CPU seconds: it cannot finish in 60.
    record, now = running(2000, 8, wall=1.0, cpu=0.5 + 0.8)
    message = verdict(record, now, 0.5 + 0.8, waiting=0)
    assert record.stopped == "projection" and message is not None
    assert "2000 pages need ~" in message and "past its 60 s budget" in message and "pages per CPU second" in message
    # The same rate before its grace (neither 8 pages nor 4 CPU seconds yet): not judged.
    record, now = running(2000, 3, wall=0.4, cpu=0.5 + 0.3)
    assert verdict(record, now, 0.5 + 0.3, waiting=0) is None and record.stopped is None


def test_a_costly_first_page_does_not_make_a_document_look_hopeless() -> None:
    """A cover of ~1.2 CPU seconds (twice the costliest honest page), then light pages: neither the
    projection nor the floor fires."""
    record, now = running(400, 0, wall=2.0, cpu=0.5 + 1.4)  # the cover still in progress
    assert verdict(record, now, 0.5 + 1.4, waiting=3) is None
    record, now = running(400, 17, wall=2.5, cpu=0.5 + 1.7)  # the cover done, 16 light pages since
    assert verdict(record, now, 0.5 + 1.7, waiting=3) is None and record.stopped is None


def test_an_honest_manual_is_left_alone_even_while_others_wait() -> None:
    # The 412-page corpus manual as measured: ~30 pages per CPU second, ~10 pages/s on a busy host.
    record, now = running(412, 30, wall=3.0, cpu=0.5 + 1.0)
    assert verdict(record, now, 0.5 + 1.0, waiting=5) is None
    # With 4 s left, its ~12 CPU seconds of pages cannot make it: stopped (it would be at its deadline).
    record, now = running(412, 30, wall=3.0, cpu=0.5 + 1.0, due=4.0 + 4.0)
    assert verdict(record, now, 0.5 + 1.0, waiting=0) is not None and record.stopped == "projection"


def test_the_floor_holds_only_while_others_wait() -> None:
    # A page a CPU second (a hostile file), 100 pages, a long budget: it could finish, slowly.
    record, now = running(100, 2, wall=2.5, cpu=0.5 + 2.1, due=600.0)
    assert verdict(record, now, 0.5 + 2.1, waiting=0) is None
    message = verdict(record, now, 0.5 + 2.1, waiting=3)
    assert record.stopped == "floor" and message is not None
    assert "too slow while 3 jobs wait" in message and str(FLOOR_PAGES_PER_CPU_SECOND) in message
    # Where the child's CPU time is unknown, its rates are in wall seconds.
    record, now = running(100, 2, wall=2.5, cpu=None, due=600.0)
    assert verdict(record, now, None, waiting=1) is not None and record.stopped == "floor"


def test_no_pages_reported_is_not_judged() -> None:
    """Inspection, HTML and DOCX report no pages: only their deadline and the stall limit hold."""
    record = JobRecord("extract", EXTRACT_SECONDS, due=60.0)
    assert verdict(record, 30.0, 20.0, waiting=4) is None


# The rules at work, with a paced stand-in child.

@pytest.mark.anyio
async def test_a_steady_document_that_cannot_finish_gives_its_slot_back_early(anyio_backend_name: str) -> None:
    """Pages keep coming (no stall), but 2,000 of them at 0.05 CPU seconds each cannot finish in
    20 s: refused ``pdf_timeout`` with the projection's reason after its grace, long before its end."""
    pool = paced_pool()
    with pytest.raises(ParserFailure) as stopped:
        await pool.extract(spec(extract="paced 2000 0.05 spin"), deadline=20.0)
    record = pool.history[0]
    assert stopped.value.reason == "pdf_timeout" and "need ~" in stopped.value.message
    assert "past its 20 s budget" in stopped.value.message
    assert record.stopped == "projection" and record.pages == 2000 and record.pages_done < 2000
    assert gone(record.pid) and pool.live == set()


@pytest.mark.anyio
async def test_a_slow_document_is_stopped_while_others_wait_and_finishes_when_none_do(anyio_backend_name: str
                                                                                       ) -> None:
    pool = paced_pool()
    # Alone, pages of 0.6 CPU seconds (below the floor) may go on: nobody waits for its slot.
    assert await pool.extract(spec(extract="paced 4 0.6 spin"), deadline=600.0)
    assert pool.history[0].outcome == "ok" and pool.history[0].stopped is None
    results: dict[str, object] = {}

    async def job(name: str, payload: bytes) -> None:
        try:
            results[name] = await pool.extract(payload, deadline=600.0)
        except ExtractionRefused as exc:
            results[name] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(job, "holder", spec(extract="block"))
        tg.start_soon(job, "slow", spec(extract="paced 100 0.6 spin"))
        await wait_until(lambda: len(pool.live) == 2)
        tg.start_soon(job, "waiting", spec(extract="ok"))  # both slots taken: it waits
        await wait_until(lambda: "waiting" in results)
        tg.cancel_scope.cancel()
    slow = results["slow"]
    assert isinstance(slow, ParserFailure) and slow.reason == "pdf_timeout"
    assert "too slow while 1 job waits" in slow.message
    assert isinstance(results["waiting"], str)  # it got the slow one's slot and extracted
    assert [r.stopped for r in pool.history if r.outcome == "pdf_timeout"] == ["floor"]
    assert pool.live == set() and all(gone(r.pid) for r in pool.history)


# The PDF extractor: one budget, both slots only while nobody waits, typed failures.

@pytest.mark.anyio
@pytest.mark.parametrize(("failing", "error", "reason"), [
    ("crash", ParserFailure, "pdf_killed"),
    ("refuse pdf_unreadable", ExtractionRefused, "pdf_unreadable"),
])
async def test_a_failing_page_range_is_one_typed_refusal_and_the_other_range_is_reaped(
        anyio_backend_name: str, failing: str, error: type[ExtractionRefused], reason: str) -> None:
    pool = paced_pool()
    extractor = PdfExtractor(pool)
    with pytest.raises(ExtractionRefused) as refused:
        await extractor.extract(source(large(pages=100, ranges={"0": "block", "50": failing})), "application/pdf")
    assert type(refused.value) is error and refused.value.reason == reason  # one error, never a group
    inspection, *ranges = pool.history
    assert inspection.op == "inspect" and sorted(r.outcome for r in ranges) == sorted([reason, "cancelled"])
    assert all(r.pid is None or gone(r.pid) for r in ranges) and pool.live == set()


@pytest.mark.anyio
async def test_page_ranges_that_pass_the_document_budget_are_one_pdf_timeout(anyio_backend_name: str) -> None:
    pool = paced_pool()
    extractor = PdfExtractor(pool, deadline=2.0)
    with pytest.raises(ParserFailure) as refused:
        await extractor.extract(source(large(pages=100, ranges={"0": "block", "50": "block"})), "application/pdf")
    assert refused.value.reason == "pdf_timeout" and "deadline" in refused.value.message
    inspection, first, second = pool.history
    assert first.due == second.due and inspection.due <= first.due  # one budget for the document
    assert pool.live == set() and gone(first.pid) and gone(second.pid)


@pytest.mark.anyio
async def test_an_inspection_that_never_answers_holds_its_slot_no_longer_than_inspection_may(
        anyio_backend_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inspection reports no progress; within the document's budget its child still runs no longer
    than upload inspection's 10 s (made short here)."""
    monkeypatch.setattr(pdf_module, "INSPECT_SECONDS", 0.5)
    pool = paced_pool()
    with pytest.raises(ParserFailure) as refused:
        await PdfExtractor(pool).extract(source(large(pages=100, inspect="block")), "application/pdf")
    assert refused.value.reason == "pdf_timeout" and "limit" in refused.value.message
    (inspection,) = pool.history
    assert inspection.op == "inspect" and inspection.stopped == "deadline" and gone(inspection.pid)


@pytest.mark.anyio
async def test_a_large_pdf_takes_both_slots_only_while_nobody_waits(anyio_backend_name: str, tmp_path: Path
                                                                    ) -> None:
    pool = paced_pool()
    extractor = PdfExtractor(pool)
    text = await extractor.extract(source(large(pages=100)), "application/pdf")
    assert [(r.op, r.outcome) for r in pool.history] == [("inspect", "ok"), ("extract", "ok"), ("extract", "ok")]
    assert "pages 0-50" in text and "pages 50-100" in text
    assert pool.history[1].due == pool.history[2].due  # the ranges share the document's budget
    pool.history.clear()
    # Another job waits when the inspection answers: the document is extracted in one child.
    release = tmp_path / "inspected"
    results: list[object] = []

    async def pdf() -> None:
        results.append(await extractor.extract(source(large(pages=100, inspect=f"wait {release}")),
                                               "application/pdf"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.extract, spec(extract="block"))
        tg.start_soon(pdf)
        await wait_until(lambda: len(pool.live) == 2)  # the holder and the inspection
        tg.start_soon(pool.extract, spec(extract="ok"))
        await wait_until(lambda: pool.waiting() == 1)
        release.touch()
        await wait_until(lambda: bool(results))
        tg.cancel_scope.cancel()
    assert "the whole document" in str(results[0])
    pdf_jobs = [r for r in pool.history if r.op == "extract" and r.outcome == "ok"]
    assert len(pdf_jobs) == 2  # the waiting job, then the document whole: never two ranges
    assert pool.live == set()


# The real child, the corpus and generated bombs: a small fairness run.

def small_text_pdfs(count: int) -> list[tuple[str, bytes]]:
    with (PDFS / "MANIFEST.tsv").open(encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh, delimiter="\t")
                if r["expected"] == "text" and r["category"] in ("text", "nonlatin")
                and (PDFS / r["file"]).stat().st_size < SPLIT_BYTES]
    return [(rows[i % len(rows)]["file"], (PDFS / rows[i % len(rows)]["file"]).read_bytes()) for i in range(count)]


@pytest.mark.skipif(corpus_missing(PDFS / "MANIFEST.tsv"), reason="shared corpus not present")
@pytest.mark.anyio
async def test_slow_bombs_do_not_hold_the_slots_that_text_pdfs_wait_for(anyio_backend_name: str) -> None:
    """Two slow hostile PDFs (a page a CPU second; 2,000 steady pages of 0.1 s) submitted ahead of
    six text PDFs on one loop, each with the real 60 s budget, queue included: every text PDF
    extracts, every bomb is refused with its reason, never more than two children, none left."""
    texts = await anyio.to_thread.run_sync(small_text_pdfs, 6)
    bombs = await anyio.to_thread.run_sync(lambda: [hostile_pdfs.text_ops_pdf(), hostile_pdfs.steady_pdf()])
    pool = ParserPool()
    extractor = PdfExtractor(pool)
    at_spawn: list[int] = []
    pool.on_spawn = lambda record: at_spawn.append(len(pool.live))
    refused: list[ExtractionRefused] = []
    extracted: list[str] = []

    async def bomb(data: bytes) -> None:
        with pytest.raises(ExtractionRefused) as stopped:
            await extractor.extract(source(data), "application/pdf")
        refused.append(stopped.value)

    async def text(name: str, data: bytes) -> None:
        extracted.append(await extractor.extract(source(data), "application/pdf"))
        assert extracted[-1].strip(), name

    async with anyio.create_task_group() as tg:
        tg.start_soon(pool.keep_spares)  # as the service runs it
        async with anyio.create_task_group() as jobs:
            for data in bombs:
                jobs.start_soon(bomb, data)
            await wait_until(lambda: len(pool.history) >= 2)  # the bombs asked for slots first
            for name, data in texts:
                jobs.start_soon(text, name, data)
        tg.cancel_scope.cancel()
    assert len(extracted) == 6
    assert [e.reason for e in refused] == ["pdf_timeout"] * 2 and all(e.message for e in refused)
    assert max(at_spawn) <= 2 and pool.live == set()
    assert not psutil.Process().children(recursive=True)
