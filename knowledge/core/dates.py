"""The date a document speaks from, read from the document itself (ADR-0033: recency reads "the
document's date rather than the ingestion date, because a newer edition supersedes an older one").

Pure. `front_matter_date` reads a Markdown file's front matter (YAML ``---`` or TOML ``+++``, as
Hugo, Jekyll, MkDocs and Docusaurus write it): the edition's date is its last modification where
the file states one (``lastmod``, ``last_modified_at``, ``updated``, ``modified``, ``last_update``),
else its ``date`` (or ``publishDate``/``published``). A value is read when it starts with an ISO
calendar date (``2024-03-05``, ``2024-03-05T10:00:00Z``, quoted or not); anything else is no date.
A caller's explicit ``doc_date`` always wins (`knowledge.core.prepare.dated`).
"""

from __future__ import annotations

import re
from datetime import date

#: Keys naming the latest edition, then keys naming the first; the first group that holds a date wins.
EDITION_KEYS = ("lastmod", "last_modified_at", "last_modified", "updated", "modified", "last_update")
PUBLISHED_KEYS = ("date", "publishdate", "publish_date", "published", "created")

_FENCES = {"---": re.compile(r"^---[ \t]*$", re.MULTILINE), "+++": re.compile(r"^\+\+\+[ \t]*$", re.MULTILINE)}
_ENTRY = re.compile(r"""^([A-Za-z_][A-Za-z0-9_-]*)[ \t]*[:=][ \t]*["']?(\d{4})-(\d{2})-(\d{2})(?![0-9])""",
                    re.MULTILINE)
#: Front matter past this many characters is not looked at (a file that opens with "---" and no end).
MAX_FRONT_MATTER = 16_384


def front_matter(text: str) -> str | None:
    """The front matter block at the very start of ``text`` (without its fences), or None."""
    head = text[:3]
    if head not in _FENCES or (len(text) > 3 and text[3] not in " \t\r\n"):
        return None
    first_end = text.find("\n")
    if first_end < 0:
        return None
    end = _FENCES[head].search(text, first_end + 1, first_end + 1 + MAX_FRONT_MATTER)
    return None if end is None else text[first_end + 1:end.start()]


def front_matter_date(text: str) -> date | None:
    """The edition date ``text``'s front matter states (see the module docstring), or None."""
    block = front_matter(text)
    if block is None:
        return None
    found: dict[str, date] = {}
    for key, y, m, d in _ENTRY.findall(block):
        key = key.lower()
        if key in found:
            continue
        try:
            found[key] = date(int(y), int(m), int(d))
        except ValueError:  # 2024-02-30: not a date
            continue
    for keys in (EDITION_KEYS, PUBLISHED_KEYS):
        dated = [found[k] for k in keys if k in found]
        if dated:
            return max(dated)
    return None
