"""The DOCX logic (`knowledge.parsers.docx_extract`, and the package checks of
`knowledge.parsers.docx_package` it runs first): documents built here with python-docx (and XML
python-docx cannot write, injected: notes, tracked changes, fields, content controls, text boxes), the
shared corpus of python-docx's own test files, Markdown runbooks rendered to DOCX
(`tests.helpers.render_docx`), and the hostile files of `tests.helpers.hostile_docx`, each run in a
child process under the parser child's address-space limit (512 MiB) as the service runs it.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import zipfile
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import docx
import pytest
from docx.document import Document
from docx.enum.style import WD_STYLE_TYPE
from docx.opc.constants import CONTENT_TYPE as CT
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.packuri import PackURI
from docx.opc.part import Part
from docx.oxml import parse_xml
from docx.oxml.ns import nsdecls
from docx.text.paragraph import Paragraph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it_pyrs import MarkdownIt

from knowledge.core.normalize import normalize
from knowledge.parsers.docx_extract import (
    MAX_INPUT_BYTES,
    REASONS,
    DocxRefused,
    DocxText,
    extract_docx,
)
from tests.conftest import SHARED_CORPUS, corpus_missing
from tests.helpers.hostile_docx import NAMES, hostile_case, hostile_docx, package
from tests.helpers.render_docx import render_docs_docx

ROOT = Path(__file__).resolve().parents[2]
DOCX_CORPUS = SHARED_CORPUS / "docx"
needs_corpus = pytest.mark.skipif(corpus_missing(DOCX_CORPUS), reason="shared corpus (docx) not present")
needs_docs = pytest.mark.skipif(corpus_missing(SHARED_CORPUS / "docs-etcd") or corpus_missing(
    SHARED_CORPUS / "docs-argocd"), reason="shared corpus (docs-etcd, docs-argocd) not present")
MD = MarkdownIt("commonmark").enable_many(["table", "front_matter"])  # the chunker's parser and options
NS = nsdecls("w")


# --- helpers ------------------------------------------------------------------------------------------


def save(doc: Document) -> bytes:
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def _inline(node: Any) -> str:
    parts = []
    for child in node.children:
        if child.name in ("text", "text_special"):  # text_special: a backslash escape or an entity
            parts.append(child.meta.get("content", ""))
        elif child.name in ("softbreak", "hardbreak"):
            parts.append(" ")
        else:
            parts.append(_inline(child))
    return "".join(parts)


def headings(text: str) -> list[tuple[int, str]]:
    """(level, text) of every top-level heading the chunker's parser finds in the normalized text."""
    return [(int(n.meta["level"]), " ".join(_inline(n).split())) for n in MD.tree(normalize(text)).children
            if n.name in ("heading", "lheading")]


def derived_headings(text: str) -> list[tuple[int, str]]:
    """The heading lines the extractor wrote: the only lines at column 0 that start with ``#`` + space."""
    return [(len(m[1]), m[2]) for m in re.finditer(r"^(#{1,6}) (.*)$", text, re.MULTILINE)]


def _alnum(text: str) -> str:
    return "".join(ch for ch in text if ch.isalnum())


def words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def top_nodes(text: str) -> list[str]:
    return [n.name for n in MD.tree(normalize(text)).children]


def append_xml(paragraph: Paragraph, xml: str) -> None:
    paragraph._p.append(parse_xml(xml))


def add_notes(doc: Document, kind: str, notes: dict[int, str]) -> None:
    """A footnotes or endnotes part (python-docx cannot write one), related from the document part."""
    body = "".join(f'<w:{kind} w:id="{i}"><w:p><w:r><w:{kind}Ref/></w:r><w:r><w:t xml:space="preserve"> {text}'
                   f"</w:t></w:r></w:p></w:{kind}>" for i, text in notes.items())
    separators = (f'<w:{kind} w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:{kind}>'
                  f'<w:{kind} w:type="continuationSeparator" w:id="0"><w:p><w:r><w:continuationSeparator/>'
                  f"</w:r></w:p></w:{kind}>")
    xml = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:{kind}s {NS}>{separators}{body}</w:{kind}s>'
    content_type, reltype = (CT.WML_FOOTNOTES, RT.FOOTNOTES) if kind == "footnote" else (CT.WML_ENDNOTES, RT.ENDNOTES)
    part = Part(PackURI(f"/word/{kind}s.xml"), content_type, xml.encode(), doc.part.package)
    doc.part.relate_to(part, reltype)


def note_reference(paragraph: Paragraph, kind: str, note_id: int) -> None:
    append_xml(paragraph, f'<w:r {NS}><w:{kind}Reference w:id="{note_id}"/></w:r>')


