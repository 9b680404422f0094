"""Hostile input through the pure pipeline — the text extractors, `prepare` (normalize, chunk, scan) and the
envelope — with arbitrary Unicode and pathological sizes: hypothesis properties and explicit large cases.
`scripts/fuzz_pipeline.py` drives the same properties (`pipeline`, `check_prepared`, …) for a set time.

NUL and lone surrogates. PostgreSQL ``text`` cannot store U+0000, and a lone surrogate (U+D800..U+DFFF) has no
UTF-8 encoding, so neither may reach a chunk, a heading path or the index; and neither is removed or replaced,
which would alter the text outside the normalizer's closed list. So both are refused. The text extractors
(`knowledge.parsers.text.decode_utf8`) decode strict UTF-8, which already rejects an encoded surrogate
(bytes ED A0 80 ..
ED BF BF) as invalid, and reject decoded text that holds NUL: ``ExtractionRefused("undecodable")``, which the
ingest reports as ``IngestRefused("undecodable")``. `prepare` applies the same rule to any ``str`` it is handed
(another extractor's output, a re-chunk): text with NUL or a lone surrogate is ``IngestRefused("undecodable")``,
a title with either ``IngestRefused("invalid_request")`` (the title heads every chunk's heading path). The PDF
extractor already drops control characters and replaces lone surrogates before its text reaches `prepare`
(parsers/pdf_extract.py). Every other code point — C0/C1 controls, bidi controls, zero-width characters,
noncharacters — is stored as it is: the injection scan flags hidden text, and the envelope escapes what it must.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import unicodedata
import uuid
from collections.abc import AsyncIterator, Coroutine
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from knowledge.core.chunking import (
    _TOKEN,
    CEILING_TOKENS,
    CHUNKER_VERSION,
    FLOOR_TOKENS,
    MAX_HEADING_CHARS,
    MAX_MARKDOWN_NESTING,
    _Block,
    _front_matter_title,
    _pack,
    _pack_words,
    _parsable,
    _plain_sections,
    _units,
    _without_anchor,
    _word_tokens,
    chunk_id,
    count_tokens,
)
from knowledge.core.normalize import normalize
from knowledge.core.prepare import PreparedDocument, prepare
from knowledge.core.render import parse_knowledge_block, render_knowledge_block
from knowledge.core.scan import _html_comments, find_secrets, is_instruction_like
from knowledge.core.scan_marks import Marks
from knowledge.core.scan_rules import _ASSIGNMENT, _LITERALS, RULES, _assignments, _matches
from knowledge.errors import ExtractionRefused, IngestRefused
from knowledge.parsers.text import MarkdownExtractor, PlainTextExtractor
from knowledge.vocabulary import Structure
from tests.core.test_chunking import markdown_doc
from tests.core.test_render import AS_OF, nasty_text, passage
from tests.core.test_scan import _TEXTS as SCAN_TEXTS

# ---------------------------------------------------------------- the pipeline and its properties

#: Every reason a hostile text source may end with (the admit and commit steps are not exercised here).
REASONS = frozenset({"undecodable", "no_text", "too_large", "secret_detected", "invalid_request"})
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _run(coro: Coroutine[Any, Any, str]) -> str:
    """Drive a coroutine that never suspends (an extractor over an in-memory stream) to its result."""
    try:
        coro.send(None)
    except StopIteration as done:
        return str(done.value)
    coro.close()
    raise AssertionError("the extractor suspended")


def extract(data: bytes, structure: Structure, chunk: int = 1 << 20) -> str:
    """The text extractor for ``structure`` over ``data`` arriving in slices of ``chunk`` bytes."""
    extractor = MarkdownExtractor() if structure == "markdown" else PlainTextExtractor()

    async def stream() -> AsyncIterator[bytes]:
        for i in range(0, len(data), chunk):
            yield data[i : i + chunk]

    return _run(extractor.extract(stream(), "text/markdown" if structure == "markdown" else "text/plain"))


def pipeline(raw: bytes | str, structure: Structure, title: str = "Doc",
             chunk: int = 1 << 20) -> tuple[str, PreparedDocument | None]:
    """``raw`` (bytes through the extractor, or text) through `prepare`: ("prepared", the document) or
    ("refused:<reason>", None) for a typed refusal with a known reason. Any other exception propagates."""
    try:
        text = extract(raw, structure, chunk) if isinstance(raw, bytes) else raw
        prepared = prepare(text, title, structure)
    except (ExtractionRefused, IngestRefused) as refusal:
        assert refusal.reason in REASONS, refusal.reason
        return f"refused:{refusal.reason}", None
    return "prepared", prepared


def check_prepared(raw_text: str, title: str, prepared: PreparedDocument) -> None:
    """What every prepared document satisfies, whatever it was made from: chunks are exact, ordered,
    disjoint slices of the normalized text with only whitespace between them; their token counts are the
    counter's, within the ceiling, and below the floor only where joining a neighbour would break it; and
    nothing PostgreSQL cannot store (NUL, a lone surrogate) is in a text or a heading path."""
    text = normalize(raw_text)
    assert prepared.text == text and prepared.chunks
    pos = 0
    for ordinal, chunk in enumerate(prepared.chunks):
        d = chunk.draft
        assert d.ordinal == ordinal and pos <= d.start < d.end and d.text == text[d.start : d.end]
        assert text[pos : d.start].strip() == ""  # nothing lost between chunks
        assert d.tokens == count_tokens(d.text) <= CEILING_TOKENS
        assert d.heading_path[0] == title and all(len(h) <= MAX_HEADING_CHARS for h in d.heading_path[1:])
        for value in (d.text, *d.heading_path):
            value.encode("utf-8")  # strict: a lone surrogate raises
            assert "\x00" not in value
        pos = d.end
    assert text[pos:].strip() == ""
    for a, b in itertools.pairwise(c.draft for c in prepared.chunks):
        assert not (min(a.tokens, b.tokens) < FLOOR_TOKENS and count_tokens(text[a.start : b.end]) <= CEILING_TOKENS)


def check_outcome(raw: str, title: str, label: str, prepared: PreparedDocument | None) -> None:
    """`prepare`'s outcome for text ``raw``: unstorable characters refused first, else prepared or a
    refusal for empty text or a credential."""
    if UNSTORABLE.search(title):
        assert label == "refused:invalid_request"
    elif UNSTORABLE.search(raw):
        assert label == "refused:undecodable"
    elif not normalize(raw).strip():
        assert label == "refused:no_text"
    elif prepared is not None:
        check_prepared(raw, title, prepared)
    else:
        assert label == "refused:secret_detected", label


# ---------------------------------------------------------------- strategies

ANY_CHAR = st.characters(codec=None, exclude_categories=())  # every code point, lone surrogates included
HOSTILE = [
    "\x00", "\ud800", "\udbff\udc00", "\udfff", "\x01", "\x07", "\x08", "\x1b[31m", "\x7f", "\x80", "\x85", "\x9f",
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\U000e0041", "e\u0301", "\u0301", "\u0308\u0301",
    "\u1100\u1161", "中文", "\u3000", "\u2028", "\u2029", "\x0c", "\x0b", "\r", "\r\n", "\t", "\n", "\n\n", "\n\n\n\n",
    " ", "\xa0", "\ufffd", "\ufffe", "\U0010ffff", "# ", "## ", "###### ", "- ", "* ", "1. ", "> ", "```", "~~~",
    "---", "===", "    ", "| a | b |\n|---|---|\n", "<!--", "-->", "<div>", "&#0;", "&#xD800;", "&amp;", "{#anchor}",
    "title: ", "[x]: <http://a>\n", "**", "_", "[", "](u)", "\\", "`", "password: ", "eyJ", "LS0tLS1CRUdJTi",
]  # fmt: skip
# Runs long enough to cross the ceiling: lines, words and unbreakable runs to split, blanks to collapse.
RUNS = st.builds(
    lambda unit, n: unit * n,
    st.sampled_from(["a", "-", " ", "\u3000", "中", "ab ", "word ", "*a ", "> ", "- ", "\n", "a\u3000", "x\t", "\x00"]),
    st.integers(1, 2500),
)
hostile_text = st.one_of(
    st.text(ANY_CHAR),
    st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(ANY_CHAR, max_size=4), st.text("ab \n#-", max_size=30), RUNS),
             max_size=40).map("".join),
    SCAN_TEXTS,
)
hostile_bytes = st.one_of(
    st.binary(max_size=3000),
    st.tuples(st.sampled_from([b"", b"\xef\xbb\xbf", b"\xef\xbb\xbf\xef\xbb\xbf", b"\xff\xfe", b"\xed\xa0\x80"]),
              hostile_text).map(lambda t: t[0] + t[1].encode("utf-8", "surrogatepass")),
)
titles = st.one_of(st.just("Doc"), st.text(ANY_CHAR, min_size=1, max_size=12))
structures = st.sampled_from(["markdown", "plain"])


def slow(examples: int) -> settings:
    """Settings for examples that may be megabytes: no deadline, no health check on size or speed."""
    return settings(max_examples=examples, deadline=None, suppress_health_check=[
        HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])


# ---------------------------------------------------------------- every input ends prepared or refused


@slow(250)
@given(hostile_bytes, structures, st.integers(1, 4096))
@example(b"\xef", "markdown", 1)  # the start of a byte-order mark and nothing else: not UTF-8 (found by CI)
@example(b"\xef\xbb", "plain", 1)
@example(b"\xef\xbb\xbf\xef\xbb\xbfx", "plain", 2)  # two marks: the first is dropped, the second is text
def test_any_bytes_end_as_a_document_or_a_typed_refusal(data: bytes, structure: Structure, chunk: int) -> None:
    label, prepared = pipeline(data, structure, chunk=chunk)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        assert label == "refused:undecodable"  # invalid UTF-8, encoded surrogates among it
        return
    if "\x00" in text:
        assert label == "refused:undecodable"
    elif not text.strip():
        assert label == "refused:no_text"
    else:
        # The incremental decoder saw the bytes in slices of `chunk`: the same text as at once.
        assert extract(data, structure, chunk) == text
        check_outcome(text, "Doc", label, prepared)


@slow(300)
@given(hostile_text, titles, structures)
def test_any_text_ends_as_a_document_or_a_typed_refusal(raw: str, title: str, structure: Structure) -> None:
    label, prepared = pipeline(raw, structure, title)
    check_outcome(raw, title, label, prepared)


@slow(25)
@given(markdown_doc(), st.lists(st.tuples(st.integers(0, 1 << 20), st.sampled_from(HOSTILE) | RUNS), max_size=12))
def test_ordinary_documents_with_hostile_splinters(doc: tuple[str, Any, Any], splinters: list[tuple[int, str]]) -> None:
    text = doc[0]
    for at, piece in splinters:
        at %= len(text) + 1
        text = text[:at] + piece + text[at:]
    for structure in ("markdown", "plain"):
        label, prepared = pipeline(text, structure)
        check_outcome(text, "Doc", label, prepared)


# ---------------------------------------------------------------- the normalizer's closed list

# Characters NFC leaves alone, alone and in any pair, and no digit (so no tab-width hint can form).
CLOSED_LIST_ALPHABET = [
    *" abcxyz.#-*>", "\t", "\r", "\n", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\x00", "\x01", "\x1b", "\x7f",
    "\x9f", "\u202a", "\u202e", "\u2066", "\u2069", "\u200b", "\u200d", "\ufeff", "\u3000", "\u2028", "\u2029", "é",
    "中", "\ud800", "\udfff", "\ufffe",
]  # fmt: skip


def reference_normalize(text: str) -> str:
    """The closed list, written apart from `knowledge.core.normalize`, for text NFC leaves alone and that states no
    tab width: CR and CRLF to LF; tabs to the next multiple of 4 columns; trailing whitespace (``str.isspace``)
    off every line; more than two blank lines in a row cut to two (the empty piece after a final newline is
    not a line)."""
    lines: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        out: list[str] = []
        column = 0
        for ch in line:
            out.append(" " * (4 - column % 4) if ch == "\t" else ch)
            column += len(out[-1])
        expanded = "".join(out)
        while expanded and expanded[-1].isspace():
            expanded = expanded[:-1]
        lines.append(expanded)
    final = lines.pop() if len(lines) > 1 and lines[-1] == "" else None
    kept: list[str] = []
    blank = 0
    for line in lines:
        blank = blank + 1 if line == "" else 0
        if blank <= 2:
            kept.append(line)
    if final is not None:
        kept.append(final)
    return "\n".join(kept)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(CLOSED_LIST_ALPHABET), max_size=80).map("".join))
def test_normalize_is_exactly_the_closed_list(raw: str) -> None:
    assert normalize(raw) == reference_normalize(raw)


@settings(max_examples=300, deadline=None)
@given(hostile_text)
def test_normalize_alters_no_character_but_whitespace_after_nfc(raw: str) -> None:
    """Tabs, CRs, trailing whitespace and blank lines are whitespace: every other character NFC leaves
    survives, in order; nothing but spaces (from tabs) and LF (from CR) is added."""
    nfc = unicodedata.normalize("NFC", raw)
    out = normalize(raw)
    assert [c for c in out if not c.isspace()] == [c for c in nfc if not c.isspace()]
    assert {c for c in out if c.isspace()} <= {c for c in nfc if c.isspace() and c not in "\t\r"} | {" ", "\n"}


# ---------------------------------------------------------------- the envelope


def _passages(prepared: PreparedDocument, title: str) -> list[Any]:
    return [passage(chunk_id=f"kc_{c.draft.ordinal}", title=title, heading_path=list(c.draft.heading_path),
                    text=c.draft.text, instruction_like=c.instruction_like) for c in prepared.chunks]


@slow(120)
@given(hostile_text, titles, structures)
def test_every_prepared_chunk_renders_and_parses_back(raw: str, title: str, structure: Structure) -> None:
    _, prepared = pipeline(raw, structure, title)
    if prepared is None:
        return
    ps = _passages(prepared, title)
    block = render_knowledge_block(ps, as_of=AS_OF)
    block.encode("utf-8")
    _, parsed = parse_knowledge_block(block)
    assert [(p.doc, p.path, p.text, p.instruction_like) for p in parsed] == [
        (title, list(c.draft.heading_path), c.draft.text, c.instruction_like) for c in prepared.chunks]


offsets = st.builds(timezone, st.timedeltas(min_value=-timedelta(hours=23, minutes=59),
                                            max_value=timedelta(hours=23, minutes=59)))


@settings(max_examples=300, deadline=None)
@given(st.datetimes(timezones=offsets) | st.sampled_from([
    datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))), datetime.max.replace(tzinfo=timezone(timedelta(hours=-5))),
    datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)]))
def test_as_of_renders_or_is_refused_as_a_value_error(as_of: datetime) -> None:
    try:
        utc = as_of.astimezone(UTC)
    except OverflowError:  # no UTC instant: refused, typed
        with pytest.raises(ValueError, match="out of range"):
            render_knowledge_block([passage()], as_of=as_of)
        return
    attrs, _ = parse_knowledge_block(render_knowledge_block([passage()], as_of=as_of))
    assert attrs["as_of"] == f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S}Z"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(nasty_text, st.lists(nasty_text, max_size=3), nasty_text), min_size=1, max_size=3),
       st.integers(0, 1 << 16), st.one_of(st.none(), ANY_CHAR), nasty_text)
def test_a_tampered_block_is_refused_or_parses_to_what_it_says(items: list[tuple[str, list[str], str]], at: int,
                                                                 insert: str | None, garbage: str) -> None:
    """Never a block that parses into something else: one character inserted or deleted anywhere, or
    arbitrary text, is a ``ValueError`` or a block that is itself canonical (parse is injective)."""
    ps = [passage(title=t, heading_path=h, text=x) for t, h, x in items]
    block = render_knowledge_block(ps, as_of=AS_OF)
    at %= len(block)
    for tampered in (block[:at] + (insert if insert is not None else "") + block[at + (insert is None):], garbage):
        try:
            parsed = parse_knowledge_block(tampered)
        except ValueError:
            continue
        assert tampered == block or parsed != parse_knowledge_block(block)


def test_pathological_passages_round_trip() -> None:
    text = "<" * 20_000 + "&" * 20_000 + "\ud800\udfff" * 5_000 + "]]></passage></knowledge>" * 2_000 + "\x00\r\u2028"
    ps = [passage(title=text[:5000], heading_path=[text[::7], " > " * 1000, ""], text=text)]
    block = render_knowledge_block(ps, as_of=AS_OF)
    assert block.count("<passage ") == 1 and block.count("</passage>") == 1
    _, parsed = parse_knowledge_block(block)
    assert (parsed[0].doc, parsed[0].path, parsed[0].text) == (text[:5000], [text[::7], " > " * 1000, ""], text)


# ---------------------------------------------------------------- the scanners

PATHOLOGICAL = {
    "a": "a" * 500_000, "equals": "=" * 500_000, "base64": "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODkrLw" * 10_000,
    "base64_padded": "QUJDREVGR0hJSktMTU5PUA==" * 20_000, "ignore": "ignore " * 70_000,
    "ignore_previous": "ignore all previous " * 25_000, "comment_open": "<!--" * 100_000,
    "comment_nested": "<!-- <!-- ai: " * 30_000 + "-->", "dashes": "-" * 500_000, "underscores": "_" * 500_000,
    "jwt_headers": "eyJ" * 150_000, "jwt_dashes": "eyJ-" * 100_000, "pem_b64": "LS0tLS1CRUdJTi" * 30_000 + "-",
    "pem_headers": "-----BEGIN PRIVATE KEY-----\n" * 15_000, "url_userinfo": "://a:" * 100_000,
    "assignments": "password=" * 50_000, "spaced_value": "password:" + " " * 400_000 + "x",
    "tool_tags": "<tool_call " * 40_000, "zero_width": "\u200b" * 300_000, "bidi": "\u202a\u05d0" * 150_000,
    "role_markers": "<|im_start|>" * 40_000, "you_are_now": "you are now " * 40_000, "surrogates": "\udc80" * 300_000,
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_scanners_are_total_and_linear_on_pathological_text(name: str) -> None:
    # Sized so that a scan quadratic in the run (as the JWT and LS0 rules and the HTML-comment search
    # were) would take minutes where these take milliseconds; no wall-clock assertion.
    text = PATHOLOGICAL[name]
    findings = find_secrets(text)
    assert all(0 <= f.start < f.end <= len(text) for f in findings)
    assert isinstance(is_instruction_like(text), bool)


# ---------------------------------------------------------------- explicit large cases


def test_a_10_mb_single_line() -> None:
    line = "Roll back by reverting the release tag, then re-run the deploy job. " * 150_000  # 10.2 MB
    label, prepared = pipeline(line.encode(), "markdown")
    assert label == "prepared" and prepared is not None
    check_prepared(line, "Doc", prepared)
    assert len(prepared.chunks) > 2_000


def test_an_unbreakable_run_is_cut_in_windows() -> None:
    run = "-" * 500_000 + "a" * 500_000 + "中" * 50_000 + "\u3000x" * 50_000 + "ab-" * 100_000
    label, prepared = pipeline(run, "plain")
    assert label == "prepared" and prepared is not None
    check_prepared(run, "Doc", prepared)


def test_100_000_headings() -> None:
    text = "".join(f"{'#' * (i % 6 + 1)} Heading {i}\n\nBody {i}.\n\n" for i in range(100_000))
    label, prepared = pipeline(text, "markdown")
    assert label == "prepared" and prepared is not None
    check_prepared(text, "Doc", prepared)
    assert _parsable(text)  # parsed as Markdown: 100,000 sections, merged up to the ceiling


@pytest.mark.parametrize("shape", ["one_line", "indented"])
def test_a_list_nested_3000_levels_deep(shape: str) -> None:
    text = "- " * 3000 + "item\n" if shape == "one_line" else "".join("  " * i + "- item\n" for i in range(3000))
    label, prepared = pipeline(text, "markdown")
    assert label == "prepared" and prepared is not None
    check_prepared(text, "Doc", prepared)
    # Deeper than MAX_MARKDOWN_NESTING could nest: chunked as plain text, never handed to the parser.
    assert all(c.draft.heading_path == ("Doc",) for c in prepared.chunks)


def test_one_mb_of_nul() -> None:
    assert pipeline(b"\x00" * 1_000_000, "plain")[0] == "refused:undecodable"
    assert pipeline("\x00" * 1_000_000, "markdown")[0] == "refused:undecodable"
    assert pipeline("text\x00" * 200_000, "plain")[0] == "refused:undecodable"


def test_lone_surrogates_and_their_encodings_are_refused() -> None:
    assert pipeline(b"text \xed\xa0\x80 text", "plain")[0] == "refused:undecodable"  # CESU-8 / WTF-8 surrogate
    assert pipeline("text \ud800 text", "markdown")[0] == "refused:undecodable"
    assert pipeline("text", "markdown", title="Guide \udfff")[0] == "refused:invalid_request"
    assert pipeline("text", "markdown", title="Guide \x00")[0] == "refused:invalid_request"


@pytest.mark.parametrize("text", [
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\u200c\u200d\u2060\ufeff" * 1_000,
    "\u200b" * 20_000, "\u2066\u2069" * 5_000,
], ids=["bidi_and_zero_width", "zero_width", "isolates"])
def test_a_document_of_only_invisible_characters(text: str) -> None:
    label, prepared = pipeline(text.encode(), "markdown")
    assert label == "prepared" and prepared is not None
    check_prepared(text, "Doc", prepared)
    assert all(c.instruction_like for c in prepared.chunks)  # hidden text: flagged, not refused


def test_deep_nesting_never_reaches_the_parser() -> None:
    """markdown-it.rs recursed per level and overflowed the stack — a segfault, not an exception — on
    ~50,000 levels; its emphasis nesting was quadratic (20,000 levels: 37 s). In a child process, so a
    regression fails this test instead of killing the run."""
    program = """
