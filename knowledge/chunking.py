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
  overlap, and only whitespace lies between them.

Markdown is parsed with markdown-it-pyrs (markdown-it in Rust; CommonMark + tables + front matter), so a ``#`` inside
a code fence is not a heading, setext headings are headings, and Hugo/Jekyll front matter is
never mistaken for one (its closing ``---`` would otherwise make a setext heading): it stays in
the text, and its ``title:`` becomes the first heading under the document title when it differs
from it. Plain text has paragraphs only. Pure: no I/O, deterministic per
`CHUNKER_VERSION`, which includes the normalizer's and the token counter's versions.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import re
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from markdown_it_pyrs import MarkdownIt

from knowledge.normalize import NORMALIZER_VERSION

TARGET_TOKENS = 600
CEILING_TOKENS = 1000
FLOOR_TOKENS = 100

TOKENIZER_VERSION = "t1"
CHUNKER_VERSION = f"md1-{NORMALIZER_VERSION}-{TOKENIZER_VERSION}"

# One token per CJK character, per short word (<= 8 characters), per 5 characters of a longer
# word, and per other non-space character. One regex, counted in C.
_TOKEN = re.compile(
    r"[\u2E80-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\U00020000-\U0002FFFF]"
    r"|(?<!\w)\w{1,8}(?!\w)"
    r"|\w{1,5}"
    r"|[^\w\s]"
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


@dataclass
class _Block:
    start: int  # offsets into the text
    end: int
    tokens: int


@dataclass
class _Section:
    path: tuple[str, ...]
    blocks: list[_Block]

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)


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


_FM_TITLE = re.compile(r"""^title\s*:\s*(?P<q>["']?)(?P<t>.+?)(?P=q)\s*$""", re.MULTILINE)
_HEADING_ATTRS = re.compile(r"\s*\{#[^}]*\}\s*$")  # MkDocs/Hugo "{#anchor}" suffixes


def _inline_text(node: Any) -> str:
    parts: list[str] = []
    for child in node.walk():
        if child.name == "text":
            parts.append(child.meta.get("content", ""))
    return " ".join(_HEADING_ATTRS.sub("", "".join(parts)).split())


_MD = MarkdownIt("commonmark").enable_many(["table", "front_matter"])

#: markdown-it.rs recurses once per block nesting level — parsing, building and freeing its tree — and
#: overflows the thread's stack at ~50,000 levels ("> " * 100_000): a segfault that takes the host
#: process down, not an exception. A text that may nest deeper than this (a line whose container
#: prefix — indentation, ">", list markers — is this long) is chunked as plain text instead.
#: Ordinary documents stay far below it, so their chunks are unchanged.
MAX_MARKDOWN_NESTING = 1000
_DEEP_PREFIX = re.compile(rf"^(?:[ >]|[-+*](?= )|[0-9]{{1,9}}[.)](?= )){{{MAX_MARKDOWN_NESTING}}}", re.MULTILINE)


def _markdown_sections(text: str, title: str) -> list[_Section]:
    lines = _line_offsets(text)
    # markdown-it.rs reports UTF-8 byte offsets; blocks start on lines, so map bytes -> line.
    byte_lines = lines if text.isascii() else _line_offsets_bytes(text)
    starts: list[tuple[int, int, str]] = []  # (line, heading level or 0, heading text)
    root: tuple[str, ...] = (title,)
    for node in _MD.tree(text).children:
        if node.srcmap is None:
            continue
        line = bisect.bisect_right(byte_lines, node.srcmap[0]) - 1
        if node.name == "front_matter":
            match = _FM_TITLE.search(node.meta.get("content", ""))
            if match and match["t"].strip() and match["t"].strip() != title:
                root = (title, match["t"].strip())
            starts.append((line, 0, ""))  # content too: a page may be nothing but its title
        elif node.name in ("heading", "lheading"):
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
            sections[-1].blocks.append(block)
    return [s for s in sections if s.blocks]


def _line_offsets_bytes(text: str) -> list[int]:
    """Byte offset (UTF-8) of the start of each line, plus a sentinel."""
    offsets = [0]
    total = 0
    for line in text.split("\n"):
        total += len(line.encode("utf-8")) + 1
        offsets.append(total)
    return offsets


def _plain_sections(text: str, title: str) -> list[_Section]:
    blocks: list[_Block] = []
    for match in re.finditer(r"(?:[^\n]|\n(?!\s*\n))+", text):  # paragraphs: runs without a blank line
        block = _block(text, match.start(), match.end())
        if block is not None:
            blocks.append(block)
    return [_Section((title,), blocks)] if blocks else []


