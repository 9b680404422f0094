"""Start-up of the ``knowledge`` console script: ``--help``, ``--version`` and every read-only
command, against baselines measured in the same run (issue 20: under 0.5 s on a quiet machine).

    .venv/bin/python scripts/bench_cli_startup.py [--runs 9] [--dsn DSN] [--folder DIR]

Without ``--dsn`` the script starts an embedded server in a throwaway data directory (as
``knowledge db start`` does, so every command joins it, as an operator's would) and stops it at
the end. It ingests ``--folder`` (default ../shared/corpus/docs-etcd: 96 Markdown files) into a
tenant of its own, then runs each command ``--runs`` times, one at a time, output to a pipe.

Baselines, each a whole process too:

- ``python -c pass``: this interpreter's own start, the floor no command goes under;
- ``raw asyncpg``: connect and run the same listing query as ``docs list`` with asyncpg on plain
  asyncio, print the rows — what the command does, minus the CLI, its checks and its table;
- ``docs list via the service``: the same listing through a whole ``KnowledgeService`` (as every
  command opened one before read-only commands got their own path).

Prints min / median / max seconds and the median's ratio to the raw-asyncpg baseline; asserts
nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
SCRIPT = str(Path(sys.executable).parent / "knowledge")

RAW_ASYNCPG = """
import asyncio, sys, asyncpg
async def main(dsn, tenant):
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT d.document_id, d.version, d.title, d.ingested_at, "
            "(SELECT count(*) FROM knowledge_chunks k WHERE k.tenant_id = d.tenant_id AND k.document_id = d.document_id"
            " AND k.version = d.version AND k.chunker_version = d.chunker_version) AS chunks "
            "FROM knowledge_documents d WHERE d.tenant_id = $1 AND d.valid_to IS NULL "
            "ORDER BY d.ingested_at DESC, d.document_id LIMIT 1000", tenant)
    finally:
        await conn.close()
    for r in rows:
        print(r["document_id"], r["version"], r["title"], r["chunks"], f"{r['ingested_at']:%Y-%m-%d}")
asyncio.run(main(sys.argv[1], sys.argv[2]))
"""

VIA_SERVICE = """
import sys, anyio
from knowledge.config import Settings
from knowledge.service import KnowledgeService
async def main(dsn, tenant):
    async with KnowledgeService.open(Settings(dsn=dsn, semantic_arm=False, pool_max_size=4)) as svc:
        for d in await svc.documents(tenant, limit=1000):
            print(d.document_id, d.version, d.title, d.chunks, f"{d.ingested_at:%Y-%m-%d}")
anyio.run(main, sys.argv[1], sys.argv[2], backend="trio")
"""


def timed(command: list[str], runs: int, env: dict[str, str]) -> list[float]:
    seconds = []
    for _ in range(runs):
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, env=env, check=False)
        seconds.append(time.perf_counter() - began)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.decode()[-400:]}")
    return seconds


def knowledge(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"knowledge {' '.join(args)} failed: {done.stderr[-400:]}")
    return done.stdout


def measure(dsn: str, where: list[str], env: dict[str, str], folder: Path, runs: int) -> None:
    """``where``: how the commands find the server (``--dsn``, or ``--data-dir`` of the running
    embedded one); ``dsn``: for the baselines."""
    tenant = f"bench-start-{uuid.uuid4().hex[:8]}"
    cli = [SCRIPT, *where, "--tenant", tenant]
    knowledge(*cli[1:], "ingest", str(folder), env=env)
    doc = json.loads(knowledge(*cli[1:], "--json", "docs", "list", env=env))[0]["document_id"]
    chunk = json.loads(knowledge(*cli[1:], "--json", "docs", "show", doc, env=env))["chunks"][0]["chunk_id"]
    cases: list[tuple[str, list[str]]] = [
        ("python -c pass (the floor)", [sys.executable, "-c", "pass"]),
        ("raw asyncpg listing (baseline)", [sys.executable, "-c", RAW_ASYNCPG, dsn, tenant]),
        ("docs list via the service", [sys.executable, "-c", VIA_SERVICE, dsn, tenant]),
        ("knowledge --help", [SCRIPT, "--help"]),
        ("knowledge --version", [SCRIPT, "--version"]),
        ("docs list", [*cli, "docs", "list"]),
        ("docs list --loop trio", [*cli, "--loop", "trio", "docs", "list"]),
        ("docs show PREFIX", [*cli, "docs", "show", doc[:8]]),
        ("docs versions ID", [*cli, "docs", "versions", doc]),
        ("chunk show ID", [*cli, "chunk", "show", chunk]),
        ("tenants", [*cli, "tenants"]),
        ("stats", [*cli, "stats"]),
    ]
    results = {name: timed(command, runs, env) for name, command in cases}
    base = statistics.median(results["raw asyncpg listing (baseline)"])
    print(f"{'command':34} {'min s':>7} {'median s':>9} {'max s':>7}  {'× raw asyncpg':>13}")
    for name, seconds in results.items():
        median = statistics.median(seconds)
        print(f"{name:34} {min(seconds):7.3f} {median:9.3f} {max(seconds):7.3f}  {median / base:13.2f}")
    print(f"({runs} runs each; the commands reach the server by {where[0]}; {folder.name} ingested; "
          "output to a pipe)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--dsn", help="an external server (default: a throwaway embedded one)")
    parser.add_argument("--folder", type=Path, default=CORPUS / "docs-etcd")
    args = parser.parse_args()
    if not args.folder.is_dir():
        raise SystemExit(f"no folder {args.folder} (the corpus is ../shared/corpus beside the clone)")
    env = {k: v for k, v in os.environ.items() if k != "KNOWLEDGE_DSN"}
    if args.dsn:
        measure(args.dsn, ["--dsn", args.dsn], env, args.folder, args.runs)
        return
    from knowledge.supervisors.embedded_pg import throwaway_data_dir

    with throwaway_data_dir() as data_dir:
        status = knowledge("--data-dir", str(data_dir), "--json", "db", "start", env=env)
        try:
            dsn = json.loads(status)["dsn"]
            measure(dsn, ["--data-dir", str(data_dir)], env, args.folder, args.runs)
        finally:
            knowledge("--data-dir", str(data_dir), "db", "stop", env=env)


if __name__ == "__main__":
    main()
