"""The README tells the truth (issue 20 §5): its CLI tour is run command by command — through a
pseudo-terminal, as a person sees it — and its main-job transcript is run again; every line the
README shows must appear in what they print, where it does not depend on the clock.

A README line matches an output line when they are equal after masking what changes from run to
run (durations, rates, instants, the corpus folder's location) and ``…`` in the README stands for
anything. A line that is only ``…`` is skipped.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.cli.test_cli_habits import run_in_pty

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The README and the pages it links: the CLI tour is in docs/cli.md, the main job's transcript in docs/main-job.md.
DOCS = (README, *sorted((ROOT / "docs").glob("*.md")))
CORPUS = ROOT.parent / "shared" / "corpus"

_MASKS = [
    (re.compile(r"\x1b\[[0-9;?]*[A-Za-z]"), ""),  # a terminal's colours
    (re.compile(r"\S*/shared/corpus"), "<corpus>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(\+00:00|Z| UTC)?"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)? ?(MB|kB)/s\b"), "<rate>"),
    (re.compile(r"\b\d+(\.\d+)? ?(ms|s)\b"), "<duration>"),
]


def normal(line: str) -> str:
    for pattern, replacement in _MASKS:
        line = pattern.sub(replacement, line)
    return line.rstrip()


def matches(expected: str, output: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in normal(expected).split("…"))
    return any(re.fullmatch(pattern, normal(line)) for line in output.splitlines())


def missing(expected: list[str], output: str) -> list[str]:
    return [line for line in expected if line.strip() != "…" and line.strip() and not matches(line, output)]


def block(after: str, fence: str) -> list[str]:
    """The lines of the first ``fence`` block after the text ``after`` in the README or the docs it
    links (`DOCS`)."""
    text = "\n".join(path.read_text(encoding="utf-8") for path in DOCS)
    start = text.index(fence, text.index(after)) + len(fence)
    return text[start:text.index("```", start)].strip("\n").splitlines()


def require_corpus() -> None:
    if not CORPUS.is_dir():
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"{CORPUS} is missing")


@pytest.mark.slow
def test_the_readme_cli_tour_prints_what_the_readme_shows(database_dsn: str) -> None:
    require_corpus()
    env = {**os.environ, "KNOWLEDGE_DSN": database_dsn, "COLUMNS": "100"}
    env.pop("KNOWLEDGE_DATA_DIR", None)
    command: list[str] = []
    steps: list[tuple[list[str], list[str]]] = []
    for line in block("A tour, on a terminal", "```console\n"):
        if line.startswith("$ export "):
            name, value = line.removeprefix("$ export ").split("=", 1)
            env[name] = value
        elif line.startswith("$ K="):
            command = [str(Path(sys.executable).parent / "knowledge"), *shlex.split(shlex.split(line[4:])[0])[1:]]
        elif line.startswith("$ $K "):
            args = shlex.split(re.sub(r"\s{2,}#.*$", "", line.removeprefix("$ $K ")))
            steps.append((args, []))
        else:
            steps[-1][1].append(line)
    assert command and len(steps) >= 8
    for args, expected in steps:
        output = run_in_pty(*command, *args, env=env, cwd=ROOT, check=False)
        assert not missing(expected, output), (args, missing(expected, output), output[-3000:])


@pytest.mark.slow
def test_the_readme_main_job_transcript_is_what_the_job_prints(database_dsn: str) -> None:
    require_corpus()
    env = {**os.environ, "KNOWLEDGE_DSN": database_dsn, "COLUMNS": "200"}
    job = subprocess.run([sys.executable, "-m", "knowledge.demo", str(CORPUS / "docs-etcd")], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600, check=True)
    # Not compared: the embedded server's start (the test's server is another) and what the semantic
    # arm prints while its model loads (the suite runs lexical-only).
    expected = [line for line in block("What the main job does today", "```\n")
                if not line.startswith("embedded PostgreSQL") and "semantic" not in line]
    assert len(expected) > 15
    assert not missing(expected, job.stdout), (missing(expected, job.stdout), job.stdout[-3000:])


@pytest.mark.slow
def test_the_readme_mcp_session_is_what_the_script_prints(database_dsn: str) -> None:
    require_corpus()
    lines = block("as a host runs it (`scripts/mcp_session.py`", "```console\n")
    command = shlex.split(lines[0].removeprefix("$ "))
    assert command[:2] == ["KNOWLEDGE_SEMANTIC_ARM=off", ".venv/bin/python"], command
    env = {**os.environ, "KNOWLEDGE_DSN": database_dsn, "KNOWLEDGE_SEMANTIC_ARM": "off"}
    run = subprocess.run([sys.executable, *command[2:]], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=600, check=True)
    assert len(lines) > 15
    assert not missing(lines[1:], run.stdout), (missing(lines[1:], run.stdout), run.stdout[-3000:])


async def test_the_readme_mcp_configuration_starts_a_server_that_offers_both_tools(
        database_dsn: str, tmp_path: Path, anyio_backend_name: str) -> None:
    """The ``mcpServers`` block, pasted into a client as it is (the clone's path filled in), spawns a
    server the client can initialize and list tools from."""
    import json

    from mcp import ClientSession, StdioServerParameters, stdio_client

    text = await anyio.to_thread.run_sync(block, "Paste this into the client's MCP configuration", "```json\n")
    config = json.loads("\n".join(text))
    server = config["mcpServers"]["knowledge"]
    assert server["command"] == "/path/to/knowledge/.venv/bin/knowledge"
    command = str(Path(sys.executable).parent / "knowledge")  # the clone's .venv/bin/knowledge
    env = {"KNOWLEDGE_DSN": database_dsn, "KNOWLEDGE_SEMANTIC_ARM": "off", **server.get("env", {})}
    with (tmp_path / "server.log").open("w") as errlog:  # (a file the child writes; opened before the loop reads)
        async with stdio_client(StdioServerParameters(command=command, args=server["args"], env=env),
                                errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            assert [t.name for t in (await session.list_tools()).tools] == ["knowledge.search", "knowledge.ingest"]
