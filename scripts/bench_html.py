"""HTML main-text extraction on the Zyte (Scrapinghub) article-extraction benchmark: our extractor
(`knowledge.parsers.html_extract.extract_html`, the Markdown the chunker gets) beside trafilatura run
directly, scored exactly as the benchmark's own ``evaluate.py`` scores.

    .venv/bin/python scripts/bench_html.py [--corpus ../shared/corpus/html]

Scoring (``evaluate.py`` of scrapinghub/article-extraction-benchmark, reproduced in `score_page` and
`metrics`): tokens are ``\\w+`` matches (case kept); a text's shingles are its token 4-grams (a text of
fewer than four tokens is one shingle of them all); per page TP/FP/FN are the multiset overlaps of the
predicted and true shingles, normalized to sum 1 so that long pages weigh no more than short ones.
Precision is averaged over the pages with TP+FP > 0, recall over those with TP+FN > 0 (a page with no
error at all counts 1, one with nothing matched 0), and F1 is the harmonic mean of the two averages.

Rows: ``ours`` (the text handed to the chunker, as is), ``ours, markup stripped`` (the same texts
with the Markdown markup removed: how much the markup costs), ``trafilatura``
(``trafilatura.extract(html)``, its defaults) and ``trafilatura include_tables``
(``include_tables=True``: trafilatura 2's default already). The F1 on the two halves (pages in sha256
order, even and odd positions) shows how much a choice made on one half carries to the other: the
extractor's options were chosen on the even half. Pages/s and the time ratio against trafilatura
alone are single-process wall times after a warm-up (`WARM_UP` pages): a loaded machine moves them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "html"
WARM_UP = 10  # pages each extractor runs once before it is timed

TpFpFn = tuple[float, float, float]

_TOKEN_RE = re.compile(r"\w+", re.UNICODE | re.MULTILINE | re.IGNORECASE | re.DOTALL)


def _shingles(text: str, n: int = 4) -> Counter[tuple[str, ...]]:
    tokens = _TOKEN_RE.findall(text or "")
    return Counter(tuple(tokens[i:i + n]) for i in range(max(1, len(tokens) - n + 1)) if tokens[i:i + n])


def score_page(true: str, pred: str) -> TpFpFn:
    """evaluate.py's ``string_shingle_matching``: normalized TP, FP, FN of 4-gram shingles."""
    t, p = _shingles(true), _shingles(pred)
    tp = fp = fn = 0.0
    for key in t.keys() | p.keys():
        a, b = t.get(key, 0), p.get(key, 0)
        tp += min(a, b)
        fp += max(0, b - a)
        fn += max(0, a - b)
    s = tp + fp + fn
    return (tp / s, fp / s, fn / s) if s > 0 else (tp, fp, fn)


def _precision(tp: float, fp: float, fn: float) -> float:
    if fp == fn == 0:
        return 1.0
    if tp == fp == 0:
        return 0.0
    return tp / (tp + fp)


def _recall(tp: float, fp: float, fn: float) -> float:
    if fp == fn == 0:
        return 1.0
    if tp == fn == 0:
        return 0.0
    return tp / (tp + fn)


def metrics(rows: Iterable[TpFpFn]) -> tuple[float, float, float]:
    """evaluate.py's ``metrics_from_tp_fp_fns``: mean precision, mean recall, F1 of the two means."""
    rows = list(rows)
    precision = statistics.mean(_precision(*r) for r in rows if r[0] + r[1] > 0)
    recall = statistics.mean(_recall(*r) for r in rows if r[0] + r[2] > 0)
    return precision, recall, 2 * precision * recall / (precision + recall)


def load(corpus: Path) -> list[tuple[str, bytes, str]]:
    """(sha256, page bytes, true articleBody) in sha256 order."""
    truth = json.loads((corpus / "ground-truth.json").read_text(encoding="utf-8"))
    pages = corpus / "pages"
    return [(sha, gzip.decompress((pages / f"{sha}.html.gz").read_bytes()), truth[sha].get("articleBody", ""))
            for sha in sorted(truth)]


def ours(data: bytes) -> str:
    from knowledge.parsers.html_extract import HtmlRefused, extract_html

    try:
        return extract_html(data).text
    except HtmlRefused:
        return ""


_MARKUP = re.compile(r"^(?:#{1,6} |```\S*$|\| ---.*$|[0-9]{1,9}\. |- |> ?)|\\(?=[^\w\s])|(?<= )\|(?= )|^\| | \|$",
                     re.MULTILINE)


def strip_markup(markdown: str) -> str:
    """The Markdown's text without its markup: heading marks, fences and info strings, list markers
    (ordered numbers too), quote marks, table pipes and delimiter rows, escaping backslashes."""
    return _MARKUP.sub("", markdown)


def run(pages: list[tuple[str, bytes, str]], extract: Callable[[bytes], str]) -> tuple[list[str], float]:
    """Each page's text and the wall time of the whole run (after a warm-up on the first pages)."""
    for _, data, _ in pages[:WARM_UP]:
        extract(data)
    began = time.perf_counter()
    texts = [extract(data) for _, data, _ in pages]
    return texts, time.perf_counter() - began


def scores(pages: list[tuple[str, bytes, str]], texts: list[str]) -> list[TpFpFn]:
    return [score_page(true, pred) for (_, _, true), pred in zip(pages, texts, strict=True)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    args = parser.parse_args()
    if not (args.corpus / "ground-truth.json").exists():
        print(f"bench_html: the benchmark corpus is absent: no {args.corpus / 'ground-truth.json'} "
              "(the shared corpus is expected beside the clone, ../shared/corpus/html)", file=sys.stderr)
        return 2
    import trafilatura

    from knowledge.parsers.html_extract import TRAFILATURA_OPTIONS, preload

    preload()
    pages = load(args.corpus)
    results: dict[str, tuple[list[str], float]] = {}
    results["trafilatura"] = run(pages, lambda b: trafilatura.extract(b) or "")
    results["trafilatura include_tables"] = run(pages, lambda b: trafilatura.extract(b, include_tables=True) or "")
    results["ours"] = texts, elapsed = run(pages, ours)
    results["ours, markup stripped"] = [strip_markup(t) for t in texts], elapsed  # the same run, scored bare
    base = results["trafilatura"][1]
    print(f"{len(pages)} pages; ours: trafilatura {trafilatura.__version__} {TRAFILATURA_OPTIONS}, "
          "the main-container rule")
    print(f"{'extractor':<28} {'precision':>9} {'recall':>7} {'F1':>7} {'F1 even':>8} {'F1 odd':>7} "
          f"{'pages/s':>8} {'time ×':>7}")
    for name, (texts, elapsed) in results.items():
        rows = scores(pages, texts)
        p, r, f = metrics(rows)
        even, odd = metrics(rows[0::2])[2], metrics(rows[1::2])[2]
        print(f"{name:<28} {p:>9.4f} {r:>7.4f} {f:>7.4f} {even:>8.4f} {odd:>7.4f} "
              f"{len(pages) / elapsed:>8.1f} {elapsed / base:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
