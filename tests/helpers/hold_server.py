"""Start (or join) the embedded server for a data dir, print its facts as JSON, then exit, sleep
(``hold``: the tests SIGKILL it; ``operator``: started as ``knowledge db start`` starts it, then
exit) or wait for its standard input to close and exit cleanly (``wait``).

Used by the tests to play host processes that start, join and leave the server."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio

from knowledge.store.db import Database, open_bridge
from knowledge.supervisors.embedded_pg import start_embedded


async def _probe(dsn: str) -> int:
    async with open_bridge() as bridge, Database.open(dsn, bridge=bridge, min_size=1, max_size=1) as db:
        await db.execute("CREATE TABLE IF NOT EXISTS survives (x int)")
        await db.execute("INSERT INTO survives VALUES (1)")
        return int(await db.fetchval("SELECT count(*) FROM survives"))


def main() -> None:
    data_dir, mode = Path(sys.argv[1]), sys.argv[2]
    server = start_embedded(data_dir, cleanup_mode=None if mode == "operator" else "stop")  # operator: `db start`
    rows = anyio.run(_probe, server.dsn("postgres"))
    print(json.dumps({"pid": server.pid, "reused": server.reused, "cold": server.cold_start, "rows": rows,
                      "seconds": server.start_seconds}), flush=True)
    if mode == "hold":
        time.sleep(3600)
    elif mode == "wait":
        sys.stdin.read()  # until the test closes it: then a clean exit (the exit handlers run)


if __name__ == "__main__":
    main()
