"""The DOCX package before python-docx sees it: an untrusted Word document's ZIP checked, entry by
entry, inside the parser child (`knowledge.parsers.child`) by `knowledge.parsers.docx_extract` before
it opens the package. A pure function of the bytes — nothing is fetched, nothing written, nothing
kept: each entry is inflated in bounded chunks and dropped, the XML ones streamed through expat on
the way. These checks bound what a hostile package can make the child do; its limits bound the rest.

`check_package` reads the ZIP's central directory (its end record first, without zipfile, so a huge
directory is refused before zipfile reads it in full), then inflates every entry — never past its
declared size plus one byte, its size and CRC checked — and streams every XML entry through
`_XmlGuard`. It raises `DocxRefused` (re-exported by `knowledge.parsers.docx_extract`, whose own
refusals it also carries) with one of these reasons:

- ``docx_too_large``: XML parts above `MAX_XML_BYTES`, or with more than `MAX_XML_NODES` elements
  and attributes in all (lxml's trees of them would not fit in the child's 512 MiB).
- ``docx_encrypted``: an OLE compound file (CFB) holding an ``EncryptedPackage`` — what Office writes
  for a password-protected document. Another CFB (a legacy binary ``.doc``) is ``docx_unreadable``.
- ``docx_bomb``: the ZIP's central directory, read before anything is inflated, declares more than
  `MAX_ENTRIES` entries (or a directory above `MAX_DIRECTORY_BYTES`), more than
  `MAX_UNCOMPRESSED_BYTES` in all, or an entry above `RATIO_FLOOR` bytes that inflates more than
  `MAX_RATIO` times its compressed size; or an entry inflates beyond its declared size (a lying
  header: inflation stops at the declared size plus one byte).
- ``docx_hostile_xml``: an XML part declares a DTD (``<!DOCTYPE``, hence any entity, internal or
  external) or nests elements deeper than `MAX_XML_DEPTH`. Every XML entry (``.xml``, ``.rels``, or
  an XML content type other than an image's: an SVG may carry a DOCTYPE) is streamed through expat
  with handlers that refuse these while it is inflated, before python-docx parses anything
  (python-docx's own lxml parser does not resolve entities — it silently drops them — and refuses
  depth above 256; the check makes both explicit).
- ``docx_unreadable``: not a ZIP, a truncated or corrupt one (CRC, sizes, a local header missing, a
  method other than stored/deflate, a password-protected entry), no ``[Content_Types].xml``, or XML
  that is not well formed.

Whether the package is a Word document is not decided here: python-docx's main part is checked by
`knowledge.parsers.docx_extract`, and a source's media type is sniffed before any extractor is
chosen (`knowledge.parsers.sniff`).
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from xml.parsers import expat

from knowledge.parsers.refusal import Refused

#: Entries in the ZIP. Word writes a few dozen; a document with thousands of images stays far below.
MAX_ENTRIES = 10_000
#: The central directory python's zipfile reads in full before it lists a single entry.
MAX_DIRECTORY_BYTES = 4 * 1024 * 1024
#: Declared uncompressed bytes of all entries together (more: a bomb). Entries that are not XML
#: (images, embedded files) hardly compress: honest ones stay near the 32 MiB input.
MAX_UNCOMPRESSED_BYTES = 128 * 1024 * 1024
#: Declared uncompressed bytes of the XML entries together (more: too large). python-docx holds a
#: part's bytes and lxml's tree of them at once, and the text is copied again as it is rendered.
MAX_XML_BYTES = 64 * 1024 * 1024
#: An entry declared above `RATIO_FLOOR` bytes may inflate at most this many times its compressed size.
MAX_RATIO = 200
RATIO_FLOOR = 1024 * 1024
#: Element nesting in any XML part: libxml2's own bound without XML_PARSE_HUGE (python-docx's parser).
MAX_XML_DEPTH = 256
#: Elements and attributes in all XML parts together. lxml spends ~200-350 bytes on each (python-docx
#: keeps every part's tree): 1.5 million measured ~420 MiB at peak, 2 million exhausted 512 MiB. An
#: honest document this large has well over a thousand pages (~25 MB of document.xml).
MAX_XML_NODES = 1_200_000
#: A progress event after this many bytes inflated.
PROGRESS_BYTES = 16 * 1024 * 1024

#: Every refusal reason: the package's (above) and the extractor's (`knowledge.parsers.docx_extract`).
REASONS = frozenset(
    {"docx_too_large", "docx_unreadable", "docx_bomb", "docx_hostile_xml", "docx_encrypted", "no_text"})

Progress = Callable[[str], None] | None


class DocxRefused(Refused):
    """The DOCX cannot become text: ``reason`` is one of `REASONS`."""

    REASONS = REASONS


_CFB_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_LOCAL = b"PK\x03\x04"
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class _Directory:
    """The end-of-central-directory record: its entries and the directory's size."""

    entries: int
    size: int


