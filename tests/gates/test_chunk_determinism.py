"""Hard gate "Chunk determinism" (ADR-0033, Hard gates):

    Chunk determinism — the same bytes under the same chunker_version produce identical chunk ids, across
    processes and across runs. A property gate. M9.

Pure (`test_gate_chunk_determinism`: generated Markdown chunked here and in a fresh process with
another hash seed) and through the real ingest and re-chunking (issue 21 §1), for plain text,
Markdown and PDF; and chunker versions that name what moves chunk boundaries — the Markdown parser,
and for a PDF the extraction rules and both PDF libraries — so that an upgrade of any of them is a
new version, never new ids under the old one.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge.core.chunking import (
    CHUNKER_VERSION,
    PARAGRAPH_CHUNKER_VERSION,
    MarkdownChunker,
    PlainTextChunker,
    chunk_id,
    chunk_text,
    content_sha256,
)
from knowledge.core.normalize import normalize
from knowledge.errors import IngestRefused
from knowledge.models import ArtifactOrigin, TrustLevel
from knowledge.parsers.pdf import PDF_TEXT_VERSION, PdfExtractor
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from tests.core.test_chunking import Section, markdown_doc
from tests.ingest.test_versions import owner
from tests.parsers.test_pdf_extract import body, make_pdf

MARKDOWN = """# Operations guide

## Backups

Take a snapshot every hour; keep the last {n} snapshots. Restore with the restore job and check
the member list afterwards.

## Upgrades

