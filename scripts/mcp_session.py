"""A session of an MCP client with ``knowledge mcp``, printed as a transcript (the README shows one).

    .venv/bin/python scripts/mcp_session.py ../shared/corpus/docs-etcd ["a question"] [--loop trio|asyncio]

It ingests the folder's Markdown files into the tenant ``mcp-demo`` (as ``alice``; unless an earlier
run did), then does what a host does: spawns ``knowledge mcp`` over stdio with
the SDK's own `ClientSession`, initializes, lists the tools and the resource templates, calls
``knowledge.search`` and opens the first citation as a resource; each exchange is printed (the
text the model reads, the structured passages a host shows), then the server's own lines (stderr).
The database is ``$KNOWLEDGE_DSN``, else the embedded server (this process's service holds it while
the MCP server, which joins it, runs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

from knowledge import KnowledgeService, Principal, TrustLevel
from knowledge.errors import IngestRefused

TENANT = "mcp-demo"
QUESTION = "How do I restore an etcd cluster from a snapshot?"


async def ingest(svc: KnowledgeService, folder: Path) -> int:
    alice = Principal(tenant_id=TENANT, principal_id="alice", scopes=frozenset({"knowledge.write"}))
    files = await anyio.to_thread.run_sync(lambda: [(p, p.read_bytes()) for p in sorted(folder.rglob("*.md"))])
    for path, data in files:
        ref = await svc.put_artifact(TENANT, data, media_type="text/markdown")
        with contextlib.suppress(IngestRefused):  # (a file holding a credential: refused, as it should be)
            await svc.ingest(ref, str(path.relative_to(folder)), "tenant", alice, origin_trust=TrustLevel.USER)
    return len(files)


def _show(label: str, text: str, lines: int = 4, width: int = 96) -> None:
    """The first ``lines`` lines of ``text``, each cut at ``width``, and how many more there are."""
    shown = text.splitlines()
    for i, line in enumerate(shown[:lines]):
        line = line if len(line) <= width else line[:width - 1] + "…"
        print(f"{label if i == 0 else ' ' * len(label)}{line}")
    if len(shown) > lines:
        print(f"{' ' * len(label)}… ({len(shown) - lines} more lines)")


async def session(question: str, loop: str, dsn: str | None, log: Path) -> None:
    command = [sys.executable, "-m", "knowledge", "--tenant", TENANT, "--principal", "alice", "--loop", loop, "mcp"]
    env = {k: os.environ[k] for k in ("KNOWLEDGE_SEMANTIC_ARM", "KNOWLEDGE_DATA_DIR") if k in os.environ}
    if dsn:
        env["KNOWLEDGE_DSN"] = dsn
    print(f"$ {' '.join(['knowledge', *command[3:]])}      # spawned by the client, over stdio")
    with log.open("w") as errlog:
        async with stdio_client(StdioServerParameters(command=command[0], args=command[1:], env=env),
                                errlog=errlog) as (read, write), ClientSession(read, write) as client:
            hello = await client.initialize()
            print(f"initialize      -> {hello.server_info.name} {hello.server_info.version} "
                  f"(protocol {hello.protocol_version})")
            tools = (await client.list_tools()).tools
            print(f"tools/list      -> {', '.join(t.name for t in tools)}")
            templates = (await client.list_resource_templates()).resource_templates
            print(f"templates/list  -> {', '.join(t.uri_template for t in templates)}")
            print(f'tools/call      knowledge.search {{"text": "{question}"}}')
            result = await client.call_tool("knowledge.search", {"text": question})
            assert isinstance(result, types.CallToolResult) and not result.is_error, result
            text = next(c.text for c in result.content if isinstance(c, types.TextContent))
            _show("  text       ", text)
            passages = (result.structured_content or {})["passages"]
            for p in passages:
                path = " > ".join(p["heading_path"])
                print(f"  structured  {p['chunk_id']}  {p['title']}  {path}  relevance {p['relevance']:.2f}")
            links = [c for c in result.content if isinstance(c, types.ResourceLink)]
            print(f"  links       {len(links)} resource_link: {', '.join(str(c.uri) for c in links[:1])}…")
            if passages:
                opened = (await client.read_resource(passages[0]["citation"])).contents[0]
                assert isinstance(opened, types.TextResourceContents)
                meta = opened.meta or {}
                print(f"resources/read  {passages[0]['citation']} -> {len(opened.text)} characters, "
                      f"version {meta.get('version')}, deleted {str(meta.get('deleted')).lower()}")
    print("(the client closed the server's stdin; the server's stderr:)")
    for line in (await anyio.Path(log).read_text()).splitlines():
        print(f"  {line}")


async def main(folder: Path, question: str, loop: str) -> None:
    dsn = os.environ.get("KNOWLEDGE_DSN")
    async with KnowledgeService.open() as svc:
        held = (await svc.corpus_size(TENANT)).documents if await svc.tenant_known(TENANT) else 0
        if held:
            print(f"tenant {TENANT!r} already holds {held} documents (a run before this one ingested them)")
        else:
            print(f"ingested {await ingest(svc, folder)} Markdown files into tenant {TENANT!r}")
        with tempfile.TemporaryDirectory() as tmp:
            await session(question, loop, dsn or svc.dsn, Path(tmp) / "server.log")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("question", nargs="?", default=QUESTION)
    parser.add_argument("--loop", choices=["trio", "asyncio"], default="trio")
    args = parser.parse_args()
    anyio.run(main, args.folder, args.question, args.loop, backend=args.loop)
