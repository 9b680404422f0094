"""Media type from content (issue 34, item 4): magic bytes and structure, not the name alone."""

from __future__ import annotations

import io
import zipfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge.parsers.sniff import DOCX, HTML, OLE, PDF, XHTML, ZIP, routed, sniff_media_type

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
    (b"PK\x03\x04 truncated", DOCX, ZIP),
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
    assert sniff_media_type(buffer.getvalue(), DOCX) == ZIP


def test_routing_keeps_the_declared_parameters_when_the_content_agrees() -> None:
    assert routed("text/html; charset=windows-1252", HTML) == "text/html; charset=windows-1252"
    assert routed("text/html; charset=utf-8", PDF) == PDF


@given(st.binary(max_size=2048), st.sampled_from(["text/plain", "text/markdown", HTML, DOCX, PDF]))
def test_sniffing_never_fails_and_names_a_type(data: bytes, declared: str) -> None:
    found = sniff_media_type(data, declared)
    assert "/" in found
    assert found == declared or found in {PDF, HTML, XHTML, DOCX, ZIP, OLE} or found.startswith(
        ("image/", "application/"))
