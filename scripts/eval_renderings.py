"""Issue 34's parity check: docs-dev recall@3 over the HTML and DOCX renderings of the docs corpora
against the Markdown they were rendered from (the bar: within 0.03).

    .venv/bin/python scripts/eval_renderings.py [--semantic/--no-semantic] [--loop trio|asyncio] [--flips N]
                                                [--show QID ...]

One throwaway service (as `eval_retrieval.py` opens it; the semantic arm off unless ``--semantic``)
ingests every Markdown file of docs-argocd and docs-etcd (`retrieval_data.docs_sources`, titled by
their path under the corpus folder) three times, each rendering into its own tenant:

- ``markdown``: the file as it is, ``text/markdown``;
- ``html``: `tests.helpers.render_html.render_docs_page` (a docs-site page, nav/header/footer/cookie
  chrome around the rendered body), ``text/html``, extracted by the service's parser pool;
- ``docx``: `tests.helpers.render_docx.render_docs_docx`, the Word media type, likewise.

The 68 docs-dev questions run through ``knowledge.search`` per tenant at its defaults (3 passages /
3000 tokens: eval_retrieval's "knowledge.search, default 3 / 3000" row) and with 10 passages / 10,000
tokens; R@3 and R@10 are over the answerable questions.

Matching. ``strict`` is `retrieval_data.answers` (a whitespace-normalized answer quote inside the
passage). The quotes were cut from the Markdown source, so a rendering's round trip can change their
inline syntax without losing a word. ``loose`` (`loose_text`) applies the same markup-insensitive
normalization to the quote and to the passage, identically for the three renderings, then
whitespace normalization: links ``[text](url)`` / ``[text][ref]`` / ``<url>`` become their text,
backslash escapes before punctuation are dropped, so are backticks, asterisks, underscores at a
word's edge (emphasis, not ``snake_case``), table pipes and delimiter rows, and line-leading
heading, list (``-``/``*``/``+``/``1.``/``1)``) and quote (``>``) markers; ``&amp;``/``&lt;``/``&gt;``/
``&quot;`` become their characters.

Printed per rendering: documents ingested and refused (by reason), chunks, chunks whose heading path
is longer than the title alone (a rough check that headings survived), R@3 and R@10 strict and loose
and their differences from Markdown, with the verdict against the 0.03 bar; then the questions that
flip at 3 and at 10 (answered from the Markdown, not from a rendering, or the other way round; at
most ``--flips`` of each), with whether the rendering's chunks of the answer's file still hold a
quote (strict / loose) — if not, the extraction lost or changed the text; if so, the ranking moved —
and the answering passage's rank in either 10-passage search; ``--show QID`` prints a question's
10-passage search from every rendering (document, heading path, score, relevance, tokens).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval_retrieval import Corpus, ingest_corpus, query
from retrieval_data import (
    Source,
    add_semantic_option,
    answers,
    docs_sources,
    load_docs_dev,
    normalize_ws,
    own_db,
    print_run,
)

from knowledge.config import Settings
from knowledge.parsers.sniff import DOCX, HTML
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.supervisors.embedded_pg import throwaway_data_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package holds the renderers

from tests.helpers.render_docx import render_docs_docx
from tests.helpers.render_html import render_docs_page

BAR = 0.03
RENDERINGS: dict[str, tuple[str, Callable[[str, str], bytes] | None]] = {
    "markdown": ("text/markdown", None),
    "html": (HTML, render_docs_page),
    "docx": (DOCX, render_docs_docx),
}

# --------------------------------------------------------------------------- markup-insensitive matching

_LINK = re.compile(r"!?\[([^\]\n]*)\](?:\([^)\n]*\)|\[[^\]\n]*\])")  # [text](url), [text][ref], ![alt](src)
_AUTOLINK = re.compile(r"<((?:https?|ftp|mailto):[^>\s]*)>")
_ESCAPE = re.compile(r"\\(?=[!-/:-@\[-`{-~])")  # CommonMark: a backslash before ASCII punctuation
_LINE_MARKERS = re.compile(r"^[ \t]*(?:(?:#{1,6}|>|[-*+]|\d{1,9}[.)])[ \t]+)+", re.MULTILINE)
_DELIMITER_ROW = re.compile(r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$", re.MULTILINE)
_EDGE_UNDERSCORES = re.compile(r"(?<!\w)_+|_+(?!\w)")
_DROP = str.maketrans("", "", "`*|")
_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&amp;", "&"))


def loose_text(text: str) -> str:
    """``text`` without Markdown's inline and line markup (see the module docstring), whitespace
    normalized: what a quote and a passage are compared as by the ``loose`` match."""
    for entity, char in _ENTITIES:
        text = text.replace(entity, char)
    text = _LINK.sub(r"\1", text)
    text = _AUTOLINK.sub(r"\1", text)
    text = _DELIMITER_ROW.sub(" ", text)
    text = _LINE_MARKERS.sub("", text)
    text = _ESCAPE.sub("", text)
    text = _EDGE_UNDERSCORES.sub("", text.translate(_DROP))
    return normalize_ws(text)


def answers_loose(question: dict[str, Any], passage_text: str) -> bool:
    """`answers` with both sides through `loose_text`."""
    quotes = [q for q in question.get("answer_quotes") or [] if loose_text(q)]
    if not quotes:
        return False
    text = loose_text(passage_text)
    return any(loose_text(q) in text for q in quotes)


MATCHERS: dict[str, Callable[[dict[str, Any], str], bool]] = {"strict": answers, "loose": answers_loose}

# --------------------------------------------------------------------------- one rendering


@dataclass
class Rendered:
    name: str
    corpus: Corpus
    render_seconds: float
    headed: int = 0  # chunks whose heading path is longer than the title alone
    default: list[list[str]] = field(default_factory=list)  # per question: the default search's passages
    wide: list[list[str]] = field(default_factory=list)  # the 10-passage search's
    doc_text: dict[str, str] = field(default_factory=dict)  # source key -> its chunks' text, joined
    shown: dict[str, list[str]] = field(default_factory=dict)  # question id -> its 10 passages described (--show)


async def ingest_rendering(svc: KnowledgeService, db: Database, name: str) -> Rendered:
    media_type, render = RENDERINGS[name]
    began = time.perf_counter()
    sources = docs_sources()
    if render is not None:
        sources = [Source(s.key, s.title, render(s.data.decode("utf-8"), s.title), media_type) for s in sources]
    render_seconds = time.perf_counter() - began
    tenant = f"eval-render-{name}"
    corpus = await ingest_corpus(svc, db, tenant, sources)
    rows = await db.fetch("SELECT document_id, heading_path, text FROM knowledge_chunks WHERE tenant_id = $1 "
                          "ORDER BY document_id, ordinal", tenant)
    out = Rendered(name, corpus, render_seconds, headed=sum(len(r["heading_path"]) > 1 for r in rows))
    texts: dict[str, list[str]] = {}
    for r in rows:
        key = corpus.doc_keys.get(r["document_id"])
        if key is not None:
            texts.setdefault(key, []).append(r["text"])
    out.doc_text = {key: "\n\n".join(parts) for key, parts in texts.items()}
    return out


async def search_all(svc: KnowledgeService, rendered: Rendered, questions: list[dict[str, Any]],
                     show: set[str]) -> None:
    tenant, keys = rendered.corpus.tenant, rendered.corpus.doc_keys
    for q in questions:
        rendered.default.append([p.text for p in await svc.search(query(tenant, q["question"]))])
        wide = await svc.search(query(tenant, q["question"], max_passages=10, budget_tokens=10_000))
        rendered.wide.append([p.text for p in wide])
        if q["id"] in show:
            rendered.shown[q["id"]] = [
                f"{'*' if answers_loose(q, p.text) else ' '} score {p.score:.3f} relevance {p.relevance or 0:.3f} "
                f"{p.tokens:>4} tok {keys.get(p.document_id, '?')} {' > '.join(p.heading_path[1:])}" for p in wide]


# --------------------------------------------------------------------------- report


def hits(questions: list[dict[str, Any]], ranked: list[list[str]], k: int, match: str) -> list[bool]:
    fn = MATCHERS[match]
    return [any(fn(q, t) for t in r[:k]) for q, r in zip(questions, ranked, strict=True)]


def recall(flags: list[bool], idx: list[int]) -> float:
    return sum(flags[i] for i in idx) / len(idx) if idx else float("nan")


def first_rank(question: dict[str, Any], ranked: list[str], match: str) -> int | None:
    return next((n + 1 for n, t in enumerate(ranked) if MATCHERS[match](question, t)), None)


def flip(q: dict[str, Any], run: Rendered, match: str, i: int, base: Rendered) -> str:
    """One flipped question: whether the rendering's chunks of the answer's file still hold a quote,
    and where an answering passage ranks in either 10-passage search."""
    held = run.doc_text.get(q["file"] or "", "")
    in_doc = "/".join("yes" if MATCHERS[m](q, held) else "no" for m in MATCHERS)
    ranks = f"{first_rank(q, base.wide[i], match) or '-'} -> {first_rank(q, run.wide[i], match) or '-'}"
    return (f"{q['id']} {q['file']} (quote in the file's chunks strict/loose: {in_doc}; rank in the 10-passage "
            f"search {base.name} -> {run.name}: {ranks}): {q['question']}")


def report(questions: list[dict[str, Any]], runs: list[Rendered], flips: int) -> list[str]:
    answerable = [i for i, q in enumerate(questions) if not q["unanswerable"]]
    base = runs[0]
    r: dict[tuple[str, str, int], list[bool]] = {}
    for run in runs:
        for match in MATCHERS:
            r[run.name, match, 3] = hits(questions, run.default, 3, match)
            r[run.name, match, 10] = hits(questions, run.wide, 10, match)
    lines = [f"docs-dev: {len(questions)} questions, {len(answerable)} answerable; R@3 = knowledge.search default "
             f"(3 passages / 3000 tokens), R@10 = 10 passages / 10000 tokens; bar: |R@3 - markdown's| <= {BAR}",
             f"{'rendering':<9} {'docs':>5} {'refused':<31} {'chunks':>6} {'headed':>6} {'render s':>8} "
             f"{'ingest s':>8} {'R@3 str':>7} {'R@3 lse':>7} {'R@10str':>7} {'R@10lse':>7} "
             f"{'dR@3 str':>8} {'dR@3 lse':>8} {'dR@10str':>8} {'dR@10lse':>8}  verdict"]
    for run in runs:
        c = run.corpus
        refused = ", ".join(f"{k} {v}" for k, v in sorted(c.refused.items())) or "0"
        vals = {(m, k): recall(r[run.name, m, k], answerable) for m in MATCHERS for k in (3, 10)}
        diffs = {(m, k): vals[m, k] - recall(r[base.name, m, k], answerable) for m in MATCHERS for k in (3, 10)}
        if run is base:
            verdict = "(reference)"
        else:
            ok = {m: abs(diffs[m, 3]) <= BAR + 1e-9 for m in MATCHERS}
            verdict = f"strict {'PASS' if ok['strict'] else 'FAIL'}, loose {'PASS' if ok['loose'] else 'FAIL'}"
        lines.append(
            f"{run.name:<9} {len(c.doc_keys):>5} {refused:<31} {c.chunks:>6} {run.headed:>6} "
            f"{run.render_seconds:>8.1f} {c.seconds:>8.1f} {vals['strict', 3]:>7.3f} {vals['loose', 3]:>7.3f} "
            f"{vals['strict', 10]:>7.3f} {vals['loose', 10]:>7.3f} "
            f"{diffs['strict', 3]:>+8.3f} {diffs['loose', 3]:>+8.3f} {diffs['strict', 10]:>+8.3f} "
            f"{diffs['loose', 10]:>+8.3f}  {verdict}")
    lines.append("headed: chunks whose heading path is longer than the title alone; refused: by reason; "
                 "str = strict answers(), lse = markup-insensitive (loose_text)")
    if flips <= 0:
        return lines
    for run in runs[1:]:
        for match in MATCHERS:
            for k in (3, 10):
                lost = [i for i in answerable if r[base.name, match, k][i] and not r[run.name, match, k][i]]
                won = [i for i in answerable if r[run.name, match, k][i] and not r[base.name, match, k][i]]
                lines.append(f"\n{run.name}, {match}, @{k}: {len(lost)} answered from markdown but not from "
                             f"{run.name}, {len(won)} the other way round")
                for tag, idx in (("lost", lost), ("won", won)):
                    for i in idx[:flips]:
                        lines.append(f"  {tag} {flip(questions[i], run, match, i, base)}")
    for q in questions:
        for run in runs:
            if q["id"] in run.shown:
                lines += [f"\n{q['id']} from {run.name}: the 10-passage search (* answers, loose): {q['question']}",
                          *(f"  {n + 1:>2} {d}" for n, d in enumerate(run.shown[q["id"]]))]
    return lines


# --------------------------------------------------------------------------- main


async def run(args: argparse.Namespace) -> list[str]:
    questions = load_docs_dev()
    with throwaway_data_dir("knowledge-eval-renderings-") as data_dir:
        settings = Settings(data_dir=data_dir, sweep_interval_seconds=None, pool_max_size=10,
                            semantic_arm=args.semantic)
        async with KnowledgeService.open(settings) as svc, own_db(svc, "knowledge-eval-renderings") as db:
            runs = [await ingest_rendering(svc, db, name) for name in RENDERINGS]
            await db.execute("VACUUM ANALYZE")
            for rendered in runs:
                await search_all(svc, rendered, questions, set(args.show))
            arms = "+".join(svc.retrieval().arms)
    return [f"arms: {arms}; loop={args.loop}", *report(questions, runs, args.flips)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    parser.add_argument("--flips", type=int, default=20, help="list at most N flipped questions per rendering "
                        "and match, each way (0: none)")
    parser.add_argument("--show", action="append", default=[], metavar="QID",
                        help="print the 10-passage search of question QID from every rendering (repeatable)")
    add_semantic_option(parser)
    print_run(run, parser.parse_args())


if __name__ == "__main__":
    main()
