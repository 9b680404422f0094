"""Hostile and extreme HTML for the extractor (`knowledge.parsers.html_extract`): each case with the
outcomes it may end in (``"ok"`` or a refusal reason). Deterministic (fixed seeds), generated in
memory in well under 2 s; `hostile_case` makes one case alone, as a child that should hold no more
than the page it is given would.

Every case must end fast (no hang, nothing near the CPU limit) inside a 512 MiB address space. Where
libxml2's own limits decide (nesting deeper than 256, a text node over 10,000,000 bytes) the extractor
refuses ``html_too_complex``; ``ok`` stays allowed for those cases so that a libxml2 with other limits
fails nothing here but a hang or a crash.
"""

from __future__ import annotations

import gzip
import random
from collections.abc import Callable

MIB = 1024 * 1024

_WORDS = ("cluster", "node", "upgrade", "restore", "backup", "network", "policy", "token", "volume", "replica",
          "member", "leader", "snapshot", "quorum", "latency", "disk", "lease", "revision", "compaction", "alarm")

_PAGE = b"<!DOCTYPE html><html><head><meta charset='utf-8'><title>%s</title></head><body>%s</body></html>"


def _page(title: str, body: bytes) -> bytes:
    return _PAGE % (title.encode(), body)


def _sentence(rnd: random.Random, n: int, i: int) -> str:
    return f"Sentence {i}: " + " ".join(rnd.choice(_WORDS) for _ in range(n)) + "."


def _nested(open_: bytes, close: bytes, depth: int, inner: bytes = b"deep text") -> bytes:
    return _page("nested", open_ * depth + inner + close * depth)


def _nested_with_text(open_: bytes, close: bytes, depth: int) -> bytes:
    return _page("nested", b"".join(open_ + b"level %d text " % i for i in range(depth)) + close * depth)


