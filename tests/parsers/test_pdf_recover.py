"""Recovering what can be recovered (`knowledge.parsers.pdf_extract`, in process): files refused for a loop in
their structure (a page tree whose /Kids loop, an xref chain whose /Prev loops) are extracted from
pikepdf's repair, while encrypted files are still refused and never rewritten; and combining marks
(Thai tone marks and vowel signs) never start a line or a paragraph, with no character lost.

The three corpus files recovered here are in the manifest's ``bomb`` category, which
``tests/parsers/test_pdf_extract.py`` does not parse in process; these three are small and quick.
"""

from __future__ import annotations

import collections
import io
import re
import unicodedata
from pathlib import Path

import pikepdf
import pytest
from pikepdf import Array, Dictionary, Name

from knowledge.parsers import pdf_extract
from knowledge.parsers.pdf_extract import PdfRefused, extract_pdf_text, inspect_pdf_bytes
from tests.conftest import corpus_missing

PDFS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "pdf"
needs_corpus = pytest.mark.skipif(corpus_missing(PDFS / "MANIFEST.tsv"), reason="shared corpus not present")
DERIVED_HEADING = re.compile(r"^#{1,6} .+$", re.MULTILINE)


def refusal(data: bytes) -> str:
    with pytest.raises(PdfRefused) as refused:
        extract_pdf_text(data)
    return refused.value.reason


# --- loops in the structure ---------------------------------------------------------------------------


@needs_corpus
@pytest.mark.parametrize(("name", "pages", "words"), [
    # pdfminer alone reads "Potato"; qpdf refuses the /Kids loop (Kids [3 0 R 2 0 R] under 2 0 obj).
    ("qpdf__pages-loop.pdf", 1, ["Potato"]),
    # 2 -> [page, 3], 3 -> 4 -> 5 -> 3: pdfminer alone reads "Testcase: 'Pages loop'" (22 characters).
    ("pdfjs__Pages-tree-refs.pdf", 1, ["Testcase", "Pages loop"]),
    # The last trailer's /Prev is its own xref: pdfminer recursed without end. 30 pages "Potato N",
    # the first as the incremental update left it.
    ("qpdf__append-xref-loop.pdf", 30, ["Potato 0 new", "Potato 1\n", "Potato 29\n"]),
])
def test_a_corpus_file_with_a_structural_loop_is_recovered(name: str, pages: int, words: list[str]) -> None:
    data = (PDFS / name).read_bytes()
    text = extract_pdf_text(data)
    for word in words:
        assert word in text
    assert text.count("\f") == pages == inspect_pdf_bytes(data).pages  # inspection sees the same repair


def page_tree_with_a_loop(encryption: pikepdf.Encryption | None = None, loops: int = 1) -> bytes:
    """Two pages with text; the root /Pages lists page 1 and an intermediate node whose /Kids are page
    2 and the root again (``loops`` times): a loop back to the root, which qpdf refuses to walk."""
    pdf = pikepdf.new()
    font = pdf.make_indirect(Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica))
    for words in ("first page of the loop", "second page of the loop"):
        page = pdf.add_blank_page(page_size=(612, 792))
        page.Resources = Dictionary(Font=Dictionary(F1=font))
        page.Contents = pdf.make_stream(b"BT /F1 12 Tf 72 700 Td (%s) Tj ET" % words.encode())
    root = pdf.Root.Pages
    first, second = list(root.Kids)
    middle = pdf.make_indirect(Dictionary(Type=Name.Pages, Kids=Array([second, *[root] * loops]), Count=1, Parent=root))
    second.Parent = middle
    root.Kids = Array([first, middle])
    buffer = io.BytesIO()
    pdf.save(buffer, encryption=encryption)
    data = buffer.getvalue()
    with pikepdf.open(io.BytesIO(data), inherit_page_attributes=False) as check, pytest.raises(pikepdf.PdfError):
        len(check.pages)  # the loop is really there
    return data


def test_a_page_tree_that_loops_back_to_its_root_is_rebuilt_with_each_page_once() -> None:
    data = page_tree_with_a_loop()
    text = extract_pdf_text(data)
    assert text.count("\f") == 2  # each page once: the walk did not follow the loop
    assert text.index("first page of the loop") < text.index("second page of the loop")  # document order
    assert inspect_pdf_bytes(data).pages == 2
    assert extract_pdf_text(data, (1, 2)) == text[text.index("\f") + 3:]  # ranges of the repaired file


