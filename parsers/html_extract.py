"""HTML to Markdown: the main text of an untrusted page, for the chunker. Runs INSIDE the parser child.

A pure function of the bytes (`extract_html`): no I/O, no network, nothing fetched, no clock. The
service only ever runs it in a disposable, rlimit-bounded child (512 MiB address space, a CPU limit),
so only the child's limits and the cheap checks here protect anything.

Stages (each reported through ``progress``: ``decoded``, ``parsed``, ``extracted``):

1. **Decoding** (`decode_html`): a BOM (UTF-8/16/32) decides, else UTF-16 told by its NUL pattern;
   bytes mostly control characters (more than `MAX_BAD_CHAR_SHARE` of a sample) are binary, not a
   page: ``html_unreadable`` (compressed bytes are never inflated). Else bytes that are valid UTF-8
   are UTF-8; else the charset the page declares (``<meta charset>``, ``http-equiv`` content-type,
   an XML declaration) in its first `PRESCAN_BYTES`, with WHATWG's aliases (ISO-8859-1 and ASCII
   mean windows-1252); else charset-normalizer's guess on a bounded sample. Control characters (NUL
   among them: PostgreSQL text cannot hold it) are dropped; a text with more than
   `MAX_BAD_CHAR_SHARE` of controls and U+FFFD is refused likewise.
2. **Parsing** with lxml (libxml2's HTML parser; comments and processing instructions dropped). A
   page with more than `MAX_MARKUP` opening tags or `MAX_PAGE_ATTRIBUTES` attributes, or a tag with
   more than `MAX_ATTRIBUTES`, is refused before parsing (`check_markup`, one linear pass), and one
   libxml2 stops on for a resource limit (nesting deeper than 256, a text node over 10,000,000
   bytes) after it: ``html_too_complex``. Honest pages are far from all of these.
3. **Main content**: trafilatura (`TRAFILATURA_OPTIONS`: precision mode, tables, no comments) finds
   the main text and hands it over as its XML tree (``head``/``p``/``list``/``code``/``table``…),
   rendered here (`render_blocks`), not by trafilatura's Markdown writer, which breaks code blocks in
   list items and glues a fence to the text before it.
4. **The main container** (`main_container`, `choose_blocks`): the element the page marks as its
   main content (exactly one ``<main>``/``role=main``, else exactly one ``<article>``, else the body)
   is rendered too, boilerplate removed: ``nav``, ``aside``, ``footer``, forms and dialogs, hidden
   elements, landmark roles other than main. trafilatura drops headings, link lists and short
   sections of documentation pages, and keeps a cookie banner or a pager on short ones. When
   trafilatura's text holds at least `MIN_CONTAINER_COVERAGE` of the container's prose (its
   paragraphs and quotes, each distinct one once), the two agree on the text and the container's
   rendering is used: its structure (headings, lists, tables, code) is the page's. Otherwise the
   container holds text trafilatura judged boilerplate (teasers, captions, bylines: the news page
   case) and trafilatura's text is used.
5. **Large pages**: more than `MAX_TRAFILATURA_ELEMENTS` elements, `MAX_TRAFILATURA_ATTRIBUTES`
   attributes or `MAX_TRAFILATURA_TEXT` characters of text skip trafilatura, whose memory grows by
   2-3 KiB an element and ~25 bytes a character and whose time (~0.1 ms an element) is one silent
   stage: the main container alone is rendered, in place.

The Markdown (`render_markdown`): ``h1``-``h6`` become ATX headings, ``<pre>`` fenced code blocks with
a fence longer than any backtick run inside (verbatim), lists ``- ``/``1. `` items (nested by
indentation), tables GFM pipe tables (first row as the header row; a layout table, one with block
content in a cell or one column, renders its cells as blocks), block quotes ``> ``, other blocks
paragraphs; blocks are separated by blank lines. Inline markup is dropped but for code spans. A body
line that would start a Markdown block (a heading, a fence, a setext underline or thematic break, a
list item, a quote, a table row, an HTML block) gets one backslash before its marker, so the
headings rendered here are the only headings the chunker sees.

Title: ``<title>``, else ``og:title``/``twitter:title``, else the first ``<h1>``. Stated date
(`stated_date`): the publication date the page states in its markup (meta tags, JSON-LD, microdata,
a ``<time datetime>`` outside navigation and footers), else in a short element it marks as a date or
byline (class/id ``date``, ``publish``, ``byline``), else its stated modification date; never from
the body's free text, the URL or the clock: a page stating none gives None.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
from collections.abc import Callable, Iterator
from copy import deepcopy
from dataclasses import dataclass
from datetime import date
from typing import Any

from knowledge.parsers.refusal import Refused

HTML_TEXT_RULES = "h1"  # bump when the rules change the text of a page

MAX_INPUT_BYTES = 32 * 1024 * 1024
#: Opening tags (``<`` not followed by ``/``, counted before parsing). An honest page has a few
#: thousand (a long reference page ~100,000); libxml2 needs ~420 bytes an element, so 500,000 take
#: ~210 MiB parsed. Beyond that the page is refused unparsed.
MAX_MARKUP = 500_000
#: Attributes of one tag. Honest pages stay under ~70 (the benchmark's most: 64); libxml2's time grows
#: with the square of an element's attributes (100,000 on one tag: 10 s), trafilatura's too (84 s).
MAX_ATTRIBUTES = 512
#: Attributes of the page: libxml2 takes ~100-150 bytes each (the benchmark's most: 3,877 on a page).
MAX_PAGE_ATTRIBUTES = 1_000_000
#: trafilatura takes ~0.1 ms and 2-3 KiB an element (tree copies, candidate scoring) in one call that
#: reports no progress, and the pool kills a child silent for 10 s: 30,000 elements (the benchmark's
#: largest page has 1,600) are ~3 s CPU and ~150 MiB. Larger pages skip it (stage 5).
MAX_TRAFILATURA_ELEMENTS = 30_000
#: trafilatura also needs ~25 bytes and ~0.5 µs a character of text, and copies every attribute several
#: times: pages with more text (the benchmark's most: 1.3 M characters, scripts included) or attributes
#: skip it likewise.
MAX_TRAFILATURA_TEXT = 4 * 1024 * 1024
MAX_TRAFILATURA_ATTRIBUTES = 200_000
#: Bytes read for a declared charset (the WHATWG prescan reads 1,024; pages put it later too).
PRESCAN_BYTES = 8192
#: Bytes charset-normalizer reads to guess an undeclared encoding (head and tail).
GUESS_SAMPLE_BYTES = 64 * 1024
#: How much worse (charset-normalizer's "chaos", 0-1) windows-1252 may read an undeclared page than the
#: best guess and still be chosen: the Latin code pages read Western text about equally well.
CP1252_CHAOS_MARGIN = 0.05
#: Control characters (or U+FFFD) above this share: binary, not a page. Binary has ~11% control bytes,
#: an honest page next to none (a stray NUL or two).
MAX_BAD_CHAR_SHARE = 0.05
#: trafilatura's text must hold this share of the container's prose words for the container to be used
#: (chosen on the benchmark's even half: the lowest threshold costing less than 0.001 F1 there).
MIN_CONTAINER_COVERAGE = 0.98
#: Longest byline (characters) read for a date: a longer element is body text, not a byline.
MAX_BYLINE_CHARS = 200
#: Longest title kept (characters).
MAX_TITLE_CHARS = 1000

#: trafilatura's options: precision mode (chosen on the benchmark's even half), tables in, formatting
#: (code spans), comments and links out; no deduplication across pages (a pure function of one page).
TRAFILATURA_OPTIONS: dict[str, Any] = {
    "include_comments": False,
    "include_tables": True,
    "include_formatting": True,
    "include_links": False,
    "include_images": False,
    "favor_precision": True,
    "favor_recall": False,
    "deduplicate": False,
    "with_metadata": False,
}

REASONS = frozenset({"html_too_large", "html_unreadable", "html_too_complex", "no_text"})

Progress = Callable[[str], None] | None


class HtmlRefused(Refused):
    """A page that gives no text: ``reason`` is one of `REASONS`."""

    REASONS = REASONS


@dataclass(frozen=True)
class HtmlText:
    text: str  # Markdown: the main content
    title: str | None
    stated_date: date | None


def preload() -> None:
    """Import the heavy libraries (lxml, trafilatura and its fallbacks, charset-normalizer) ahead of a job."""
    import charset_normalizer  # noqa: F401
    import lxml.html  # type: ignore[import-untyped, unused-ignore]  # noqa: F401
    import trafilatura.external  # noqa: F401  (imports trafilatura, its readability and justext)

    _quiet_loggers()


def _quiet_loggers() -> None:
    # trafilatura logs "discarding data" and the like as warnings; a library's NullHandler keeps them
    # off stderr unless the host configures logging.
    for name in ("trafilatura", "htmldate", "justext", "courlan", "charset_normalizer"):
        logging.getLogger(name).addHandler(logging.NullHandler())


# --- decoding -----------------------------------------------------------------------------------------

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_META_CHARSET = re.compile(
    rb"""<meta\b[^>]*?\bcharset\s*=\s*["']?\s*([A-Za-z0-9_.:+-]{1,40})"""
    rb"""|<\?xml\b[^>]*?\bencoding\s*=\s*["']([A-Za-z0-9_.:+-]{1,40})""",
    re.IGNORECASE,
)
#: WHATWG's label mapping where it differs from Python's codec of the same name.
_ALIASES = {
    "iso-8859-1": "cp1252", "iso8859-1": "cp1252", "latin1": "cp1252", "latin-1": "cp1252", "l1": "cp1252",
    "ascii": "cp1252", "us-ascii": "cp1252", "iso-8859-9": "cp1254", "latin5": "cp1254",
    "iso-8859-11": "cp874", "tis-620": "cp874", "x-user-defined": "cp1252",
    "gb2312": "gb18030", "gbk": "gb18030", "x-gbk": "gb18030", "shift_jis": "cp932", "shift-jis": "cp932",
    "sjis": "cp932", "windows-31j": "cp932", "euc-kr": "cp949", "ks_c_5601-1987": "cp949", "big5": "big5hkscs",
    # a page whose ASCII bytes carry the declaration cannot be UTF-16 (WHATWG: such a label means UTF-8)
    "utf-16": "utf-8", "utf-16le": "utf-8", "utf-16be": "utf-8", "utf-32": "utf-8",
}
#: Characters dropped from every text: C0 controls but tab, newline, form feed and carriage return;
#: DEL and the C1 controls; noncharacters U+FFFE/U+FFFF (libxml2 rejects them).
_CONTROLS = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\ufffe\uffff]")
#: Bytes no text encoding but UTF-16/32 uses (ESC stays: ISO-2022 uses it).
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0E, 0x1B), *range(0x1C, 0x20)])


