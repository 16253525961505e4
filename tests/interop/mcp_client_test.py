#!/usr/bin/env python3
"""arbor as an MCP client: a spec declares a real MCP server (demo_mcp_server.py, written
with the official Python SDK's MCPServer) and grants its tools; a scripted child calls them
under durable approvals, over stdio, and over Streamable HTTP with a header whose secret
comes from the environment.

Checked:
- nothing runs before its approval; each approved call runs exactly once across processes;
- a tool that fails, one that hangs (the call's time limit), one with a large result (cut
  with a marker), a server that dies mid-run (that call and the next fail at once), each a
  classified tool error, never a hang;
- a child holds only what its entry grants AND its parent holds (`secret` is not granted);
- the server starts once per process that runs the tree, and is stopped when it ends;
- a server that cannot start is a classified error; a `${VAR}` that is not set is a usage
  error before the store is touched;
- over HTTP the header's secret reaches the server and is never stored.

Usage: mcp_client_test.py --arbor target/debug/arbor
"""

import argparse
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

from checks import Checks

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "demo_mcp_server.py")

check = Checks("mcp client")


def arbor(binary, *args, env=None, cwd=None):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


def stdio_spec(log_dir):
    return f"""
task = "Use the tools."
root = "lead"

[supervisor]
approvals = true

[mcp_servers.demo]
command = {json.dumps(sys.executable)}
args = [{json.dumps(SERVER)}, {json.dumps(log_dir)}]
call_timeout_ms = 2000
max_result_bytes = 1000

[agents.lead]
children = ["worker"]
tools = ["mcp:demo/ok", "mcp:demo/fail", "mcp:demo/hang", "mcp:demo/big", "mcp:demo/die"]

[[agents.lead.turns]]
tool_calls = [{{ name = "spawn_agent", arguments = {{ child_id = "worker", name = "worker", input = "Work." }} }}]

[[agents.lead.turns]]
text = "done"

[agents.worker]
tools = ["mcp:demo/*"]
tool_concurrency = 1

[[agents.worker.turns]]
tool_calls = [
  {{ name = "mcp__demo__ok", arguments = {{ text = "hi" }} }},
  {{ name = "mcp__demo__fail", arguments = {{}} }},
  {{ name = "mcp__demo__secret", arguments = {{}} }},
  {{ name = "mcp__demo__hang", arguments = {{}} }},
  {{ name = "mcp__demo__big", arguments = {{}} }},
]

[[agents.worker.turns]]
tool_calls = [
  {{ name = "mcp__demo__die", arguments = {{}} }},
  {{ name = "mcp__demo__ok", arguments = {{ text = "after" }} }},
]

[[agents.worker.turns]]
text = "worked"
"""


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def lines(path):
    try:
        with open(path) as f:
            return [l for l in f.read().splitlines() if l]
    except FileNotFoundError:
        return []


def tool_results(binary, store, session):
    out = arbor(binary, "log", session, "--store", store, "--json")
    results = []
    for line in out.stdout.splitlines():
        entry = json.loads(line)
        m = entry.get("message") or {}
        if entry.get("kind") == "message" and m.get("role") == "tool":
            results.append((m.get("name"), m.get("content", ""), m.get("is_error")))
    return results


