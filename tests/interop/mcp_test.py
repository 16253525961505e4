#!/usr/bin/env python3
"""arbor's MCP server against the official Python SDK client (PyPI `mcp`, pinned in
requirements.txt), over stdio (`arbor mcp SPEC`) and Streamable HTTP (`/mcp` in `arbor
serve`), with both protocol revisions: mode "auto" negotiates 2026-07-28 (stateless),
mode "legacy" 2025-11-25 (initialize, sessions).

Each transport and mode runs the same checks:
- the protocol version and the server's name;
- tools/list: exactly the root's tools, spawn_agent's child_id closed to the root's children;
- a sync spawn answers the child's text, with progress notifications;
- bad arguments and an unknown child are tool errors naming the field;
- an async spawn returns a handle at once; cancel_agent cancels it (and its own child,
  which its result lists as stopped); wait_agent says cancelled;
- list_children shows own and aggregate tokens;
- a message-mode child's answer is read with read_messages; send_message gets another;
- durable approvals: a sync spawn whose child waits for approval answers `suspended` with
  the pending call; list_approvals lists it; decide_approval allows it and resumes the child;
  wait_agent gives its answer; the approved call ran exactly once; deciding again is refused.
- a question (ask_human): over stdio with a client that takes elicitations (2025-11-25), the
  child's question is put to the client, its choices as an enum, and the sync spawn returns
  the child's answer; with the 2026-07-28 revision (no server-to-client requests) the spawn
  answers `suspended` with the question, and decide_approval's `answer` goes on.
- read_child, when the spec names it: the root reads the rest of a child's capped answer;
  another family's id answers as an unknown one.
- coding children, when the root's spec lists diff_child, merge_child and discard_child:
  the client reads a child's diff, merges it (once: a second merge changes nothing) and
  discards it; an unknown child is a tool error.
Over HTTP, two stateless clients see the same tree, and a bad token is refused.
Afterwards `arbor tree` shows each client's root with its children.

Usage: mcp_test.py --arbor target/debug/arbor
Prints one line per check and `N passed, N failed`; exits 1 on any failure.
"""

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import httpx2
import mcp.types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from checks import Checks

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MCP_SPEC = os.path.join(ROOT, "examples", "mcp.toml")
APPROVALS_SPEC = os.path.join(ROOT, "examples", "approvals.toml")
QUESTION_SPEC = os.path.join(ROOT, "examples", "question.toml")

EXPECTED_TOOLS = {
    "spawn_agent", "wait_agent", "cancel_agent", "list_children", "send_message",
    "rename_child", "find_models", "list_approvals", "decide_approval", "read_messages",
}

check = Checks("mcp")


def text_of(result):
    return " ".join(getattr(c, "text", "") for c in result.content)


