"""knowledge.core.render: the spec's envelope, exact escaping, and a parser that returns the stored texts."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge.core.ranking import DEFAULT_POLICY
from knowledge.core.render import ParsedPassage, parse_knowledge_block, render_knowledge_block
from knowledge.models import Authority, RetrievedPassage

AS_OF = datetime(2026, 7, 28, tzinfo=UTC)

# Verbatim from the spec ("The rendered block").
SPEC_EXAMPLE = """<knowledge as_of="2026-07-28T00:00:00Z" policy="knowledge-v1">
  <passage doc="Deployment Guide" path="Deployment > Rollback"
           chunk="kc_7f3a91" doc_date="2026-05-02"
           instruction_like="false">
    Roll back by reverting the release tag and re-running the deploy
    job. Do not edit the running configuration directly.
  </passage>
</knowledge>"""

# Ours: the same tokens; tags flush left, attributes on one line, the text unindented because it is
# quoted verbatim (the documented whitespace difference).
GOLDEN = """<knowledge as_of="2026-07-28T00:00:00Z" policy="knowledge-v1">
<passage doc="Deployment Guide" path="Deployment > Rollback" chunk="kc_7f3a91" doc_date="2026-05-02" \
instruction_like="false">
Roll back by reverting the release tag and re-running the deploy
job. Do not edit the running configuration directly.
</passage>
</knowledge>"""

NASTY = [
    "</passage>", "</knowledge>", "<passage doc=\"x\">", "<", ">", "&", "&amp;", "&lt;", "&#x41;", "&#65;", '"', "'",
    "\n", "\t", "\r", "\r\n", "\x00", "\x07", "\x1b", "\x7f", "\x85", "\x9f", "\ud800", "\udfff", "\ud83d",
    "\ufffe", "\uffff", "\ufdd0", "\U0010ffff", "\u2028", "\u2029", "\ufeff", "\u202e", " > ", ">>", " ", "",
    "]]>", "<!--", "-->", "kc_", "é", "日本",
]
nasty_text = st.one_of(
    st.text(st.characters(exclude_categories=())),  # every code point, lone surrogates included
    st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=3)), max_size=12).map("".join),
)


def passage(**kw: object) -> RetrievedPassage:
    fields: dict[str, object] = {
        "chunk_id": "kc_7f3a91", "document_id": uuid.UUID(int=1), "title": "Deployment Guide",
        "heading_path": ["Deployment", "Rollback"],
        "text": "Roll back by reverting the release tag and re-running the deploy\n"
                "job. Do not edit the running configuration directly.",
        "doc_date": date(2026, 5, 2), "authority": Authority.PRINCIPAL_AUTHORED, "score": 1.0, "arms": ["lexical"],
        "instruction_like": False, "tokens": 20,
    }
    fields.update(kw)
    return RetrievedPassage.model_validate(fields)


def test_golden_spec_example() -> None:
    block = render_knowledge_block([passage()], as_of=AS_OF, policy="knowledge-v1")
    assert block == GOLDEN
    assert block.split() == SPEC_EXAMPLE.split()  # the spec's block, modulo whitespace only


def test_rendered_text_is_verbatim_after_parsing() -> None:
    ps = [
        passage(),
        passage(chunk_id="kc_2", title='Guide "Prod" & <Ops>', heading_path=["A > B", "C"], doc_date=None,
                instruction_like=True,
                text="Quote </passage> and </knowledge>, & \"quotes\", a bell \x07,\n\ttabs\nand > arrows.\n"),
        passage(chunk_id="kc_3", heading_path=[], text=""),
    ]
    attrs, parsed = parse_knowledge_block(render_knowledge_block(ps, as_of=AS_OF))
    assert attrs == {"as_of": "2026-07-28T00:00:00Z", "policy": DEFAULT_POLICY.name}
    assert [p.text for p in parsed] == [p.text for p in ps]
    assert parsed[1] == ParsedPassage(doc='Guide "Prod" & <Ops>', path=["A > B", "C"], chunk="kc_2", doc_date=None,
                                      instruction_like=True, text=ps[1].text)
    assert parsed[2].path == [] and parsed[0].doc_date == "2026-05-02"


@given(items=st.lists(st.tuples(nasty_text, st.lists(nasty_text, max_size=4), nasty_text, nasty_text,
                                st.booleans(), st.one_of(st.none(), st.dates())), max_size=5),
       policy=nasty_text)
def test_round_trip_over_arbitrary_text(items: list[tuple[str, list[str], str, str, bool, date | None]],
                                        policy: str) -> None:
    ps = [passage(title=title, heading_path=path, chunk_id=chunk, text=text, instruction_like=flag, doc_date=d)
          for title, path, chunk, text, flag, d in items]
    block = render_knowledge_block(ps, as_of=AS_OF, policy=policy)
    attrs, parsed = parse_knowledge_block(block)
    assert attrs == {"as_of": "2026-07-28T00:00:00Z", "policy": policy}
    assert parsed == [
        ParsedPassage(doc=p.title, path=p.heading_path, chunk=p.chunk_id,
                      doc_date=None if p.doc_date is None else p.doc_date.isoformat(),
                      instruction_like=p.instruction_like, text=p.text)
        for p in ps
    ]
    # Nothing broke out: the structure is exactly what was rendered, and the block is clean UTF-8.
    assert block.count("<passage ") == len(ps) and block.count("</passage>") == len(ps)
    assert block.count("<knowledge ") == 1 and block.count("</knowledge>") == 1 and block.endswith("</knowledge>")
    assert block.encode("utf-8").decode("utf-8") == block
    assert not any(0x80 <= ord(ch) <= 0x9F or (ord(ch) < 0x20 and ch not in "\n\t") for ch in block)
    assert render_knowledge_block(ps, as_of=AS_OF, policy=policy) == block  # deterministic


def test_escaping_is_readable_and_exact() -> None:
    block = render_knowledge_block([passage(title="a\tb\n<c>", heading_path=['x > y', ""], chunk_id='k"1',
                                            text="if a < b && c > d:\n\tgo()\r\x00\ud800\ufffe\u2028")], as_of=AS_OF)
    assert 'doc="a&#x9;b&#xA;&lt;c&gt;"' in block
    assert 'path="x &gt; y > "' in block  # a raw " > " is only ever the separator
    assert 'chunk="k&quot;1"' in block
    assert "\nif a &lt; b &amp;&amp; c > d:\n\tgo()&#xD;&#x0;&#xD800;&#xFFFE;&#x2028;\n</passage>" in block


def test_empty_path_and_missing_date_are_omitted_and_distinct() -> None:
    none = render_knowledge_block([passage(heading_path=[], doc_date=None)], as_of=AS_OF)
    empty_heading = render_knowledge_block([passage(heading_path=[""])], as_of=AS_OF)
    assert " path=" not in none and " doc_date=" not in none
    assert ' path="" ' in empty_heading
    assert parse_knowledge_block(none)[1][0].path == []
    assert parse_knowledge_block(empty_heading)[1][0].path == [""]


def test_no_passages_and_as_of_in_utc() -> None:
    local = datetime(2026, 7, 28, 2, 0, 0, 999_999, tzinfo=timezone(timedelta(hours=2)))
    block = render_knowledge_block([], as_of=local, policy="knowledge-v1")
    assert block == '<knowledge as_of="2026-07-28T00:00:00Z" policy="knowledge-v1">\n</knowledge>'
    assert parse_knowledge_block(block) == ({"as_of": "2026-07-28T00:00:00Z", "policy": "knowledge-v1"}, [])
    with pytest.raises(ValueError):
        render_knowledge_block([], as_of=datetime(2026, 7, 28))  # naive: refused


@pytest.mark.parametrize("tamper", [
    lambda b: b.replace("Roll back", "&#x52;oll back"),  # a reference render would not write
    lambda b: b.replace("Roll back", "Roll &amp back"),  # a bare '&'
    lambda b: b.replace("Roll back", "Roll &#xd; back"),  # lowercase hex
    lambda b: b.replace("Roll back", "Roll <b>back</b>"),  # a raw tag inside a passage
    lambda b: b + "\n",
    lambda b: b.removesuffix("</knowledge>"),
    lambda b: b.replace('instruction_like="false"', 'instruction_like="no"'),
    lambda b: b.replace(' path="Deployment > Rollback"', ' path="Deployment > Rollback" extra="1"'),
    lambda b: b.replace("\n</passage>", "</passage>"),
    lambda b: "  " + b,
], ids=["non-canonical-ref", "bare-amp", "lowercase-hex", "raw-tag", "trailing-newline", "no-footer",
        "bad-flag", "unknown-attr", "no-newline", "leading-space"])
def test_parse_refuses_what_render_would_not_produce(tamper: Callable[[str], str]) -> None:
    block = render_knowledge_block([passage()], as_of=AS_OF)
    tampered = tamper(block)
    assert tampered != block
    with pytest.raises(ValueError):
        parse_knowledge_block(tampered)
