"""Citation accuracy and citation rate through the service (`svc.record_answer`,
`svc.citation_stats`), on a scripted set of answers to one turn: correct citations, a citation of
the wrong passage, a wrong number, a hallucinated id, a passage used without a citation, and an
answer that uses nothing."""

from __future__ import annotations

import pytest

from knowledge.models import Viewer
from knowledge.service import KnowledgeService
from tests.retrieval.test_turn import ingest_text, request
from tests.retrieval.test_turn import settings as settings  # the fixture: no relevance floor

RESTORE = ("# Restoring etcd\n\nTo restore a cluster, run etcdutl snapshot restore on every member. The restore "
           "takes about 30 seconds per gigabyte. Clients must not write to the cluster while it is restored.\n")
PASSWORD = ("# Argo CD admin\n\nThe admin password is changed with argocd account update-password. The old "
            "password stops working at once.\n")
COMPACTION = ("# Compaction\n\nCompaction discards revisions older than the retention window. Run defrag "
              "afterwards to return the freed space to the file system.\n")


@pytest.mark.anyio
async def test_scripted_answers_give_the_citation_accuracy_and_rate_they_should(
        service: KnowledgeService, tenant: str) -> None:
    for title, text in (("restore", RESTORE), ("password", PASSWORD), ("compaction", COMPACTION)):
        await ingest_text(service, tenant, text, title=title)
    turn = await service.turn(request(tenant, "restore password compaction defrag", 10_000))
    ids = {p.heading_path[-1]: p.chunk_id for p in turn.passages}
    assert len(ids) == 3, [p.heading_path for p in turn.passages]
    restore, password, compaction = ids["Restoring etcd"], ids["Argo CD admin"], ids["Compaction"]
    script = [
        # (answer, its citations' verdicts, drew on, cites all it drew on)
        (f"Run etcdutl snapshot restore on every member [{restore}]. The old password stops working at once "
         f"({password}).", [True, True], {restore, password}, True),
        (f"The restore takes about 30 seconds per gigabyte [{password}].", [False], {restore}, False),
        (f"The restore takes about 60 seconds per gigabyte [{restore}].", [False], set(), True),
        ("Compaction discards revisions older than the retention window [kc_aaaaaaaaaaaaaaaaaaaaa].", [False],
         {compaction}, False),
        ("Run defrag afterwards to return the freed space to the file system.", [], {compaction}, False),
        ("I found nothing about TLS certificates.", [], set(), True),
    ]
    for answer, verdicts, drawn, cites_drawn in script:
        recorded = await service.record_answer(turn.trace.trace_id, answer, tenant_id=tenant)
        assert [c.supported for c in recorded.citations] == verdicts, answer
        assert recorded.drawn_on == drawn, answer
        assert recorded.cites_what_it_drew_on == cites_drawn, answer

    stats = await service.citation_stats(tenant)
    assert (stats.citations, stats.supported, stats.unsupported, stats.hallucinated) == (5, 2, 3, 1)
    assert (stats.answers_drawing, stats.answers_citing_drawn) == (4, 1)
    assert stats.accuracy == pytest.approx(0.4) and stats.rate == pytest.approx(0.25)

    stored = await service.operator_trace(turn.trace.trace_id, tenant_id=tenant)
    assert stored is not None
    assert [[c.supported for c in a.citations] for a in stored.answers] == [v for _, v, _, _ in script]
    assert [set(a.drawn_on) for a in stored.answers] == [d for _, _, d, _ in script]
    view = await service.trace_view(turn.trace.trace_id, viewer=Viewer(tenant_id=tenant, principal_id="alice"))
    assert view is not None and "NOT supported by it" in view.render() and "shown, supported" in view.render()
