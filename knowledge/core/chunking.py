"""Chunking: structure first, size second (ADR-0033, "Chunking").

Headings are the primary boundary, blocks (paragraphs, lists, code fences, tables) the secondary
one, and a hard split happens only when one block exceeds the ceiling.

- Target 600, ceiling 1,000, floor 100 tokens; no overlap.
- A section below the floor merges up: into the chunk before it (its parent's body, or an earlier
  part of its parent's subtree) when the two fit under the ceiling, else into the section after
  it. A merged chunk's heading path is the deepest path the merged sections share.
- A section above the ceiling is cut between blocks, packing blocks up to the target; a block
  above the ceiling alone is cut between lines, then between words, then between characters.
- Every chunk is a contiguous slice of the normalized text; chunks are in order and do not
  overlap, and only whitespace lies between them. A chunk's token count is `count_tokens` of its
  text, exactly (U+3000, the one whitespace character the counter counts, included).

Markdown is parsed with markdown-it-pyrs (markdown-it in Rust; CommonMark + tables + front matter), so a ``#`` inside
a code fence is not a heading, setext headings are headings, and Hugo/Jekyll front matter is
never mistaken for one (its closing ``---`` would otherwise make a setext heading): it stays in
the text, and its ``title:`` becomes the first heading under the document title when it differs
from it. Plain text has paragraphs only. Markdown that could nest deeper than
`MAX_MARKDOWN_NESTING` levels is chunked as plain text, because the parser would crash the process
on it; a heading longer than `MAX_HEADING_CHARS` is cut in heading paths. Pure: no I/O,
deterministic per chunker version: `CHUNKER_VERSION` names the normalizer's, the token counter's and
the Markdown parser's versions (a release of markdown-it-pyrs may move block boundaries, so it is
a new version, never new ids under the old one); `PARAGRAPH_CHUNKER_VERSION`, which involves no
parser, the first two. An extractor that makes the text (a PDF's) adds its own version when the
chunk set is stored (`knowledge.ingest.ingestor.prepare`).
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import importlib.metadata
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol
from uuid import UUID

from markdown_it_pyrs import MarkdownIt

from knowledge.core.normalize import NORMALIZER_VERSION

TARGET_TOKENS = 600
CEILING_TOKENS = 1000
FLOOR_TOKENS = 100

TOKENIZER_VERSION = "t1"
#: The Markdown parser as installed: part of the Markdown chunker's version.
MARKDOWN_PARSER = f"mdit{importlib.metadata.version('markdown-it-pyrs')}"
# md2: exact totals across U+3000 and cut-word window seams; the nesting bound; heading components <= 256.
CHUNKER_VERSION = f"md2-{NORMALIZER_VERSION}-{TOKENIZER_VERSION}-{MARKDOWN_PARSER}"
#: Paragraphs only (plain text, or Markdown re-chunked with its headings ignored): no parser.
PARAGRAPH_CHUNKER_VERSION = f"para1-{NORMALIZER_VERSION}-{TOKENIZER_VERSION}"

# One token per CJK character, per short word (<= 8 characters), per 5 characters of a longer
# word, and per other non-space character. One regex, counted in C. Punctuation is tried first,
# which makes a run of it twice as fast to count and changes no count: no other branch matches
# there but the CJK class (CJK punctuation), which takes the same single character.
_TOKEN = re.compile(
    r"[^\w\s]"
    r"|[\u2E80-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\U00020000-\U0002FFFF]"
    r"|(?<!\w)\w{1,8}(?!\w)"
    r"|\w{1,5}"
)


def count_tokens(text: str) -> int:
    """A deterministic, download-free stand-in for a BPE tokenizer's count.

    Approximates GPT-style BPE (cl100k-like) on English technical text: one token per short word
    or punctuation mark, a long word one token per five characters (identifiers, hashes and
    base64 cost what they cost a BPE), and one per CJK character.
    """
    # Whitespace is never a token and only ever separates, so runs of it count the same as one
    # space; squeezing them first (in C) keeps the regex off long indentation. U+3000 is the one
    # whitespace character the CJK range counts, so a text holding it is counted as it is.
    if "\u3000" not in text:
        text = " ".join(text.split())
    return len(_TOKEN.findall(text))


@dataclass(frozen=True)
class ChunkDraft:
    """A chunk before it belongs to a document: where it is, what it says, under which headings."""

    ordinal: int
    heading_path: tuple[str, ...]
    start: int  # character offsets into the normalized text
    end: int
    text: str
    tokens: int


class Chunker(Protocol):
    """The port: ``version`` names the boundaries; the same text and version give the same drafts."""

    version: str

    def chunk(self, text: str, title: str) -> list[ChunkDraft]: ...


class _Block(NamedTuple):
    """A span of the text and its token count. A tuple: a split can make millions (one per word),
    and `_pack` takes plain ``(start, end, tokens)`` tuples as well."""

    start: int  # offsets into the text
    end: int
    tokens: int


@dataclass
class _Section:
    path: tuple[str, ...]
    blocks: list[_Block]
    tokens: int = 0  # of the text from the first block's start to the last one's end (`_append`)

    @property
    def span(self) -> _Block:
        return _Block(self.blocks[0].start, self.blocks[-1].end, self.tokens)


_Unit = tuple[int, int, int]  # (start, end, tokens), as `_Block`


_WORD_CHAR = re.compile(r"\w")


def _span_tokens(text: str, left: _Unit, right: _Unit) -> int:
    """The tokens of ``text[left start:right end]``, from the counts of its two ends. Only whitespace
    lies between pieces, and the counter counts none of it but U+3000 (its CJK class holds it).
    Pieces that touch (windows of one unbreakable run) add up too, unless the seam cuts a word
    (a word character on both sides), which the counter may count differently whole: recounted."""
    start, left_end, left_tokens = left
    right_start, end, right_tokens = right
    if left_end == right_start:
        if _WORD_CHAR.match(text, left_end - 1) and _WORD_CHAR.match(text, left_end):
            return count_tokens(text[start:end])
        return left_tokens + right_tokens
    return left_tokens + right_tokens + text.count("\u3000", left_end, right_start)


def _append(text: str, section: _Section, block: _Block) -> None:
    section.tokens = _span_tokens(text, section.span, block) if section.blocks else block.tokens
    section.blocks.append(block)


def _collapse(path: tuple[str, ...]) -> tuple[str, ...]:
    """A path never names the same thing twice in a row: a page whose "# Title" repeats the
    document's title shows it once."""
    return tuple(h for i, h in enumerate(path) if i == 0 or h != path[i - 1])


