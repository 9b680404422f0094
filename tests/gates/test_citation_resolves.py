"""Hard gate "Citation resolves" (ADR-0033, Hard gates):

    Citation resolves — every chunk id in a rendered block resolves to a live chunk whose text contains what was
    quoted. A property gate. M9.

As a hypothesis state machine (`CitationMachine`), through the real ingest, search, rendering and
resolution paths: every chunk id of every block ever rendered resolves, at every later step — new
versions, ``as_of`` searches, deletions — to the text it was rendered with, or to "deleted" once its
document is; never to nothing, never to other text.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar

import pytest
from anyio.from_thread import BlockingPortal
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from knowledge.core.render import parse_knowledge_block, render_knowledge_block
from knowledge.models import DeletedChunk, KnowledgeChunk, KnowledgeQuery, Viewer
from knowledge.service import KnowledgeService
from tests.gates.strategies import CONTENT, running_service
from tests.ingest.test_versions import ingest, owner


@dataclass(frozen=True)
class Cited:
    """A passage as a rendered block showed it: its document, its text, and who searched."""

    document_id: uuid.UUID
    text: str
    principal: str


RUNBOOK_WORDS = CONTENT[:6]
Resolved = KnowledgeChunk | DeletedChunk | None


def runbook(words: list[str], marker: str) -> str:
    """A small document of the given words; ``marker`` makes each version's text its own."""
    first, *rest = words
    return (f"# {first.title()} runbook\n\n## Procedure\n\nThe {first} procedure: {' '.join(words)}, then the "
            f"{' and '.join(rest or [first])}. Marker {marker}.\n\n## Notes\n\nAfter the {first}, check "
            f"the {rest[-1] if rest else first} again ({marker}).\n")