def _codec(label: bytes | str) -> str | None:
    name = (label.decode("ascii", "replace") if isinstance(label, bytes) else label).strip().lower()
    name = _ALIASES.get(name, name)
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def declared_charset(data: bytes) -> str | None:
    """The codec the page declares in its first `PRESCAN_BYTES` bytes, if Python knows it."""
    m = _META_CHARSET.search(data, 0, PRESCAN_BYTES)
    return _codec(m.group(1) or m.group(2)) if m else None


def _utf16_without_bom(data: bytes) -> str | None:
    head = data[:4096]
    if len(head) < 64:
        return None
    even, odd = head[0::2], head[1::2]
    if odd.count(0) > 0.4 * len(odd) and even.count(0) < 0.05 * len(even):
        return "utf-16-le"
    if even.count(0) > 0.4 * len(even) and odd.count(0) < 0.05 * len(odd):
        return "utf-16-be"
    return None


def _guesses(data: bytes) -> list[str]:
    """charset-normalizer's guesses, best first; windows-1252 (the web's default legacy encoding, as
    browsers assume it) first when it reads the sample nearly as well as the best guess."""
    from charset_normalizer import from_bytes

    matches = list(from_bytes(_sample(data)))
    guesses = [m.encoding for m in matches]
    if matches and any(m.encoding == "cp1252" and m.chaos <= matches[0].chaos + CP1252_CHAOS_MARGIN for m in matches):
        guesses.remove("cp1252")
        guesses.insert(0, "cp1252")
    return guesses


