"""Hostile and degenerate .docx files, generated deterministically in memory for the DOCX parser's
tests (`knowledge.parsers.docx_extract`): each case is ``(name, bytes, allowed outcomes)``, an
outcome being ``"ok"`` (text extracted) or a `DocxRefused` reason.

Cheap to make (well under 3 s and a few tens of MB for all): the bombs are crafted, not compressed —
a deflate stream of zeros is one full-flushed block of zeros repeated, and the archives around them
are written here field by field (`_raw_zip`), so a 1 GiB entry costs ~1 MB and no inflating at all.
Honest packages start from python-docx's own default template (its parts read, not re-saved:
python-docx stamps the time into what it writes) and are zipped with fixed timestamps.
"""

from __future__ import annotations

import functools
import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import docx

#: Every case, in the order `hostile_docx` returns them.
NAMES = (
    "bomb_1gib_zeros", "bomb_ratio_100mib", "lying_header_small", "lying_header_large", "entries_100k",
    "billion_laughs", "external_entity_file", "external_entity_http", "doctype_utf16_styles",
    "nested_100k", "not_a_zip", "zip_not_ooxml", "xlsx_spreadsheet", "truncated_zip", "cfb_encrypted",
    "cfb_header_only", "empty_document", "paragraph_10mb", "text_node_10mib", "table_100k_rows",
    "too_large_input",
)

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


@functools.cache
def _template_parts() -> tuple[tuple[str, bytes], ...]:
    path = Path(docx.__file__).parent / "templates" / "default.docx"
    with zipfile.ZipFile(path) as archive:
        return tuple((info.filename, archive.read(info)) for info in archive.infolist())


def package(replace: dict[str, bytes] | None = None, compresslevel: int = 6) -> bytes:
    """python-docx's default document with some parts replaced (or added), zipped deterministically."""
    parts = dict(_template_parts())
    parts.update(replace or {})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=compresslevel) as archive:
        for name, blob in parts.items():
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, blob, compresslevel=compresslevel)
    return out.getvalue()


def document_xml(body: str, prolog: str = "") -> bytes:
    """A ``word/document.xml`` with ``body`` (WordprocessingML, prefix ``w``) inside ``w:body``."""
    return (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>{prolog}'
            f'<w:document xmlns:w="{_W}"><w:body>{body}</w:body></w:document>').encode()


def _raw_zip(entries: list[tuple[str, int, bytes, int, int]]) -> bytes:
    """A ZIP written field by field: (name, method, compressed bytes, CRC, declared size) each, so a
    declared size may lie and a CRC need not be computed over a gigabyte."""
    out = bytearray()
    central = bytearray()
    for name, method, data, crc, size in entries:
        raw = name.encode()
        offset = len(out)
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, len(data), size, len(raw), 0)
        out += raw + data
        central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, method, 0, 0x21, crc, len(data),
                               size, len(raw), 0, 0, 0, 0, 0, offset)
        central += raw
    count = min(len(entries), 0xFFFF)
    out += central + struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, len(central), len(out), 0)
    return bytes(out)