from knowledge.core.prepare import prepare
for text in ("> " * 100_000 + "x", "- " * 100_000 + "x", "1. " * 50_000 + "x", "*" * 200_000 + "x" + "*" * 200_000,
             "*a " * 20_000 + "x" + " a*" * 20_000, "![" * 100_000 + "x" + "](u)" * 100_000, "> - " * 50_000 + "x",
             "".join(f"[r{i}]: /u{i}\\n" for i in range(30_000))):
    prepare(text, "Doc", "markdown")
print("survived")
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "survived"), done.stderr[-2000:]


def test_nesting_below_the_bound_is_still_markdown() -> None:
    depth = MAX_MARKDOWN_NESTING // 4
    text = "> " * depth + "# Deep heading\n\n" + "# Top\n\n" + "*a " * depth + "x" + " a*" * depth + "\n"
    _, prepared = pipeline(text, "markdown")
    assert prepared is not None and ("Doc", "Top") in {c.draft.heading_path for c in prepared.chunks}


def test_a_megabyte_heading_is_cut_in_heading_paths() -> None:
    # Every chunk under a heading carries it: a 1 MB heading made ~300 MB of heading paths for one document.
    heading = " ".join(f"w{i}" for i in range(150_000))
    for text in (f"# {heading}\n\nBody.\n", f"{heading}\n===\n\nBody.\n", f"---\ntitle: {heading}\n---\n\nBody.\n"):
        _, prepared = pipeline(text, "markdown")
        assert prepared is not None
        check_prepared(text, "Doc", prepared)
        paths = {c.draft.heading_path for c in prepared.chunks}
        assert all(len(h) <= MAX_HEADING_CHARS for p in paths for h in p)
        assert ("Doc", heading[: MAX_HEADING_CHARS - 1].rstrip() + "…") in paths