Upgrade one member at a time. Wait for the cluster to report healthy before the next member.
""" + "\n".join(f"\n### Step {i}\n\nStep {i} of the upgrade: drain, upgrade, rejoin, verify the {i}th member."
                for i in range(1, 60))

PLAIN = "\n\n".join(f"Paragraph {i}. The quorum needs a majority of members; member {i} counts once."
                    for i in range(1, 120))


def pdf_bytes() -> bytes:
    lines = [f"Line {i}: check the member list and the snapshot age." for i in range(40)]
    return make_pdf([[(16, 72, 720, "Operations guide"), *body(690, [f"Page {p}. {line}" for line in lines])]
                     for p in range(6)])


SOURCES = {"text/plain": PLAIN.encode(), "text/markdown": MARKDOWN.format(n=24).encode(),
           "application/pdf": pdf_bytes()}


async def chunks_of(db: Database, tenant: str, document_id: uuid.UUID) -> list[tuple[str, int, str, str]]:
    """The live chunk set as stored: (chunk id, ordinal, chunker version, text), in order."""
    rows = await db.fetch(
        """SELECT c.chunk_id, c.ordinal, c.chunker_version, c.text, c.content_sha256 FROM knowledge_chunks c
           JOIN knowledge_documents d USING (tenant_id, document_id, version, chunker_version)
           WHERE c.tenant_id = $1 AND c.document_id = $2 AND d.valid_to IS NULL ORDER BY c.ordinal""",
        tenant, document_id)
    for r in rows:  # every id is the function of what it names, and the text's hash is its text's
        assert r["content_sha256"] == content_sha256(r["text"])
        assert r["chunk_id"] == chunk_id(tenant, document_id, 1, r["chunker_version"], r["ordinal"],
                                         r["content_sha256"])
    return [(r["chunk_id"], r["ordinal"], r["chunker_version"], r["text"]) for r in rows]


async def ingest(svc: KnowledgeService, tenant: str, media_type: str, data: bytes) -> uuid.UUID:
    ref = await svc.put_artifact(tenant, data, media_type=media_type, origin=ArtifactOrigin.UPLOAD,
                                  trust=TrustLevel.USER)
    doc = await svc.ingest(ref, "Operations guide", "tenant", owner(tenant), origin_trust=TrustLevel.USER)
    return doc.document_id


@pytest.mark.anyio
@pytest.mark.parametrize("media_type", list(SOURCES))
async def test_gate_chunk_determinism_through_ingest_and_rechunk(service: KnowledgeService, sql: Database,
                                                                  media_type: str) -> None:
    """The same bytes ingested twice (two tenants) are cut into the same chunks under the same
    version; a re-chunk away and back restores the very same chunk ids; the current chunker again
    is refused as already chunked."""
    data = SOURCES[media_type]
    tenants = [f"det-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    docs = [await ingest(service, t, media_type, data) for t in tenants]
    first, second = [await chunks_of(sql, t, d) for t, d in zip(tenants, docs, strict=True)]
    assert len(first) >= 2
    assert [c[1:] for c in first] == [c[1:] for c in second]  # same boundaries, texts and version
    version = first[0][2]
    expected = {"text/plain": PARAGRAPH_CHUNKER_VERSION, "text/markdown": CHUNKER_VERSION,
                "application/pdf": f"{CHUNKER_VERSION}+{PDF_TEXT_VERSION}"}[media_type]
    assert version == expected

    tenant, doc = tenants[0], docs[0]
    current = PlainTextChunker() if media_type == "text/plain" else MarkdownChunker()
    with pytest.raises(IngestRefused, match="already_chunked"):
        await service.rechunk(doc, current, owner(tenant))
    other = MarkdownChunker() if media_type == "text/plain" else PlainTextChunker()
    assert await service.rechunk(doc, other, owner(tenant)) >= 1
    moved = await chunks_of(sql, tenant, doc)
    assert {c[0] for c in moved}.isdisjoint({c[0] for c in first}) and moved[0][2] != version
    await service.rechunk(doc, current, owner(tenant))
    assert await chunks_of(sql, tenant, doc) == first  # back: the same ids, the same texts


def test_chunker_versions_name_the_parsers_that_move_boundaries() -> None:
    """An upgrade of markdown-it-pyrs, pdfminer.six or pikepdf changes the version string of the chunk
    sets made with it (so their ids), and the plain paragraph chunker depends on none of them."""
    assert f"mdit{importlib.metadata.version('markdown-it-pyrs')}" in CHUNKER_VERSION
    assert f"pdfminer{importlib.metadata.version('pdfminer.six')}" in PdfExtractor.version
    assert f"pikepdf{importlib.metadata.version('pikepdf')}" in PdfExtractor.version
    assert "mdit" not in PARAGRAPH_CHUNKER_VERSION and PARAGRAPH_CHUNKER_VERSION != CHUNKER_VERSION


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 10_000), tenant=st.sampled_from(["a", "b"]), data=st.data())
def test_ids_move_with_every_part_of_the_version(n: int, tenant: str, data: st.DataObject) -> None:
    """A chunk id changes when any component of the stored chunker version does (the parser's
    version among them), and only then for the same text at the same place."""
    doc = uuid.UUID(int=n)
    text_hash = content_sha256(MARKDOWN.format(n=n))
    base = chunk_id(tenant, doc, 1, CHUNKER_VERSION, 0, text_hash)
    assert chunk_id(tenant, doc, 1, CHUNKER_VERSION, 0, text_hash) == base
    bumped = data.draw(st.sampled_from([CHUNKER_VERSION.replace("mdit", "mdit9"), PARAGRAPH_CHUNKER_VERSION,
                                        f"{CHUNKER_VERSION}+{PDF_TEXT_VERSION}"]))
    assert chunk_id(tenant, doc, 1, bumped, 0, text_hash) != base


# ---------------------------------------------------------------- the pure property


def _ids(text: str, tenant: str, document_id: uuid.UUID) -> list[tuple[str, str]]:
    drafts = chunk_text(normalize(text), "Doc", markdown=True)
    return [(chunk_id(tenant, document_id, 1, CHUNKER_VERSION, d.ordinal, content_sha256(d.text)), d.text)
            for d in drafts]


_SUBPROCESS = """
import json, sys, uuid
from knowledge.core.chunking import CHUNKER_VERSION, chunk_id, chunk_text, content_sha256
from knowledge.core.normalize import normalize
job = json.load(sys.stdin)
out = []
for text in job["texts"]:
    drafts = chunk_text(normalize(text), "Doc", markdown=True)
    out.append([[chunk_id(job["tenant"], uuid.UUID(job["doc"]), 1, CHUNKER_VERSION, d.ordinal,
                          content_sha256(d.text)), d.text] for d in drafts])
print(json.dumps(out))
"""


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(markdown_doc(), min_size=1, max_size=6))
def test_gate_chunk_determinism(docs: list[tuple[str, list[Section], bool]]) -> None:
    """Same bytes, same chunker_version: identical chunk ids and texts, here and in a fresh
    process with another hash seed."""
    tenant, document_id = "tenant-a", uuid.UUID("00000000-0000-4000-8000-000000000001")
    texts = [raw for raw, _, _ in docs]
    here = [_ids(t, tenant, document_id) for t in texts]
    assert here == [_ids(t, tenant, document_id) for t in texts]
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    proc = subprocess.run([sys.executable, "-c", _SUBPROCESS], input=json.dumps(
        {"texts": texts, "tenant": tenant, "doc": str(document_id)}), capture_output=True, text=True, env=env,
        check=True, timeout=120)
    there = [[tuple(pair) for pair in doc] for doc in json.loads(proc.stdout)]
    assert there == here
