"""HTML pages and Word documents through the whole ingest (issue 34, items 1, 2, 4 and 7): parsed in
the pool's children, routed by what the bytes are, heading paths kept, the source's own title and
date used where the caller gave none, the secret scan and the chunker applied to the extracted
text, and the chunker version naming the extraction library."""

from __future__ import annotations

import io
from datetime import date

import docx
import pytest

from knowledge.errors import IngestRefused
from knowledge.models import ArtifactOrigin, ArtifactRef, KnowledgeQuery, Principal, TrustLevel
from knowledge.parsers.sniff import DOCX, HTML
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from tests.conftest import child_processes

PAGE = b"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>Failover runbook</title>
<meta property="article:published_time" content="2025-03-14T09:00:00Z"></head>
<body><header><nav><a href="/">Home</a> <a href="/docs">Docs</a> <a href="/blog">Blog</a></nav></header>
<main><article><h1>Failover runbook</h1>
<p>Promote the standby when the primary stops answering health checks for two minutes.</p>
""" + b"<p>" + b"The standby replays the primary's write-ahead log and serves reads. " * 40 + b"""</p>
<h2>Promotion</h2><p>Run the promotion command on the standby and wait for the timeline to change.</p>
""" + b"<p>" + b"Promotion ends recovery, switches to a new timeline and opens for writes. " * 40 + b"""</p>
<pre><code>pg_ctl promote -D /var/lib/postgresql/data</code></pre>
<h2>Afterwards</h2><p>Rebuild the old primary as a standby with pg_rewind before it rejoins.</p>
</article></main><footer>Copyright 2025 Example Corp. All rights reserved.</footer></body></html>"""


def writer(tenant: str) -> Principal:
    return Principal(tenant_id=tenant, principal_id="alice", scopes=frozenset({"knowledge.write"}))


async def put(svc: KnowledgeService, tenant: str, data: bytes, media_type: str, name: str) -> ArtifactRef:
    return await svc.put_artifact(tenant, data, media_type=media_type, origin=ArtifactOrigin.UPLOAD,
                                  trust=TrustLevel.USER, file_name=name)


def word_document() -> bytes:
    document = docx.Document()
    document.core_properties.title = "Disk pressure"
    document.add_heading("Disk pressure", level=1)
    document.add_paragraph("When a node reports disk pressure, the kubelet evicts pods by priority.")
    document.add_heading("Clean up images", level=2)
    document.add_paragraph("Prune unused container images with crictl rmi --prune on the node.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


WORD = word_document()  # built once, outside the event loop (python-docx reads its template from disk)


@pytest.mark.anyio
async def test_a_web_page_becomes_a_document_with_heading_paths_title_and_date(
        service: KnowledgeService, sql: Database, tenant: str) -> None:
    ref = await put(service, tenant, PAGE, "text/html", "failover.html")
    doc = await service.ingest(ref, "", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
    assert doc.title == "Failover runbook"  # <title>: no title was given
    assert doc.doc_date == date(2025, 3, 14)  # the page's own publication date
    assert doc.media_type == HTML and "trafilatura" in doc.chunker_version
    rows = await sql.fetch("SELECT heading_path, text FROM knowledge_chunks WHERE tenant_id = $1 "
                           "AND document_id = $2 ORDER BY ordinal", tenant, doc.document_id)
    # Each chunk opens at a heading of the page, under the headings above it (the title first).
    assert [(list(r["heading_path"]), r["text"].splitlines()[0]) for r in rows] == [
        (["Failover runbook"], "# Failover runbook"), (["Failover runbook"], "## Promotion")]
    text = "\n".join(r["text"] for r in rows)
    assert "pg_ctl promote -D /var/lib/postgresql/data" in text  # code verbatim
    assert "Copyright" not in text and "Blog" not in text  # the page's chrome is not the document
    hits = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="pg_rewind standby"))
    assert hits and hits[0].document_id == doc.document_id


@pytest.mark.anyio
async def test_a_word_document_becomes_a_document_with_heading_paths(service: KnowledgeService, sql: Database,
                                                                     tenant: str) -> None:
    ref = await put(service, tenant, WORD, "application/octet-stream", "disk.bin")  # named nothing useful
    doc = await service.ingest(ref, "", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
    assert (doc.title, doc.media_type) == ("Disk pressure", DOCX) and "python-docx" in doc.chunker_version
    rows = await sql.fetch("SELECT heading_path FROM knowledge_chunks WHERE tenant_id = $1 AND document_id = $2",
                           tenant, doc.document_id)
    assert [list(r["heading_path"]) for r in rows] == [["Disk pressure"]]  # one short chunk under its title
    text = await sql.fetchval("SELECT text FROM knowledge_chunks WHERE tenant_id = $1 AND document_id = $2",
                              tenant, doc.document_id)
    assert "# Disk pressure" in text and "## Clean up images" in text


@pytest.mark.anyio
@pytest.mark.parametrize(("data", "declared", "reason"), [
    (b"PK\x03\x04 a broken zip", DOCX, "docx_unreadable"),  # a .docx whose ZIP is broken
    (b"not a zip at all", DOCX, "docx_unreadable"),  # a .docx that is not a ZIP
    (b"PK\x03\x04 a broken zip", "application/zip", "unsupported_media_type"),
    (b"%PDF-1.4\n%%EOF", HTML, "pdf_unreadable"),  # an .html that is really a (broken) PDF: the PDF path
    (b"<html><body><script>var a = 1;</script></body></html>", HTML, "no_text"),
])
async def test_what_the_bytes_are_decides_and_refusals_are_typed(service: KnowledgeService, tenant: str,
                                                                 data: bytes, declared: str, reason: str) -> None:
    ref = await put(service, tenant, data, declared, "x")
    with pytest.raises(IngestRefused) as refused:
        await service.ingest(ref, "X", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
    assert refused.value.reason == reason
    assert await service.documents(tenant) == []


@pytest.mark.anyio
async def test_a_credential_in_a_web_page_refuses_it(service: KnowledgeService, tenant: str) -> None:
    secret = b"<pre><code>HTTPS_PROXY=https://frank:YO98pa7qaykp5GtU4Tj78Hs@nexus.tyrell.com/pypi/simple</code></pre>"
    ref = await put(service, tenant, PAGE.replace(b"</article>", secret + b"</article>"), HTML, "leak.html")
    with pytest.raises(IngestRefused) as refused:
        await service.ingest(ref, "", "tenant", writer(tenant), origin_trust=TrustLevel.USER)
    assert refused.value.reason == "secret_detected"
    assert await service.documents(tenant) == []
    assert not [p for p in child_processes() if "knowledge.parsers.child" in " ".join(p.cmdline()) and
                "--warm" not in p.cmdline()]
