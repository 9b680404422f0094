"""The embedded server: reused across starts, and recovered after its holder or itself is SIGKILLed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from knowledge.errors import EmbeddedServerError
from knowledge.supervisors.embedded_pg import embedded_status, start_embedded, stop_embedded

pytestmark = pytest.mark.skipif(bool(os.environ.get("KNOWLEDGE_DSN")), reason="embedded server only")

HOLDER = [sys.executable, "-m", "tests.helpers.hold_server"]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="knowledge-emb-"))
    yield path
    stop_embedded(path)
    shutil.rmtree(path, ignore_errors=True)


def _run(data_dir: Path, mode: str = "exit") -> dict[str, object]:
    out = subprocess.run([*HOLDER, str(data_dir), mode], capture_output=True, text=True, timeout=120, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _hold(data_dir: Path) -> tuple[subprocess.Popen[str], dict[str, object]]:
    proc = subprocess.Popen([*HOLDER, str(data_dir), "hold"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, dict(json.loads(line))


def _kill(holder: subprocess.Popen[str]) -> None:
    """SIGKILL a holder and reap it (its stdout pipe closed: no ResourceWarning)."""
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    if holder.stdout is not None:
        holder.stdout.close()


def _server_running(data_dir: Path) -> bool:
    return embedded_status(data_dir) is not None


def test_start_again_reuses_the_data_and_the_last_holder_stops_it(data_dir: Path) -> None:
    first = _run(data_dir)
    assert first["cold"] is True and first["rows"] == 1
    assert not _server_running(data_dir)  # the only holder exited cleanly: server stopped
    second = _run(data_dir)
    assert second["cold"] is False and second["rows"] == 2  # same data, warm start
    assert not _server_running(data_dir)


def test_sigkilled_holder_leaves_a_server_the_next_start_reuses_and_stops(data_dir: Path) -> None:
    holder, facts = _hold(data_dir)
    _kill(holder)
    assert _server_running(data_dir)  # orphaned, with the dead PID still in its holder list
    handles = json.loads((data_dir / "pgdata" / ".handle_pids.json").read_text())
    assert holder.pid in handles

    again = _run(data_dir)
    assert again["reused"] is True and again["pid"] == facts["pid"] and again["rows"] == 2
    # The dead holder was pruned, so the clean exit of the last live holder stopped the server.
    assert not _server_running(data_dir)


def test_sigkilled_server_leaves_a_stale_pid_file_and_a_fresh_start_works(data_dir: Path) -> None:
    holder, facts = _hold(data_dir)
    postmaster = psutil.Process(int(str(facts["pid"])))
    postmaster.kill()
    postmaster.wait(10)
    _kill(holder)
    assert (data_dir / "pgdata" / "postmaster.pid").exists()  # stale
    again = _run(data_dir)
    assert again["reused"] is False and again["pid"] != facts["pid"] and again["rows"] == 2
    assert not _server_running(data_dir)


def test_in_process_start_is_idempotent_and_reports_status(data_dir: Path) -> None:
    first = start_embedded(data_dir, cleanup_mode=None)
    second = start_embedded(data_dir, cleanup_mode=None)
    assert second.pid == first.pid and second.reused
    status = embedded_status(data_dir)
    assert status is not None and status.pid == first.pid
    assert stop_embedded(data_dir) is True
    assert embedded_status(data_dir) is None
    assert stop_embedded(data_dir) is False
    third = start_embedded(data_dir, cleanup_mode=None)  # started again after an explicit stop
    assert third.pid != first.pid and not third.reused


def test_data_dir_under_root_is_refused() -> None:
    with pytest.raises(EmbeddedServerError, match="/root"):
        start_embedded(Path("/root/knowledge-data"))
