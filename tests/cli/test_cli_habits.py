"""The CLI's habits (issue 20 §2, §4): help without Python type names, JSON Lines, a search
rendered for a person on a terminal (through a real pty), document identity that survives a
moved folder ingested under the same ``--as`` name, and read-only commands that never start the
embedding model. (Document identity itself: tests/cli/test_identity.py.)"""

from __future__ import annotations

import io
import json
import os
import pty
import select
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from knowledge.cli import interrupt
from knowledge.cli.app import app, hoist_global_flags, main
from knowledge.cli.help import plain_help
from knowledge.cli.output import fitting_lines
from knowledge.semantic.encoder import available as semantic_available
from knowledge.service import KnowledgeService
from knowledge.supervisors.embedder import Embedder
from tests.cli.test_cli import RUNBOOK, Cli, cli_runner
from tests.conftest import new_database

SCRIPT = Path(sys.executable).parent / "knowledge"


@pytest.fixture
def knowledge(capfd: pytest.CaptureFixture[str], database_dsn: str, tenant: str) -> Cli:
    return cli_runner(capfd, database_dsn, tenant)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "site" / "docs"
    (root / "ops").mkdir(parents=True)
    (root / "ops" / "runbook.md").write_text(RUNBOOK)
    (root / "notes.txt").write_text("The heron cluster fails over at midnight.\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(64)))
    return root


def command_paths(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for name, sub in getattr(command, "commands", {}).items():
        paths += command_paths(sub, (*prefix, name))
    return paths


def test_help_names_no_python_types_and_shows_examples(capfd: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # a narrow terminal: nothing folds mid-word
    tree = plain_help(typer.main.get_command(app))
    paths = command_paths(tree)
    assert len(paths) > 15
    for path in paths:
        assert main([*path, "--help"]) == 0
        text = capfd.readouterr().out
        for python in ("<str>", "<bool>", "<int>", "<float>", "<path>", "<list[", "<Path", "{"):
            assert python not in text, (path, python)
        command = tree
        for name in path:
            command = command.commands[name]
        for param in command.params:  # every option's name is printed whole
            for opt in param.opts if param.param_type_name == "option" else ():
                assert opt in text, (path, opt)
    assert main(["ingest", "--help"]) == 0
    ingest_help = capfd.readouterr().out
    assert "Examples:" in ingest_help and "PATH..." in ingest_help and "--glob" in ingest_help
    assert "One of: principal_authored, principal_supplied, fetched." in " ".join(
        ingest_help.replace("│", " ").split())


def test_jsonl_streams_ingest_outcomes_search_passages_and_list_rows(knowledge: Cli, docs: Path) -> None:
    ingested = knowledge("ingest", str(docs), "--jsonl")
    assert ingested.code == 1  # the PNG is refused
    records = [json.loads(line) for line in ingested.out.splitlines()]
    files, summary = records[:-1], records[-1]
    assert sorted(Path(r["path"]).name for r in files) == ["logo.png", "notes.txt", "runbook.md"]
    assert {Path(r["path"]).name: r["outcome"] for r in files}["runbook.md"] == "ingested"
    assert summary["outcomes"] == {"ingested": 2, "unsupported_media_type": 1} and summary["exit_code"] == 1
    found = knowledge("--jsonl", "search", "pelican release rollback")
    passages = [json.loads(line) for line in found.out.splitlines()]
    assert found.code == 0 and passages and [p["rank"] for p in passages] == list(range(1, len(passages) + 1))
    assert passages[0]["title"] == "ops/runbook.md" and "pelican" in passages[0]["text"]
    rows = [json.loads(line) for line in knowledge("docs", "list", "--jsonl").out.splitlines()]
    assert sorted(r["title"] for r in rows) == ["notes.txt", "ops/runbook.md"]


def run_in_pty(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, check: bool = True) -> str:
    """A command (by default the console script's arguments) with its stdout on a pseudo-terminal,
    as a person runs it; what it printed there, then its stderr."""
    command = list(args) if args and os.path.isabs(args[0]) else [str(SCRIPT), *args]
    leader, follower = pty.openpty()
    proc = subprocess.Popen(command, stdout=follower, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=cwd,
                            env=env if env is not None else {**os.environ, "COLUMNS": "120"})
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            proc.kill()
            raise AssertionError(f"no output on the pty within 120 s: {command}")
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    code = proc.wait(timeout=120)
    assert proc.stderr is not None
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert code == 0 or not check, err
    return b"".join(chunks).decode().replace("\r\n", "\n") + err


def test_search_reads_as_passages_on_a_terminal_and_as_the_envelope_when_piped(
        knowledge: Cli, docs: Path, database_dsn: str, tenant: str) -> None:
    assert knowledge("ingest", str(docs / "ops")).code == 0
    base = ("--dsn", database_dsn, "--tenant", tenant, "search", "pelican release rollback")
    person = run_in_pty(*base)
    assert "<knowledge" not in person
    assert "1. runbook.md" in person and "Rollback" in person and "relevance" in person
    assert "Revert the pelican release tag" in person and "chunk kc_" in person
    agent = run_in_pty(*base, "--format", "envelope")
    assert agent.lstrip().startswith("<knowledge") and "Revert the pelican release tag" in agent
    piped = subprocess.run([str(SCRIPT), *base], capture_output=True, text=True, timeout=120, check=True)
    assert piped.stdout.lstrip().startswith("<knowledge")
    text = subprocess.run([str(SCRIPT), *base, "--format", "text"], capture_output=True, text=True, timeout=120,
                          check=True)
    assert text.stdout.startswith("1. runbook.md") and "\x1b[" not in text.stdout  # no colour into a pipe


def test_a_moved_folder_under_the_same_name_is_not_a_second_copy(knowledge: Cli, docs: Path, tmp_path: Path) -> None:
    first = {Path(f["path"]).name: f for f in knowledge("--json", "ingest", str(docs), "--as", "docs").json()["files"]}
    moved = tmp_path / "elsewhere" / "docs"
    moved.parent.mkdir()
    shutil.move(docs, moved)
    again = knowledge("--json", "ingest", str(moved), "--as", "docs")
    assert again.json()["outcomes"] == {"unchanged": 2, "unsupported_media_type": 1}
    assert {Path(f["path"]).name: f["document_id"] for f in again.json()["files"] if f["document_id"]} == {
        name: f["document_id"] for name, f in first.items() if f["document_id"]}
    # A subfolder or a file of it alone, under the names the folder's ingest gave them.
    assert knowledge("--json", "ingest", str(moved / "ops"), "--as", "docs/ops").json()["outcomes"] == {
        "unchanged": 1}
    (moved / "ops" / "runbook.md").write_text(RUNBOOK + "\n## Aftercare\n\nWrite the incident note.\n")
    (entry,) = knowledge("--json", "ingest", str(moved / "ops" / "runbook.md"), "--as",
                         "docs/ops/runbook.md").json()["files"]
    assert (entry["outcome"], entry["version"], entry["document_id"]) == (
        "new_version", 2, first["runbook.md"]["document_id"])
    assert len(knowledge("--json", "docs", "list").json()) == 2  # no second copy of anything


@pytest.mark.skipif(not semantic_available(), reason="the semantic extra is not installed: the arm cannot be on")
def test_read_only_commands_and_ingest_never_start_the_embedding_model(knowledge: Cli, docs: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KNOWLEDGE_SEMANTIC_ARM", "on")

    async def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("a command that does not embed started the embedder")

    monkeypatch.setattr(Embedder, "run", started)
    ingested = knowledge("--json", "ingest", str(docs / "ops"))  # queued for the arm, not embedded here
    assert ingested.code == 0, ingested.err
    assert ingested.json()["embedding_backlog"]["chunks"] == ingested.json()["files"][0]["chunks"] >= 1
    human = knowledge("ingest", str(docs / "notes.txt"))
    assert "knowledge worker" in human.out and "--wait-embedded" in human.out
    doc = knowledge("--json", "docs", "list").json()[0]["document_id"]
    for args in (("docs", "list"), ("docs", "show", doc), ("docs", "versions", doc), ("tenants",)):
        result = knowledge(*args)
        assert result.code == 0, (args, result.err)
    stats = knowledge("--json", "stats")
    assert stats.code == 0, stats.err
    backlog = stats.json()["embedding_backlog"]  # read from the queue, without the model
    assert backlog["model_version"].startswith("minilm") and backlog["windows_per_second"] == 0


def test_unreadable_entries_are_listed_among_the_outcomes(knowledge: Cli, docs: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (docs / "gone.md").symlink_to(docs / "nowhere.md")  # a dangling link: the file cannot be read
    (docs / "locked").mkdir()
    (docs / "locked" / "secret-plan.md").write_text("# Plan\n\nNever read.\n")
    scandir = os.scandir

    def refusing(path: Any = ".") -> Any:  # (as root, permissions cannot make a folder unreadable)
        if Path(path) == docs / "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    result = knowledge("--json", "ingest", str(docs))
    assert result.code == 1
    files = {Path(f["path"]).name: f for f in result.json()["files"]}
    assert (files["gone.md"]["reason"], files["locked"]["reason"]) == ("unreadable", "unreadable")
    assert "Permission denied" in files["locked"]["message"] and "secret-plan.md" not in files
    assert result.json()["outcomes"] == {"ingested": 2, "unreadable": 2, "unsupported_media_type": 1}
    human = knowledge("ingest", str(docs))
    assert "locked" in human.out and "folder not read: Permission denied" in " ".join(human.out.split())


def test_global_options_after_the_command_are_moved_before_it(knowledge: Cli, docs: Path, tenant: str) -> None:
    assert hoist_global_flags(["docs", "list", "--tenant", "x", "--json"]) == [
        "--tenant", "x", "--json", "docs", "list"]
    assert hoist_global_flags(["--tenant", "a", "search", "q", "--tenant=b"]) == [
        "--tenant", "a", "--tenant=b", "search", "q"]  # the last one wins, as click takes it
    assert hoist_global_flags(["db", "psql", "--tenant", "x"]) == ["db", "psql", "--tenant", "x"]
    assert hoist_global_flags(["ingest", "--", "--tenant", "x"]) == ["ingest", "--", "--tenant", "x"]
    other = f"{tenant}-b"
    assert knowledge("ingest", str(docs / "ops"), tenant_id=other).code == 0
    listed = knowledge("docs", "list", "--json", "--tenant", other)  # (the fixture's --tenant comes first)
    assert listed.code == 0 and [d["title"] for d in listed.json()] == ["runbook.md"]


def test_read_only_commands_read_without_the_service_and_fall_back_to_it_on_a_new_database(
        knowledge: Cli, docs: Path, admin_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a migrated database the read-only commands open one connection, on asyncio unless --loop
    says otherwise, and no `KnowledgeService`; on a database this version has not migrated yet
    they fall back to the service, which migrates it (then reads go the short way)."""
    assert knowledge("ingest", str(docs / "ops")).code == 0
    doc = knowledge("--json", "docs", "list").json()[0]["document_id"]
    chunk = knowledge("--json", "docs", "show", doc).json()["chunks"][0]["chunk_id"]
    opened: list[str] = []
    real_open = KnowledgeService.open

    def spying(*args: Any, **kwargs: Any) -> Any:
        opened.append("service")
        return real_open(*args, **kwargs)

    monkeypatch.setattr(KnowledgeService, "open", spying)
    real_run = interrupt.run
    loops: list[str] = []
    monkeypatch.setattr(interrupt, "run", lambda fn, backend: loops.append(backend) or real_run(fn, backend))
    reads = [("docs", "list"), ("docs", "show", doc[:8]), ("docs", "versions", doc), ("chunk", "show", chunk),
             ("tenants",), ("stats",)]
    for args in reads:
        result = knowledge(*args)
        assert result.code == 0, (args, result.err)
    assert opened == [] and loops == ["asyncio"] * len(reads)
    assert knowledge("--loop", "trio", "docs", "list").code == 0 and loops[-1] == "trio" and opened == []
    fresh = new_database(admin_dsn, migrated=False)
    assert knowledge("tenants", dsn=fresh).code == 0 and opened == ["service"]  # it migrated the database
    assert knowledge("tenants", dsn=fresh).code == 0 and opened == ["service"]


_CELL = st.text(st.sampled_from("abcXYZ019 -_.:/›é日本語ßø"), max_size=14)


@settings(max_examples=200, deadline=None)
@given(title=st.none() | _CELL.filter(lambda t: t.strip() == t and t != ""),
       columns=st.lists(_CELL.filter(bool), min_size=2, max_size=5),
       data=st.data())
def test_a_table_that_fits_is_written_as_rich_lays_it_out(title: str | None, columns: list[str],
                                                          data: st.DataObject) -> None:
    """`fitting_lines` (the fast path of `Output.table`) prints what rich would, to the character."""
    rows = data.draw(st.lists(st.lists(_CELL, min_size=len(columns), max_size=len(columns)), max_size=6))
    width = data.draw(st.integers(20, 120))
    lines = fitting_lines(title, columns, rows, width)
    table = Table(title=None if title is None else Text(title), title_justify="left", show_edge=False, pad_edge=False)
    for name in columns:
        table.add_column(Text(name), overflow="fold", no_wrap=True)
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    console = Console(file=io.StringIO(), soft_wrap=False, highlight=False, width=width)
    console.print(table)
    if lines is not None:
        assert "\n".join(lines) + "\n" == console.file.getvalue()  # type: ignore[attr-defined]
    else:  # only a table too wide for the line (or for its title) goes to rich
        total = sum(max(cell_len(c) for c in col) for col in zip(columns, *rows, strict=True)) + 3 * (len(columns) - 1)
        assert total > width or cell_len(title or "") > total
