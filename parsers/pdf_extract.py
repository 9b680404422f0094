"""PDF inspection (pikepdf) and text extraction (pdfminer.six) — the code that runs INSIDE the
parser child (`parsers.child`). Importable and testable in process, but the service only ever
runs it in a disposable, rlimit-bounded child (`supervisors.parser_pool`).

Structure for the chunker: the text is Markdown-shaped. Outline entries become ``#`` headings
(level = outline depth) at the start of the page they point to; without an outline, text lines
set clearly larger than the body font become headings (levels by size rank, at most three). A
body line that would read as a Markdown heading (``#`` first) is escaped as ``\\#`` so that the
only headings are the ones derived here. Pages end with a form feed (dropped by normalization).
"""

from __future__ import annotations

import collections
import io
from dataclasses import asdict, dataclass
from typing import Any

import pikepdf
from pdfminer.layout import LAParams, LTChar, LTContainer, LTPage, LTTextLine

MAX_INPUT_BYTES = 32 * 1024 * 1024
MAX_PAGES = 2000
HEADING_RATIO = 1.2  # a line this much larger than the body font is a heading
MAX_HEADING_CHARS = 120


class PdfRefused(Exception):
    """``pdf_encrypted``, ``pdf_unreadable``, ``pdf_too_large`` or ``no_text``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class PdfInspection:
    pages: int
    encrypted: bool
    has_outline: bool
    pdf_version: str

    def as_marker(self) -> dict[str, object]:
        """A JSON-safe upload-inspection marker for the artifact."""
        return asdict(self)


def _open(data: bytes) -> pikepdf.Pdf:
    if len(data) > MAX_INPUT_BYTES:
        raise PdfRefused("pdf_too_large", f"{len(data)} bytes is above {MAX_INPUT_BYTES}")
    try:
        pdf = pikepdf.open(io.BytesIO(data))
    except pikepdf.PasswordError:
        raise PdfRefused("pdf_encrypted", "the PDF needs a password") from None
    except (pikepdf.PdfError, ValueError, OSError, RecursionError) as exc:
        raise PdfRefused("pdf_unreadable", f"pikepdf cannot open it: {type(exc).__name__}") from None
    if pdf.is_encrypted:  # owner-only restrictions too: pdfminer would silently decrypt them
        pdf.close()
        raise PdfRefused("pdf_encrypted", "the PDF is encrypted")
    return pdf


def _outline(pdf: pikepdf.Pdf) -> list[tuple[int, int, str]]:
    """(page index, depth, title) of every outline entry that points at a page, in outline order."""
    pages: dict[tuple[int, int], int] = {page.obj.objgen: i for i, page in enumerate(pdf.pages)}
    found: list[tuple[int, int, str]] = []

    def walk(items: Any, depth: int) -> None:
        for item in items:
            dest = item.destination
            if dest is None and item.action is not None and item.action.get("/D") is not None:
                dest = item.action.get("/D")
            target = None
            if isinstance(dest, pikepdf.Array) and len(dest) > 0 and isinstance(dest[0], pikepdf.Dictionary):
                target = pages.get(dest[0].objgen)
            title = " ".join(str(item.title).split())
            if target is not None and title:
                found.append((target, min(depth, 6), title))
            if depth < 6:
                walk(item.children, depth + 1)

    try:
        with pdf.open_outline() as outline:
            walk(outline.root, 1)
    except (pikepdf.PdfError, RecursionError, ValueError, AttributeError, TypeError):
        return []
    return found


def inspect_pdf_bytes(data: bytes) -> PdfInspection:
    """Open with pikepdf: page count, encryption (refused), outline."""
    pdf = _open(data)
    try:
        count = len(pdf.pages)
        has_outline = bool(_outline(pdf))
        return PdfInspection(pages=count, encrypted=False, has_outline=has_outline, pdf_version=str(pdf.pdf_version))
    except (pikepdf.PdfError, RecursionError, ValueError) as exc:
        raise PdfRefused("pdf_unreadable", f"cannot read its page tree: {type(exc).__name__}") from None
    finally:
        pdf.close()


def _line_size(line: LTTextLine) -> float:
    sizes = [round(ch.size, 1) for ch in line if isinstance(ch, LTChar)]
    return max(sizes) if sizes else 0.0


def _escape(line: str) -> str:
    return "\\" + line if line.lstrip().startswith("#") else line


def _page_lines(page: LTPage) -> list[tuple[str, float]]:
    """Text lines in layout order, those inside figures (Form XObjects) included."""
    lines: list[tuple[str, float]] = []

    def walk(container: LTContainer[Any]) -> None:
        for element in container:
            if isinstance(element, LTTextLine):
                text = " ".join(element.get_text().split())
                if text:
                    lines.append((text, _line_size(element)))
            elif isinstance(element, LTContainer):
                walk(element)

    walk(page)
    return lines


def extract_pdf_text(data: bytes, pages: tuple[int, int] | None = None) -> str:
    """The PDF's text with Markdown headings; refuses encrypted, unreadable, oversized and
    text-less PDFs (see the module docstring). ``pages`` = (first, end), 0-based and end-exclusive,
    extracts one range of a large PDF; a range without text returns "" (the caller, which joins the
    ranges, decides ``no_text``)."""
    from pdfminer.high_level import extract_pages
    from pdfminer.pdfparser import PDFSyntaxError
    from pdfminer.psexceptions import PSException

    pdf = _open(data)
    try:
        if len(pdf.pages) > MAX_PAGES:
            raise PdfRefused("pdf_too_large", f"{len(pdf.pages)} pages is above {MAX_PAGES}")
        outline = _outline(pdf)
    except (pikepdf.PdfError, RecursionError, ValueError) as exc:
        raise PdfRefused("pdf_unreadable", f"cannot read its page tree: {type(exc).__name__}") from None
    finally:
        pdf.close()
    first, end = pages if pages is not None else (0, None)
    outline = [entry for entry in outline if entry[0] >= first and (end is None or entry[0] < end)]
    numbers = set(range(first, end)) if end is not None else None
    try:
        layout = extract_pages(io.BytesIO(data), laparams=LAParams(all_texts=True), page_numbers=numbers)
        page_lines = [_page_lines(page) for page in layout]
    except (PDFSyntaxError, PSException, RecursionError, ValueError, KeyError, TypeError, AssertionError,
            IndexError, AttributeError, ZeroDivisionError, OverflowError) as exc:
        raise PdfRefused("pdf_unreadable", f"pdfminer cannot read it: {type(exc).__name__}") from None
    except Exception as exc:  # pdfminer raises many ad-hoc types from broken files
        raise PdfRefused("pdf_unreadable", f"pdfminer failed: {type(exc).__name__}") from None
    if not any(text.strip() for lines in page_lines for text, _ in lines):
        if pages is not None:
            return ""
        raise PdfRefused("no_text", "the PDF has no text layer")
    heading_levels = {} if outline else _font_headings(page_lines)
    by_page: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)
    for index, depth, title in outline:
        by_page[index].append((depth, title))
    out: list[str] = []
    for index, lines in enumerate(page_lines, start=first):
        for depth, title in by_page.get(index, []):
            out.append(f"\n{'#' * depth} {title}\n")
        for text, size in lines:
            level = heading_levels.get(size)
            if level and len(text) <= MAX_HEADING_CHARS:
                out.append(f"\n{'#' * level} {text}\n")
            else:
                out.append(_escape(text))
        out.append("\f")
    return "\n".join(out).strip("\n") + "\n"


def _font_headings(pages: list[list[tuple[str, float]]]) -> dict[float, int]:
    """Font sizes clearly above the body's (the size most characters are set in) -> heading level."""
    weight: collections.Counter[float] = collections.Counter()
    for lines in pages:
        for text, size in lines:
            weight[size] += len(text)
    if not weight:
        return {}
    body = weight.most_common(1)[0][0]
    larger = sorted((s for s in weight if body > 0 and s >= body * HEADING_RATIO), reverse=True)[:3]
    return {size: level for level, size in enumerate(larger, start=1)}
