"""``knowledge mcp`` over stdio, driven by the SDK's own `ClientSession` as a host drives it: the
server is a subprocess of the test (`tests.mcp.client.connect`) on the test database, under the
same loop as the test's client.

What a host sees: the tools it may call and nothing else; search results equal to the service's
own search, with their citations; ingest only with the scope and ``USER`` origin trust, a secret
refused with its reason and nothing stored; arguments that cannot widen who asks; cited chunks
that open only for whom a search would have shown them, and read as deleted once deleted; a
cancelled ingest that commits nothing; 50 calls at once from two clients; and a disconnect,
SIGTERM or SIGINT that closes everything the server started."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import psutil
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from knowledge.mcp.server import RESOURCE_NOT_FOUND
from knowledge.models import ArtifactRef, KnowledgeQuery, Principal, Sensitivity, TrustLevel, Visibility
from knowledge.service import KnowledgeService
from tests.conftest import SHARED_CORPUS, corpus_missing
from tests.ingest.test_ingest import footprint, put, writer
from tests.ingest.test_ingest_bulk import a_secret
from tests.mcp.client import connect, server_process, structured, text_of

QA = SHARED_CORPUS / "qa" / "docs-dev.jsonl"
SLOW_PDF = SHARED_CORPUS / "pdf" / "qaguru__docs-pytest-org-en-latest.pdf"
pytestmark = pytest.mark.skipif(corpus_missing(QA), reason="needs ../shared/corpus")

#: The flags that offer knowledge.ingest: the scope, and the operator's word that a person approves each call.
WRITER = ("--scope", "knowledge.write", "--origin-trust", "USER")
GUIDE = "# Rollback\n\nTo roll back a deploy, run `deploy --rollback` and wait for the health checks.\n"


def _questions(n: int) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in QA.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if not r["unanswerable"]][:n]


async def _ingest_question_files(service: KnowledgeService, tenant: str, questions: list[dict[str, Any]]) -> None:
    files = sorted({q["file"] for q in questions})
    data = await anyio.to_thread.run_sync(lambda: [(f, (SHARED_CORPUS / f).read_bytes()) for f in files])
    for name, body in data:
        ref = await put(service, tenant, body)
        await service.ingest(ref, name, Visibility.TENANT, writer(tenant, "ops"), origin_trust=TrustLevel.USER)


def _args(ref: ArtifactRef, title: str = "Rollback guide") -> dict[str, Any]:
    return {"source": json.loads(ref.model_dump_json()), "title": title, "visibility": "tenant"}


def _refusal(result: types.CallToolResult | Any) -> str:
    assert isinstance(result, types.CallToolResult) and result.is_error, result
    reason = structured(result)["reason"]
    assert text_of(result).startswith(f"refused ({reason}): ")
    return str(reason)


async def _names(session: ClientSession) -> list[str]:
    return [t.name for t in (await session.list_tools()).tools]


async def test_search_over_mcp_is_the_services_search_with_its_citations(
        service: KnowledgeService, database_dsn: str, tenant: str, tmp_path: Path, anyio_backend_name: str) -> None:
    questions = await anyio.to_thread.run_sync(_questions, 16)
    await _ingest_question_files(service, tenant, questions)
    async with connect(database_dsn, tenant, anyio_backend_name, principal="ops", log=tmp_path / "log") as session:
        assert await _names(session) == ["knowledge.search"]  # no knowledge.write: search only
        listed = (await session.list_tools()).tools[0]
        assert listed.input_schema["additionalProperties"] is False and listed.output_schema is not None
        templates = (await session.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["knowledge://chunk/{chunk_id}"]
        found = 0
        for q in questions:
            result = await session.call_tool("knowledge.search", {"text": q["question"]})
            direct = await service.search(KnowledgeQuery(tenant_id=tenant, principal_id="ops", text=q["question"]))
            assert isinstance(result, types.CallToolResult) and not result.is_error
            passages = structured(result)["passages"]
            assert [(p["chunk_id"], p["title"], p["heading_path"], p["text"]) for p in passages] == \
                   [(p.chunk_id, p.title, p.heading_path, p.text) for p in direct]
            assert [p["relevance"] for p in passages] == pytest.approx([p.relevance for p in direct])
            block = text_of(result)
            assert block.startswith("<knowledge ") and all(f'chunk="{p.chunk_id}"' in block for p in direct)
            links = [c for c in result.content if isinstance(c, types.ResourceLink)]
            assert [str(c.uri) for c in links] == [p["citation"] for p in passages] == \
                   [f"knowledge://chunk/{p.chunk_id}" for p in direct]
            found += bool(passages)
            if passages:  # the citation opens: the same text, verbatim
                opened = await session.read_resource(passages[0]["citation"])
                content = opened.contents[0]
                assert isinstance(content, types.TextResourceContents) and content.text == passages[0]["text"]
        assert found >= len(questions) // 2


async def test_ingest_is_offered_and_accepted_only_with_the_scope_and_user_trust(
        service: KnowledgeService, database_dsn: str, tenant: str, tmp_path: Path, anyio_backend_name: str) -> None:
    log = tmp_path / "log"
    guide = await put(service, tenant, GUIDE)
    credential = await anyio.to_thread.run_sync(a_secret)
    secret = await put(service, tenant, f"# Deploy notes\n\n## Credentials\n\n{credential}\n")
    async with connect(database_dsn, tenant, anyio_backend_name, log=log) as session:  # no scope
        assert await _names(session) == ["knowledge.search"]
        assert _refusal(await session.call_tool("knowledge.ingest", _args(guide))) == "missing_scope"
    for trust in ((), ("--origin-trust", "TOOL_OUTPUT")):  # the default: no person approves the calls
        async with connect(database_dsn, tenant, anyio_backend_name, "--scope", "knowledge.write", *trust,
                           log=log) as session:
            assert await _names(session) == ["knowledge.search"]
            assert _refusal(await session.call_tool("knowledge.ingest", _args(guide))) == "origin_trust"
    assert (await footprint(service, tenant))["documents"] == 0
    async with connect(database_dsn, tenant, anyio_backend_name, *WRITER, log=log) as session:
        assert await _names(session) == ["knowledge.search", "knowledge.ingest"]
        assert _refusal(await session.call_tool("knowledge.ingest", _args(secret, "Deploy notes"))) \
            == "secret_detected"
        assert (await footprint(service, tenant))["documents"] == 0  # the secret's document: nothing stored
        done = await session.call_tool("knowledge.ingest", _args(guide))
        assert isinstance(done, types.CallToolResult) and not done.is_error, done
        document = structured(done)
        assert document["version"] == 1 and document["title"] == "Rollback guide"
        hit = structured(await session.call_tool("knowledge.search", {"text": "roll back a deploy"}))["passages"]
        assert [p["document_id"] for p in hit] == [document["document_id"]]
    assert (await footprint(service, tenant))["documents"] == 1
    stats = await service.ingest_stats(tenant)
    assert stats.refused.get("secret_detected") == 1 and stats.refused.get("missing_scope") == 1


async def test_arguments_cannot_widen_who_asks(service: KnowledgeService, database_dsn: str, tenant: str,
                                               tmp_path: Path, anyio_backend_name: str) -> None:
    other = f"t-{uuid.uuid4().hex[:10]}"
    theirs = await put(service, other, GUIDE)
    await service.ingest(theirs, "Their guide", Visibility.TENANT, writer(other), origin_trust=TrustLevel.USER)
    before = await footprint(service, other)
    async with connect(database_dsn, tenant, anyio_backend_name, *WRITER,
                       log=tmp_path / "log") as session:
        for widened in ({"tenant_id": other}, {"principal_id": "root"}, {"scopes": ["knowledge.write"]},
                        {"sensitivity_ceiling": "restricted"}, {"current_scope": "infra"}):
            result = await session.call_tool("knowledge.search", {"text": "roll back a deploy", **widened})
            assert _refusal(result) == "invalid_arguments", widened
        assert structured(await session.call_tool("knowledge.search", {"text": "roll back a deploy"}))["passages"] == []
        # another tenant's artifact named in the arguments: refused, and nothing lands anywhere
        assert _refusal(await session.call_tool("knowledge.ingest", _args(theirs))) in {
            "artifact_not_found", "invalid_request", "tenant_mismatch"}
        inflated = {**_args(theirs), "authority": "principal_authored"}
        assert _refusal(await session.call_tool("knowledge.ingest", inflated)) == "invalid_arguments"
    assert await footprint(service, other) == before
    assert (await footprint(service, tenant))["documents"] == 0


async def _chunk_of(service: KnowledgeService, query: KnowledgeQuery) -> str:
    found = await service.search(query)
    assert found, query
    return found[0].chunk_id


async def test_a_cited_chunk_opens_only_for_whom_a_search_would_show_it(
        service: KnowledgeService, database_dsn: str, tenant: str, tmp_path: Path, anyio_backend_name: str) -> None:
    alice = writer(tenant, "alice")
    docs = {
        "private": ("# Vault unseal\n\nThe unseal quorum is three of five key holders.\n", Visibility.PRINCIPAL, None,
                    Sensitivity.INTERNAL),
        "project": ("# Infra pager\n\nThe infra pager rotates every Monday at nine.\n", Visibility.PROJECT, "infra",
                    Sensitivity.INTERNAL),
        "confidential": ("# Salary bands\n\nSalary bands are reviewed each January by the board.\n", Visibility.TENANT,
                         None, Sensitivity.CONFIDENTIAL),
        "shared": (GUIDE, Visibility.TENANT, None, Sensitivity.INTERNAL),
    }
    ids: dict[str, str] = {}
    documents: dict[str, uuid.UUID] = {}
    for name, (text, visibility, project, sensitivity) in docs.items():
        ref = await put(service, tenant, text)
        doc = await service.ingest(ref, name, visibility, alice, origin_trust=TrustLevel.USER, project_scope=project,
                                   sensitivity=sensitivity)
        documents[name] = doc.document_id
        ids[name] = await _chunk_of(service, KnowledgeQuery(
            tenant_id=tenant, principal_id="alice", current_scope=project, text=text.split("\n")[2],
            sensitivity_ceiling=Sensitivity.RESTRICTED))
    elsewhere = f"t-{uuid.uuid4().hex[:10]}"
    ref = await put(service, elsewhere, GUIDE)
    await service.ingest(ref, "x", Visibility.TENANT, writer(elsewhere, "bob"), origin_trust=TrustLevel.USER)
    ids["other tenant"] = await _chunk_of(service, KnowledgeQuery(tenant_id=elsewhere, principal_id="bob",
                                                                  text="roll back a deploy"))
    ids["never issued"] = "kc_" + "a" * 21
    async with connect(database_dsn, tenant, anyio_backend_name, principal="bob", log=tmp_path / "log") as bob:
        for question in ("unseal quorum key holders", "infra pager rotates", "salary bands reviewed"):
            result = await bob.call_tool("knowledge.search", {"text": question})
            assert structured(result)["passages"] == [], question  # a search shows bob none of them
        refusals = []
        for name in ("private", "project", "confidential", "other tenant", "never issued"):
            with pytest.raises(MCPError) as caught:
                await bob.read_resource(f"knowledge://chunk/{ids[name]}")
            refusals.append((caught.value.code, caught.value.message))
        assert set(refusals) == {(RESOURCE_NOT_FOUND, "resource not found")}  # one answer: no oracle
        for uri in ("knowledge://chunk/", "knowledge://document/x", "file:///etc/passwd"):
            with pytest.raises(MCPError):
                await bob.read_resource(uri)
        shared = (await bob.read_resource(f"knowledge://chunk/{ids['shared']}")).contents[0]
        assert isinstance(shared, types.TextResourceContents) and "deploy --rollback" in shared.text
        assert shared.meta is not None and shared.meta["deleted"] is False
        await service.delete(documents["shared"], alice)
        gone = (await bob.read_resource(f"knowledge://chunk/{ids['shared']}")).contents[0]
        assert isinstance(gone, types.TextResourceContents) and "deploy" not in gone.text
        assert gone.meta is not None and gone.meta["deleted"] is True and gone.meta["deleted_at"]
    async with connect(database_dsn, tenant, anyio_backend_name, "--project", "infra", "--sensitivity",
                       "confidential", principal="alice", log=tmp_path / "log") as owner:
        for name in ("private", "project", "confidential"):
            opened = (await owner.read_resource(f"knowledge://chunk/{ids[name]}")).contents[0]
            assert isinstance(opened, types.TextResourceContents) and opened.text.startswith("#"), name


#: CPU seconds past which a parser child is extracting (its start — imports — takes ~0.7), and the
#: most it may spend once its call is cancelled. The slow PDF takes ~12 CPU-s to extract (~6 per half
#: when split across both slots): a child the cancellation did not reach goes on far past this.
PARSING_CPU = 2.0
AFTER_CANCEL_CPU = 2.0


def _cpu(process: psutil.Process) -> float | None:
    try:
        times = process.cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def _parsing(server: psutil.Process) -> dict[psutil.Process, float]:
    """The server's children that are extracting now, with their CPU seconds so far."""
    found = {}
    for child in server.children(recursive=True):
        cpu = _cpu(child)
        if cpu is not None and cpu >= PARSING_CPU:
            found[child] = cpu
    return found


