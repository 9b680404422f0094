"""Markdown rendered as a Word document with python-docx, for tests that compare what the DOCX path
extracts (`knowledge.parsers.docx_extract`) with the Markdown it came from — the docs corpora's
runbooks (``docs-etcd``, ``docs-argocd``) as DOCX renderings, for headings round trips and the
retrieval-parity check (recall@3 over the DOCX renderings within 0.03 of the Markdown's).

The Markdown is parsed by markdown-it-pyrs as the chunker parses it (CommonMark, tables):

- top-level headings (ATX and setext) become ``Heading N`` paragraphs; a heading inside a list or a
  block quote becomes a plain paragraph (the chunker never reads it as a heading either);
- paragraphs keep their inline text (emphasis and links as their text, an image as its alt text,
  inline HTML as written); a code span is a run in Consolas, without its backticks (the extractor
  makes it a code span again); a soft break is a space, a hard break a line break; headings and
  table cells are plain text (a code span's text without a font);
- bullet and ordered lists become ``List Bullet``/``List Number`` paragraphs (``… 2``, ``… 3`` for
  nested levels, deeper ones at level 3), other blocks inside an item follow it;
- fenced and indented code: one ``Code`` paragraph (a monospace style made here) per line;
- pipe tables become Word tables, the header row first; block quotes their content; HTML blocks one
  plain paragraph per line; front matter and thematic breaks nothing.

The title goes to the core properties' ``title``.
"""

from __future__ import annotations

import io
from typing import Any

import docx
from docx.document import Document
from docx.enum.style import WD_STYLE_TYPE
from docx.shared import Pt
from markdown_it_pyrs import MarkdownIt

_MD = MarkdownIt("commonmark").enable_many(["table", "front_matter"])
_LIST_BLOCKS = ("bullet_list", "ordered_list")
_BLOCKS = frozenset({*_LIST_BLOCKS, "paragraph", "heading", "lheading", "fence", "code_block", "table", "blockquote",
                     "html_block", "hr"})


#: A paragraph's inline content: (text, whether it is inline code) pieces.
Segments = list[tuple[str, bool]]
CODE_FONT = "Consolas"


def _segments(node: Any, code: bool = False) -> Segments:
    """The inline content of a node and its children (see the module docstring)."""
    parts: Segments = []
    for child in node.children:
        name = child.name
        if name in ("text", "html_inline"):
            parts.append((child.meta.get("content", ""), code))
        elif name == "softbreak":
            parts.append((" ", code))
        elif name == "hardbreak":
            parts.append(("\n", code))
        elif name in _BLOCKS:
            continue  # a block inside a list item: rendered by `_Renderer.item`
        else:
            parts.extend(_segments(child, code or name == "code_inline"))
    return parts


def _inline(node: Any) -> str:
    """The plain text of an inline node and its children (code spans without their backticks)."""
    return "".join(text for text, _ in _segments(node))


class _Renderer:
    def __init__(self, doc: Document) -> None:
        self.doc = doc

    def paragraph(self, text: str | Segments, style: str | None = None) -> None:
        """A paragraph of plain text, or of inline content (inline code as Consolas runs)."""
        segments: Segments = [(text, False)] if isinstance(text, str) else text
        paragraph = self.doc.add_paragraph(style=style)
        merged: Segments = []  # adjacent pieces of the same kind as one run
        for piece, code in segments:
            if merged and merged[-1][1] == code:
                merged[-1] = (merged[-1][0] + piece, code)
            elif piece:
                merged.append((piece, code))
        for piece, code in merged:
            lines = piece.split("\n")
            for index, line in enumerate(lines):
                run = paragraph.add_run(line)
                if code:
                    run.font.name = CODE_FONT
                if index < len(lines) - 1:
                    run.add_break()

    def block(self, node: Any, top: bool, depth: int = 0) -> None:
        name = node.name
        if name in ("heading", "lheading"):
            text = " ".join(_inline(node).split())
            if top and text:
                self.paragraph(text, f"Heading {min(int(node.meta['level']), 9)}")
            elif text:
                self.paragraph(text)
        elif name == "paragraph":
            segments = _segments(node)
            if "".join(text for text, _ in segments).strip():
                self.paragraph(segments)
        elif name in _LIST_BLOCKS:
            for item in node.children:
                self.item(item, name == "ordered_list", depth)
        elif name in ("fence", "code_block"):
            for line in node.meta.get("content", "").rstrip("\n").split("\n"):
                self.paragraph(line, "Code")
        elif name == "table":
            self.table(node)
        elif name == "blockquote":
            for child in node.children:
                self.block(child, False, depth)
        elif name == "html_block":
            for line in node.meta.get("content", "").split("\n"):
                if line.strip():
                    self.paragraph(line)

    def item(self, item: Any, ordered: bool, depth: int) -> None:
        level = min(depth + 1, 3)
        style = ("List Number" if ordered else "List Bullet") + (f" {level}" if level > 1 else "")
        segments = _segments(item)  # a tight item's text (a loose item's is in its first paragraph)
        blocks = [child for child in item.children if child.name in _BLOCKS]
        blank = not "".join(text for text, _ in segments).strip()
        first = blocks[0] if blank and blocks and blocks[0].name == "paragraph" else None
        if first is not None:
            segments = _segments(first)
            blank = not "".join(text for text, _ in segments).strip()
        self.paragraph(segments if not blank else " ", style)
        for child in blocks:
            if child is first:
                continue
            self.block(child, False, depth + 1)

    def table(self, node: Any) -> None:
        rows = [row for section in node.children for row in section.children]
        width = max((len(row.children) for row in rows), default=0)
        if not rows or not width:
            return
        table = self.doc.add_table(rows=len(rows), cols=width)
        for r, row in enumerate(rows):
            for c, cell in enumerate(row.children):
                table.cell(r, c).text = " ".join(_inline(cell).split())


def render_docs_docx(markdown: str, title: str) -> bytes:
    """``markdown`` as a .docx (module docstring), titled ``title`` in its core properties."""
    doc = docx.Document()
    doc.core_properties.title = title
    code = doc.styles.add_style("Code", WD_STYLE_TYPE.PARAGRAPH)
    code.base_style = doc.styles["Normal"]
    code.font.name = "Courier New"
    code.font.size = Pt(9)
    renderer = _Renderer(doc)
    for node in _MD.tree(markdown).children:
        renderer.block(node, top=True)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()
