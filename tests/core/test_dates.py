"""The date a document states (`knowledge.core.dates`): read from its front matter, the edition's
last modification before its first publication, and never from anywhere else in the text."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge.core.dates import EDITION_KEYS, PUBLISHED_KEYS, front_matter_date
from knowledge.core.prepare import IngestRequest, dated, prepare
from knowledge.models import Principal
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.vocabulary import TrustLevel, Visibility
from tests.ingest.test_ingest import put

dates = st.dates(min_value=date(1990, 1, 1), max_value=date(2100, 12, 31))
other_lines = st.lists(st.sampled_from(["title: Guide", "weight: 1100", "tags: [a, b]", "description: x: y",
                                        "draft: false", "aliases:", "  - /old/", "version: 2024-13-45"]),
                       max_size=5)


def entry(key: str, when: date, style: str) -> str:
    value = {"plain": when.isoformat(), "quoted": f'"{when.isoformat()}"',
             "stamp": f"{when.isoformat()}T10:30:00Z"}[style]
    return f"{key}: {value}"


@given(published=dates, edited=dates, before=other_lines, after=other_lines,
       edition_key=st.sampled_from(EDITION_KEYS), published_key=st.sampled_from(PUBLISHED_KEYS),
       style=st.sampled_from(["plain", "quoted", "stamp"]), with_edit=st.booleans(),
       body=st.text(max_size=200))
def test_the_edition_date_is_the_last_modification_else_the_publication(
        published: date, edited: date, before: list[str], after: list[str], edition_key: str,
        published_key: str, style: str, with_edit: bool, body: str) -> None:
    lines = [*before, entry(published_key, published, style), *after]
    if with_edit:
        lines.insert(len(before), entry(edition_key, edited, style))
    text = "---\n" + "\n".join(lines) + "\n---\n" + body
    assert front_matter_date(text) == (edited if with_edit else published)


@given(when=dates, body=st.text(max_size=200))
def test_a_date_outside_the_front_matter_is_not_the_documents(when: date, body: str) -> None:
    assert front_matter_date(f"# Notes\n\ndate: {when.isoformat()}\n{body}") is None  # no front matter
    assert front_matter_date(f"---\ntitle: x\n---\ndate: {when.isoformat()}\n") is None  # after it
    assert front_matter_date(f"---\ndate: {when.isoformat()}\n") is None  # never closed: not front matter
    assert front_matter_date(f"+++\ndate = {when.isoformat()}\n+++\n{body}") == when  # TOML front matter


@pytest.mark.parametrize("value", ["2024-02-30", "yesterday", "2024/03/05", "20240305", "'2024-3-5'"])
def test_what_is_not_an_iso_calendar_date_is_no_date(value: str) -> None:
    assert front_matter_date(f"---\ndate: {value}\n---\n") is None


def test_only_markdown_states_a_date_and_the_callers_date_wins() -> None:
    text = "---\ntitle: Guide\nlastmod: 2024-03-05\n---\n\n# Guide\n\nRoll back by reverting the tag.\n"
    assert prepare(text, "Guide", "markdown").doc_date == date(2024, 3, 5)
    assert prepare(text, "Guide", "plain").doc_date is None
    prepared = prepare(text, "Guide", "markdown")
    request = IngestRequest(source=None, title="Guide", visibility=Visibility.TENANT,  # type: ignore[arg-type]
                            principal=Principal(tenant_id="t", principal_id="p"), origin_trust=TrustLevel.USER)
    assert dated(request, prepared).doc_date == date(2024, 3, 5)
    assert dated(replace(request, doc_date=date(2020, 1, 1)), prepared).doc_date == date(2020, 1, 1)


@pytest.mark.anyio
async def test_an_ingested_document_gets_the_date_its_source_states(service: KnowledgeService, sql: Database,
                                                                   tenant: str) -> None:
    writer = Principal(tenant_id=tenant, principal_id="alice", scopes=frozenset({"knowledge.write"}))
    text = ("---\ntitle: Guide\ndate: 2021-06-01\nlastmod: 2024-03-05\n---\n\n"
            "# Guide\n\nRoll back by reverting the tag.\n")
    one = await service.ingest(await put(service, tenant, text), "Guide", "tenant", writer,
                               origin_trust=TrustLevel.USER)
    assert one.doc_date == date(2024, 3, 5)
    stated = await service.ingest(await put(service, tenant, text + "\nMore.\n"), "Guide 2", "tenant", writer,
                                  origin_trust=TrustLevel.USER, doc_date=date(2020, 1, 1))
    assert stated.doc_date == date(2020, 1, 1)
    many = await service.ingest_many([IngestRequest(
        source=await put(service, tenant, text + "\nBulk.\n"), title="Guide 3", visibility=Visibility.TENANT,
        principal=writer, origin_trust=TrustLevel.USER)])
    assert getattr(many[0], "doc_date", None) == date(2024, 3, 5), many
    stored = await sql.fetch("SELECT title, doc_date FROM knowledge_documents WHERE tenant_id = $1", tenant)
    assert {r["title"]: r["doc_date"] for r in stored} == {
        "Guide": date(2024, 3, 5), "Guide 2": date(2020, 1, 1), "Guide 3": date(2024, 3, 5)}


@given(when=st.dates(min_value=date(1000, 1, 1)),
       tail=st.sampled_from(["", "101500", "101500+01'00'", "101500+02'00", "214006Z00'00'", "Z", "-07'00'"]))
def test_a_pdf_date_string_gives_its_calendar_date_however_loosely_written(when: date, tail: str) -> None:
    from knowledge.parsers.pdf_extract import pdf_date

    assert pdf_date(f"D:{when:%Y%m%d}{tail}") == when
    assert pdf_date(f"{when:%Y%m%d}{tail}") == when  # without the D: prefix
    assert pdf_date(f"D:{when:%Y}") == date(when.year, 1, 1)
    assert pdf_date(f"D:{when.isoformat()}") == when  # some producers write ISO


@pytest.mark.parametrize("value", [None, "", "D:", "yesterday", "D:20241340", "D:20241", "D:99"])
def test_what_is_not_a_pdf_date_is_no_date(value: str | None) -> None:
    from knowledge.parsers.pdf_extract import pdf_date

    assert pdf_date(value) is None


@pytest.mark.anyio
async def test_an_ingested_pdf_gets_the_date_its_document_information_states(
        service: KnowledgeService, tenant: str) -> None:
    import io

    import pikepdf

    from tests.parsers.test_pdf_extract import PROSE, body, make_pdf

    writer = Principal(tenant_id=tenant, principal_id="alice", scopes=frozenset({"knowledge.write"}))

    def dated_pdf(**info: str) -> bytes:
        with pikepdf.open(io.BytesIO(make_pdf([body(700, PROSE)]))) as pdf:
            for key, value in info.items():
                pdf.docinfo[f"/{key}"] = value
            out = io.BytesIO()
            pdf.save(out)
            return out.getvalue()

    async def ingest(data: bytes, title: str) -> date | None:
        ref = await put(service, tenant, data, media_type="application/pdf", file_name=f"{title}.pdf")
        return (await service.ingest(ref, title, "tenant", writer, origin_trust=TrustLevel.USER)).doc_date

    assert await ingest(dated_pdf(CreationDate="D:20210601093000Z", ModDate="D:20240305101500+01'00'"),
                        "edited") == date(2024, 3, 5)  # the last modification wins
    assert await ingest(dated_pdf(CreationDate="D:20210601093000-07'00'"), "created") == date(2021, 6, 1)
    assert await ingest(dated_pdf(ModDate="garbage"), "undated") is None  # no date: recency stays neutral