async def _until_parsing(server: psutil.Process, done: list[Any]) -> dict[psutil.Process, float]:
    """Wait (by the extraction's own progress) until a child of ``server`` is extracting."""
    while not (busy := _parsing(server)) and not done:  # noqa: ASYNC110 - another process's CPU, polled
        await anyio.sleep(0.05)
    return busy


async def _stopped_soon(busy: dict[psutil.Process, float]) -> None:
    """Each child in ``busy`` ends having spent at most `AFTER_CANCEL_CPU` more: it was killed, not
    left to finish (its CPU seconds are sampled until it is gone)."""
    for child, at_cancel in busy.items():
        last = at_cancel
        while (cpu := _cpu(child)) is not None and child.status() != psutil.STATUS_ZOMBIE:
            last = cpu
            await anyio.sleep(0.02)
        assert last - at_cancel <= AFTER_CANCEL_CPU, (child, at_cancel, last)


async def test_a_cancelled_ingest_commits_nothing_and_the_server_goes_on(
        service: KnowledgeService, database_dsn: str, tenant: str, tmp_path: Path, anyio_backend_name: str) -> None:
    pdf = await anyio.Path(SLOW_PDF).read_bytes()
    ref = await put(service, tenant, pdf, media_type="application/pdf", file_name="pytest.pdf")
    async with connect(database_dsn, tenant, anyio_backend_name, *WRITER,
                       log=tmp_path / "log") as session:
        server = server_process(tenant)
        outcome: list[Any] = []
        async with anyio.create_task_group() as tg:
            call = anyio.CancelScope()

            async def ingest() -> None:
                with call:
                    outcome.append(await session.call_tool("knowledge.ingest", _args(ref, "pytest docs")))

            tg.start_soon(ingest)
            busy = await _until_parsing(server, outcome)
            call.cancel()  # the SDK sends notifications/cancelled; the server cancels the call in the service
        assert outcome == [] and call.cancelled_caught and busy
        await _stopped_soon(busy)  # the extraction was cancelled in the server, its children killed
        result = await session.call_tool("knowledge.search", {"text": "fixtures"})  # and the server goes on
        assert isinstance(result, types.CallToolResult) and not result.is_error
        assert (await footprint(service, tenant))["documents"] == 0
    assert (await footprint(service, tenant))["documents"] == 0


