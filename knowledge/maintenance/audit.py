"""The invariant audit: what must hold after any run, however it was loaded or faulted.

Shared by `scripts/stress_service.py` and the tests. Four parts:

1. **Leaks** (`AccessModel`): every search result a run received was admissible for its principal
   at that moment, checked against an in-memory model of who may see what that the driver keeps as
   it acts — tenant, visibility (principal: the ingesting principal only; project: that project
   only; tenant: everyone in the tenant), the surface's sensitivity ceiling, and time: a passage of
   a document whose deletion was acknowledged before the search began, or of a version whose
   successor was acknowledged before it began, is a leak. Operations whose outcome the caller
   never learned (cancelled, or failed mid-way) count as possibly done.
2. **Storage** (`audit_storage`, its queries in `knowledge.store.audit`): every live document
   version has its chunk set with all its chunks, an index row per chunk, its postings, its live
   ``KNOWLEDGE_SOURCE`` artifact and its ingest event; no posting, source artifact or chunk belongs
   to nothing; tenant term statistics equal a fresh recount; no document the model knows as refused
   or deleted exists; every acknowledged ingest that was not deleted is there.
3. **Attachments** (`audit_attachments`): no attachment left pending or ingesting once the queue
   drained, none ingested twice, none lost.
4. **Leftovers** (`leftover_processes`, `leftover_connections`, `leftover_tasks` against a
   `running_tasks` snapshot): after the service closed, no child process, no database session of
   its application name, no task.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import psutil
import sniffio

from knowledge.models import AttachmentState, KnowledgeQuery, RetrievedPassage, Sensitivity, Visibility
from knowledge.store import audit as store
from knowledge.store.db import Connection, Database

# --- 1. Leaks ------------------------------------------------------------------------------------------------


@dataclass
class DocumentFacts:
    """What the driver knows of one document id: fixed at its first ingest."""

    tenant_id: str
    owner: str
    visibility: Visibility
    project_scope: str | None
    sensitivity: Sensitivity
    #: version -> its chunk ids (empty when the driver could not read them)
    chunks: dict[int, set[str]] = field(default_factory=dict)
    #: version -> when its ingest was acknowledged (monotonic seconds); absent: unknown or never
    acked_at: dict[int, float] = field(default_factory=dict)
    deleted_at: float | None = None  # the delete's acknowledgement
    refused: bool = False  # its first ingest was refused or cancelled: it must not exist
    uncertain: bool = False  # some operation on it has an unknown outcome


@dataclass
class SearchRecord:
    query: KnowledgeQuery
    started: float
    ended: float
    passages: list[tuple[str, uuid.UUID]]  # (chunk id, document id)


@dataclass
class Leak:
    chunk_id: str
    document_id: uuid.UUID
    principal_id: str
    why: str


@dataclass
class AccessModel:
    """The driver's record of documents and of the searches it ran (see the module docstring)."""

    documents: dict[uuid.UUID, DocumentFacts] = field(default_factory=dict)
    searches: list[SearchRecord] = field(default_factory=list)
    checked: int = 0  # search results checked so far
    recorded: int = 0  # search results recorded so far (each is checked by the next `leaks`)

    def document(self, document_id: uuid.UUID, facts: DocumentFacts) -> DocumentFacts:
        return self.documents.setdefault(document_id, facts)

    def record_search(self, query: KnowledgeQuery, started: float, ended: float,
                      passages: list[RetrievedPassage]) -> None:
        self.searches.append(SearchRecord(query, started, ended, [(p.chunk_id, p.document_id) for p in passages]))
        self.recorded += len(passages)

    def leaks(self) -> list[Leak]:
        """Check every recorded search result; the records checked are dropped (so a periodic audit
        during a run stays cheap), and the count kept in ``checked``."""
        found: list[Leak] = []
        for search in self.searches:
            for chunk_id, document_id in search.passages:
                self.checked += 1
                why = self._inadmissible(search, chunk_id, document_id)
                if why:
                    found.append(Leak(chunk_id, document_id, search.query.principal_id, why))
        self.searches.clear()
        return found

    def _inadmissible(self, search: SearchRecord, chunk_id: str, document_id: uuid.UUID) -> str | None:
        q = search.query
        doc = self.documents.get(document_id)
        if doc is None:
            return "a document the run never ingested"
        if doc.tenant_id != q.tenant_id:
            return f"cross-tenant: document of {doc.tenant_id} returned to {q.tenant_id}"
        if doc.visibility is Visibility.PRINCIPAL and doc.owner != q.principal_id:
            return f"principal visibility: {doc.owner}'s document returned to {q.principal_id}"
        if doc.visibility is Visibility.PROJECT and doc.project_scope != q.current_scope:
            return f"project visibility: project {doc.project_scope} returned in scope {q.current_scope}"
        if doc.sensitivity > q.sensitivity_ceiling:
            return f"sensitivity {doc.sensitivity} above the ceiling {q.sensitivity_ceiling}"
        if doc.refused and not doc.uncertain:
            return "a refused document"
        if doc.deleted_at is not None and doc.deleted_at < search.started:
            return "deleted before the search began"
        version = next((v for v, ids in doc.chunks.items() if chunk_id in ids), None)
        if version is not None:
            successor = doc.acked_at.get(version + 1)
            if successor is not None and successor < search.started:
                return f"version {version} superseded before the search began"
        return None


