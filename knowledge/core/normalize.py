"""Normalization: the spec's closed list of transformations, and nothing else.

1. Unicode NFC.
2. CRLF, and a lone CR, to LF.
3. Tabs to spaces at the file's own tab width (next tab stop, per line).
4. Trailing whitespace stripped from every line.
5. Runs of more than two blank lines collapsed to two.

The tab width is the file's own when it states one in its first or last five lines, in any of
the forms editors already read: a Vim modeline (``vim: set ts=8`` / ``tabstop=8``), an Emacs
local variable (``tab-width: 8``), or an EditorConfig-style ``tab_width = 8`` / ``indent_size = 8``
line. Otherwise 4. Widths outside 1..16 are ignored.

Pure, idempotent (a hypothesis property checks it), and versioned: `NORMALIZER_VERSION` is part
of every ``chunker_version``, because changing it changes chunk texts and therefore chunk ids.
"""

from __future__ import annotations

import re
import unicodedata

NORMALIZER_VERSION = "n1"
DEFAULT_TAB_WIDTH = 4

_TAB_HINTS = re.compile(
    r"(?:\b(?:ts|tabstop)\s*=\s*(\d+))"  # vim: set ts=8 / tabstop=8
    r"|(?:\btab-width\s*:\s*(\d+))"  # -*- tab-width: 8 -*-
    r"|(?:^\s*(?:tab_width|indent_size)\s*=\s*(\d+)\s*$)",  # editorconfig style
    re.MULTILINE,
)
_HINT_LINES = 5
_BLANK_RUN = re.compile(r"\n{4,}")  # a newline, then three or more blank lines
_LEADING_BLANK_RUN = re.compile(r"\A\n{3,}")  # three or more blank lines at the very start


def tab_width(text: str) -> int:
    """The tab width ``text`` states for itself (see the module docstring), else 4."""
    lines = text.split("\n")
    head = "\n".join(lines[:_HINT_LINES])
    tail = "\n".join(lines[-_HINT_LINES:]) if len(lines) > _HINT_LINES else ""
    for region in (head, tail):
        for match in _TAB_HINTS.finditer(region):
            width = int(next(g for g in match.groups() if g is not None))
            if 1 <= width <= 16:
                return width
    return DEFAULT_TAB_WIDTH


def normalize(text: str) -> str:
    """Apply the closed list, in order. ``normalize(normalize(t)) == normalize(t)``."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    # Trailing whitespace is what str.isspace (the same set as the regex \s) says, per line. Done
    # with str methods: the regex [^\S\n]+$ backtracks quadratically on long runs of indentation.
    width = tab_width(text) if "\t" in text else 0
    text = "\n".join((line.expandtabs(width) if width else line).rstrip() for line in text.split("\n"))
    text = _LEADING_BLANK_RUN.sub("\n\n", text)
    return _BLANK_RUN.sub("\n\n\n", text)