async def test_fifty_calls_at_once_from_two_clients(service: KnowledgeService, database_dsn: str, tenant: str,
                                                   tmp_path: Path, anyio_backend_name: str) -> None:
    topics = {f"topic{i}": f"# Topic {i}\n\nThe {w} procedure for subsystem {w} is described here.\n"
              for i, w in enumerate(["alpha", "bravo", "charlie", "delta", "echo"])}
    expected: dict[str, str] = {}
    for name, text in topics.items():
        doc = await service.ingest(await put(service, tenant, text), name, Visibility.TENANT, writer(tenant),
                                   origin_trust=TrustLevel.USER)
        expected[text.split()[4]] = str(doc.document_id)
    answers: list[tuple[str, str]] = []
    async with connect(database_dsn, tenant, anyio_backend_name, log=tmp_path / "log") as one, \
            connect(database_dsn, tenant, anyio_backend_name, log=tmp_path / "log") as two:

        async def ask(session: ClientSession, word: str) -> None:
            result = await session.call_tool("knowledge.search", {"text": f"{word} procedure subsystem"})
            passages = structured(result)["passages"]
            answers.append((word, passages[0]["document_id"] if passages else ""))

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(ask, one if i % 2 else two, list(expected)[i % len(expected)])
    assert len(answers) == 50 and all(expected[word] == got for word, got in answers), answers


