#!/usr/bin/env python3
"""arbor as an A2A client: a spec's child is a remote agent written with the official
Python SDK (demo_a2a_server.py, a2a-sdk 1.3.0), reached over JSON-RPC with SSE and a bearer
token from the environment; and a hostile agent (hostile_a2a_server.py) that breaks caps.

Checked, each through `arbor run` / `arbor answer` / `arbor resume` as a user drives them:
- the remote task's answer is the child's; the usage it reports is the child's own and is
  in the root's aggregate (the run's reconciliation is consistent);
- the remote conversation is the child's session (contextId), the token reaches the agent,
  and a wrong token refuses the child at admission (its model's preflight fetches the card)
  with the HTTP 401 named, before any task;
- a question of the remote task (INPUT_REQUIRED) waits at the root; its answer, recorded by
  `arbor answer` and delivered by `arbor resume` (a later process), goes back to the same
  task, which completes;
- a child deleted (`arbor rm`) while its question waits at the root: the agent receives
  CancelTask for the task that asked, and nothing of it waits at the root;
- a child's timeout ends a slow remote task: the agent receives CancelTask;
- a tree budget too small for the child's turn refuses it before any message is sent;
- an agent that disappears mid-task fails the child with a connection error, at once;
- a flood of artifacts is cut at the stream cap, a stream that never ends is ended by the
  child's timeout (and cancelled), an HTML answer and a 20 MiB card are refused by name.

Usage: a2a_client_test.py --arbor target/debug/arbor
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from checks import Checks

HERE = os.path.dirname(os.path.abspath(__file__))
DEMO = os.path.join(HERE, "demo_a2a_server.py")
HOSTILE = os.path.join(HERE, "hostile_a2a_server.py")
TOKEN = "a2a-interop-token"

check = Checks("a2a client")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} never opened")


def start(script, *args):
    port = free_port()
    proc = subprocess.Popen([sys.executable, script, str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_port(port, proc)
    return port, proc


def spec(port, text, *, token_env="DEMO_A2A_TOKEN", timeout_ms=30000, budget=None,
         url_path=""):
    # The root's own turns reserve little (10 output tokens); the remote child's turn
    # reserves the default output cap (4,096), which a pool of 2,000 cannot cover.
    budget_line = (f"budget = {{ max_tree_tokens = {budget} }}\n"
                   "controls = { max_output_tokens = 10 }\n" if budget else "")
    return f"""
task = "Plan the trip."
root = "lead"

[providers.remote]
kind = "a2a"
base_url = "http://127.0.0.1:{port}{url_path}"
api_key_env = "{token_env}"
idle_timeout_secs = 10

[agents.lead]
children = ["travel"]
{budget_line}
[[agents.lead.turns]]
usage = {{ input_tokens = 10, output_tokens = 5 }}
tool_calls = [{{ name = "spawn_agent", arguments = {{ child_id = "travel", name = "travel", input = {json.dumps(text)} }} }}]

[[agents.lead.turns]]
usage = {{ input_tokens = 10, output_tokens = 5 }}
text = "done"