async def tree_checks(c, label, mode):
    version = {"auto": "2026-07-28", "legacy": "2025-11-25"}[mode]
    check(f"{label}: protocol {version}", c.protocol_version == version, c.protocol_version)
    check(f"{label}: server name arbor", c.server_info and c.server_info.name == "arbor",
          c.server_info)

    tools = {t.name: t for t in (await c.list_tools()).tools}
    check(f"{label}: tools/list has exactly the root's tools", set(tools) == EXPECTED_TOOLS,
          sorted(tools))
    schema = tools["spawn_agent"].input_schema
    check(f"{label}: spawn_agent's child_id is closed to the root's children",
          schema["properties"]["child_id"].get("enum") == ["researcher", "scout", "watcher"]
          and schema.get("additionalProperties") is False
          and set(schema.get("required", [])) == {"child_id", "input"}, schema)

    progress = []

    async def on_progress(p, total, message):
        progress.append(message)

    started = time.monotonic()
    r = await c.call_tool("spawn_agent", {"child_id": "researcher", "input": "What is it?",
                                          "name": "first"}, progress_callback=on_progress)
    sc = r.structured_content or {}
    check(f"{label}: a sync spawn answers the child's text",
          not r.is_error and sc.get("status") == "succeeded" and sc.get("text") == "Found it: 42.",
          r)
    check(f"{label}: progress notifications while it ran",
          any(m and m.startswith("researcher:") for m in progress), progress)

    r = await c.call_tool("spawn_agent", {"child_id": "nobody", "input": "x"})
    check(f"{label}: an unknown child is a tool error naming child_id",
          r.is_error and "child_id" in text_of(r), text_of(r))
    r = await c.call_tool("spawn_agent", {"child_id": "researcher", "input": "x", "tools": ["rm"]})
    check(f"{label}: an extra argument is a tool error naming it",
          r.is_error and "tools" in text_of(r), text_of(r))
    r = await c.call_tool("spawn_agent", {"child_id": "researcher"})
    check(f"{label}: a missing argument is a tool error naming it",
          r.is_error and "input" in text_of(r), text_of(r))

    t0 = time.monotonic()
    r = await c.call_tool("spawn_agent", {"child_id": "watcher", "input": "Watch.",
                                          "mode": "async", "name": "watcher"})
    handle = (r.structured_content or {})
    check(f"{label}: an async spawn returns a running handle at once",
          not r.is_error and handle.get("status") == "running" and handle.get("delegation_id")
          and time.monotonic() - t0 < 5, r)
    # The watcher's lookout starts, then hangs until cancelled.
    await asyncio.sleep(0.5)
    r = await c.call_tool("cancel_agent", {"delegation_id": handle.get("delegation_id", "")})
    check(f"{label}: cancel_agent on a running child says cancelling",
          (r.structured_content or {}).get("status") == "cancelling", r)
    stopped = [(s.get("name"), s.get("depth"), s.get("was"))
               for s in (r.structured_content or {}).get("stopped", [])]
    check(f"{label}: cancel_agent says it stopped the child's own child",
          stopped == [("lookout", 2, "running")], r)
    r = await c.call_tool("wait_agent", {"delegation_id": handle.get("delegation_id", "")})
    check(f"{label}: wait_agent on it says cancelled",
          (r.structured_content or {}).get("status") == "cancelled", r)
    r = await c.call_tool("wait_agent", {"delegation_id": "arbor-nope"})
    check(f"{label}: wait_agent on an unknown handle is a tool error", r.is_error, r)

    r = await c.call_tool("list_children", {})
    children = {ch["name"]: ch for ch in (r.structured_content or {}).get("children", [])}
    first = children.get("first", {})
    check(f"{label}: list_children shows own and aggregate tokens",
          first.get("own_tokens", 0) > 0 and first.get("aggregate_tokens", 0) >= first["own_tokens"],
          children)
    check(f"{label}: the cancelled child is revoked (no longer listed)", "watcher" not in children,
          children)

    r = await c.call_tool("spawn_agent", {"child_id": "scout", "input": "Tell me later.",
                                          "mode": "message", "name": "scout"})
    check(f"{label}: a message-mode spawn returns a handle", not r.is_error, r)
    r = await c.call_tool("read_messages", {"wait_ms": 10000})
    msgs = (r.structured_content or {}).get("messages", [])
    check(f"{label}: read_messages reads the scout's answer",
          len(msgs) == 1 and msgs[0].get("from_name") == "scout"
          and msgs[0].get("text") == "Found it: 42.", msgs)
    r = await c.call_tool("send_message", {"to": "scout", "text": "And again?"})
    check(f"{label}: send_message reaches the retained child", not r.is_error, text_of(r))
    r = await c.call_tool("read_messages", {"wait_ms": 10000})
    msgs = (r.structured_content or {}).get("messages", [])
    check(f"{label}: its next answer arrives too",
          len(msgs) == 1 and msgs[0].get("text") == "Still 42.", msgs)
    r = await c.call_tool("read_messages", {"wait_ms": 30000})
    check(f"{label}: read_messages refuses a wait over its maximum, naming it",
          r.is_error and "wait_ms" in text_of(r), text_of(r))