@pytest.mark.parametrize("how", ["disconnect", "SIGTERM", "SIGINT"])
async def test_a_disconnect_or_a_signal_closes_everything_the_server_started(
        service: KnowledgeService, database_dsn: str, tenant: str, tmp_path: Path, anyio_backend_name: str,
        how: str) -> None:
    """A host's shutdown (stdin closed) or a signal while an ingest is extracting: the server stops
    its call (the ingest commits nothing), reaps its children, closes the service, says why, exits."""
    ref = await put(service, tenant, await anyio.Path(SLOW_PDF).read_bytes(), media_type="application/pdf")
    log = tmp_path / "log"
    started: list[psutil.Process] = []
    busy: dict[psutil.Process, float] = {}
    outcome: list[Any] = []
    closed: list[MCPError] = []
    async with connect(database_dsn, tenant, anyio_backend_name, *WRITER,
                       log=log) as session, anyio.create_task_group() as tg:
        server = server_process(tenant)
        assert await session.call_tool("knowledge.search", {"text": "anything"})

        async def ingest() -> None:
            try:
                outcome.append(await session.call_tool("knowledge.ingest", _args(ref, "pytest docs")))
            except MCPError as exc:  # a signal: the connection closes under the call in flight
                closed.append(exc)

        tg.start_soon(ingest)
        busy.update(await _until_parsing(server, outcome))
        started += [server, *server.children(recursive=True)]
        if how == "disconnect":
            tg.cancel_scope.cancel()  # the host leaves: the SDK closes the server's stdin and waits for it
        else:
            os.kill(server.pid, getattr(signal, how))
    assert busy and not outcome
    assert [e.message for e in closed] == ([] if how == "disconnect" else ["Connection closed"])
    await _stopped_soon(busy)
    for process in started:  # the server and every child it had: gone
        while process.is_running() and process.status() != psutil.STATUS_ZOMBIE:  # noqa: ASYNC110 - polled
            await anyio.sleep(0.05)
    said = await anyio.Path(log).read_text()
    assert '"stopped":true' in said and f'"why":"{"client" if how == "disconnect" else "signal"}"' in said, said
    assert (await footprint(service, tenant))["documents"] == 0


