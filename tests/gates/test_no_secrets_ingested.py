"""Hard gate "No secrets ingested" (ADR-0033, Hard gates):

    No secrets ingested — a source containing a credential pattern fails the ingest, and no KnowledgeDocument,
    chunk, index row, ingest event, or newly created knowledge-source artifact survives the attempt. The
    caller's input artifact is untouched: knowledge.ingest is handed an existing ArtifactRef and must read it to
    scan it, so deleting it would destroy a caller-owned object that may be shared or retried, on the strength
    of a refusal this tool had no authority to make. M9.

`test_gate_no_secrets_ingested` is a hypothesis property over generated multi-chunk documents —
Markdown, plain text, and PDFs, web pages and Word documents through the real parser child — with a
credential snippet placed at a random block (so past the first chunk as often as not): the ingest is
refused ``secret_detected``
naming the chunk that holds the credential and its line, never echoing it, and leaves nothing
behind. `test_every_dev_secret_record_is_refused_and_every_clean_one_ingested` runs the dev set's
records through the service.
"""

from __future__ import annotations

import gzip
import json
import re
import uuid
from collections import Counter
from functools import cache

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge.core.chunking import MarkdownChunker, PlainTextChunker
from knowledge.core.normalize import normalize
from knowledge.errors import IngestRefused
from knowledge.models import TrustLevel
from knowledge.parsers.docx_extract import extract_docx
from knowledge.parsers.html_extract import extract_html
from knowledge.parsers.pdf_extract import extract_pdf_text
from knowledge.parsers.sniff import DOCX, HTML
from knowledge.service import KnowledgeService
from tests.conftest import corpus_missing
from tests.gates.strategies import CONTENT, block, running_service
from tests.gates.test_passage_verbatim import PROPERTY
from tests.helpers.render_docx import render_docs_docx
from tests.helpers.render_html import render_docs_page
from tests.ingest.test_ingest import SECRETS, footprint, put, writer
from tests.parsers.test_pdf_extract import body, make_pdf


