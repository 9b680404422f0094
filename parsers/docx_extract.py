"""DOCX text extraction: an untrusted Word document's bytes to Markdown through python-docx and a
walker of its WordprocessingML, the code that runs INSIDE the parser child (`knowledge.parsers.child`).
A pure function of the bytes — nothing is fetched, nothing written. Importable and testable in
process, but the service runs it only in a disposable, rlimit-bounded child: the package checks of
`knowledge.parsers.docx_package` (run first, before python-docx reads anything) bound what a hostile
file can make it do, and the child's limits bound the rest.

Refusals (`DocxRefused.reason`; the class and `REASONS` live in `knowledge.parsers.docx_package`
and are re-exported here):

- The package's own, found by `knowledge.parsers.docx_package.check_package` (its docstring says
  each): ``docx_bomb``, ``docx_hostile_xml``, ``docx_encrypted``, ``docx_too_large`` (XML parts too
  large, or too many elements and attributes), ``docx_unreadable`` (not a ZIP, a damaged one, XML
  that is not well formed).
- ``docx_too_large``: above `MAX_INPUT_BYTES` (before the package is checked); a text node above
  libxml2's 10,000,000-byte bound (python-docx's parser).
- ``docx_unreadable``: a package python-docx cannot open, one without a main document part, or an
  OOXML package whose main part is not a Word document (a spreadsheet, a presentation):
  `WORD_MAIN_TYPES` are read (.docx, .docm, .dotx, .dotm).
- ``no_text``: no letter or digit in the whole text (an empty document, only images).

The text is Markdown for the chunker (`knowledge.core.chunking` splits it at ATX headings):

- **Headings.** A paragraph whose style (through its ``basedOn`` chain) has an outline level
  (``w:outlineLvl`` 0-8) or is a built-in ``heading 1``..``heading 9`` becomes ``#``..``######``; a
  ``w:outlineLvl`` on the paragraph itself wins (9: body text). Levels 7-9 become ``######``
  (Markdown has six). A ``Title`` paragraph becomes a level-1 heading, and the document's title when
  the core properties state none. Headings in table cells, headers, footers, notes and text boxes
  stay plain text: the body's headings are the only headings.
- **Lists** from ``numbering.xml``: the paragraph's ``w:numPr`` (or its style's) names a level
  whose ``w:numFmt`` is ``bullet`` (``- ``) or a number format (``1. ``, numbered in document order
  per list, from the level's start); an item nests under the item before when its ``w:ilvl`` is
  deeper, or equal with a deeper indentation (Word's "List Bullet 2" is a one-level list of its own,
  indented further). Consecutive items form one Markdown list.
- **Tables.** Merged cells appear once (``w:gridSpan``: empty cells after; ``w:vMerge``
  continuations: empty). A table whose cells each hold at most one paragraph and no table is a pipe
  table, its first row the header, ``|`` escaped as ``\\|``. Otherwise each row is one line, its
  non-empty cells joined by `` | `` (a cell's paragraphs joined by a space, a nested table
  flattened as ``[a | b; c | d]``).
- **Tracked changes** read as if accepted: ``w:ins`` and ``w:moveTo`` kept, ``w:del`` (its
  ``w:delText``) and ``w:moveFrom`` dropped, a row marked deleted dropped. **Comments** are not read
  at all (their part, ``w:commentReference``); the commented text stays. **Fields**: the result is
  kept, the instruction dropped; the results of page-layout fields (``PAGE``, ``NUMPAGES``,
  ``SECTIONPAGES``, ``PAGEREF``) and generated lists (``TOC``, ``INDEX``) are dropped: page numbers,
  and headings repeated. Hyperlinks, content controls (``w:sdt``), smart tags, custom XML and
  ruby keep their text; text boxes follow the paragraph that anchors them; math keeps its text.
- **Notes.** A footnote or endnote reference becomes ``[^n]`` (one numbering for both, in order of
  first reference), and the notes follow at the end under ``# Notes`` as ``[^n] text`` (not
  ``[^n]: text``, which CommonMark would read as a link definition and hide).
- **Headers and footers**, each distinct text once: headers first, footers after the body, before
  the notes. A first-page header counts only where the section asks for one (``w:titlePg``), an
  even-page one only where the settings do (``w:evenAndOddHeaders``).
- **Code**: consecutive paragraphs in a preformatted style (`_CODE_STYLES`: "HTML Preformatted",
  "Macro Text", "Plain Text", "Code", …, through ``basedOn``) form one fenced code block, each
  line's indentation and the empty lines between kept.
- **Inline code**: a maximal sequence of adjacent runs in a monospace font (the run's own
  ``w:rFonts``, else its character style's, through ``basedOn``: `_monospace`) or in a code
  character style (`_CODE_CHAR_STYLES`, or a name ending in "code char") becomes a code span, one
  per line, its surrounding whitespace outside, its backtick run longer than any inside (CommonMark;
  a space inside each end when the code starts or ends with a backtick). Not in code blocks (already
  fenced) nor in headings.
- Line breaks stay line breaks, tabs stay tabs; each line's surrounding whitespace and empty lines
  inside a paragraph are dropped. A body line that would change the Markdown block structure (an
  ATX heading, a setext underline, a code fence, an HTML block that runs past blank lines, a list
  marker, a table delimiter row) is indented by four spaces, as `knowledge.parsers.pdf_extract`
  does: whitespace only, the text stays verbatim. A heading whose text ends in ``#`` gets ``\\#``
  (CommonMark would drop a closing sequence).
- Cleaning: control characters other than tab and newline are dropped.

`stated_date`: the core properties' ``dcterms:modified``, else ``dcterms:created`` — the date of
the edition whose text this is, as `knowledge.parsers.pdf_extract` prefers ``/ModDate`` and a
Markdown page's ``lastmod`` wins over its ``date`` (`knowledge.core.dates`); a copy saved under a
new name keeps the original's ``created``. A value before 1980-01-02 (zero dates: 1601, 1899,
1900, 1970, 1980) or after 2100 is no date, and so is python-docx's default template's
2013-12-23T23:15Z (a document python-docx wrote without setting them).

`DOCX_TEXT_RULES` names these rules: bump it when a change changes the text of some document.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from knowledge.parsers.docx_package import REASONS as REASONS  # re-exported: the refusals' reasons
from knowledge.parsers.docx_package import DocxRefused as DocxRefused  # re-exported: the parser child catches it
from knowledge.parsers.docx_package import Progress, check_package

if TYPE_CHECKING:
    from docx.opc.package import OpcPackage
    from docx.opc.part import Part

DOCX_TEXT_RULES = "d2"

MAX_INPUT_BYTES = 32 * 1024 * 1024
#: Header or footer references followed (each section has up to six).
MAX_HEADER_FOOTER_REFERENCES = 6000
#: A progress event after this many paragraphs and table rows.
PROGRESS_BLOCKS = 2000
#: A horizontal merge wider than this counts as this wide (a hostile gridSpan of 10^9).
MAX_SPAN = 64

#: The main part's content types of a Word document: .docx, .docm (macros: never run here), .dotx, .dotm.
WORD_MAIN_TYPES = frozenset({
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml",
    "application/vnd.ms-word.document.macroEnabled.main+xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml",
    "application/vnd.ms-word.template.macroEnabledTemplate.main+xml",
})


@dataclass(frozen=True)
class DocxText:
    """The document as Markdown, its title (core properties, else its first Title paragraph; None
    when neither states one) and the date it states of itself (see the module docstring)."""

    text: str
    title: str | None
    stated_date: date | None


def _tell(progress: Progress, event: str) -> None:
    if progress is not None:
        progress(event)


# --- python-docx: the package, its parts ------------------------------------------------------------------

_registered = False


def preload() -> None:
    """Import everything extraction needs (a spare child calls this while it waits for its job), and
    let python-docx load the main part of macro-enabled documents and templates as it loads a .docx."""
    global _registered
    import docx
    from docx.opc.part import PartFactory
    from docx.parts.document import DocumentPart

    if not _registered:
        for content_type in WORD_MAIN_TYPES:
            PartFactory.part_type_for.setdefault(content_type, DocumentPart)
        _registered = True
    del docx


def _open(data: bytes) -> OpcPackage:
    from docx.opc.exceptions import PackageNotFoundError
    from docx.package import Package

    preload()
    try:
        package = Package.open(io.BytesIO(data))
        main = package.main_document_part
    except MemoryError:
        raise
    except PackageNotFoundError:
        raise DocxRefused("docx_unreadable", "not an OOXML package") from None
    except KeyError:
        raise DocxRefused("docx_unreadable", "the package has no main document part") from None
    except Exception as exc:  # lxml's XMLSyntaxError, zipfile's errors, python-docx's own
        text = str(exc)
        if "Text node too long" in text or "huge text node" in text:
            raise DocxRefused("docx_too_large", "a text run above libxml2's 10,000,000-byte bound") from None
        if "Memory allocation failed" in text:
            raise DocxRefused("docx_too_large", "its XML does not fit in the parser's memory") from None
        if "Excessive depth" in text:
            raise DocxRefused("docx_hostile_xml", "elements nested too deep") from None
        raise DocxRefused("docx_unreadable", f"python-docx cannot read it ({type(exc).__name__})") from None
    content_type = main.content_type
    if content_type not in WORD_MAIN_TYPES:
        kind = next((k for k in ("spreadsheet", "presentation") if k in content_type), "not Word")
        raise DocxRefused("docx_unreadable", f"an OOXML package, but its main part is {kind} ({content_type})")
    return package


def _related(part: Part | OpcPackage, reltype: str) -> Part | None:
    for rel in part.rels.values():
        if not rel.is_external and rel.reltype == reltype:
            target: Part = rel.target_part
            return target
    return None


def _element(part: Part | None) -> Any:
    """The root element of an XML part: python-docx's for the parts it knows, else parsed here with
    python-docx's parser (no entities resolved, libxml2's limits; the bytes passed `check_package`)."""
    if part is None:
        return None
    from docx.opc.part import XmlPart
    from docx.oxml.parser import parse_xml

    if isinstance(part, XmlPart):
        return part.element
    return parse_xml(part.blob)


# --- WordprocessingML -------------------------------------------------------------------------------------

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_M = "{http://schemas.openxmlformats.org/officeDocument/2006/math}"
_R_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_VAL = _W + "val"
_ID = _W + "id"

#: Inline containers whose content is the document's text (tracked insertions and moves included).
_INLINE_CONTAINERS = frozenset(_W + t for t in (
    "hyperlink", "ins", "moveTo", "smartTag", "customXml", "bdo", "dir", "fldSimple"))
#: Block containers whose content is the document's text.
_BLOCK_CONTAINERS = frozenset(_W + t for t in ("customXml", "ins", "moveTo"))
#: Fields whose result is dropped: page numbers, and lists generated from the document's own text.
_DROPPED_FIELDS = frozenset({"PAGE", "NUMPAGES", "SECTIONPAGES", "PAGEREF", "TOC", "INDEX"})
_HEADING_NAME = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)
#: Paragraph styles (by name, lower case; Word's built-ins and common custom ones) whose lines are code.
_CODE_STYLES = frozenset({"code", "code block", "source code", "html preformatted", "preformatted text", "macro",
                          "macro text", "plain text"})
#: Character styles (by name, lower case) whose runs are inline code; so is a name ending in "code char".
_CODE_CHAR_STYLES = frozenset({"html code", "code char", "inline code", "verbatim char", "code"})
#: Monospace fonts (lower case); so is a name with the word "Mono" or "Code" (`_monospace`).
_MONOSPACE_FONTS = frozenset({"consolas", "courier new", "courier", "menlo", "monaco", "lucida console",
                              "source code pro", "fira code", "dejavu sans mono", "liberation mono", "cascadia code",
                              "cascadia mono"})
_MONO_WORD = re.compile(r"(?:^|[^a-z])(?:mono|code)(?:space|spaced)?(?:$|[^a-z])")
_MONO_CAMEL = re.compile(r"(?:Mono|Code)(?![a-z])")
#: Around an inline code run's text while a paragraph is walked: characters XML text cannot hold
#: (`_hex` never makes them), replaced by `_code_spans` or dropped with the other controls.
_CODE_OPEN, _CODE_CLOSE = "\x01", "\x02"
_CODE_SEGMENT = re.compile("\x01([^\x01\x02]*)\x02")
_CONTROLS = dict.fromkeys([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F, *range(0x80, 0xA0)])
_CONTROLS[0x0D] = 0x0A


def _on(element: Any) -> bool:
    """A WordprocessingML on/off property: present and not ``false``/``0``/``off``."""
    return element is not None and element.get(_VAL, "true").lower() not in ("false", "0", "off")


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _child_val(element: Any, tag: str) -> str | None:
    if element is None:
        return None
    child = element.find(_W + tag)
    return None if child is None else child.get(_VAL)


def _monospace(font: str | None) -> bool:
    """Whether a font name is a monospace font's (`_MONOSPACE_FONTS`, or a "Mono"/"Code" word in it)."""
    if not font:
        return False
    lower = font.strip().lower()
    return (lower in _MONOSPACE_FONTS or lower.startswith("courier") or _MONO_WORD.search(lower) is not None
            or _MONO_CAMEL.search(font) is not None)