def rich_document() -> bytes:
    """Headings (styles, a style based on Heading 2, an outline level on a Normal paragraph), lists,
    notes, tracked changes, a comment, and the same header and footer on three sections."""
    doc = docx.Document()
    doc.core_properties.title = "Rich document"
    doc.core_properties.created = datetime(2021, 3, 4, 5, 6, tzinfo=UTC)
    doc.core_properties.modified = datetime(2022, 7, 8, 9, 10, tzinfo=UTC)
    doc.add_paragraph("The Rich Title", style="Title")
    doc.add_heading("Chapter one", level=1)
    p = doc.add_paragraph("Intro paragraph with a note")
    note_reference(p, "footnote", 1)
    p.add_run(" and an endnote")
    note_reference(p, "endnote", 1)
    doc.add_heading("Section one point one", level=2)
    custom = doc.styles.add_style("My Sub Heading", WD_STYLE_TYPE.PARAGRAPH)
    custom.base_style = doc.styles["Heading 2"]
    doc.add_paragraph("Custom based on heading two", style="My Sub Heading")
    doc.add_heading("Deep three", level=3)
    outline = doc.add_paragraph("Outline level on normal")
    outline._p.get_or_add_pPr().append(parse_xml(f'<w:outlineLvl {NS} w:val="2"/>'))
    doc.add_paragraph("first bullet", style="List Bullet")
    doc.add_paragraph("nested bullet", style="List Bullet 2")
    doc.add_paragraph("second bullet", style="List Bullet")
    doc.add_paragraph("plain between lists")
    doc.add_paragraph("first number", style="List Number")
    doc.add_paragraph("second number", style="List Number")
    doc.add_paragraph("nested number", style="List Number 2")
    tracked = doc.add_paragraph("Kept ")
    append_xml(tracked, f'<w:ins {NS} w:id="90" w:author="a"><w:r><w:t>inserted words</w:t></w:r></w:ins>')
    append_xml(tracked, f'<w:del {NS} w:id="91" w:author="a"><w:r><w:delText>deleted words</w:delText></w:r></w:del>')
    append_xml(tracked, f'<w:moveFrom {NS} w:id="92" w:author="a"><w:r><w:t>moved away</w:t></w:r></w:moveFrom>')
    append_xml(tracked, f'<w:moveTo {NS} w:id="93" w:author="a"><w:r><w:t> moved here</w:t></w:r></w:moveTo>')
    commented = doc.add_paragraph("")
    doc.add_comment(commented.add_run("Commented text"), text="SECRET COMMENT BODY", author="x")
    doc.add_section()
    doc.add_paragraph("Second section text")
    doc.add_section()
    doc.add_paragraph("Last body paragraph")
    for section in doc.sections:  # three header parts, one text
        section.header.is_linked_to_previous = False
        section.header.paragraphs[0].text = "Shared header"
        section.footer.is_linked_to_previous = False
        section.footer.paragraphs[0].text = "Shared footer"
    add_notes(doc, "footnote", {1: "Footnote text here."})
    add_notes(doc, "endnote", {1: "Endnote text here."})
    return save(doc)


# --- structure --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rich() -> DocxText:
    return extract_docx(rich_document())


def test_headings_come_from_styles_inheritance_and_outline_levels(rich: DocxText) -> None:
    assert headings(rich.text) == [
        (1, "The Rich Title"), (1, "Chapter one"), (2, "Section one point one"), (2, "Custom based on heading two"),
        (3, "Deep three"), (3, "Outline level on normal"), (1, "Notes")]


def test_lists_nest_and_number(rich: DocxText) -> None:
    assert "- first bullet\n  - nested bullet\n- second bullet" in rich.text
    assert "1. first number\n2. second number\n   1. nested number" in rich.text
    tree = MD.tree(normalize(rich.text))
    bullets = next(n for n in tree.children if n.name == "bullet_list")
    assert len(bullets.children) == 2  # two items, the nested bullet inside the first
    assert any(c.name == "bullet_list" for c in bullets.children[0].children)
    ordered = next(n for n in tree.children if n.name == "ordered_list")
    assert len(ordered.children) == 2
    assert any(c.name == "ordered_list" for c in ordered.children[1].children)


def test_notes_are_marked_inline_and_follow_once_at_the_end(rich: DocxText) -> None:
    assert "Intro paragraph with a note[^1] and an endnote[^2]" in rich.text
    notes = rich.text[rich.text.index("# Notes"):]
    assert "[^1] Footnote text here." in notes
    assert "[^2] Endnote text here." in notes
    assert rich.text.count("Footnote text here.") == 1
    assert rich.text.count("Endnote text here.") == 1


def test_tracked_changes_read_as_accepted_and_comments_are_absent(rich: DocxText) -> None:
    assert "Kept inserted words moved here" in rich.text
    assert "deleted words" not in rich.text
    assert "moved away" not in rich.text
    assert "Commented text" in rich.text
    assert "SECRET COMMENT BODY" not in rich.text