def _common_path(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _line_offsets(text: str) -> list[int]:
    """Offset of the start of each line, plus len(text) as a sentinel."""
    offsets = [0]
    pos = text.find("\n")
    while pos != -1:
        offsets.append(pos + 1)
        pos = text.find("\n", pos + 1)
    offsets.append(len(text) + 1)
    return offsets


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink [start, end) to exclude surrounding whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _block(text: str, start: int, end: int) -> _Block | None:
    start, end = _trim(text, start, end)
    if start >= end:
        return None
    return _Block(start, end, count_tokens(text[start:end]))


#: A heading longer than this is cut (with "…") in heading paths: a setext heading can be a whole
#: paragraph, and every chunk under a heading carries it, as do the index rows weighing its words.
MAX_HEADING_CHARS = 256

_FM_TITLE_KEY = re.compile(r"^title\s*:(\s*)", re.MULTILINE)


def _front_matter_title(content: str) -> str | None:
    """The value ``^title\\s*:\\s*(["']?)(.+?)\\1\\s*$`` (MULTILINE) captures from front matter, found
    in linear time: that regex backtracks quadratically through a long run of spaces in the value.
    The value is the rest of the line (or of the next non-blank one), quotes around it removed;
    ``""`` when only spaces follow the key to the end; None when no line matches."""
    for key in _FM_TITLE_KEY.finditer(content):
        start = key.end()
        if start == len(content):
            if key[1].strip("\n"):
                return ""
            continue
        end = content.find("\n", start)
        value = content[start:end if end >= 0 else len(content)].rstrip()
        if value[0] in "\"'" and len(value) >= 3 and value[-1] == value[0]:
            return value[1:-1]
        return value
    return None


def _without_anchor(heading: str) -> str:
    """``heading`` without a MkDocs/Hugo ``{#anchor}`` suffix and the whitespace around it, as
    ``re.sub(r"\\s*\\{#[^}]*\\}\\s*$", "", heading)`` would remove it, in linear time (that regex
    backtracks quadratically on long runs of spaces or of "{#")."""
    end = len(heading.rstrip())
    if not end or heading[end - 1] != "}":
        return heading
    anchor = heading.find("{#", heading.rfind("}", 0, end - 1) + 1, end - 1)
    return heading if anchor < 0 else heading[:anchor].rstrip()


def _path_component(heading: str) -> str:
    return heading if len(heading) <= MAX_HEADING_CHARS else heading[:MAX_HEADING_CHARS - 1].rstrip() + "…"


def _inline_text(node: Any) -> str:
    parts: list[str] = []
    for child in node.walk():
        if child.name == "text":
            parts.append(child.meta.get("content", ""))
    return _path_component(" ".join(_without_anchor("".join(parts)).split()))


_MD = MarkdownIt("commonmark").enable_many(["table", "front_matter"])

#: Markdown is parsed only when it cannot nest deeper than this (`_parsable`); other text is chunked
#: as plain text. markdown-it.rs recurses once per level, in parsing and in building the tree, and
#: overflows the thread's stack — a segfault that takes the host process, not an exception — at
#: ~50,000 levels on 8 MiB ("> " * 100_000); its emphasis and link-definition rules are quadratic
#: within a paragraph (20,000 nested emphases: 37 s). The docs corpora reach 51 and 186.
MAX_MARKDOWN_NESTING = 2000

# Every block level a line opens or continues costs it one character or more of this prefix
# (indentation, ">", a list marker and its space; a tab, absent from normalized text, up to four).
_DEEP_PREFIX = re.compile(
    rf"^(?:[ \t>]|[-+*](?=[ \t]|$)|[0-9]{{1,9}}[.)](?=[ \t]|$)){{{MAX_MARKDOWN_NESTING}}}", re.MULTILINE)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def _delimiters(text: str) -> int:
    return text.count("*") + text.count("_") + text.count("[")


def _parsable(text: str) -> bool:
    """Whether markdown-it may parse ``text``: no line's container prefix and no paragraph's inline
    delimiters (``*`` ``_`` ``[``: each level of emphasis, link or image opens with one) reach
    `MAX_MARKDOWN_NESTING`. A bound above the tree's depth, counted in C in two passes."""
    if _DEEP_PREFIX.search(text):
        return False
    return _delimiters(text) < MAX_MARKDOWN_NESTING or all(
        _delimiters(run) < MAX_MARKDOWN_NESTING for run in _BLANK_LINE.split(text))


def _markdown_sections(text: str, title: str) -> list[_Section]:
    lines = _line_offsets(text)
    # markdown-it.rs reports UTF-8 byte offsets; blocks start on lines, so map bytes -> line.
    byte_lines = lines if text.isascii() else _line_offsets_bytes(text)
    starts: list[tuple[int, int, str]] = []  # (line, heading level or 0, heading text)
    root: tuple[str, ...] = (title,)
    for node in _MD.tree(text).children:
        srcmap, name = node.srcmap, node.name  # each read builds a Python object: once per node
        if srcmap is None:
            continue
        line = bisect.bisect_right(byte_lines, srcmap[0]) - 1
        if name == "front_matter":
            fm_title = (_front_matter_title(node.meta.get("content", "")) or "").strip()
            if fm_title and fm_title != title:
                root = (title, _path_component(fm_title))
            starts.append((line, 0, ""))  # content too: a page may be nothing but its title
        elif name in ("heading", "lheading"):
            starts.append((line, int(node.meta["level"]), _inline_text(node)))
        else:
            starts.append((line, 0, ""))
    if not starts or starts[0][0] > 0:
        starts.insert(0, (0, 0, ""))  # content the parser made no node of (e.g. link definitions)

    sections: list[_Section] = [_Section(root, [])]
    stack: list[tuple[int, str]] = []  # open headings: (level, text)
    for k, (line, level, heading) in enumerate(starts):
        next_line = starts[k + 1][0] if k + 1 < len(starts) else len(lines) - 1
        block = _block(text, lines[line], lines[next_line] - 1)
        if level:
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, heading or f"h{level}"))
            sections.append(_Section(_collapse(root + tuple(h for _, h in stack)), []))
        if block is not None:
            _append(text, sections[-1], block)
    return [s for s in sections if s.blocks]