def _sample(data: bytes) -> bytes:
    if len(data) <= GUESS_SAMPLE_BYTES:
        return data
    return data[: GUESS_SAMPLE_BYTES * 3 // 4] + data[-GUESS_SAMPLE_BYTES // 4:]


def decode_html(data: bytes) -> str:
    """The page's text (see the module docstring, stage 1): controls dropped, binary refused."""
    text: str | None = None
    for bom, codec in _BOMS:
        if data.startswith(bom):
            text = data[len(bom):].decode(codec, "replace")
            break
    if text is None and (utf16 := _utf16_without_bom(data)):
        text = data.decode(utf16, "replace")
    if text is None:
        sample = _sample(data)
        controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
        if controls > MAX_BAD_CHAR_SHARE * len(sample):
            raise HtmlRefused("html_unreadable", f"binary, not text: {controls} of {len(sample)} bytes sampled are "
                                                 "control characters")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            candidates = [c for c in (declared_charset(data),) if c and c != "utf-8"] or _guesses(data)
            for codec in candidates:
                try:
                    text = data.decode(codec)
                    break
                except (UnicodeDecodeError, LookupError):
                    continue
            if text is None:
                text = data.decode(candidates[0] if candidates else "cp1252", "replace")
    cleaned, controls = _CONTROLS.subn("", text) if _CONTROLS.search(text) else (text, 0)
    bad = controls + cleaned.count("\ufffd")
    if text and bad > MAX_BAD_CHAR_SHARE * len(text):
        raise HtmlRefused("html_unreadable", f"not text: {bad} of {len(text)} characters are controls or undecodable")
    return cleaned


# --- parsing --------------------------------------------------------------------------------------------

#: Elements whose content libxml2 reads as text, not markup (as HTML5 does), and comments.
_RAW_TEXT = re.compile(r"<(script|style|xmp|iframe|noembed|noframes|title|textarea|plaintext)(?![^\s/>])|<!--",
                       re.IGNORECASE)
_RAW_END = {name: re.compile(rf"</{name}(?![^\s/>])", re.IGNORECASE) for name in
            ("script", "style", "xmp", "iframe", "noembed", "noframes", "title", "textarea")}
#: A start tag as HTML5 tokenizes it: up to its first ``>`` outside a quoted attribute value.
_START_TAG = re.compile(r"""<[A-Za-z][^\s/>]*((?:[^>=]|=\s*"[^"]*"|=\s*'[^']*'|=)*)>?""")
_QUOTED_VALUE = re.compile(r"""=\s*(?:"[^"]*"|'[^']*')""")


def check_markup(text: str) -> int:
    """The page's attributes (an upper bound), after refusing (``html_too_complex``) markup libxml2
    would take too long or too much memory for: more than `MAX_MARKUP` opening tags or
    `MAX_PAGE_ATTRIBUTES` attributes, or a start tag with more than `MAX_ATTRIBUTES` (libxml2 checks a
    new attribute against the element's others: quadratic). One linear pass: a tag is read as HTML5
    reads it (quoted values skipped); script, style (and the like) content and comments are skipped."""
    markup = text.count("<") - text.count("</")  # tags that open an element, at most
    if markup > MAX_MARKUP:
        raise HtmlRefused("html_too_complex", f"{markup} tags, more than {MAX_MARKUP} (an honest page has far fewer)")
    attributes = 0
    pos, end = 0, len(text)
    while pos < end:
        raw = _RAW_TEXT.search(text, pos)
        stop = raw.start() if raw else end
        for tag in _START_TAG.finditer(text, pos, stop):
            attributes += _attributes(tag.group(1))
        if raw is None:
            break
        if raw.group(1) is None:  # a comment
            close = text.find("-->", raw.end())
            pos = end if close < 0 else close + 3
            continue
        own = _START_TAG.match(text, raw.start())  # the raw element's own start tag counts too
        start = own.end() if own else raw.end()
        if own:
            attributes += _attributes(own.group(1))
        name = raw.group(1).lower()
        closing = _RAW_END[name].search(text, start) if name in _RAW_END else None  # plaintext: to the end
        pos = end if closing is None else closing.end()
    if attributes > MAX_PAGE_ATTRIBUTES:
        raise HtmlRefused("html_too_complex", f"{attributes} attributes, more than {MAX_PAGE_ATTRIBUTES}")
    return attributes


def _attributes(attributes: str) -> int:
    """How many attributes a start tag has, at most (quoted values skipped; "a = b" counts three)."""
    if '"' in attributes or "'" in attributes:
        attributes = _QUOTED_VALUE.sub("=", attributes)
    count = len(attributes.split())
    if count > MAX_ATTRIBUTES:
        raise HtmlRefused("html_too_complex", f"a tag with {count} attributes, more than {MAX_ATTRIBUTES}")
    return count


def parse_html(text: str, checked: bool = False) -> Any:
    """The lxml document (comments and processing instructions dropped); refuses markup libxml2 cannot
    hold (`check_markup`, unless ``checked`` already, and libxml2's own resource limits)."""
    from lxml import etree  # type: ignore[import-untyped, unused-ignore]
    from lxml.html import HTMLParser, document_fromstring  # type: ignore[import-untyped, unused-ignore]

    if not checked:
        check_markup(text)
    parser = HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True, collect_ids=False,
                        default_doctype=False)
    try:
        try:
            tree = document_fromstring(text, parser=parser)
        except ValueError:  # a str with an XML encoding declaration: lxml wants bytes then
            tree = document_fromstring(text.encode("utf-8", "replace"), parser=parser)
    except (etree.ParserError, etree.XMLSyntaxError, ValueError) as exc:
        raise HtmlRefused("no_text", f"no HTML document: {exc}") from None
    for error in parser.error_log:
        if error.type == etree.ErrorTypes.ERR_RESOURCE_LIMIT:
            raise HtmlRefused("html_too_complex", f"the HTML parser stopped: {error.message.strip()}")
    return tree