def test_the_same_header_on_three_sections_appears_once_first_and_the_footer_once_last(rich: DocxText) -> None:
    text = rich.text
    assert text.count("Shared header") == 1
    assert text.count("Shared footer") == 1
    assert text.index("Shared header") < text.index("# The Rich Title")
    assert text.index("Last body paragraph") < text.index("Shared footer") < text.index("# Notes")


def test_core_properties_give_title_and_the_modified_date(rich: DocxText) -> None:
    assert rich.title == "Rich document"
    assert rich.stated_date == date(2022, 7, 8)


@pytest.mark.parametrize(("created", "modified", "expected"), [
    (datetime(2021, 3, 4, tzinfo=UTC), None, date(2021, 3, 4)),  # no modified: created
    (datetime(2021, 3, 4, tzinfo=UTC), datetime(1900, 1, 1, tzinfo=UTC), date(2021, 3, 4)),  # a zero date is none
    (datetime(1601, 1, 1, tzinfo=UTC), datetime(1980, 1, 1, tzinfo=UTC), None),
    # python-docx's default template's dates: a document python-docx wrote without setting them
    (datetime(2013, 12, 23, 23, 15, tzinfo=UTC), datetime(2013, 12, 23, 23, 15, tzinfo=UTC), None),
])
def test_stated_date_ignores_defaults(created: datetime, modified: datetime | None,
                                      expected: date | None) -> None:
    doc = docx.Document()
    doc.add_paragraph("Some text.")
    props = doc.core_properties
    props.created = created
    if modified is None:
        element = props._element.modified
        if element is not None:
            props._element.remove(element)
    else:
        props.modified = modified
    assert extract_docx(save(doc)).stated_date == expected


def test_title_is_none_when_empty_and_falls_back_to_a_title_paragraph() -> None:
    doc = docx.Document()
    doc.add_paragraph("Body only.")
    assert extract_docx(save(doc)).title is None  # the default template's title is empty
    doc.add_paragraph("Quarterly  Report", style="Title")
    result = extract_docx(save(doc))
    assert result.title == "Quarterly Report"
    assert headings(result.text) == [(1, "Quarterly Report")]


def test_a_package_without_core_properties_has_no_title_or_date() -> None:
    data = package({"word/document.xml": (
        b'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/'
        b'wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>Text</w:t></w:r></w:p></w:body></w:document>')})
    archive = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as stripped:
        for info in archive.infolist():
            blob = archive.read(info)
            if info.filename == "_rels/.rels":
                blob = re.sub(rb'<Relationship [^>]*core-properties"[^>]*/>', b"", blob)
            if info.filename != "docProps/core.xml":
                stripped.writestr(info, blob)
    result = extract_docx(out.getvalue())
    assert (result.text, result.title, result.stated_date) == ("Text\n", None, None)


def test_heading_levels_seven_to_nine_become_level_six() -> None:
    doc = docx.Document()
    for level in range(1, 10):
        doc.add_heading(f"Level {level}", level=level)
    assert [level for level, _ in headings(extract_docx(save(doc)).text)] == [1, 2, 3, 4, 5, 6, 6, 6, 6]


def test_outline_level_nine_on_a_heading_paragraph_makes_it_body_text() -> None:
    doc = docx.Document()
    p = doc.add_heading("Demoted", level=1)
    p._p.get_or_add_pPr().append(parse_xml(f'<w:outlineLvl {NS} w:val="9"/>'))
    doc.add_heading("Kept", level=2)
    assert headings(extract_docx(save(doc)).text) == [(2, "Kept")]


def test_body_text_never_parses_as_a_heading_fence_or_list() -> None:
    doc = docx.Document()
    doc.add_heading("Only heading", level=1)
    for text in ["# not a heading", "```", "~~~ also not a fence", "- not a list", "2019. was a year",
                 "<!-- not a comment", "a | b", "--- | ---", "Setext\n===", "line one\n## inner", "Title\n---"]:
        doc.add_paragraph(text)
    doc.add_paragraph("after")
    text = extract_docx(save(doc)).text
    assert headings(text) == [(1, "Only heading")]
    assert not {"fence", "bullet_list", "ordered_list", "html_block", "table", "hr"} & set(top_nodes(text))
    assert "# not a heading" in text  # verbatim: only whitespace was added
    assert "after" in text


def test_a_heading_ending_in_hashes_keeps_them() -> None:
    doc = docx.Document()
    doc.add_heading("Learning C #", level=2)
    assert headings(extract_docx(save(doc)).text) == [(2, "Learning C #")]