async def approval_checks(c, label):
    r = await c.call_tool("spawn_agent", {"child_id": "publisher", "input": "Publish.",
                                          "name": "publisher"})
    sc = r.structured_content or {}
    pending = sc.get("pending", [])
    check(f"{label}: a child waiting for approval answers suspended with its call",
          not r.is_error and sc.get("status") == "suspended" and len(pending) == 1
          and pending[0]["tool"] == "echo", r)
    delegation = sc.get("delegation_id", "")
    r = await c.call_tool("list_approvals", {})
    sus = (r.structured_content or {}).get("suspensions", [])
    ids = [p["id"] for s in sus for p in s["pending"]]
    check(f"{label}: list_approvals lists the pending call", len(ids) == 1, sus)
    r = await c.call_tool("decide_approval", {"decisions": [{"id": "sub_forged", "verdict": "allow_once"}]})
    check(f"{label}: a forged approval id is refused", r.is_error and "Unknown approval" in text_of(r),
          text_of(r))
    r = await c.call_tool("decide_approval", {"decisions": [{"id": ids[0] if ids else "",
                                                             "verdict": "allow_once"}]})
    sc = r.structured_content or {}
    check(f"{label}: decide_approval resumes the child",
          not r.is_error and sc.get("pending") == [] and
          (sc.get("resumed") or {}).get("delegation_id") == delegation, r)
    r = await c.call_tool("wait_agent", {"delegation_id": delegation})
    sc = r.structured_content or {}
    check(f"{label}: wait_agent gives the resumed child's answer",
          sc.get("status") == "succeeded" and sc.get("text") == "Published.", r)
    r = await c.call_tool("decide_approval", {"decisions": [{"id": ids[0] if ids else "",
                                                             "verdict": "allow_once"}]})
    check(f"{label}: deciding it again is refused", r.is_error, r)
    r = await c.call_tool("list_children", {})
    kids = (r.structured_content or {}).get("children", [])
    return [k["session_id"] for k in kids if k["name"] == "publisher"]


async def question_checks(arbor, tmp):
    store = os.path.join(tmp, "question.db")
    asked = []

    async def elicit(context, params):
        asked.append(params)
        return types.ElicitResult(action="accept", content={"answer": "green"})

    params = StdioServerParameters(command=arbor, args=["mcp", "--store", store, QUESTION_SPEC])
    async with Client(params, mode="legacy", elicitation_callback=elicit) as c:
        r = await c.call_tool("spawn_agent", {"child_id": "painter", "input": "Paint.",
                                              "name": "painter"})
        check("question/legacy: the child's question is put to the client as an elicitation",
              len(asked) == 1 and asked[0].message == "painter asks: Which colour for the fence?"
              and asked[0].requested_schema["properties"]["answer"].get("enum") == ["blue", "green"],
              asked)
        sc = r.structured_content or {}
        check("question/legacy: the spawn returns the child's answer once it read the answer",
              not r.is_error and sc.get("status") == "succeeded" and sc.get("text") == "Painted.",
              r)
    async with Client(params, mode="auto", elicitation_callback=elicit) as c:
        r = await c.call_tool("spawn_agent", {"child_id": "painter", "input": "Paint.",
                                              "name": "painter"})
        sc = r.structured_content or {}
        pending = sc.get("pending", [])
        check("question/auto: without server-to-client requests the spawn answers suspended",
              sc.get("status") == "suspended" and len(pending) == 1
              and pending[0].get("question", {}).get("choices") == ["blue", "green"], r)
        delegation = sc.get("delegation_id", "")
        r = await c.call_tool("list_approvals", {})
        ids = [p["id"] for s in (r.structured_content or {}).get("suspensions", [])
               for p in s["pending"]]
        r = await c.call_tool("decide_approval", {"decisions": [{"id": ids[0] if ids else "",
                                                                 "answer": "red"}]})
        check("question/auto: an answer outside the choices is refused naming them",
              r.is_error and "one of the question's choices" in text_of(r), text_of(r))
        r = await c.call_tool("decide_approval", {"decisions": [{"id": ids[0] if ids else "",
                                                                 "answer": "blue"}]})
        check("question/auto: decide_approval's answer resumes the child",
              not r.is_error and (r.structured_content or {}).get("pending") == [], r)
        r = await c.call_tool("wait_agent", {"delegation_id": delegation})
        sc = r.structured_content or {}
        check("question/auto: wait_agent gives the child's answer",
              sc.get("status") == "succeeded" and sc.get("text") == "Painted.", r)
    answers = []
    for root in arbor_json(arbor, "ls", "--store", store)["roots"]:
        tree = arbor_json(arbor, "tree", root["id"], "--store", store)
        for row in tree.get("sessions", []):
            if row["name"] != "painter":
                continue
            out = subprocess.run([arbor, "log", row["id"], "--store", store, "--json"],
                                 capture_output=True, text=True, timeout=60)
            for line in out.stdout.splitlines():
                m = json.loads(line).get("message") or {}
                if m.get("role") == "tool" and m.get("name") == "ask_human":
                    answers.append(m.get("content"))
    check("question: each child read its answer as the call's result, once",
          sorted(answers) == ["blue", "green"], answers)


