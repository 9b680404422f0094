"""The normalizer and the chunker: properties over generated Markdown (hypothesis). The determinism gate
is `tests/gates/test_chunk_determinism.py`."""

from __future__ import annotations

import itertools
import unicodedata
import uuid
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge.core.chunking import (
    _TOKEN,
    CEILING_TOKENS,
    CHUNKER_VERSION,
    FLOOR_TOKENS,
    ChunkDraft,
    chunk_id,
    chunk_text,
    count_tokens,
)
from knowledge.core.normalize import normalize, tab_width

# ---------------------------------------------------------------- normalization


@given(st.text())
def test_normalize_is_idempotent_and_applies_the_closed_list(raw: str) -> None:
    once = normalize(raw)
    assert normalize(once) == once
    assert "\r" not in once and "\t" not in once
    assert unicodedata.is_normalized("NFC", once)
    assert "\n\n\n\n" not in once and not once.startswith("\n\n\n")
    assert all(line == line.rstrip() for line in once.split("\n"))


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\t")))
def test_normalize_changes_nothing_outside_the_list(raw: str) -> None:
    """Text with no CR, tab, trailing space, long blank run or non-NFC form passes unchanged."""
    lines = [line.rstrip() for line in unicodedata.normalize("NFC", raw).split("\n")]
    clean = "\n".join(lines)
    while "\n\n\n\n" in clean:
        clean = clean.replace("\n\n\n\n", "\n\n\n")
    if clean.startswith("\n\n\n"):
        clean = clean.lstrip("\n")
    assert normalize(clean) == clean or not unicodedata.is_normalized("NFC", clean)


def test_normalize_examples() -> None:
    assert normalize("a\r\nb\rc") == "a\nb\nc"
    assert normalize("x  \ny\t \n") == "x\ny\n"
    assert normalize("a\n\n\n\n\n\nb") == "a\n\n\nb"  # five blank lines -> two
    assert normalize("e\u0301") == "\u00e9"  # NFC
    assert normalize("\tx") == "    x"  # default width 4
    assert normalize("ab\tc") == "ab  c"  # to the next tab stop
    assert normalize("# vim: set ts=8 :\n\tx") == "# vim: set ts=8 :\n        x"
    assert tab_width("-*- tab-width: 2 -*-\n") == 2
    assert tab_width("tab_width = 3\n") == 3
    assert tab_width("tabstop=99\n") == 4  # out of range: ignored


# ---------------------------------------------------------------- generated Markdown

WORDS = ["etcd", "cluster", "member", "snapshot", "restore", "the", "a", "of", "to", "configuration",
         "application", "Kubernetes", "rollback", "sync", "argocd", "leader", "quorum", "is", "and", "x" * 12]


@dataclass
class Section:
    level: int
    heading: str
    paragraphs: list[str]


@st.composite
def paragraph(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["prose", "prose", "prose", "fence", "list"]))
    n = draw(st.integers(1, 900))
    words = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=n, max_size=n)))
    if kind == "fence":
        return f"```sh\n# not a heading\n{words}\n```"
    if kind == "list":
        return "\n".join(f"- {words[i:i + 60]}" for i in range(0, min(len(words), 600), 60))
    return words


@st.composite
def markdown_doc(draw: st.DrawFn) -> tuple[str, list[Section], bool]:
    sections = draw(st.lists(
        st.builds(Section, st.integers(1, 4), st.from_regex(r"[A-Z][a-z]{2,10}( [a-z]{2,8}){0,2}", fullmatch=True),
                  st.lists(paragraph(), min_size=0, max_size=4)),
        min_size=0, max_size=8))
    preamble = draw(st.lists(paragraph(), max_size=2))
    front = draw(st.booleans())
    parts = ["---\ntitle: Front Title\nweight: 3\n---"] if front else []
    parts.extend(preamble)
    for s in sections:
        parts.append(f"{'#' * s.level} {s.heading}")
        parts.extend(s.paragraphs)
    return "\n\n".join(parts) + "\n", sections, front


def _expected_paths(text: str, title: str, sections: list[Section], front: bool) -> list[tuple[int, tuple[str, ...]]]:
    """(offset of each section's start, its heading path), in order, from the generator's tree."""
    root = (title, "Front Title") if front else (title,)
    out: list[tuple[int, tuple[str, ...]]] = [(0, root)]
    stack: list[tuple[int, str]] = []
    pos = 0
    for s in sections:
        line = f"{'#' * s.level} {s.heading}"
        pos = text.index("\n" + line + "\n", pos) + 1 if not text.startswith(line + "\n") or pos else 0
        while stack and stack[-1][0] >= s.level:
            stack.pop()
        stack.append((s.level, s.heading))
        full = root + tuple(h for _, h in stack)
        out.append((pos, tuple(h for i, h in enumerate(full) if i == 0 or h != full[i - 1])))
        pos += len(line)
    return out


