#!/usr/bin/env python3
"""A small MCP server for arbor's MCP-client tests, written with the official Python SDK's
MCPServer: a tool that succeeds, one that fails, one that hangs, one that returns a large
result, one that kills the server, and one its granting tests keep from agents.

Usage: demo_mcp_server.py LOG_DIR [--http PORT]
Each start appends a line to LOG_DIR/starts, each `ok` call one to LOG_DIR/ok_calls, and
the process id is written to LOG_DIR/pid.
"""

import os
import sys
import time

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

log_dir = sys.argv[1]
os.makedirs(log_dir, exist_ok=True)
with open(os.path.join(log_dir, "starts"), "a") as f:
    f.write(f"{os.getpid()}\n")
with open(os.path.join(log_dir, "pid"), "w") as f:
    f.write(str(os.getpid()))

server = MCPServer("demo")


@server.tool(description="Says hello back (counts its calls).")
def ok(text: str) -> str:
    with open(os.path.join(log_dir, "ok_calls"), "a") as f:
        f.write(text + "\n")
    return f"ok: {text}"


@server.tool(description="Always fails.")
def fail() -> str:
    raise ValueError("the demo tool failed on purpose")


@server.tool(description="Never answers.")
def hang() -> str:
    time.sleep(3600)
    return "unreachable"


@server.tool(description="Returns 100000 bytes.")
def big() -> str:
    return "x" * 100_000


@server.tool(description="Kills the server mid-call.")
def die() -> str:
    os._exit(3)


@server.tool(description="Says which token the request carried.")
def whoami(ctx: Context) -> str:
    headers = ctx.headers or {}
    return f"token={headers.get('x-demo-token', '')}"


@server.tool(description="Not for every agent.")
def secret() -> str:
    return "the secret"


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[2] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[3]))
    else:
        server.run()
