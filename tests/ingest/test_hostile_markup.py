"""The hostile HTML and Word set through the whole service (issue 34, item 3): every file is refused
with its reason or ingested — parsed in the pool's children under their limits and deadline — the
host is unharmed (an ordinary ingest and search work after), and no child is left once it closes.

The sets are generated (`tests/helpers/hostile_html.py`, `tests/helpers/hostile_docx.py`); their
allowed outcomes are the extraction's. Through the service the bytes decide the route first
(`knowledge.parsers.sniff`): a "Word file" that is a spreadsheet, a plain ZIP or a legacy Office
file, or a "web page" that is gzip, is ``unsupported_media_type`` (kept for a later extractor), and
a source above the store's 32 MiB bound is refused as it is put."""

from __future__ import annotations

import pytest

from knowledge.config import Settings
from knowledge.errors import ArtifactTooLarge, IngestRefused
from knowledge.models import ArtifactOrigin, KnowledgeQuery, Principal, TrustLevel
from knowledge.parsers.base import base_media_type
from knowledge.parsers.sniff import DOCX, HTML, sniff_media_type
from knowledge.service import KnowledgeService
from tests.conftest import child_processes
from tests.helpers.hostile_docx import hostile_docx
from tests.helpers.hostile_html import hostile_html

CASES = [(name, data, HTML, allowed) for name, data, allowed in hostile_html()] + \
        [(name, data, DOCX, allowed) for name, data, allowed in hostile_docx()]


def _allowed(data: bytes, declared: str, allowed: set[str]) -> set[str]:
    routed = base_media_type(sniff_media_type(data, declared))
    return allowed | ({"unsupported_media_type"} if routed not in (HTML, DOCX) else set()) | {"too_large"}


def _parser_children() -> list[int]:
    return [p.pid for p in child_processes() if "knowledge.parsers.child" in " ".join(p.cmdline())]


@pytest.mark.slow
@pytest.mark.anyio
async def test_every_hostile_file_is_refused_with_its_reason_or_ingested_and_nothing_is_left(
        settings: Settings, tenant: str) -> None:
    alice = Principal(tenant_id=tenant, principal_id="alice", scopes=frozenset({"knowledge.write"}))
    outcomes: dict[str, str] = {}
    async with KnowledgeService.open(settings) as svc:
        for name, data, declared, allowed in CASES:
            try:
                ref = await svc.put_artifact(tenant, data, media_type=declared, origin=ArtifactOrigin.UPLOAD,
                                             trust=TrustLevel.USER, file_name=name)
                await svc.ingest(ref, name, "tenant", alice, origin_trust=TrustLevel.USER)
                outcomes[name] = "ok"
            except ArtifactTooLarge:
                outcomes[name] = "too_large"
            except IngestRefused as refused:
                outcomes[name] = refused.reason
            assert outcomes[name] in _allowed(data, declared, allowed), (name, outcomes[name])
            assert len(_parser_children()) <= 2  # never more than the loop's two slots
        # The host is unharmed: an ordinary page still ingests and is found.
        page = b"<html><head><title>Ok</title></head><body><h1>Ok</h1><p>The drains are green again.</p></body></html>"
        ref = await svc.put_artifact(tenant, page, media_type=HTML, origin=ArtifactOrigin.UPLOAD,
                                     trust=TrustLevel.USER, file_name="ok.html")
        doc = await svc.ingest(ref, "", "tenant", alice, origin_trust=TrustLevel.USER)
        hits = await svc.search(KnowledgeQuery(tenant_id=tenant, principal_id="alice", text="drains green"))
        assert [h.document_id for h in hits] == [doc.document_id]
    assert _parser_children() == []  # closing the service killed and reaped every child, spares too
    assert "ok" in outcomes.values() and len(set(outcomes.values())) > 5  # both kinds of end were reached