def test_line_breaks_and_tabs_survive() -> None:
    doc = docx.Document()
    doc.add_paragraph("first line\nsecond line")
    doc.add_paragraph("name\tvalue")
    text = extract_docx(save(doc)).text
    assert "first line\nsecond line" in text
    assert "name\tvalue" in text


# --- tables -----------------------------------------------------------------------------------------------


def test_a_table_with_merged_cells_is_a_pipe_table_with_the_merged_content_once() -> None:
    doc = docx.Document()
    table = doc.add_table(rows=3, cols=3)
    for r in range(3):
        for c in range(3):
            table.cell(r, c).text = f"r{r}c{c}"
    table.cell(0, 0).merge(table.cell(0, 1)).text = "wide"  # horizontal: gridSpan
    table.cell(1, 2).merge(table.cell(2, 2)).text = "tall"  # vertical: vMerge
    table.cell(2, 1).text = "pipe | inside"
    text = extract_docx(save(doc)).text
    assert text.strip().split("\n") == [
        "| wide |  | r0c2 |",
        "| --- | --- | --- |",
        "| r1c0 | r1c1 | tall |",
        "| r2c0 | pipe \\| inside |  |",
    ]
    parsed = [n for n in MD.tree(normalize(text)).children if n.name == "table"]
    assert len(parsed) == 1
    cells = [[_inline(cell) for cell in row.children] for section in parsed[0].children for row in section.children]
    assert cells == [["wide", "", "r0c2"], ["r1c0", "r1c1", "tall"], ["r2c0", "pipe | inside", ""]]


def test_a_nested_table_and_a_multi_paragraph_cell_make_one_line_per_row() -> None:
    doc = docx.Document()
    doc.add_heading("Tables", level=1)
    table = doc.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "head a"
    table.cell(0, 1).text = "head b"
    table.cell(1, 0).text = "first paragraph"
    table.cell(1, 0).add_paragraph("second paragraph")
    inner = table.cell(1, 1).add_table(rows=2, cols=2)
    for r in range(2):
        for c in range(2):
            inner.cell(r, c).text = f"in{r}{c}"
    doc.add_paragraph("after the table")
    text = extract_docx(save(doc)).text
    assert "head a | head b\nfirst paragraph second paragraph | [in00 | in01; in10 | in11]" in text
    assert text.count("in00") == 1
    assert headings(text) == [(1, "Tables")]
    assert "table" not in top_nodes(text)


def test_a_deleted_row_is_dropped() -> None:
    doc = docx.Document()
    table = doc.add_table(rows=2, cols=1)
    table.cell(0, 0).text = "kept row"
    table.cell(1, 0).text = "deleted row"
    table.rows[1]._tr.get_or_add_trPr().append(parse_xml(f'<w:del {NS} w:id="5" w:author="a"/>'))
    text = extract_docx(save(doc)).text
    assert "kept row" in text
    assert "deleted row" not in text


# --- fields, content controls, text boxes -------------------------------------------------------------------


def test_fields_keep_their_result_and_drop_page_numbers_and_generated_lists() -> None:
    doc = docx.Document()
    p = doc.add_paragraph("See ")
    append_xml(p, f'<w:r {NS}><w:fldChar w:fldCharType="begin"/></w:r>')
    append_xml(p, f'<w:r {NS}><w:instrText xml:space="preserve"> REF intro \\h </w:instrText></w:r>')
    append_xml(p, f'<w:r {NS}><w:fldChar w:fldCharType="separate"/></w:r>')
    append_xml(p, f'<w:r {NS}><w:t>the introduction</w:t></w:r>')
    append_xml(p, f'<w:r {NS}><w:fldChar w:fldCharType="end"/></w:r>')
    page = doc.add_paragraph("Page ")
    append_xml(page, f'<w:fldSimple {NS} w:instr=" PAGE "><w:r><w:t>7</w:t></w:r></w:fldSimple>')
    toc = doc.add_paragraph()
    append_xml(toc, f'<w:r {NS}><w:fldChar w:fldCharType="begin"/></w:r>')
    append_xml(toc, f'<w:r {NS}><w:instrText> TOC \\o "1-3" </w:instrText></w:r>')
    append_xml(toc, f'<w:r {NS}><w:fldChar w:fldCharType="separate"/></w:r>')
    append_xml(toc, f'<w:r {NS}><w:t>Generated contents line</w:t></w:r>')
    append_xml(toc, f'<w:r {NS}><w:fldChar w:fldCharType="end"/></w:r>')
    link = doc.add_paragraph("Visit ")
    append_xml(link, f'<w:hyperlink {NS} w:anchor="x"><w:r><w:t>the site</w:t></w:r></w:hyperlink>')
    text = extract_docx(save(doc)).text
    assert "See the introduction" in text
    assert "REF" not in text
    assert "Page\n" in text and "7" not in text
    assert "Generated contents line" not in text
    assert "Visit the site" in text