# --- 2. Storage ----------------------------------------------------------------------------------------------


@dataclass
class StorageAudit:
    live_documents: int = 0
    partial: list[str] = field(default_factory=list)  # a live version missing part of itself
    orphans: list[str] = field(default_factory=list)  # rows that belong to nothing
    statistics: list[str] = field(default_factory=list)  # term statistics that differ from a recount
    model: list[str] = field(default_factory=list)  # what the driver knows disagrees with the store

    @property
    def ok(self) -> bool:
        return not (self.partial or self.orphans or self.statistics or self.model)


async def audit_storage(conn: Connection | Database, model: AccessModel | None = None,
                        tenants: list[str] | None = None, semantic_version: str | None = None,
                        drained: bool = False) -> StorageAudit:
    """Check the store (see the module docstring), for ``tenants`` or all; read-only. With a model,
    also what the model knows: refused and deleted documents absent, acknowledged ones present.
    With ``semantic_version`` (the semantic arm's), every chunk of a live chunk set has its vectors
    or its set is queued for them; with ``drained`` (the queue has been drained), it has them."""
    audit = StorageAudit()
    if semantic_version is not None:
        for u in await store.unembedded_sets(conn, tenants=tenants, version=semantic_version, drained=drained):
            audit.partial.append(f"{u.tenant_id}/{u.document_id} v{u.version}: {u.chunks} chunks "
                                 f"without {semantic_version} vectors (in the lexical arm only"
                                 f"{', after the queue drained' if drained else ', and not queued'})")
    for v in await store.live_versions(conn, tenants=tenants):
        audit.live_documents += 1
        name = f"{v.tenant_id}/{v.document_id} v{v.version}"
        missing = [what for what, bad in (
            ("its chunk set", v.chunk_count is None),
            (f"chunks ({v.chunks} of {v.chunk_count})", v.chunk_count is not None
             and v.chunks != v.chunk_count),
            (f"index rows ({v.index_rows} of {v.chunks})", v.index_rows != v.chunks),
            ("its live source artifact", not v.source_ok),
            ("its ingest event", not v.event_ok)) if bad]
        if missing:
            audit.partial.append(f"{name} lacks {', '.join(missing)}")
    for cs in await store.orphan_chunk_sets(conn, tenants=tenants):
        if cs.chunks != cs.chunk_count:
            audit.partial.append(f"chunk set {cs.tenant_id}/{cs.document_id} v{cs.version} "
                                 f"{cs.chunker_version}: {cs.chunks} of {cs.chunk_count} chunks")
    for src in await store.orphan_sources(conn, tenants=tenants):
        audit.orphans.append(f"source artifact {src.tenant_id}/{src.artifact_id} of no document")
    for p in await store.postings_recount(conn, tenants=tenants):
        t = p.tenant_id
        if p.orphan_postings:
            audit.orphans.append(f"{p.orphan_postings} postings of {t} belong to no index row")
        if p.postings != p.lexemes:
            audit.statistics.append(f"{t}: {p.postings} postings for {p.lexemes} indexed lexemes")
        if (p.stat_chunks, p.stat_dl) != (p.chunks, p.dl):
            audit.statistics.append(f"{t}: statistics say {p.stat_chunks} chunks / {p.stat_dl} length, "
                                    f"a recount {p.chunks} / {p.dl}")
        if p.term_mismatches:
            audit.statistics.append(f"{t}: {p.term_mismatches} terms' document frequencies differ from a recount")
    if model is not None:
        await _audit_model(conn, model, audit)
    return audit


