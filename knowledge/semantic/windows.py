"""Windows of a passage for a length-limited encoder (pure).

A transformer embedder reads a bounded number of word pieces (all-MiniLM-L6-v2: 256, trained at
128); a passage is up to 1,000 of our tokens. So a passage is embedded as *windows*: spans of at
most ``size`` word pieces of the passage's text, each prefixed by the passage's heading path, that
overlap by a quarter so a sentence cut by one window boundary is whole in the next. A passage's
semantic score is its best window's.

The spans come from the encoder's own tokenizer offsets (``offsets``: one ``(start, end)``
character span per word piece of ``text``), so the window size is exact in the unit the model
reads. Window boundaries move back to the nearest whitespace within the window's last eighth, so
words are not split where that is possible.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The heading path's last components that prefix each window (the document title and the
#: nearest headings say most about a span; deep paths would eat the window).
PREFIX_COMPONENTS = 3
#: A window never holds fewer body word pieces than this, however long the heading path is.
MIN_BODY = 32


def prefix(heading_path: Sequence[str]) -> str:
    """The text that heads every window of a passage: its last heading-path components."""
    return " > ".join(h.strip() for h in heading_path[-PREFIX_COMPONENTS:] if h.strip())


def window_spans(text: str, offsets: Sequence[tuple[int, int]], budget: int) -> list[tuple[int, int]]:
    """Character spans of ``text`` covering every word piece, each at most ``budget`` pieces long,
    consecutive spans overlapping by about a quarter of ``budget``."""
    pieces = [(s, e) for s, e in offsets if e > s]
    if not pieces:
        return [(0, len(text))] if text.strip() else []
    budget = max(budget, 1)
    if len(pieces) <= budget:
        return [(pieces[0][0], pieces[-1][1])]
    overlap, slack = budget // 4, max(budget // 8, 1)

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
    spans = window_spans(text, offsets, budget)
    if not spans:
        return [head] if head else []
    return [f"{head}\n{text[s:e]}" if head else text[s:e] for s, e in spans]
