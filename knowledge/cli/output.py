"""Output for the CLI: JSON for scripts (``--json``: one document; ``--jsonl``: JSON Lines, a record
per line as results come — search passages, ingest outcomes, list rows), rich tables for a terminal.

Everything a document supplies (titles, headings, passage text) is printed as plain text, never as
rich markup, and with control characters other than newline and tab shown as ``\\xNN`` — a
document cannot style or drive the operator's terminal.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic_core import to_jsonable_python
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def safe(value: object) -> str:
    """``value`` as text with control characters (except newline and tab) made visible."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", "" if value is None else str(value))


def cell(value: object) -> Text:
    """A table cell that is never interpreted as markup."""
    if isinstance(value, datetime):
        value = value.strftime("%Y-%m-%d %H:%M")
    return Text(safe("" if value is None else value))


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def fitting_lines(title: str | None, columns: list[str], rows: list[list[str]], width: int) -> list[str] | None:
    """The lines rich prints for `Output.table` (no edge, heavy head; the title left-justified over
    the table's width) when every cell is one line and the table fits ``width`` unfolded; None
    when rich has to fold or expand something (then it lays the table out itself)."""
    if len(columns) < 2 or any(ch in c for row in [columns, *rows] for c in row for ch in "\t\n"):
        return None
    widths = [max(cell_len(c) for c in column) for column in zip(columns, *rows, strict=True)]
    total = sum(widths) + 3 * (len(widths) - 1)
    if total > width or (title is not None and cell_len(title) > total):
        return None  # (rich folds a title wider than its table)

    def line(row: list[str], separator: str) -> str:
        return separator.join(c + " " * (w - cell_len(c)) for c, w in zip(row, widths, strict=True))

    rule = "╇".join("━" * (w + (i > 0) + (i < len(widths) - 1)) for i, w in enumerate(widths))
    lines = [] if title is None else [title + " " * (total - cell_len(title))]
    return [*lines, line(columns, " ┃ "), rule, *(line(row, " │ ") for row in rows)]


class Output:
    """Where one invocation prints: stdout for results, stderr for progress and errors."""

    def __init__(self, json_mode: bool, lines: bool = False) -> None:
        #: Machine-readable output (either mode); ``lines``: JSON Lines.
        self.json = json_mode or lines
        self.lines = lines
        # Not a terminal and no $COLUMNS: 120 columns rather than rich's 80 (ids are 36 wide).
        width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 120
        self.console = Console(soft_wrap=False, highlight=False, width=width)
        self.err = Console(stderr=True, highlight=False)

    def emit_json(self, data: Any, *, compact: bool = False) -> None:
        """One JSON document on stdout (pydantic models, UUIDs and datetimes included); ``compact``: on
        one line (a stream of events, one per line). Under ``--jsonl`` a list is a line per item."""
        if self.lines and isinstance(data, list):
            for item in data:
                self.record(item)
            return
        text = json.dumps(to_jsonable_python(data), indent=None if compact or self.lines else 2, ensure_ascii=False)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def record(self, data: Any) -> None:
        """One JSON Lines record on stdout, flushed (a consumer reads it as it comes)."""
        sys.stdout.write(json.dumps(to_jsonable_python(data), ensure_ascii=False) + "\n")
        sys.stdout.flush()

    def text(self, value: str) -> None:
        """Plain text on stdout, verbatim (no markup, no wrapping)."""
        sys.stdout.write(value if value.endswith("\n") else value + "\n")
        sys.stdout.flush()

    def line(self, value: str) -> None:
        """A line of the CLI's own words (may carry rich markup; never document content)."""
        self.console.print(value, soft_wrap=True)

    def note(self, value: str) -> None:
        """A remark about the result on stderr (stdout stays the result), as ``knowledge: …``."""
        sys.stderr.write(f"knowledge: {value}\n")
        sys.stderr.flush()

    def table(self, title: str | None, columns: Iterable[str], rows: Iterable[Iterable[object]],
              wrap: Iterable[str] = ()) -> None:
        """A table; only the ``wrap`` columns fold (ids and numbers never do). One that fits the width
        as it is is written line by line (`fitting_lines`: rich's layout, without its cost of ~0.3 ms
        a row), else rich lays it out."""
        names = list(columns)
        cells = [[cell(v) for v in row] for row in rows]
        lines = fitting_lines(title, names, [[c.plain for c in row] for row in cells], self.console.width)
        if lines is not None:
            self._write_table(title is not None, lines)
            return
        table = Table(title=None if title is None else Text(title), title_justify="left", show_edge=False,
                      pad_edge=False)
        folding = set(wrap)
        for name in names:
            table.add_column(name, overflow="fold", no_wrap=name not in folding)
        for row_cells in cells:
            table.add_row(*row_cells)
        self.console.print(table)

    def _write_table(self, titled: bool, lines: list[str]) -> None:
        head = 2 if titled else 1  # the title (italic on a terminal, as rich's) and the header (bold)
        for i, line in enumerate(lines[:head]):
            self.console.print(Text(line, style="italic" if titled and i == 0 else "bold"), soft_wrap=True)
        out = self.console.file
        out.write("".join(line + "\n" for line in lines[head:]))
        out.flush()

    def fields(self, title: str | None, values: Mapping[str, object]) -> None:
        """A two-column key/value table."""
        table = Table(title=title, title_justify="left", show_header=False, show_edge=False, pad_edge=False)
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for key, value in values.items():
            table.add_row(key, cell(value))
        self.console.print(table)