def _common(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
    first = paths[0]
    n = len(first)
    for p in paths[1:]:
        n = min(n, next((i for i, (a, b) in enumerate(zip(first, p, strict=False)) if a != b), min(len(first), len(p))))
    return first[:n]


def _check_chunks(text: str, drafts: list[ChunkDraft]) -> None:
    pos = 0
    for i, d in enumerate(drafts):
        assert d.ordinal == i
        assert d.text == text[d.start:d.end] and d.text == d.text.strip() and d.text
        assert text[pos:d.start].strip() == ""  # only whitespace between chunks: nothing lost
        assert d.start >= pos  # in order, no overlap: nothing duplicated
        pos = d.end
        assert d.tokens == count_tokens(d.text)
        assert d.tokens <= CEILING_TOKENS
    assert text[pos:].strip() == ""
    for a, b in itertools.pairwise(drafts):
        # Below the floor only where joining the neighbour would break the ceiling.
        assert not (min(a.tokens, b.tokens) < FLOOR_TOKENS and a.tokens + b.tokens <= CEILING_TOKENS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(markdown_doc())
def test_chunker_properties(doc: tuple[str, list[Section], bool]) -> None:
    raw, sections, front = doc
    text = normalize(raw)
    drafts = chunk_text(text, "Guide", markdown=True)
    if not text.strip():
        assert drafts == []
        return
    _check_chunks(text, drafts)
    spans = _expected_paths(text, "Guide", sections, front)
    for d in drafts:
        touched = [path for k, (start, path) in enumerate(spans)
                   if start < d.end and (k + 1 == len(spans) or spans[k + 1][0] > d.start)]
        assert d.heading_path == _common(touched), (d.heading_path, touched)


def test_headings_in_code_fences_setext_and_front_matter() -> None:
    text = normalize(
        "---\ntitle: Clustering Guide\n---\n\nIntro words here.\n\n```\n# not a heading\n```\n\n"
        "Setext Heading\n--------------\n\nBody under setext.\n\n### `deep` **one** {#anchor}\n\nDeep body.\n")
    drafts = chunk_text(text, "clustering.md", markdown=True)
    assert len(drafts) == 1  # all of it is below the floor: one chunk under the shared path
    assert drafts[0].heading_path == ("clustering.md", "Clustering Guide")
    assert drafts[0].text.startswith("---\ntitle: Clustering Guide\n---\n\nIntro words")
    big = " ".join(["word"] * 700)
    text = normalize(f"# A\n\n{big}\n\n## B\n\n```\n# fake\n{big}\n```\n\nB\n=\n\n{big}\n")
    paths = [d.heading_path for d in chunk_text(text, "T", markdown=True)]
    assert paths == [("T", "A"), ("T", "A", "B"), ("T", "B")]


def test_oversized_paragraph_is_hard_split_and_nothing_is_lost() -> None:
    text = " ".join(f"w{i}" for i in range(5000)) + "\n\n" + "Z" * 30000
    drafts = chunk_text(text, "T", markdown=False)
    assert len(drafts) > 5 and all(d.tokens <= CEILING_TOKENS for d in drafts)
    assert "".join(d.text for d in drafts).replace(" ", "") == text.replace(" ", "").replace("\n", "")


def test_plain_text_has_paragraphs_and_the_title_as_path() -> None:
    text = "\n\n".join(" ".join(["para"] * 400) for _ in range(4))
    drafts = chunk_text(text, "Notes", markdown=False)
    assert [d.heading_path for d in drafts] == [("Notes",)] * len(drafts) and len(drafts) == 4


# ---------------------------------------------------------------- chunk ids


def test_chunk_ids_are_short_distinct_and_bound_to_identity() -> None:
    doc = uuid.uuid4()
    base = chunk_id("t1", doc, 1, CHUNKER_VERSION, 0, "a" * 64)
    assert base.startswith("kc_") and len(base) == 24
    variants = {
        chunk_id("t2", doc, 1, CHUNKER_VERSION, 0, "a" * 64),
        chunk_id("t1", uuid.uuid4(), 1, CHUNKER_VERSION, 0, "a" * 64),
        chunk_id("t1", doc, 2, CHUNKER_VERSION, 0, "a" * 64),
        chunk_id("t1", doc, 1, "other-version", 0, "a" * 64),
        chunk_id("t1", doc, 1, CHUNKER_VERSION, 1, "a" * 64),
        chunk_id("t1", doc, 1, CHUNKER_VERSION, 0, "b" * 64),
    }
    assert base not in variants and len(variants) == 6


def test_token_counter_is_a_plausible_bpe_stand_in() -> None:
    assert count_tokens("Roll back by reverting the release tag.") == 9  # cl100k: 8
    assert count_tokens("") == 0 and count_tokens("   \n") == 0
    assert count_tokens("configuration") == 3  # 13 characters: a long word costs more
    assert count_tokens("0123456789abcdef0123456789abcdef01234567") == 8  # a commit id
    assert count_tokens("中文字符") == 4


_SPACES = ["\n", "\t", "\x0b", "\x1c", "\u2028", "\u3000", "\u2000", "\xa0", "\u4e00"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([*"ab_9é中ß.,-x ", *_SPACES, "  ", "abcdefghijkl"])).map("".join))
def test_token_count_ignores_how_whitespace_is_spelled(text: str) -> None:
    """The whitespace squeeze in count_tokens is exact: it counts what the bare regex counts."""
    assert count_tokens(text) == len(_TOKEN.findall(text))
