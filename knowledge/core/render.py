"""The trust-labelled envelope (ADR-0033, "The rendered block"), and its exact inverse. Pure.

Layout (deterministic; the spec's example differs only in whitespace; title shortened here)::

    <knowledge as_of="2026-07-28T00:00:00Z" policy="knowledge-v1">
    <passage doc="Guide" path="Deployment > Rollback" chunk="kc_7f3a91" doc_date="2026-05-02" instruction_like="false">
    Roll back by reverting the release tag and re-running the deploy
    job. Do not edit the running configuration directly.
    </passage>
    </knowledge>

- Each tag is on one line, nothing is indented, and the passage text sits between exactly one
  newline after the opening tag and one before ``</passage>``. The spec's example wraps attributes
  and indents the text; indenting would change the text, which is quoted verbatim.
- Attributes are always in the order ``doc path chunk doc_date instruction_like``. ``path`` is
  omitted when the heading path is empty and ``doc_date`` when the document has no date (so
  ``path=""`` is the path of one empty heading, and no date is never confused with a date).
- ``as_of`` is UTC to the second with a ``Z``; a naive datetime, or one with no UTC equivalent
  (an offset past year 1 or 9999), is refused (``ValueError``).

Escaping (what keeps a title, heading or passage from breaking out of, or corrupting, the block):

- Attribute values: ``&`` ``<`` ``>`` ``"`` become ``&amp; &lt; &gt; &quot;``; every control
  character including tab and newline becomes a numeric reference (``&#xA;``).
- Passage text: only ``&`` and ``<`` become ``&amp; &lt;`` — enough that no tag can start inside
  a passage, while ``>`` (Markdown quotes, arrows, shell redirects) and quotes stay readable;
  newline and tab stay as they are, every other control character becomes ``&#x..;``.
- Everywhere, these become uppercase-hex numeric references: C0 controls, DEL, C1 controls,
  lone surrogates (so the block is always encodable as UTF-8), the noncharacters (U+FDD0..U+FDEF
  and U+xxFFFE/U+xxFFFF in every plane), and U+2028/U+2029 (line breaks to some consumers).
- The heading path joins its components with a raw `` > ``; a ``>`` inside a component is
  ``&gt;``, so the raw one is only ever the separator and a heading containing " > " round-trips.

`parse_knowledge_block` accepts exactly what `render_knowledge_block` produces (it re-renders what
it parsed and compares), so a block that parses is canonical and its texts are the stored ones.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from knowledge.core.ranking import DEFAULT_POLICY
from knowledge.models import RetrievedPassage

PATH_SEPARATOR = " > "


def _noncharacters() -> str:
    planes = "".join(f"{chr(p * 0x10000 + 0xFFFE)}{chr(p * 0x10000 + 0xFFFF)}" for p in range(17))
    return "\ufdd0-\ufdef" + planes


# Written as a character class over code points; Python's re matches lone surrogates in str.
_ALWAYS = "\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029" + _noncharacters()
_TEXT_SPECIAL = re.compile(f"[&<{_ALWAYS}]")
_ATTR_SPECIAL = re.compile(f"[&<>\"\t\n{_ALWAYS}]")
_NAMED = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
_NAMED_BACK = {"amp": "&", "lt": "<", "gt": ">", "quot": '"'}
_REFERENCE = re.compile(r"&(?:(amp|lt|gt|quot)|#x([0-9A-F]{1,6}));")


def _ref(match: re.Match[str]) -> str:
    ch = match.group()
    return _NAMED.get(ch) or f"&#x{ord(ch):X};"


def escape_text(text: str) -> str:
    """Escape passage text: ``&``, ``<`` and the always-escaped characters; newline and tab stay."""
    return _TEXT_SPECIAL.sub(_ref, text)


def escape_attr(value: str) -> str:
    """Escape an attribute value: ``& < > "``, every control character, and the always-escaped ones."""
    return _ATTR_SPECIAL.sub(_ref, value)


def unescape(value: str) -> str:
    """Invert `escape_text` / `escape_attr`; any other ``&`` is refused."""

    def back(match: re.Match[str]) -> str:
        name, hexa = match.groups()
        if name is not None:
            return _NAMED_BACK[name]
        code = int(hexa, 16)
        if code > 0x10FFFF:
            raise ValueError(f"character reference out of range: {match.group()}")
        return chr(code)

    out = _REFERENCE.sub(back, value)
    if "&" in _REFERENCE.sub("", value):
        raise ValueError("a bare '&' or an unknown entity in a knowledge block")
    return out


