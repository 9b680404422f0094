"""PDF inspection (pikepdf) and text extraction (pdfminer.six): the code that runs INSIDE the parser
child (`knowledge.parsers.child`). Importable and testable in process, but the service only ever runs it in a
disposable, rlimit-bounded child (`knowledge.supervisors.parser_pool`): pdfminer inflates whole streams in
memory and recurses on nested objects, so only the child's limits protect anything.

Refusals (`PdfRefused.reason`): ``pdf_encrypted`` (any encryption, decided by pikepdf alone: pdfminer
silently decrypts empty-password and owner-only files), ``pdf_unreadable``, ``pdf_too_large`` (above
32 MiB or `MAX_PAGES` pages) and ``no_text`` (no text layer: scans, images, blank pages).

Recovery: a file refused for a loop in its structure — a page tree qpdf will not walk (/Kids that
lead back to an ancestor), or a RecursionError in pdfminer reading the document (an xref chain whose
/Prev leads back) — is repaired once, in memory, before it is refused: pikepdf rewrites it with a
flat page tree of the /Page leaves reachable from the root (walked iteratively, each node once, in
document order, within `MAX_PAGE_TREE_NODES` entries and `MAX_PAGES` pages) and one xref, streams
copied undecoded, and inspection and extraction both read the repaired bytes. Encryption is decided
first: an encrypted file is refused, never repaired. Other damage (a missing trailer, a broken
object stream) is not guessed at: it stays ``pdf_unreadable``, as does a repair that fails, with a
message saying so.

The text is Markdown-shaped, for the chunker:

- **Headings from the outline.** Each outline entry (explicit or named destination, ``/Dest`` or a
  ``/GoTo`` action) that resolves to a page becomes a heading of its outline depth. On that page the
  text line that *is* the heading (its text equals the title, case-insensitively, perhaps after a
  section number such as ``1.2`` or ``Chapter 3``, perhaps wrapped over up to three lines) becomes
  the heading line, so the heading sits where the section starts and its text is not repeated.
  An entry with no such line is inserted before the first line below its destination's ``top``
  (``/XYZ``, ``/FitH``, ``/FitBH``, ``/FitR``), else at the start of the page (after the previous
  entry's heading on that page).
- **Headings from font sizes.** Body size = the size most characters are set in; lines at least
  `HEADING_RATIO` times larger become headings, the largest `FONT_LEVELS` sizes (that have a line
  with a letter) ranked into levels. Adjacent lines of one heading size (a wrapped title, a number set
  apart from its title) merge into one heading; a heading needs a letter and at most
  `MAX_HEADING_CHARS` characters, else it stays body text. With an outline, font sizes only add
  *deeper* headings: sizes above the body but below the smallest heading the outline matched, levels
  continuing below the outline's depth, after the first outline heading (a manual whose outline stops
  at sections still gets its subsections). If no outline entry matched a line, only the outline is used.
- **Body text is the PDF's text.** pdfminer's text boxes become paragraphs (a blank line between
  them), its lines stay lines, whitespace runs inside a line become one space. Nothing is escaped.
  A body line that would change the Markdown *block* structure (an ATX heading ``# …``, a setext
  underline ``===``/``---`` — also a front-matter fence —, a code fence, or an HTML block that runs
  past blank lines such as ``<pre>`` or ``<!--``) is indented by four spaces: whitespace only, the
  text stays verbatim, but CommonMark then reads it as a paragraph continuation or an indented code
  block. So the headings derived here are the only top-level headings, and no body line can swallow
  them into a code fence or HTML block (every derived heading stands at column 0 between blank lines).
- **Combining marks stay with their base.** pdfminer groups characters into lines by position, so
  a mark set above or below its letter (Thai tone marks and vowel signs) can start a line or a text
  box of its own. A combining mark (Unicode category M) never starts a line or a paragraph here: the
  marks that would are appended to the line before (in pdfminer's order, the line holding the
  character that preceded them); on a page's first line they sit on a no-break space. Only
  whitespace changes: the characters are pdfminer's, every one.
- Cleaning, all of it non-textual: control characters (NUL among them: PostgreSQL text cannot hold
  it) are dropped, lone surrogates become U+FFFD (the result must encode as UTF-8), and the Latin
  typographic ligatures U+FB00-FB06 (``ﬁ``) become their letters, glyph choices that would otherwise
  hide words from search.
- Every page ends with a form feed on its own line (``\\f``, removed by normalization as trailing
  whitespace), so ``text.count("\\f")`` is the number of pages extracted and two page ranges
  concatenate into the whole.
"""

from __future__ import annotations

import collections
import io
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any, TypeVar

import pikepdf

from knowledge.parsers.refusal import Refused