READ_SPEC = """
task = "read"

[supervisor]
limits = { max_result_bytes = 256 }

[agents.root]
children = ["writer"]
delegation_tools = ["spawn_agent", "read_child"]
[[agents.root.turns]]
text = "unused: the MCP client is the root"

[agents.writer]
[[agents.writer.turns]]
text = "START %s END"
""" % ("." * 400)


async def read_child_checks(arbor, tmp):
    spec = os.path.join(tmp, "read.toml")
    with open(spec, "w") as f:
        f.write(READ_SPEC)
    params = StdioServerParameters(command=arbor, args=["mcp", "--store",
                                                       os.path.join(tmp, "read.db"), spec])
    async with Client(params, mode="auto") as c:
        names = {t.name for t in (await c.list_tools()).tools}
        check("read_child: offered when the spec names it", "read_child" in names, names)
        r = await c.call_tool("spawn_agent", {"child_id": "writer", "input": "write",
                                              "name": "writer"})
        check("read_child: the spawn's answer is capped", not r.is_error
              and "END" not in text_of(r), text_of(r)[:300])
        # Its answer is larger than a page: read a part at a time (next_after, next_offset).
        args = {"child": "writer", "kinds": ["message"], "limit": 5}
        parts, errors = [], []
        for _ in range(100):
            r = await c.call_tool("read_child", args)
            if r.is_error:
                errors.append(text_of(r))
                break
            page = json.loads(text_of(r))
            parts.extend(e.get("text", json.dumps(e)) for e in page["entries"])
            if page.get("next_after") is None or not page["entries"]:
                break
            args = {**args, "after": page["next_after"], "offset": page.get("next_offset", 0)}
        text = "".join(parts)
        check("read_child: the root reads the rest of its child's answer, a part at a time",
              not errors and "START" in text and "END" in text and len(parts) > 1,
              (errors, len(parts), text[:200]))
        r = await c.call_tool("read_child", {"child": "01a238b5-0000-7000-8000-000000000001"})
        check("read_child: another family's id answers as an unknown one", r.is_error,
              text_of(r))


CODING_SPEC = """
task = "code"
root = "lead"
[workspace]
repository = "%(repo)s"
worktrees = "%(worktrees)s"
id = "mcp"
[agents.lead]
children = ["edit"]
tools = ["diff_child", "merge_child", "discard_child"]
[[agents.lead.turns]]
text = "unused: the MCP client is the root"
[agents.edit]
workspace = true
tools = ["edit_file", "run_command"]
[[agents.edit.turns]]
tool_calls = [{ name = "edit_file", arguments = { path = "greet.sh", old = "hello", new = "Hello" } }]
[[agents.edit.turns]]
tool_calls = [{ name = "run_command", arguments = { argv = ["git", "-c", "user.name=e", "-c", "user.email=e@example.invalid", "commit", "-q", "-am", "Capitalise"] } }]
[[agents.edit.turns]]
text = "committed"
"""


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


