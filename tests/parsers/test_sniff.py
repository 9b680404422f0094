"""Media type from content (issue 34, item 4): magic bytes and structure, not the name alone."""

from __future__ import annotations

import io
import zipfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from knowledge.parsers.docx_extract import WORD_MAIN_TYPES
from knowledge.parsers.sniff import (
    DOCX,
    HTML,
    OCTET,
    OLE,
    OOXML_PACKAGES,
    PDF,
    WORD_MAIN_PARTS,
    XHTML,
    ZIP,
    routed,
    sniff_media_type,
)
from tests.conftest import SHARED_CORPUS, corpus_missing
from tests.helpers.hostile_docx import hostile_case, package

WORD_TYPES = ('<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
              '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
              'officedocument.wordprocessingml.document.main+xml"/></Types>')
SHEET_TYPES = WORD_TYPES.replace("/word/document.xml", "/xl/workbook.xml").replace(
    "wordprocessingml.document.main", "spreadsheetml.sheet.main")


def zipped(entries: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in entries.items():
            archive.writestr(name, text)
    return buffer.getvalue()


@pytest.mark.parametrize(("data", "declared", "expected"), [
    # an .html that is really a PDF; a PDF whose header follows some junk (readers accept it)
    (b"%PDF-1.7\n1 0 obj", "text/html", PDF),
    (b"\x00\x00junk%PDF-1.4\n", "application/octet-stream", PDF),
    # a .docx that is a Word package; one that is a spreadsheet; one that is a ZIP of nothing Office
    (zipped({"[Content_Types].xml": WORD_TYPES, "word/document.xml": "<w:document/>"}), "application/zip", DOCX),
    (zipped({"[Content_Types].xml": SHEET_TYPES}), DOCX,
     "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    (zipped({"readme.txt": "hello"}), DOCX, ZIP),
    (b"PK\x03\x04 truncated", DOCX, DOCX),  # a broken Word package: its extractor says why
    (b"PK\x03\x04 truncated", "application/octet-stream", ZIP),
    # a legacy or encrypted Office file; images
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500), DOCX, OLE),
    (b"\x89PNG\r\n\x1a\n....", "text/html", "image/png"),
    # markup: after a BOM, white space, comments; XHTML by its namespace
    (b"\xef\xbb\xbf  <!-- saved -->\n<!DOCTYPE html><html><body>x</body></html>", "text/plain", HTML),
    (b"<HTML><HEAD><TITLE>t</TITLE></HEAD></HTML>", "application/octet-stream", HTML),
    ("\ufeff<html><body>x</body></html>".encode("utf-16-le"), "text/plain", HTML),
    (b'<?xml version="1.0"?>\n<html xmlns="http://www.w3.org/1999/xhtml"><body/></html>', "text/xml", XHTML),
    # what is not markup keeps its declared type (its extractor decides)
    (b"# Runbook\n\n<html> in prose is not a page\n", "text/markdown", "text/markdown"),
    (b"not a zip at all", DOCX, DOCX),
    (b"", "text/plain", "text/plain"),
])
def test_the_bytes_decide_what_a_source_is(data: bytes, declared: str, expected: str) -> None:
    assert sniff_media_type(data, declared) == expected


def test_a_zip_bomb_is_never_inflated_to_be_sniffed() -> None:
    # [Content_Types].xml that claims 2 GiB: a ZIP, not read (the Word extractor refuses it with its reason)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive, \
            archive.open("[Content_Types].xml", "w", force_zip64=True) as entry:
        for _ in range(64):
            entry.write(bytes(1024 * 1024))
    assert sniff_media_type(buffer.getvalue(), "application/zip") == ZIP


def test_routing_keeps_the_declared_parameters_when_the_content_agrees() -> None:
    assert routed("text/html; charset=windows-1252", HTML) == "text/html; charset=windows-1252"
    assert routed("text/html; charset=utf-8", PDF) == PDF


@given(st.binary(max_size=2048), st.sampled_from(["text/plain", "text/markdown", HTML, DOCX, PDF]))
def test_sniffing_never_fails_and_names_a_type(data: bytes, declared: str) -> None:
    found = sniff_media_type(data, declared)
    assert "/" in found
    assert found == declared or found in {PDF, HTML, XHTML, DOCX, ZIP, OLE} or found.startswith(
        ("image/", "application/"))