def _run_font(rpr: Any) -> str | None:
    """The font a ``w:rPr`` (a run's or a style's) states for Latin text, if any."""
    fonts = rpr.find(_W + "rFonts") if rpr is not None else None
    if fonts is None:
        return None
    font: str | None = fonts.get(_W + "ascii") or fonts.get(_W + "hAnsi")
    return font


def _choice(alternate: Any) -> Any:
    """The branch of ``mc:AlternateContent`` to read: its first Choice, else its Fallback (reading
    both would repeat a text box, which Word writes in each)."""
    for tag in (_MC + "Choice", _MC + "Fallback"):
        branch = alternate.find(tag)
        if branch is not None:
            return branch
    return None


@dataclass(frozen=True)
class _Style:
    based_on: str | None
    name: str
    outline: int | None
    num_id: str | None
    ilvl: int | None
    indent: int | None


class _Styles:
    """Paragraph styles: heading level, Title, and list numbering, through ``basedOn`` chains."""

    def __init__(self, root: Any) -> None:
        self.styles: dict[str, _Style] = {}
        #: character styles: styleId -> (basedOn, name, font)
        self.characters: dict[str, tuple[str | None, str, str | None]] = {}
        self.default: str | None = None
        for style in root.iterfind(_W + "style") if root is not None else ():
            style_id = style.get(_W + "styleId")
            if style_id is not None and style.get(_W + "type") == "character":
                self.characters[style_id] = (_child_val(style, "basedOn"),
                                             (_child_val(style, "name") or style_id).strip(),
                                             _run_font(style.find(_W + "rPr")))
                continue
            if style_id is None or style.get(_W + "type", "paragraph") not in ("paragraph", "numbering"):
                continue
            ppr = style.find(_W + "pPr")
            numpr = ppr.find(_W + "numPr") if ppr is not None else None
            outline = _child_val(ppr, "outlineLvl")
            self.styles[style_id] = _Style(
                _child_val(style, "basedOn"), (_child_val(style, "name") or style_id).strip(),
                _int(outline, 9) if outline is not None else None,
                _child_val(numpr, "numId"), _int(_child_val(numpr, "ilvl"), 0) if numpr is not None else None,
                _indent(ppr))
            if style.get(_W + "default") in ("1", "true", "on") and style.get(_W + "type") == "paragraph":
                self.default = style_id
        self._levels: dict[str | None, int] = {}
        self._numbering: dict[str | None, tuple[str, int | None] | None] = {}
        self._code: dict[str | None, bool] = {}
        self._inline_code: dict[str, tuple[bool, str | None]] = {}

    def chain(self, style_id: str | None) -> list[tuple[str, _Style | None]]:
        found: list[tuple[str, _Style | None]] = []
        seen: set[str] = set()
        current = style_id if style_id is not None else self.default
        while current is not None and current not in seen and len(found) < 32:
            seen.add(current)
            style = self.styles.get(current)
            found.append((current, style))
            current = style.based_on if style is not None else None
        return found

    def level(self, style_id: str | None) -> int:
        """The heading level (1..9) the style gives, 0 for body text, -1 for a Title."""
        if style_id in self._levels:
            return self._levels[style_id]
        level = 0
        for sid, style in self.chain(style_id):
            name = style.name if style is not None else sid
            if style is not None and style.outline is not None:
                level = style.outline + 1 if 0 <= style.outline < 9 else 0
                break
            if (m := _HEADING_NAME.match(name)) is not None:
                level = int(m.group(1))
                break
            if name.lower() == "title":
                level = -1
                break
        self._levels[style_id] = level
        return level

    def numbering(self, style_id: str | None) -> tuple[str, int | None] | None:
        if style_id in self._numbering:
            return self._numbering[style_id]
        found = next(((s.num_id, s.ilvl) for _, s in self.chain(style_id) if s is not None and s.num_id is not None),
                     None)
        self._numbering[style_id] = found
        return found

    def code(self, style_id: str | None) -> bool:
        """Whether the style is (based on) a preformatted one (`_CODE_STYLES`)."""
        if style_id not in self._code:
            names = ((style.name if style is not None else sid).lower() for sid, style in self.chain(style_id))
            self._code[style_id] = any(name in _CODE_STYLES for name in names)
        return self._code[style_id]

    def inline_code(self, style_id: str) -> tuple[bool, str | None]:
        """(whether a character style is a code one by its name, through a few ``basedOn``; the
        nearest font it states)."""
        if style_id not in self._inline_code:
            named, font = False, None
            current: str | None = style_id
            for _ in range(4):
                if current is None or current not in self.characters:
                    break
                based_on, name, own_font = self.characters[current]
                lower = name.lower()
                named = named or lower in _CODE_CHAR_STYLES or lower.endswith("code char")
                font = font or own_font
                current = based_on
            self._inline_code[style_id] = (named, font)
        return self._inline_code[style_id]

    def indent(self, style_id: str | None) -> int | None:
        for _, style in self.chain(style_id):
            if style is not None and style.indent is not None:
                return style.indent
        return None