def _directory(data: bytes) -> _Directory | None:
    """The archive's end record (ZIP64 too), found where zipfile finds it; None: not a ZIP."""
    if len(data) < 22:
        return None
    if data[-22:-18] == _EOCD and data[-2:] == b"\0\0":
        pos = len(data) - 22
    else:
        pos = data.rfind(_EOCD, max(0, len(data) - 22 - 65535))
        if pos < 0 or pos + 22 > len(data):
            return None
    entries, size, offset = struct.unpack_from("<HII", data, pos + 10)
    end = pos  # where the directory ends: the end record, or the ZIP64 record before it
    if entries == 0xFFFF or size == 0xFFFFFFFF or offset == 0xFFFFFFFF:
        locator = pos - 20
        if locator >= 0 and data[locator:locator + 4] == _EOCD64_LOCATOR:
            record = locator - 56
            if record >= 0 and data[record:record + 4] == _EOCD64:
                entries, size, offset = struct.unpack_from("<QQQ", data, record + 32)
                end = record
    start = end - size
    if start < 0 or offset > start:
        return None
    return _Directory(entries, size)


@dataclass(frozen=True)
class _Entry:
    """One central-directory entry, as much of it as inflating needs."""

    name: str
    method: int
    flags: int
    crc: int
    compressed: int
    size: int
    header: int  # offset of its local header in ``data``

    @classmethod
    def of(cls, info: zipfile.ZipInfo) -> _Entry:
        return cls(info.filename, info.compress_type, info.flag_bits, info.CRC, info.compress_size,
                   info.file_size, info.header_offset)


def _inflate(data: bytes, entry: _Entry, sink: Callable[[bytes], None] | None,
             progress: Progress = None, done: list[int] | None = None) -> None:
    """Inflate one entry in chunks into ``sink``, never past its declared size plus one byte, and
    check its size and CRC. ``done`` counts the bytes inflated so far (for progress events)."""
    name = entry.name
    if entry.flags & 0x1:
        raise DocxRefused("docx_unreadable", f"{name}: a password-protected ZIP entry")
    if entry.method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise DocxRefused("docx_unreadable", f"{name}: compression method {entry.method} (Word writes deflate)")
    at = entry.header
    if at < 0 or at + 30 > len(data) or data[at:at + 4] != _LOCAL:
        raise DocxRefused("docx_unreadable", f"{name}: its local header is missing")
    name_len, extra_len = struct.unpack_from("<HH", data, at + 26)
    start = at + 30 + name_len + extra_len
    if start + entry.compressed > len(data):
        raise DocxRefused("docx_unreadable", f"{name}: truncated")
    view = memoryview(data)[start:start + entry.compressed]
    produced = crc = 0

    def emit(out: bytes | memoryview) -> None:
        nonlocal produced, crc
        produced += len(out)
        if produced > entry.size:
            raise DocxRefused("docx_bomb", f"{name}: inflates beyond its declared {entry.size} bytes")
        crc = zlib.crc32(out, crc)
        if sink is not None:
            sink(bytes(out))
        if done is not None:
            before = done[0]
            done[0] += len(out)
            if progress is not None and done[0] // PROGRESS_BYTES != before // PROGRESS_BYTES:
                progress(f"inflated {done[0] >> 20} MiB")

    if entry.method == zipfile.ZIP_STORED:
        for pos in range(0, len(view), _CHUNK):
            emit(view[pos:pos + _CHUNK])
    else:
        inflater = zlib.decompressobj(-15)
        try:
            for pos in range(0, len(view), _CHUNK):
                pending = bytes(view[pos:pos + _CHUNK])
                while pending and not inflater.eof:  # never asks for more than one byte past the declared size
                    emit(inflater.decompress(pending, max(1, min(_CHUNK, entry.size + 1 - produced))))
                    pending = inflater.unconsumed_tail
                if inflater.eof:
                    break
            while not inflater.eof:  # output still held back for want of room
                out = inflater.decompress(b"", max(1, min(_CHUNK, entry.size + 1 - produced)))
                if not out:
                    break
                emit(out)
        except zlib.error:
            raise DocxRefused("docx_unreadable", f"{name}: corrupt deflate data") from None
        if not inflater.eof:
            raise DocxRefused("docx_unreadable", f"{name}: its deflate data ends early")
    if produced != entry.size:
        raise DocxRefused("docx_unreadable", f"{name}: {produced} bytes where {entry.size} are declared")
    if crc != entry.crc:
        raise DocxRefused("docx_unreadable", f"{name}: CRC mismatch")