@pytest.mark.parametrize("text", [
    "---\ntitle: a" + " " * 300_000 + "b\n---\n\nBody.\n",  # the front-matter title regex: quadratic
    "# a" + " " * 300_000 + "b\n\nBody.\n",  # the heading-anchor regex: quadratic in spaces
    "# " + "{#" * 150_000 + "\n\nBody.\n",  # … and in "{#"
    "Body\n\n" + "<!--" * 100_000,  # the HTML-comment search of the injection scan
], ids=["front_matter_spaces", "heading_spaces", "heading_anchors", "comments"])
def test_formerly_quadratic_headings_and_comments(text: str) -> None:
    label, prepared = pipeline(text, "markdown")
    assert label == "prepared" and prepared is not None
    check_prepared(text, "Doc", prepared)


def test_ideographic_spaces_count_in_chunk_tokens() -> None:
    # U+3000 is whitespace to the splitter and one token to the counter: chunks were packed to 1,000 tokens
    # by their words' counts while the counter gave them 1,999.
    for text, structure in (("語\u3000" * 3_000, "plain"), ("\n\n".join(["\u3000本文。"] * 400), "markdown")):
        _, prepared = pipeline(text, structure)
        assert prepared is not None
        check_prepared(text, "Doc", prepared)


# ---------------------------------------------------------------- the linear rewrites match what they replace