def _words(seed: int, size: int) -> bytes:
    """``size`` bytes of words, one line: 64 KiB of random words, repeated."""
    rnd = random.Random(seed)
    block = " ".join(rnd.choice(_WORDS) for _ in range(10_000)).encode()[: 64 * 1024] + b" "
    return (block * (size // len(block) + 1))[:size]


def _text_line(size: int) -> bytes:
    return _page("one line", b"<p>" + _words(1, size) + b"</p>")


def _minified(size: int) -> bytes:
    rnd = random.Random(2)
    sentences = [_sentence(rnd, 30, i).encode() for i in range(1000)]
    parts: list[bytes] = [b"<nav><a href='/'>Home</a></nav><article><h1>A long minified page</h1>"]
    total, i = 0, 0
    while total < size:
        if i % 20 == 0:
            parts.append(b"<h2>Section %d</h2>" % (i // 20))
        p = b"<p>%d. %s</p>" % (i, sentences[i % 1000])  # numbered: no two paragraphs alike
        parts.append(p)
        total += len(p)
        i += 1
    parts.append(b"</article><footer>Copyright</footer>")
    return _page("minified", b"".join(parts))  # one line: no newline anywhere


def _table(rows: int, cols: int) -> bytes:
    row = b"<tr>" + b"".join(b"<td>c%d</td>" % c for c in range(cols)) + b"</tr>"
    return _page("table", b"<table>" + row * rows + b"</table>")


def _random(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _only_scripts() -> bytes:
    script = b"<script>var x = [" + b",".join(b"%d" % i for i in range(20000)) + b"]; function f(){return x;}</script>"
    return (b"<!DOCTYPE html><html><head><script src='/a.js'></script><style>body{color:red}</style>" + script
            + b"</head><body>" + script + b"<style>p{margin:0}</style><noscript></noscript>" + script
            + b"</body></html>")


def _nul_bytes() -> bytes:
    body = (b"<article><h1>Title\x00 with NUL</h1>"
            b"<p>Body\x00 text of the page\x00 with a few NUL bytes in it.</p></article>")
    return _page("nul", body)


def _utf16_no_bom() -> bytes:
    text = ("<!DOCTYPE html><html><head><title>UTF-16</title></head><body><article><h1>Überschrift</h1>"
            "<p>Ein Absatz über Zürich, Köln und München, ohne Byte-Order-Mark kodiert.</p></article></body></html>")
    return text.encode("utf-16-le")


def _many_elements(n: int) -> bytes:
    return _page("many", b"<div>" + b"<span>w</span> " * n + b"</div>")


def _many_attributes(n: int, elements: int = 1) -> bytes:
    attrs = b" ".join(b"data-a%d='%d'" % (i, i) for i in range(n))
    return _page("attrs", b"".join(b"<p " + attrs + b">text %d after many attributes</p>" % i for i in range(elements)))


def _unclosed_comment(size: int) -> bytes:
    return _page("comment", b"<p>before</p><!-- " + b"x" * size)


def _gzipped() -> bytes:
    return gzip.compress(_minified(2 * MIB), mtime=0)


#: name -> (maker, allowed outcomes)
CASES: dict[str, tuple[Callable[[], bytes], set[str]]] = {
    "nested_divs_100k": (lambda: _nested(b"<div>", b"</div>", 100_000), {"html_too_complex", "ok"}),
    "nested_inline_100k": (lambda: _nested(b"<b>", b"", 100_000), {"html_too_complex", "ok"}),
    "nested_tables_20k": (lambda: _nested(b"<table><tr><td>", b"</td></tr></table>", 20_000),
                          {"html_too_complex", "ok"}),
    "nested_tables_60": (lambda: _nested_with_text(b"<table><tr><td>", b"</td></tr></table>", 60), {"ok"}),
    "nested_lists_50k": (lambda: _nested(b"<ul><li>", b"</li></ul>", 50_000), {"html_too_complex", "ok"}),
    "nested_lists_100": (lambda: _nested_with_text(b"<ul><li>", b"</li></ul>", 100), {"ok"}),
    "text_line_10mib": (lambda: _text_line(10 * MIB), {"html_too_complex", "ok"}),
    "text_line_9mb": (lambda: _text_line(9_000_000), {"ok"}),
    "minified_10mib": (lambda: _minified(10 * MIB), {"ok"}),
    "table_1m_cells": (lambda: _table(1000, 1000), {"html_too_complex"}),
    "table_100k_cells": (lambda: _table(1000, 100), {"ok"}),
    "many_elements_400k": (lambda: _many_elements(400_000), {"ok"}),
    # boilerplate elements, each with text after it: removing them one by one would be quadratic
    "many_buttons_300k": (lambda: _page("buttons", b"<div>" + b"<button>b</button> w" * 300_000 + b"</div>"), {"ok"}),
    "many_attributes_100k": (lambda: _many_attributes(100_000), {"html_too_complex"}),
    "attributes_500_on_1900_tags": (lambda: _many_attributes(500, 1900), {"ok"}),
    # a quote that is no attribute value (HTML5 reads it as a name) must not hide the next tag
    "attributes_in_quotes": (lambda: _page("q", b"<p a\"><q " + b" x" * 100_000 + b">\"</q></p>"),
                             {"html_too_complex"}),
    "random_32mib": (lambda: _random(32 * MIB, 3), {"html_unreadable"}),
    "random_1kib": (lambda: _random(1024, 4), {"html_unreadable"}),
    "over_32mib": (lambda: b"<p>" + b"a" * (32 * MIB), {"html_too_large"}),
    "gzipped_page": (_gzipped, {"html_unreadable"}),
    "only_scripts": (_only_scripts, {"no_text"}),
    "empty": (lambda: b"", {"no_text"}),
    "whitespace": (lambda: b" \n\t " * 1000, {"no_text"}),
    "unclosed_comment": (lambda: _unclosed_comment(5 * MIB), {"ok", "no_text"}),
    "nul_bytes": (_nul_bytes, {"ok"}),
    "utf16_no_bom": (_utf16_no_bom, {"ok"}),
}


def hostile_case(name: str) -> tuple[bytes, set[str]]:
    """One case's bytes and its allowed outcomes."""
    maker, allowed = CASES[name]
    return maker(), set(allowed)


def hostile_html() -> list[tuple[str, bytes, set[str]]]:
    """Every case: (name, bytes, allowed outcomes)."""
    return [(name, *hostile_case(name)) for name in CASES]
