"""The ``application/pdf`` Extractor: text through the supervised parser pool, never in process.

The bytes are gathered (bounded at 32 MiB: ``pdf_too_large`` above) and handed to a disposable
child (`knowledge.supervisors.parser_pool`), which inspects them with pikepdf (any encryption is refused as
``pdf_encrypted``, decided by pikepdf, never by whether pdfminer could read it) and extracts text
with pdfminer.six, with Markdown headings from the outline or from font sizes so that PDF chunks
carry heading paths too. A PDF without a text layer is refused (``no_text``).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import AsyncIterator

import anyio

from knowledge.errors import ExtractionRefused
from knowledge.models import Extracted
from knowledge.parsers.base import collect_source
from knowledge.supervisors.parser_pool import EXTRACT_SECONDS, MAX_IO_BYTES, SLOTS_PER_LOOP, ParserPool
from knowledge.vocabulary import Structure


async def collect(source: AsyncIterator[bytes], limit: int = MAX_IO_BYTES) -> bytes:
    return await collect_source(source, "pdf", limit)


#: A PDF at least this large is inspected first; one of at least SPLIT_PAGES pages is extracted as
#: two page ranges in two children at once (both slots of the loop). Each child has the extractor's
#: deadline from its own start (the pool does not count the queue), and a stalled one ends sooner.
SPLIT_BYTES = 512 * 1024
SPLIT_PAGES = 64
#: A page range's deadline grows with its pages once inspection has counted them: an honest manual
#: of 2,000 pages (two ranges of 1,000) is not cut at 60 s. The pool's stall limit still stops a
#: range whose pages stop coming (a bomb), so the growth serves only files that keep making progress.
#: Over the corpus extraction runs at 20-60 pages/s on a quiet core; 0.25 s a page leaves >= 5x.
SECONDS_PER_PAGE = 0.25
MAX_RANGE_SECONDS = 300.0


def range_deadline(deadline: float, pages: int) -> float:
    """The deadline of a page range of ``pages`` pages: the extractor's, or more for a long range."""
    return min(max(deadline, SECONDS_PER_PAGE * pages), max(deadline, MAX_RANGE_SECONDS))


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

    async def extract(self, source: AsyncIterator[bytes], media_type: str) -> str:
        """Cancellation: every parser child is killed and reaped before the cancellation propagates."""
        data = await collect(source)
        if len(data) < SPLIT_BYTES:
            return await self.pool.extract(data, self.deadline)
        # Part of this extraction: its deadline, not upload inspection's 10 s, bounds the inspection.
        inspection = await self.pool.inspect(data, self.deadline)
        count = int(inspection["pages"])
        if count < SPLIT_PAGES:
            return await self.pool.extract(data, self.deadline)
        middle = count // 2
        parts: dict[int, Extracted] = {}

        async def part(first: int, end: int) -> None:
            parts[first] = await self.pool.extract(data, range_deadline(self.deadline, end - first), (first, end))

        async with anyio.create_task_group() as tg:
            tg.start_soon(part, 0, middle)
            tg.start_soon(part, middle, count)
        text = parts[0] + parts[middle]
        if not text.strip():
            raise ExtractionRefused("no_text", "the PDF has no text layer")
        return Extracted(text, parts[0].stated_date)
