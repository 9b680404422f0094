"""The parser child: ``python -m knowledge.parsers.child``. Runs one parse job (a PDF, an HTML page, a Word
document: untrusted bytes, every one) under its own limits, then exits.

Protocol (`knowledge.supervisors.parser_pool` depends on it):

- stdin: one JSON header line, ``{"op": "inspect"|"extract", "format": "pdf"|"html"|"docx",
  "cpu_seconds": int, "address_space_bytes": int|null, "pages": [first, end]|null}`` and ``\\n`` (at
  most 64 KiB), then the raw source bytes until EOF, at most 32 MiB (more: ``<format>_too_large``).
  ``format`` absent: ``pdf``; only a PDF is inspected. ``pages`` (optional, PDF extract only) is one
  0-based, end-exclusive page range. ``address_space_bytes`` absent: 512 MiB; null: no
  address-space limit (the pool's explicit opt-out).
- stdout, extract only: progress lines first, each ``~`` and an event and ``\\n`` (at most
  `MAX_PROGRESS_BYTES`): ``~pages N`` (the pages to extract, counted by pikepdf), ``~document``
  (pdfminer has read the document) and ``~page`` after each page. The pool reads them as they come
  and kills a child that makes none for its stall limit. No JSON result starts with ``~``.
- stdout, then: exactly one JSON object (UTF-8, at most 32 MiB, else a ``pdf_too_large`` result), exit 0:
  ``{"ok": true, "inspection": {...}}``, ``{"ok": true, "text": "...", "pages": n, "date": iso|null,
  "title": str|null}`` or ``{"ok": false, "reason": "...", "message": "..."}``. Reasons: ``pdf_encrypted``,
  ``pdf_unreadable`` (a bad header too), ``pdf_too_large``, ``no_text``; the HTML and DOCX modules'
  own (`knowledge.parsers.html_extract`, `knowledge.parsers.docx_extract`); and ``<format>_killed``
  for a MemoryError (the same outcome as a child the kernel kills at its limit). stdout must be a pipe:
  under RLIMIT_FSIZE 0 writing the result to a regular file fails (``EFBIG``, exit 1).

Limits come before a byte of the PDF is read (only the header precedes them, bounded): RLIMIT_CPU
``cpu_seconds`` soft (SIGXCPU ends the child) and one more hard (SIGKILL), RLIMIT_AS (Linux only:
Darwin rejects it and relies on the CPU limit and the pool's deadline), no core files, no file
writes, 64 descriptors. With ``--warm`` (a spare child the pool starts ahead of a job) the parser
libraries are imported first, while no job waits; otherwise nothing heavier than the protocol needs is
imported before the limits.
"""

from __future__ import annotations

import json
import platform
import resource
import signal
import sys
import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knowledge.parsers.docx_extract import DocxText
    from knowledge.parsers.html_extract import HtmlText

MAX_IO_BYTES = 32 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_PROGRESS_BYTES = 64  # one progress line, its ``~`` and newline included
DEFAULT_CPU_SECONDS = 60
DEFAULT_ADDRESS_SPACE_BYTES = 512 * 1024 * 1024
OPEN_FILES = 64
#: pdfminer recurses on nested objects; a little more room than 1,000 frames lets deep but honest
#: files through, and RLIMIT_AS still bounds a hostile one.
RECURSION_LIMIT = 5000


def _set(which: int, soft: int, hard: int) -> None:
    """Lower a limit; never ask above an existing finite hard limit (only root may raise it)."""
    _, current = resource.getrlimit(which)
    if current != resource.RLIM_INFINITY:
        hard = min(hard, current)
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def set_limits(cpu_seconds: int, address_space_bytes: int | None) -> None:
    """Bound this process: CPU seconds, address space (Linux), no core files, no file writes, few fds."""
    # With RLIMIT_FSIZE 0 a write to a regular file fails (EFBIG) instead of killing the child: qpdf's
    # and pdfminer's warnings on a stderr that happens to be a log file must not end the job.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _set(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)
    if address_space_bytes is not None and platform.system() != "Darwin":
        _set(resource.RLIMIT_AS, address_space_bytes, address_space_bytes)
    _set(resource.RLIMIT_CORE, 0, 0)
    _set(resource.RLIMIT_FSIZE, 0, 0)
    _set(resource.RLIMIT_NOFILE, OPEN_FILES, OPEN_FILES)


def _refusal(reason: str, message: str) -> dict[str, object]:
    return {"ok": False, "reason": reason, "message": message}


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def parse_header(line: bytes) -> dict[str, Any] | str:
    """The validated header (defaults filled in), or why it is not one."""
    if not line.endswith(b"\n"):
        return f"no header line within {MAX_HEADER_BYTES} bytes"
    try:
        header = json.loads(line)
    except ValueError:
        return "the header is not JSON"
    if not isinstance(header, dict):
        return "the header is not a JSON object"
    if header.get("op") not in ("inspect", "extract"):
        return f"unknown op {header.get('op')!r}"
    header.setdefault("format", "pdf")
    if header["format"] not in FORMATS or (header["op"] == "inspect" and header["format"] != "pdf"):
        return f"unknown format {header.get('format')!r} for {header['op']}"
    header.setdefault("cpu_seconds", DEFAULT_CPU_SECONDS)
    header.setdefault("address_space_bytes", DEFAULT_ADDRESS_SPACE_BYTES)
    if not _positive_int(header["cpu_seconds"]):
        return "cpu_seconds must be a positive integer"
    if header["address_space_bytes"] is not None and not _positive_int(header["address_space_bytes"]):
        return "address_space_bytes must be a positive integer or null"
    pages = header.get("pages")
    if pages is not None and header["format"] != "pdf":
        return "pages apply to a PDF only"
    if pages is not None and not (isinstance(pages, list) and len(pages) == 2
                                  and all(isinstance(p, int) and not isinstance(p, bool) for p in pages)
                                  and 0 <= pages[0] < pages[1]):
        return "pages must be [first, end] with 0 <= first < end"
    return header