OLD_FRONT_MATTER_TITLE = re.compile(r"""^title\s*:\s*(?P<q>["']?)(?P<t>.+?)(?P=q)\s*$""", re.MULTILINE)
OLD_HEADING_ANCHOR = re.compile(r"\s*\{#[^}]*\}\s*$")
OLD_PARAGRAPH = re.compile(r"(?:[^\n]|\n(?!\s*\n))+")
OLD_HTML_COMMENT = re.compile(r"<!--(.*?)-->", re.DOTALL)
OLD_TOKEN = re.compile(
    r"[\u2E80-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\U00020000-\U0002FFFF]|(?<!\w)\w{1,8}(?!\w)|\w{1,5}|[^\w\s]")
small = st.lists(st.sampled_from([
    *"ab \t\n\"'{}#:.-_=*<>!", "title", "title:", "{#", "\u3000", "\x0c", "\x85", "<!--", "-->", "eyJ",
    "LS0tLS1CRUdJTi", "A" * 8, "b" * 16, "中", "。", "\u2e80",
]), max_size=40).map("".join)  # fmt: skip


@settings(max_examples=1500, deadline=None)
@given(small)
def test_rewrites_agree_with_the_regexes_they_replace(text: str) -> None:
    old = OLD_FRONT_MATTER_TITLE.search(text)
    new = _front_matter_title(text)
    assert (old is None) == (new is None) and (old["t"].strip() if old else "") == (new or "").strip()
    assert _without_anchor(text) == OLD_HEADING_ANCHOR.sub("", text)
    sections = _plain_sections(text, "T")
    paragraphs = [(b.start, b.end) for s in sections for b in s.blocks]
    old_paragraphs = []
    for m in OLD_PARAGRAPH.finditer(text):
        start, end = m.start(), m.end()
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start < end:
            old_paragraphs.append((start, end))
    assert paragraphs == old_paragraphs
    assert list(_html_comments(text)) == OLD_HTML_COMMENT.findall(text)
    marks = Marks(text, _LITERALS)
    for rule in RULES:
        assert [m.span() for m in _matches(rule, text, marks)] == [m.span() for m in rule.pattern.finditer(text)]