def _secret_records() -> list[dict[str, str]]:
    with gzip.open(SECRETS, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _embed(snippet: str) -> str:
    return (
        "# Service setup\n\nThis page explains how the service is configured for production use and how\n"
        "operators rotate what it needs. Read it before the first deploy.\n\n## Configuration\n\n"
        f"{snippet}\n\n## Next steps\n\nContinue with the monitoring guide, which explains the alerts.\n"
    )


@cache
def _snippets() -> tuple[str, ...]:
    """The dev set's credential snippets (each a few lines: a file name, the line that holds it)."""
    return tuple(r["text"].strip("\n") for r in _secret_records() if r["label"] == "secret")


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@st.composite
def secret_document(draw: st.DrawFn) -> tuple[str, str, bytes, str]:
    """(media type, title, the document's bytes, the credential snippet in it): sections of generated
    blocks — long ones, so a document runs to several chunks — with the snippet as one block at a
    random place; for a PDF, pages of body lines with the snippet's lines at a random place."""
    snippet = draw(st.sampled_from(_snippets()))
    media_type = draw(st.sampled_from(["text/markdown", "text/plain", "application/pdf", HTML, DOCX]))
    title = draw(st.sampled_from(["Setup", "Runbook", "Operations guide"]))
    if media_type == "application/pdf":
        lines = [" ".join(draw(st.lists(st.sampled_from(CONTENT), min_size=4, max_size=10)))
                 for _ in range(draw(st.integers(60, 160)))]
        at = draw(st.integers(0, len(lines)))
        lines[at:at] = [x for x in snippet.splitlines() if x.strip()]
        pages = [body(740, lines[i:i + 55]) for i in range(0, len(lines), 55)]
        return media_type, title, make_pdf(pages), snippet
    blocks = draw(st.lists(block(), min_size=3, max_size=10))
    blocks.insert(draw(st.integers(0, len(blocks))), snippet)
    markdown = "\n\n".join(blocks)
    if media_type == HTML:  # the same blocks as a docs site serves them, chrome around
        return media_type, title, render_docs_page(markdown, title), snippet
    if media_type == DOCX:  # the same blocks as a Word document (which cannot hold XML's forbidden characters)
        return media_type, title, render_docs_docx(_NOT_XML.sub("", markdown), title), snippet
    return media_type, title, markdown.encode(), snippet


def _expected_chunks(media_type: str, title: str, data: bytes, snippet: str) -> tuple[set[int], set[int]]:
    """The ordinals of the chunks that hold part of the snippet's credential line, and its lines, as
    the text the service chunks has them."""
    if media_type == "application/pdf":
        text, structure = normalize(extract_pdf_text(data)), "markdown"
    elif media_type in (HTML, DOCX):
        extracted = extract_html(data) if media_type == HTML else extract_docx(data)
        text, structure = normalize(extracted.text), "markdown"
    else:
        text, structure = normalize(data.decode()), ("markdown" if media_type == "text/markdown" else "plain")
    secret_line = max(snippet.splitlines(), key=len).strip()  # the longest line: the one with the credential
    # As the text holds it: a PDF's extraction collapses runs of white space inside a line.
    found = re.search(r"\s+".join(map(re.escape, secret_line.split())), text)
    chunker = MarkdownChunker() if structure == "markdown" else PlainTextChunker()
    drafts = chunker.chunk(text, title)
    if found is None and media_type in (HTML, DOCX):
        # A rendering may restyle the line (Markdown emphasis in it becomes <em>, then plain text):
        # the credential is still in the page, and the refusal must come; which chunk, any.
        return {d.ordinal for d in drafts}, set(range(1, text.count("\n") + 2))
    assert found is not None, "the snippet's credential line is not in the text the service reads"
    at, end = found.span()
    holders = {d.ordinal for d in drafts if d.start < end and at < d.end}
    first_line = text.count("\n", 0, at) + 1
    return holders, set(range(first_line - 3, first_line + 4))


async def _refused_where_it_is(svc: KnowledgeService, case: tuple[str, str, bytes, str], seen: Counter[str]) -> None:
    media_type, title, data, snippet = case
    tenant = f"ts-{uuid.uuid4().hex[:10]}"
    ref = await put(svc, tenant, data, media_type=media_type, file_name="doc")
    before = await footprint(svc, tenant)
    with pytest.raises(IngestRefused) as refused:
        await svc.ingest(ref, title, "tenant", writer(tenant), origin_trust=TrustLevel.USER)
    err = refused.value
    assert err.reason == "secret_detected"
    holders, lines = await anyio.to_thread.run_sync(_expected_chunks, media_type, title, data, snippet)
    assert err.chunk_ordinal in holders, (err.chunk_ordinal, holders, str(err))
    line = re.search(r"line (\d+)", str(err))
    assert line is not None and int(line.group(1)) in lines, str(err)
    secret_line = max(snippet.splitlines(), key=len).strip()
    for piece in re.findall(r"[A-Za-z0-9+/=_\-.]{12,}", secret_line):  # no run of the credential line echoed
        assert piece not in str(err) and piece not in repr(err), piece
    assert await footprint(svc, tenant) == before
    assert await svc.read_artifact(ref) == data
    seen[media_type] += 1
    seen["past the first chunk" if min(holders) > 0 else "in the first chunk"] += 1


@pytest.mark.skipif(corpus_missing(SECRETS), reason="shared corpus not present")
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gate_no_secrets_ingested(database_dsn: str, backend: str) -> None:
    seen: Counter[str] = Counter()
    with running_service(database_dsn, backend) as (portal, svc):

        @settings(PROPERTY, max_examples=40)
        @given(secret_document())
        def gate(case: tuple[str, str, bytes, str]) -> None:
            portal.call(_refused_where_it_is, svc, case, seen)

        gate()
    # The property saw every kind of document, and credentials past the first chunk.
    assert {"text/markdown", "text/plain", "application/pdf", HTML, DOCX} <= set(seen), seen
    assert seen["past the first chunk"], seen


@pytest.mark.anyio
@pytest.mark.skipif(corpus_missing(SECRETS), reason="shared corpus not present")
async def test_every_dev_secret_record_is_refused_and_every_clean_one_ingested(
        service: KnowledgeService, tenant: str) -> None:
    records = await anyio.to_thread.run_sync(_secret_records)  # a file read: not on the loop
    assert sum(r["label"] == "secret" for r in records) == 50
    for record in records:
        text = _embed(record["text"])
        ref = await put(service, tenant, text)
        before = await footprint(service, tenant)
        if record["label"] == "secret":
            with pytest.raises(IngestRefused) as refused:
                await service.ingest(ref, "Setup", "principal", writer(tenant), origin_trust=TrustLevel.USER)
            err = refused.value
            assert err.reason == "secret_detected", record["id"]
            assert err.chunk_ordinal is not None and err.heading_path and err.heading_path[0] == "Setup"
            assert str(err).find(record["text"].strip().splitlines()[-1][-12:]) == -1  # never the secret
            assert await footprint(service, tenant) == before, record["id"]  # inputs untouched too
            assert await service.read_artifact(ref) == text.encode()
        else:
            await service.ingest(ref, "Setup", "principal", writer(tenant), origin_trust=TrustLevel.USER)
    stats = await service.ingest_stats(tenant)
    assert stats.accepted == 50 and stats.refused == {"secret_detected": 50}
