"""The ``application/pdf`` Extractor: text through the supervised parser pool, never in process.

The bytes are gathered (bounded at 32 MiB: ``pdf_too_large`` above) and handed to a disposable
child (`supervisors.parser_pool`), which inspects them with pikepdf (any encryption is refused as
``pdf_encrypted``, decided by pikepdf, never by whether pdfminer could read it) and extracts text
with pdfminer.six, with Markdown headings from the outline or from font sizes so that PDF chunks
carry heading paths too. A PDF without a text layer is refused (``no_text``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from parsers.base import ExtractionRefused, Structure
from supervisors.parser_pool import EXTRACT_SECONDS, MAX_IO_BYTES, ParserPool


async def collect(source: AsyncIterator[bytes], limit: int = MAX_IO_BYTES) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for chunk in source:
        size += len(chunk)
        if size > limit:
            raise ExtractionRefused("pdf_too_large", f"PDF above the {limit}-byte input bound")
        parts.append(chunk)
    return b"".join(parts)


class PdfExtractor:
    structure: Structure = "markdown"

    def __init__(self, pool: ParserPool, deadline: float = EXTRACT_SECONDS) -> None:
        self.pool = pool
        self.deadline = deadline

    def media_types(self) -> set[str]:
        return {"application/pdf"}

    async def extract(self, source: AsyncIterator[bytes], media_type: str) -> str:
        """Cancellation: the parser child is killed and reaped before the cancellation propagates."""
        return await self.pool.extract(await collect(source), self.deadline)