# --- Word packages: the one sniffer the DOCX extractor's inputs are routed by ---------------------------------


def test_sniffing_knows_the_main_parts_the_docx_extractor_reads() -> None:
    assert {t.lower() for t in WORD_MAIN_TYPES} == set(WORD_MAIN_PARTS)


def _declaring(main: str) -> bytes:
    """python-docx's default document, its main part declared as ``main``."""
    types = zipfile.ZipFile(io.BytesIO(package())).read("[Content_Types].xml")
    replaced = types.replace(WORD_MAIN_PARTS[0].encode(), main.encode())
    assert main.encode() in replaced
    return package({"[Content_Types].xml": replaced})


@pytest.mark.parametrize("main", sorted(WORD_MAIN_TYPES))  # .docx, .docm, .dotx, .dotm, spelt as Office writes them
def test_a_word_package_is_docx_whatever_its_main_part(main: str) -> None:
    data = _declaring(main)
    assert sniff_media_type(data, OCTET) == DOCX
    assert sniff_media_type(data, ZIP) == DOCX


# Declared as nothing in particular: a declared DOCX stands for bytes that are not a ZIP, or a broken
# one (the extractor refuses them with its reason).
@pytest.mark.parametrize(("name", "expected"), [
    ("xlsx_spreadsheet", OOXML_PACKAGES["spreadsheetml"]),
    ("zip_not_ooxml", ZIP),
    ("truncated_zip", ZIP),
    ("cfb_encrypted", OLE),
    ("not_a_zip", OCTET),
])
def test_other_files_a_docx_extractor_would_refuse_are_not_word(name: str, expected: str) -> None:
    assert sniff_media_type(hostile_case(name)[0], OCTET) == expected


@pytest.mark.skipif(corpus_missing(SHARED_CORPUS / "docx"), reason="shared corpus (docx) not present")
def test_every_document_of_the_docx_corpus_is_word() -> None:
    files = sorted((SHARED_CORPUS / "docx").glob("*.docx"))
    assert files
    for path in files:
        assert sniff_media_type(path.read_bytes(), OCTET) == DOCX, path.name


_STORED_WORD: list[bytes] = []


def _stored_word() -> bytes:
    """python-docx's default document at compression level 0: damage lands in its XML as it is."""
    if not _STORED_WORD:
        _STORED_WORD.append(package(compresslevel=0))
    return _STORED_WORD[0]


_SNIPPETS = ["<Override ", "/>", "</Types>", "<!DOCTYPE x>", '<!DOCTYPE x [<!ENTITY e "e">]>', "&e;", "&#0;",
             "\u0000", "\ud7ff", "wordprocessingml", "spreadsheetml", "ContentType=", '"', "<"]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 100_000), st.lists(st.sampled_from(_SNIPPETS), min_size=1, max_size=6), st.integers(0, 200))
def test_damaged_content_types_are_sniffed_without_raising(at: int, junk: list[str], cut: int) -> None:
    archive = zipfile.ZipFile(io.BytesIO(_stored_word()))
    types = archive.read("[Content_Types].xml")
    at %= len(types)
    damaged = types[:at] + "".join(junk).encode("utf-8", "surrogatepass") + types[at + cut:]
    found = sniff_media_type(package({"[Content_Types].xml": damaged}, compresslevel=0), OCTET)
    assert found in {DOCX, ZIP, *OOXML_PACKAGES.values()}


# zipfile lets zlib.error escape when [Content_Types].xml's deflate stream is damaged (the example).
@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10_000), st.binary(min_size=1, max_size=64))
@example(at=28, junk=b"\x01")  # [Content_Types].xml's extra field one byte long: its deflate read late
def test_damaged_word_packages_are_sniffed_without_raising(at: int, junk: bytes) -> None:
    data = bytearray(_stored_word())
    at %= len(data)
    data[at:at + len(junk)] = junk
    assert "/" in sniff_media_type(bytes(data), DOCX)