[agents.travel]
provider = "remote"
model = "demo"
tools = ["ask_human"]
limits = {{ timeout_ms = {timeout_ms} }}
"""


class Run:
    def __init__(self, binary, env):
        self.binary = binary
        self.env = env
        self.dir = tempfile.mkdtemp(prefix="a2a-client-")

    def arbor(self, *args, timeout=120):
        return subprocess.run([self.binary, *args], capture_output=True, text=True,
                              timeout=timeout, env=self.env, cwd=self.dir)

    def run(self, text, name, **kw):
        path = os.path.join(self.dir, f"{name}.toml")
        with open(path, "w") as f:
            f.write(spec(**kw, text=text))
        t0 = time.time()
        out = self.arbor("run", path, "--json", "-q")
        report = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
        return out, report, time.time() - t0


def child(report, name="travel"):
    return next((s for s in report.get("sessions", []) if s["name"] == name), {})


def child_log(run, report):
    if "id" not in child(report):
        return []
    out = run.arbor("log", child(report)["id"], "--json")
    return [json.loads(l) for l in out.stdout.splitlines() if l.strip()]


def answer_text(run, report):
    msgs = [e["message"] for e in child_log(run, report)
            if e.get("kind") == "message" and e["message"].get("role") == "assistant"]
    return msgs[-1].get("content", "") if msgs else ""


def error_text(run, report):
    ends = [e for e in child_log(run, report) if e.get("kind") == "run_finished"]
    return json.dumps(ends[-1]) if ends else ""


def spawn_error(run, report):
    """The root's spawn_agent error, when the child was refused at admission (its model's
    preflight fetches and checks the agent's card)."""
    out = run.arbor("log", report.get("root_session_id", "?"), "--json")
    for line in out.stdout.splitlines():
        e = json.loads(line)
        m = e.get("message", {})
        if e.get("kind") == "message" and m.get("role") == "tool" and m.get("is_error"):
            return m.get("content", "")
    return ""


