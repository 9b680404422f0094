"""The ``application/pdf`` Extractor: text through the supervised parser pool, never in process.

The bytes are gathered (bounded at 32 MiB: ``pdf_too_large`` above) and handed to a disposable
child (`knowledge.supervisors.parser_pool`), which inspects them with pikepdf (any encryption is refused as
``pdf_encrypted``, decided by pikepdf, never by whether pdfminer could read it) and extracts text
with pdfminer.six, with Markdown headings from the outline or from font sizes so that PDF chunks
carry heading paths too. A PDF without a text layer is refused (``no_text``).

One document has one budget: the extractor's deadline (60 s), counted from its call, queue waiting
included, and shared by every job it runs — its inspection and its page ranges. Every failure is
one `ExtractionRefused` or `ParserFailure` with its reason, never an exception group: when one page
range fails, the other is cancelled (its child killed and reaped) and the failure is raised alone.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import AsyncIterator, Awaitable

import anyio

from knowledge.errors import ExtractionRefused, ParserFailure
from knowledge.models import Extracted
from knowledge.parsers.base import collect_source
from knowledge.structured import run_both
from knowledge.supervisors.parser_pool import (
    EXTRACT_SECONDS,
    INSPECT_SECONDS,
    MAX_IO_BYTES,
    SLOTS_PER_LOOP,
    ParserPool,
)
from knowledge.vocabulary import Structure


async def collect(source: AsyncIterator[bytes], limit: int = MAX_IO_BYTES) -> bytes:
    return await collect_source(source, "pdf", limit)


#: A PDF at least this large is inspected first, and one of at least SPLIT_PAGES pages is extracted
#: as two page ranges in two children at once (both slots of the loop) — but only while no other job
#: waits for a slot: one document does not take both slots from the others; else a large PDF is
#: extracted in one child, uninspected. Either way the document's one budget bounds all its jobs (a
#: range's deadline does not grow with its pages): one that cannot finish in it is refused
#: ``pdf_timeout`` by the pool as soon as its page rate shows it.
SPLIT_BYTES = 512 * 1024
SPLIT_PAGES = 64

#: The rules of `knowledge.parsers.pdf_extract` (headings, cleaning, recovery): bumped whenever they change
#: the text of a PDF that extracted before. p2: page-tree and xref repair; combining marks kept
#: with their base characters.
PDF_TEXT_RULES = "p2"
#: What moves a PDF's text: those rules and the two parsing libraries as installed (the parser
#: child runs this same environment).
PDF_TEXT_VERSION = (f"{PDF_TEXT_RULES}-pdfminer{importlib.metadata.version('pdfminer.six')}"
                    f"-pikepdf{importlib.metadata.version('pikepdf')}")


class PdfExtractor:
    structure: Structure = "markdown"
    version: str = PDF_TEXT_VERSION
    concurrency: int = SLOTS_PER_LOOP  # the parser pool's children on this loop

    def __init__(self, pool: ParserPool, deadline: float = EXTRACT_SECONDS) -> None:
        self.pool = pool
        self.deadline = deadline

    def media_types(self) -> set[str]:
        return {"application/pdf"}

    async def extract(self, source: AsyncIterator[bytes], media_type: str) -> Extracted:
        """Raises `ExtractionRefused` (`ParserFailure` among them) with its reason, never a group.
        Cancellation: every parser child is killed and reaped before the cancellation propagates."""
        due = anyio.current_time() + self.deadline  # the document's one budget, from this call
        data = await collect(source)
        return await typed(self._extract(data, due))

    async def _extract(self, data: bytes, due: float) -> Extracted:
        pool, budget = self.pool, self.deadline
        if len(data) < SPLIT_BYTES or pool.waiting():
            return await pool.extract(data, budget, due=due)
        # Part of this extraction, within its budget; but its child runs no longer than upload
        # inspection's 10 s (it reads no content and reports no progress: nothing else bounds it).
        inspection = await pool.inspect(data, budget, due=due, limit=INSPECT_SECONDS)
        count = int(inspection["pages"])
        if count < SPLIT_PAGES or pool.waiting():
            return await pool.extract(data, budget, due=due)
        middle = count // 2
        parts: dict[int, Extracted] = {}

        async def part(first: int, end: int) -> None:
            parts[first] = await pool.extract(data, budget, (first, end), due=due)

        # The first failure cancels the other range (its child killed and reaped) and is raised alone.
        await run_both(functools.partial(part, 0, middle), functools.partial(part, middle, count))
        text = parts[0] + parts[middle]
        if not text.strip():
            raise ExtractionRefused("no_text", "the PDF has no text layer")
        return Extracted(text, parts[0].stated_date)


async def typed(work: Awaitable[Extracted]) -> Extracted:
    """``work``'s result; a failure that is not already a typed refusal (a bug, an exception group
    from elsewhere) becomes ``pdf_killed``, its cause kept: a PDF fails as a PDF, never otherwise."""
    try:
        return await work
    except ExtractionRefused:
        raise
    except Exception as exc:
        raise ParserFailure("pdf_killed", f"the parse failed: {type(exc).__name__}: {exc}"[:300]) from exc