class _XmlGuard:
    """An expat parser fed an XML part as it is inflated: refuses a DTD (so any entity declaration,
    internal or external) and nesting deeper than `MAX_XML_DEPTH`; malformed XML is unreadable.
    With ``collect``, it keeps the ``Default``/``Override`` attributes (``[Content_Types].xml``)."""

    def __init__(self, name: str, nodes: list[int], collect: bool = False) -> None:
        self.name = name
        self.nodes = nodes  # elements and attributes seen in all parts so far (shared)
        self.depth = 0
        self.types: list[tuple[str, dict[str, str]]] | None = [] if collect else None
        parser = expat.ParserCreate()
        parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        parser.ordered_attributes = True  # a flat list, cheaper than a dict per element
        parser.StartDoctypeDeclHandler = self._doctype
        parser.EntityDeclHandler = self._entity
        parser.ExternalEntityRefHandler = self._external
        parser.StartElementHandler = self._start
        parser.EndElementHandler = self._end
        self.parser = parser

    def _doctype(self, *_: object) -> None:
        raise DocxRefused("docx_hostile_xml", f"{self.name}: a DOCTYPE (DTDs and entities are refused)")

    def _entity(self, *_: object) -> None:
        raise DocxRefused("docx_hostile_xml", f"{self.name}: an entity declaration")

    def _external(self, *_: object) -> int:
        raise DocxRefused("docx_hostile_xml", f"{self.name}: an external entity reference")

    def _start(self, tag: str, attrs: list[str]) -> None:
        self.depth += 1
        if self.depth > MAX_XML_DEPTH:
            raise DocxRefused("docx_hostile_xml", f"{self.name}: elements nested deeper than {MAX_XML_DEPTH}")
        self.nodes[0] += 1 + len(attrs) // 2
        if self.nodes[0] > MAX_XML_NODES:
            raise DocxRefused("docx_too_large", f"more than {MAX_XML_NODES} XML elements and attributes")
        if self.types is not None and self.depth == 2:
            self.types.append((tag.rpartition(":")[2], dict(zip(attrs[::2], attrs[1::2], strict=True))))

    def _end(self, _tag: str) -> None:
        self.depth -= 1

    def feed(self, chunk: bytes) -> None:
        try:
            self.parser.Parse(chunk, False)
        except expat.ExpatError as exc:
            raise DocxRefused("docx_unreadable", f"{self.name}: not well-formed XML ({exc})") from None

    def close(self) -> None:
        try:
            self.parser.Parse(b"", True)
        except expat.ExpatError as exc:
            raise DocxRefused("docx_unreadable", f"{self.name}: not well-formed XML ({exc})") from None


def _content_types(types: list[tuple[str, dict[str, str]]]) -> tuple[dict[str, str], dict[str, str]]:
    """(extension -> content type, part name -> content type), both keys lower-cased."""
    defaults: dict[str, str] = {}
    overrides: dict[str, str] = {}
    for tag, attrs in types:
        if tag == "Default" and "Extension" in attrs:
            defaults[attrs["Extension"].lower()] = attrs.get("ContentType", "")
        elif tag == "Override" and "PartName" in attrs:
            overrides[attrs["PartName"].lower()] = attrs.get("ContentType", "")
    return defaults, overrides


