"""An interrupted ``knowledge ingest --jsonl`` keeps the records of what committed (issue 37, item 7).

The command runs in-process on a service whose ingestor's fault hook stages the moment: the first
group of documents commits, then the next group, about to write, sends the process SIGINT (or
fails as a lost database would) and waits — every other group waits too — so exactly that first
group has committed when the command stops. With `settle` held (its database read never returns),
none of their records is written as they settle: each must still come, before the command ends,
from what the ingest reported. Every file gets exactly one record, each committed document one
saying so, and the summary says why the command stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from knowledge.cli import ingest_cmd
from knowledge.errors import DatabaseUnavailable
from knowledge.service import KnowledgeService
from tests.cli.test_cli import Cli, _documents, cli_runner

FILES = 40  # four groups of ten (`knowledge.ingest.bulk.group_limit`)


@pytest.fixture
def knowledge(capfd: pytest.CaptureFixture[str], database_dsn: str, tenant: str) -> Cli:
    return cli_runner(capfd, database_dsn, tenant)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(FILES):
        (root / f"note-{i:02}.md").write_text(f"# Note {i}\n\nThe pelican {i} nests by harbour {i}.\n")
    return root


class Stop:
    """The fault hook: the first group to write commits; the next one to reach ``before_write``
    (once that commit is in) stops the command — SIGINT to this process, then it and every later
    write wait until cancelled; or every later write fails as a lost database does."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.writes = 0
        self.stopped = False
        self.committed: anyio.Event | None = None

    async def __call__(self, step: str, conn: object) -> None:
        if self.committed is None:
            self.committed = anyio.Event()
        if step == "after_commit":
            self.committed.set()
        if step != "before_write":
            return
        self.writes += 1
        if self.writes == 1:
            return
        await self.committed.wait()
        if self.how == "database":  # every write from now on (each document of a failed group is tried alone)
            raise DatabaseUnavailable(message="the server went away")
        if not self.stopped:
            self.stopped = True
            os.kill(os.getpid(), signal.SIGINT)
        await anyio.sleep_forever()


def staged(monkeypatch: pytest.MonkeyPatch, how: str, *, hold_settle: bool) -> None:
    real_open = KnowledgeService.open

    @contextlib.asynccontextmanager
    async def opening(*args: Any, **kwargs: Any) -> AsyncIterator[KnowledgeService]:
        async with real_open(*args, **kwargs) as svc:
            svc.faults.ingest_step = Stop(how)
            yield svc

    monkeypatch.setattr(KnowledgeService, "open", opening)
    if hold_settle:
        async def held(*args: Any) -> Any:
            await anyio.sleep_forever()

        monkeypatch.setattr(ingest_cmd, "settle", held)


def records_of(out: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    records = [json.loads(line) for line in out.splitlines()]
    return records[:-1], records[-1]


def check_records(files: list[dict[str, Any]], stored: set[str], why: str) -> list[dict[str, Any]]:
    """One record a file; the committed documents' records are exactly the stored documents."""
    assert sorted(Path(r["path"]).name for r in files) == [f"note-{i:02}.md" for i in range(FILES)]
    committed = [r for r in files if r["outcome"] == "ingested"]
    assert len(committed) == len({r["document_id"] for r in committed})
    assert {r["document_id"] for r in committed} == stored
    assert 0 < len(stored) < FILES
    rest = [r for r in files if r["outcome"] != "ingested"]
    assert {(r["reason"], r["message"]) for r in rest} == {("not_ingested", why)}
    return committed


@pytest.mark.parametrize(("loop", "hold_settle"), [("trio", True), ("asyncio", True), ("trio", False)])
def test_an_interrupted_jsonl_ingest_writes_every_committed_document(
        knowledge: Cli, folder: Path, monkeypatch: pytest.MonkeyPatch, database_dsn: str, tenant: str,
        loop: str, hold_settle: bool) -> None:
    staged(monkeypatch, "signal", hold_settle=hold_settle)
    result = knowledge("--loop", loop, "--jsonl", "ingest", str(folder))
    assert result.code == 130 and result.err.strip() == "knowledge: interrupted", result
    files, summary = records_of(result.out)
    stored = _documents(database_dsn, tenant)
    committed = check_records(files, stored, "interrupted first")
    assert all(r["version"] == 1 and r["chunks"] in (1, None) for r in committed)  # (None: written unread)
    if hold_settle:
        assert all(r["chunks"] is None for r in committed)  # all written as the command stopped
    assert summary["interrupted"] == "SIGINT" and summary["exit_code"] == 130
    assert summary["outcomes"] == {"ingested": len(stored), "not_ingested": FILES - len(stored)}


def test_a_jsonl_ingest_cut_off_from_its_database_writes_every_committed_document(
        knowledge: Cli, folder: Path, monkeypatch: pytest.MonkeyPatch, database_dsn: str, tenant: str) -> None:
    staged(monkeypatch, "database", hold_settle=True)
    result = knowledge("--jsonl", "ingest", str(folder))
    assert result.code == 3 and "database unavailable" in result.one_error_line(), result
    files, summary = records_of(result.out)
    stored = _documents(database_dsn, tenant)
    committed = check_records(files, stored, "the database went away first")
    assert all(r["chunks"] is None for r in committed)  # all written as the command stopped
    assert summary["exit_code"] == 3 and summary["error"].startswith("database unavailable")
    assert summary["outcomes"] == {"ingested": len(stored), "not_ingested": FILES - len(stored)}
    assert f"{len(stored)} of {FILES} files were in" in result.err
