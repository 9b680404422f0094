"""A weakly labelled training set over the docs corpora, for fitting retrieval (issue 19): each
section's heading as the question, the section as its answer, the heading hidden from the text
that is indexed when the question is asked.

    .venv/bin/python scripts/build_docs_train.py [--out docs-train.jsonl] [--folds 5] [--seed 19]

Why: docs-dev (68 questions) is too few to tune on — a gain fitted there did not carry over to the
held-out questions — and SciFact's claims are not how people ask about software. A heading is a
short, topical question in the corpus's own vocabulary ("Restoring from snapshot", "Using
`--data-dir`"); hidden from the indexed text, the retriever must find its section from the body
alone, which is what a real question asks of it.

Every question has the docs-dev format (`qa/README.md`: ``id, question, file, heading_path,
answer_quotes, kind, paraphrase, heading_dependent, unanswerable``), so the same scoring applies
(a passage answers when it contains one of ``answer_quotes``), plus:

- ``fold`` (0..folds-1, by file: all the questions of a file share a fold, so that a fold's
  documents are unseen when fitting on the others);
- ``hidden_line`` (1-based line of the heading in the file) and ``hidden_heading`` (its text):
  `hide_headings` replaces those headings' text with ``Section`` (the level is kept, so chunking
  does not change) in the sources ingested for that fold's questions.

Which sections: a heading of level 2 or deeper (etcd's page title is front matter, Argo CD's is
the ``#`` line) outside code fences, of 2-12 words after cleaning and not generic ("Overview",
"Examples", "Options", …), over a body whose first prose line (not code, table, list marker,
admonition, shortcode, HTML or link definition) holds a sentence of 8-60 words; the answer quote is
that sentence cut to at most 25 words, and it must occur exactly once in its file. Excluded: the
generated CLI reference (``docs-argocd/user-guide/commands/``), and every file that docs-dev
questions answer from, so that docs-dev stays a check the set never saw.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval_data import CORPUS, Source, docs_files, load_docs_dev

GENERIC = {
    "overview", "introduction", "example", "examples", "usage", "options", "synopsis", "see also", "summary",
    "description", "notes", "note", "prerequisites", "requirements", "background", "motivation", "goals",
    "non-goals", "proposal", "design details", "alternatives", "drawbacks", "open questions", "use cases",
    "implementation details", "security considerations", "risks and mitigations", "upgrade / downgrade strategy",
    "table of contents", "references", "conclusion", "faq", "configuration", "installation", "setup",
    "getting started", "next steps", "what's next", "troubleshooting", "limitations", "known issues",
    "options inherited from parent commands", "testing", "release notes", "changelog", "related", "more",
    "how it works", "architecture", "features", "terminology", "glossary", "summary of changes",
}
EXCLUDED_PREFIXES = ("docs-argocd/user-guide/commands/",)
QUOTE_WORDS = 25

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_NOT_PROSE = re.compile(r"^\s*([|>*+\-!<{\[:#]|\d+[.)]\s|\s{4})")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)|\[([^\]]*)\]\[[^\]]*\]")
_SENTENCE_END = re.compile(r"(?<=[a-z0-9)`\"'*_])[.!?](?=\s+[A-Z`*\"(]|\s*$)")


@dataclass(frozen=True)
class Section:
    file: str  # relative to the corpus folder
    line: int  # the heading's line, 1-based
    level: int
    heading: str  # as in the file
    heading_path: tuple[str, ...]  # page title first
    body: tuple[str, ...]  # the section's own lines outside code fences (up to the next heading)


def clean_heading(text: str) -> str:
    """A heading as a question: links to their text, emphasis and trailing punctuation dropped, code
    spans kept as their content (``--data-dir`` stays)."""
    text = _LINK.sub(lambda m: m.group(1) or m.group(2) or "", text)
    text = re.sub(r"\{#[^}]*\}", "", text)  # MkDocs/Hugo heading ids
    text = text.replace("`", "").replace("**", "").replace("__", "")
    text = re.sub(r"^\d+(\.\d+)*[.)]?\s+", "", text)  # "2.1 Configure" -> "Configure"
    return re.sub(r"\s+", " ", text).strip(" :.-")


def sections(root: Path, path: Path) -> Iterator[Section]:
    """The file's sections under ATX headings outside code fences; etcd's front-matter ``title:`` (or
    Argo CD's ``#`` line) heads the path."""
    rel = str(path.relative_to(root))
    lines = path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n")
    start, title = 0, None
    if lines and lines[0].strip() == "---":
        for i in range(1, len(lines)):
            if lines[i].strip() == "---":
                start = i + 1
                break
            if lines[i].startswith("title:"):
                title = lines[i][6:].strip().strip("\"'")
    heads: list[tuple[int, int, str]] = []  # (line index, level, text)
    prose: list[bool] = [False] * len(lines)  # outside code fences, and not a fence line
    fenced = False
    for i in range(start, len(lines)):
        if _FENCE.match(lines[i]):
            fenced = not fenced
            continue
        prose[i] = not fenced
        m = _HEADING.match(lines[i]) if prose[i] else None
        if m:
            heads.append((i, len(m.group(1)), m.group(2)))
    path_by_level: dict[int, str] = {0: title} if title else {}
    for n, (i, level, text) in enumerate(heads):
        path_by_level = {k: v for k, v in path_by_level.items() if k < level}
        path_by_level[level] = text
        end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
        if level >= 2:
            yield Section(rel, i + 1, level, text, tuple(path_by_level[k] for k in sorted(path_by_level)),
                          tuple(lines[j] for j in range(i + 1, end) if prose[j]))


def first_sentence(body: Sequence[str]) -> str | None:
    """The first sentence of the body's first prose line, as it stands in the file (for an exact
    quote), or None."""
    for line in body:
        if not line.strip() or _NOT_PROSE.match(line) or line.lstrip().startswith("{{"):
            continue
        text = line.strip()
        end = _SENTENCE_END.search(text)
        sentence = text[:end.end()] if end else text
        return sentence if 8 <= len(sentence.split()) <= 60 else None
    return None


def quote_of(sentence: str) -> str:
    """At most `QUOTE_WORDS` words of the sentence, from its start, exactly as written."""
    words = sentence.split(" ")
    return " ".join(words[:QUOTE_WORDS]) if len(words) > QUOTE_WORDS else sentence


def fold_of(file: str, folds: int, seed: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{file}".encode()).digest()[:4], "big") % folds


def build(root: Path = CORPUS, folds: int = 5, seed: int = 19) -> list[dict[str, Any]]:
    """The training questions (see the module docstring), in file and line order."""
    dev_files = {q["file"] for q in load_docs_dev() if q.get("file")}
    out: list[dict[str, Any]] = []
    for path in docs_files(root):
        rel = str(path.relative_to(root))
        if rel in dev_files or rel.startswith(EXCLUDED_PREFIXES):
            continue
        raw = path.read_text(encoding="utf-8").replace("\r\n", "\n")
        for section in sections(root, path):
            question = clean_heading(section.heading)
            if not 2 <= len(question.split()) <= 12 or question.lower() in GENERIC:
                continue
            sentence = first_sentence(section.body)
            if sentence is None:
                continue
            quote = quote_of(sentence)
            if len(quote.split()) < 5 or raw.count(quote) != 1:
                continue
            key = f"{rel}:{section.line}"
            out.append({
                "id": "t-" + hashlib.sha256(key.encode()).hexdigest()[:10],
                "question": question, "file": rel, "heading_path": list(section.heading_path),
                "answer_quotes": [quote], "kind": "heading", "paraphrase": False,
                "heading_dependent": False, "unanswerable": False,
                "fold": fold_of(rel, folds, seed), "hidden_line": section.line, "hidden_heading": section.heading,
            })
    return out


def hide_headings(sources: Iterable[Source], questions: Iterable[dict[str, Any]]) -> list[Source]:
    """The sources with each question's heading text replaced by ``Section`` (level kept), for
    ingesting the corpus that a fold's questions are asked of."""
    hidden: dict[str, set[int]] = {}
    for q in questions:
        hidden.setdefault(q["file"], set()).add(int(q["hidden_line"]))
    out: list[Source] = []
    for source in sources:
        lines_to_hide = hidden.get(source.key)
        if not lines_to_hide:
            out.append(source)
            continue
        lines = source.data.decode("utf-8").replace("\r\n", "\n").split("\n")
        for number in lines_to_hide:
            m = _HEADING.match(lines[number - 1])
            assert m, f"{source.key}:{number} is not a heading"
            lines[number - 1] = f"{m.group(1)} Section"
        out.append(Source(source.key, source.title, "\n".join(lines).encode("utf-8"), source.media_type))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs-train.jsonl"))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args()
    questions = build(folds=args.folds, seed=args.seed)
    with args.out.open("w", encoding="utf-8") as fh:
        for q in questions:
            fh.write(json.dumps(q, ensure_ascii=False) + "\n")
    by_set = Counter(q["file"].split("/")[0] for q in questions)
    by_fold = Counter(q["fold"] for q in questions)
    files = len({q["file"] for q in questions})
    print(f"{len(questions)} questions from {files} files -> {args.out}")
    print("by corpus: " + ", ".join(f"{k} {v}" for k, v in sorted(by_set.items())))
    print("by fold:   " + ", ".join(f"{k}: {v}" for k, v in sorted(by_fold.items())))


if __name__ == "__main__":
    main()