MAX_INPUT_BYTES = 32 * 1024 * 1024
#: No legitimate upload needs more; at ~20 pages/s it would not finish within the 60 s deadline anyway.
MAX_PAGES = 2000
#: A page pdfminer fails on (content stream errors, recursion) contributes no text; when more than
#: this share of the pages fails, the file is refused as unreadable rather than returned mostly empty.
MAX_FAILED_PAGE_SHARE = 0.5
HEADING_RATIO = 1.2  # a line this much larger than the body font is a heading
FONT_LEVELS = 3
MAX_HEADING_CHARS = 120
#: Vertical slack (points) when comparing a line's top with an outline destination's ``top``.
TOP_SLACK = 4.0
MAX_OUTLINE_ENTRIES = 10_000
#: Outline entries of one page searched for in its lines; more (a hostile outline) are inserted
#: unmatched, so placing them costs O(entries), not O(entries x lines).
MAX_MATCHED_PER_PAGE = 200
OUTLINE_DEPTH = 15  # pikepdf's default; deeper entries are not read (and would be level 6 anyway)
#: Page-tree entries a repair follows (pages, /Pages nodes, and entries met again) before it gives up:
#: an honest tree of `MAX_PAGES` pages has far fewer; a hostile /Kids array of millions ends here.
MAX_PAGE_TREE_NODES = 10_000

#: A per-step progress hook (`extract_pdf_text`): the parser child turns each call into a line the
#: pool reads, so a child that stops making progress can be told from one that is merely slow.
Progress = Callable[[str], None] | None

REASONS = frozenset({"pdf_encrypted", "pdf_unreadable", "pdf_too_large", "no_text"})


class PdfRefused(Refused):
    """The PDF cannot become text: ``reason`` is ``pdf_encrypted``, ``pdf_unreadable``,
    ``pdf_too_large`` or ``no_text``."""

    REASONS = REASONS


class _Repairable(PdfRefused):
    """``pdf_unreadable`` for a loop in the file's structure (a page tree qpdf cannot walk, an xref
    chain pdfminer recurses on without end) that a repair by pikepdf may undo (`_with_repair`)."""

    def __init__(self, message: str) -> None:
        super().__init__("pdf_unreadable", message)


@dataclass(frozen=True)
class PdfInspection:
    """What upload inspection learns without extracting text. ``encrypted`` is always False in a
    returned inspection (an encrypted PDF is refused); it is kept so the marker states it.
    ``has_outline``: the outline has at least one entry that resolves to a page."""

    pages: int
    encrypted: bool
    has_outline: bool
    pdf_version: str

    def as_marker(self) -> dict[str, object]:
        """A JSON-safe dict kept on the artifact as its upload-inspection marker."""
        return asdict(self)


@dataclass(frozen=True)
class _Entry:
    """One outline entry: 0-based page index, level (1..6), title, destination top (points) or None."""

    page: int
    level: int
    title: str
    top: float | None


# --- pikepdf: opening, encryption, page count, outline ------------------------------------------------


def _open(data: bytes) -> pikepdf.Pdf:
    if len(data) > MAX_INPUT_BYTES:
        raise PdfRefused("pdf_too_large", f"{len(data)} bytes is above the {MAX_INPUT_BYTES}-byte bound")
    try:
        # Not inherit_page_attributes: it walks the page tree while opening, so a looping tree would
        # fail here like a file that is no PDF at all; it fails at `len(pdf.pages)` instead, where it
        # can be repaired. Nothing here reads an inherited page attribute.
        pdf = pikepdf.open(io.BytesIO(data), inherit_page_attributes=False)
    except pikepdf.PasswordError:
        raise PdfRefused("pdf_encrypted", "the PDF needs a password") from None
    except MemoryError:
        raise
    except Exception as exc:  # qpdf reports broken files as PdfError, and some as other types
        raise PdfRefused("pdf_unreadable", f"pikepdf cannot open it: {type(exc).__name__}") from None
    if pdf.is_encrypted:  # owner-only restrictions and empty user passwords too: pdfminer would decrypt them
        pdf.close()
        raise PdfRefused("pdf_encrypted", "the PDF is encrypted")
    return pdf


_PDF_DATE = re.compile(r"^\s*(?:D:)?(\d{4})(?:-?(\d{2}))?(?:-?(\d{2}))?(\d?)")


def pdf_date(value: object) -> date | None:
    """The calendar date of a PDF date string (``D:YYYYMMDDHHmmSS+HH'mm'``, any tail: producers
    write it loosely; an ISO ``2024-03-05`` too), as written — its time and zone dropped; None if it
    is no date."""
    m = _PDF_DATE.match(str(value)) if value is not None else None
    if m is None or (m.group(4) and m.group(3) is None):  # "D:20241": digits that make no date
        return None
    try:
        return date(int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1))
    except ValueError:
        return None


