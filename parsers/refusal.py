"""What the parser child's extraction modules raise when the bytes cannot become text.

One class for every format (`knowledge.parsers.pdf_extract.PdfRefused`,
`knowledge.parsers.html_extract.HtmlRefused`, `knowledge.parsers.docx_package.DocxRefused`), so the
child catches one thing and reports its ``reason`` and ``message``. Each subclass names the reasons
it may give (`Refused.REASONS`); any other is a bug, raised as ``ValueError`` where it is made.
Imports nothing: the child loads it before anything else.
"""

from __future__ import annotations

from typing import ClassVar


class Refused(Exception):
    """The bytes cannot become text: ``reason`` is one of the class's `REASONS`; ``message`` says
    why, without the document's content."""

    REASONS: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, reason: str, message: str) -> None:
        if reason not in self.REASONS:
            raise ValueError(f"unknown refusal reason {reason!r} for {type(self).__name__}")
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