def old_assignments(text: str) -> list[tuple[int, int]]:
    """The separator-first search `_assignments` replaced: the same checks, at every ``:`` and ``=``."""
    from knowledge.core import scan_rules as r

    found, pos = [], 0
    while (match := _ASSIGNMENT.search(text, pos)) is not None:
        pos = match.start() + 1
        key = r._key_before(text, match.start())
        if not any(word in key.lower() for word in r.HINTS) or not r.names_secret(key):
            continue
        quote = match["q"]
        start = match.start("qv" if quote else "v")
        close = text.find(quote, start, start + 257) if quote else -1
        if close > start and "\n" not in text[start:close]:
            end = close
        else:
            rest = r._VALUE_REST.match(text, start + 12)
            end = rest.end() if rest is not None else start + 12
        value = text[start:end]
        judged = value.removeprefix(r._DJANGO_DEV_PREFIX)
        if r._written(judged) or r._ETCD_SIMPLE_TOKEN.fullmatch(value):
            continue
        pos = max(pos, end)
        if r.looks_random(judged):
            found.append((start, end))
    return found


_ASSIGNMENT_PARTS = st.sampled_from([
    "password", "DB_PASSWORD", "apiKey", "secret_key", "Token", "x" * 70, "pwd", "credentials", "honeycomb-team",
    "name", "_file", "=", ":", "==", "=>", " ", "\t", "\n", "'", '"', "[", "]", "b'", ",", ";", "//", "://",
    "k9Qv2LmX8pRt4Wz7Ys1N", "aB3xY9kLm2Qp", "changeme", "İ", "中", "-", "_", ".",
])  # fmt: skip
# An assignment's parts in order, each optional, so most examples hold one the rule weighs.
_ONE_ASSIGNMENT = st.tuples(*(st.sampled_from(options) for options in (
    ("", "config[", "env[", "  ", "x" * 70), ("", "'", '"'), ("password", "DB_PASSWORD", "apiKey", "clientSecret",
    "token_name", "pwd", "AUTH_TOKEN"), ("", "'", '"'), ("", "]"), ("", " ", "\t\t", "     "), (":", "=", "=>", "::"),
    ("", " ", "  "), ("", "'", '"', "b'", "r\""), ("k9Qv2LmX8pRt4Wz7Ys1N", "aB3xY9kLm2Qp", "changeme-please-now",
    "k9Qv2Lm;X8pRt,4Wz7", "=k9Qv2LmX8pRt4Wz7"), ("", "'", '"', "\n", ";"),
))).map("".join)  # fmt: skip
assignment_texts = st.lists(st.one_of(_ASSIGNMENT_PARTS, _ONE_ASSIGNMENT), max_size=12).map("".join)


