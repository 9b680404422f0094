"""The common English words (`common_words.txt`, built by `scripts/build_common_words.py` from the
packaged encoder's WordPiece vocabulary): the relevance model's ``foreign`` feature counts the query
words that are neither in the tenant nor common English — a product or tool name the documents
never mention ("Terraform", "iptables"), not a paraphrase's everyday word ("drowning")."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def common_words() -> frozenset[str]:
    """The list, read once from the package."""
    text = resources.files("knowledge").joinpath("common_words.txt").read_text(encoding="utf-8")
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


def foreign(words: tuple[str, ...], *, min_letters: int = 3) -> int:
    """How many of ``words`` (lower-case) are not common English: digits-only words and words
    shorter than ``min_letters`` are not counted."""
    common = common_words()
    return sum(1 for w in words if len(w) >= min_letters and not w.isdigit() and w not in common)