def _indent(ppr: Any) -> int | None:
    """The left indentation (twips) a ``w:pPr`` states, if any."""
    ind = ppr.find(_W + "ind") if ppr is not None else None
    if ind is None:
        return None
    value = ind.get(_W + "left", ind.get(_W + "start"))
    return _int(value, 0) if value is not None else None


@dataclass
class _Numbering:
    """``numbering.xml``: which levels are bullets, where numbers start, and the running counts."""

    #: abstractNumId -> ilvl -> (numFmt, start, indentation)
    abstract: dict[str, dict[int, tuple[str, int, int | None]]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # abstractNumId -> numbering style it defers to
    #: numId -> (abstractNumId, ilvl -> overridden (numFmt, start, indentation))
    nums: dict[str, tuple[str, dict[int, tuple[str | None, int | None, int | None]]]] = field(default_factory=dict)
    counts: dict[str, dict[int, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, root: Any) -> _Numbering:
        numbering = cls()
        if root is None:
            return numbering
        for abstract in root.iterfind(_W + "abstractNum"):
            aid = abstract.get(_W + "abstractNumId")
            if aid is None:
                continue
            levels: dict[int, tuple[str, int, int | None]] = {}
            for lvl in abstract.iterfind(_W + "lvl"):
                levels[_int(lvl.get(_W + "ilvl"), 0)] = (
                    _child_val(lvl, "numFmt") or "decimal", _int(_child_val(lvl, "start"), 1),
                    _indent(lvl.find(_W + "pPr")))
            numbering.abstract[aid] = levels
            link = _child_val(abstract, "numStyleLink")
            if link is not None:
                numbering.links[aid] = link
        for num in root.iterfind(_W + "num"):
            nid, aid = num.get(_W + "numId"), _child_val(num, "abstractNumId")
            if nid is None or aid is None:
                continue
            overrides: dict[int, tuple[str | None, int | None, int | None]] = {}
            for override in num.iterfind(_W + "lvlOverride"):
                lvl = override.find(_W + "lvl")
                start = _child_val(override, "startOverride")
                overrides[_int(override.get(_W + "ilvl"), 0)] = (
                    _child_val(lvl, "numFmt"),
                    _int(start, 1) if start is not None else (
                        _int(_child_val(lvl, "start"), 1) if lvl is not None else None),
                    _indent(lvl.find(_W + "pPr")) if lvl is not None else None)
            numbering.nums[nid] = (aid, overrides)
        return numbering

    def format(self, num_id: str, ilvl: int, styles: _Styles) -> tuple[str, int, int | None] | None:
        """(numFmt, start, indentation) of the level, following a numbering style's link; None: no
        such list."""
        if num_id not in self.nums:
            return None
        aid, overrides = self.nums[num_id]
        for _ in range(4):
            if aid not in self.links or self.abstract.get(aid):
                break
            linked = styles.numbering(self.links[aid])
            if linked is None or linked[0] not in self.nums:
                break
            aid = self.nums[linked[0]][0]
        fmt, start, indent = self.abstract.get(aid, {}).get(ilvl, ("decimal", 1, None))
        over_fmt, over_start, over_indent = overrides.get(ilvl, (None, None, None))
        return (over_fmt or fmt, over_start if over_start is not None else start,
                over_indent if over_indent is not None else indent)

    def next(self, num_id: str, ilvl: int, start: int) -> int:
        counts = self.counts.setdefault(num_id, {})
        for deeper in [k for k in counts if k > ilvl]:
            del counts[deeper]
        counts[ilvl] = counts[ilvl] + 1 if ilvl in counts else start
        return counts[ilvl]


@dataclass
class _Block:
    """One Markdown block: ``heading`` (level), ``para``, ``item`` (depth, number: 0 for a bullet),
    ``table`` (a pipe table) or ``rows`` (a table as one line per row). ``text`` may hold line
    breaks (not a heading's); a table's ``flat`` is its one-line form (`_Walker._table`)."""

    kind: str
    text: str
    level: int = 0
    depth: tuple[int, int] = (0, 0)  # an item's (ilvl, indentation): a deeper item nests under the one before
    number: int = 0
    flat: str = ""


@dataclass
class _Field:
    code: list[str] = field(default_factory=list)
    instruction: bool = True  # before its ``separate``
    dropped: bool = False


@dataclass
class _Cell:
    texts: list[str]  # its paragraphs (and flattened nested tables), each one line
    span: int
    merged: bool  # a vMerge continuation: its content is the cell above's
    nested: bool  # holds a table


def _clean(text: str) -> str:
    """Drop control characters, strip each line, drop empty lines."""
    lines = (line.strip() for line in text.translate(_CONTROLS).split("\n"))
    return "\n".join(line for line in lines if line)


def _clean_code(text: str) -> str:
    """A code paragraph: control characters dropped, each line's indentation kept."""
    return "\n".join(line.rstrip() for line in text.translate(_CONTROLS).split("\n"))


class _Walker:
    """Walks WordprocessingML stories (the body, a cell, a header, a note, a text box) into blocks."""

    def __init__(self, styles: _Styles, numbering: _Numbering, notes: dict[tuple[str, str], Any],
                 progress: Progress) -> None:
        self.styles = styles
        self.numbering = numbering
        self.notes = notes
        self.note_numbers: dict[tuple[str, str], int] = {}
        self.progress = progress
        self.count = 0
        self.fields: list[_Field] = []
        self.title: str | None = None
        self.in_code = False  # inside an inline code run (`_code_run`)

    def _tick(self) -> None:
        self.count += 1
        if self.count % PROGRESS_BLOCKS == 0:
            _tell(self.progress, f"blocks {self.count}")

    # -- block level --

    def story(self, container: Any, body: bool) -> list[_Block]:
        self.fields = []  # a field never spans stories; a broken one must not hide the next story
        blocks: list[_Block] = []
        self._blocks(container, body, blocks)
        return blocks

    def _blocks(self, container: Any, body: bool, out: list[_Block]) -> None:
        for child in container:
            tag = child.tag
            if tag == _W + "p":
                self._paragraph(child, body, out)
            elif tag == _W + "tbl":
                table = self._table(child)
                if table is not None:
                    out.append(table)
            elif tag == _W + "sdt":
                content = child.find(_W + "sdtContent")
                if content is not None:
                    self._blocks(content, body, out)
            elif tag in _BLOCK_CONTAINERS:
                self._blocks(child, body, out)
            elif tag == _MC + "AlternateContent":
                branch = _choice(child)
                if branch is not None:
                    self._blocks(branch, body, out)

    def _paragraph(self, p: Any, body: bool, out: list[_Block]) -> None:
        self._tick()
        parts: list[str] = []
        boxes: list[Any] = []
        self._inline(p, parts, boxes)
        ppr = p.find(_W + "pPr")
        style_id = _child_val(ppr, "pStyle")
        if self.styles.code(style_id):
            out.append(_Block("code", _clean_code("".join(parts))))
            for box in boxes:
                self._blocks(box, False, out)
            return
        raw = "".join(parts)
        text = _clean(raw)  # the code markers dropped with the other control characters
        if text:
            level = self.styles.level(style_id)
            outline = _child_val(ppr, "outlineLvl")
            if outline is not None:
                value = _int(outline, 9)
                level = value + 1 if 0 <= value < 9 else (level if level == -1 else 0)
            numbered = self._list_level(ppr, style_id) if level == 0 else None
            if level == 0 or not body:
                text = _clean(_code_spans(raw))
            if level != 0 and body:
                heading = " ".join(text.split())
                if level == -1 and self.title is None:
                    self.title = heading
                out.append(_Block("heading", heading, level=min(max(level, 1), 6)))
            elif numbered is not None:
                out.append(_Block("item", text, depth=numbered[0], number=numbered[1]))
            else:
                out.append(_Block("para", text))
        for box in boxes:
            self._blocks(box, False, out)

    def _list_level(self, ppr: Any, style_id: str | None) -> tuple[tuple[int, int], int] | None:
        """((ilvl, indentation), number or 0 for a bullet) of a list paragraph, None for any other.
        The indentation is the numbering level's, else the style's (not the paragraph's own, which
        may nudge one item): Word's "List Bullet 2" is a list of its own at ``ilvl`` 0, nested
        only by its indentation."""
        numpr = ppr.find(_W + "numPr") if ppr is not None else None
        num_id = _child_val(numpr, "numId")
        ilvl_value = _child_val(numpr, "ilvl")
        ilvl: int | None = _int(ilvl_value, 0) if ilvl_value is not None else None
        if num_id is None:
            from_style = self.styles.numbering(style_id)
            if from_style is None:
                return None
            num_id = from_style[0]
            ilvl = ilvl if ilvl is not None else from_style[1]
        if num_id == "0":
            return None
        level = min(max(ilvl or 0, 0), 8)
        found = self.numbering.format(num_id, level, self.styles)
        if found is None or found[0] == "none":
            return None
        fmt, start, indent = found
        if indent is None:
            indent = self.styles.indent(style_id)
        number = self.numbering.next(num_id, level, start)
        return (level, indent if indent is not None else 720 * level), 0 if fmt == "bullet" else max(number, 0)

    # -- tables --

    def _cell(self, tc: Any) -> _Cell:
        tcpr = tc.find(_W + "tcPr")
        span = min(max(_int(_child_val(tcpr, "gridSpan"), 1), 1), MAX_SPAN)
        vmerge = tcpr.find(_W + "vMerge") if tcpr is not None else None
        if vmerge is not None and vmerge.get(_VAL, "continue") == "continue":
            return _Cell([], span, merged=True, nested=False)
        blocks: list[_Block] = []
        self._blocks(tc, False, blocks)
        texts = [block.flat or " ".join(block.text.split()) for block in blocks]
        nested = any(block.flat for block in blocks)
        return _Cell([t for t in texts if t], span, merged=False, nested=nested)

    def _table(self, table: Any) -> _Block | None:
        """A pipe table, or one line per row (module docstring); None for a table without text."""
        rows: list[list[_Cell]] = []
        for tr in _wrapped_children(table, "tr"):
            self._tick()
            trpr = tr.find(_W + "trPr")
            if trpr is not None and trpr.find(_W + "del") is not None:
                continue
            before = min(max(_int(_child_val(trpr, "gridBefore"), 0), 0), MAX_SPAN)
            cells = [_Cell([], 1, False, False) for _ in range(before)]
            cells.extend(self._cell(tc) for tc in _wrapped_children(tr, "tc"))
            rows.append(cells)
        lines = [" | ".join(" ".join(cell.texts) for cell in row if cell.texts) for row in rows]
        lines = [line for line in lines if line]
        if not lines:
            return None
        flat = "[" + "; ".join(lines) + "]"
        if all(len(cell.texts) <= 1 and not cell.nested for row in rows for cell in row):
            return _Block("table", _pipe_table(rows), flat=flat)
        return _Block("rows", "\n".join(lines), flat=flat)

    # -- inline --

    def _hidden(self) -> bool:
        return bool(self.fields) and any(f.instruction or f.dropped for f in self.fields)

    def _inline(self, element: Any, out: list[str], boxes: list[Any]) -> None:
        for child in element:
            tag = child.tag
            if tag == _W + "r":
                if not self.in_code and self._code_run(child):
                    self.in_code = True
                    out.append(_CODE_OPEN)
                    try:
                        self._run(child, out, boxes)
                    finally:
                        self.in_code = False
                    out.append(_CODE_CLOSE)
                else:
                    self._run(child, out, boxes)
            elif tag in _INLINE_CONTAINERS:
                if tag == _W + "fldSimple" and _field_dropped(child.get(_W + "instr", "")):
                    continue
                self._inline(child, out, boxes)
            elif tag == _W + "sdt":
                content = child.find(_W + "sdtContent")
                if content is not None:
                    self._inline(content, out, boxes)
            elif tag == _MC + "AlternateContent":
                branch = _choice(child)
                if branch is not None:
                    self._inline(branch, out, boxes)
            elif tag in (_M + "oMath", _M + "oMathPara") and not self._hidden():
                out.append(" ".join(t.text or "" for t in child.iter(_M + "t")))
            # w:del, w:moveFrom, comment ranges and references, bookmarks, w:pPr: not text

    def _run(self, run: Any, out: list[str], boxes: list[Any]) -> None:
        for child in run:
            tag = child.tag
            if tag == _W + "fldChar":
                kind = child.get(_W + "fldCharType")
                if kind == "begin":
                    self.fields.append(_Field())
                elif kind == "separate" and self.fields:
                    current = self.fields[-1]
                    current.instruction = False
                    current.dropped = _field_dropped("".join(current.code))
                elif kind == "end" and self.fields:
                    self.fields.pop()
            elif tag == _W + "instrText":
                if self.fields and self.fields[-1].instruction:
                    self.fields[-1].code.append(child.text or "")
            elif self._hidden():
                continue
            elif tag == _W + "t":
                out.append(child.text or "")
            elif tag in (_W + "tab", _W + "ptab"):
                out.append("\t")
            elif tag in (_W + "br", _W + "cr"):
                out.append("\n")
            elif tag == _W + "noBreakHyphen":
                out.append("-")
            elif tag == _W + "sym":
                code = _hex(child.get(_W + "char"))
                if code is not None:
                    out.append(chr(code))
            elif tag in (_W + "footnoteReference", _W + "endnoteReference"):
                key = ("footnote" if tag == _W + "footnoteReference" else "endnote", child.get(_ID, ""))
                if key in self.notes:
                    number = self.note_numbers.setdefault(key, len(self.note_numbers) + 1)
                    mark = f"[^{number}]"
                    out.append(_CODE_CLOSE + mark + _CODE_OPEN if self.in_code else mark)
            elif tag in (_W + "drawing", _W + "pict", _W + "object"):
                boxes.extend(_text_boxes(child))
            elif tag == _MC + "AlternateContent":
                branch = _choice(child)
                if branch is not None:
                    self._run(branch, out, boxes)
            elif tag == _W + "ruby":
                base = child.find(_W + "rubyBase")
                if base is not None:
                    self._inline(base, out, boxes)
            # w:delText, w:delInstrText, w:commentReference, w:footnoteRef, w:softHyphen, w:rPr: not text


    def _code_run(self, run: Any) -> bool:
        """Whether a run is inline code: a code character style, or a monospace font (its own, else its
        character style's)."""
        rpr = run.find(_W + "rPr")
        if rpr is None:
            return False
        style_id = _child_val(rpr, "rStyle")
        named, font = self.styles.inline_code(style_id) if style_id is not None else (False, None)
        return named or _monospace(_run_font(rpr) or font)


def _code_spans(text: str) -> str:
    """A paragraph's text with its inline code (between `_CODE_OPEN` and `_CODE_CLOSE`, adjacent
    runs merged) as code spans, one per line."""
    text = text.replace(_CODE_CLOSE + _CODE_OPEN, "")
    return _CODE_SEGMENT.sub(lambda m: "\n".join(map(_code_span, m.group(1).translate(_CONTROLS).split("\n"))), text)


def _code_span(text: str) -> str:
    """One line of inline code as a CommonMark code span, its surrounding whitespace kept outside."""
    code = text.strip()
    if not code:
        return text
    lead, trail = text[:len(text) - len(text.lstrip())], text[len(text.rstrip()):]
    fence = "`" * (max((len(run) for run in re.findall("`+", code)), default=0) + 1)
    pad = " " if code.startswith("`") or code.endswith("`") else ""
    return f"{lead}{fence}{pad}{code}{pad}{fence}{trail}"


def _hex(value: str | None) -> int | None:
    try:
        code = int(value, 16) if value is not None else None
    except ValueError:
        return None
    if code is None or 0xE000 <= code <= 0xF8FF or code in _CONTROLS:  # a symbol font's private glyph: no text
        return None
    return code if 0x20 <= code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else None


def _field_dropped(code: str) -> bool:
    words = code.split()
    return bool(words) and words[0].upper() in _DROPPED_FIELDS


def _text_boxes(element: Any) -> list[Any]:
    """The outermost ``w:txbxContent`` under a drawing, one branch of each ``mc:AlternateContent``."""
    found: list[Any] = []
    pending = [element]
    while pending:
        node = pending.pop()
        for child in reversed(node):
            tag = child.tag
            if tag == _W + "txbxContent":
                found.append(child)
            elif tag == _MC + "AlternateContent":
                branch = _choice(child)
                if branch is not None:
                    pending.append(branch)
            elif isinstance(tag, str):
                pending.append(child)
    return found


def _pipe_table(rows: list[list[_Cell]]) -> str:
    width = max(sum(cell.span for cell in row) for row in rows)
    lines = []
    for index, row in enumerate(rows):
        cells: list[str] = []
        for cell in row:
            text = " ".join(" ".join(cell.texts).split()).replace("|", "\\|")
            cells.append(text)
            cells.extend([""] * (cell.span - 1))
        cells.extend([""] * (width - len(cells)))
        lines.append("| " + " | ".join(cells) + " |")
        if index == 0:
            lines.append("|" + " --- |" * width)
    return "\n".join(lines)


# --- rendering --------------------------------------------------------------------------------------------

#: Lines that would change CommonMark's block structure; see the module docstring.
_BLOCK_START = re.compile(
    r"#{1,6}(?:[ \t]|$)"  # ATX heading
    r"|(?:=+|-+)[ \t]*$"  # setext underline; "---" also opens front matter at the very start
    r"|`{3}|~{3}"  # code fence
    r"|<(?:script|pre|style|textarea)(?:[ \t>]|$)|<!--|<\?|<![A-Za-z]|<!\[CDATA\["  # HTML blocks past blank lines
    r"|[-+*](?:[ \t]|$)|[0-9]{1,9}[.)](?:[ \t]|$)"  # list items
    r"|\|?[ \t]*:?-+:?[ \t]*\|[ \t:|-]*$",  # a table's delimiter row
    re.IGNORECASE,
)
_CLOSING_HASHES = re.compile(r"(^|[ \t])(#+)$")


def _body(line: str) -> str:
    return "    " + line if _BLOCK_START.match(line) else line


def _heading(level: int, text: str) -> str:
    return "#" * level + " " + _CLOSING_HASHES.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


def _render(blocks: list[_Block]) -> str:
    """Blocks to Markdown: a blank line between blocks, consecutive list items one list."""
    parts: list[str] = []
    items: list[str] = []
    open_items: list[tuple[tuple[int, int], int]] = []  # (depth, content column) of the items the next may nest in
    code: list[str] = []
    for block in [*blocks, _Block("end", "")]:
        if block.kind == "code":
            code.append(block.text)
            continue
        if code:
            fenced = _fenced("\n".join(code))
            if fenced:
                if items:
                    parts.append("\n".join(items))
                    items, open_items = [], []
                parts.append(fenced)
            code = []
        if block.kind == "end":
            break
        if block.kind == "item":
            while open_items and open_items[-1][0] >= block.depth:
                open_items.pop()
            indent = open_items[-1][1] if open_items else 0
            marker = f"{block.number}. " if block.number else "- "
            column = indent + len(marker)
            first, *rest = block.text.split("\n")
            lines = [" " * indent + marker + _body(first)]
            lines.extend(" " * column + _body(line) for line in rest)
            items.append("\n".join(lines))
            open_items.append((block.depth, column))
            continue
        if items:
            parts.append("\n".join(items))
            items, open_items = [], []
        if block.kind == "heading":
            parts.append(_heading(block.level, block.text))
        elif block.kind == "table":
            parts.append(block.text)
        else:
            parts.append("\n".join(_body(line) for line in block.text.split("\n")))
    if items:
        parts.append("\n".join(items))
    return "\n\n".join(parts)


def _fenced(code: str) -> str:
    """Code lines as a fenced block (a fence longer than any backtick run that starts a line in it);
    empty when there is no text."""
    code = code.strip("\n")
    if not code.strip():
        return ""
    longest = max((len(m.group(0)) for m in re.finditer(r"^[ \t]*(`{3,})", code, re.MULTILINE)), default=2)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{code}\n{fence}"


def _plain_lines(blocks: list[_Block]) -> list[str]:
    """A note's blocks as lines of text (a note is one paragraph of Markdown)."""
    lines: list[str] = []
    for block in blocks:
        text = block.flat if block.kind == "table" else block.text
        lines.extend(line for line in text.split("\n") if line)
    return lines


# --- the document -----------------------------------------------------------------------------------------

_EARLIEST = date(1980, 1, 2)
_LATEST = date(2100, 12, 31)
#: python-docx's default template states these for created and modified (a document it wrote).
_TEMPLATE_DATES = frozenset({datetime(2013, 12, 23, 23, 15, tzinfo=UTC)})


def _plausible(value: object) -> date | None:
    if not isinstance(value, datetime) or value.replace(tzinfo=value.tzinfo or UTC) in _TEMPLATE_DATES:
        return None
    day = value.date()
    return day if _EARLIEST <= day <= _LATEST else None


def _core(package: OpcPackage) -> tuple[str | None, date | None]:
    """(title, stated date) from the core properties part, if the package has one (python-docx would
    make a default one, titled "Word Document", when asked for absent properties)."""
    from docx.opc.constants import RELATIONSHIP_TYPE as RT
    from docx.opc.parts.coreprops import CorePropertiesPart

    part = _related(package, RT.CORE_PROPERTIES)
    if not isinstance(part, CorePropertiesPart):
        return None, None
    try:
        props = part.core_properties
        title = " ".join((props.title or "").translate(_CONTROLS).split()) or None
        return title, _plausible(props.modified) or _plausible(props.created)
    except MemoryError:
        raise
    except Exception:  # damaged properties: no title, no date; the text is read as ever
        return None, None


def _notes(part: Part) -> dict[tuple[str, str], Any]:
    from docx.opc.constants import RELATIONSHIP_TYPE as RT

    notes: dict[tuple[str, str], Any] = {}
    for kind, reltype in (("footnote", RT.FOOTNOTES), ("endnote", RT.ENDNOTES)):
        root = _element(_related(part, reltype))
        for note in root.iterfind(_W + kind) if root is not None else ():
            if note.get(_W + "type", "normal") in ("normal", ""):
                notes[(kind, note.get(_ID, ""))] = note
    return notes


def _headers_footers(walker: _Walker, part: Part, body: Any) -> tuple[list[str], list[str]]:
    """The distinct texts of the headers and of the footers the sections show, in section order."""
    from docx.opc.constants import RELATIONSHIP_TYPE as RT

    settings = _element(_related(part, RT.SETTINGS))
    even = settings is not None and _on(settings.find(_W + "evenAndOddHeaders"))
    found: dict[str, list[str]] = {"header": [], "footer": []}
    seen: set[tuple[str, str]] = set()
    followed = 0
    order = {"first": 0, "default": 1, "even": 2}
    for sectpr in body.iter(_W + "sectPr"):
        if sectpr.getparent() is not None and sectpr.getparent().tag == _W + "sectPrChange":
            continue  # a tracked change's former section properties
        title_page = _on(sectpr.find(_W + "titlePg"))
        refs = [r for r in sectpr if r.tag in (_W + "headerReference", _W + "footerReference")]
        refs.sort(key=lambda r: order.get(r.get(_W + "type", "default"), 1))
        for ref in refs:
            kind = ref.get(_W + "type", "default")
            if (kind == "first" and not title_page) or (kind == "even" and not even):
                continue
            followed += 1
            rid = ref.get(_R_ID)
            if followed > MAX_HEADER_FOOTER_REFERENCES or rid is None or rid not in part.rels:
                continue
            rel = part.rels[rid]
            if rel.is_external:
                continue
            which = "header" if ref.tag == _W + "headerReference" else "footer"
            if rel.reltype not in (RT.HEADER, RT.FOOTER) or (which, rel.target_ref) in seen:
                continue
            seen.add((which, rel.target_ref))
            root = _element(rel.target_part)
            text = _render(walker.story(root, body=False)) if root is not None else ""
            if text and text not in found[which]:
                found[which].append(text)
    return found["header"], found["footer"]


def extract_docx(data: bytes, progress: Progress = None) -> DocxText:
    """The Word document's text as Markdown, with its title and stated date (module docstring).
    Refuses with `DocxRefused`; never returns a text without a letter or digit.

    ``progress`` hears ``"zip"`` once the package passed its checks (and ``"inflated N MiB"`` while
    they run), ``"parsed"`` once python-docx has read it, and ``"blocks N"`` every
    `PROGRESS_BLOCKS` paragraphs and table rows; it never changes the text."""
    if len(data) > MAX_INPUT_BYTES:
        raise DocxRefused("docx_too_large", f"{len(data)} bytes is above the {MAX_INPUT_BYTES}-byte bound")
    check_package(data, progress)
    _tell(progress, "zip")
    package = _open(data)
    _tell(progress, "parsed")
    part = package.main_document_part
    try:
        return _extract(package, part, progress)
    except (DocxRefused, MemoryError, RecursionError):
        raise
    except Exception as exc:  # a part python-docx loaded but that is not what its type says
        raise DocxRefused("docx_unreadable", f"cannot read the document ({type(exc).__name__})") from None


def _extract(package: OpcPackage, part: Part, progress: Progress) -> DocxText:
    from docx.opc.constants import RELATIONSHIP_TYPE as RT

    document = _element(part)
    body = document.find(_W + "body") if document is not None else None
    if body is None:
        raise DocxRefused("no_text", "the document has no body")
    styles = _Styles(_element(_related(part, RT.STYLES)))
    numbering = _Numbering.of(_element(_related(part, RT.NUMBERING)))
    walker = _Walker(styles, numbering, _notes(part), progress)
    text_body = _render(walker.story(body, body=True))
    title_paragraph = walker.title
    headers, footers = _headers_footers(walker, part, body)
    notes: list[str] = []
    done = 0
    order = list(walker.note_numbers.items())
    while done < len(order):  # a note may refer to another: those are numbered as they are met
        key, number = order[done]
        lines = _plain_lines(walker.story(walker.notes[key], body=False))
        if lines:
            notes.append("\n".join([f"[^{number}] {lines[0]}", *(_body(line) for line in lines[1:])]))
        done += 1
        if len(walker.note_numbers) > len(order):
            order = list(walker.note_numbers.items())
    sections = [*headers, text_body, *footers]
    if notes:
        sections.append("# Notes\n\n" + "\n\n".join(notes))
    text = "\n\n".join(s for s in sections if s)
    if not any(ch.isalnum() for ch in text):
        raise DocxRefused("no_text", "the document has no text")
    title, stated = _core(package)
    return DocxText(text + "\n", title or title_paragraph, stated)


def _wrapped_children(element: Any, tag: str) -> list[Any]:
    """``element``'s children of ``tag`` (a table's rows, a row's cells), in order, including those
    inside content controls (``w:sdt``'s ``w:sdtContent``) and custom XML (``w:customXml``) wrappers,
    at any depth."""
    found: list[Any] = []
    pending = list(reversed(element))
    while pending:
        child = pending.pop()
        if child is None:
            continue
        if child.tag == _W + tag:
            found.append(child)
        elif child.tag in (_W + "sdt", _W + "customXml"):
            content = child.find(_W + "sdtContent") if child.tag == _W + "sdt" else child
            if content is not None:
                pending.extend(reversed(content))
    return found