# --- rendering ----------------------------------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r\f\v]+")
#: A body line that would start a Markdown block; the backslash goes before group 1 (`_escape_line`).
_BLOCK_START = re.compile(
    r"(#{1,6})(?:[ \t]|$)"  # ATX heading
    r"|([=-])[ \t]*(?:[=-][ \t]*)*$"  # setext underline, thematic break, front matter "---"
    r"|([*_])[ \t]*(?:\3[ \t]*){2,}$"  # thematic break
    r"|(`{3}|~{3})"  # code fence
    r"|([-+*])(?:[ \t]|$)"  # bullet list item
    r"|[0-9]{1,9}([.)])(?:[ \t]|$)"  # ordered list item
    r"|(>)"  # block quote
    r"|(\|)"  # table row
    r"|(<)(?:[A-Za-z/!?])",  # HTML block
)
_DELIMITER_ROW = re.compile(r"[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_CLOSING_HASHES = re.compile(r"(?:^|[ \t])#+[ \t]*$")
_BACKTICKS = re.compile(r"`+")
_LANGUAGE = re.compile(r"(?:^|\s)(?:language|lang)-([A-Za-z0-9_+#.-]{1,32})")


def _escape_line(line: str) -> str:
    """A body line, with one backslash before what would make it start a Markdown block."""
    m = _BLOCK_START.match(line)
    if m:
        group = next(i for i in range(1, (m.lastindex or 0) + 1) if m.group(i) is not None)
        return f"{line[:m.start(group)]}\\{line[m.start(group):]}"
    if "|" in line and _DELIMITER_ROW.match(line):
        return "\\" + line
    return line


def _fence(code: str, minimum: int = 3) -> str:
    longest = max((len(run) for run in _BACKTICKS.findall(code)), default=0)
    return "`" * max(minimum, longest + 1)


def _code_span(code: str) -> str:
    code = _WS.sub(" ", code)
    if not code.strip():
        return code
    fence = _fence(code, 1)
    if code.startswith("`") or code.endswith("`"):
        code = f" {code} "
    return f"{fence}{code}{fence}"


# Element kinds, for HTML and for trafilatura's XML alike.
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_LISTS = {"ul", "ol", "menu", "dir", "list"}
_ITEMS = {"li", "item"}
_TABLE_PARTS = {"thead", "tbody", "tfoot"}
_ROWS = {"tr", "row"}
_CELLS = {"td", "th", "cell"}
_QUOTES = {"blockquote", "quote"}
#: The tag boilerplate elements get in the main container (`main_container`): skipped like a script.
_DROPPED = "x-boilerplate"
_SKIP = {"script", "style", "noscript", "template", "head", "title", "meta", "link", "svg", "canvas", "iframe",
         "object", "embed", "video", "audio", "source", "track", "img", "graphic", "picture", "map", "area",
         "input", "select", "option", "optgroup", "textarea", "button", "datalist", "frame", "frameset", _DROPPED}
_BREAKS = {"br", "lb"}
_BLOCKS = {
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "figure", "figcaption",
    "details", "summary", "dl", "dt", "dd", "address", "center", "fieldset", "legend", "form", "hgroup",
    "body", "html", "pre", "hr", "table", "caption", "head", "doc", "dialog", "search", "noframes",
    *_HEADINGS, *_LISTS, *_ITEMS, *_TABLE_PARTS, *_ROWS, *_CELLS, *_QUOTES,
}


class _Renderer:
    """Markdown blocks from an lxml element: HTML (``xml=False``) or trafilatura's XML (``xml=True``)."""

    def __init__(self, root: Any, xml: bool) -> None:
        self.xml = xml
        # trafilatura's XML calls a heading ``head``; HTML's <head> holds no text
        self.skip = _SKIP - {"head"} if xml else _SKIP
        # Elements that hold a block somewhere below them: rendered as containers even if inline
        # themselves (a link around a card's heading). Each element is marked once: O(n).
        self.holds_block: set[Any] = set()
        for el in root.iter():
            if isinstance(el.tag, str) and self._is_block(el):
                parent = el.getparent()
                while parent is not None and parent not in self.holds_block:
                    self.holds_block.add(parent)
                    parent = parent.getparent()

    def _tag(self, el: Any) -> str:
        tag = el.tag
        return tag.lower() if isinstance(tag, str) else ""

    def _is_block(self, el: Any) -> bool:
        tag = self._tag(el)
        if tag == "code" and self.xml:
            return self._xml_code_block(el)
        return tag in _BLOCKS

    def _xml_code_block(self, el: Any) -> bool:
        """trafilatura's ``code`` is its ``<pre>`` and its inline ``<code>`` alike: a block when it holds a
        line break, or stands alone (no text or inline element beside it) outside a paragraph, heading,
        cell or list item (a list of identifiers is a list of code spans more often than of one-line
        code blocks)."""
        if "\n" in "".join(el.itertext()):
            return True
        parent, before, after = el.getparent(), el.getprevious(), el.getnext()
        if parent is None or self._tag(parent) in {"p", "head", "hi", "ref", "cell", "item", "del", "span"}:
            return False
        text_before = (before.tail if before is not None else parent.text) or ""
        return (not text_before.strip() and not (el.tail or "").strip()
                and (before is None or self._tag(before) in _BLOCKS) and (after is None or self._tag(after) in _BLOCKS))

    # inline text

    def inline(self, el: Any, parts: list[str], spans: bool = True) -> None:
        """Append the inline text of ``el``'s content (not its tail) to ``parts``; ``\\n`` is a line break.
        Code is a code span, or its plain text without ``spans``."""
        if el.text:
            parts.append(_WS.sub(" ", el.text))
        for child in el:
            self._inline_child(child, parts, spans)

    def _inline_child(self, child: Any, parts: list[str], spans: bool = True) -> None:
        tag = self._tag(child)
        if tag in _BREAKS:
            parts.append("\n")
        elif tag and tag not in self.skip:
            if spans and (tag == "code" or (tag in {"kbd", "samp", "tt"} and len(child) == 0)):
                parts.append(_code_span("".join(child.itertext())))
            elif tag in _HEADINGS or tag == "head" or tag in _CELLS or tag in _ITEMS or tag in _BLOCKS:
                parts.append(" ")
                self.inline(child, parts, spans)
                parts.append(" ")
            else:
                self.inline(child, parts, spans)
        if child.tail:
            parts.append(_WS.sub(" ", child.tail))

    def flat(self, el: Any, spans: bool = True) -> str:
        parts: list[str] = []
        self.inline(el, parts, spans)
        return _WS.sub(" ", "".join(parts)).strip()

    # blocks

    def blocks(self, el: Any) -> list[str]:
        """The Markdown blocks of ``el``'s content (its text and children, not its tail)."""
        out: list[str] = []
        parts: list[str] = []

        def flush() -> None:
            if parts:
                para = _paragraph("".join(parts))
                if para:
                    out.append(para)
                parts.clear()

        if el.text:
            parts.append(_WS.sub(" ", el.text))
        for child in el:
            tag = self._tag(child)
            if tag and tag not in self.skip and (self._is_block(child) or child in self.holds_block):
                flush()
                out.extend(self.block(child, tag))
                if child.tail:
                    parts.append(_WS.sub(" ", child.tail))
            else:
                self._inline_child(child, parts)
        flush()
        return out

    def block(self, el: Any, tag: str) -> list[str]:
        if tag in _HEADINGS or tag == "head":
            level = _HEADINGS.get(tag) or _HEADINGS.get((el.get("rend") or "").lower(), 2)
            text = self.flat(el, spans=False)
            return [_heading(level, text)] if _VISIBLE.search(text) else []
        if tag == "pre" or (tag == "code" and self.xml):
            return _code_block(el)
        if tag in _LISTS:
            return self.list_block(el, tag)
        if tag == "table":
            return self.table(el)
        if tag in _QUOTES:
            inner = self.blocks(el)
            return ["\n".join(f"> {line}" if line else ">" for line in "\n\n".join(inner).split("\n"))] if inner else []
        if tag == "hr":
            return []
        return self.blocks(el)

    def list_block(self, el: Any, tag: str) -> list[str]:
        ordered = tag == "ol" or (tag == "list" and (el.get("rend") or "").lower() == "ol")
        number = 1
        if ordered:
            start = (el.get("start") or "").strip()
            number = int(start) if start.isdigit() and len(start) <= 9 else 1
        items: list[str] = []
        loose: list[str] = []  # text or elements between items: a paragraph of the list's own

        for child in el:
            ctag = self._tag(child)
            if ctag in _ITEMS:
                body = "\n\n".join(self.blocks(child))
                if body:
                    marker = f"{number}. " if ordered else "- "
                    indent = " " * len(marker)
                    lines = body.split("\n")
                    items.append("\n".join([marker + lines[0], *(indent + ln if ln else ln for ln in lines[1:])]))
                    number += 1
            elif ctag and ctag not in self.skip:
                loose.extend(self.blocks(child) if (self._is_block(child) or child in self.holds_block)
                             else [p for p in [_paragraph(self.flat(child))] if p])
            if child.tail and child.tail.strip():
                loose.append(_paragraph(_WS.sub(" ", child.tail)))
        result = ["\n".join(items)] if items else []
        return result + [b for b in loose if b]

    def _rows(self, table: Any) -> Iterator[Any]:
        for child in table:
            tag = self._tag(child)
            if tag in _ROWS:
                yield child
            elif tag in _TABLE_PARTS:
                yield from (row for row in child if self._tag(row) in _ROWS)

    def table(self, el: Any) -> list[str]:
        rows = [[cell for cell in row if self._tag(cell) in _CELLS] for row in self._rows(el)]
        rows = [row for row in rows if row]
        caption = [c for c in el if self._tag(c) == "caption"]
        out = [p for c in caption for p in self.blocks(c)]
        if not rows:
            return out
        width = max(len(row) for row in rows)
        if width == 1 or any(self._layout_cell(cell) for row in rows for cell in row):
            for row in rows:
                for cell in row:
                    out.extend(self.blocks(cell))
            return out
        lines = []
        for i, row in enumerate(rows):
            cells = [self.flat(cell).replace("|", "\\|") for cell in row]
            cells += [""] * (width - len(cells))
            lines.append("| " + " | ".join(cells) + " |")
            if i == 0:
                lines.append("|" + " --- |" * width)
        out.append("\n".join(lines))
        return out

    def _layout_cell(self, cell: Any) -> bool:
        if cell not in self.holds_block:
            return False
        blocks = 0
        for d in cell.iterdescendants():
            tag = self._tag(d)
            if tag in _HEADINGS or tag in {"head", "pre", "table", "blockquote", "quote"} or (
                    tag == "code" and self.xml and self._is_block(d)):
                return True
            if tag in {"p", "div", "ul", "ol", "list"}:
                blocks += 1
                if blocks >= 2:
                    return True
        return False


#: A character that shows: not whitespace, not an invisible format character (zero-width space, soft hyphen...).
_VISIBLE = re.compile("[^\\s\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")


def _paragraph(text: str) -> str:
    lines = (_WS.sub(" ", line).strip() for line in text.split("\n"))
    return "\n".join(_escape_line(line) for line in lines if _VISIBLE.search(line))


def _heading(level: int, text: str) -> str:
    """An ATX heading. Its text stays plain (no escapes, no code spans: heading paths are read from the
    heading's text nodes); text ending in #s gets an explicit closing sequence, which keeps them."""
    marks = "#" * level
    return f"{marks} {text} {marks}" if _CLOSING_HASHES.search(text) else f"{marks} {text}"


def _code_block(el: Any) -> list[str]:
    parts: list[str] = []

    def walk(node: Any) -> None:
        if node.text:
            parts.append(node.text)
        for child in node:
            tag = child.tag.lower() if isinstance(child.tag, str) else ""
            if tag in {"br", "lb"}:
                parts.append("\n")
            elif tag not in {"script", "style", "template"}:
                walk(child)
            if child.tail:
                parts.append(child.tail)

    walk(el)
    code = "".join(parts).replace("\r\n", "\n").replace("\r", "\n")
    code = code[1:] if code.startswith("\n") else code
    code = code.rstrip()
    if not code.strip():
        return []
    language = ""
    for node in (el, *el.iterchildren("code")):
        m = _LANGUAGE.search(node.get("class") or "")
        if m:
            language = m.group(1).replace("`", "")
            break
    fence = _fence(code)
    return [f"{fence}{language}\n{code}\n{fence}"]


def render_blocks(root: Any, xml: bool = False) -> list[str]:
    """The Markdown blocks of an element's content: HTML, or trafilatura's XML with ``xml=True``."""
    return _Renderer(root, xml).blocks(root)


def render_markdown(root: Any, xml: bool = False) -> str:
    """The Markdown of an element's content: HTML, or trafilatura's XML with ``xml=True``."""
    return "\n\n".join(render_blocks(root, xml)) + "\n"


def block_kind(block: str) -> str:
    """``heading``, ``code``, ``list``, ``table``, ``quote`` or ``paragraph`` (a body line that starts
    like a block is escaped, so the first characters tell)."""
    if block.startswith("#"):
        return "heading"
    if block.startswith("```"):
        return "code"
    if block.startswith("- ") or _ORDERED_MARKER.match(block):
        return "list"
    if block.startswith("| "):
        return "table"
    if block.startswith(">"):
        return "quote"
    return "paragraph"


_ORDERED_MARKER = re.compile(r"[0-9]{1,9}\. ")


# --- the main container -----------------------------------------------------------------------------

_BOILERPLATE_TAGS = ("nav", "aside", "footer", "form", "dialog", "menu", "button", "select", "textarea", "input",
                     "script", "style", "noscript", "template", "iframe", "svg")
_BOILERPLATE_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search", "dialog", "alertdialog",
                      "menu", "menubar", "toolbar", "tablist", "form"}
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)


