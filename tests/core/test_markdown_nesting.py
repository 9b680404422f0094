"""Markdown nested past what the parser survives is chunked as plain text, never a crash.

markdown-it.rs (markdown-it-pyrs) recurses once per block nesting level and overflows the thread's
stack at ~50,000 levels: a segfault of the whole host process. `chunk_text` falls back to the
plain-text chunker for text that may nest deeper than `MAX_MARKDOWN_NESTING`. Each case runs in a
subprocess, so a regression fails the test instead of killing the test run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from knowledge.core.chunking import MAX_MARKDOWN_NESTING, chunk_text
from knowledge.core.normalize import normalize

CASES = {
    "blockquotes": "'> ' * 100_000 + 'x'",
    "bullets": "'- ' * 100_000 + 'x'",
    "ordered": "'1. ' * 60_000 + 'x'",
    "indented": "'\\n'.join('  ' * i + '- item' for i in range(3000))",
}

CHILD = """
from knowledge.core.chunking import chunk_text
from knowledge.core.normalize import normalize
text = normalize({expr})
drafts = chunk_text(text, "T", markdown=True)
assert drafts and all(d.text == text[d.start:d.end] for d in drafts)
print(len(drafts))
"""


@pytest.mark.parametrize("case", sorted(CASES))
def test_deep_nesting_is_chunked_not_crashed(case: str) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD.format(expr=CASES[case])], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert int(done.stdout) > 0


def test_ordinary_nesting_is_still_markdown() -> None:
    """Below the bound nothing changes: headings under a nested list still make the heading path."""
    text = normalize("# Guide\n\n" + "\n".join("  " * i + "- item" for i in range(50)) + "\n\n## Rollback\n\n"
                     + "Revert the release tag. " * 30 + "\n")
    drafts = chunk_text(text, "Doc", markdown=True)
    assert any("Guide" in d.heading_path for d in drafts)  # parsed as Markdown: the plain chunker has no headings
    assert all(d.heading_path == ("Doc",) for d in chunk_text(text, "Doc", markdown=False))
    assert MAX_MARKDOWN_NESTING >= 1000


def test_a_parser_panic_is_chunked_as_plain_text() -> None:
    """markdown-it.rs panics (index out of bounds in its code-span rule) on this input, found by
    tests/ingest/test_hostile_input.py; pyo3 raises that as a BaseException. It ends as plain-text chunks."""
    text = normalize("b\x1b[31maaa word -`1\U000508fb\U000d4baa\x95")
    drafts = chunk_text(text, "T", markdown=True)
    assert drafts and "".join(d.text for d in drafts) == text.strip()
