"""Extractors for ``text/plain`` and ``text/markdown``: strict UTF-8, nothing else."""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator

from knowledge.errors import ExtractionRefused
from knowledge.vocabulary import Structure

#: Sources are bounded by the artifact store; this guards an extractor handed a stream directly.
MAX_TEXT_BYTES = 32 * 1024 * 1024


async def decode_utf8(source: AsyncIterator[bytes], limit: int = MAX_TEXT_BYTES) -> str:
    """Decode a byte stream as strict UTF-8; a leading byte-order mark is an encoding artifact and
    is dropped. Refuses invalid UTF-8 and NUL characters (``undecodable``: PostgreSQL text cannot
    hold NUL, and a NUL in a text file means it is not one), and empty text (``no_text``)."""
    # Plain UTF-8, the mark dropped after: Python's "utf-8-sig" decoder ends a source that is only
    # the start of a mark (b"\xef", b"\xef\xbb") as empty text instead of refusing it.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    parts: list[str] = []
    size = 0
    try:
        async for chunk in source:
            size += len(chunk)
            if size > limit:
                raise ExtractionRefused("too_large", f"text source above {limit} bytes")
            parts.append(decoder.decode(chunk))
        parts.append(decoder.decode(b"", final=True))
    except UnicodeDecodeError as exc:
        raise ExtractionRefused("undecodable", f"not valid UTF-8 at byte {exc.start}") from None
    text = "".join(parts).removeprefix("\ufeff")
    if "\x00" in text:
        raise ExtractionRefused("undecodable", "contains NUL characters")
    if not text.strip():
        raise ExtractionRefused("no_text", "the source has no text")
    return text


class PlainTextExtractor:
    structure: Structure = "plain"
    version: str = ""  # the bytes decoded
    concurrency: int = 1

    def media_types(self) -> set[str]:
        return {"text/plain"}

    async def extract(self, source: AsyncIterator[bytes], media_type: str) -> str:
        return await decode_utf8(source)


class MarkdownExtractor:
    structure: Structure = "markdown"
    version: str = ""  # the bytes decoded
    concurrency: int = 1

    def media_types(self) -> set[str]:
        return {"text/markdown", "text/x-markdown"}

    async def extract(self, source: AsyncIterator[bytes], media_type: str) -> str:
        return await decode_utf8(source)