def stated_date(data: bytes) -> date | None:
    """The date the PDF states of itself, from its document information: when it was last modified
    (``/ModDate``), else when it was created (``/CreationDate``) — as a Markdown page's ``lastmod``
    wins over its ``date`` (`knowledge.core.dates`). None when it states none, or cannot be read
    (extraction decides what an unreadable file is)."""
    try:
        pdf = _open(data)
    except PdfRefused:
        return None
    try:
        info = pdf.docinfo
        return pdf_date(info.get("/ModDate")) or pdf_date(info.get("/CreationDate"))
    except MemoryError:
        raise
    except Exception:  # a damaged /Info: no stated date, the text is extracted as ever
        return None
    finally:
        pdf.close()


def _tell(progress: Progress, event: str) -> None:
    if progress is not None:
        progress(event)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    return float(value)


def _top(array: pikepdf.Array) -> float | None:
    """The destination's ``top`` (PDF 32000 12.3.2.2), where its fit type has one."""
    kind = str(array[1]) if len(array) > 1 else ""
    position = {"/XYZ": 3, "/FitH": 2, "/FitBH": 2, "/FitR": 5}.get(kind)
    return _number(array[position]) if position is not None and len(array) > position else None


class _Destinations:
    """Resolves an outline entry's destination to (page index, top)."""

    def __init__(self, pdf: pikepdf.Pdf) -> None:
        self.pdf = pdf
        self.pages: dict[tuple[int, int], int] = {}
        for index, page in enumerate(pdf.pages):
            objgen = page.obj.objgen
            if objgen != (0, 0):  # a direct page object has no identity to point at
                self.pages.setdefault(objgen, index)
        self.count = len(pdf.pages)
        self._tree: pikepdf.NameTree | bool | None = False  # False: not looked up yet

    def _named(self, name: str) -> object:
        if self._tree is False:
            self._tree = None
            names = self.pdf.Root.get("/Names")
            tree = names.get("/Dests") if isinstance(names, pikepdf.Dictionary) else None
            if isinstance(tree, pikepdf.Dictionary):
                self._tree = pikepdf.NameTree(tree)
        if isinstance(self._tree, pikepdf.NameTree) and name in self._tree:
            return self._tree[name]
        return None

    def resolve(self, dest: object) -> tuple[int, float | None] | None:
        if isinstance(dest, pikepdf.String):  # a named destination (PDF 1.2+ name tree)
            dest = self._named(str(dest))
        elif isinstance(dest, pikepdf.Name):  # a named destination (PDF 1.1 /Dests dictionary)
            legacy = self.pdf.Root.get("/Dests")
            dest = legacy.get(dest) if isinstance(legacy, pikepdf.Dictionary) else None
        if isinstance(dest, pikepdf.Dictionary):  # a name's value may be a dictionary holding /D
            dest = dest.get("/D")
        if not isinstance(dest, pikepdf.Array) or len(dest) == 0:
            return None
        target = dest[0]
        if isinstance(target, pikepdf.Dictionary):
            index = self.pages.get(target.objgen)
        else:  # some producers write a page number where a page reference belongs
            number = _number(target)
            index = int(number) if number is not None and 0 <= number < self.count else None
        return None if index is None else (index, _top(dest))


def _outline(pdf: pikepdf.Pdf) -> list[_Entry]:
    """Every outline entry that points at a page, in outline order. pikepdf's reader stops at
    repeated objects (cyclic outlines end) and at `OUTLINE_DEPTH`; a broken outline is no outline."""
    try:
        if "/Outlines" not in pdf.Root:
            return []
        outline = pdf.open_outline(max_depth=OUTLINE_DEPTH)  # not as a context manager: that writes it back
        roots = list(outline.root)
        destinations = _Destinations(pdf)
    except MemoryError:
        raise
    except Exception:
        return []
    found: list[_Entry] = []
    pending: list[tuple[Any, int]] = [(item, 1) for item in reversed(roots)]
    seen = 0
    while pending and seen < MAX_OUTLINE_ENTRIES:  # iterative: no recursion on deep outlines
        item, depth = pending.pop()
        seen += 1
        try:
            dest = item.destination
            action = item.action
            if dest is None and isinstance(action, pikepdf.Dictionary) and action.get("/S") == pikepdf.Name.GoTo:
                dest = action.get("/D")
            where = destinations.resolve(dest)
            title = " ".join(_clean(str(item.title)).split())
        except MemoryError:
            raise
        except Exception:  # one malformed entry costs that entry only
            where, title = None, ""
        if where is not None and _has_word(title):
            found.append(_Entry(where[0], min(depth, 6), title, where[1]))
        pending.extend((child, depth + 1) for child in reversed(item.children))
    return found