_IS_MAIN = "self::main or @role='main'"
_OUTERMOST_MAIN = f"//*[{_IS_MAIN}][not(ancestor::*[{_IS_MAIN}])]"
_OUTERMOST_ARTICLE = "//article[not(ancestor::article)]"


def main_container(tree: Any, in_place: bool = False) -> Any:
    """A copy of the element the page marks as its main content (exactly one outermost ``<main>`` or
    ``role=main``, else exactly one outermost ``<article>``), else of the body, boilerplate removed
    (`_boilerplate`; in the body, also a ``<header>`` outside any article). ``in_place`` cleans the
    tree's own element instead of a copy (a page too large to copy)."""
    marked = tree.xpath(_OUTERMOST_MAIN) or tree.xpath(_OUTERMOST_ARTICLE)
    scope: Any = marked[0] if len(marked) == 1 else tree.find("body")
    body = len(marked) != 1
    if scope is None:
        scope = tree
    container = scope if in_place else deepcopy(scope)
    for el in container.iter():
        if isinstance(el.tag, str) and el is not container and (
                _boilerplate(el) or (body and el.tag == "header" and next(el.iterancestors("article"), None) is None)):
            el.tag = _DROPPED  # renders nothing, its tail stays in place: O(1), where removing is not
    return container


def _boilerplate(el: Any) -> bool:
    tag = el.tag.lower()
    if tag in _BOILERPLATE_TAGS:
        return True
    if (el.get("role") or "").lower() in _BOILERPLATE_ROLES:
        return True
    if el.get("hidden") is not None or (el.get("aria-hidden") or "").lower() == "true":
        return True
    return bool(_HIDDEN_STYLE.search(el.get("style") or ""))