def stdio(binary, tmp):
    log_dir = os.path.join(tmp, "log")
    spec = os.path.join(tmp, "stdio.toml")
    store = os.path.join(tmp, "stdio.db")
    with open(spec, "w") as f:
        f.write(stdio_spec(log_dir))
    t0 = time.monotonic()
    run = arbor(binary, "run", "--store", store, "--json", spec)
    check("stdio: the run suspends on the worker's MCP calls (exit 4)", run.returncode == 4,
          (run.returncode, run.stderr[-800:]))
    report = json.loads(run.stdout or "{}")
    root = report.get("root_session_id", "")
    suspensions = [report.get("suspension") or {}] + report.get("child_suspensions", [])
    pending = [p for s in suspensions for p in s.get("pending", [])]
    tools = sorted(p["tool"] for p in pending)
    check("stdio: every MCP call waits for approval first",
          tools == ["mcp__demo__big", "mcp__demo__fail", "mcp__demo__hang", "mcp__demo__ok",
                    "mcp__demo__secret"], tools)
    check("stdio: nothing ran before its approval", lines(os.path.join(log_dir, "ok_calls")) == [],
          lines(os.path.join(log_dir, "ok_calls")))
    pid = int(open(os.path.join(log_dir, "pid")).read())
    check("stdio: the server is stopped when the process's tree ends", not alive(pid), pid)

    rounds = 0
    code = run.returncode
    while code == 4 and rounds < 5:
        rounds += 1
        listed = arbor(binary, "approvals", root, "--store", store, "--json")
        ids = [p["id"] for s in json.loads(listed.stdout or "{}").get("suspensions", [])
               for p in s.get("pending", [])]
        if not ids:
            break
        approved = arbor(binary, "approve", root, *ids, "--store", store)
        if approved.returncode != 0:
            check("stdio: approve", False, approved.stderr)
            break
        resumed = arbor(binary, "resume", root, "--store", store, "--json")
        code = resumed.returncode
    elapsed = time.monotonic() - t0
    check("stdio: after two rounds of approvals the tree finishes", code == 0 and rounds == 2,
          (code, rounds))
    check("stdio: the hanging call cost its time limit, not a hang", elapsed < 60, elapsed)

    children = json.loads(arbor(binary, "ls", root, "--store", store, "--json").stdout)["children"]
    worker = children[0]["id"] if children else ""
    results = tool_results(binary, store, worker)
    by_name = {}
    for name, content, is_error in results:
        by_name.setdefault(name, []).append((content, is_error))
    check("stdio: the ok call answered", by_name.get("mcp__demo__ok", [("", True)])[0] == ("ok: hi", False),
          by_name.get("mcp__demo__ok"))
    check("stdio: the approved ok call ran exactly once",
          lines(os.path.join(log_dir, "ok_calls")) == ["hi"], lines(os.path.join(log_dir, "ok_calls")))
    fail = by_name.get("mcp__demo__fail", [("", False)])[0]
    check("stdio: a failing tool is a tool error naming the server and tool",
          fail[1] and fail[0].startswith("MCP server demo: fail failed"), fail)
    secret = by_name.get("mcp__demo__secret", [("", False)])[0]
    check("stdio: a tool the parent does not hold is not the child's",
          secret[1] and "unknown tool" in secret[0], secret)
    hang = by_name.get("mcp__demo__hang", [("", False)])[0]
    check("stdio: a hanging tool fails at its time limit",
          hang[1] and "took longer than 2000 ms" in hang[0], hang)
    big = by_name.get("mcp__demo__big", [("", True)])[0]
    check("stdio: a large result is cut to max_result_bytes with a marker",
          not big[1] and big[0].startswith("x" * 1000)
          and "[truncated: 1000 of 100000 bytes shown" in big[0], big[0][-200:])
    die = by_name.get("mcp__demo__die", [("", False)])[0]
    check("stdio: a server that dies mid-call is a classified error",
          die[1] and "MCP server demo is gone" in die[0], die)
    after = by_name.get("mcp__demo__ok", [None, ("", False)])
    check("stdio: the next call to the dead server fails at once",
          len(after) == 2 and after[1][1] and "MCP server demo is gone" in after[1][0], after)
    starts = lines(os.path.join(log_dir, "starts"))
    check("stdio: the server started once per process that ran the tree (run + 2 resumes)",
          len(starts) == 3 and len(set(starts)) == 3, starts)
    pid = int(open(os.path.join(log_dir, "pid")).read())
    check("stdio: the last server is stopped too", not alive(pid), pid)


