"""The spec's data model (ADR-0033, "Ports and data model"): pydantic models, and the enums of
`knowledge.vocabulary`.

Pure values: nothing here does I/O. Validation rejects what the spec forbids, so a
model that exists is one the rest of the code may trust.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Self
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from knowledge.vocabulary import (  # re-exported: `from knowledge.models import Visibility` keeps working
    ArtifactOrigin,
    AttachmentState,
    Authority,
    Sensitivity,
    TrustLevel,
    Visibility,
)

__all__ = ["ArtifactOrigin", "ArtifactRef", "AttachmentState", "Authority", "KnowledgeChunk", "KnowledgeDocument",
           "KnowledgeQuery", "Principal", "RetrievedPassage", "Sensitivity", "TrustLevel", "Viewer",
           "Visibility"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


_IDENT = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$"


class Principal(BaseModel):
    """A principal of a tenant and the scopes it holds."""

    model_config = _FROZEN

    tenant_id: str = Field(pattern=_IDENT)
    principal_id: str = Field(pattern=_IDENT)
    scopes: frozenset[str] = frozenset()

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


class ArtifactRef(BaseModel):
    """A handle to bytes in the artifact store; the bytes themselves stay in the store."""

    model_config = _FROZEN

    tenant_id: str = Field(pattern=_IDENT)
    artifact_id: UUID
    origin: ArtifactOrigin
    trust: TrustLevel
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(ge=0)
    media_type: str = Field(min_length=1, max_length=255)
    file_name: str | None = Field(default=None, max_length=1024)
    created_at: datetime
    expires_at: datetime | None = None


class KnowledgeDocument(BaseModel):
    model_config = _FROZEN

    document_id: UUID
    tenant_id: str = Field(pattern=_IDENT)
    ingested_by_principal_id: str = Field(pattern=_IDENT)  # provenance, NOT the filter
    visibility: Visibility
    project_scope: str | None = None  # required when visibility=project
    title: str = Field(min_length=1, max_length=1024)
    source_ref: ArtifactRef  # KNOWLEDGE_SOURCE, expires_at None
    media_type: str
    doc_date: date | None = None
    authority: Authority
    version: int = Field(ge=1)
    chunker_version: str = Field(min_length=1)
    superseded_by: UUID | None = None
    ingested_at: datetime
    sensitivity: Sensitivity

    @model_validator(mode="after")
    def _project_scope_matches_visibility(self) -> Self:
        _check_project_scope(self.visibility, self.project_scope)
        return self


def _check_project_scope(visibility: Visibility, project_scope: str | None) -> None:
    if visibility is Visibility.PROJECT and not project_scope:
        raise ValueError("visibility=project requires a project_scope")


class KnowledgeChunk(BaseModel):
    model_config = _FROZEN

    chunk_id: str  # the citation; stable per version
    document_id: UUID
    version: int = Field(ge=1)
    ordinal: int = Field(ge=0)
    heading_path: list[str]
    text: str  # verbatim after normalization
    tokens: int = Field(ge=0)
    contains_instruction_like_text: bool
    content_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")  # binds the citation to the bytes


class Viewer(BaseModel):
    """Who looks at a passage a host shows outside a search — a citation clicked, a recall trace
    opened: the facts a search is scoped by, so a person is never shown a passage a search would not
    have given them (`KnowledgeService.get_chunk`, `KnowledgeService.trace_view`)."""

    model_config = _FROZEN

    tenant_id: str = Field(pattern=_IDENT)
    principal_id: str = Field(pattern=_IDENT)
    current_scope: str | None = None  # project visibility
    sensitivity_ceiling: Sensitivity = Sensitivity.INTERNAL  # the viewing surface's ceiling


class KnowledgeQuery(BaseModel):
    model_config = _FROZEN

    tenant_id: str = Field(pattern=_IDENT)  # isolation boundary, hard filter
    principal_id: str = Field(pattern=_IDENT)  # for visibility resolution only
    current_scope: str | None = None  # ranking, and project visibility
    text: str = Field(min_length=1, max_length=10_000)
    as_of: datetime | None = None
    budget_tokens: int = Field(default=3000, ge=0)
    max_passages: int = Field(default=3, ge=0)
    max_per_document: int = Field(default=2, ge=1)
    min_score: float = 0.0
    #: A host's own relevance floor (`RetrievedPassage.relevance`), over the policy's: a passage
    #: below it is not returned. 0.3 keeps what about 3 in 10 times holds the answer or better.
    min_relevance: float = Field(default=0.0, ge=0.0, le=1.0)
    sensitivity_ceiling: Sensitivity = Sensitivity.INTERNAL  # the surface's ceiling

    @field_validator("as_of")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("as_of must be timezone-aware")
        return value


class RetrievedPassage(BaseModel):
    model_config = _FROZEN

    chunk_id: str
    document_id: UUID
    title: str
    heading_path: list[str]
    text: str  # whole; never truncated
    doc_date: date | None
    authority: Authority
    score: float
    arms: list[str]
    instruction_like: bool
    tokens: int = Field(default=0, ge=0)
    #: The chance that the passage answers the query, calibrated on training questions
    #: (`knowledge.core.relevance`); None under a ranking policy without a relevance model.
    relevance: float | None = Field(default=None, ge=0.0, le=1.0)


class DeletedChunk(BaseModel):
    """What a citation of a deleted passage resolves to: its id, its document, when — no text."""

    chunk_id: str
    document_id: UUID
    deleted_at: datetime


class Extracted(str):
    """An extractor's text with what the source states about itself beside the text: the date it
    speaks from (a PDF's modification or creation date, a page's publication date) and its title.
    A plain ``str`` from an extractor states nothing; `knowledge.core.prepare` reads
    ``stated_date`` and ``stated_title`` where they are there."""

    stated_date: date | None
    #: The title the source gives itself (an HTML page's ``<title>``, a Word document's core
    #: properties): the document's title where the caller gave none.
    stated_title: str | None

    def __new__(cls, text: str, stated_date: date | None = None, stated_title: str | None = None) -> Extracted:
        self = super().__new__(cls, text)
        self.stated_date = stated_date
        self.stated_title = stated_title
        return self
