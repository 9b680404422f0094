"""The semantic arm's windows (`knowledge.core.windows`, pure): property tests over synthetic
tokenizer offsets, so they need neither the model nor the `semantic` extra."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from knowledge.core.windows import (
    CODE_SHARE,
    MIN_BODY,
    OVERLAP_DIVISOR,
    PREFIX_COMPONENTS,
    code_ranges,
    prefix,
    useful,
    window_spans,
    window_texts,
)

# A word is 1-4 word pieces of 1-5 characters; words are separated by one or two spaces, or by
# nothing (a word glued to the next, as "etcdctl.snapshot" is to a tokenizer).
word = st.tuples(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.sampled_from(["", " ", "  "]))
words = st.lists(word, max_size=300)
long_words = st.lists(word, min_size=30, max_size=300)
#: Budgets small beside the texts, so most examples are cut into several windows.
budgets = st.integers(8, 48)


def layout(spec: list[tuple[list[int], str]]) -> tuple[str, list[tuple[int, int]]]:
    """A text and its word pieces' character offsets."""
    text, offsets = "", []
    for pieces, gap in spec:
        for n in pieces:
            offsets.append((len(text), len(text) + n))
            text += "x" * n
        text += gap
    return text, offsets


def pieces_in(span: tuple[int, int], offsets: list[tuple[int, int]]) -> list[int]:
    return [i for i, (s, e) in enumerate(offsets) if s >= span[0] and e <= span[1]]


@given(long_words, st.integers(4, 48))
def test_windows_cover_every_piece_within_the_budget_in_order(spec: list[tuple[list[int], str]], budget: int) -> None:
    text, offsets = layout(spec)
    spans = window_spans(text, offsets, budget)
    if not offsets:
        assert spans == []
        return
    held = [pieces_in(span, offsets) for span in spans]
    assert all(0 < len(h) <= budget for h in held)  # never over the model's budget, never empty
    assert sorted({i for h in held for i in h}) == list(range(len(offsets)))  # every piece is read
    for a, b in itertools.pairwise(held):
        assert a[0] < b[0] and a[-1] < b[-1]  # forward, each window adding new pieces
        assert b[0] <= a[-1] + 1  # contiguous: no piece falls between two windows
    # Spans start and end on word pieces (no stray gap characters at the edges).
    assert all(text[s:e] == text[s:e].strip() for s, e in spans)


@given(long_words, budgets)
def test_consecutive_windows_overlap_by_about_an_eighth(spec: list[tuple[list[int], str]], budget: int) -> None:
    text, offsets = layout(spec)
    held = [pieces_in(span, offsets) for span in window_spans(text, offsets, budget)]
    overlap = budget // OVERLAP_DIVISOR
    for a, b in itertools.pairwise(held):
        shared = a[-1] - b[0] + 1
        assert overlap - max(budget // 8, 1) <= shared <= overlap


@given(long_words, budgets)
def test_a_window_ends_at_a_word_end_when_one_lies_in_its_last_eighth(spec: list[tuple[list[int], str]],
                                                                      budget: int) -> None:
    text, offsets = layout(spec)
    n = len(offsets)

    def word_end(i: int) -> bool:
        return i + 1 >= n or offsets[i][1] < offsets[i + 1][0]

    for span in window_spans(text, offsets, budget):
        held = pieces_in(span, offsets)
        full = min(held[0] + budget, n) - 1  # where the window would end, cut blindly
        if any(word_end(i) for i in range(max(held[0], full - max(budget // 8, 1)), full + 1)):
            assert word_end(held[-1]), (span, budget)


def test_a_passage_within_the_budget_is_one_window() -> None:
    text, offsets = layout([([2, 3], " "), ([4], " "), ([1], "")])
    assert window_spans(text, offsets, 10) == [(0, len(text))]
    assert window_spans("   ", [], 10) == []
    assert window_spans("text the tokenizer gave no pieces for", [], 10) == [(0, 37)]


def test_the_prefix_is_the_last_heading_components() -> None:
    path = ["Guide", "Operator manual", "Disaster recovery", "Restoring a cluster"]
    assert prefix(path) == "Operator manual > Disaster recovery > Restoring a cluster"
    assert PREFIX_COMPONENTS == 3
    assert prefix([" ", "Only"]) == "Only" and prefix([]) == ""


@given(words, st.integers(MIN_BODY + 8, 160), st.integers(0, 400))
def test_window_texts_prefix_every_window_and_leave_the_body_its_budget(
        spec: list[tuple[list[int], str]], size: int, prefix_pieces: int) -> None:
    text, offsets = layout(spec)
    head = "Ops > Backups"
    texts = window_texts(head, text, offsets, size, prefix_pieces)
    body_budget = max(size - prefix_pieces - 1, MIN_BODY)
    assert texts and all(t.startswith(head + "\n") or t == head for t in texts)
    bodies = [t.removeprefix(head + "\n") for t in texts]
    assert [b for b in bodies if b != head] == [text[s:e] for s, e in window_spans(text, offsets, body_budget)]
    assert window_texts("", text, offsets, size, 0) == [text[s:e] for s, e in window_spans(text, offsets, size)]


# --- windows that add nothing: mostly code or table ----------------------------------------------

prose = st.text(alphabet="abcdef ", min_size=1, max_size=60).map(lambda t: t.strip() or "prose")
block = st.one_of(
    prose.map(lambda t: t + "\n"),
    st.lists(st.text(alphabet="xyz(){}=;", min_size=1, max_size=40), min_size=1, max_size=6).map(
        lambda lines: "```sh\n" + "\n".join(lines) + "\n```\n"),
    st.lists(prose, min_size=1, max_size=4).map(lambda cells: "| " + " | ".join(cells) + " |\n"),
)
documents = st.lists(block, min_size=1, max_size=40).map("".join)


def share(text: str, span: tuple[int, int]) -> float:
    code = {i for a, b in code_ranges(text) for i in range(a, b)}
    nonspace = [i for i in range(*span) if not text[i].isspace()]
    return sum(i in code for i in nonspace) / max(len(nonspace), 1)


@given(documents, st.integers(8, 200))
def test_useful_windows_drop_only_mostly_code_and_keep_one(text: str, width: int) -> None:
    spans = [(s, min(s + width, len(text))) for s in range(0, len(text), max(width // 2, 1))]
    kept = useful(text, spans)
    assert kept and all(k in spans for k in kept) and kept == sorted(kept)  # a non-empty subsequence
    dropped = [s for s in spans if s not in kept]
    assert all(share(text, s) >= CODE_SHARE for s in dropped)
    if dropped and kept != spans[:1]:
        assert all(share(text, s) < CODE_SHARE for s in kept)
    if all(share(text, s) >= CODE_SHARE for s in spans):
        assert kept == spans[:1]  # all code: the first window stands for the passage


def test_code_ranges_are_fenced_blocks_and_table_rows() -> None:
    text = "intro\n```\nls -l\n```\nmiddle\n| a | b |\n|---|---|\nend\n~~~\nopen fence to the end"
    assert [text[a:b] for a, b in code_ranges(text)] == [
        "```\nls -l\n```\n", "| a | b |\n|---|---|\n", "~~~\nopen fence to the end"]
    assert useful("no code here", [(0, 2), (3, 7)]) == [(0, 2), (3, 7)]
    only_code = "```\n" + "x = 1\n" * 40 + "```\n"
    assert useful(only_code, [(0, 100), (100, len(only_code))]) == [(0, 100)]