def test_a_repair_is_bounded_by_pages_and_page_tree_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    data = page_tree_with_a_loop()
    monkeypatch.setattr(pdf_extract, "MAX_PAGES", 1)
    assert refusal(data) == "pdf_too_large"
    monkeypatch.undo()
    # A /Kids array of 20,000 entries back to the root: the walk stops at its budget, not at the end.
    with pytest.raises(PdfRefused) as refused:
        extract_pdf_text(page_tree_with_a_loop(loops=20_000))
    assert refused.value.reason == "pdf_unreadable"
    assert "page tree" in refused.value.message and str(pdf_extract.MAX_PAGE_TREE_NODES) in refused.value.message


def test_a_page_tree_without_pages_is_still_unreadable_with_a_clear_message() -> None:
    pdf = pikepdf.new()
    pdf.add_blank_page()  # pikepdf saves a page tree it could walk once: the loop replaces it after
    loop = pdf.make_indirect(Dictionary(Type=Name.Pages, Count=1))
    loop.Kids = Array([loop])
    pdf.Root.Pages = loop
    buffer = io.BytesIO()
    pdf.save(buffer)
    with pytest.raises(PdfRefused) as refused:
        extract_pdf_text(buffer.getvalue())
    assert refused.value.reason == "pdf_unreadable"
    assert refused.value.message == "cannot read its page tree: PdfError; no page is reachable from its page tree"


def test_an_encrypted_file_is_refused_never_repaired() -> None:
    # Owner-only encryption opens without a password: the loop would be repairable, the file is not.
    data = page_tree_with_a_loop(pikepdf.Encryption(owner="owner", user="", aes=True))
    assert refusal(data) == "pdf_encrypted"
    with pytest.raises(PdfRefused) as refused:
        inspect_pdf_bytes(data)
    assert refused.value.reason == "pdf_encrypted"
    with pytest.raises(PdfRefused) as refused:  # the repair itself refuses it too
        pdf_extract._repair(data, pdf_extract._Repairable("a loop"))
    assert refused.value.reason == "pdf_encrypted"


@needs_corpus
@pytest.mark.parametrize("name", ["pypdf__r6-empty-password.pdf", "pypdf__r6-both-passwords.pdf"])
def test_an_encrypted_corpus_file_is_still_refused(name: str) -> None:
    data = (PDFS / name).read_bytes()
    assert refusal(data) == "pdf_encrypted"
    with pytest.raises(PdfRefused) as refused:
        pdf_extract._repair(data, pdf_extract._Repairable("a loop"))
    assert refused.value.reason == "pdf_encrypted"


# --- combining marks ----------------------------------------------------------------------------------


def is_mark(ch: str) -> bool:
    return unicodedata.category(ch).startswith("M")


def non_space(text: str) -> collections.Counter[str]:
    return collections.Counter(ch for ch in text if not ch.isspace())


@needs_corpus
def test_thai_combining_marks_stay_with_their_base_and_nothing_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    from pdfminer.high_level import extract_text

    data = (PDFS / "pdfjs__issue13211.pdf").read_bytes()
    text = extract_pdf_text(data)
    assert [line for line in text.split("\n") if line and is_mark(line[0])] == []
    assert [block for block in text.split("\n\n") if block.strip("\n") and is_mark(block.strip("\n")[0])] == []
    assert "มากที่" in text and "ต่อไปนี้" in text  # a mark pdfminer put on the next line is back on its word
    # Nothing lost or added but whitespace: the same characters as without the fix (41 lines started
    # with a mark then) ...
    monkeypatch.setattr(pdf_extract, "_attach_marks", lambda lines: lines)
    unfixed = extract_pdf_text(data)
    assert sum(1 for line in unfixed.split("\n") if line and is_mark(line[0])) > 0
    assert non_space(text) == non_space(unfixed)
    # ... and, the outline's heading aside, the very characters of pdfminer's own text (166 marks).
    body = DERIVED_HEADING.sub("", text)
    assert non_space(body) == non_space(extract_text(io.BytesIO(data)))
    assert sum(n for ch, n in non_space(body).items() if is_mark(ch)) == 166


def lines_of(*texts: str) -> list[pdf_extract._Line]:
    return [pdf_extract._Line(text, 10.0, 700.0 - i * 12, 690.0 - i * 12, 72.0, box=i) for i, text in enumerate(texts)]


def test_marks_that_start_a_line_move_to_the_end_of_the_line_before() -> None:
    moved = pdf_extract._attach_marks(lines_of("ตั", "\u0e49งฉาก", "ที", "\u0e48", "e", "\u0301 \u0300x"))
    assert [line.text for line in moved] == ["ตั\u0e49", "งฉาก", "ที\u0e48", "e\u0301\u0300", "x"]
    # A page's first line has no line before it: its marks sit on a no-break space (whitespace).
    first = pdf_extract._attach_marks(lines_of("\u0e48มี", "next"))
    assert [line.text for line in first] == ["\u00a0\u0e48มี", "next"]
