"""The operator CLI (`knowledge.cli`) against the real database.

Most commands run in-process through `knowledge.cli.main` (the console script's function: the same
argument parsing, error handling and exit codes), with stdout and stderr captured; the console
script itself, the worker and the embedded server's lifecycle run as subprocesses.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import signal
import string
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import pytest

from knowledge.cli.app import hoist_global_flags, main
from knowledge.cli.files import detect_media_type
from knowledge.cli.search_cmd import parse_as_of
from knowledge.config import Settings
from knowledge.core.ranking import DEFAULT_POLICY
from knowledge.core.render import parse_knowledge_block
from knowledge.core.scan import find_secrets
from knowledge.core.turn import TurnRequest
from knowledge.models import KnowledgeQuery
from knowledge.service import KnowledgeService
from tests.conftest import new_database

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "knowledge"

RUNBOOK = """# Runbook

## Rollback

Revert the pelican release tag and re-run the deploy job. Never edit the running configuration.

## Escalation

Page the on-call heron team when the rollback fails twice.
"""


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def one_error_line(self) -> str:
        """The one line a failing command prints on stderr (and never a traceback)."""
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err
        assert lines[0].startswith("knowledge: ") and "Traceback" not in self.err
        return lines[0]


Cli = Callable[..., Result]


@pytest.fixture
def knowledge(capfd: pytest.CaptureFixture[str], database_dsn: str, tenant: str) -> Cli:
    return cli_runner(capfd, database_dsn, tenant)


def cli_runner(capfd: pytest.CaptureFixture[str], database_dsn: str, tenant: str) -> Cli:
    """``knowledge --dsn <test database> --tenant <fresh tenant> ARGS…`` in-process."""

    def run(*args: str, tenant_id: str = tenant, dsn: str | None = database_dsn) -> Result:
        prefix = ["--dsn", dsn] if dsn else []
        code = main([*prefix, "--tenant", tenant_id, *args])
        captured = capfd.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def aws_key_pair(seed: int) -> tuple[str, str]:
    """A realistic AWS access key id and secret access key (random, not the docs' example pair)."""
    rng = random.Random(seed)
    key_id = "AKIA" + "".join(rng.choice(string.ascii_uppercase + "234567") for _ in range(16))
    secret = "".join(rng.choice(string.ascii_letters + string.digits + "+/") for _ in range(40))
    return key_id, secret


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A folder with every kind of file the CLI meets."""
    root = tmp_path / "corpus"
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "runbook.md").write_text(RUNBOOK)
    (root / "notes.txt").write_text("The heron cluster fails over at midnight.\n\nCheck the pelican dashboard.\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10" + bytes(range(256)))
    (root / "blob.bin").write_bytes(b"\xff\xfe\x81\xc3" * 128)  # not UTF-8
    key_id, secret = aws_key_pair(20260728)
    (root / "deploy.md").write_text(
        "# Deploy\n\nHow the release job reaches the bucket.\n\n## Credentials\n\n"
        f"```ini\n[default]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n```\n")
    (root / ".hidden.md").write_text("# Hidden\n\nNever ingested.\n")
    return root


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {Path(f["path"]).name: f for f in report["files"]}


def test_as_of_takes_a_date_a_printed_minute_or_an_instant() -> None:
    """A date or a minute means the end of it (the corpus as it stood then); no zone means UTC."""
    assert parse_as_of("2026-12-02") == datetime(2026, 12, 2, 23, 59, 59, 999999, tzinfo=UTC)
    assert parse_as_of("2026-12-02 20:13") == datetime(2026, 12, 2, 20, 13, 59, 999999, tzinfo=UTC)
    assert parse_as_of("2026-12-02 20:13 UTC") == parse_as_of("2026-12-02T20:13Z") == parse_as_of("2026-12-02 20:13")
    assert parse_as_of("2026-12-02T20:13:05+01:00") == datetime(2026, 12, 2, 19, 13, 5, tzinfo=UTC)
    assert parse_as_of("2026-12-02T20:13:05") == datetime(2026, 12, 2, 20, 13, 5, tzinfo=UTC)


def test_version_and_json_after_the_command(knowledge: Cli, corpus: Path) -> None:
    version = knowledge("--version")
    assert version.code == 0 and version.out.startswith("knowledge ") and version.out.strip().split()[1][0].isdigit()
    completion = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False,
                                env={**os.environ, "COMP_WORDS": "knowledge do", "COMP_CWORD": "1",
                                     "_KNOWLEDGE_COMPLETE": "complete_bash"})
    assert completion.returncode == 0 and completion.stdout.split() == ["docs"]  # shell completion works
    with pytest.MonkeyPatch.context() as env:  # the shell named, not detected (no shell above pytest in CI)
        env.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
        assert "_knowledge_completion" in knowledge("--show-completion", "bash").out
    assert knowledge("ingest", str(corpus / "guide"), "--json").json()["outcomes"] == {"ingested": 1}
    after = knowledge("search", "pelican release", "--json").json()
    before = knowledge("--json", "search", "pelican release").json()
    assert after["passages"]
    assert [p["chunk_id"] for p in after["passages"]] == [p["chunk_id"] for p in before["passages"]]
    assert hoist_global_flags(["db", "psql", "--json"]) == ["db", "psql", "--json"]  # psql's own arguments
    assert hoist_global_flags(["ingest", "--", "--json"]) == ["ingest", "--", "--json"]  # a file named --json


def test_media_type_detection() -> None:
    assert detect_media_type(Path("a.bin"), b"%PDF-1.7\n...") == "application/pdf"
    assert detect_media_type(Path("a.md"), b"# x") == "text/markdown"
    assert detect_media_type(Path("a.MARKDOWN"), b"# x") == "text/markdown"
    assert detect_media_type(Path("a.yaml"), "k: ü\n".encode()) == "text/plain"
    assert detect_media_type(Path("a.png"), b"\x89PNG\r\n\x1a\n") == "image/png"
    assert detect_media_type(Path("a.txt"), b"nul\x00byte") == "text/plain"  # by name; the extractor refuses NUL
    assert detect_media_type(Path("noext"), b"\xff\xfe\x00") == "application/octet-stream"
    # UTF-8 is plain text only under a text-like name (or --as-text).
    assert detect_media_type(Path("README"), b"hello") == "text/plain"
    assert detect_media_type(Path("a.svg"), b"<svg xmlns='http://www.w3.org/2000/svg'/>") == "image/svg+xml"
    assert detect_media_type(Path("a.json"), b'{"k": 1}') == "application/json"
    assert detect_media_type(Path("a.json"), b'{"k": 1}', as_text=True) == "text/plain"
    assert detect_media_type(Path("a.pdf"), b"oops\n") == "application/pdf"  # not a PDF: the parser says so


def test_bad_arguments_print_one_line_and_exit_2(knowledge: Cli, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    (tmp_path / "b.md").write_text("# B\n\ntext\n")
    cases = [
        ("no-such-command",),
        ("--loop", "tokio", "stats"),
        ("search",),
        ("ingest",),
        ("search", "x", "--budget", "-1"),
        ("search", "x", "--as-of", "yesterday"),
        ("search", "x", "--as-of", "2026-13-01"),
        ("search", "   "),
        ("docs", "show", "not-a-uuid"),
        ("ingest", str(tmp_path / "a.md"), "--visibility", "project"),
        ("ingest", str(tmp_path / "a.md"), "--visibility", "everyone"),
        ("ingest", str(tmp_path / "a.md"), str(tmp_path / "b.md"), "--title", "One title"),
        ("ingest", str(tmp_path / "a.md"), "--doc-date", "July"),
        ("--principal", "not a principal!", "search", "x"),
    ]
    for args in cases:
        result = knowledge(*args)
        assert result.code == 2, (args, result)
        result.one_error_line()
    assert "date or an ISO 8601" in knowledge("search", "x", "--as-of", "yesterday").one_error_line()
    assert knowledge().code == 2  # no command: the help
    assert knowledge("--help").code == 0
    nothing = knowledge("--json", "docs", "list")  # nothing above ingested (or put) anything
    assert nothing.code == 1 and "unknown tenant" in nothing.one_error_line()


def test_an_unknown_tenant_is_an_error_and_tenants_lists_the_known(knowledge: Cli, corpus: Path, tenant: str) -> None:
    typo = f"{tenant}-typo"
    for args in (("search", "pelican"), ("docs", "list")):
        refused = knowledge(*args, tenant_id=typo)
        assert refused.code == 1 and f"unknown tenant '{typo}'" in refused.one_error_line()
    assert knowledge("ingest", str(corpus / "guide")).code == 0
    listed = {t["tenant_id"]: t["documents"] for t in knowledge("--json", "tenants").json()}
    assert listed[tenant] == 1 and typo not in listed
    assert knowledge("--json", "docs", "list").code == 0


def test_ingest_globs_and_a_fifo_refused_unread(knowledge: Cli, tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# A\n\nalpha\n")
    (root / "sub" / "b.md").write_text("# B\n\nbeta\n")
    (root / "sub" / "draft.md").write_text("# Draft\n\ngamma\n")
    (root / "c.json").write_text('{"k": 1}')
    os.mkfifo(root / "pipe")  # read, it would block forever
    only_md = knowledge("--json", "ingest", str(root), "--glob", "*.md", "--exclude", "sub/draft*").json()
    assert sorted(Path(f["path"]).name for f in only_md["files"]) == ["a.md", "b.md"]
    everything = by_name(knowledge("--json", "ingest", str(root)).json())
    assert everything["pipe"]["reason"] == "not_a_regular_file" and "FIFO" in everything["pipe"]["message"]
    assert everything["c.json"]["reason"] == "unsupported_media_type"  # not plain text by default
    assert everything["a.md"]["outcome"] == "unchanged" and everything["draft.md"]["outcome"] == "ingested"
    as_text = by_name(knowledge("--json", "ingest", str(root / "c.json"), "--as-text").json())
    assert as_text["c.json"]["outcome"] == "ingested" and as_text["c.json"]["media_type"] == "text/plain"


def test_two_ingests_of_one_folder_at_once_report_unchanged_not_refusals(database_dsn: str, tenant: str,
                                                                         tmp_path: Path) -> None:
    folder = tmp_path / "same"
    folder.mkdir()
    for i in range(150):
        (folder / f"page-{i:03}.md").write_text(f"# Page {i}\n\n" + f"Heron {i} nests by the pelican quay. " * 20)
    env = {**os.environ, "KNOWLEDGE_DSN": database_dsn}
    command = [str(SCRIPT), "--tenant", tenant, "--json", "ingest", str(folder)]
    both = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for _ in range(2)]
    reports = [json.loads(p.communicate(timeout=180)[0]) for p in both]
    assert [p.returncode for p in both] == [0, 0], [r["outcomes"] for r in reports]
    for report in reports:
        assert set(report["outcomes"]) <= {"ingested", "unchanged"}, report["outcomes"]
    assert sum(r["outcomes"].get("ingested", 0) for r in reports) == 150  # each file once, by one of them


def test_ingest_from_standard_input_with_a_name(knowledge: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    def piped(data: bytes) -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))

    piped(b"# Cranes\n\nCranes roost at dusk by the quay.\n")
    first = knowledge("--json", "ingest", "-", "--name", "cranes.md").json()
    assert first["outcomes"] == {"ingested": 1} and first["files"][0]["path"] == "-"
    assert first["files"][0]["media_type"] == "text/markdown" and first["files"][0]["title"] == "cranes.md"
    piped(b"# Cranes\n\nCranes roost at dusk by the quay.\n")
    assert knowledge("--json", "ingest", "-", "--name", "cranes.md").json()["outcomes"] == {"unchanged": 1}
    piped(b"# Cranes\n\nCranes roost at dawn now.\n")
    again = knowledge("--json", "ingest", "-", "--name", "cranes.md").json()["files"][0]
    assert (again["outcome"], again["document_id"], again["version"]) == (
        "new_version", first["files"][0]["document_id"], 2)
    assert knowledge("ingest", "-").code == 2  # no --name


def test_missing_file_is_a_bad_argument_and_ingests_nothing(knowledge: Cli, corpus: Path) -> None:
    result = knowledge("ingest", str(corpus / "guide"), str(corpus / "nope.md"))
    assert result.code == 2
    assert "no such file or directory" in result.one_error_line() and "nope.md" in result.err
    assert "unknown tenant" in knowledge("--json", "docs", "list").one_error_line()  # not even an upload


def test_unreachable_database_exits_3(knowledge: Cli) -> None:
    result = knowledge("stats", dsn="postgresql://postgres@127.0.0.1:1/knowledge")
    assert result.code == 3
    assert "database unavailable" in result.one_error_line()


def test_ingest_folder_json_outcomes_refusals_and_reingest(knowledge: Cli, corpus: Path) -> None:
    key_id, secret = aws_key_pair(20260728)
    assert {f.kind for f in find_secrets((corpus / "deploy.md").read_text())} & {"aws_access_key", "aws_secret_key"}
    result = knowledge("--json", "ingest", str(corpus))
    assert result.code == 1  # some files were refused
    report = result.json()
    files = by_name(report)
    assert set(files) == {"runbook.md", "notes.txt", "logo.png", "blob.bin", "deploy.md"}  # hidden files skipped
    assert report["outcomes"] == {"ingested": 2, "unsupported_media_type": 2, "secret_detected": 1}
    assert report["exit_code"] == 1
    runbook, notes = files["runbook.md"], files["notes.txt"]
    assert (runbook["outcome"], runbook["media_type"], runbook["title"], runbook["version"]) == (
        "ingested", "text/markdown", "guide/runbook.md", 1)
    assert runbook["chunks"] >= 1 and uuid.UUID(runbook["document_id"])
    assert (notes["outcome"], notes["media_type"]) == ("ingested", "text/plain")
    assert (files["logo.png"]["reason"], files["logo.png"]["media_type"]) == ("unsupported_media_type", "image/png")
    assert files["blob.bin"]["reason"] == "unsupported_media_type"
    deploy = files["deploy.md"]
    assert (deploy["outcome"], deploy["reason"]) == ("refused", "secret_detected")
    assert isinstance(deploy["chunk_ordinal"], int) and deploy["heading_path"][:2] == ["deploy.md", "Deploy"]
    assert key_id not in result.out + result.err and secret not in result.out + result.err
    # The two files no extractor reads are kept thirty days, awaiting one; nothing reads them yet.
    kept = knowledge("--json", "docs", "reextract")
    assert kept.code == 0 and kept.json()["awaiting"] == {"image/png": 1, "application/octet-stream": 1}
    assert kept.json()["ingested"] == 0

    # Again (the same files, through a subfolder and alone: the same real locations, the same
    # documents): unchanged; a changed file becomes a new version of its document.
    again = knowledge("--json", "ingest", str(corpus / "guide"), str(corpus / "notes.txt"))
    assert again.code == 0 and again.json()["outcomes"] == {"unchanged": 2}
    (corpus / "guide" / "runbook.md").write_text(RUNBOOK + "\n## Aftercare\n\nWrite the incident note.\n")
    changed = knowledge("--json", "ingest", str(corpus / "guide" / "runbook.md"), "--title", "Runbook")
    assert changed.code == 0
    (entry,) = changed.json()["files"]
    assert (entry["outcome"], entry["version"], entry["document_id"], entry["title"]) == (
        "new_version", 2, runbook["document_id"], "Runbook")


def test_ingest_human_output_lists_refusals_never_the_secret(knowledge: Cli, corpus: Path) -> None:
    key_id, secret = aws_key_pair(20260728)
    result = knowledge("ingest", str(corpus))
    assert result.code == 1
    out = result.out
    assert "Refused" in out and "Outcomes" in out and "Ingested" in out
    assert "secret_detected" in out and "chunk " in out and "deploy.md > Deploy" in out
    assert "unsupported_media_type" in out and "logo.png" in out
    assert "5 files" in out and "2 ingested" in out and "3 refused" in out
    assert key_id not in out + result.err and secret not in out + result.err
    single = knowledge("ingest", str(corpus / "deploy.md"), "--visibility", "project", "--project", "ops")
    assert single.code == 1 and "secret_detected" in single.out


def test_search_prints_the_rendered_block_or_json(knowledge: Cli, corpus: Path) -> None:
    before = datetime.now(UTC)
    time.sleep(0.01)
    assert knowledge("ingest", str(corpus / "guide")).code == 0
    human = knowledge("search", "pelican rollback")
    assert human.code == 0
    attrs, passages = parse_knowledge_block(human.out.rstrip("\n"))
    assert attrs["policy"] == DEFAULT_POLICY.name and passages
    assert passages[0].doc == "runbook.md" and "pelican release tag" in passages[0].text

    as_json = knowledge("--json", "search", "pelican rollback", "--budget", "2000", "--project", "ops")
    data = as_json.json()
    assert data["passages"][0]["chunk_id"] == passages[0].chunk
    assert data["block"].startswith("<knowledge ") and data["query"]["budget_tokens"] == 2000
    assert knowledge("--json", "search", "pelican", "--as-of", before.isoformat()).json()["passages"] == []
    starved = knowledge("--json", "search", "pelican", "--budget", "0")
    assert starved.json()["passages"] == [] and "budget of 0 tokens admits none" in starved.json()["notes"][0]
    assert "budget of 0 tokens admits none" in starved.err  # said to a person too
    assert "relevant enough" in knowledge("--json", "search", "zzyzx").json()["notes"][0]
    other = knowledge("--json", "search", "pelican", tenant_id=f"t-{uuid.uuid4().hex[:10]}")
    assert other.code == 1 and "unknown tenant" in other.one_error_line()  # not an empty result
    under_asyncio = knowledge("--loop", "asyncio", "--json", "search", "pelican rollback")
    assert under_asyncio.code == 0 and under_asyncio.json()["passages"][0]["chunk_id"] == passages[0].chunk


def test_docs_list_show_versions_rechunk(knowledge: Cli, corpus: Path) -> None:
    ingested = knowledge("--json", "ingest", str(corpus / "guide"), str(corpus / "notes.txt"), "--sensitivity",
                         "public", "--authority", "principal_authored", "--doc-date", "2026-05-02")
    assert ingested.code == 0
    doc_id = by_name(ingested.json())["runbook.md"]["document_id"]

    listed = knowledge("--json", "docs", "list").json()
    assert {d["title"] for d in listed} == {"runbook.md", "notes.txt"}
    runbook = next(d for d in listed if d["document_id"] == doc_id)
    assert (runbook["version"], runbook["sensitivity"], runbook["authority"], runbook["doc_date"],
            runbook["ingested_by"]) == (1, "public", "principal_authored", "2026-05-02", "operator")
    human = knowledge("docs", "list")
    assert human.code == 0 and "runbook.md" in human.out and doc_id in human.out and "2 documents" in human.out
    assert [d["title"] for d in knowledge("--json", "docs", "list", "--title", "RUNBOOK").json()] == ["runbook.md"]
    assert "1 document in tenant" in knowledge("docs", "list", "--title", "RUNBOOK").out
    by_prefix = knowledge("--json", "docs", "show", doc_id[:8])  # a unique prefix, as git takes commits
    assert by_prefix.code == 0 and by_prefix.json()["document"]["document_id"] == doc_id
    unknown = knowledge("docs", "versions", "ffffffff" if not doc_id.startswith("ffff") else "00000000")
    assert unknown.code == 1 and "document_not_found" in unknown.one_error_line()
    today = datetime.now(UTC).date()
    assert len(knowledge("--json", "docs", "list", "--since", today.isoformat()).json()) == 2
    assert knowledge("--json", "docs", "list", "--since", f"{today.year + 1}-01-01").json() == []

    shown = knowledge("--json", "docs", "show", doc_id).json()
    assert shown["document"]["document_id"] == doc_id and shown["versions"] == 1
    assert shown["source"]["origin"] == "KNOWLEDGE_SOURCE" and shown["source"]["file_name"] == "runbook.md"
    assert len(shown["chunks"]) == shown["document"]["chunks"] >= 1
    assert all("text" not in c for c in shown["chunks"])
    human_show = knowledge("docs", "show", doc_id)
    assert human_show.code == 0 and "KNOWLEDGE_SOURCE" in human_show.out and shown["chunks"][0]["chunk_id"] in \
        human_show.out

    # Re-chunking under the chunker this build ingests with is refused (that chunk set exists) …
    same = knowledge("docs", "rechunk", doc_id)
    assert same.code == 1 and "already_chunked" in same.one_error_line()
    # … under another chunker version it makes a new chunk set; the old one's citations still resolve.
    old_chunk = shown["chunks"][0]["chunk_id"]
    rechunked = knowledge("--json", "docs", "rechunk", doc_id, "--chunker", "paragraphs")
    assert rechunked.code == 0 and rechunked.json()["chunker_version"].startswith("para1-")
    assert knowledge("--json", "docs", "show", doc_id).json()["document"]["chunker_version"].startswith("para1-")
    old = knowledge("--json", "chunk", "show", old_chunk).json()
    assert old["status"] == "historical" and old["chunk"]["chunk_id"] == old_chunk

    versions = knowledge("--json", "docs", "versions", doc_id).json()
    assert [v["document"]["version"] for v in versions] == [1]
    sets = versions[0]["chunk_sets"]
    assert [s["superseded_at"] is None for s in sets] == [False, True]
    human_versions = knowledge("docs", "versions", doc_id)
    assert human_versions.code == 0 and "live" in human_versions.out and "re-chunked" in human_versions.out
    # … and back to the default chunker: its set is live again, with the same citations.
    back = knowledge("--json", "docs", "rechunk", doc_id[:8])
    assert back.code == 0 and back.json()["chunker_version"] == shown["document"]["chunker_version"]
    assert knowledge("--json", "chunk", "show", old_chunk).json()["status"] == "live"
    missing = str(uuid.uuid4())
    for args in (("docs", "show", missing), ("docs", "versions", missing), ("docs", "rechunk", missing)):
        result = knowledge(*args)
        assert result.code == 1 and "document_not_found" in result.one_error_line()


def test_chunk_show_live_then_deleted(knowledge: Cli, corpus: Path) -> None:
    ingested = knowledge("--json", "ingest", str(corpus / "guide" / "runbook.md"))
    doc_id = ingested.json()["files"][0]["document_id"]
    chunk_id = knowledge("--json", "search", "pelican").json()["passages"][0]["chunk_id"]

    live = knowledge("--json", "chunk", "show", chunk_id)
    data = live.json()
    assert live.code == 0 and data["status"] == "live" and data["live"] is True
    assert "pelican release tag" in data["chunk"]["text"] and data["document"]["document_id"] == doc_id
    assert data["source"]["origin"] == "KNOWLEDGE_SOURCE" and data["source"]["sha256"] == \
        data["document"]["source_sha256"]
    human = knowledge("chunk", "show", chunk_id)
    assert human.code == 0 and "pelican release tag" in human.out and "(live)" in human.out

    assert knowledge("docs", "delete", doc_id).code == 2  # no --yes, and standard input is not a terminal
    not_owner = knowledge("--principal", "mallory", "docs", "delete", doc_id, "--yes")
    assert not_owner.code == 1 and "not_document_owner" in not_owner.one_error_line()
    deleted = knowledge("--json", "docs", "delete", doc_id, "--yes")
    assert deleted.code == 0 and deleted.json()["chunks"] >= 1

    gone = knowledge("--json", "chunk", "show", chunk_id)
    assert gone.code == 0 and gone.json()["status"] == "deleted" and gone.json()["document_id"] == doc_id
    assert "text" not in gone.out and "pelican" not in gone.out
    human_gone = knowledge("chunk", "show", chunk_id)
    assert "this passage has been deleted" in human_gone.out
    assert knowledge("--json", "search", "pelican").json()["passages"] == []
    assert knowledge("docs", "show", doc_id).code == 1
    again = knowledge("docs", "delete", doc_id, "--yes")
    assert again.code == 1 and "document_not_found" in again.one_error_line()
    unknown = knowledge("chunk", "show", "kc_doesnotexist")
    assert unknown.code == 1 and "chunk_not_found" in unknown.one_error_line()


async def _one_turn(dsn: str, tenant: str, text: str, answer: bool = False) -> None:
    settings = Settings(dsn=dsn, pool_min_size=1, pool_max_size=2, sweep_interval_seconds=None)
    async with KnowledgeService.open(settings) as svc:
        query = KnowledgeQuery(tenant_id=tenant, principal_id="operator", text=text)
        turn = await svc.turn(TurnRequest(query=query, region_tokens=10_000, retrieve=True))
        if answer:  # one citation of what the turn showed, one of nothing it showed
            await svc.record_answer(turn.trace.trace_id, f"Roll back [{turn.passages[0].chunk_id}]. "
                                    "Then wait [kc_abcdefghijklmnopqrstu].", tenant_id=tenant)


def test_stats_tracked_metrics(knowledge: Cli, corpus: Path, database_dsn: str, tenant: str) -> None:
    assert knowledge("ingest", str(corpus)).code == 1
    stats = knowledge("--json", "stats").json()
    corpus_size = stats["corpus"]
    assert (corpus_size["documents"], corpus_size["versions"]) == (2, 2)
    assert corpus_size["chunks"] >= 2 and corpus_size["tokens"] > 0
    assert corpus_size["source_bytes"] == len(RUNBOOK.encode()) + (corpus / "notes.txt").stat().st_size
    assert stats["ingestion"]["accepted"] == 2
    assert stats["ingestion"]["refused"] == {"unsupported_media_type": 2, "secret_detected": 1}
    assert stats["ingestion"]["instruction_like_rate"] == 0.0
    assert stats["budget_pressure"] is None and stats["passages_given"] is None and stats["citations"] is None
    human = knowledge("stats")
    assert human.code == 0 and "instruction-like rate: 0.00%" in human.out
    assert "budget pressure: n/a (no turns traced)" in human.out and "secret_detected" in human.out

    anyio.run(_one_turn, database_dsn, tenant, "pelican rollback")
    traced = knowledge("--json", "stats").json()
    assert traced["budget_pressure"]["turns"] == 1 and traced["budget_pressure"]["knowledge_turns"] == 1
    assert traced["passages_given"]["traces"] == 1 and traced["passages_given"]["passages"] >= 1
    top = traced["passages_given"]["top_documents"]
    assert {t["title"] for t in top} <= {"guide/runbook.md", "notes.txt"}
    assert sum(t["passages"] for t in top) == traced["passages_given"]["passages"]
    assert traced["citations"] is None  # no answer recorded yet
    human_traced = knowledge("stats")
    assert "Budget pressure" in human_traced.out and "Most given" in human_traced.out
    assert "citations: n/a (no answer recorded" in human_traced.out
    anyio.run(_one_turn, database_dsn, tenant, "pelican rollback", True)
    answered = knowledge("--json", "stats").json()["citations"]
    assert (answered["answers"], answered["citations"], answered["hallucinated"]) == (1, 2, 1)
    assert answered["hallucination_rate"] == 0.5
    # The hallucinated citation is unsupported; the other one's verdict is the check's (a two-word claim).
    assert answered["unsupported"] >= 1 and answered["supported"] + answered["unsupported"] == 2
    assert answered["citation_accuracy"] == answered["supported"] / 2
    out = knowledge("stats").out
    assert re.search(r"hallucinated +│ 1 \(50\.0%", out) and re.search(r"citation accuracy +│ \d+\.\d%", out)
    assert re.search(r"citation rate +│ ", out)


def test_db_status_and_psql_against_dsn(knowledge: Cli, capfd: pytest.CaptureFixture[str], database_dsn: str,
                                        tenant: str, corpus: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    status = knowledge("--json", "db", "status")
    assert status.code == 0 and status.json()["running"] is True and status.json()["embedded"] is False
    assert status.json()["dsn"] == database_dsn  # the DSN another tool would use
    for command in ("start", "stop"):
        refused = knowledge("db", command)
        assert refused.code == 2 and "--dsn" in refused.one_error_line()

    assert knowledge("ingest", str(corpus / "guide")).code == 0
    capfd.readouterr()
    code = main(["--dsn", database_dsn, "db", "psql", "-tA", "-c",
                 f"SELECT count(*) FROM knowledge_documents WHERE tenant_id = '{tenant}'"])
    assert code == 0 and capfd.readouterr().out.strip() == "1"

    monkeypatch.delenv("KNOWLEDGE_DSN", raising=False)
    stopped = knowledge("--data-dir", str(tmp_path / "no-server"), "--json", "db", "status", dsn=None)
    assert stopped.code == 3 and stopped.json() == {"running": False, "embedded": True,
                                                    "data_dir": str(tmp_path / "no-server")}


def test_db_dump_and_restore_bring_the_documents_back(knowledge: Cli, corpus: Path, admin_dsn: str,
                                                     tmp_path: Path) -> None:
    """``db dump`` (bundled pg_dump) then ``db restore`` into an empty database: the same documents,
    searchable; restoring over a database that changed since puts it back as it was dumped."""
    source = new_database(admin_dsn)
    assert knowledge("ingest", str(corpus / "guide"), dsn=source).code == 0
    archive = tmp_path / "kb.dump"
    dumped = knowledge("db", "dump", str(archive), dsn=source)
    assert dumped.code == 0 and archive.stat().st_size > 0, dumped.err
    target = new_database(admin_dsn, migrated=False)
    assert knowledge("db", "restore", str(archive), dsn=target).code == 0
    assert [d["title"] for d in knowledge("--json", "docs", "list", dsn=target).json()] == ["runbook.md"]
    found = knowledge("--json", "search", "revert the pelican release tag", dsn=target).json()
    assert found["passages"] and "Revert the pelican release tag" in found["passages"][0]["text"]
    assert knowledge("ingest", str(corpus / "notes.txt"), dsn=source).code == 0  # a change after the dump
    assert knowledge("db", "restore", str(archive), dsn=source).code == 0
    assert len(knowledge("--json", "docs", "list", dsn=source).json()) == 1


def test_db_status_of_the_running_embedded_server(knowledge: Cli, admin_dsn: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    host = parse_qs(urlsplit(admin_dsn).query).get("host", [""])[0]
    if not host.endswith("/pgdata"):
        pytest.skip("the tests run against an external server")
    monkeypatch.delenv("KNOWLEDGE_DSN", raising=False)
    status = knowledge("--data-dir", str(Path(host).parent), "--json", "db", "status", dsn=None)
    assert status.code == 0 and status.json()["running"] is True and status.json()["pgdata"] == host


def _script(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=timeout, check=False)


def test_console_script_and_the_embedded_server_lifecycle(tmp_path: Path, corpus: Path) -> None:
    """``db start`` leaves the server running; another command joins it and leaves it running;
    ``db stop`` stops it."""
    env = {k: v for k, v in os.environ.items() if k != "KNOWLEDGE_DSN"}
    data_dir = str(tmp_path / "kdata")
    try:
        started = _script("--data-dir", data_dir, "--json", "db", "start", env=env)
        assert started.returncode == 0, started.stderr
        facts = json.loads(started.stdout)
        assert facts["running"] and facts["schema_version"] >= 1
        ingested = _script("--data-dir", data_dir, "--json", "ingest", str(corpus / "guide"), env=env)
        assert ingested.returncode == 0, ingested.stderr
        assert json.loads(ingested.stdout)["outcomes"] == {"ingested": 1}
        status = _script("--data-dir", data_dir, "--json", "db", "status", env=env)
        assert status.returncode == 0 and json.loads(status.stdout)["pid"] == facts["pid"]  # still running
    finally:
        stopped = _script("--data-dir", data_dir, "--json", "db", "stop", env=env)
    assert stopped.returncode == 0 and json.loads(stopped.stdout)["stopped"] is True
    after = _script("--data-dir", data_dir, "db", "status", env=env)
    assert after.returncode == 3 and "not running" in after.stdout


def _documents(dsn: str, tenant: str) -> set[str]:
    """The ids of the tenant's documents (as the CLI's JSON writes them)."""
    async def ids() -> set[str]:
        from knowledge.store.db import Database, open_bridge

        async with open_bridge() as bridge, Database.open(dsn, bridge=bridge, min_size=1, max_size=1) as db:
            rows = await db.fetch("SELECT document_id FROM knowledge_documents WHERE tenant_id = $1", tenant)
            return {str(r["document_id"]) for r in rows}

    return anyio.run(ids)


@pytest.mark.slow
def test_db_stop_refuses_while_an_ingest_runs_and_forced_the_ingest_says_what_landed(tmp_path: Path) -> None:
    """``db stop`` under another process's ingest says clients are connected (exit 1); ``--force``
    stops it; the ingest then prints what landed (whole documents, all there after a restart) and
    exits 3 with one line saying so."""
    env = {k: v for k, v in os.environ.items() if k != "KNOWLEDGE_DSN"}
    data_dir, folder = str(tmp_path / "kdata"), tmp_path / "many"
    folder.mkdir()
    for i in range(2000):
        (folder / f"note-{i:04}.md").write_text(f"# Note {i}\n\n" + f"Pelican {i} glides over harbour {i}. " * 40)
    started = _script("--data-dir", data_dir, "--json", "db", "start", env=env)
    assert started.returncode == 0, started.stderr
    dsn = json.loads(started.stdout)["dsn"]
    ingest = subprocess.Popen([str(SCRIPT), "--data-dir", data_dir, "--tenant", "cut", "--json", "ingest", str(folder)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while len(_documents(dsn, "cut")) < 20 and ingest.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        refused = _script("--data-dir", data_dir, "db", "stop", env=env)
        assert refused.returncode == 1 and "clients connected" in refused.stderr and "--force" in refused.stderr
        forced = _script("--data-dir", data_dir, "db", "stop", "--force", env=env)
        assert forced.returncode == 0, forced.stderr
        out, err = ingest.communicate(timeout=120)
    finally:
        if ingest.poll() is None:
            ingest.kill()
            ingest.wait()
    assert ingest.returncode == 3, err
    report = json.loads(out)
    landed = [f for f in report["files"] if f["outcome"] == "ingested"]
    in_doubt = [f for f in report["files"] if f["reason"] == "commit_unknown"]
    assert 20 <= len(landed) < 2000 and report["exit_code"] == 3
    assert {f["reason"] for f in report["files"] if f["outcome"] != "ingested"} <= {"not_ingested", "commit_unknown"}
    assert report["outcomes"].get("commit_unknown", 0) == len(in_doubt)
    last = err.strip().splitlines()[-1]
    assert last.startswith("knowledge: database unavailable") and f"{len(landed)} of 2000 files" in last, err
    assert (f"{len(in_doubt)} more were committing as it went" in last) == bool(in_doubt), err
    assert "Traceback" not in err
    try:
        assert _script("--data-dir", data_dir, "db", "start", env=env).returncode == 0
        # What it said landed is in; what it said was not written is not; a document whose COMMIT was in
        # flight as the server went (its answer lost) was reported so, and is whole or not at all.
        stored = _documents(dsn, "cut")
        assert {f["document_id"] for f in landed} <= stored <= {f["document_id"] for f in landed + in_doubt}
        # Run again: everything in is unchanged, the rest goes in, nothing is doubled.
        again = _script("--data-dir", data_dir, "--tenant", "cut", "--json", "ingest", str(folder), env=env)
        assert again.returncode == 0, again.stderr
        outcomes = json.loads(again.stdout)["outcomes"]
        assert outcomes == {"unchanged": len(stored), "ingested": 2000 - len(stored)}
        assert len(_documents(dsn, "cut")) == 2000
    finally:
        _script("--data-dir", data_dir, "db", "stop", "--force", env=env)


def test_a_cut_ingest_tells_not_written_from_committing_as_it_went() -> None:
    """What each file came to when the database went away: a file whose COMMIT was in flight is
    ``commit_unknown`` with its document id (whole or not at all; the next run settles it), never
    ``not_ingested``, which would be false if it took effect."""
    from types import SimpleNamespace

    from knowledge.cli.ingest_cmd import FileOutcome, _Run, _Upload, tally
    from knowledge.errors import CommitUnknown, DatabaseUnavailable

    ids = [uuid.uuid4() for _ in range(4)]
    files = [_Upload(FileOutcome(f"f{i}.md", "refused"), SimpleNamespace(document_id=ids[i], replaces=None))  # type: ignore[arg-type]
             for i in range(4)]
    run = _Run(uploads=files, pending=files)
    run.done = {1: CommitUnknown.of(ids[1], None), 2: DatabaseUnavailable(message="gone")}
    results = run.cut(DatabaseUnavailable(message="gone")).results
    assert [(r.reason, r.document_id) for r in results] == [
        ("not_ingested", None), ("commit_unknown", ids[1]), ("not_ingested", None), ("not_ingested", None)]
    assert "whole document is in, or nothing" in (results[1].message or "")
    assert tally(results) == {"not_ingested": 3, "commit_unknown": 1}


def test_worker_runs_until_sigterm(database_dsn: str) -> None:
    env = {**os.environ, "KNOWLEDGE_DSN": database_dsn}
    proc = subprocess.Popen([str(SCRIPT), "--json", "worker", "--poll-seconds", "0.2", "--log-level", "WARNING"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["ready"] is True and len(ready["workers"]) == 1
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["stopped"] is True
    assert "Traceback" not in err


async def _attachments_with_a_dead_worker(dsn: str, tenant: str) -> None:
    """Three owner-sent attachments: one ingested, one refused (a secret), one ingesting under the
    expired lease of a worker that died."""
    from tests.conftest import open_sql
    from tests.helpers.attachments import markdown, owner, upload, worker
    from tests.helpers.kit import Kit

    secret = b"# Deploy\n\nexport AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ3kq8nT2b\n"
    settings = Settings(dsn=dsn, sweep_interval_seconds=None)
    async with KnowledgeService.open(settings) as svc, open_sql(svc.dsn) as db:
        refs = [await upload(svc, tenant, data, name) for data, name in
                ((markdown("Upgrades"), "upgrades.md"), (secret, "deploy.md"))]
        await svc.mark_attachments(owner(tenant), [r.artifact_id for r in refs], conversation_id="c1")
        assert await worker(Kit(db), tenant).drain() == 2
        stuck = await upload(svc, tenant, markdown("Backups"), "backups.md")
        await svc.mark_attachments(owner(tenant), [stuck.artifact_id], conversation_id="c1")
        await db.execute(
            """UPDATE artifacts SET attachment_state = 'ingesting', attachment_attempts = 1, lease_owner = 'dead',
                      lease_expires_at = clock_timestamp() - interval '1 minute'
               WHERE tenant_id = $1 AND artifact_id = $2""", tenant, stuck.artifact_id)


def test_stats_show_attachments_and_a_dead_worker(knowledge: Cli, database_dsn: str, tenant: str) -> None:
    assert "attachments: none sent" in knowledge("stats").out
    anyio.run(_attachments_with_a_dead_worker, database_dsn, tenant)
    queue = knowledge("--json", "stats").json()["attachments"]
    assert queue["by_state"] == {"ingested": 1, "refused": 1, "ingesting": 1}
    assert queue["reasons"] == {"refused": {"secret_detected": 1}} and queue["expired_leases"] == 1
    human = knowledge("stats")
    assert "secret_detected" in human.out and "1 attachment(s) ingesting under an expired lease" in human.out
    assert "wJalrXUtnFEMI" not in human.out


def test_stats_since_shows_the_ingestion_trend_day_by_day(knowledge: Cli, corpus: Path) -> None:
    assert knowledge("ingest", str(corpus)).code == 1  # two accepted, three refused by cause
    every = knowledge("--json", "stats").json()
    assert every["since"] is None and every["trend"] == []
    since = knowledge("--json", "stats", "--since", "2020-01-01").json()
    assert since["since"] == "2020-01-01" and len(since["trend"]) == 1
    today = since["trend"][0]
    assert today["accepted"] == 2 and today["refused"] == {"unsupported_media_type": 2, "secret_detected": 1}
    assert today["refusal_rate"] == 0.6 and today["chunks"] >= 2
    human = knowledge("stats", "--since", "2020-01-01")
    assert human.code == 0 and "Ingestion by day since 2020-01-01" in human.out and "60.0%" in human.out
    future = knowledge("--json", "stats", "--since", "2999-01-01").json()
    assert future["ingestion"]["accepted"] == 0 and future["trend"] == []
    bad = knowledge("stats", "--since", "last week")
    assert bad.code == 2 and "--since must be a date" in bad.err
