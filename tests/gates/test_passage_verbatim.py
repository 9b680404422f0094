"""Hard gate "Passage verbatim" (ADR-0033, Hard gates):

    Passage verbatim — every rendered passage matches its chunk's stored text exactly, and the chunk matches its
    content_sha256. A property gate. M9.

As hypothesis properties over generated corpora (`tests.gates.strategies`), through the real ingest,
search, rendering and resolution paths: every passage of every rendered ``<knowledge>`` block, parsed
back, is its stored chunk's text byte for byte, under its document's title and heading path — for
Markdown and plain text (`test_gate_passage_verbatim`), and for PDFs through the real parser child
(`test_gate_passage_verbatim_pdf`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings

from knowledge.core.normalize import normalize
from knowledge.core.render import parse_knowledge_block, render_knowledge_block
from knowledge.models import ArtifactOrigin, KnowledgeChunk, KnowledgeQuery, TrustLevel, Viewer
from knowledge.service import KnowledgeService
from tests.gates.strategies import Corpus, Question, Source, corpus, pdf_source, running_service, text_source
from tests.retrieval.test_search import ingest_text, writer


async def ingest_source(svc: KnowledgeService, tenant: str, source: Source) -> uuid.UUID:
    """A generated source through the real ingest as alice's tenant-wide document (Markdown by the
    search tests' own helper)."""
    if source.media_type == "text/markdown":
        return await ingest_text(svc, tenant, "alice", source.data.decode(), title=source.title,
                                 doc_date=source.doc_date)
    ref = await svc.put_artifact(tenant, source.data, media_type=source.media_type, origin=ArtifactOrigin.UPLOAD,
                                  trust=TrustLevel.USER)
    doc = await svc.ingest(ref, source.title, "tenant", writer(tenant, "alice"), origin_trust=TrustLevel.USER,
                           doc_date=source.doc_date)
    return doc.document_id


async def ingest_and_ask(svc: KnowledgeService, docs: list[Source], questions: list[Question],
                         seen: Counter[str]) -> None:
    """The gate itself, for one generated corpus alone in a new tenant: every passage of every
    rendered block, parsed back, is its stored chunk's text byte for byte (the chunk's own sha256
    binds it), under its document's title, heading path, date and instruction-like flag; for a text
    source the chunk is also a slice of the normalized source."""
    tenant = f"tv-{uuid.uuid4().hex[:10]}"
    sources = {await ingest_source(svc, tenant, s): s for s in docs}
    for q in questions:
        query = KnowledgeQuery(tenant_id=tenant, principal_id=q.principal, text=q.text, max_passages=q.max_passages,
                               max_per_document=q.max_per_document, budget_tokens=100_000)
        passages = await svc.search(query)
        _, parsed = parse_knowledge_block(render_knowledge_block(passages, as_of=datetime.now(UTC)))
        assert [p.chunk for p in parsed] == [p.chunk_id for p in passages]
        viewer = Viewer(tenant_id=tenant, principal_id=q.principal)
        for shown, passage in zip(parsed, passages, strict=True):
            chunk = await svc.get_chunk(shown.chunk, viewer=viewer)
            assert isinstance(chunk, KnowledgeChunk), (shown.chunk, chunk)
            assert (chunk.chunk_id, chunk.document_id) == (shown.chunk, passage.document_id)
            assert shown.text.encode() == passage.text.encode() == chunk.text.encode()  # verbatim, whole
            assert hashlib.sha256(chunk.text.encode()).hexdigest() == chunk.content_sha256
            source = sources[passage.document_id]
            assert shown.doc == passage.title == source.title
            assert shown.path == list(passage.heading_path) == list(chunk.heading_path)
            assert shown.path[0] == source.title
            assert shown.doc_date == (source.doc_date.isoformat() if source.doc_date is not None else None)
            assert shown.instruction_like == chunk.contains_instruction_like_text
            if source.media_type != "application/pdf":
                assert chunk.text in normalize(source.data.decode())
            seen[source.media_type] += 1
            seen["later chunk" if chunk.ordinal else "first chunk"] += 1
            seen["under a heading" if len(shown.path) > 1 else "under the title"] += 1
            seen["escaped" if any(c in chunk.text for c in "<&\x07\u2028") else "unescaped"] += 1


PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gate_passage_verbatim(database_dsn: str, backend: str) -> None:
    """Markdown and plain text — headings of every level, paragraphs, lists, fences, quotes, tables,
    markup (``</passage>``, ``</knowledge>``, ``&``, ``<``, ``>``, quotes), controls, non-ASCII text
    and tabs — asked with their own words: every rendered passage is its stored chunk, verbatim."""
    seen: Counter[str] = Counter()
    with running_service(database_dsn, backend) as (portal, svc):

        @settings(PROPERTY, max_examples=50)
        @given(corpus(text_source(), max_size=3))
        def verbatim(case: Corpus) -> None:
            portal.call(ingest_and_ask, svc, *case, seen)

        verbatim()
    # Not vacuous: passages of both media types, of later chunks, under headings, and with text to escape.
    assert all(seen[k] > 0 for k in ("text/markdown", "text/plain", "later chunk", "under a heading", "escaped")), seen


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gate_passage_verbatim_pdf(database_dsn: str, backend: str) -> None:
    """PDFs built here (pikepdf, Helvetica text streams, headings in a larger font) through the real
    parser child and ingest: every rendered passage of their text is its stored chunk, verbatim,
    under its heading path. Few examples: each PDF is parsed in a child process."""
    seen: Counter[str] = Counter()
    with running_service(database_dsn, backend) as (portal, svc):

        @settings(PROPERTY, max_examples=8)
        @given(corpus(pdf_source(), max_size=2))
        def verbatim(case: Corpus) -> None:
            portal.call(ingest_and_ask, svc, *case, seen)

        verbatim()
    assert seen["application/pdf"] > 0, seen
