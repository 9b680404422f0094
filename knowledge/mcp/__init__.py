"""The tool domain (`knowledge.tools`) as a Model Context Protocol server: ``knowledge mcp``.

- `identity`: who asks — tenant, principal, scopes, origin trust, project, sensitivity ceiling —
  fixed by the server's configuration, never by a tool's arguments.
- `server`: the MCP server over one service: the registry's tools (one path to the corpus:
  `ToolRegistry.call`), the passages as structured content, cited chunks as resources.
- `stdio`: the newline-delimited JSON-RPC transport on the process's own stdin and stdout,
  cancellable at any moment (no reader thread).
- `http`: the same server as streamable HTTP on a local port (hypercorn, under either loop).
- `run`: a process that serves: the service opened, the transport run, SIGINT/SIGTERM and a
  client's disconnect closing everything in order.
"""
