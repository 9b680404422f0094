"""The Extractor port (ADR-0033, "Ports and data model") and the registry that picks an adapter.

An extractor turns a source's bytes into text. It refuses, with a reason code, what it cannot
turn into text: never an empty document that retrieves nothing and explains nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Protocol, runtime_checkable

from knowledge.errors import ExtractionRefused
from knowledge.models import Extracted  # noqa: F401  (the port's return type, re-exported)
from knowledge.vocabulary import Structure


@runtime_checkable
class Extractor(Protocol):
    #: The structure of the text this extractor returns.
    structure: Structure
    #: What moves the text it returns — its own rules and the parsing libraries' versions — or ""
    #: when the text is the source's bytes decoded. Part of the chunker version of every chunk set
    #: made from its text: a parser upgrade is a new chunker version, never new ids under the old.
    version: str
    #: How many extractions of it may usefully run at once: 1 for one that works in this process
    #: (pure CPU), more for one that parses in child processes (the parser pool's children).
    concurrency: int

    def media_types(self) -> set[str]: ...

    async def extract(self, source: AsyncIterator[bytes], media_type: str) -> str:
        """The source's text (an `Extracted` where the source states its date). Raises
        `ExtractionRefused`. Cancellation: propagates; an adapter that runs a child process kills
        and reaps it first."""
        ...


async def collect_source(source: AsyncIterator[bytes], fmt: str, limit: int) -> bytes:
    """A source's bytes gathered for a parser child, refused as ``<fmt>_too_large`` above ``limit``."""
    parts: list[bytes] = []
    size = 0
    async for chunk in source:
        size += len(chunk)
        if size > limit:
            raise ExtractionRefused(f"{fmt}_too_large", f"{fmt.upper()} above the {limit}-byte input bound")
        parts.append(chunk)
    return b"".join(parts)


def base_media_type(media_type: str) -> str:
    """``"text/markdown; charset=utf-8"`` -> ``"text/markdown"``."""
    return media_type.split(";", 1)[0].strip().lower()


class ExtractorRegistry:
    """Media type -> extractor. An unsupported media type is refused loudly."""

    def __init__(self, extractors: Iterable[Extractor] = ()) -> None:
        self._by_type: dict[str, Extractor] = {}
        for extractor in extractors:
            self.register(extractor)

    def register(self, extractor: Extractor) -> None:
        for media_type in extractor.media_types():
            key = base_media_type(media_type)
            if key in self._by_type:
                raise ValueError(f"two extractors for {key}")
            self._by_type[key] = extractor

    def media_types(self) -> set[str]:
        return set(self._by_type)

    def for_media_type(self, media_type: str) -> Extractor:
        extractor = self._by_type.get(base_media_type(media_type))
        if extractor is None:
            raise ExtractionRefused("unsupported_media_type", f"no extractor for {media_type!r}")
        return extractor