def _is_xml(name: str, defaults: dict[str, str], overrides: dict[str, str]) -> bool:
    """Whether an entry is XML a parser may read: by its name, or by an XML content type other than
    an image's (an SVG may carry a DOCTYPE, and python-docx keeps images as bytes)."""
    lower = name.lower()
    if lower.endswith((".xml", ".rels")):
        return True
    content_type = overrides.get("/" + lower) or defaults.get(lower.rpartition(".")[2] if "." in lower else "", "")
    content_type = content_type.split(";")[0].strip().lower()
    if content_type.startswith("image/"):
        return False
    return content_type.endswith("+xml") or content_type in ("application/xml", "text/xml")


def _refuse_non_zip(data: bytes) -> DocxRefused:
    if data.startswith(_CFB_MAGIC):
        if _ENCRYPTED_PACKAGE in data:
            return DocxRefused("docx_encrypted", "a password-protected Office document (an encrypted OLE package)")
        return DocxRefused("docx_unreadable", "an OLE compound file (a legacy binary .doc?), not an OOXML package")
    return DocxRefused("docx_unreadable", "not a ZIP package")


def check_package(data: bytes, progress: Progress = None) -> None:
    """Everything about the ZIP that must hold before python-docx reads it (module docstring); raises
    `DocxRefused`. ``progress`` hears ``"inflated N MiB"`` every `PROGRESS_BYTES` inflated."""
    directory = None if data.startswith(_CFB_MAGIC) else _directory(data)
    if directory is None:
        raise _refuse_non_zip(data)
    if directory.entries > MAX_ENTRIES:
        raise DocxRefused("docx_bomb", f"{directory.entries} ZIP entries (at most {MAX_ENTRIES})")
    if directory.size > MAX_DIRECTORY_BYTES:
        raise DocxRefused("docx_bomb", f"a {directory.size}-byte ZIP directory (at most {MAX_DIRECTORY_BYTES})")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except MemoryError:
        raise
    except Exception as exc:  # BadZipFile, and struct/Value/EOF errors on damaged directories
        raise DocxRefused("docx_unreadable", f"not a readable ZIP ({type(exc).__name__})") from None
    if len(infos) > MAX_ENTRIES:
        raise DocxRefused("docx_bomb", f"{len(infos)} ZIP entries (at most {MAX_ENTRIES})")
    total = sum(info.file_size for info in infos)
    if total > MAX_UNCOMPRESSED_BYTES:
        raise DocxRefused("docx_bomb", f"{total} bytes uncompressed (at most {MAX_UNCOMPRESSED_BYTES})")
    for info in infos:
        if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise DocxRefused("docx_bomb", f"{info.filename}: compressed {info.file_size // max(info.compress_size, 1)}"
                                           f" to 1 (at most {MAX_RATIO})")
    entries = [_Entry.of(info) for info in infos]
    types = [e for e in entries if e.name == "[Content_Types].xml"]
    if not types:
        raise DocxRefused("docx_unreadable", "no [Content_Types].xml: not an OOXML package")
    done = [0]
    nodes = [0]
    guard = _XmlGuard(types[-1].name, nodes, collect=True)
    _inflate(data, types[-1], guard.feed, progress, done)
    guard.close()
    defaults, overrides = _content_types(guard.types or [])
    xml = sum(entry.size for entry in entries if _is_xml(entry.name, defaults, overrides))
    if xml > MAX_XML_BYTES:
        raise DocxRefused("docx_too_large", f"{xml} bytes of XML (at most {MAX_XML_BYTES})")
    for entry in entries:
        if entry is types[-1]:
            continue
        if _is_xml(entry.name, defaults, overrides):
            guard = _XmlGuard(entry.name, nodes)
            _inflate(data, entry, guard.feed, progress, done)
            guard.close()
        else:
            _inflate(data, entry, None, progress, done)