# --- title and date -------------------------------------------------------------------------------------

def page_title(tree: Any) -> str | None:
    for xpath in ("//head/title|//title", "//meta[@property='og:title' or @name='og:title']/@content",
                  "//meta[@name='twitter:title' or @property='twitter:title']/@content", "//h1"):
        for found in tree.xpath(xpath)[:5]:
            text = found if isinstance(found, str) else found.text_content()
            text = _WS.sub(" ", _CONTROLS.sub("", str(text))).strip()
            if text:
                return text[:MAX_TITLE_CHARS]
    return None


_PUBLISHED_META = {
    "article:published_time", "og:article:published_time", "og:published_time", "article.published",
    "datepublished", "date", "pubdate", "publishdate", "publish-date", "publish_date", "published_time",
    "published-date", "publication_date", "publication-date", "dc.date", "dc.date.issued", "dc.date.created",
    "dcterms.date", "dcterms.issued", "dcterms.created", "citation_publication_date", "citation_date",
    "citation_online_date", "prism.publicationdate", "sailthru.date", "parsely-pub-date", "originalpublicationdate",
    "article_date_original", "creation_date", "created", "dc.created",
}
_MODIFIED_META = {"article:modified_time", "og:updated_time", "datemodified", "dcterms.modified", "dc.date.modified",
                  "last-modified", "lastmod", "modified", "revised"}
