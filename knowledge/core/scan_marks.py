"""Where a text holds the literals the secret scan starts from, found in one pass (issue 32's cost).

Every rule of `knowledge.core.scan_rules` and `knowledge.core.scan_layers` starts at a literal: a
provider prefix (``ghp_``, ``AKIA``, ``-----BEGIN``), ``://``, or a word that names a secret
(``password``, ``token``, ``key``). Searched one by one, each literal costs a pass over the text
(about 2 ms per MB each, some 40 passes); an Aho-Corasick automaton (ahocorasick-rs, the Rust
``aho-corasick`` crate behind ripgrep, with its SIMD prefilter) finds all of them in one pass, and a
rule whose literal is absent costs nothing more.

Case-sensitive literals are found in the text, words in its lower-cased copy (the same offsets:
where ``str.lower`` would change a string's length, as for ``İ``, only ASCII letters are lowered).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

import ahocorasick_rs

_SURROGATE = re.compile("[\ud800-\udfff]")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def lowered(text: str) -> str:
    """``text`` in lower case, offset for offset."""
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


class Literals:
    """A fixed set of literals, searched for all at once: `find` maps each present one to its offsets."""

    def __init__(self, literals: Iterable[str]) -> None:
        self.literals = tuple(dict.fromkeys(literals))
        self._automaton = ahocorasick_rs.AhoCorasick(list(self.literals))

    def find(self, text: str) -> dict[str, list[int]]:
        """Every start offset of every literal in ``text`` (overlapping ones too), ascending per literal."""
        found: defaultdict[str, list[int]] = defaultdict(list)
        try:
            matches = self._automaton.find_matches_as_indexes(text, overlapping=True)
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form: one stand-in for it keeps the offsets
            matches = self._automaton.find_matches_as_indexes(_SURROGATE.sub("\ufffd", text), overlapping=True)
        for index, start, _ in matches:
            found[self.literals[index]].append(start)
        return found


class Marks:
    """One text's literal offsets: ``cased`` in the text as written, ``words`` in ``low``."""

    __slots__ = ("_at", "cased", "low", "present", "text", "words")

    def __init__(self, text: str, cased: Literals, words: Literals) -> None:
        self.text = text
        self.low = lowered(text)
        self.cased = cased.find(text)
        self.words = words.find(self.low)
        self.present = frozenset(self.cased) | frozenset(self.words)
        self._at: dict[tuple[str, ...], list[int]] = {}

    def at(self, *literals: str) -> list[int]:
        """Ascending offsets of any of ``literals`` (cased or word); the same list for the same literals."""
        if (known := self._at.get(literals)) is not None:
            return known
        lists = [found for literal in literals if (found := self.cased.get(literal) or self.words.get(literal))]
        # One literal's offsets are ascending and distinct already.
        merged = lists[0] if len(lists) == 1 else sorted({at for found in lists for at in found})
        self._at[literals] = merged
        return merged

    def has(self, *literals: str) -> bool:
        return not self.present.isdisjoint(literals)
