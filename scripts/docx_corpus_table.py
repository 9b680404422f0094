"""The DOCX corpus (``../shared/corpus/docx``: python-docx's own test files) through the DOCX extraction
(`knowledge.parsers.docx_extract`), in process: one Markdown table row per file — its outcome (``ok``
or the refusal's reason), the headings found (level and text), the characters extracted, and for a
refusal a one-line why (for ``no_text``, what the document holds instead: empty paragraphs, empty
tables, images). Asserts nothing; ``docs/docx-corpus.md`` is its output.

    .venv/bin/python scripts/docx_corpus_table.py [corpus-dir] > docs/docx-corpus.md
"""

from __future__ import annotations

import re
import sys
import zipfile
from collections import Counter
from pathlib import Path

from knowledge.parsers.docx_extract import DOCX_TEXT_RULES, DocxRefused, extract_docx

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "docx"
_HEADING = re.compile(r"^(#{1,6}) (.+)$", re.MULTILINE)


def _holds(path: Path) -> str:
    """What an extracted-nothing document holds (trusted corpus files only: a plain zip read)."""
    with zipfile.ZipFile(path) as archive:
        xml = archive.read("word/document.xml").decode("utf-8", "replace")
    found = []
    paragraphs = len(re.findall(r"<w:p[ >/]", xml))
    tables = len(re.findall(r"<w:tbl>", xml))
    images = len(re.findall(r"<w:drawing>|<w:pict>", xml))
    if images:
        found.append(f"{images} image{'s' * (images > 1)}")
    if tables:
        found.append(f"{tables} table{'s' * (tables > 1)} with empty cells")
    if paragraphs and not found:
        found.append(f"{paragraphs} empty paragraph{'s' * (paragraphs > 1)}")
    return "no text: " + (" and ".join(found) if found else "an empty body")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def main() -> None:
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else CORPUS
    files = sorted(corpus.glob("*.docx"))
    counts: Counter[str] = Counter()
    rows = []
    for path in files:
        try:
            result = extract_docx(path.read_bytes())
        except DocxRefused as refused:
            counts[refused.reason] += 1
            why = _holds(path) if refused.reason == "no_text" else refused.message
            rows.append(f"| {path.name} | {refused.reason} | | 0 | {_cell(why)} |")
            continue
        counts["ok"] += 1
        headings = "; ".join(f"h{len(m.group(1))} {m.group(2)}" for m in _HEADING.finditer(result.text))
        rows.append(f"| {path.name} | ok | {_cell(headings)} | {len(result.text)} | |")
    summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    print("# DOCX corpus")
    print()
    print(f"python-docx's own test documents (`../shared/corpus/docx`, {len(files)} files) through "
          f"`knowledge.parsers.docx_extract` (rules `{DOCX_TEXT_RULES}`): {summary}. Made by "
          "`scripts/docx_corpus_table.py`.")
    print()
    print("| file | outcome | headings | chars | why |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
