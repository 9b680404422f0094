"""Re-extraction: ingestion re-run over sources already stored, never a re-upload (build step 7).

`reextract` does three things, for one tenant or all, optionally for one media type:

1. **Sources awaiting an extractor** (`knowledge.store.awaiting`): each kept source whose type now
   has one is ingested with the request it was refused under — a new document. Its mark is then
   forgotten, whatever the outcome (a document, or a refusal of its own: a secret, no text); a source
   still unsupported stays marked.
2. **Attachments awaiting an extractor** become pending: the maintenance workers ingest them as any
   attachment (the same document id, the same rules).
3. **Documents whose extractor changed**: a live version whose chunk set names another version of
   its extractor (the extraction library or its rules: `Extractor.version`, part of the chunker
   version) is ingested again from its own stored source as a new version (``replaces``), by the
   principal who ingested it. Its previous version stays readable through ``as_of``.

Expired and deleted sources are never read: a deleted document's source expired at its deletion
and has no live version; an expired mark or source is not returned by the store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from knowledge.core.prepare import IngestRequest
from knowledge.errors import ArtifactNotFound, IngestRefused
from knowledge.ingest.bulk import Outcome, ingest_many
from knowledge.ingest.ingestor import Ingestor, request_from
from knowledge.models import Authority, KnowledgeDocument, Principal, Sensitivity, TrustLevel, Visibility
from knowledge.parsers.base import base_media_type
from knowledge.store.awaiting import (
    awaiting_counts,
    awaiting_sources,
    extracted_documents,
    forget_awaiting,
    release_awaiting_attachments,
)
from knowledge.vocabulary import WRITE_SCOPE


class Reextracted(BaseModel):
    """What a re-extraction did (`reextract`)."""

    model_config = ConfigDict(frozen=True)

    #: New documents from sources that awaited an extractor.
    ingested: int = 0
    #: New versions of documents whose extractor's version changed.
    versioned: int = 0
    #: Attachments awaiting an extractor, now pending for the workers.
    attachments: int = 0
    #: Live documents already extracted by the current version of their extractor.
    unchanged: int = 0
    #: Sources still of a type no extractor reads (left marked).
    still_unsupported: int = 0
    #: Refusals and failures by reason (a source that awaited: unmarked; a document: its version stays).
    refused: dict[str, int] = Field(default_factory=dict)
    #: What still awaits an extractor afterwards, by media type (sources kept; not attachments).
    awaiting: dict[str, int] = Field(default_factory=dict)


def extractor_part(chunker_version: str) -> str:
    """The extractor's version a chunk set was made under (after the ``+``), or "" for decoded text."""
    return chunker_version.split("+", 1)[1] if "+" in chunker_version else ""


async def reextract(ingestor: Ingestor, *, tenant_id: str | None = None, media_type: str | None = None
                    ) -> Reextracted:
    """See the module docstring. Cancellation: documents committed before stay; marks of sources
    not yet ingested stay."""
    supported = ingestor.registry.media_types()
    if media_type is not None:
        supported &= {base_media_type(media_type)}
    refused: Counter[str] = Counter()
    if not supported:
        return Reextracted(awaiting=await awaiting_counts(ingestor.db, tenant_id=tenant_id))
    db, artifacts = ingestor.db, ingestor.artifacts

    waiting: list[IngestRequest] = []
    for kept in await awaiting_sources(db, tenant_id=tenant_id, media_types=supported):
        try:
            ref = await artifacts.get_ref(kept.tenant_id, kept.artifact_id)
        except ArtifactNotFound:
            continue  # expired or swept meanwhile: never resurrected
        waiting.append(request_from(kept.request, ref))
    outcomes = await ingest_many(ingestor, waiting)
    still = 0
    for request, outcome in zip(waiting, outcomes, strict=True):
        if isinstance(outcome, IngestRefused) and outcome.reason == "unsupported_media_type":
            still += 1  # the bytes are of a type nothing reads yet: kept as they were
            continue
        if not isinstance(outcome, KnowledgeDocument | IngestRefused):
            continue  # a failure (the database, a cancellation's cousin): the mark stays for the next run
        await forget_awaiting(db, tenant_id=request.principal.tenant_id, artifact_id=request.source.artifact_id)
        _count(outcome, refused)
    ingested = sum(isinstance(o, KnowledgeDocument) for o in outcomes)

    released = await release_awaiting_attachments(db, tenant_id=tenant_id, media_types=supported)

    stale: list[IngestRequest] = []
    unchanged = 0
    for doc in await extracted_documents(db, tenant_id=tenant_id, media_types=supported):
        extractor = ingestor.registry.for_media_type(doc.media_type)
        if extractor_part(doc.chunker_version) == extractor.version:
            unchanged += 1
            continue
        try:
            source = await artifacts.get_ref(doc.tenant_id, doc.source_artifact_id)
        except ArtifactNotFound:
            refused["source_not_found"] += 1
            continue
        stale.append(IngestRequest(
            source=source, title=doc.title, visibility=Visibility(doc.visibility),
            principal=Principal(tenant_id=doc.tenant_id, principal_id=doc.principal_id,
                                scopes=frozenset({WRITE_SCOPE})),
            origin_trust=TrustLevel.USER, project_scope=doc.project_scope, doc_date=doc.doc_date,
            authority=Authority(doc.authority), sensitivity=Sensitivity(doc.sensitivity), replaces=doc.document_id))
    versions = await ingest_many(ingestor, stale)
    for outcome in versions:
        _count(outcome, refused)
    if released or ingested or versions:
        ingestor.wake_drain()
    return Reextracted(ingested=ingested, versioned=sum(isinstance(o, KnowledgeDocument) for o in versions),
                       attachments=len(released), unchanged=unchanged, still_unsupported=still,
                       refused=dict(refused), awaiting=await awaiting_counts(db, tenant_id=tenant_id))


def _count(outcome: Outcome, refused: Counter[str]) -> None:
    if isinstance(outcome, IngestRefused):
        refused[outcome.reason] += 1
    elif not isinstance(outcome, KnowledgeDocument):
        refused[getattr(outcome, "reason", None) or type(outcome).__name__] += 1


__all__: Sequence[str] = ("Reextracted", "extractor_part", "reextract")