def _line_offsets_bytes(text: str) -> list[int]:
    """Byte offset (UTF-8) of the start of each line, plus a sentinel."""
    offsets = [0]
    total = 0
    for line in text.split("\n"):
        total += len(line.encode("utf-8")) + 1
        offsets.append(total)
    return offsets


# A newline that ends a paragraph: the next line is blank. Paragraphs are the runs between them
# (the runs ``(?:[^\n]|\n(?!\s*\n))+`` matches, found without a regex step per character).
_PARAGRAPH_END = re.compile(r"\n(?=[^\S\n]*\n)")


def _plain_sections(text: str, title: str) -> list[_Section]:
    section = _Section((title,), [])
    start = 0
    for end in [*(m.start() for m in _PARAGRAPH_END.finditer(text)), len(text)]:
        block = _block(text, start, end)
        if block is not None:
            _append(text, section, block)
        start = end + 1
    return [section] if section.blocks else []


def _joins(left: int, right: int, total: int) -> bool:
    """May two neighbours (token counts, and the count of the two joined) become one chunk? Fill
    to the target; past it, only to lift a piece below the floor, and never past the ceiling."""
    return total <= TARGET_TOKENS or (min(left, right) < FLOOR_TOKENS and total <= CEILING_TOKENS)


def _merge_small(text: str, sections: list[_Section]) -> list[_Section]:
    """Sections below the floor merge up into their neighbour (see the module docstring)."""
    merged: list[_Section] = []
    for section in sections:
        prev = merged[-1] if merged else None
        if prev is not None and min(prev.tokens, section.tokens) < FLOOR_TOKENS:
            total = _span_tokens(text, prev.span, section.span)
            if total <= CEILING_TOKENS:  # merged in place: a run of small sections stays linear
                prev.path, prev.tokens = _common_path(prev.path, section.path), total
                prev.blocks.extend(section.blocks)
                continue
        merged.append(_Section(section.path, list(section.blocks), section.tokens))
    return merged