@settings(max_examples=3000, deadline=None)
@given(assignment_texts)
@example("config['SECRET_KEY'] = 'k9Qv2LmX8pRt4Wz7Ys1N'")
@example("İİ password: k9Qv2LmX8pRt4Wz7Ys1N")
def test_assignments_found_from_the_keys_match_the_separator_first_search(text: str) -> None:
    assert list(_assignments(text, Marks(text, _LITERALS))) == old_assignments(text)


@settings(max_examples=500, deadline=None)
@given(st.text(st.one_of(ANY_CHAR, st.sampled_from([*"a_-。、中　 ", "\u3001", "\u303f", "\uac00"])), max_size=60))
def test_the_token_regex_counts_as_before_it_was_reordered(text: str) -> None:
    assert [m.span() for m in _TOKEN.finditer(text)] == [m.span() for m in OLD_TOKEN.finditer(text)]


_WORD = st.one_of(st.sampled_from(["a", "word", "x" * 12, "中文", "-", "é", "\u200b", "a" * 520, "-" * 120, "w" * 600]),
                  st.text(st.characters(exclude_categories=["Zs", "Zl", "Zp", "Cc"]), min_size=1, max_size=8))
_GAP = st.sampled_from([" ", "  ", "\u3000", " \u3000 ", "\t", "\xa0", "\x0b"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_WORD, _GAP), min_size=2, max_size=2000), st.booleans())
def test_bulk_word_packing_is_the_general_packing(items: list[tuple[str, str]], leading: bool) -> None:
    text = (" " if leading else "") + "".join(w + g for w, g in items).rstrip()
    block = _Block(0, len(text), count_tokens(text))
    bulk = _pack_words(text, block)
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    if bulk is not None:
        assert bulk == _pack(text, _units(text, spans, _word_tokens))
        assert all(b.tokens == count_tokens(text[b.start : b.end]) for b in bulk)


def test_ids_stay_deterministic_for_hostile_text() -> None:
    # Chunk ids hash the UTF-8 of the text: they exist for every prepared text (no surrogate reaches them).
    _, prepared = pipeline("\u202e\u200b\x01\x7f\ufffe\U0010ffff " * 2_000, "plain")
    assert prepared is not None
    ids = [chunk_id("t", uuid.UUID(int=7), 1, CHUNKER_VERSION, c.draft.ordinal, c.content_sha256)
           for c in prepared.chunks]
    assert len(set(ids)) == len(ids)