def render_path(heading_path: Sequence[str]) -> str:
    """The heading path as one attribute value: escaped components joined by a raw " > "."""
    return PATH_SEPARATOR.join(escape_attr(h) for h in heading_path)


@dataclass(frozen=True)
class ParsedPassage:
    """One passage of a parsed block: its attributes unescaped, its text exactly as stored."""

    doc: str
    path: list[str]
    chunk: str
    doc_date: str | None
    instruction_like: bool
    text: str


def _format_as_of(as_of: datetime) -> str:
    if as_of.tzinfo is None or as_of.utcoffset() is None:
        raise ValueError("as_of must be timezone-aware")
    try:
        utc = as_of.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 and 9999-12-31T23:00-05:00 have no UTC datetime
        raise ValueError("as_of is out of range in UTC") from None
    return utc.replace(microsecond=0, tzinfo=None).isoformat() + "Z"


def _render(as_of: str, policy: str, passages: Sequence[ParsedPassage]) -> str:
    parts = [f'<knowledge as_of="{escape_attr(as_of)}" policy="{escape_attr(policy)}">\n']
    for p in passages:
        attrs = [f'doc="{escape_attr(p.doc)}"']
        if p.path:
            attrs.append(f'path="{render_path(p.path)}"')
        attrs.append(f'chunk="{escape_attr(p.chunk)}"')
        if p.doc_date is not None:
            attrs.append(f'doc_date="{escape_attr(p.doc_date)}"')
        attrs.append(f'instruction_like="{"true" if p.instruction_like else "false"}"')
        parts.append(f"<passage {' '.join(attrs)}>\n{escape_text(p.text)}\n</passage>\n")
    parts.append("</knowledge>")
    return "".join(parts)


def render_knowledge_block(passages: Sequence[RetrievedPassage], as_of: datetime,
                           policy: str = DEFAULT_POLICY.name) -> str:
    """The ``<knowledge>`` envelope around ``passages``, in the order given, texts whole and verbatim.

    Carries what the spec requires for each citation — title, heading path, chunk id, the
    document's date — and the ``instruction_like`` flag. Deterministic: the same passages, as_of
    and policy give the same string.
    """
    parsed = [
        ParsedPassage(
            doc=p.title, path=list(p.heading_path), chunk=p.chunk_id,
            doc_date=p.doc_date.isoformat() if p.doc_date is not None else None,
            instruction_like=p.instruction_like, text=p.text,
        )
        for p in passages
    ]
    return _render(_format_as_of(as_of), policy, parsed)


_HEADER = re.compile(r'<knowledge as_of="([^"<]*)" policy="([^"<]*)">\n')
_PASSAGE = re.compile(
    r'<passage doc="([^"<]*)"(?: path="([^"<]*)")? chunk="([^"<]*)"(?: doc_date="([^"<]*)")?'
    r' instruction_like="(true|false)">\n([^<]*)\n</passage>\n'
)
_FOOTER = "</knowledge>"


def parse_knowledge_block(block: str) -> tuple[dict[str, str], list[ParsedPassage]]:
    """The inverse of `render_knowledge_block`: the ``<knowledge>`` attributes (``as_of``,
    ``policy``) and every passage, unescaped. Raises ``ValueError`` on anything render would not
    have produced."""
    header = _HEADER.match(block)
    if header is None:
        raise ValueError("not a knowledge block: bad <knowledge> header")
    attrs = {"as_of": unescape(header.group(1)), "policy": unescape(header.group(2))}
    passages: list[ParsedPassage] = []
    pos = header.end()
    while (m := _PASSAGE.match(block, pos)) is not None:
        doc, path, chunk, doc_date, flag, text = m.groups()
        passages.append(ParsedPassage(
            doc=unescape(doc),
            path=[] if path is None else [unescape(h) for h in path.split(PATH_SEPARATOR)],
            chunk=unescape(chunk),
            doc_date=None if doc_date is None else unescape(doc_date),
            instruction_like=flag == "true",
            text=unescape(text),
        ))
        pos = m.end()
    if block[pos:] != _FOOTER:
        raise ValueError(f"not a knowledge block: unexpected content at offset {pos}")
    # Canonical or refused: a block that parses is exactly the rendering of what it parsed to.
    if _render(attrs["as_of"], attrs["policy"], passages) != block:
        raise ValueError("not a canonical knowledge block")
    return attrs, passages