def test_identity_refuses_unknown_scopes_and_levels() -> None:
    from knowledge.errors import ConfigurationError
    from knowledge.mcp.identity import McpIdentity

    identity = McpIdentity.configured("t1", "alice", env={"KNOWLEDGE_MCP_SCOPES": "knowledge.write",
                                                          "KNOWLEDGE_MCP_SENSITIVITY": "confidential"})
    assert identity.principal == Principal(tenant_id="t1", principal_id="alice", scopes=frozenset({"knowledge.write"}))
    assert identity.sensitivity_ceiling is Sensitivity.CONFIDENTIAL
    assert identity.origin_trust is TrustLevel.TOOL_OUTPUT  # no ingest unless the operator says a person approves
    assert McpIdentity.configured("t1", "alice", env={"KNOWLEDGE_MCP_ORIGIN_TRUST": "user"}).origin_trust \
        is TrustLevel.USER
    assert McpIdentity.configured("t1", "alice", env={}).principal.scopes == frozenset()
    for bad in ({"scopes": ["knowledge.writ"]}, {"sensitivity": "secret"}, {"origin_trust": "ROOT"}):
        with pytest.raises(ConfigurationError):
            McpIdentity.configured("t1", "alice", env={}, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        McpIdentity.configured("bad tenant!", "alice", env={})