def test_content_controls_keep_their_content_and_a_text_box_appears_once() -> None:
    doc = docx.Document()
    doc.element.body.insert(0, parse_xml(
        f'<w:sdt {NS}><w:sdtPr/><w:sdtContent><w:p><w:r><w:t>Block control text</w:t></w:r></w:p>'
        "</w:sdtContent></w:sdt>"))
    p = doc.add_paragraph("Inline ")
    append_xml(p, f'<w:sdt {NS}><w:sdtContent><w:r><w:t>control</w:t></w:r></w:sdtContent></w:sdt>')
    anchor = doc.add_paragraph("Anchor paragraph")
    box = "<w:txbxContent><w:p><w:r><w:t>Text box words</w:t></w:r></w:p></w:txbxContent>"
    append_xml(anchor, (
        f'<w:r {NS} xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
        'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" '
        'xmlns:v="urn:schemas-microsoft-com:vml"><mc:AlternateContent><mc:Choice Requires="wps">'
        f"<w:drawing><wps:wsp><wps:txbx>{box}</wps:txbx></wps:wsp></w:drawing></mc:Choice>"
        f"<mc:Fallback><w:pict><v:shape><v:textbox>{box}</v:textbox></v:shape></w:pict></mc:Fallback>"
        "</mc:AlternateContent></w:r>"))
    text = extract_docx(save(doc)).text
    assert text.startswith("Block control text")
    assert "Inline control" in text
    assert text.count("Text box words") == 1
    assert text.index("Anchor paragraph") < text.index("Text box words")


def test_code_styled_paragraphs_become_one_fenced_block() -> None:
    doc = docx.Document()
    code = doc.styles.add_style("Code", WD_STYLE_TYPE.PARAGRAPH)
    code.base_style = doc.styles["Normal"]
    doc.add_paragraph("Run this:")
    for line in ["# a shell comment", "if true; then", "    echo done", "", "```", "fi"]:
        doc.add_paragraph(line, style="Code")
    doc.add_heading("Next", level=2)
    text = extract_docx(save(doc)).text
    # one block, indentation and the empty line kept; a fence longer than the backticks inside
    assert "````\n# a shell comment\nif true; then\n    echo done\n\n```\nfi\n````" in text
    assert headings(text) == [(2, "Next")]


def _runs_document(*runs: tuple[str, str | None, str | None]) -> bytes:
    """One paragraph of runs, each (text, font, character style name); the styles are made here."""
    doc = docx.Document()
    paragraph = doc.add_paragraph()
    for text, font, style in runs:
        if style is not None and style not in [s.name for s in doc.styles]:
            doc.styles.add_style(style, WD_STYLE_TYPE.CHARACTER)
        run = paragraph.add_run(text, style=style)
        if font is not None:
            run.font.name = font
    return save(doc)


def test_a_monospace_run_becomes_a_code_span() -> None:
    data = _runs_document(("Run ", None, None), ("kubectl get pods", "Consolas", None), (" now", None, None))
    assert extract_docx(data).text == "Run `kubectl get pods` now\n"
    # adjacent code runs make one span, the whitespace around it stays outside
    data = _runs_document(("Run", None, None), (" kubectl", "Courier New", None),
                          (" get pods ", "JetBrains Mono", None), ("now", None, None))
    assert extract_docx(data).text == "Run `kubectl get pods` now\n"


def test_a_run_in_a_code_character_style_becomes_a_code_span() -> None:
    data = _runs_document(("Run ", None, None), ("kubectl get pods", None, "HTML Code"), (" now", None, None))
    assert extract_docx(data).text == "Run `kubectl get pods` now\n"
    doc = docx.Document()  # a style known only by its font, through basedOn
    mono = doc.styles.add_style("Mono Base", WD_STYLE_TYPE.CHARACTER)
    mono.font.name = "Menlo"
    derived = doc.styles.add_style("Shell Words", WD_STYLE_TYPE.CHARACTER)
    derived.base_style = mono
    paragraph = doc.add_paragraph("Type ")
    paragraph.add_run("ls -l", style="Shell Words")
    assert extract_docx(save(doc)).text == "Type `ls -l`\n"


def test_backticks_inside_inline_code_get_a_longer_fence() -> None:
    data = _runs_document(("Quote ", None, None), ("a `b` c", "Consolas", None), (" here", None, None))
    assert extract_docx(data).text == "Quote ``a `b` c`` here\n"
    data = _runs_document(("Fence ", None, None), ("``` x", "Consolas", None))
    assert extract_docx(data).text == "Fence ```` ``` x ````\n"
    assert _inline(MD.tree(extract_docx(data).text).children[0]) == "Fence ``` x"