def read_log(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def wait_for(pred, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def demo_checks(run, port, log):
    # A task's answer, its usage, the session as the context.
    out, report, _ = run.run("echo hello there", "echo", port=port)
    check("a remote child's tree succeeds", out.returncode == 0, out.stderr[-800:])
    travel = child(report)
    check("the remote task's answer is the child's",
          answer_text(run, report) == "echo: hello there", answer_text(run, report))
    check("the usage the agent reports is the child's own",
          travel.get("usage", {}).get("own", {}).get("total_tokens") == 30, travel.get("usage"))
    rec = report.get("reconciliation", {})
    check("the root's aggregate holds it and reconciles",
          rec.get("consistent") is True and rec.get("root_aggregate_tokens") == 60, rec)
    executed = [e for e in read_log(log) if e["event"] == "execute"]
    check("the remote conversation is the child's session",
          executed and executed[-1]["context"] == travel.get("id"), executed[-1:])

    # A wrong token: refused before any task.
    before = len(read_log(log))
    env = dict(run.env, WRONG_TOKEN="not-it")
    wrong = Run(run.binary, env)
    out, report, _ = wrong.run("echo x", "wrong", port=port, token_env="WRONG_TOKEN")
    err = spawn_error(wrong, report)
    check("a wrong token refuses the child at admission, naming HTTP 401",
          not child(report) and "failed its preflight" in err and "HTTP 401" in err,
          err or out.stderr[-600:])
    check("...and no task was started",
          not any(e["event"] == "execute" for e in read_log(log)[before:]), read_log(log)[before:])

    # A question, answered at the root, goes back to the same task after a restart.
    out, report, _ = run.run("ask", "ask", port=port)
    check("a remote question suspends the tree (exit 4)", out.returncode == 4,
          (out.returncode, out.stderr[-600:]))
    root = report.get("root_session_id", "")
    listed = run.arbor("approvals", root, "--json")
    pending = (json.loads(listed.stdout)["suspensions"][0]["pending"][0]
               if listed.returncode == 0 else {})
    check("the question waits at the root as ask_human",
          pending.get("tool") == "ask_human"
          and pending.get("arguments", {}).get("question") == "Which city?", pending)
    answered = run.arbor("answer", root, pending.get("id", "?"), "Paris")
    check("arbor answer records it", answered.returncode == 0, answered.stderr[-400:])
    resumed = run.arbor("resume", root, "--json")
    report = json.loads(resumed.stdout) if resumed.stdout.strip().startswith("{") else {}
    check("arbor resume completes the tree", resumed.returncode == 0, resumed.stderr[-600:])
    check("the answer reached the task, which completed",
          answer_text(run, report) == "booked: Paris", answer_text(run, report))
    asks = [e for e in read_log(log) if e["event"] == "execute" and e["text"] in ("ask", "Paris")]
    check("the answer went to the task that asked",
          len(asks) == 2 and asks[0]["task"] == asks[1]["task"], asks)

    # A child deleted while its question waits at the root: the remote task is cancelled.
    before = len(read_log(log))
    out, report, _ = run.run("ask", "ask-rm", port=port)
    root = report.get("root_session_id", "")
    asked = [e for e in read_log(log)[before:] if e["event"] == "execute" and e["text"] == "ask"]
    check("a second remote question suspends its tree", out.returncode == 4 and asked,
          (out.returncode, out.stderr[-600:]))
    removed = run.arbor("rm", root, "travel", "--reason", "not needed", "--json")
    check("arbor rm deletes the waiting child", removed.returncode == 0,
          (removed.returncode, removed.stdout[-400:], removed.stderr[-400:]))
    task = asked[-1]["task"] if asked else "?"
    check("...and the agent receives CancelTask for the task that asked, once",
          wait_for(lambda: any(e["event"] == "cancel" and e["task"] == task
                               for e in read_log(log)))
          and sum(e["event"] == "cancel" for e in read_log(log)[before:]) == 1,
          read_log(log)[-3:])
    listed = run.arbor("approvals", root, "--json")
    left = json.loads(listed.stdout).get("suspensions", []) if listed.returncode == 0 else None
    check("...and nothing of it waits at the root",
          left is not None and not any(p for s in left for p in s.get("pending", [])),
          (listed.returncode, listed.stdout[-400:], listed.stderr[-300:]))

    # A timeout cancels the remote task.
    out, report, took = run.run("slow", "slow", port=port, timeout_ms=1500)
    err = spawn_error(run, report)
    check("a slow remote task ends with the child's timeout",
          child(report).get("status") == "failed"
          and "Delegation timeout limit exceeded: timeout_ms (maximum 1500" in err and took < 20,
          (child(report).get("status"), took, err))
    slow = [e for e in read_log(log) if e["event"] == "execute" and e["text"] == "slow"]
    check("...and the agent receives CancelTask",
          slow and wait_for(lambda: any(e["event"] == "cancel" and e["task"] == slow[-1]["task"]
                                        for e in read_log(log))), read_log(log)[-3:])

    # A budget too small for the child's turn: nothing is sent.
    before = len(read_log(log))
    out, report, _ = run.run("echo budget", "budget", port=port, budget=2000)
    err = spawn_error(run, report)
    check("a tree budget that cannot cover the remote child's turn refuses it",
          child(report).get("status") == "failed" and "budget exhausted" in err,
          (child(report).get("status"), err))
    check("...before any message reaches the agent",
          not any(e["event"] == "execute" for e in read_log(log)[before:]), read_log(log)[before:])


def vanish_checks(run):
    log = os.path.join(run.dir, "vanish.jsonl")
    port, proc = start(DEMO, TOKEN, log)
    try:
        out, report, took = run.run("vanish", "vanish", port=port)
        err = error_text(run, report)
        check("an agent that disappears mid-task fails the child with a connection error",
              child(report).get("status") == "failed"
              and ("connection" in err.lower() or "cannot reach" in err or "broke" in err)
              and took < 25, (took, err or out.stderr[-600:]))
    finally:
        proc.kill()


def hostile_checks(run):
    port, proc = start(HOSTILE)
    try:
        out, report, _ = run.run("flood", "flood", port=port)
        err = error_text(run, report)
        check("a flood of artifacts is cut at the stream cap, by name",
              child(report).get("status") == "failed" and "4194304 bytes" in err,
              err or out.stderr[-600:])
        out, report, took = run.run("drip", "drip", port=port, timeout_ms=2000)
        err = spawn_error(run, report)
        check("a stream that never ends is ended by the child's timeout",
              child(report).get("status") == "failed"
              and "Delegation timeout limit exceeded: timeout_ms (maximum 2000" in err
              and took < 20, (child(report).get("status"), took, err))
        out, report, _ = run.run("html", "html", port=port)
        err = error_text(run, report)
        check("an HTML answer is refused naming its content type",
              child(report).get("status") == "failed" and "text/html" in err,
              err or out.stderr[-600:])
        out, report, _ = run.run("echo x", "huge", port=port, url_path="/huge")
        err = spawn_error(run, report)
        check("a 20 MiB card is refused at its cap, at admission",
              not child(report) and "1048576 bytes" in err, err or out.stderr[-600:])
    finally:
        proc.kill()


def remote_tree_tokens(port):
    """The aggregate tokens of the one run the remote `arbor serve` holds."""
    import urllib.request

    def get(path):
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    runs = get("/v1/runs").get("runs", [])
    if len(runs) != 1:
        return None
    run = get(f"/v1/runs/{runs[0]['root_id']}")
    root = next((s for s in run["tree"]["sessions"] if s["id"] == run["root_id"]), {})
    return root.get("usage", {}).get("aggregate", {}).get("total_tokens")


def arbor_to_arbor_checks(run):
    """A child that is another arbor's tree (`arbor serve`'s A2A agent): the remote tree's
    question reaches this root, its answer goes back, and the usage the remote reports (its
    tree's cumulative tokens) is counted once."""
    import re
    specs = os.path.join(run.dir, "remote-specs")
    os.makedirs(specs, exist_ok=True)
    with open(os.path.join(HERE, "..", "..", "examples", "question.toml")) as src, \
            open(os.path.join(specs, "question.toml"), "w") as dst:
        dst.write(src.read())
    env = dict(run.env, ARBOR_TOKENS=f"remote={TOKEN}")
    serve = subprocess.Popen([run.binary, "serve", "--store", os.path.join(run.dir, "remote.db"),
                              "--specs", specs, "--listen", "127.0.0.1:0"],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    try:
        m = re.search(r"127\.0\.0\.1:(\d+)", serve.stderr.readline())
        port = int(m.group(1)) if m else 0
        out, report, _ = run.run("Paint the fence.", "remote-arbor", port=port,
                                 url_path="/a2a/question")
        check("arbor to arbor: the remote tree's question suspends this tree (exit 4)",
              out.returncode == 4, (out.returncode, out.stderr[-600:]))
        root = report.get("root_session_id", "")
        listed = run.arbor("approvals", root, "--json")
        pending = (json.loads(listed.stdout)["suspensions"][0]["pending"][0]
                   if listed.returncode == 0 else {})
        question = pending.get("arguments", {}).get("question", "")
        check("arbor to arbor: it waits here, naming the remote call that asks",
              "Which colour for the fence?" in question and "blue | green" in question, pending)
        # The remote tree takes its answer as text: one question waits there.
        answered = run.arbor("answer", root, pending.get("id", "?"), "green")
        resumed = run.arbor("resume", root, "--json")
        report = json.loads(resumed.stdout) if resumed.stdout.strip().startswith("{") else {}
        check("arbor to arbor: the answer completes both trees",
              answered.returncode == 0 and resumed.returncode == 0
              and answer_text(run, report) == "The fence is painted.",
              (answered.stderr[-300:], resumed.stderr[-300:], answer_text(run, report)))
        rec = report.get("reconciliation", {})
        own = child(report).get("usage", {}).get("own", {}).get("total_tokens")
        remote = remote_tree_tokens(port)
        check("arbor to arbor: the remote tree's tokens are the child's own, counted once",
              rec.get("consistent") is True and own is not None and own > 0 and own == remote,
              (own, remote, rec))
    finally:
        serve.terminate()
        try:
            serve.wait(timeout=20)
        except subprocess.TimeoutExpired:
            serve.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arbor", required=True)
    args = ap.parse_args()
    binary = os.path.abspath(args.arbor)
    env = dict(os.environ, DEMO_A2A_TOKEN=TOKEN)
    env.pop("ARBOR_LOG", None)
    run = Run(binary, env)
    log = os.path.join(run.dir, "demo.jsonl")
    port, proc = start(DEMO, TOKEN, log)
    try:
        demo_checks(run, port, log)
    finally:
        proc.kill()
    vanish_checks(run)
    hostile_checks(run)
    arbor_to_arbor_checks(run)
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
