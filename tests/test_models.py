"""The spec's models and enums: orderings and what validation refuses."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from knowledge.models import (
    ArtifactOrigin,
    ArtifactRef,
    Authority,
    KnowledgeDocument,
    KnowledgeQuery,
    Principal,
    Sensitivity,
    TrustLevel,
    Visibility,
)


def _ref() -> ArtifactRef:
    return ArtifactRef(
        tenant_id="t1", artifact_id=uuid.uuid4(), origin=ArtifactOrigin.KNOWLEDGE_SOURCE,
        trust=TrustLevel.USER, sha256="0" * 64, size_bytes=1, media_type="text/plain",
        created_at=datetime.now(UTC),
    )


def test_trust_levels_are_ordered_by_trust_not_alphabet() -> None:
    assert TrustLevel.SYSTEM > TrustLevel.USER > TrustLevel.MEMORY > TrustLevel.KNOWLEDGE
    assert TrustLevel.KNOWLEDGE > TrustLevel.EXTERNAL_UNTRUSTED
    assert TrustLevel.EXTERNAL_UNTRUSTED < TrustLevel.USER  # alphabetically it would be "E" < "U" too…
    assert TrustLevel.MEMORY < TrustLevel.USER  # …but here alphabet and trust disagree
    assert not TrustLevel.KNOWLEDGE >= TrustLevel.USER
    assert max(TrustLevel) is TrustLevel.SYSTEM


def test_authority_ladder() -> None:
    assert Authority.PRINCIPAL_AUTHORED > Authority.PRINCIPAL_SUPPLIED > Authority.FETCHED
    assert sorted([Authority.FETCHED, Authority.PRINCIPAL_AUTHORED, Authority.PRINCIPAL_SUPPLIED]) == [
        Authority.FETCHED, Authority.PRINCIPAL_SUPPLIED, Authority.PRINCIPAL_AUTHORED]


def test_sensitivity_ceiling_admits_itself_and_below() -> None:
    assert Sensitivity.INTERNAL.admitted() == ["public", "internal"]
    assert Sensitivity.PUBLIC.admitted() == ["public"]
    assert Sensitivity.RESTRICTED.admitted() == ["public", "internal", "confidential", "restricted"]


def test_enums_do_not_compare_across_kinds() -> None:
    with pytest.raises(TypeError):
        _ = TrustLevel.USER < Authority.FETCHED  # type: ignore[operator]


def test_project_visibility_requires_project_scope() -> None:
    fields = dict(
        document_id=uuid.uuid4(), tenant_id="t1", ingested_by_principal_id="p1", title="Guide",
        source_ref=_ref(), media_type="text/plain", authority=Authority.FETCHED, version=1,
        chunker_version="c1", ingested_at=datetime.now(UTC), sensitivity=Sensitivity.INTERNAL,
    )
    with pytest.raises(ValidationError, match="project_scope"):
        KnowledgeDocument(visibility=Visibility.PROJECT, **fields)  # type: ignore[arg-type]
    doc = KnowledgeDocument(visibility=Visibility.PROJECT, project_scope="proj", **fields)  # type: ignore[arg-type]
    assert doc.project_scope == "proj"
    assert KnowledgeDocument(visibility=Visibility.TENANT, **fields).project_scope is None  # type: ignore[arg-type]


def test_query_defaults_are_the_spec_budget() -> None:
    q = KnowledgeQuery(tenant_id="t1", principal_id="p1", text="rollback")
    assert (q.max_passages, q.budget_tokens, q.max_per_document) == (3, 3000, 2)


def test_query_refuses_naive_as_of_and_empty_text() -> None:
    with pytest.raises(ValidationError):
        KnowledgeQuery(tenant_id="t1", principal_id="p1", text="x", as_of=datetime(2026, 1, 1))
    with pytest.raises(ValidationError):
        KnowledgeQuery(tenant_id="t1", principal_id="p1", text="")


@pytest.mark.parametrize("bad", ["", " spaced", "a" * 200, "semi;colon", "new\nline"])
def test_principal_identifiers_are_validated(bad: str) -> None:
    with pytest.raises(ValidationError):
        Principal(tenant_id=bad, principal_id="p1")


def test_models_are_immutable() -> None:
    p = Principal(tenant_id="t1", principal_id="p1", scopes=frozenset({"knowledge.write"}))
    assert p.has_scope("knowledge.write")
    with pytest.raises(ValidationError):
        p.principal_id = "p2"  # type: ignore[misc]
