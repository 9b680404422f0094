"""The ranker's text features — license phrases, boilerplate lines — answer exactly as their regexes do.

`knowledge.core.ranking` checks cheap necessary conditions (a literal each pattern holds, the last
character of a page-number leader, a separator character) before scanning; these tests hold the
regex-only reference and require the same answer on generated text (hypothesis, biased towards what
the patterns look for: license phrases in any case, the letters `re.IGNORECASE` folds specially,
links, URLs, dot leaders, navigation words, decor, separators) and on every line of two real
documentation corpora.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge.core import ranking
from tests.conftest import SHARED_CORPUS, corpus_missing

# The separators and decor as the ranker wrote them before the prefilters (literals, not derived).
NAV_SEPARATORS = re.compile(r"\s+[|·•›»/>]\s+")
NAV_SEPARATORS_NO_PIPE = re.compile(r"\s+[·•›»/>]\s+")
NAV_DECOR = re.compile(r"^[\s«»‹›←→<>|·•*+-]+|[\s«»‹›←→<>|·•*+-]+$")


def reference_license_phrase_count(text: str) -> int:
    return len({m.lastindex for m in ranking._LICENSE.finditer(text)})


def reference_is_boilerplate_line(line: str, separators: re.Pattern[str]) -> bool:
    if ranking._TOC_LEADER.search(line):
        return True
    if ranking._MD_LINK.search(line) or ranking._BARE_URL.search(line):
        rest = ranking._BARE_URL.sub(" ", ranking._MD_LINK.sub(" ", line))
        if not ranking._LEFTOVER_WORD.search(rest):
            return True
    if NAV_DECOR.sub("", line).lower() in ranking._NAV_PHRASES:
        return True
    items = [i for i in separators.split(line) if i.strip()]
    return len(items) >= 3 and all(len(i.split()) <= 3 for i in items)


PHRASES = ["Permission is hereby granted", "WITHOUT WARRANTY OF ANY KIND", 'provided "AS IS"', "provided “as is”",
           "Licensed under the Apache License", "GNU Lesser General Public License", "gnu general public license",
           "Redistribution and use in source and binary forms", "All rights reserved",
           "without warranties or conditions of any kind", "This program is free software",
           "SPDX-License-Identifier", "Creative Commons Attribution", "IN NO EVENT SHALL THE AUTHORS",
           "in no event shall the copyright holder"]
# What IGNORECASE folds to an ASCII letter that casefold keeps apart, and other look-alikes.
ODD_LETTERS = ["ı", "İ", "ſ", "K", "ß", "é", "\u0307"]


@st.composite
def case_mangled(draw: st.DrawFn, phrase: str) -> str:
    out = []
    for ch in phrase:
        pick = draw(st.integers(0, 9))
        if pick == 0:
            ch = ch.swapcase()
        elif pick == 1 and ch in "iIsSkK":
            ch = {"i": "ı", "I": "İ", "s": "ſ", "S": "ſ", "k": "K", "K": "K"}[ch]
        out.append(ch)
    return "".join(out)


WORDS = st.sampled_from(["deploy", "the", "rollback", "Home", "Docs", "next", "Previous", "Contents", "3", "42",
                         "and/or", "read|write", "v1.2", "etcd", "provided", "rights", "as", "is"])
PIECES = st.one_of(
    WORDS,
    st.sampled_from(PHRASES).flatmap(case_mangled),
    st.sampled_from(["[docs](https://x.io/a)", "![img](a.png)", "[ref][1]", "<https://etcd.io>",
                     "<mailto:ops@example.com>", "<irc:chan>", "https://a.b/c", "WWW.example.com",
                     "ftp://h/x", "www.", "://", "[", "]", "(", ")", "<", ">"]),
    st.sampled_from([".....", "……", ". . . ", "....", " 12", "7"]),
    st.sampled_from([" | ", " · ", " • ", " › ", " » ", " / ", " > ", "|", "/", "»"]),
    st.sampled_from([*ranking._DECOR, " ", "\t", "\u00a0", "\u2003", "«", "←", "→"]),
    st.sampled_from(sorted(ranking._NAV_PHRASES)),
    st.sampled_from(ODD_LETTERS),
    st.text(max_size=4),
)
LINES = st.lists(PIECES, max_size=12).map("".join)


@settings(max_examples=600, deadline=None)
@given(text=st.lists(st.one_of(PIECES, st.just("\n")), max_size=30).map("".join))
def test_license_phrases_are_counted_as_the_regex_counts_them(text: str) -> None:
    assert ranking._license_phrase_count(text) == reference_license_phrase_count(text)


def test_the_separators_derived_from_their_characters_are_the_literal_ones() -> None:
    for c in map(chr, range(0x3000)):
        for derived, literal in ((ranking._NAV_SEPARATORS, NAV_SEPARATORS),
                                 (ranking._NAV_SEPARATORS_NO_PIPE, NAV_SEPARATORS_NO_PIPE)):
            assert bool(derived.fullmatch(f" {c} ")) == bool(literal.fullmatch(f" {c} ")), repr(c)


@settings(max_examples=1500, deadline=None)
@given(line=LINES, pipe=st.booleans())
def test_a_boilerplate_line_is_judged_as_the_regexes_judge_it(line: str, pipe: bool) -> None:
    separators = ranking._NAV_SEPARATORS if pipe else ranking._NAV_SEPARATORS_NO_PIPE
    for candidate in (line, line.strip()):  # boilerplate_share passes stripped lines
        if candidate:
            assert ranking._is_boilerplate_line(candidate, separators) == \
                reference_is_boilerplate_line(candidate, separators), repr(candidate)


def test_every_line_of_two_documentation_corpora_is_judged_as_before() -> None:
    assert not corpus_missing(SHARED_CORPUS / "docs-etcd") or pytest.skip("../shared/corpus is absent")
    lines = texts = 0
    for folder in ("docs-etcd", "docs-argocd"):
        for path in sorted((SHARED_CORPUS / folder).rglob("*.md")):
            text = path.read_text(errors="replace")
            texts += 1
            assert ranking._license_phrase_count(text) == reference_license_phrase_count(text), path
            for line in (ln.strip() for ln in text.split("\n")):
                if line:
                    lines += 1
                    for separators in (ranking._NAV_SEPARATORS, ranking._NAV_SEPARATORS_NO_PIPE):
                        assert ranking._is_boilerplate_line(line, separators) == \
                            reference_is_boilerplate_line(line, separators), (path, line)
    assert texts > 150 and lines > 10_000
