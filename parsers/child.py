"""The parser child: ``python -m parsers.child``. Runs one PDF job under its own limits.

Protocol — stdin: one JSON header line ``{"op": "inspect"|"extract", "cpu_seconds": int,
"address_space_bytes": int|null, "pages": [first, end] | null}`` (pages: extract one 0-based,
end-exclusive range), then the PDF bytes until EOF (at most 32 MiB). stdout: exactly
one JSON object: ``{"ok": true, "inspection": {...}}``, ``{"ok": true, "text": "...", "pages": n}``
or ``{"ok": false, "reason": "...", "message": "..."}``; at most 32 MiB. The limits are set before
a byte of the PDF is read: CPU seconds, address space (Linux; Darwin rejects RLIMIT_AS and relies
on the CPU and wall-clock limits), no core files, no file writes, few descriptors.
"""

from __future__ import annotations

import json
import platform
import resource
import sys

MAX_IO_BYTES = 32 * 1024 * 1024


def _limit(which: int, value: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, hard if hard != resource.RLIM_INFINITY else value))


def set_limits(cpu_seconds: int, address_space_bytes: int | None) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    if address_space_bytes and platform.system() != "Darwin":
        resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    _limit(resource.RLIMIT_NOFILE, 64)


def _emit(result: dict[str, object]) -> None:
    payload = json.dumps(result, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if len(payload) > MAX_IO_BYTES:
        payload = json.dumps({"ok": False, "reason": "pdf_too_large",
                              "message": "the extracted text is above the 32 MiB output bound"}).encode()
    sys.stdout.buffer.write(payload)
    sys.stdout.buffer.flush()


def main() -> None:
    if "--warm" in sys.argv:
        # A spare: import the parsers now, while no job waits; the limits still come before the PDF.
        import parsers.pdf_extract  # noqa: F401
    header = json.loads(sys.stdin.buffer.readline() or b"{}")
    set_limits(int(header.get("cpu_seconds", 60)), header.get("address_space_bytes", 512 * 1024 * 1024))
    data = sys.stdin.buffer.read(MAX_IO_BYTES + 1)
    if len(data) > MAX_IO_BYTES:
        _emit({"ok": False, "reason": "pdf_too_large", "message": "input above the 32 MiB bound"})
        return
    sys.setrecursionlimit(5000)
    from parsers.pdf_extract import PdfRefused, extract_pdf_text, inspect_pdf_bytes

    try:
        if header.get("op") == "inspect":
            _emit({"ok": True, "inspection": inspect_pdf_bytes(data).as_marker()})
        elif header.get("op") == "extract":
            pages = header.get("pages")
            text = extract_pdf_text(data, (int(pages[0]), int(pages[1])) if pages else None)
            _emit({"ok": True, "text": text, "pages": text.count("\f")})
        else:
            _emit({"ok": False, "reason": "pdf_unreadable", "message": f"unknown op {header.get('op')!r}"})
    except PdfRefused as refused:
        _emit({"ok": False, "reason": refused.reason, "message": refused.message})
    except RecursionError:
        _emit({"ok": False, "reason": "pdf_unreadable", "message": "the PDF nests too deeply"})
    except MemoryError:
        _emit({"ok": False, "reason": "pdf_killed", "message": "the parse exceeded its memory limit"})


if __name__ == "__main__":
    main()