def inspect_pdf_bytes(data: bytes) -> PdfInspection:
    """Upload inspection: page count, outline, version. Refuses encrypted PDFs (any encryption: a user
    password, or owner-only restrictions), unreadable ones, and those above 32 MiB or `MAX_PAGES`
    pages. A page tree with a loop is inspected as repaired (`_repair`), so its page count is the one
    extraction sees.

    It runs every *structural* check extraction runs, with the same outcome: pikepdf opens the file and
    walks its page tree (`_structure`), then pdfminer reads the document (xref, trailer, object graph as
    far as the catalog) and walks its page tree (`_document_pages`), as `_layout` does before the first
    page. What it does NOT check is content: no content stream, font, image or Form XObject is read,
    so a decompression bomb, recursive XObjects, pages whose content pdfminer cannot interpret (more
    than `MAX_FAILED_PAGE_SHARE` of them refuse the file) and a missing text layer (``no_text``) pass
    inspection and are found by extraction (a bomb as the pool's stall limit or deadline)."""
    pages, outline, version = _with_repair(_inspect, data)
    return PdfInspection(pages=pages, encrypted=False, has_outline=bool(outline), pdf_version=version)


def _inspect(data: bytes) -> tuple[int, list[_Entry], str]:
    found = _structure(data)
    _document_pages(data)
    return found


def _document_pages(data: bytes) -> int:
    """The pages pdfminer finds, counted as `_layout` finds them (up to `MAX_PAGES` + 1), reading no
    content: its failures to read the document are extraction's, refused the same way."""
    from pdfminer.pdfdocument import PDFDocument
    from pdfminer.pdfpage import PDFPage
    from pdfminer.pdfparser import PDFParser

    count = 0
    try:
        for _ in PDFPage.create_pages(PDFDocument(PDFParser(io.BytesIO(data)))):
            count += 1
            if count > MAX_PAGES:
                break
    except MemoryError:
        raise
    except RecursionError:  # as in `_layout`: an xref /Prev loop, a page tree nested without end
        raise _Repairable("pdfminer cannot read it: RecursionError") from None
    except Exception as exc:
        raise PdfRefused("pdf_unreadable", f"pdfminer cannot read it: {type(exc).__name__}") from None
    return count


def _structure(data: bytes) -> tuple[int, list[_Entry], str]:
    pdf = _open(data)
    try:
        count = len(pdf.pages)
    except MemoryError:
        pdf.close()
        raise
    except Exception as exc:  # a page tree qpdf cannot walk (a /Kids loop): `_repair` may rebuild it
        pdf.close()
        raise _Repairable(f"cannot read its page tree: {type(exc).__name__}") from None
    try:
        if count > MAX_PAGES:
            raise PdfRefused("pdf_too_large", f"{count} pages is above {MAX_PAGES}")
        return count, _outline(pdf), str(pdf.pdf_version)
    finally:
        pdf.close()


# --- pikepdf: repairing a loop in the structure -------------------------------------------------------

_T = TypeVar("_T")
#: Page attributes a page may inherit from its ancestors (PDF 32000 7.7.3.4).
_INHERITABLE = ("/Resources", "/MediaBox", "/CropBox", "/Rotate")
_END = object()  # end of a /Kids iterator (a null entry reads as None, so None cannot mark the end)


def _with_repair(run: Callable[[bytes], _T], data: bytes) -> _T:
    """``run(data)``; if that fails on a loop in the file's structure, ``run`` once more, on the bytes
    pikepdf repaired. Once: a repair that still fails is ``pdf_unreadable``, never a second repair."""
    try:
        return run(data)
    except _Repairable as damage:
        repaired = _repair(data, damage)
    try:
        return run(repaired)
    except _Repairable as again:
        raise PdfRefused("pdf_unreadable", f"{again.message}, even after a repair by pikepdf") from None


def _repair(data: bytes, damage: _Repairable) -> bytes:
    """The file as pikepdf rewrites it, with a page tree rebuilt flat from its reachable pages: a
    /Kids loop is gone, and so is an xref chain that loops (qpdf reads each xref once; the copy has one
    xref). Streams are copied as they are, never decoded: a bomb stays as small as it came. Only what
    `_open` accepts is repaired: an encrypted file is refused, never rewritten."""
    pdf = _open(data)
    try:
        pages = _reachable_pages(pdf, damage)
        tree = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Pages, Count=len(pages)))
        for page in pages:
            page.Parent = tree
        tree.Kids = pikepdf.Array(pages)
        pdf.Root.Pages = tree
        buffer = io.BytesIO()
        # No XMP rewriting (it would parse the document's XML), no object streams unpacked or made.
        pdf.save(buffer, preserve_pdfa=False, fix_metadata_version=False, compress_streams=False,
                 stream_decode_level=pikepdf.StreamDecodeLevel.none)
        return buffer.getvalue()
    except (PdfRefused, MemoryError):
        raise
    except Exception as exc:  # qpdf's PdfError on an object it cannot resolve or write, among others
        why = f"{damage.message}; pikepdf cannot repair it: {type(exc).__name__}"
        raise PdfRefused("pdf_unreadable", why) from None
    finally:
        pdf.close()


