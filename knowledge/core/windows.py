"""Windows of a passage for a length-limited encoder (pure).

A transformer embedder reads a bounded number of word pieces (all-MiniLM-L6-v2: 256, trained at
128); a passage is up to 1,000 of our tokens. So a passage is embedded as *windows*: spans of at
most ``size`` word pieces of the passage's text, each prefixed by the passage's heading path, that
overlap by an eighth so a sentence cut by one window boundary is mostly whole in the next. A
passage's semantic score is its best window's.

Windows that add nothing are not embedded (`useful`): a window whose body is at least three
quarters code block or table (fence lines, the lines between them, and ``|`` table rows) when the
passage keeps another window — code and tables are the lexical arm's (identifiers, flags), and the
generated CLI reference pages are mostly such windows. A passage always keeps one window.

Measured (`scripts/survey_embedding_cost.py`, in process, one thread; issue 18): against issue 11's
quarter overlap and every window, 2.03x the passages per second (2.96 windows per docs passage
instead of 5.29; SciFact has no code: 3.88 instead of 4.28), with docs-dev recall@3 fused 0.700
(0.650 before), paraphrased 0.381 (0.381), SciFact nDCG@10 fused 0.787 on train queries (0.780)
and 0.785 on test (0.783), on a 2,500-abstract SciFact subsample.

The spans come from the encoder's own tokenizer offsets (``offsets``: one ``(start, end)``
character span per word piece of ``text``), so the window size is exact in the unit the model
reads. Window boundaries move back to the nearest whitespace within the window's last eighth, so
words are not split where that is possible.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

#: The heading path's last components that prefix each window (the document title and the
#: nearest headings say most about a span; deep paths would eat the window).
PREFIX_COMPONENTS = 3
#: A window never holds fewer body word pieces than this, however long the heading path is.
MIN_BODY = 32
#: Consecutive windows share 1/OVERLAP_DIVISOR of the budget (issue 11: 4).
OVERLAP_DIVISOR = 8
#: A window whose body's non-space characters are at least this share code or table is skipped
#: (when the passage keeps another).
CODE_SHARE = 0.75


def prefix(heading_path: Sequence[str]) -> str:
    """The text that heads every window of a passage: its last heading-path components."""
    return " > ".join(h.strip() for h in heading_path[-PREFIX_COMPONENTS:] if h.strip())


def window_spans(text: str, offsets: Sequence[tuple[int, int]], budget: int,
                 overlap_divisor: int = OVERLAP_DIVISOR) -> list[tuple[int, int]]:
    """Character spans of ``text`` covering every word piece, each at most ``budget`` pieces long,
    consecutive spans overlapping by about 1/``overlap_divisor`` of ``budget`` (0: no overlap; the
    survey of issue 18 measures other divisors)."""
    pieces = [(s, e) for s, e in offsets if e > s]
    if not pieces:
        return [(0, len(text))] if text.strip() else []
    budget = max(budget, 1)
    if len(pieces) <= budget:
        return [(pieces[0][0], pieces[-1][1])]
    overlap, slack = budget // overlap_divisor if overlap_divisor else 0, max(budget // 8, 1)

    def boundary(i: int) -> bool:  # a word ends after piece i (a gap before the next piece)
        return i + 1 >= len(pieces) or pieces[i][1] < pieces[i + 1][0]

    spans: list[tuple[int, int]] = []
    first = 0
    while True:
        last = min(first + budget, len(pieces)) - 1
        for cut in range(last, max(first, last - slack) - 1, -1):
            if boundary(cut):
                last = cut
                break
        spans.append((pieces[first][0], pieces[last][1]))
        if last >= len(pieces) - 1:
            return spans
        nxt = max(first + 1, last + 1 - overlap)
        for start in range(nxt, min(nxt + slack, last + 1)):
            if boundary(start - 1):
                nxt = start
                break
        first = nxt


def window_texts(head: str, text: str, offsets: Sequence[tuple[int, int]], size: int,
                 prefix_pieces: int) -> list[str]:
    """The texts to embed for one passage: ``head`` (its `prefix`) + newline + each window of the
    body, the body's budget being ``size`` less the head's ``prefix_pieces`` (never below
    `MIN_BODY`)."""
    budget = max(size - prefix_pieces - 1, MIN_BODY) if head else size
    spans = useful(text, window_spans(text, offsets, budget))
    if not spans:
        return [head] if head else []
    return [f"{head}\n{text[s:e]}" if head else text[s:e] for s, e in spans]


_FENCE = re.compile(r"[ \t]*(```|~~~)")
_TABLE = re.compile(r"[ \t]*\|")


def code_ranges(text: str) -> list[tuple[int, int]]:
    """Character ranges of ``text`` that are code or table: fenced blocks (fence lines included;
    an unclosed fence runs to the end) and lines that start with ``|``."""
    ranges: list[tuple[int, int]] = []
    inside = False
    pos = 0
    for line in text.splitlines(keepends=True):
        fence = _FENCE.match(line) is not None
        if fence or inside or _TABLE.match(line):
            if ranges and ranges[-1][1] == pos:
                ranges[-1] = (ranges[-1][0], pos + len(line))
            else:
                ranges.append((pos, pos + len(line)))
        inside ^= fence
        pos += len(line)
    return ranges


def useful(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` without those whose body is mostly code or table (`CODE_SHARE` of its non-space
    characters), unless that would leave none: then the first."""
    if len(spans) < 2:
        return spans
    ranges = code_ranges(text)
    if not ranges:
        return spans
    starts = [a for a, _ in ranges]

    def code_share(s: int, e: int) -> float:
        nonspace = sum(not c.isspace() for c in text[s:e])
        code = 0
        for a, b in ranges[max(bisect.bisect_right(starts, s) - 1, 0):]:
            if a >= e:
                break
            lo, hi = max(a, s), min(b, e)
            if lo < hi:
                code += sum(not c.isspace() for c in text[lo:hi])
        return code / max(nonspace, 1)

    kept = [(s, e) for s, e in spans if code_share(s, e) < CODE_SHARE]
    return kept or spans[:1]
