"""Small CLI habits (issue 37, item 7): ``chunk show`` takes a unique prefix of a chunk id, ``-h``
is ``--help`` everywhere (but ``db psql``'s, which is psql's host), and ``stats`` of a tenant that
holds nothing says so in one line."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
import typer

from knowledge.cli.app import app
from knowledge.cli.context import CliError
from knowledge.cli.docs_cmd import SHOWN_CANDIDATES, resolve_chunk_ref
from knowledge.config import Settings
from knowledge.core.chunking import chunk_id
from knowledge.models import Principal
from knowledge.service import KnowledgeService
from knowledge.store.catalog import Catalog
from knowledge.store.db import Database, open_bridge
from knowledge.vocabulary import WRITE_SCOPE, TrustLevel
from tests.cli.test_cli import Cli, cli_runner

NOTE = "# Note\n\nThe heron cluster fails over at midnight; check the pelican dashboard.\n"


@pytest.fixture
def knowledge(capfd: pytest.CaptureFixture[str], database_dsn: str, tenant: str) -> Cli:
    return cli_runner(capfd, database_dsn, tenant)


def _settings(dsn: str) -> Settings:
    return Settings(dsn=dsn, pool_min_size=1, pool_max_size=2, sweep_interval_seconds=None)


async def _ingest(dsn: str, tenant: str, text: str, document_ids: Sequence[uuid.UUID | None]) -> list[str]:
    """Ingest ``text`` once per document id (None: a fresh one) as the CLI's principal; the chunk
    ids of each document's first chunk."""
    principal = Principal(tenant_id=tenant, principal_id="operator", scopes=frozenset({WRITE_SCOPE}))
    ids: list[str] = []
    async with KnowledgeService.open(_settings(dsn)) as svc:
        for n, document_id in enumerate(document_ids):
            ref = await svc.put_artifact(tenant, text.encode(), media_type="text/markdown", file_name=f"n{n}.md")
            doc = await svc.ingest(ref, f"n{n}.md", "tenant", principal, origin_trust=TrustLevel.USER,
                                   document_id=document_id)
            detail = await svc.document(doc.document_id, tenant_id=tenant)
            assert detail is not None
            ids.append(detail.chunks[0].chunk_id)
    return ids


def _colliding_documents(tenant: str, chunker_version: str, sha256: str) -> list[uuid.UUID]:
    """Two document ids whose one-chunk documents of this text get chunk ids sharing their first
    four characters after ``kc_`` (a birthday search: ~1,300 tries)."""
    seen: dict[str, uuid.UUID] = {}
    while True:
        candidate = uuid.uuid4()
        prefix = chunk_id(tenant, candidate, 1, chunker_version, 0, sha256)[:7]
        if prefix in seen:
            return [seen[prefix], candidate]
        seen[prefix] = candidate


def test_chunk_show_takes_a_unique_prefix(knowledge: Cli, database_dsn: str, tenant: str) -> None:
    (first,) = anyio.run(_ingest, database_dsn, tenant, NOTE, [None])
    full = knowledge("--json", "chunk", "show", first)
    assert full.code == 0, full.err
    shown = full.json()
    for prefix in (first[:7], first[:12], first[3:10], first[:10].upper()):  # kc_ may be left out; any case
        result = knowledge("--json", "chunk", "show", prefix)
        assert result.code == 0 and result.json() == shown, (prefix, result.err)
    human = knowledge("chunk", "show", first[:9])
    assert human.code == 0 and f"Chunk {first} (live)" in human.out and "pelican dashboard" in human.out

    # Two chunk ids that share their first four characters: the prefix is ambiguous (exit 2, both named).
    chunker_version, sha256 = shown["document"]["chunker_version"], shown["chunk"]["content_sha256"]
    pair = _colliding_documents(tenant, chunker_version, sha256)
    a, b = anyio.run(_ingest, database_dsn, tenant, NOTE, pair)
    assert a[:7] == b[:7] and a != b  # (the ids the store gave are the ones computed)
    ambiguous = knowledge("chunk", "show", a[:7])
    line = ambiguous.one_error_line()
    assert ambiguous.code == 2 and "ambiguous" in line and a in line and b in line and "give more" in line
    assert knowledge("--json", "chunk", "show", a[:12]).json()["chunk"]["chunk_id"] == a  # more characters

    # Unknown: exit 1, one line; too short or not a chunk id at all: a bad argument (exit 2).
    unknown = knowledge("chunk", "show", "kc_0000")
    assert unknown.code == 1 and "chunk_not_found" in unknown.one_error_line()
    for bad in ("kc_ab", "abc", "kc_!!!!!", "not a chunk"):
        result = knowledge("chunk", "show", bad)
        assert result.code == 2 and "not a chunk id" in result.one_error_line(), bad

    # A deleted passage's citation resolves by prefix too (the tombstone keeps its id).
    doc = shown["document"]["document_id"]
    assert knowledge("docs", "delete", doc, "--yes").code == 0
    gone = knowledge("--json", "chunk", "show", first[:10])
    assert gone.code == 0 and gone.json()["status"] == "deleted" and gone.json()["chunk_id"] == first
    assert f"chunk {first}: this passage has been deleted" in knowledge("chunk", "show", first[:10]).out