def _tokens_upto(text: str, cap: int) -> int:
    """``min(count_tokens(text), cap)``, without counting past ``cap``."""
    if "\u3000" not in text:
        text = " ".join(text.split())
    return _TOKEN.subn("", text, count=cap)[1]


def _line_tokens(text: str, start: int, end: int) -> int:
    return count_tokens(text[start:end])


def _word_tokens(text: str, start: int, end: int) -> int:
    # `count_tokens` of a word: no whitespace to squeeze, and only whitespace around it.
    return len(_TOKEN.findall(text, start, end))


_UNITS = ((re.compile(r"[^\n]+"), _line_tokens), (re.compile(r"\S+"), _word_tokens))


_SPACE_SPLIT = re.compile(r"(\s+)")


def _pack_words(text: str, block: _Block) -> list[_Block] | None:
    """`_pack` over the words of ``block`` (its ``\\S+`` units), the same pieces computed in bulk: a
    10 MB line holds two million words, and an object per word costs seconds. None where the word
    split is not the answer (at most one word) or not this simple (a word alone above the ceiling)."""
    segment = text[block.start:block.end]
    parts = _SPACE_SPLIT.split(segment)  # word, spaces, word, …, word; "" where spaces begin or end it
    first, last = (0 if parts[0] else 2), (len(parts) - 1 if parts[-1] else len(parts) - 3)
    if last <= first:
        return None
    counted: dict[str, int] = {}  # prose repeats its words: each distinct one is counted once
    counts = [counted[w] if w in counted else counted.setdefault(w, len(_TOKEN.findall(w)))
              for w in parts[first:last + 1:2]]
    if max(counts) > CEILING_TOKENS:
        return None
    lengths = list(map(len, parts))
    ideographic = [sep.count("\u3000") for sep in parts[first + 1:last:2]] if "\u3000" in segment else None
    out: list[_Block] = []
    start, start_part, tokens = block.start + sum(lengths[:first]), first, counts[0]
    for i in range(1, len(counts)):
        right = counts[i]
        total = tokens + right + (ideographic[i - 1] if ideographic else 0)  # as `_span_tokens` counts it
        if _joins(tokens, right, total):
            tokens = total
            continue
        part = first + 2 * i
        end = start + sum(lengths[start_part:part - 1])
        out.append(_Block(start, end, tokens))
        start, start_part, tokens = end + lengths[part - 1], part, right
    out.append(_Block(start, start + sum(lengths[start_part:last + 1]), tokens))
    return out


def _split_block(text: str, block: _Block) -> list[_Block]:
    """Cut one over-ceiling block between lines, else between words, else between characters."""
    for pattern, count in _UNITS:
        if count is _word_tokens and (packed := _pack_words(text, block)) is not None:
            return packed  # the words in bulk, where that gives the same pieces
        spans = [m.span() for m in pattern.finditer(text, block.start, block.end)]
        if len(spans) > 1:
            return _pack(text, _units(text, spans, count))
    # One unbreakable run: windows of characters that each count at most the target.
    windows: list[_Block] = []
    start = block.start
    while start < block.end:
        end = min(block.end, start + TARGET_TOKENS * 2)
        tokens = _tokens_upto(text[start:end], TARGET_TOKENS + 1)
        while tokens > TARGET_TOKENS and end - start > 1:
            end = start + (end - start) // 2
            tokens = _tokens_upto(text[start:end], TARGET_TOKENS + 1)
        windows.append(_Block(start, end, tokens))  # exact: below the cap
        start = end
    return windows


