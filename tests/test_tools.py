"""The knowledge tool domain: schemas, the closed scope vocabulary, the registry, and refusals
before any work."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from knowledge.core.render import parse_knowledge_block
from knowledge.errors import IngestRefused, ToolRefused, ToolRegistryError
from knowledge.models import ArtifactOrigin, Authority, Principal, TrustLevel
from knowledge.service import KnowledgeService
from knowledge.store.db import Database
from knowledge.tools import (
    HOST_SCOPE_COUNT,
    INGEST_TOOL,
    KNOWLEDGE_DOMAIN,
    KNOWLEDGE_WRITE,
    SEARCH_TOOL,
    ScopeVocabulary,
    Tool,
    ToolContext,
    ToolDomain,
    ToolRegistry,
    admission_authority,
)
from tests.ingest.test_ingest import DOC, footprint, nothing_but_inputs, put

# A stand-in for the host's fourteen scopes (their names belong to the host, not to this package).
HOST_SCOPES = frozenset(f"host.scope{i}" for i in range(HOST_SCOPE_COUNT))


def registry() -> ToolRegistry:
    reg = ToolRegistry(ScopeVocabulary.with_domain(HOST_SCOPES, KNOWLEDGE_DOMAIN))
    reg.register(KNOWLEDGE_DOMAIN)
    return reg


def context(tenant: str, *, scopes: frozenset[str] = frozenset({KNOWLEDGE_WRITE}),
            trust: TrustLevel = TrustLevel.USER) -> ToolContext:
    return ToolContext(principal=Principal(tenant_id=tenant, principal_id="alice", scopes=scopes), origin_trust=trust)


def test_vocabulary_goes_from_fourteen_to_fifteen() -> None:
    vocabulary = ScopeVocabulary.with_domain(HOST_SCOPES, KNOWLEDGE_DOMAIN)
    assert len(vocabulary) == HOST_SCOPE_COUNT + 1 == 15
    assert KNOWLEDGE_WRITE in vocabulary
    assert KNOWLEDGE_DOMAIN.new_scopes == {KNOWLEDGE_WRITE}
    with pytest.raises(ToolRegistryError) as caught:  # one owner per scope string
        ScopeVocabulary.with_domain(HOST_SCOPES | {KNOWLEDGE_WRITE}, KNOWLEDGE_DOMAIN)
    assert caught.value.reason == "duplicate_scope"


def test_tool_declarations() -> None:
    assert SEARCH_TOOL.required_scopes == frozenset() and SEARCH_TOOL.min_origin_trust is None
    assert INGEST_TOOL.required_scopes == {KNOWLEDGE_WRITE} and INGEST_TOOL.min_origin_trust is TrustLevel.USER
    assert SEARCH_TOOL.result_trust is INGEST_TOOL.result_trust is TrustLevel.KNOWLEDGE
    search = SEARCH_TOOL.json_schema()
    assert search["required"] == ["text"] and set(search["properties"]) == {"text", "as_of"}
    assert search["additionalProperties"] is False
    ingest = INGEST_TOOL.json_schema()
    assert set(ingest["required"]) == {"source", "title", "visibility"}
    declared = registry().declarations()
    assert [d["name"] for d in declared] == ["knowledge.search", "knowledge.ingest"]
    assert all(len(d["description"]) > 80 for d in declared)
    json.dumps(declared)  # serializable as a host would send it


def test_registry_rejects_duplicate_names_and_unknown_scopes() -> None:
    reg = registry()
    with pytest.raises(ToolRegistryError) as caught:
        reg.register(ToolDomain(name="again", tools=(SEARCH_TOOL,)))
    assert caught.value.reason == "duplicate_tool"
    twice = ToolDomain(name="twice", tools=(
        Tool(name="x.one", description="d", arguments=SEARCH_TOOL.arguments, handler=SEARCH_TOOL.handler),
        Tool(name="x.one", description="d", arguments=SEARCH_TOOL.arguments, handler=SEARCH_TOOL.handler)))
    with pytest.raises(ToolRegistryError):
        reg.register(twice)
    stray = ToolDomain(name="stray", tools=(
        Tool(name="x.two", description="d", arguments=SEARCH_TOOL.arguments, handler=SEARCH_TOOL.handler),
        Tool(name="x.three", description="d", arguments=SEARCH_TOOL.arguments, handler=SEARCH_TOOL.handler,
             required_scopes=frozenset({"nobody.declared.this"}))))
    with pytest.raises(ToolRegistryError) as caught:
        reg.register(stray)
    assert caught.value.reason == "unknown_scope"
    with pytest.raises(ToolRefused):  # all or nothing: x.two was not registered either
        reg.tool("x.two")


@pytest.mark.parametrize(("name", "args", "scopes", "trust", "reason"), [
    ("knowledge.nope", {"text": "x"}, frozenset({KNOWLEDGE_WRITE}), TrustLevel.USER, "unknown_tool"),
    ("knowledge.ingest", {}, frozenset(), TrustLevel.USER, "missing_scope"),
    ("knowledge.ingest", {}, frozenset({KNOWLEDGE_WRITE}), TrustLevel.EXTERNAL_UNTRUSTED, "origin_trust"),
    ("knowledge.ingest", {}, frozenset({KNOWLEDGE_WRITE}), TrustLevel.TOOL_OUTPUT, "origin_trust"),
    ("knowledge.ingest", {"title": "t"}, frozenset({KNOWLEDGE_WRITE}), TrustLevel.USER, "invalid_arguments"),
    ("knowledge.search", {}, frozenset(), TrustLevel.EXTERNAL_UNTRUSTED, "invalid_arguments"),
    ("knowledge.search", {"text": "x", "extra": 1}, frozenset(), TrustLevel.USER, "invalid_arguments"),
    ("knowledge.search", {"text": "x", "as_of": "2026-01-01T00:00:00"}, frozenset(), TrustLevel.USER,
     "invalid_arguments"),  # a naive instant is ambiguous
    ("knowledge.search", '{"text": ', frozenset(), TrustLevel.USER, "invalid_arguments"),
])
def test_refusals_before_any_work(name: str, args: Any, scopes: frozenset[str], trust: TrustLevel,
                                  reason: str) -> None:
    with pytest.raises(ToolRefused) as caught:
        registry().check(name, args, context("t-x", scopes=scopes, trust=trust))
    assert caught.value.reason == reason


@pytest.mark.anyio
async def test_refused_ingest_call_writes_nothing(service: KnowledgeService, tenant: str) -> None:
    ref = await put(service, tenant, DOC)
    args = {"source": json.loads(ref.model_dump_json()), "title": "Guide", "visibility": "tenant"}
    with pytest.raises(ToolRefused) as caught:
        await registry().call("knowledge.ingest", args, context(tenant, trust=TrustLevel.TOOL_OUTPUT), service)
    assert caught.value.reason == "origin_trust"
    with pytest.raises(ToolRefused):
        await registry().call("knowledge.ingest", args, context(tenant, scopes=frozenset()), service)
    assert nothing_but_inputs(await footprint(service, tenant))


@pytest.mark.anyio
async def test_ingest_then_search_through_the_tools(service: KnowledgeService, tenant: str) -> None:
    reg = registry()
    ref = await put(service, tenant, DOC)
    args = {"source": json.loads(ref.model_dump_json()), "title": "Deployment Guide", "visibility": "tenant"}
    ingested = await reg.call("knowledge.ingest", json.dumps(args), context(tenant), service)
    assert ingested.trust is TrustLevel.KNOWLEDGE and ingested.data["version"] == 1
    # A reader without any scope may search: knowledge.search requires none.
    reader = ToolContext(principal=Principal(tenant_id=tenant, principal_id="bob"), origin_trust=TrustLevel.USER)
    found = await reg.call("knowledge.search", {"text": "roll back the release"}, reader, service)
    assert found.trust is TrustLevel.KNOWLEDGE
    attributes, passages = parse_knowledge_block(found.content)
    assert passages and all(p.doc == "Deployment Guide" for p in passages)
    assert [p["chunk_id"] for p in found.data["passages"]] == [p.chunk for p in passages]
    # as_of before the ingest: the corpus was empty then.
    empty = await reg.call("knowledge.search", {"text": "roll back", "as_of": "2000-01-01T00:00:00Z"}, reader, service)
    assert parse_knowledge_block(empty.content)[1] == []
    assert attributes["as_of"] <= datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.anyio
async def test_service_refusals_keep_their_reason(service: KnowledgeService, tenant: str) -> None:
    ref = await put(service, tenant, DOC)
    args = {"source": json.loads(ref.model_dump_json()), "title": "G", "visibility": "project"}
    with pytest.raises(IngestRefused) as caught:  # project visibility without a project scope
        await registry().call("knowledge.ingest", args, context(tenant), service)
    assert caught.value.reason == "invalid_request"


@pytest.mark.anyio
@pytest.mark.parametrize(("stored_origin", "authority"), [
    (ArtifactOrigin.UPLOAD, Authority.PRINCIPAL_SUPPLIED),
    (ArtifactOrigin.TOOL_OUTPUT, Authority.FETCHED),
    (ArtifactOrigin.MODEL_OUTPUT, Authority.FETCHED),
])
async def test_the_agent_cannot_choose_its_documents_authority(service: KnowledgeService, sql: Database, tenant: str,
                                                              stored_origin: ArtifactOrigin,
                                                              authority: Authority) -> None:
    """Authority is a ranking input: it comes from how the bytes reached the store, never from the
    tool's arguments — an ``authority`` argument is refused before any work, and a ref whose copy
    claims another origin than the stored one gets the stored one's."""
    ref = await service.put_artifact(tenant, DOC.encode(), media_type="text/markdown", origin=stored_origin,
                                      trust=TrustLevel.USER, file_name="doc.md")
    forged = json.loads(ref.model_copy(update={"origin": ArtifactOrigin.UPLOAD}).model_dump_json())
    args = {"source": forged, "title": "Guide", "visibility": "tenant"}
    with pytest.raises(ToolRefused) as caught:
        await registry().call("knowledge.ingest", {**args, "authority": "principal_authored"}, context(tenant), service)
    assert caught.value.reason == "invalid_arguments" and "authority" in caught.value.message
    assert nothing_but_inputs(await footprint(service, tenant))
    done = await registry().call("knowledge.ingest", args, context(tenant), service)
    stored = await sql.fetchval("SELECT authority FROM knowledge_documents WHERE tenant_id = $1 "
                                "AND document_id = $2", tenant, uuid.UUID(done.data["document_id"]))
    assert stored == authority.value == admission_authority(stored_origin).value
    assert "authority" not in INGEST_TOOL.json_schema()["properties"]
