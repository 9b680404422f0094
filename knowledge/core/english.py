"""How common a word is in English at large: the prior the claim-support check
(`knowledge.core.support`) weighs a claim's words by beside the tenant's own statistics, so that in
a small tenant a common word the passages happen not to use ("removes" for "discards") does not
count as a fact the passage lacks, while a rare one ("quorum", "etcdutl") still does.

The frequencies are wordfreq's English "small" list (Apache-2.0 code; its data aggregates
Wikipedia, subtitles, news, books, web text, Twitter and Reddit — see its README for the
sources and their licences), installed with the package and never fetched. ``scripts/install.sh``
derives a compact table from it once (``python -m knowledge.core.english``): word and Zipf
frequency, into the environment (``<sys.prefix>/share/knowledge/``). This module reads that table
when it is imported (about 30,000 words, ~5 ms), so no event loop ever waits on it;
where it is missing every word is taken as rare (the tenant's statistics alone decide).
"""

from __future__ import annotations

import sys
from pathlib import Path

#: A word this common or more (Zipf 6: once in a thousand words; "the" is 7.7) weighs nothing beyond
#: `knowledge.core.support.MIN_WEIGHT`; one at Zipf `RARE_ZIPF` or below (or unknown) weighs fully.
COMMON_ZIPF = 6.0
RARE_ZIPF = 2.0


def table_path() -> Path | None:
    """Where the table derived from the installed wordfreq lives (named by its version), or None
    without wordfreq."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("wordfreq")
    except PackageNotFoundError:
        return None
    return Path(sys.prefix) / "share" / "knowledge" / f"english-zipf-wordfreq-{release}.tsv"


def _load() -> dict[str, str]:
    """The installed table, word to Zipf frequency as written. Found by its name's pattern, not by
    asking for wordfreq's version (`importlib.metadata` costs more than the table: every process that
    imports the service pays for this); `export` keeps one table only."""
    tables = sorted((Path(sys.prefix) / "share" / "knowledge").glob(_PATTERN))
    if not tables:
        return {}
    lines = tables[-1].read_text(encoding="utf-8").splitlines()
    return dict(line.split("\t", 1) for line in lines if "\t" in line)


_PATTERN = "english-zipf-wordfreq-*.tsv"
ZIPF: dict[str, str] = _load()


def rarity(word: str) -> float:
    """0 for a word as common as `COMMON_ZIPF` or more, 1 for one as rare as `RARE_ZIPF` or unknown,
    linear between."""
    zipf = float(ZIPF.get(word, 0.0))
    return min(1.0, max(0.0, (COMMON_ZIPF - zipf) / (COMMON_ZIPF - RARE_ZIPF)))


def export() -> Path:
    """Write the table (written beside it, then renamed: never half a file)."""
    from wordfreq import get_frequency_dict, zipf_frequency

    path = table_path()
    assert path is not None, "wordfreq is not installed"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = sorted(f"{w}\t{zipf_frequency(w, 'en', wordlist='small'):.2f}"
                  for w in get_frequency_dict("en", wordlist="small") if w.isprintable() and "\t" not in w)
    partial = path.with_suffix(".partial")
    partial.write_text("\n".join(rows) + "\n", encoding="utf-8")
    partial.replace(path)
    for older in path.parent.glob(_PATTERN):  # one table: `_load` reads whichever it finds
        if older != path:
            older.unlink()
    return path


if __name__ == "__main__":
    target = table_path()
    if target is not None and target.is_file():
        print(f"english word frequencies: {target} (already derived)")
    else:
        print(f"english word frequencies: {export()}")
