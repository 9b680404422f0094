"""Play a benchmark script: under ``anyio.run`` on the loop named by argv[1], open a throwaway data
folder, start its embedded server, print the folder and the server's PID as JSON, then wait forever.
The tests SIGTERM it and check that the server is stopped and the folder removed."""

from __future__ import annotations

import json
import sys

import anyio

from knowledge.supervisors.embedded_pg import start_embedded_async, throwaway_data_dir


async def _run() -> None:
    with throwaway_data_dir("knowledge-sigterm-") as folder:
        server = await start_embedded_async(folder)
        print(json.dumps({"folder": str(folder), "pid": server.pid}), flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(_run, backend=sys.argv[1])