async def _resolve(dsn: str, tenant: str, ref: str) -> Any:
    async with open_bridge() as bridge, Database.open(dsn, bridge=bridge, min_size=1, max_size=1) as db:
        return await resolve_chunk_ref(Catalog(db), tenant, ref)


def test_an_ambiguous_chunk_prefix_lists_at_most_six_candidates(database_dsn: str, tenant: str) -> None:
    assert len(set(anyio.run(_ingest, database_dsn, tenant, NOTE, [None] * 8))) == 8 > SHOWN_CANDIDATES
    # "kc_" alone (the CLI asks for 4 more characters) is a prefix of every chunk id of the tenant.
    with pytest.raises(CliError) as refused:
        anyio.run(_resolve, database_dsn, tenant, "kc_")
    assert refused.value.code == 2
    listed = refused.value.message.split(": ", 1)[1].split("; give more")[0]
    assert listed.endswith(" …") and len(listed.removesuffix(" …").split(", ")) == SHOWN_CANDIDATES


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


def test_dash_h_is_help_on_the_app_and_every_subcommand(knowledge: Cli) -> None:
    tree = _commands(typer.main.get_command(app))
    assert len(tree) > 15
    for path, command in tree:
        assert not any("-h" in p.opts or "-h" in p.secondary_opts for p in command.params), path  # no other -h
        if path == ("db", "psql"):  # its -h goes to psql (the host), as its other arguments do
            assert command.context_settings["help_option_names"] == ["--help"]
            continue
        short, long = knowledge(*path, "-h"), knowledge(*path, "--help")
        assert short.code == long.code == 0, (path, short.err)
        assert short.out == long.out and f"Usage: knowledge {' '.join(path)}".rstrip() in short.out, path
        flat = " ".join(short.out.replace("│", " ").split())
        assert "--help Show this message and exit (also -h)." in flat, path  # said, without a column of its own
    assert knowledge("docs", "list", "-h", "--json").code == 0  # also among other options


def test_stats_of_a_tenant_that_holds_nothing_says_so(knowledge: Cli, database_dsn: str, tenant: str) -> None:
    nobody = f"{tenant}-nobody"
    human = knowledge("stats", tenant_id=nobody)
    assert human.code == 0 and human.err == ""
    first, *report = human.out.splitlines()
    assert first == (f"tenant '{nobody}' has nothing stored: nothing was ever ingested or uploaded there "
                     "(knowledge tenants lists the tenants)")
    assert "has nothing stored" not in "\n".join(report) and "attachments: none sent" in report  # the empty report
    report = knowledge("--json", "stats", tenant_id=nobody)
    assert report.code == 0
    parsed = report.json()
    assert parsed["tenant_known"] is False and "has nothing stored" in parsed["note"]
    assert parsed["corpus"]["documents"] == 0 and parsed["ingestion"]["accepted"] == 0
    anyio.run(_ingest, database_dsn, tenant, NOTE, [None])
    known = knowledge("--json", "stats").json()
    assert known["tenant_known"] is True and "note" not in known
    assert "has nothing stored" not in knowledge("stats").out