_MONTHS = {m: i for i, names in enumerate(
    (("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",), ("jun", "june"),
     ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"),
     ("dec", "december")), 1) for m in names}
_ISO = re.compile(r"\s*(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)")
_COMPACT = re.compile(r"\s*(\d{4})(\d{2})(\d{2})(?:\D|$)")
_DMY = re.compile(r"(?:[A-Za-z]+,?\s+)?(\d{1,2})(?:st|nd|rd|th)?\.?\s+([A-Za-z]{3,9})\.?,?\s+(\d{4})")
_MDY = re.compile(r"(?:[A-Za-z]+,?\s+)?([A-Za-z]{3,9})\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})")


_UPPER, _LOWER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"
_MARKED_AS = f"translate(concat(@class, ' ', @id, ' ', @itemprop), '{_UPPER}', '{_LOWER}')"
#: Short elements a page marks as its date or byline (class, id or itemprop), outside navigation and footers.
_BYLINE = (f"//*[not(self::script or self::style or self::meta)][contains({_MARKED_AS}, 'date') or "
           f"contains({_MARKED_AS}, 'publish') or contains({_MARKED_AS}, 'byline')]"
           "[not(ancestor::nav or ancestor::footer or ancestor::aside)]")
_DATE_IN_TEXT = re.compile(r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}(?:st|nd|rd|th)?\.?\s+[A-Za-z]{3,9}\.?,?\s+\d{4}"
                           r"|[A-Za-z]{3,9}\.?\s+\d{1,2}(?:st|nd|rd|th)?,?\s+\d{4}")


def parse_date(value: str) -> date | None:
    """A calendar date from a stated date value (ISO 8601 and its variants, RFC 2822, "4 March 2021")."""
    value = value.strip()[:100]
    for pattern, order in ((_ISO, "ymd"), (_COMPACT, "ymd"), (_DMY, "dmy"), (_MDY, "mdy")):
        m = pattern.match(value)
        if not m:
            continue
        fields = dict(zip(order, m.groups(), strict=True))
        month = fields["m"]
        month_number = int(month) if month.isdigit() else _MONTHS.get(month.lower())
        if month_number is None:
            continue
        try:
            found = date(int(fields["y"]), month_number, int(fields["d"]))
        except ValueError:
            continue
        if 1900 <= found.year <= 2200:
            return found
    return None


def _json_dates(data: Any, keys: tuple[str, ...]) -> Iterator[str]:
    stack = [data]
    seen = 0
    while stack and seen < 10_000:
        seen += 1
        item = stack.pop()
        if isinstance(item, dict):
            for key in keys:
                if isinstance(item.get(key), str):
                    yield item[key]
            stack.extend(reversed([v for v in item.values() if isinstance(v, dict | list)]))
        elif isinstance(item, list):
            stack.extend(reversed([v for v in item if isinstance(v, dict | list)]))