def _joins(left: int, right: int) -> bool:
    """May two neighbours (token counts) become one chunk? Fill to the target; past it, only to
    lift a piece below the floor, and never past the ceiling."""
    total = left + right
    return total <= TARGET_TOKENS or (min(left, right) < FLOOR_TOKENS and total <= CEILING_TOKENS)


def _merge_small(sections: list[_Section]) -> list[_Section]:
    """Sections below the floor merge up into their neighbour (see the module docstring)."""
    merged: list[_Section] = []
    for section in sections:
        prev = merged[-1] if merged else None
        if prev is not None and min(prev.tokens, section.tokens) < FLOOR_TOKENS \
                and prev.tokens + section.tokens <= CEILING_TOKENS:
            merged[-1] = _Section(_common_path(prev.path, section.path), prev.blocks + section.blocks)
        else:
            merged.append(section)
    return merged


def _units(text: str, block: _Block, pattern: str) -> list[_Block]:
    return [_Block(m.start() + block.start, m.end() + block.start, count_tokens(m.group()))
            for m in re.finditer(pattern, text[block.start:block.end])]


def _split_block(text: str, block: _Block) -> list[_Block]:
    """Cut one over-ceiling block between lines, else between words, else between characters."""
    for pattern in (r"[^\n]+", r"\S+"):
        units = _units(text, block, pattern)
        if len(units) > 1:
            pieces: list[_Block] = []
            for unit in units:
                pieces.extend(_split_block(text, unit) if unit.tokens > CEILING_TOKENS else [unit])
            return _pack(pieces)
    # One unbreakable run: windows of characters that each count at most the target.
    windows: list[_Block] = []
    start = block.start
    while start < block.end:
        end = min(block.end, start + TARGET_TOKENS * 2)
        while count_tokens(text[start:end]) > TARGET_TOKENS and end - start > 1:
            end = start + (end - start) // 2
        windows.append(_Block(start, end, count_tokens(text[start:end])))
        start = end
    return windows


def _pack(blocks: list[_Block]) -> list[_Block]:
    """Join consecutive blocks while `_joins` allows. Token counts add up exactly because blocks
    are separated by whitespace, which the counter never counts."""
    out: list[_Block] = []
    for block in blocks:
        if out and _joins(out[-1].tokens, block.tokens):
            out[-1] = _Block(out[-1].start, block.end, out[-1].tokens + block.tokens)
        else:
            out.append(block)
    return out


def _pieces(text: str, section: _Section) -> list[_Block]:
    if section.tokens <= CEILING_TOKENS:
        return [_Block(section.blocks[0].start, section.blocks[-1].end, section.tokens)]
    blocks: list[_Block] = []
    for block in section.blocks:
        blocks.extend(_split_block(text, block) if block.tokens > CEILING_TOKENS else [block])
    return _pack(blocks)


def chunk_text(text: str, title: str, *, markdown: bool) -> list[ChunkDraft]:
    """Chunk normalized ``text`` of a document titled ``title``."""
    if markdown and _DEEP_PREFIX.search(text):
        markdown = False  # see MAX_MARKDOWN_NESTING
    sections = _markdown_sections(text, title) if markdown else _plain_sections(text, title)
    pieces: list[tuple[tuple[str, ...], _Block]] = []
    for section in _merge_small(sections):
        for piece in _pieces(text, section):
            prev = pieces[-1] if pieces else None
            # A last pass for what splitting left below the floor next to a neighbour it fits with.
            if prev is not None and min(prev[1].tokens, piece.tokens) < FLOOR_TOKENS \
                    and prev[1].tokens + piece.tokens <= CEILING_TOKENS:
                pieces[-1] = (_common_path(prev[0], section.path),
                              _Block(prev[1].start, piece.end, prev[1].tokens + piece.tokens))
            else:
                pieces.append((section.path, piece))
    # Token counts are exact sums: pieces are whole blocks (or windows) counted once, and the
    # whitespace between blocks counts nothing.
    return [ChunkDraft(i, path, p.start, p.end, text[p.start:p.end], p.tokens) for i, (path, p) in enumerate(pieces)]


class MarkdownChunker:
    """Structure-first chunker for Markdown (and for extractors that emit Markdown headings)."""

    version = CHUNKER_VERSION

    def chunk(self, text: str, title: str) -> list[ChunkDraft]:
        return chunk_text(text, title, markdown=True)


class PlainTextChunker:
    """Paragraph chunker for plain text: the same sizes, no headings."""

    version = CHUNKER_VERSION

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