def _entries(array: pikepdf.Array) -> Iterator[Any]:
    """The array's items one at a time: ``iter(array)`` copies every item first, and a hostile /Kids
    array has millions, of which the walk reads at most `MAX_PAGE_TREE_NODES`."""
    return (array[i] for i in range(len(array)))


def _reachable_pages(pdf: pikepdf.Pdf, damage: _Repairable) -> list[pikepdf.Dictionary]:
    """The /Page leaves reachable from the page tree's root, in document order (depth first, /Kids in
    order), each once: a node met again (a /Kids loop, a page listed twice) is skipped. A page gets
    the attributes its ancestors gave it, as it will hang from a new root. Iterative (no recursion
    however deep the tree), bounded by `MAX_PAGE_TREE_NODES` entries and `MAX_PAGES` pages."""
    pages: list[pikepdf.Dictionary] = []
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[Iterator[Any], dict[str, Any]]] = [(iter([pdf.Root.get("/Pages")]), {})]
    budget = MAX_PAGE_TREE_NODES
    while stack:
        kids, inherited = stack[-1]
        node = next(kids, _END)
        if node is _END:
            stack.pop()
            continue
        budget -= 1
        if budget < 0:
            raise PdfRefused("pdf_unreadable", f"{damage.message}; its page tree has more than "
                                               f"{MAX_PAGE_TREE_NODES} entries to repair")
        if not isinstance(node, pikepdf.Dictionary):
            continue
        if node.objgen != (0, 0):  # a loop needs an indirect object: direct ones cannot be met again
            if node.objgen in seen:
                continue
            seen.add(node.objgen)
        if node.get("/Type") == pikepdf.Name.Page:
            for key, value in inherited.items():
                if key not in node:
                    node[key] = value
            pages.append(node)
            if len(pages) > MAX_PAGES:
                raise PdfRefused("pdf_too_large", f"more than {MAX_PAGES} pages")
        elif isinstance(children := node.get("/Kids"), pikepdf.Array):
            own = {key: node[key] for key in _INHERITABLE if key in node}
            stack.append((_entries(children), {**inherited, **own}))
    if not pages:
        raise PdfRefused("pdf_unreadable", f"{damage.message}; no page is reachable from its page tree")
    return pages


# --- pdfminer: text lines with their font sizes and positions -----------------------------------------
# pdfminer is imported inside the functions that use it: inspection needs only pikepdf, and a cold
# child that only inspects saves its import (~0.1 s). A spare child calls `preload` instead.


def preload() -> None:
    """Import everything extraction needs (for a spare child that waits for its job)."""
    import pdfminer.converter
    import pdfminer.layout
    import pdfminer.pdfdocument
    import pdfminer.pdfinterp
    import pdfminer.pdfpage
    import pdfminer.pdfparser  # noqa: F401


@dataclass
class _Line:
    text: str
    size: float  # the size most of the line's characters are set in, to the half point
    top: float
    bottom: float
    left: float
    box: int  # the text box (paragraph) of the page it belongs to
    level: int = 0  # > 0: this line is a heading of that level
    heading: str = ""  # the heading's text (this line merged with the ones it absorbed)
    absorbed: bool = False  # part of the heading on an earlier line


@dataclass
class _Page:
    lines: list[_Line] = field(default_factory=list)
    inserted: dict[int, list[tuple[int, str]]] = field(default_factory=dict)  # before line i: (level, title)


_CONTROLS = dict.fromkeys([*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)])
_LIGATURES = {0xFB00: "ff", 0xFB01: "fi", 0xFB02: "fl", 0xFB03: "ffi", 0xFB04: "ffl", 0xFB05: "st", 0xFB06: "st"}
_CLEAN = str.maketrans({**_CONTROLS, **_LIGATURES, 0x09: " ", 0x0A: " ", 0x0D: " "})
_SURROGATE = re.compile("[\ud800-\udfff]")
_CID = re.compile(r"\(cid:\d+\)")  # pdfminer's stand-in for a glyph with no Unicode mapping


def _clean(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text.translate(_CLEAN))


def _has_word(text: str) -> bool:
    return any(ch.isalpha() for ch in text)