def stated_date(tree: Any) -> date | None:
    """The publication date the page states in its markup, else its stated modification date, else None."""
    published: list[str] = []
    modified: list[str] = []
    for meta in tree.xpath("//meta[@content]")[:2000]:
        name = (meta.get("property") or meta.get("name") or meta.get("itemprop") or meta.get("http-equiv") or "")
        name = name.strip().lower()
        if name in _PUBLISHED_META:
            published.append(meta.get("content"))
        elif name in _MODIFIED_META:
            modified.append(meta.get("content"))
    for script in tree.xpath("//script[@type='application/ld+json']")[:20]:
        try:
            data = json.loads(script.text or "")
        except (ValueError, RecursionError):
            continue
        published.extend(_json_dates(data, ("datePublished", "dateCreated", "uploadDate")))
        modified.extend(_json_dates(data, ("dateModified",)))
    for el in tree.xpath("//*[@itemprop='datePublished' or @itemprop='dateCreated']")[:20]:
        published.append(el.get("datetime") or el.get("content") or el.text_content())
    for el in tree.xpath("//time[@datetime][not(ancestor::nav or ancestor::footer or ancestor::aside)]")[:20]:
        published.append(el.get("datetime"))
    for el in tree.xpath("//*[@itemprop='dateModified']")[:20]:
        modified.append(el.get("datetime") or el.get("content") or el.text_content())
    for value in published:
        found = parse_date(value or "")
        if found is not None:
            return found
    for el in tree.xpath(_BYLINE)[:20]:  # "Published 7:07 PM EST Nov 19, 2019" in a byline
        text = _WS.sub(" ", el.text_content())
        if len(text) <= MAX_BYLINE_CHARS:
            for m in _DATE_IN_TEXT.finditer(text):
                if (found := parse_date(m.group())) is not None:
                    return found
    for value in modified:
        found = parse_date(value or "")
        if found is not None:
            return found
    return None


# --- extraction ---------------------------------------------------------------------------------------

_WORD = re.compile(r"\w+")


def _words(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for w in _WORD.findall(text.lower()):
        counts[w] = counts.get(w, 0) + 1
    return counts


def coverage(part: str, whole: str) -> float:
    """The share of ``whole``'s words (with multiplicity, case-folded) that ``part`` holds too; 1.0 if none."""
    have, want = _words(part), _words(whole)
    total = sum(want.values())
    if not total:
        return 1.0
    return sum(min(n, have.get(w, 0)) for w, n in want.items()) / total


def prose(blocks: list[str]) -> str:
    """The paragraphs and quotes among the blocks, each distinct one once (trafilatura drops repeats):
    the text, not its structure."""
    return "\n\n".join(dict.fromkeys(b for b in blocks if block_kind(b) in ("paragraph", "quote")))


def trafilatura_blocks(tree: Any, options: dict[str, Any] | None = None) -> list[str]:
    """trafilatura's main text of the page (`TRAFILATURA_OPTIONS`), as Markdown blocks; when
    precision mode finds no text (it skips trafilatura's rescue stages), the balanced mode's."""
    from trafilatura import bare_extraction

    options = TRAFILATURA_OPTIONS if options is None else options
    document = bare_extraction(tree, **options)
    body = getattr(document, "body", None)
    blocks = [] if body is None else render_blocks(body, xml=True)
    if options.get("favor_precision") and not _WORD.search("".join(blocks)):
        return trafilatura_blocks(tree, {**options, "favor_precision": False})
    return blocks


def choose_blocks(extracted: list[str], container: list[str] | None,
                  threshold: float = MIN_CONTAINER_COVERAGE) -> list[str]:
    """The container's blocks when trafilatura's text holds at least ``threshold`` of the container's
    prose, else trafilatura's (see the module docstring, stage 4)."""
    if container and (not extracted or coverage("\n\n".join(extracted), prose(container)) >= threshold):
        return container
    return extracted


def extract_html(data: bytes, progress: Progress = None) -> HtmlText:
    """The page's main content as Markdown, its title and stated date (see the module docstring)."""
    if len(data) > MAX_INPUT_BYTES:
        raise HtmlRefused("html_too_large", f"{len(data)} bytes, more than {MAX_INPUT_BYTES}")
    _quiet_loggers()
    try:
        return _extract(data, progress or (lambda _event: None))
    except RecursionError:
        raise HtmlRefused("html_too_complex", "the page nests too deeply to extract") from None
    except MemoryError:
        raise HtmlRefused("html_too_complex", "the page needs more memory than the parser child has") from None


def _extract(data: bytes, report: Callable[[str], None]) -> HtmlText:
    text = decode_html(data)
    report("decoded")
    attributes = check_markup(text)
    tree = parse_html(text, checked=True)
    del text
    report("parsed")
    title = page_title(tree)
    when = stated_date(tree)
    blocks: list[str] | None = None
    elements = sum(1 for _ in tree.iter())
    if (elements <= MAX_TRAFILATURA_ELEMENTS and attributes <= MAX_TRAFILATURA_ATTRIBUTES
            and sum(map(len, tree.itertext())) <= MAX_TRAFILATURA_TEXT):
        container = render_blocks(main_container(tree))
        try:
            blocks = choose_blocks(trafilatura_blocks(tree), container)
        except (MemoryError, RecursionError):
            raise
        except Exception:  # a bug of trafilatura's on this page: the page's own markup below
            blocks = container
    if blocks is None:  # too large for trafilatura (or a copy) in the child's memory, or trafilatura failed
        blocks = render_blocks(main_container(tree, in_place=True))
    report("extracted")
    markdown = "\n\n".join(blocks)
    if not _WORD.search(markdown):
        raise HtmlRefused("no_text", "the page has no main text")
    return HtmlText(text=markdown + "\n", title=title, stated_date=when)
