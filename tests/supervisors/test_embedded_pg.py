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


def _hold(data_dir: Path, mode: str = "hold") -> tuple[subprocess.Popen[str], dict[str, object]]:
    proc = subprocess.Popen([*HOLDER, str(data_dir), mode], stdout=subprocess.PIPE, text=True,
                            stdin=subprocess.PIPE if mode == "wait" else None)
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


def _leave(holder: subprocess.Popen[str]) -> None:
    """Let a ``wait`` holder exit cleanly (its exit handlers run) and reap it."""
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.close()
    assert holder.wait(60) == 0
    holder.stdout.close()


def test_a_server_the_operator_started_is_left_running_by_every_holder(data_dir: Path) -> None:
    """``knowledge db start`` (cleanup_mode None) owns the server: a host that joins it and exits,
    even as its last holder, only detaches (issue 37: a library host stopped the operator's server)."""
    operator = _run(data_dir, "operator")  # as `knowledge db start` does, in a process that then exits
    assert json.loads((data_dir / "pgdata" / ".knowledge_owner.json").read_text()) == {"owner": "operator"}
    joined = _run(data_dir)  # the last holder, and it leaves
    assert joined["reused"] is True and joined["pid"] == operator["pid"]
    assert _server_running(data_dir)
    assert stop_embedded(data_dir) is True and not _server_running(data_dir)


def test_a_server_a_process_started_is_stopped_by_it_and_never_by_one_that_joined(data_dir: Path) -> None:
    owner, facts = _hold(data_dir, "wait")
    assert facts["reused"] is False
    joined = _run(data_dir)  # joins and exits: detaches only, the owner still works
    assert joined["reused"] is True and _server_running(data_dir)
    _leave(owner)  # the owner, the last holder, exits: it stops the server it started
    assert not _server_running(data_dir)


def test_an_owner_that_leaves_first_leaves_the_server_to_the_last_holder(data_dir: Path) -> None:
    owner, _ = _hold(data_dir, "wait")
    other, facts = _hold(data_dir, "wait")
    assert facts["reused"] is True
    _leave(owner)
    assert _server_running(data_dir)  # another process still uses it
    _leave(other)  # the last one out of a server whose owner is gone stops it
    assert not _server_running(data_dir)


def test_operator_start_takes_over_a_running_server(data_dir: Path) -> None:
    """``knowledge db start`` on a server a host started: from then on it runs until ``db stop``."""
    owner, _ = _hold(data_dir, "wait")
    start_embedded(data_dir, cleanup_mode=None)
    _leave(owner)
    assert _server_running(data_dir)


def test_data_dir_under_root_is_refused() -> None:
    with pytest.raises(EmbeddedServerError, match="/root"):
        start_embedded(Path("/root/knowledge-data"))


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's background job (`cmd &`) starts


@pytest.mark.parametrize("sigint", ["handled", "ignored"])
@pytest.mark.parametrize("loop", ["trio", "asyncio"])
def test_a_sigterm_run_stops_its_throwaway_server_and_removes_the_folder(loop: str, sigint: str) -> None:
    """A benchmark killed by SIGTERM (``timeout``, ``kill``) unwinds as on Ctrl-C: its throwaway
    server is stopped and the folder removed, under both loops (the default action left both) —
    also where SIGINT is ignored, as in a background job, where turning SIGTERM into SIGINT alone
    would make SIGTERM do nothing."""
    run = subprocess.Popen([sys.executable, "-m", "tests.helpers.throwaway_run", loop], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           preexec_fn=_ignore_sigint if sigint == "ignored" else None)
    assert run.stdout is not None
    started = json.loads(run.stdout.readline())
    folder, postmaster = Path(started["folder"]), psutil.Process(started["pid"])
    try:
        assert folder.is_dir() and postmaster.is_running()
        run.send_signal(signal.SIGTERM)
        run.communicate()  # no clock: the run ends by itself or the test hangs, visibly
        assert not folder.exists()
        assert not postmaster.is_running() or postmaster.status() == psutil.STATUS_ZOMBIE
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        stop_embedded(folder)
        shutil.rmtree(folder, ignore_errors=True)