async def _audit_model(conn: Connection | Database, model: AccessModel, audit: StorageAudit) -> None:
    ids = list(model.documents)
    rows = await store.document_versions(conn, document_ids=ids)
    stored: dict[uuid.UUID, set[int]] = {}
    for sv in rows:
        stored.setdefault(sv.document_id, set()).add(sv.version)
    for document_id, doc in model.documents.items():
        versions = stored.get(document_id, set())
        if doc.uncertain:
            continue
        if doc.refused and versions:
            audit.model.append(f"refused or cancelled document {document_id} exists")
        elif doc.deleted_at is not None and versions:
            audit.model.append(f"deleted document {document_id} still has versions {sorted(versions)}")
        elif doc.deleted_at is None:
            lost = sorted(set(doc.acked_at) - versions)
            if lost:
                audit.model.append(f"acknowledged versions {lost} of {document_id} are gone")


# --- 3. Attachments ------------------------------------------------------------------------------------------


@dataclass
class AttachmentAudit:
    marked: int = 0
    unsettled: list[str] = field(default_factory=list)  # still pending or ingesting
    twice: list[str] = field(default_factory=list)  # ingested more than once
    lost: list[str] = field(default_factory=list)  # marked, yet neither settled nor in the store

    @property
    def ok(self) -> bool:
        return not (self.unsettled or self.twice or self.lost)


async def audit_attachments(conn: Connection | Database, marked: dict[uuid.UUID, str]) -> AttachmentAudit:
    """``marked``: artifact id -> tenant of every attachment the run saw marked pending."""
    audit = AttachmentAudit(marked=len(marked))
    rows = await store.attachments_seen(conn, artifact_ids=list(marked))
    seen = {a.artifact_id: a for a in rows}
    for artifact_id, tenant in marked.items():
        a = seen.get(artifact_id)
        if a is None or a.tenant_id != tenant:
            audit.lost.append(f"{tenant}/{artifact_id}")
            continue
        if a.state in (AttachmentState.PENDING, AttachmentState.INGESTING):
            audit.unsettled.append(f"{tenant}/{artifact_id} {a.state}")
        if sum(h.get("outcome") == "ingested" for h in a.history) > 1:
            audit.twice.append(f"{tenant}/{artifact_id}")
    return audit


# --- 4. Leftovers --------------------------------------------------------------------------------------------


def leftover_processes() -> list[str]:
    """Child processes of this process still alive (the embedded server is not a child)."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{child.pid} {' '.join(child.cmdline())[:80]}")
        except psutil.NoSuchProcess:
            continue
    return out


async def leftover_connections(conn: Connection, application_name: str) -> int:
    """Database sessions of ``application_name`` other than ``conn``'s own."""
    return await store.sessions_of(conn, application_name=application_name)


def running_tasks() -> set[Any]:
    """Every task of this run other than the caller and its ancestors (asyncio: all other tasks;
    trio: the tasks under the run's main task outside the caller's chain; trio's system tasks aside).
    Take it before and after: what is new afterwards was left behind."""
    if sniffio.current_async_library() == "asyncio":
        import asyncio

        return set(asyncio.all_tasks()) - {asyncio.current_task()}
    import trio

    chain: list[Any] = []
    task: Any = trio.lowlevel.current_task()
    while task is not None:
        chain.append(task)
        nursery = task.parent_nursery
        task = nursery.parent_task if nursery is not None else None
    # chain[-1] is trio's <init> task with its system tasks; the run's main task is just below it.
    main = chain[-2] if len(chain) > 1 else chain[-1]
    ancestry = set(chain)
    found: set[Any] = set()
    stack: list[Any] = [main]
    while stack:
        task = stack.pop()
        if task not in ancestry:
            found.add(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


def leftover_tasks(before: set[Any]) -> int:
    """Tasks running now that were not running at ``before`` (a `running_tasks` snapshot)."""
    return len(running_tasks() - before)