def _zeros_deflated(megabytes: int) -> bytes:
    """A raw deflate stream of ``megabytes`` MiB of zeros: one full-flushed MiB, repeated."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    zero = bytes(1 << 20)
    compressor.compress(zero)
    first = compressor.flush(zlib.Z_FULL_FLUSH)
    compressor.compress(zero)
    block = compressor.flush(zlib.Z_FULL_FLUSH)  # after a full flush: no history, the same bytes each time
    return first + block * (megabytes - 1) + compressor.flush()


_CONTENT_TYPES = (b'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/'
                  b'2006/content-types"><Default Extension="xml" ContentType="application/xml"/>'
                  b'<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
                  b'officedocument.wordprocessingml.document.main+xml"/></Types>')


def _bomb(megabytes: int, declared: int | None = None) -> bytes:
    stream = _zeros_deflated(megabytes)
    types = zlib.compressobj(6, zlib.DEFLATED, -15)
    packed = types.compress(_CONTENT_TYPES) + types.flush()
    return _raw_zip([
        ("[Content_Types].xml", 8, packed, zlib.crc32(_CONTENT_TYPES), len(_CONTENT_TYPES)),
        ("word/document.xml", 8, stream, 0, megabytes << 20 if declared is None else declared),
    ])


def _lying(declared: int) -> bytes:
    """A package whose document.xml (~200 KB of paragraphs) declares ``declared`` bytes in both its
    local header and its central-directory record."""
    paragraphs = "".join(f"<w:p><w:r><w:t>paragraph {i} of the lying document</w:t></w:r></w:p>"
                         for i in range(4000))
    data = bytearray(package({"word/document.xml": document_xml(paragraphs)}))
    size, offset = struct.unpack_from("<II", data, len(data) - 22 + 12)
    pos = offset
    while pos < offset + size:
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, pos + 28)
        if data[pos + 46:pos + 46 + name_len] == b"word/document.xml":
            header = struct.unpack_from("<I", data, pos + 42)[0]
            struct.pack_into("<I", data, pos + 24, declared)
            struct.pack_into("<I", data, header + 22, declared)
        pos += 46 + name_len + extra_len + comment_len
    return bytes(data)


def _entries(count: int) -> bytes:
    return _raw_zip([(f"word/media/f{i}.bin", 0, b"", 0, 0) for i in range(count)])


def _laughs() -> bytes:
    entities = '<!ENTITY lol "lol">' + "".join(
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">' for i in range(1, 10))
    return package({"word/document.xml": document_xml(
        "<w:p><w:r><w:t>&lol9;</w:t></w:r></w:p>", f"<!DOCTYPE w:document [{entities}]>")})


def _external(url: str) -> bytes:
    return package({"word/document.xml": document_xml(
        "<w:p><w:r><w:t>&xxe;</w:t></w:r></w:p>", f'<!DOCTYPE w:document [<!ENTITY xxe SYSTEM "{url}">]>')})


def _doctype_utf16() -> bytes:
    """An external entity in styles.xml, encoded UTF-16: a byte scan for ``<!DOCTYPE`` misses it."""
    styles = ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE w:styles [<!ENTITY xxe SYSTEM '
              f'"file:///etc/passwd">]><w:styles xmlns:w="{_W}"><w:style w:styleId="x"><w:name w:val="&xxe;"/>'
              '</w:style></w:styles>')
    return package({"word/styles.xml": styles.encode("utf-16")})


def _nested(depth: int) -> bytes:
    return package({"word/document.xml": document_xml(
        "<w:p><w:r><w:t>deep</w:t></w:r></w:p>"
        + "".join(f'<w:customXml w:element="e{i}">' for i in range(depth)) + "</w:customXml>" * depth)})


def _xlsx() -> bytes:
    types = (b'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
             b'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
             b'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName='
             b'"/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.'
             b'main+xml"/></Types>')
    rels = (b'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/'
            b'2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/'
            b'2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>')
    workbook = (b'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/'
                b'spreadsheetml/2006/main"><sheets/></workbook>')
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, blob in (("[Content_Types].xml", types), ("_rels/.rels", rels), ("xl/workbook.xml", workbook)):
            archive.writestr(zipfile.ZipInfo(name, _FIXED_TIME), blob)
    return out.getvalue()


def _zip_not_ooxml() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("notes.txt", _FIXED_TIME), b"just a text file in a zip\n" * 100)
    return out.getvalue()


def _cfb(encrypted: bool) -> bytes:
    """An OLE compound file's header sector, with (or without) a directory sector naming the
    ``EncryptedPackage`` stream Office writes for a password-protected document."""
    header = bytearray(512)
    header[:8] = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
    struct.pack_into("<HHHH", header, 24, 0x3E, 3, 0xFFFE, 9)
    if not encrypted:
        return bytes(header)
    directory = bytearray(512)
    for index, name in enumerate(("Root Entry", "EncryptionInfo", "EncryptedPackage")):
        raw = name.encode("utf-16-le") + b"\0\0"
        directory[index * 128:index * 128 + len(raw)] = raw
        struct.pack_into("<H", directory, index * 128 + 64, len(raw))
    return bytes(header + directory)


def _paragraph(total: int, runs: int) -> bytes:
    """One paragraph of ``total`` bytes of text in ``runs`` runs (words that differ, so it compresses
    as text does, not as a bomb)."""
    words = " ".join(f"word{i}" for i in range(total // 8 // runs + 1))[: total // runs]
    return package({"word/document.xml": document_xml(
        "<w:p>" + f'<w:r><w:t xml:space="preserve">{words} </w:t></w:r>' * runs + "</w:p>")}, compresslevel=1)


def _table(rows: int) -> bytes:
    cell = "<w:tc><w:p><w:r><w:t>{}</w:t></w:r></w:p></w:tc>"
    body = "<w:tbl>" + "".join(f"<w:tr>{cell.format(f'row {i}')}{cell.format(i * 7)}</w:tr>"
                                for i in range(rows)) + "</w:tbl>"
    return package({"word/document.xml": document_xml(body)}, compresslevel=1)


_CASES: dict[str, tuple[Callable[[], bytes], set[str]]] = {
    # 1 GiB of zeros declared honestly: above the uncompressed bound before a byte is inflated
    "bomb_1gib_zeros": (lambda: _bomb(1024), {"docx_bomb"}),
    # 100 MiB declared honestly: within the total bound, but ~1000:1
    "bomb_ratio_100mib": (lambda: _bomb(100), {"docx_bomb"}),
    # 1 GiB of zeros declared as 4 KiB: inflation stops one byte past the declared size
    "lying_header_small": (lambda: _bomb(1024, declared=4096), {"docx_bomb"}),
    # a ~200 KB document.xml declared 900 KiB (under the ratio floor): the sizes disagree
    "lying_header_large": (lambda: _lying(900 * 1024), {"docx_unreadable"}),
    "entries_100k": (lambda: _entries(100_000), {"docx_bomb"}),
    "billion_laughs": (_laughs, {"docx_hostile_xml"}),
    "external_entity_file": (lambda: _external("file:///etc/passwd"), {"docx_hostile_xml"}),
    "external_entity_http": (lambda: _external("http://127.0.0.1:9/x"), {"docx_hostile_xml"}),
    "doctype_utf16_styles": (_doctype_utf16, {"docx_hostile_xml"}),
    "nested_100k": (lambda: _nested(100_000), {"docx_hostile_xml"}),
    "not_a_zip": (lambda: b"This is plain text with a .docx name.\n" * 50, {"docx_unreadable"}),
    "zip_not_ooxml": (_zip_not_ooxml, {"docx_unreadable"}),
    "xlsx_spreadsheet": (_xlsx, {"docx_unreadable"}),
    "truncated_zip": (lambda: package()[:20_000], {"docx_unreadable"}),
    "cfb_encrypted": (lambda: _cfb(True), {"docx_encrypted"}),
    "cfb_header_only": (lambda: _cfb(False), {"docx_unreadable", "docx_encrypted"}),
    "empty_document": (package, {"no_text"}),
    "paragraph_10mb": (lambda: _paragraph(10 * 1024 * 1024, 10), {"ok"}),
    # one run of 10 MiB: above libxml2's 10,000,000-byte text node bound (python-docx's parser)
    "text_node_10mib": (lambda: _paragraph(10 * 1024 * 1024, 1), {"docx_too_large"}),
    "table_100k_rows": (lambda: _table(100_000), {"ok"}),
    "too_large_input": (lambda: b"PK\x03\x04" + bytes(33 * 1024 * 1024), {"docx_too_large"}),
}
assert tuple(_CASES) == NAMES


def hostile_case(name: str) -> tuple[bytes, set[str]]:
    """One case's bytes and allowed outcomes."""
    make, allowed = _CASES[name]
    return make(), set(allowed)


def hostile_docx() -> list[tuple[str, bytes, set[str]]]:
    """Every case: (name, bytes, allowed outcomes)."""
    return [(name, *hostile_case(name)) for name in NAMES]
