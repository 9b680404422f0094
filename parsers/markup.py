"""The ``text/html`` and Word (``.docx``) Extractors: Markdown through the supervised parser pool.

Both are untrusted bytes parsed by libraries in C and Python (lxml, trafilatura, python-docx), so
they parse only in the pool's disposable children, under the same rlimits, deadlines and stall
limit as a PDF (`knowledge.supervisors.parser_pool`). The child hands back Markdown — headings as
``#`` lines, so chunks carry heading paths — with the title and date the source states
(`knowledge.parsers.html_extract`, `knowledge.parsers.docx_extract`).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import AsyncIterator

from knowledge.models import Extracted
from knowledge.parsers.base import collect_source
from knowledge.parsers.sniff import DOCX, HTML, XHTML
from knowledge.supervisors.parser_pool import EXTRACT_SECONDS, MAX_IO_BYTES, SLOTS_PER_LOOP, ParserPool
from knowledge.vocabulary import Structure

#: The rules of `knowledge.parsers.html_extract` and `knowledge.parsers.docx_extract`: bumped whenever
#: they change the text of a source that extracted before. Kept here, not imported from those
#: modules: the host process never imports the parsing libraries (only the children do).
HTML_TEXT_RULES = "h1"
DOCX_TEXT_RULES = "d2"


def _version(rules: str, *libraries: str) -> str:
    return "-".join([rules, *(f"{name}{importlib.metadata.version(name)}" for name in libraries)])


HTML_TEXT_VERSION = _version(HTML_TEXT_RULES, "trafilatura", "lxml")
DOCX_TEXT_VERSION = _version(DOCX_TEXT_RULES, "python-docx", "lxml")


class PooledMarkupExtractor:
    """One markup format (``html`` or ``docx``) parsed in the pool's children."""

    structure: Structure = "markdown"
    concurrency: int = SLOTS_PER_LOOP

    def __init__(self, pool: ParserPool, fmt: str, media_types: set[str], version: str,
                 deadline: float = EXTRACT_SECONDS) -> None:
        self.pool = pool
        self.format = fmt
        self._media_types = media_types
        self.version = version
        self.deadline = deadline

    def media_types(self) -> set[str]:
        return set(self._media_types)

    async def extract(self, source: AsyncIterator[bytes], media_type: str) -> Extracted:
        """Cancellation: the parser child is killed and reaped before the cancellation propagates."""
        data = await collect_source(source, self.format, MAX_IO_BYTES)
        return await self.pool.extract(data, self.deadline, fmt=self.format)


def html_extractor(pool: ParserPool, deadline: float = EXTRACT_SECONDS) -> PooledMarkupExtractor:
    return PooledMarkupExtractor(pool, "html", {HTML, XHTML}, HTML_TEXT_VERSION, deadline)


def docx_extractor(pool: ParserPool, deadline: float = EXTRACT_SECONDS) -> PooledMarkupExtractor:
    return PooledMarkupExtractor(pool, "docx", {DOCX}, DOCX_TEXT_VERSION, deadline)
