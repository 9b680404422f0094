"""A source's media type from its content (magic bytes and structure), not from its name alone.

The name or the caller's declared type says what a file claims to be; the bytes say what it is. A
``.docx`` that is not a ZIP, an ``.html`` that is really a PDF, a ZIP that is not a Word document,
a legacy or encrypted Office file — each is found here, before an extractor is chosen, and routed
to the extractor of what it is (or refused as ``unsupported_media_type`` when nothing reads it).

Rules, in order (`sniff_media_type`):

1. Binary signatures win over any declaration: ``%PDF-`` in the first 1 KiB (as PDF readers
   accept) is ``application/pdf``; a ZIP is a Word document (`DOCX`) only when its
   ``[Content_Types].xml`` declares a WordprocessingML main part, another OOXML package (a
   spreadsheet, slides) or any other ZIP keeps a type no extractor reads; an OLE compound file
   (legacy ``.doc``, or an *encrypted* OOXML file, which Office wraps in one) is
   ``application/x-ole-storage``; images, gzip and others are named for what they are.
2. Markup: text that opens (after a byte-order mark, white space and comments) with
   ``<!doctype html``, ``<html``, ``<head`` or ``<body`` is ``text/html``; an XHTML document
   (``<?xml`` … ``<html xmlns="http://www.w3.org/1999/xhtml"``) is ``application/xhtml+xml``.
3. Otherwise the declared type stands: a text type is decoded (and refused) by its own extractor.

Pure and bounded: it reads at most the first `HEAD_BYTES` and, for a ZIP, its central directory
and one small entry (`MAX_CONTENT_TYPES_BYTES`), never inflating anything larger.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib

from knowledge.parsers.base import base_media_type

PDF = "application/pdf"
HTML = "text/html"
XHTML = "application/xhtml+xml"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
ZIP = "application/zip"
OLE = "application/x-ole-storage"
OCTET = "application/octet-stream"
HEAD_BYTES = 4096
MAX_CONTENT_TYPES_BYTES = 1024 * 1024
#: The content types of a Word document's main part (a document, a macro-enabled document, a
#: template): the OOXML structure that makes a ZIP a ``.docx``.
WORD_MAIN_PARTS = (
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml",
    "application/vnd.ms-word.document.macroenabled.main+xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml",
    "application/vnd.ms-word.template.macroenabledtemplate.main+xml",
)
OOXML_PACKAGES = {
    "spreadsheetml": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "presentationml": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
}
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", OLE),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"\x1f\x8b", "application/gzip"),
    (b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed"),
    (b"Rar!\x1a\x07", "application/vnd.rar"),
    (b"\x7fELF", "application/x-executable"),
)
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")
#: What may precede an HTML document's first tag: white space, comments, an XML declaration.
_PROLOGUE = re.compile(rb"(?:\s+|<!--.*?-->|<\?xml[^>]*\?>)*", re.DOTALL)
_HTML_OPENING = re.compile(rb"<(?:!doctype\s+html|html|head|body)[\s>/]", re.IGNORECASE)
_XHTML_NS = re.compile(rb"<html[^>]*xmlns\s*=\s*[\"']http://www\.w3\.org/1999/xhtml", re.IGNORECASE)


def sniff_media_type(data: bytes, declared: str) -> str:
    """The media type of ``data`` (a source's whole bytes, or at least its head; a ZIP needs the
    whole) given the ``declared`` one. See the module docstring for the rules."""
    head = data[:HEAD_BYTES]
    if b"%PDF-" in head[:1024]:
        return PDF
    if head.startswith(_ZIP_MAGIC):
        found = zip_media_type(data)
        # A broken ZIP declared as an Office package is that package, broken: its extractor says why.
        if found is None:
            return declared if base_media_type(declared) in (DOCX, *OOXML_PACKAGES.values()) else ZIP
        return found
    for magic, media_type in _SIGNATURES:
        if head.startswith(magic):
            return media_type
    markup = _markup_type(head)
    if markup is not None:
        return markup
    return declared


def _markup_type(head: bytes) -> str | None:
    text, utf16 = head, None
    for bom in _BOMS:
        if head.startswith(bom):
            text = head[len(bom):]
            utf16 = bom if bom != _BOMS[0] else None
            break
    if utf16 is not None:  # UTF-16: look at the text through its ASCII bytes
        text = text.decode("utf-16-le" if utf16 == b"\xff\xfe" else "utf-16-be", "ignore").encode("ascii", "ignore")
    start = _PROLOGUE.match(text)
    rest = text[start.end() if start else 0:]
    if not _HTML_OPENING.match(rest):
        return None
    return XHTML if text.lstrip().startswith(b"<?xml") and _XHTML_NS.search(text) else HTML


def zip_media_type(data: bytes) -> str | None:
    """A ZIP's media type from its structure: a Word document when its ``[Content_Types].xml``
    declares a WordprocessingML main part; another OOXML package for what it is; else a ZIP; None
    when it is not a sound ZIP (damaged, truncated). Reads the central directory and that one entry,
    bounded, never inflating more than `MAX_CONTENT_TYPES_BYTES`."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            info = archive.getinfo("[Content_Types].xml")
            if info.file_size > MAX_CONTENT_TYPES_BYTES:
                return ZIP
            with archive.open(info) as entry:
                types = entry.read(MAX_CONTENT_TYPES_BYTES + 1).lower()
    except KeyError:  # a sound ZIP without content types: no Office package
        return ZIP
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError, RuntimeError, ValueError):
        return None  # not a sound ZIP
    if any(part.encode() in types for part in WORD_MAIN_PARTS):
        return DOCX
    for marker, media_type in OOXML_PACKAGES.items():
        if marker.encode() in types:
            return media_type
    return ZIP


def routed(declared: str, sniffed: str) -> str:
    """The media type a source is extracted as: what it is, keeping the declared type's parameters
    (a charset) when the content agrees with it."""
    return declared if base_media_type(declared) == sniffed else sniffed
