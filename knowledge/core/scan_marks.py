"""Where a text holds the literals the secret scan starts from, found in one pass (issue 32's cost).

Every rule of `knowledge.core.scan_rules` and `knowledge.core.scan_layers` starts at a literal: a
provider prefix (``ghp_``, ``AKIA``, ``-----BEGIN``), ``://``, or a word that names a secret
(``password``, ``token``, ``key``). Searched one by one, each literal costs a pass over the text
(about 2 ms per MB each, some 40 passes); an Aho-Corasick automaton (ahocorasick-rs, the Rust
``aho-corasick`` crate behind ripgrep, with its SIMD prefilter) finds all of them in one pass, and a
rule whose literal is absent costs nothing more.

All of them are searched for in one pass over the text's lower-cased copy (the same offsets: where
``str.lower`` would change a string's length, as for ``İ``, only ASCII letters are lowered); a
case-sensitive literal found there is then checked against the text as written.
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
    """A fixed set of literals, searched for all at once in a text's lower-cased copy: ``cased`` ones
    must then also stand as written in the text (``AKIA``, ``Basic ``), ``words`` in any case."""

    def __init__(self, cased: Iterable[str], words: Iterable[str]) -> None:
        self._variants: dict[str, list[tuple[str, bool]]] = defaultdict(list)  # lower case -> (literal, cased)
        for literal in dict.fromkeys(cased):
            self._variants[literal.lower()].append((literal, True))
        for word in dict.fromkeys(words):
            self._variants[word.lower()].append((word, False))
        self._keys = tuple(self._variants)
        self._automaton = ahocorasick_rs.AhoCorasick(list(self._keys))

    def find(self, text: str, low: str) -> dict[str, list[int]]:
        """Every start offset of every literal (overlapping ones too), ascending per literal; ``low``
        is ``lowered(text)``."""
        found: defaultdict[str, list[int]] = defaultdict(list)
        try:
            matches = self._automaton.find_matches_as_indexes(low, overlapping=True)
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form: one stand-in for it keeps the offsets
            matches = self._automaton.find_matches_as_indexes(_SURROGATE.sub("\ufffd", low), overlapping=True)
        for index, start, _ in matches:
            for literal, cased in self._variants[self._keys[index]]:
                if not cased or text.startswith(literal, start):
                    found[literal].append(start)
        return found


class Marks:
    """One text's literal offsets (`Literals.find`), and its lower-cased copy ``low``."""

    __slots__ = ("_at", "found", "low", "present", "text")

    def __init__(self, text: str, literals: Literals) -> None:
        self.text = text
        self.low = lowered(text)
        self.found = literals.find(text, self.low)
        self.present = frozenset(self.found)
        self._at: dict[tuple[str, ...], list[int]] = {}

    def at(self, *literals: str) -> list[int]:
        """Ascending offsets of any of ``literals``; the same list for the same literals."""
        if (known := self._at.get(literals)) is not None:
            return known
        lists = [found for literal in literals if (found := self.found.get(literal))]
        # One literal's offsets are ascending and distinct already.
        merged = lists[0] if len(lists) == 1 else sorted({at for found in lists for at in found})
        self._at[literals] = merged
        return merged

    def has(self, *literals: str) -> bool:
        return not self.present.isdisjoint(literals)