def _is_text(text: str) -> bool:
    """True when ``text`` holds a real character: not only whitespace, U+FFFD or unmapped glyphs."""
    return any(not ch.isspace() and ch != "\ufffd" for ch in _CID.sub("", text))


def _line(element: Any, box: int) -> _Line | None:
    from pdfminer.layout import LTChar

    text = " ".join(_clean(element.get_text()).split())
    if not text:
        return None
    sizes: collections.Counter[float] = collections.Counter(
        round(ch.size * 2) / 2 for ch in element if isinstance(ch, LTChar))
    # The most common size, ties to the larger: a superscript or a drop cap does not make the line's size.
    size = max(sizes.items(), key=lambda kv: (kv[1], kv[0]))[0] if sizes else 0.0
    return _Line(text, size, float(element.y1), float(element.y0), float(element.x0), box)


def _page_lines(layout: Any) -> list[_Line]:
    """Text lines in pdfminer's reading order; each text box is a paragraph. Text inside figures
    (Form XObjects) is included (``all_texts``)."""
    from pdfminer.layout import LTContainer, LTTextBox, LTTextLine

    lines: list[_Line] = []
    box = 0
    stack: list[Iterator[Any]] = [iter(layout)]
    while stack:  # iterative: figures nest
        element = next(stack[-1], None)
        if element is None:
            stack.pop()
            continue
        if isinstance(element, LTTextBox):
            box += 1
            lines.extend(line for item in element if isinstance(item, LTTextLine) and (line := _line(item, box)))
        elif isinstance(element, LTTextLine):
            box += 1
            if line := _line(element, box):
                lines.append(line)
        elif isinstance(element, LTContainer):
            stack.append(iter(element))
    return _attach_marks(lines)


def _is_mark(ch: str) -> bool:
    """A combining mark (Unicode category Mn, Mc or Me): a Thai tone mark or vowel sign, an accent."""
    return unicodedata.category(ch).startswith("M")


def _attach_marks(lines: list[_Line]) -> list[_Line]:
    """Move the combining marks that start a line onto the end of the line before it. pdfminer groups
    characters into lines by position, so a mark set above or below its base letter (Thai tone marks
    and vowel signs) can land in a line, even a text box, of its own, or at the start of the next one;
    a mark that starts a line has lost its base. The line before it in pdfminer's order holds the
    character that preceded the mark in its output, its base as far as the text can tell. A line left
    empty is dropped; a page's first line keeps its marks on a no-break space (Unicode's base for a
    lone mark), since the pages are extracted in ranges independently. Only whitespace changes."""
    kept: list[_Line] = []
    for line in lines:
        if not _is_mark(line.text[0]):
            kept.append(line)
            continue
        lead = 0  # the leading run of marks (and the spaces between them)
        while lead < len(line.text) and (_is_mark(line.text[lead]) or line.text[lead] == " "):
            lead += 1
        marks, rest = line.text[:lead].replace(" ", ""), line.text[lead:]
        if not kept:
            line.text = "\u00a0" + line.text
            kept.append(line)
            continue
        kept[-1].text += marks
        if rest:
            line.text = rest
            kept.append(line)
    return kept


def _layout(data: bytes, first: int, end: int | None, progress: Progress = None) -> list[list[_Line]]:
    """Each page's lines from ``first`` to ``end`` (exclusive). A page whose content pdfminer cannot
    interpret contributes no lines; more than `MAX_FAILED_PAGE_SHARE` of them refuses the file.
    ``progress`` hears ``"document"`` once pdfminer has read the document and ``"page"`` after each
    page of the range (read or failed)."""
    from pdfminer.converter import PDFPageAggregator
    from pdfminer.layout import LAParams
    from pdfminer.pdfdocument import PDFDocument
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage
    from pdfminer.pdfparser import PDFParser

    pages: list[list[_Line]] = []
    failed: list[str] = []
    try:
        document = PDFDocument(PDFParser(io.BytesIO(data)))
        manager = PDFResourceManager(caching=True)
        device = PDFPageAggregator(manager, laparams=LAParams(all_texts=True))
        interpreter = PDFPageInterpreter(manager, device)
        _tell(progress, "document")
        for index, page in enumerate(PDFPage.create_pages(document)):
            if index < first:
                continue
            if end is not None and index >= end:
                break
            try:
                interpreter.process_page(page)
                pages.append(_page_lines(device.get_result()))
            except MemoryError:
                raise
            except Exception as exc:  # PSEOF, PDFSyntaxError, RecursionError, KeyError, ...: this page only
                failed.append(type(exc).__name__)
                pages.append([])
            _tell(progress, "page")
    except MemoryError:
        raise
    except RecursionError:  # an xref /Prev chain that loops, a page tree nested without end: `_repair`
        raise _Repairable("pdfminer cannot read it: RecursionError") from None
    except Exception as exc:  # the document itself (xref, trailer, page tree): nothing to trust
        raise PdfRefused("pdf_unreadable", f"pdfminer cannot read it: {type(exc).__name__}") from None
    if failed and len(failed) > MAX_FAILED_PAGE_SHARE * len(pages):
        raise PdfRefused("pdf_unreadable", f"pdfminer failed on {len(failed)} of {len(pages)} pages: {failed[0]}")
    return pages