def test_runs_in_ordinary_fonts_and_code_paragraphs_are_untouched() -> None:
    data = _runs_document(("Run ", None, None), ("kubectl", "Calibri", None), (" now", "Monotype Corsiva", None),
                          (" and", None, "Emphasis"))
    assert extract_docx(data).text == "Run kubectl now and\n"
    doc = docx.Document()
    code = doc.styles.add_style("Code", WD_STYLE_TYPE.PARAGRAPH)
    code.base_style = doc.styles["Normal"]
    doc.add_paragraph(style="Code").add_run("echo `x`").font.name = "Consolas"
    doc.add_heading("", level=1).add_run("The kubectl tool").font.name = "Consolas"
    text = extract_docx(save(doc)).text
    assert "```\necho `x`\n```" in text
    assert headings(text) == [(1, "The kubectl tool")]
    assert "# The kubectl tool" in text


def test_inline_code_round_trips_through_a_rendered_docx() -> None:
    markdown = "# Pods\n\nRun `kubectl get pods` now, or ``a `b` c``.\n\n- item with `ls -l`\n"
    text = extract_docx(render_docs_docx(markdown, "pods")).text
    assert "Run `kubectl get pods` now, or ``a `b` c``." in text
    assert "- item with `ls -l`" in text
    spans = [n.children[0].meta["content"] for n in MD.tree(text).walk() if n.name == "code_inline"]
    assert spans == ["kubectl get pods", "a `b` c", "ls -l"]


# --- refusals -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("main", [
    "application/vnd.ms-word.document.macroEnabled.main+xml",  # .docm: read, its macros never run
    "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml",  # .dotx
])
def test_macro_enabled_documents_and_templates_are_read_as_documents(main: str) -> None:
    doc = docx.Document()
    doc.add_heading("Macro document", level=1)
    archive = zipfile.ZipFile(io.BytesIO(save(doc)))
    parts = {name: archive.read(name) for name in archive.namelist()}
    parts["[Content_Types].xml"] = parts["[Content_Types].xml"].replace(CT.WML_DOCUMENT_MAIN.encode(), main.encode())
    assert headings(extract_docx(package(parts)).text) == [(1, "Macro document")]


def test_an_svg_image_with_a_doctype_is_not_hostile_xml_but_a_doctype_in_a_part_is() -> None:
    doc = docx.Document()
    doc.add_paragraph("Text beside a picture.")
    archive = zipfile.ZipFile(io.BytesIO(save(doc)))
    parts = {name: archive.read(name) for name in archive.namelist()}
    parts["[Content_Types].xml"] = parts["[Content_Types].xml"].replace(
        b"<Default ", b'<Default Extension="svg" ContentType="image/svg+xml"/><Default ', 1)
    parts["word/media/image1.svg"] = (b'<?xml version="1.0"?><!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" '
                                      b'"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd"><svg/>')
    assert extract_docx(package(parts)).text == "Text beside a picture.\n"
    parts["customXml/item1.xml"] = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "e">]><x>&e;</x>'
    with pytest.raises(DocxRefused) as refused:
        extract_docx(package(parts))
    assert refused.value.reason == "docx_hostile_xml"


def test_input_above_32_mib_is_too_large_before_anything_is_read() -> None:
    with pytest.raises(DocxRefused) as refused:
        extract_docx(b"PK" + bytes(MAX_INPUT_BYTES))
    assert refused.value.reason == "docx_too_large"


def test_an_empty_document_has_no_text() -> None:
    with pytest.raises(DocxRefused) as refused:
        extract_docx(save(docx.Document()))
    assert refused.value.reason == "no_text"


def test_an_unknown_reason_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown refusal reason"):
        DocxRefused("docx_sad", "no")


#: The parser child's limits, as `knowledge.parsers.child` sets them, then one extraction.
_CHILD = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
resource.setrlimit(resource.RLIMIT_CPU, (60, 61))
from knowledge.parsers import docx_extract
docx_extract.preload()
data = sys.stdin.buffer.read()
events = []
try:
    result = docx_extract.extract_docx(data, progress=events.append)
    outcome = "ok" if result.text.strip() else "empty"
except docx_extract.DocxRefused as refused:
    outcome = refused.reason
except MemoryError:
    outcome = "memory"