FORMATS = ("pdf", "html", "docx")


def run(header: dict[str, Any], data: bytes) -> dict[str, object]:
    """One job, its outcome as the result object. Refusals and failures are results, not exceptions."""
    sys.setrecursionlimit(RECURSION_LIMIT)
    fmt = header.get("format", "pdf")
    try:
        if fmt == "pdf":
            return _run_pdf(header, data)
        return _run_markup(fmt, data)
    except RecursionError:
        return _refusal(f"{fmt}_unreadable", f"the {fmt.upper()} nests too deeply")
    except MemoryError:
        # Returned, not raised: leaving this block frees the frames that held the parse's memory,
        # so the small result can still be written.
        return _refusal(f"{fmt}_killed", "the parse exceeded its memory limit")
    except Exception as exc:  # a parser bug on a hostile file is still an answer, not a crash
        traceback.print_exc(limit=8)
        return _refusal(f"{fmt}_unreadable", f"the parser failed: {type(exc).__name__}")


def _run_pdf(header: dict[str, Any], data: bytes) -> dict[str, object]:
    from knowledge.parsers.pdf_extract import PdfRefused, extract_pdf_text, inspect_pdf_bytes, stated_date

    try:
        if header["op"] == "inspect":
            return {"ok": True, "inspection": inspect_pdf_bytes(data).as_marker()}
        pages = header.get("pages")
        text = extract_pdf_text(data, (pages[0], pages[1]) if pages else None, progress)
        stated = stated_date(data) if not pages or pages[0] == 0 else None  # once per document
        return {"ok": True, "text": text, "pages": text.count("\f"),
                "date": stated.isoformat() if stated is not None else None}
    except PdfRefused as refused:
        return _refusal(refused.reason, refused.message)


def _run_markup(fmt: str, data: bytes) -> dict[str, object]:
    """An HTML page or a Word document: Markdown text, its title and the date it states."""
    from knowledge.parsers.refusal import Refused

    found: HtmlText | DocxText
    try:
        if fmt == "html":
            from knowledge.parsers.html_extract import extract_html

            found = extract_html(data, progress)
        else:
            from knowledge.parsers.docx_extract import extract_docx

            found = extract_docx(data, progress)
    except Refused as refused:
        return _refusal(refused.reason, refused.message)
    stated = found.stated_date
    return {"ok": True, "text": found.text, "title": found.title,
            "date": stated.isoformat() if stated is not None else None}


def progress(event: str) -> None:
    """One progress line on stdout, flushed now: the pool's stall limit counts from the last one."""
    line = f"~{event}\n".encode()[:MAX_PROGRESS_BYTES - 1].rstrip(b"\n") + b"\n"
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()


def _emit(result: dict[str, object], fmt: str = "pdf") -> None:
    payload = json.dumps(result, ensure_ascii=False).encode("utf-8")
    if len(payload) > MAX_IO_BYTES:
        del payload
        payload = json.dumps(_refusal(f"{fmt}_too_large", "the result is above the 32 MiB output bound")).encode()
    sys.stdout.buffer.write(payload)
    sys.stdout.buffer.flush()


def preload() -> None:
    """Every format's libraries imported: a spare child serves whichever job comes. Only a head start:
    a library that fails to import here fails the job that needs it, with its reason."""
    import importlib

    for name in ("pdf_extract", "html_extract", "docx_extract"):
        try:
            importlib.import_module(f"knowledge.parsers.{name}").preload()
        except Exception:  # the job that needs it reports it
            continue


def main() -> int:
    """Read the header, set the limits, read the PDF, run the job, write its one result."""
    if "--warm" in sys.argv:
        # A spare: pay the imports now, while no job waits; the limits still precede the PDF's bytes.
        preload()
    header = parse_header(sys.stdin.buffer.readline(MAX_HEADER_BYTES))
    if isinstance(header, str):
        _emit(_refusal("pdf_unreadable", f"bad request: {header}"))
        return 0
    fmt = header["format"]
    set_limits(header["cpu_seconds"], header["address_space_bytes"])
    data = sys.stdin.buffer.read(MAX_IO_BYTES + 1)
    if len(data) > MAX_IO_BYTES:
        _emit(_refusal(f"{fmt}_too_large", f"input above the {MAX_IO_BYTES}-byte bound"))
        return 0
    import logging

    # pdfminer logs a warning per broken object; a hostile file can make millions of them (and
    # trafilatura one per odd page).
    for name in ("pdfminer", "trafilatura", "htmldate", "courlan"):
        logging.getLogger(name).setLevel(logging.ERROR)
    result = run(header, data)
    del data
    try:
        _emit(result, fmt)
    except MemoryError:  # encoding a huge text can be the allocation that fails
        del result
        _emit(_refusal(f"{fmt}_killed", "the result exceeded the memory limit"), fmt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