async def coding_checks(arbor, tmp):
    repo = os.path.join(tmp, "coding-repo")
    os.makedirs(repo)
    git(repo, "init", "-q", "-b", "main")
    with open(os.path.join(repo, "greet.sh"), "w") as f:
        f.write("greeting() { echo hello; }\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "init")
    spec = os.path.join(tmp, "coding.toml")
    with open(spec, "w") as f:
        f.write(CODING_SPEC % {"repo": repo, "worktrees": os.path.join(tmp, "coding-worktrees")})
    params = StdioServerParameters(command=arbor, args=["mcp", "--store",
                                                       os.path.join(tmp, "coding.db"), spec])
    async with Client(params, mode="auto") as c:
        names = {t.name for t in (await c.list_tools()).tools}
        check("coding: diff_child, merge_child and discard_child offered as the spec lists them",
              {"diff_child", "merge_child", "discard_child"} <= names, names)
        r = await c.call_tool("spawn_agent", {"child_id": "edit", "input": "go", "name": "edit"})
        check("coding: the child committed its change", not r.is_error, text_of(r)[:300])
        r = await c.call_tool("diff_child", {"child": "edit"})
        diff = json.loads(text_of(r)) if not r.is_error else {}
        check("coding: diff_child lists the child's files and lines",
              diff.get("files") == [{"path": "greet.sh", "added": 1, "removed": 1}]
              and "+greeting() { echo Hello; }" in diff.get("patch", ""), text_of(r)[:400])
        r = await c.call_tool("merge_child", {"child": "edit"})
        merged = json.loads(text_of(r)) if not r.is_error else {}
        check("coding: merge_child merges the branch into the main checkout",
              merged.get("merged") is True and git(repo, "rev-parse", "HEAD") == merged.get("commit"),
              text_of(r)[:400])
        r = await c.call_tool("merge_child", {"child": "edit"})
        again = json.loads(text_of(r)) if not r.is_error else {}
        check("coding: a second merge changes nothing",
              again.get("already_merged") is True
              and git(repo, "rev-list", "--merges", "--count", "main") == "1", text_of(r)[:400])
        r = await c.call_tool("discard_child", {"child": "edit"})
        gone = json.loads(text_of(r)) if not r.is_error else {}
        check("coding: discard_child removes the branch",
              gone.get("discarded") is True
              and git(repo, "branch", "--list", gone.get("branch") or "agent/*") == "",
              text_of(r)[:400])
        r = await c.call_tool("diff_child", {"child": "ghost"})
        check("coding: an unknown child is a tool error", r.is_error and "ghost" in text_of(r),
              text_of(r)[:300])


def arbor_json(arbor, *args):
    out = subprocess.run([arbor, *args, "--json"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"arbor {' '.join(args)}: {out.stderr}")
    return json.loads(out.stdout)


def echo_runs(arbor, store, session):
    """How many times the echo call ran in the session's transcript."""
    out = subprocess.run([arbor, "log", session, "--store", store, "--json"], capture_output=True,
                         text=True, timeout=60)
    runs = 0
    for line in out.stdout.splitlines():
        entry = json.loads(line)
        message = entry.get("message") or {}
        if entry.get("kind") == "message" and message.get("role") == "tool" \
                and message.get("name") == "echo" and not message.get("is_error"):
            runs += 1
    return runs


async def stdio(arbor, tmp):
    store = os.path.join(tmp, "stdio.db")
    for mode in ("auto", "legacy"):
        label = f"stdio/{mode}"
        params = StdioServerParameters(command=arbor, args=["mcp", "--store", store, MCP_SPEC])
        async with Client(params, mode=mode) as c:
            await tree_checks(c, label, mode)
        params = StdioServerParameters(command=arbor, args=["mcp", "--store", store, APPROVALS_SPEC])
        async with Client(params, mode=mode) as c:
            sessions = await approval_checks(c, f"{label} approvals")
        check(f"{label}: the approved call ran exactly once",
              len(sessions) == 1 and echo_runs(arbor, store, sessions[0]) == 1, sessions)
    roots = arbor_json(arbor, "ls", "--store", store)["roots"]
    check("stdio: arbor ls shows one root per client session, settled",
          len(roots) == 4 and all(r["status"] == "succeeded" for r in roots),
          [(r["name"], r["status"]) for r in roots])
    lead = next((r for r in roots if r["name"] == "lead"), None)
    if lead:
        tree = arbor_json(arbor, "tree", lead["id"], "--store", store)
        rows = {row["name"]: row for row in tree.get("sessions", tree.get("rows", []))}
        check("stdio: arbor tree shows the cancelled child's own child aborted too",
              rows.get("lookout", {}).get("status") == "aborted", list(rows))


def start_serve(arbor, tmp, specs, tokens):
    store = os.path.join(tmp, "serve.db")
    env = dict(os.environ, ARBOR_TOKENS=tokens)
    proc = subprocess.Popen([arbor, "serve", "--store", store, "--specs", specs, "--listen",
                             "127.0.0.1:0", "--mcp-spec", "mcp"], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=env)
    line = proc.stderr.readline()
    m = re.search(r"http://(127\.0\.0\.1:\d+)", line)
    if not m:
        proc.kill()
        raise RuntimeError(f"arbor serve did not start: {line}")
    return proc, f"http://{m.group(1)}", store


def http_client(url, token):
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)


def over_http(url, hc, mode):
    return Client(streamable_http_client(url, http_client=hc), mode=mode)


async def http(arbor, tmp):
    specs = os.path.join(tmp, "specs")
    os.makedirs(specs, exist_ok=True)
    for name, path in (("mcp", MCP_SPEC), ("approvals", APPROVALS_SPEC)):
        with open(path) as src, open(os.path.join(specs, f"{name}.toml"), "w") as dst:
            dst.write(src.read())
    proc, base, store = start_serve(arbor, tmp, specs, "acme=tok-acme-0123456789,other=tok-other-0123456789")
    try:
        for mode in ("auto", "legacy"):
            label = f"http/{mode}"
            async with http_client(base, "tok-acme-0123456789") as hc:
                async with over_http(f"{base}/mcp", hc, mode) as c:
                    await tree_checks(c, label, mode)
                async with over_http(f"{base}/mcp/approvals", hc, mode) as c:
                    await approval_checks(c, f"{label} approvals")
        # Two stateless clients of one tenant drive one tree.
        async with http_client(base, "tok-acme-0123456789") as h1, http_client(base, "tok-acme-0123456789") as h2:
            async with over_http(f"{base}/mcp", h1, "auto") as a, \
                    over_http(f"{base}/mcp", h2, "auto") as b:
                await a.call_tool("spawn_agent", {"child_id": "researcher", "input": "x",
                                                  "name": "shared-one"})
                r = await b.call_tool("list_children", {})
                names = [ch["name"] for ch in (r.structured_content or {}).get("children", [])]
                check("http: two stateless clients see the same tree", "shared-one" in names, names)
        # Another tenant's stateless root is its own.
        async with http_client(base, "tok-other-0123456789") as h:
            async with over_http(f"{base}/mcp", h, "auto") as c:
                r = await c.call_tool("list_children", {})
                names = [ch["name"] for ch in (r.structured_content or {}).get("children", [])]
                check("http: another tenant does not see that tree", "shared-one" not in names, names)
        req = urllib.request.Request(f"{base}/mcp", method="POST", data=b"{}",
                                     headers={"Authorization": "Bearer wrong",
                                              "Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=10)
            check("http: a bad token is refused with 401", False, "accepted")
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
            check("http: a bad token is refused with 401",
                  e.code == 401 and body.get("error", {}).get("kind") == "unauthorized", (e.code, body))
        with urllib.request.urlopen(urllib.request.Request(
                f"{base}/v1/runs", headers={"Authorization": "Bearer tok-acme-0123456789"}), timeout=10) as resp:
            runs = json.loads(resp.read())
        roots = runs.get("runs", runs if isinstance(runs, list) else [])
        # One root per MCP session (legacy), one per spec for the tenant's stateless clients.
        names = sorted(r.get("name") for r in roots)
        check("http: the MCP clients' roots are the tenant's runs in /v1/runs",
              names == ["lead", "lead", "root", "root"], names)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    check("http: arbor serve exits 0 on SIGTERM", proc.returncode == 0, proc.returncode)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arbor", required=True)
    args = ap.parse_args()
    arbor = os.path.abspath(args.arbor)
    with tempfile.TemporaryDirectory() as tmp:
        await stdio(arbor, tmp)
        await question_checks(arbor, tmp)
        await read_child_checks(arbor, tmp)
        await coding_checks(arbor, tmp)
        await http(arbor, tmp)
    return check.summary()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