def failures(binary, tmp):
    spec = os.path.join(tmp, "ghost.toml")
    with open(spec, "w") as f:
        f.write("""
task = "x"
[mcp_servers.ghost]
command = "/nonexistent/arbor-mcp-ghost"
startup_timeout_ms = 3000
[agents.root]
tools = ["mcp:ghost/*"]
[[agents.root.turns]]
text = "never"
""")
    t0 = time.monotonic()
    run = arbor(binary, "run", "--memory", spec)
    check("a server that cannot start is a classified error, at once",
          run.returncode != 0 and "MCP server ghost: cannot start" in run.stderr
          and time.monotonic() - t0 < 10, (run.returncode, run.stderr[-400:]))
    spec = os.path.join(tmp, "unset.toml")
    with open(spec, "w") as f:
        f.write("""
task = "x"
[mcp_servers.remote]
url = "http://127.0.0.1:9/mcp"
headers = { Authorization = "Bearer ${ARBOR_TEST_SURELY_UNSET}" }
[agents.root]
tools = ["mcp:remote/*"]
[[agents.root.turns]]
text = "never"
""")
    store = os.path.join(tmp, "unset.db")
    run = arbor(binary, "run", "--store", store, spec)
    check("an unset ${VAR} is a usage error naming it, before the store is touched",
          run.returncode == 2 and "ARBOR_TEST_SURELY_UNSET (mcp_servers.remote.headers.Authorization)"
          in run.stderr and not os.path.exists(store), (run.returncode, run.stderr))
    spec = os.path.join(tmp, "undeclared.toml")
    with open(spec, "w") as f:
        f.write('task = "x"\n[agents.root]\ntools = ["mcp:nowhere/*"]\n[[agents.root.turns]]\ntext = "n"\n')
    run = arbor(binary, "run", "--memory", spec)
    check("a grant of an undeclared server is a usage error naming it",
          run.returncode == 2 and "not declared ([mcp_servers.nowhere])" in run.stderr, run.stderr)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(binary, tmp):
    port = free_port()
    log_dir = os.path.join(tmp, "http-log")
    server = subprocess.Popen([sys.executable, SERVER, log_dir, "--http", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        spec = os.path.join(tmp, "http.toml")
        with open(spec, "w") as f:
            f.write(f"""
task = "Who am I?"
root = "lead"
[redaction]
env = ["DEMO_TOKEN"]
[mcp_servers.remote]
url = "http://127.0.0.1:{port}/mcp"
headers = {{ X-Demo-Token = "${{DEMO_TOKEN}}" }}
[agents.lead]
tools = ["mcp:remote/whoami"]
[[agents.lead.turns]]
tool_calls = [{{ name = "mcp__remote__whoami", arguments = {{}} }}]
[[agents.lead.turns]]
text = "asked"
""")
        store = os.path.join(tmp, "http.db")
        env = dict(os.environ, DEMO_TOKEN="s3cret-demo-token")
        run = arbor(binary, "run", "--store", store, "--json", spec, env=env)
        report = json.loads(run.stdout or "{}")
        root = report.get("root_session_id", "")
        results = tool_results(binary, store, root)
        # The server echoes the header it got; the spec's redaction replaces exactly that
        # value, so the redacted answer proves the secret reached the server.
        check("http: the call reached the server with the header's secret, redacted after",
              run.returncode == 0
              and results == [("mcp__remote__whoami", "token=[REDACTED]", False)],
              (run.returncode, results, run.stderr[-400:]))
        db = sqlite3.connect(store)
        kept = " ".join(str(v) for row in db.execute("SELECT meta FROM sessions") for v in row)
        check("http: the kept definition reads ${DEMO_TOKEN}", "${DEMO_TOKEN}" in kept, kept[:300])
        db.close()
        with open(store, "rb") as f:
            raw = f.read()
        for suffix in ("-wal",):
            if os.path.exists(store + suffix):
                with open(store + suffix, "rb") as f:
                    raw += f.read()
        check("http: the secret is nowhere in the store", b"s3cret-demo-token" not in raw,
              raw.count(b"s3cret-demo-token"))
    finally:
        server.terminate()
        server.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arbor", required=True)
    args = ap.parse_args()
    binary = os.path.abspath(args.arbor)
    with tempfile.TemporaryDirectory() as tmp:
        stdio(binary, tmp)
        failures(binary, tmp)
        http(binary, tmp)
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
