"""Steps 3–5 of an ingest — normalize, scan, chunk — as one pure function (`prepare`), and the
request and prepared document it works between. Pure: the shell (`knowledge.ingest`)
reads the source, calls `prepare`, and commits what it returns."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date

from knowledge.core.chunking import (
    CHUNKER_VERSION,
    ChunkDraft,
    Chunker,
    MarkdownChunker,
    PlainTextChunker,
    content_sha256,
)
from knowledge.core.dates import front_matter_date
from knowledge.core.normalize import normalize
from knowledge.core.scan import find_secrets, is_instruction_like
from knowledge.errors import IngestRefused
from knowledge.models import ArtifactRef, Principal
from knowledge.vocabulary import Authority, Sensitivity, Structure, TrustLevel, Visibility


@dataclass(frozen=True)
class IngestRequest:
    """One call of ``knowledge.ingest``."""

    source: ArtifactRef
    title: str
    visibility: Visibility
    principal: Principal
    origin_trust: TrustLevel  # the calling turn's origin trust
    project_scope: str | None = None
    doc_date: date | None = None
    authority: Authority = Authority.PRINCIPAL_SUPPLIED
    sensitivity: Sensitivity = Sensitivity.INTERNAL
    document_id: uuid.UUID | None = None
    replaces: uuid.UUID | None = None  # ingest a new version of this document


@dataclass(frozen=True)
class PreparedChunk:
    draft: ChunkDraft
    content_sha256: str
    instruction_like: bool


@dataclass(frozen=True)
class PreparedDocument:
    """Steps 3–5 done: what will be stored, before ids (which need the document's identity)."""

    text: str
    chunks: list[PreparedChunk]
    chunker_version: str = CHUNKER_VERSION
    doc_date: date | None = None  # the date the source states (`knowledge.core.dates`), if any
    title: str = ""  # the title the chunks are headed by (the request's, or the source's own)

    @property
    def instruction_like_count(self) -> int:
        return sum(c.instruction_like for c in self.chunks)


#: What PostgreSQL text cannot store: NUL, and lone surrogates (a ``str`` may hold them, UTF-8 cannot).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def prepare(raw_text: str, title: str, structure: Structure, chunker: Chunker | None = None,
            source_version: str = "") -> PreparedDocument:
    """Normalize, scan and chunk (pure). Raises `IngestRefused` for a secret or empty text, and for
    text or a title that PostgreSQL cannot store (NUL, lone surrogates): ``undecodable`` for the
    text, as the text extractors refuse it, and ``invalid_request`` for the title (it heads every
    chunk's heading path). Never removes or replaces them: that would alter the text outside the
    normalizer's closed list. ``chunker`` replaces the default chunker for the structure
    (re-chunking under another version). ``source_version``: the extractor's (`Extractor.version`),
    joined to the chunker's in the chunk set's version, since the extracted text moves with it."""
    if _UNSTORABLE.search(title):
        raise IngestRefused("invalid_request", "the title contains NUL or a lone surrogate")
    if (bad := _UNSTORABLE.search(raw_text)) is not None:
        what = "NUL characters" if bad.group() == "\x00" else "a lone surrogate (not encodable as UTF-8)"
        raise IngestRefused("undecodable", f"contains {what} at character {bad.start()}")
    text = normalize(raw_text)
    if not text.strip():
        raise IngestRefused("no_text", "nothing left after normalization")
    if chunker is None:
        chunker = MarkdownChunker() if structure == "markdown" else PlainTextChunker()
    drafts = chunker.chunk(text, title)
    if not drafts:
        raise IngestRefused("no_text", "no chunk of text")
    findings = find_secrets(text)
    if findings:
        first = findings[0]
        holder = next((d for d in drafts if d.start <= first.start < max(d.end, d.start + 1)), None)
        holder = holder or min(drafts, key=lambda d: abs(d.start - first.start))
        path = redacted(holder.heading_path, [text[f.start:f.end] for f in findings])
        raise IngestRefused(
            "secret_detected",
            f"a credential ({first.kind}, line {first.line}) in chunk {holder.ordinal} under {' > '.join(path)}",
            chunk_ordinal=holder.ordinal, heading_path=path,
        )
    chunks = [PreparedChunk(d, content_sha256(d.text), is_instruction_like(d.text)) for d in drafts]
    version = f"{chunker.version}+{source_version}" if source_version else chunker.version
    # The date the source states: a Markdown file's front matter, else what its extractor read
    # (a PDF's /Info dates: `knowledge.parsers.base.Extracted`).
    stated = (front_matter_date(text) if structure == "markdown" else None) or getattr(raw_text, "stated_date", None)
    return PreparedDocument(text, chunks, version, stated, title)


def redacted(heading_path: Sequence[str], secrets: Sequence[str]) -> tuple[str, ...]:
    """``heading_path`` with every credential found in the text cut out of it: a refusal names where
    the credential is (its chunk, its headings) and never echoes it, even one written in a heading."""
    out = []
    for heading in heading_path:
        for secret in secrets:
            for piece in {secret, *secret.split()}:
                if len(piece) >= 8 and piece in heading:
                    heading = heading.replace(piece, "[credential]")
        out.append(heading)
    return tuple(out)


def dated(request: IngestRequest, prepared: PreparedDocument) -> IngestRequest:
    """``request`` with what its source states where the caller gave none: the date (the document's
    own date, never the ingestion date; none stated: None, and recency is neutral) and the title
    (an HTML page's ``<title>``, a Word document's, else the file's name: `PreparedDocument.title`)."""
    if not request.title.strip() and prepared.title:
        request = replace(request, title=prepared.title)
    if request.doc_date is not None or prepared.doc_date is None:
        return request
    return replace(request, doc_date=prepared.doc_date)