# --- headings -----------------------------------------------------------------------------------------

_SECTION_NUMBER = re.compile(
    r"(?:(?:chapter|section|part|appendix)\s+)?(?:\d+(?:\.\d+)*|[ivxlcdm]+|[a-z]|[a-z]\.\d+(?:\.\d+)*)[.:)]?")


def _key(text: str) -> str:
    return " ".join(text.casefold().split())


def _is_title(text: str, title: str) -> bool:
    """``text`` is the outline ``title`` (case-insensitive), perhaps after a section number."""
    text, title = _key(text), _key(title)
    if text == title:
        return True
    if not text.endswith(" " + title):
        return False
    return _SECTION_NUMBER.fullmatch(text[: -len(title) - 1]) is not None


def _find_title(lines: list[_Line], start: int, entry: _Entry) -> tuple[int, int] | None:
    """(index, number of lines) of the first free line(s) from ``start`` that read as the entry's
    title; with a known destination top, a match at or below it is preferred."""
    fallback: tuple[int, int] | None = None
    for i in range(start, len(lines)):
        joined = ""
        for n in range(3):  # a title wrapped over up to three lines
            if i + n >= len(lines) or lines[i + n].level or lines[i + n].absorbed:
                break
            joined = f"{joined} {lines[i + n].text}".strip()
            if len(joined) > len(entry.title) + 24:  # room for a section number, no more
                break
            if _is_title(joined, entry.title):
                if entry.top is None or lines[i].top <= entry.top + TOP_SLACK:
                    return i, n + 1
                fallback = fallback or (i, n + 1)  # above its destination: only if nothing better
                break
    return fallback


def _place_outline(pages: list[_Page], first: int, outline: list[_Entry]) -> list[float]:
    """Make outline entries headings on their pages; returns the font sizes of the lines matched."""
    by_page: dict[int, list[_Entry]] = collections.defaultdict(list)
    for entry in outline:
        if first <= entry.page < first + len(pages):
            by_page[entry.page - first].append(entry)
    matched: list[float] = []
    for index, entries in by_page.items():
        page = pages[index]
        cursor = 0  # entries on one page keep their outline order
        for n, entry in enumerate(entries):
            found = _find_title(page.lines, cursor, entry) if n < MAX_MATCHED_PER_PAGE else None
            if found is not None:
                at, count = found
                page.lines[at].level = entry.level
                page.lines[at].heading = " ".join(line.text for line in page.lines[at:at + count])
                for line in page.lines[at + 1:at + count]:
                    line.absorbed = True
                matched.append(page.lines[at].size)
                cursor = at + count
                continue
            if entry.top is not None:
                below = (i for i in range(cursor, len(page.lines)) if page.lines[i].top <= entry.top + TOP_SLACK)
                cursor = next(below, len(page.lines))
            page.inserted.setdefault(cursor, []).append((entry.level, entry.title))
    return matched


def _font_levels(pages: list[_Page], below: float | None, base: int) -> dict[float, int]:
    """Heading sizes -> levels: sizes at least `HEADING_RATIO` times the body's (and under ``below``,
    when the outline already owns the larger sizes), largest first, levels after ``base``."""
    weight: collections.Counter[float] = collections.Counter()
    worded: set[float] = set()  # sizes some line of which could be a heading: digits alone take no rank
    for page in pages:
        for line in page.lines:
            if not line.level and not line.absorbed:
                weight[line.size] += len(line.text)
                if _has_word(line.text) and len(line.text) <= MAX_HEADING_CHARS:
                    worded.add(line.size)
    if not weight:
        return {}
    body = weight.most_common(1)[0][0]
    if body <= 0:
        return {}
    sizes = sorted((s for s in worded if s >= body * HEADING_RATIO and (below is None or s < below)), reverse=True)
    return {size: min(base + rank, 6) for rank, size in enumerate(sizes[:FONT_LEVELS], start=1)}