class CitationMachine(RuleBasedStateMachine):
    """Ingest, version, delete and search (live and ``as_of`` an instant between any two steps) at
    random in one tenant; every chunk id any rendered block ever carried must resolve, after every
    step, to the text it was rendered with — or to "deleted" once its document is."""

    portal: BlockingPortal
    svc: KnowledgeService
    seen: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        self.tenant = f"tr-{uuid.uuid4().hex[:10]}"
        self.versions: dict[uuid.UUID, int] = {}  # live documents, in the order ingested, and their latest version
        self.deleted: set[uuid.UUID] = set()
        self.instants: list[datetime] = []  # after each change: an instant between two versions
        self.cited: dict[str, Cited] = {}
        self.written = 0  # texts written: every version's text is distinct

    # --- the steps, as the rules and the starting history take them

    def add(self, words: list[str], replaces: uuid.UUID | None = None) -> uuid.UUID:
        """Ingest a document, or a new version of ``replaces`` (`tests.ingest.test_versions.ingest`, as alice)."""
        self.written += 1
        text = runbook(words, f"m{self.written}")
        doc = self.portal.call(functools.partial(ingest, self.svc, self.tenant, text, replaces=replaces))
        assert replaces is None or doc == replaces
        self.versions[doc] = self.versions.get(doc, 0) + 1
        self.instants.append(datetime.now(UTC))
        return doc

    def remove(self, doc: uuid.UUID) -> None:
        assert self.portal.call(functools.partial(self.svc.delete, doc, owner(self.tenant))) > 0
        del self.versions[doc]
        self.deleted.add(doc)
        self.instants.append(datetime.now(UTC))

    def find(self, principal: str, words: list[str], max_passages: int, as_of: datetime | None) -> None:
        """Search, render the block, and remember every citation it carries with the text it showed
        and who asked."""
        query = KnowledgeQuery(tenant_id=self.tenant, principal_id=principal, text=" ".join(words), as_of=as_of,
                               max_passages=max_passages, budget_tokens=100_000)
        passages = self.portal.call(functools.partial(self.svc.search, query))
        _, parsed = parse_knowledge_block(render_knowledge_block(passages, as_of=as_of or datetime.now(UTC)))
        for shown, passage in zip(parsed, passages, strict=True):
            assert passage.document_id not in self.deleted
            earlier = self.cited.setdefault(shown.chunk, Cited(passage.document_id, shown.text, principal))
            assert (earlier.document_id, earlier.text) == (passage.document_id, shown.text)  # ids are stable
            self.seen["rendered as_of" if as_of is not None else "rendered live"] += 1

    def pick(self, data: st.DataObject) -> uuid.UUID:
        """A live document, in the order ingested — or, as often, one a block has cited, so versions
        and deletions meet citations. Drawn as numbers whose bounds do not depend on what searches
        returned (hypothesis cannot replay those), then mapped onto the documents."""
        prefer_cited, k = data.draw(st.booleans()), data.draw(st.integers(0, 63))
        live = list(self.versions)
        cited = [d for d in live if d in {c.document_id for c in self.cited.values()}]
        pool = cited if prefer_cited and cited else live
        return pool[k % len(pool)]

    # --- the machine

    @initialize(words=st.lists(st.lists(st.sampled_from(RUNBOOK_WORDS), min_size=1, max_size=4), min_size=2,
                               max_size=3), principal=st.sampled_from(["alice", "bob"]))
    def history(self, words: list[list[str]], principal: str) -> None:
        """Every run starts from a history, so that none goes without the cases the gate is about:
        two or three documents ingested and searched, the first given a new version and searched as
        of the instant before it (its old version cited), and the last deleted."""
        docs = [self.add(each) for each in words]
        asked = sorted({w for each in words for w in each})
        self.find(principal, asked, 6, None)
        self.add(words[-1], replaces=docs[0])
        self.find(principal, asked, 6, self.instants[-2])
        self.remove(docs[-1])

    @rule(words=st.lists(st.sampled_from(RUNBOOK_WORDS), min_size=1, max_size=4))
    def ingest(self, words: list[str]) -> None:
        self.add(words)

    @precondition(lambda self: self.versions)
    @rule(data=st.data(), words=st.lists(st.sampled_from(RUNBOOK_WORDS), min_size=1, max_size=4))
    def new_version(self, data: st.DataObject, words: list[str]) -> None:
        self.add(words, replaces=self.pick(data))

    @precondition(lambda self: self.versions)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        self.remove(self.pick(data))

    @rule(data=st.data(), principal=st.sampled_from(["alice", "bob"]),
          words=st.lists(st.sampled_from(RUNBOOK_WORDS), min_size=1, max_size=3), max_passages=st.integers(1, 6))
    def search(self, data: st.DataObject, principal: str, words: list[str], max_passages: int) -> None:
        """Live, or as of an instant after any earlier step."""
        self.find(principal, words, max_passages, data.draw(st.none() | st.sampled_from(self.instants)))

    @invariant()
    def every_citation_resolves(self) -> None:
        """Each citation ever rendered, for the principal who searched and for the operator — and
        never for another tenant. Every violation is collected before the one assertion, so that a
        failure replays at the same place whichever citation a search happened to list first."""
        elsewhere = Viewer(tenant_id=f"{self.tenant}-other", principal_id="alice")

        async def resolve_all() -> list[tuple[str, dict[str, Resolved]]]:
            out = []
            for chunk_id, cited in self.cited.items():
                viewer = Viewer(tenant_id=self.tenant, principal_id=cited.principal)
                out.append((chunk_id, {
                    "viewer": await self.svc.get_chunk(chunk_id, viewer=viewer),
                    "operator": await self.svc.operator_get_chunk(chunk_id, tenant_id=self.tenant),
                    "other tenant's viewer": await self.svc.get_chunk(chunk_id, viewer=elsewhere),
                    "other tenant's operator": await self.svc.operator_get_chunk(chunk_id,
                                                                                 tenant_id=elsewhere.tenant_id),
                }))
            return out

        wrong = []
        for chunk_id, resolved in self.portal.call(resolve_all):
            cited = self.cited[chunk_id]
            gone = cited.document_id in self.deleted
            for who, chunk in resolved.items():
                if who.startswith("other tenant's"):
                    ok = chunk is None
                elif gone:
                    ok = isinstance(chunk, DeletedChunk) and (chunk.chunk_id, chunk.document_id) == (
                        chunk_id, cited.document_id)
                    self.seen["resolved deleted"] += ok
                else:
                    ok = (isinstance(chunk, KnowledgeChunk)
                          and (chunk.chunk_id, chunk.document_id, chunk.text) == (chunk_id, cited.document_id,
                                                                                  cited.text)
                          and hashlib.sha256(chunk.text.encode()).hexdigest() == chunk.content_sha256)
                    if ok and isinstance(chunk, KnowledgeChunk):
                        old = chunk.version < self.versions[cited.document_id]
                        self.seen["resolved superseded" if old else "resolved current"] += 1
                if not ok:
                    wrong.append(f"{chunk_id} ({'deleted' if gone else 'rendered as ' + repr(cited.text)}) "
                                 f"for the {who}: {chunk!r}")
        assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gate_citation_resolves(database_dsn: str, backend: str) -> None:
    """Every citation a block carried resolves, for the principal who searched and for the operator,
    to the text it was rendered with across later versions and ``as_of`` reads, and to a
    `DeletedChunk` after deletion; never to None, never to other text."""
    CitationMachine.seen.clear()
    with running_service(database_dsn, backend) as (portal, svc):
        CitationMachine.portal = portal
        CitationMachine.svc = svc
        run_state_machine_as_test(CitationMachine, settings=settings(
            max_examples=15, stateful_step_count=25, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    # Not vacuous: citations rendered live and as_of, resolved in the current version, an old one, and deleted.
    assert all(CitationMachine.seen[k] > 0 for k in (
        "rendered live", "rendered as_of", "resolved current", "resolved superseded", "resolved deleted")), \
        CitationMachine.seen