def _units(text: str, spans: list[tuple[int, int]], count: Callable[[str, int, int], int]) -> Iterator[_Unit]:
    """The units of a split, counted; one above the ceiling alone is split again."""
    for start, end in spans:
        tokens = count(text, start, end)
        if tokens > CEILING_TOKENS:
            yield from _split_block(text, _Block(start, end, tokens))
        else:
            yield start, end, tokens


def _pack(text: str, units: Iterable[_Unit]) -> list[_Block]:
    """Join consecutive units while `_joins` allows, each join counted exactly (`_span_tokens`)."""
    out: list[_Block] = []
    piece: _Unit | None = None
    for unit in units:
        if piece is not None:
            total = _span_tokens(text, piece, unit)
            if _joins(piece[2], unit[2], total):
                piece = (piece[0], unit[1], total)
                continue
            out.append(_Block(*piece))
        piece = unit
    if piece is not None:
        out.append(_Block(*piece))
    return out


def _pieces(text: str, section: _Section) -> list[_Block]:
    if section.tokens <= CEILING_TOKENS:
        return [section.span]
    blocks: list[_Block] = []
    for block in section.blocks:
        blocks.extend(_split_block(text, block) if block.tokens > CEILING_TOKENS else [block])
    return _pack(text, blocks)


def chunk_text(text: str, title: str, *, markdown: bool) -> list[ChunkDraft]:
    """Chunk normalized ``text`` of a document titled ``title``."""
    sections = _plain_sections(text, title)
    if markdown and _parsable(text):
        try:
            sections = _markdown_sections(text, title)
        except BaseException as exc:  # pyo3's PanicException derives from BaseException, not Exception
            if type(exc).__name__ != "PanicException":
                raise
            # markdown-it.rs panicked (e.g. an index out of bounds in its code-span rule on hostile
            # input): the document is chunked as plain text, as past the nesting bound.
    pieces: list[tuple[tuple[str, ...], _Block]] = []
    for section in _merge_small(text, sections):
        for piece in _pieces(text, section):
            prev = pieces[-1] if pieces else None
            # A last pass for what splitting left below the floor next to a neighbour it fits with.
            if prev is not None and min(prev[1].tokens, piece.tokens) < FLOOR_TOKENS:
                total = _span_tokens(text, prev[1], piece)
                if total <= CEILING_TOKENS:
                    pieces[-1] = (_common_path(prev[0], section.path), _Block(prev[1].start, piece.end, total))
                    continue
            pieces.append((section.path, piece))
    # Token counts are exact: every join is counted as the text it spans (`_span_tokens`).
    return [ChunkDraft(i, path, p.start, p.end, text[p.start:p.end], p.tokens) for i, (path, p) in enumerate(pieces)]


class MarkdownChunker:
    """Structure-first chunker for Markdown (and for extractors that emit Markdown headings)."""

    version = CHUNKER_VERSION

    def chunk(self, text: str, title: str) -> list[ChunkDraft]:
        return chunk_text(text, title, markdown=True)


class PlainTextChunker:
    """Paragraph chunker: the same sizes, no headings — for plain text, and for Markdown re-chunked
    with its headings ignored (``knowledge docs rechunk --chunker paragraphs``)."""

    version = PARAGRAPH_CHUNKER_VERSION

    def chunk(self, text: str, title: str) -> list[ChunkDraft]:
        return chunk_text(text, title, markdown=False)


def content_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chunk_id(tenant_id: str, document_id: UUID, version: int, chunker_version: str, ordinal: int,
             text_sha256: str) -> str:
    """The citation: ``kc_`` + 104 bits of SHA-256 over everything that identifies the chunk.

    Deterministic in any process; distinct across tenants, documents, versions and chunker
    versions; 104 bits keep the birthday collision chance near 1e-14 at a billion chunks.
    """
    key = "\x1f".join([tenant_id, str(document_id), str(version), chunker_version, str(ordinal), text_sha256])
    digest = hashlib.sha256(key.encode("utf-8")).digest()[:13]
    return "kc_" + base64.b32encode(digest).decode("ascii").rstrip("=").lower()