print(json.dumps({"outcome": outcome, "cpu": time.process_time(), "events": len(events)}))
"""


@pytest.mark.parametrize("name", NAMES)
def test_hostile_file_ends_within_its_allowed_outcomes_under_the_child_limits(name: str) -> None:
    data, allowed = hostile_case(name)
    assert allowed <= REASONS | {"ok"}
    done = subprocess.run([sys.executable, "-W", "error", "-c", _CHILD], input=data, capture_output=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = json.loads(done.stdout)
    assert report["outcome"] in allowed, report


def test_hostile_cases_are_generated_deterministically() -> None:
    first = hostile_docx()
    assert [name for name, _, _ in first] == list(NAMES)
    assert [data for _, data, _ in first] == [hostile_case(name)[0] for name in NAMES]


def test_progress_is_reported_while_a_large_table_is_read() -> None:
    events: list[str] = []
    extract_docx(hostile_case("table_100k_rows")[0], progress=events.append)
    assert events.index("zip") < events.index("parsed") < events.index("blocks 2000")
    assert sum(e.startswith("blocks ") for e in events) >= 100  # 100k rows, 200k paragraphs
    assert all(len(e) < 60 for e in events)  # one progress line of the child protocol each


# --- the corpus ---------------------------------------------------------------------------------------------

CORPUS_FILES = sorted(DOCX_CORPUS.glob("*.docx")) if DOCX_CORPUS.exists() else []


@needs_corpus
def test_corpus_every_file_extracts_or_is_refused_with_a_reason() -> None:
    assert len(CORPUS_FILES) == 46
    outcomes = {}
    for path in CORPUS_FILES:
        try:
            result = extract_docx(path.read_bytes())
        except DocxRefused as refused:
            outcomes[path.name] = refused.reason
            continue
        outcomes[path.name] = "ok"
        assert any(ch.isalnum() for ch in result.text), path.name
        assert "\x00" not in result.text
    assert set(outcomes.values()) <= {"ok", "no_text"}
    assert sum(v == "ok" for v in outcomes.values()) >= 30


def _corpus(name: str) -> str:
    return extract_docx((DOCX_CORPUS / name).read_bytes()).text


@needs_corpus
def test_corpus_by_eye_comments_headers_tables_headings() -> None:
    comments = _corpus("features__steps__test_files__comments-rich-para.docx")
    assert "Some text worthy of note." in comments
    assert "Text with hyperlink" not in comments  # the comments' own text
    headers = _corpus("features__steps__test_files__hdr-header-footer.docx")
    assert headers.count("Header for section-1") == 1
    assert headers.index("Header for section-1") < headers.index("section with header")
    assert headers.rstrip().endswith("Footer for section 1")
    merged = _corpus("features__steps__test_files__tbl-cell-access.docx")
    assert "| 4 |  | 6 |\n|  |  | 9 |" in merged
    assert headings(_corpus("features__steps__test_files__par-known-styles.docx")) == [(1, "Heading 1")]
    assert headings(_corpus("tests__test_files__test.docx")) == [(1, "python-docx was here!")]


# --- Markdown runbooks rendered to DOCX ---------------------------------------------------------------------

RUNBOOKS = ["docs-argocd/operator-manual/security.md", "docs-argocd/developer-guide/running-locally.md",
            "docs-etcd/op-guide/recovery.md", "docs-etcd/op-guide/maintenance.md", "docs-etcd/op-guide/hardware.md"]


@needs_docs
@pytest.mark.parametrize("path", RUNBOOKS)
def test_runbook_rendered_to_docx_gives_back_its_headings_in_order(path: str) -> None:
    markdown = (SHARED_CORPUS / path).read_text(encoding="utf-8")
    result = extract_docx(render_docs_docx(markdown, Path(path).stem))
    want = [(level, words(text)) for level, text in headings(markdown)]
    assert len(want) >= 3
    assert [(level, words(text)) for level, text in headings(result.text)] == want
    assert result.title == Path(path).stem
    code = [n for n in MD.tree(normalize(markdown)).children if n.name == "fence"]
    if code:  # a code block's first line comes back verbatim inside a fence
        first = code[0].meta["content"].split("\n")[0].rstrip()
        assert f"\n{first}\n" in result.text or result.text.count(first)


# --- properties -----------------------------------------------------------------------------------------------

_HEADING_TEXT = st.text(alphabet="abcdefgh XYZ0123456789-.:!?#*_`|>~=", min_size=1, max_size=30).filter(
    lambda t: any(ch.isalnum() for ch in t))
_BODY_TEXT = st.text(alphabet="abc XY019#-*+`~=_|<>!.)([]:\n\t", min_size=0, max_size=40)
_BLOCK = st.one_of(
    st.tuples(st.just("heading"), st.integers(1, 9), _HEADING_TEXT),
    st.tuples(st.just("para"), st.just(0), _BODY_TEXT),
    st.tuples(st.just("bullet"), st.integers(1, 3), _BODY_TEXT),
    st.tuples(st.just("number"), st.integers(1, 3), _BODY_TEXT),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_BLOCK, min_size=1, max_size=12))
def test_generated_documents_keep_their_headings_in_order(blocks: list[tuple[str, int, str]]) -> None:
    doc = docx.Document()
    for kind, level, text in blocks:
        if kind == "heading":
            doc.add_heading(text, level=level)
        elif kind == "para":
            doc.add_paragraph(text)
        else:
            base = "List Bullet" if kind == "bullet" else "List Number"
            doc.add_paragraph(text, style=base + (f" {level}" if level > 1 else ""))
    try:
        result = extract_docx(save(doc))
    except DocxRefused as refused:
        assert refused.reason == "no_text"
        return
    # compared by their letters and digits: Markdown's inline syntax (code spans, emphasis) takes punctuation
    want = [(min(level, 6), _alnum(text)) for kind, level, text in blocks if kind == "heading" and _alnum(text)]
    assert [(level, _alnum(text)) for level, text in derived_headings(result.text)] == want
    try:
        found = headings(result.text)
    except BaseException as exc:  # markdown-it.rs panics on some text ("[ x ` y"); the chunker then reads
        if type(exc).__name__ != "PanicException":  # it as plain text (`knowledge.core.chunking.chunk_text`)
            raise
        return
    assert [(level, _alnum(text)) for level, text in found] == want


_SNIPPETS = [
    "<w:p>", "</w:p>", "<w:r>", "</w:r>", "<w:t>x</w:t>", "<w:tbl>", "</w:tbl>", "<w:tr>", "</w:tr>", "<w:tc>",
    "</w:tc>",
    '<w:gridSpan w:val="99999999"/>', "<w:vMerge/>", '<w:numPr><w:ilvl w:val="-4"/><w:numId w:val="1"/></w:numPr>',
    '<w:pStyle w:val="Heading1"/>', '<w:outlineLvl w:val="x"/>', '<w:fldChar w:fldCharType="begin"/>',
    '<w:fldChar w:fldCharType="end"/>', '<w:footnoteReference w:id="1"/>', "<w:sdt><w:sdtContent>",
    "</w:sdtContent></w:sdt>", '<w:sym w:char="zz"/>', '<w:sym w:char="D800"/>', "<w:br/>", "&#0;", "&lt;",
    "<!DOCTYPE x>", "\u0000", "\ud7ff", "<w:del>", "</w:del>", "<w:txbxContent>", "</w:txbxContent>",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["word/document.xml", "word/styles.xml", "word/numbering.xml", "[Content_Types].xml"]),
       st.integers(0, 100_000), st.lists(st.sampled_from(_SNIPPETS), min_size=1, max_size=6),
       st.integers(0, 200))
def test_damaged_xml_raises_nothing_but_docx_refused(part: str, at: int, junk: list[str], cut: int) -> None:
    archive = zipfile.ZipFile(io.BytesIO(_small_document()))
    parts = {name: archive.read(name) for name in archive.namelist()}
    xml = parts[part]
    at %= len(xml)
    parts[part] = xml[:at] + "".join(junk).encode("utf-8", "surrogatepass") + xml[at + cut:]
    data = package(parts)
    try:
        result = extract_docx(data)
    except DocxRefused as refused:
        assert refused.reason in REASONS
    else:
        assert any(ch.isalnum() for ch in result.text)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10_000), st.binary(min_size=1, max_size=64))
def test_damaged_packages_raise_nothing_but_docx_refused(at: int, junk: bytes) -> None:
    data = bytearray(_small_document())
    at %= len(data)
    data[at:at + len(junk)] = junk
    try:
        result = extract_docx(bytes(data))
    except DocxRefused as refused:
        assert refused.reason in REASONS
    else:
        assert any(ch.isalnum() for ch in result.text)


_SMALL: list[bytes] = []


def _small_document() -> bytes:
    if not _SMALL:
        doc = docx.Document()
        doc.add_heading("Heading", level=1)
        doc.add_paragraph("A paragraph of text.", style="List Bullet")
        doc.add_table(rows=1, cols=2).cell(0, 0).text = "cell"
        _SMALL.append(package({"word/document.xml": doc.part.blob}, compresslevel=0))
    return _SMALL[0]


def test_rows_and_cells_inside_content_controls_and_custom_xml_are_read_in_order() -> None:
    doc = docx.Document()
    table = doc.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Plain cell", "Second cell"
    cell = '<w:tc><w:p><w:r><w:t>{}</w:t></w:r></w:p></w:tc>'
    table._tbl.append(parse_xml(  # a row inside a content control, one of its cells inside custom XML
        f'<w:sdt {NS}><w:sdtContent><w:tr>{cell.format("Controlled row")}'
        f'<w:customXml w:element="x">{cell.format("Custom cell")}</w:customXml></w:tr></w:sdtContent></w:sdt>'))
    text = extract_docx(save(doc)).text
    assert text.index("Plain cell") < text.index("Second cell") < text.index("Controlled row") \
        < text.index("Custom cell")