def _place_font_headings(pages: list[_Page], levels: dict[float, int], under_outline: bool) -> None:
    """Make lines set in a heading size headings. ``under_outline``: the levels continue below the
    outline's, so they start only after the first outline heading (a title page's date is no
    subsection)."""
    started = not under_outline
    for page in pages:
        lines = page.lines
        i = 0
        while i < len(lines):
            line = lines[i]
            started = started or bool(line.level) or i in page.inserted
            level = levels.get(line.size, 0)
            if not started or not level or line.level or line.absorbed:
                i += 1
                continue
            run = [line]  # adjacent lines of the same size, close together: one wrapped heading
            while (i + len(run) < len(lines) and (nxt := lines[i + len(run)]).size == line.size
                   and not nxt.level and not nxt.absorbed and i + len(run) not in page.inserted
                   and run[-1].bottom - nxt.top <= line.size):
                run.append(nxt)
            # Pieces set on one baseline (a section number in its own box) read left to right.
            ordered = sorted(run, key=lambda ln: (-round(ln.bottom), ln.left))
            text = " ".join(ln.text for ln in ordered)
            if _has_word(text) and len(text) <= MAX_HEADING_CHARS:
                line.level, line.heading = level, text
                for other in run[1:]:
                    other.absorbed = True
            i += len(run)


# --- rendering ----------------------------------------------------------------------------------------

#: Body lines that would change CommonMark's block structure; see the module docstring.
_BLOCK_START = re.compile(
    r"#{1,6}(?:[ \t]|$)"  # ATX heading
    r"|(?:=+|-+)[ \t]*$"  # setext underline; "---" also opens front matter at the very start
    r"|`{3}|~{3}"  # code fence
    r"|<(?:script|pre|style|textarea)(?:[ \t>]|$)|<!--|<\?|<![A-Za-z]|<!\[CDATA\[",  # HTML blocks past blank lines
    re.IGNORECASE,
)


def _body(text: str) -> str:
    return "    " + text if _BLOCK_START.match(text) else text


def _heading(level: int, text: str) -> str:
    return f"{'#' * level} {text}"


def _render(page: _Page) -> str:
    blocks: list[str] = []
    paragraph: list[str] = []
    box = -1

    def flush() -> None:
        if paragraph:
            blocks.append("\n".join(paragraph))
            paragraph.clear()

    for i, line in enumerate([*page.lines, None]):
        for level, title in page.inserted.get(i, []):
            flush()
            blocks.append(_heading(level, title))
        if line is None or line.absorbed:
            continue
        if line.level:
            flush()
            blocks.append(_heading(line.level, line.heading))
        else:
            if line.box != box:
                flush()
            paragraph.append(_body(line.text))
        box = line.box
    flush()
    # Blank lines around every block keep each derived heading at column 0 between blank lines.
    return "\n\n".join(blocks) + "\n\n\f\n\n" if blocks else "\f\n\n"


def extract_pdf_text(data: bytes, pages: tuple[int, int] | None = None, progress: Progress = None) -> str:
    """The PDF's text as Markdown with headings (see the module docstring). Inspection comes first:
    pikepdf decides encryption (refused), readability, size and the outline; then pdfminer.six
    extracts the text. Refuses ``pdf_encrypted``, ``pdf_unreadable``, ``pdf_too_large`` and
    ``no_text`` (`PdfRefused`); never returns an empty document.

    ``pages`` = (first, end), 0-based and end-exclusive, extracts one range of a large PDF (the pool
    runs two ranges at once). A range without text returns only its pages' form feeds (blank to
    ``str.strip``): the caller, which joins the ranges, decides ``no_text``.

    A file refused for a loop in its structure is extracted from pikepdf's repair (`_with_repair`).

    ``progress`` (the parser child's progress lines) hears ``"pages N"`` once pikepdf has counted
    the pages to extract, ``"document"`` once pdfminer has read the document, then ``"page"`` after
    each page; it never changes the text."""
    return _with_repair(lambda pdf: _extract(pdf, pages, progress), data)


def _extract(data: bytes, pages: tuple[int, int] | None, progress: Progress = None) -> str:
    count, outline, _ = _structure(data)
    first, end = pages if pages is not None else (0, count)
    if pages is not None and not 0 <= first < min(end, count):
        raise ValueError(f"page range {pages} is not within the PDF's {count} pages")
    _tell(progress, f"pages {min(end, count) - first}")
    lines = _layout(data, first, end, progress)
    if not any(_is_text(line.text) for page_lines in lines for line in page_lines):
        if pages is not None:
            return "\f\n\n" * len(lines)
        raise PdfRefused("no_text", "the PDF has no text layer")
    parsed = [_Page(page_lines) for page_lines in lines]
    matched = _place_outline(parsed, first, outline)
    if matched:
        base = max(entry.level for entry in outline)
        _place_font_headings(parsed, _font_levels(parsed, min(matched), base), under_outline=True)
    elif not outline:
        _place_font_headings(parsed, _font_levels(parsed, None, 0), under_outline=False)
    return "".join(_render(page) for page in parsed)
