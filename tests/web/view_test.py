"""The web view in a real browser: Debian's chromium driven by Playwright.

Starts `arbor serve` on a scripted tree whose child waits for approval, opens `/`, sees the
pending approval on top, clicks Approve, and sees the tree go to Done with the totals the API
reports; then stops the server, sees the view say it is reconnecting, starts the server again
on the same port and store, and sees the view go live again without a reload. The decision
taken in the view is in the child's transcript with who took it; a run whose answer the
provider cut off says so; a run a SIGKILL interrupted is continued with the view's Resume; a
model's thinking (from a fake Anthropic server) shows folded in the transcript and opens on a
click; a child's question (ask_human) asked before a SIGKILL of the server shows after the
restart with its choices, and a click answers it.
Saves screenshots under the artifacts directory.

Usage: python view_test.py --arbor PATH --spec PATH --out DIR
"""

import argparse
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from playwright.sync_api import expect, sync_playwright


def start(arbor, workdir, port=0):
    proc = subprocess.Popen(
        [arbor, "serve", "--listen", f"127.0.0.1:{port}", "--specs", "specs", "--store", "a.db"],
        cwd=workdir,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in ("ARBOR_TOKENS", "ARBOR_LOG")},
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise SystemExit("arbor serve did not start")


def fan_out(n):
    """A root that delegates to `n` children (four at a time), each answering at once."""
    calls = ",\n  ".join(
        f'{{ name = "spawn_agent", arguments = {{ child_id = "worker", name = "worker-{i:02}", '
        f'input = "Part {i} of the job" }} }}'
        for i in range(1, n + 1)
    )
    return f"""task = "Split the job into {n} parts"
root = "root"

[agents.root]
children = ["worker"]
tool_concurrency = 4
limits = {{ max_tool_calls = 256 }}
[[agents.root.turns]]
tool_calls = [
  {calls}
]
[[agents.root.turns]]
text = "All parts done."

[agents.worker]
repeat_last = true
[[agents.worker.turns]]
text = "done"
"""


CUT_OFF = """task = "Summarise."
root = "root"

[agents.root]
[[agents.root.turns]]
text = "Here is the summary, cut"
truncated = true
"""

# Priced in EUR, under a pool: 4,000 x 3 + 6,000 cache reads x 3 + 1,000 x 15 = 45,000
# micro-euros (0.045).
PRICED = """task = "Spend."
root = "root"

[pricing]
currency = "EUR"
[pricing."scripted"]
input = 3.0
output = 15.0

[agents.root]
budget = { max_tree_tokens = 100000 }
[[agents.root.turns]]
text = "spent"
usage = { input_tokens = 10000, output_tokens = 1000, cache_read_tokens = 6000 }
"""

STUCK = """task = "Ask the slow one."
root = "root"

[agents.root]
children = ["slow"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "slow", name = "slow", input = "Take your time." } }]
[[agents.root.turns]]
text = "Recovered with the slow one's answer."

[agents.slow]
[[agents.slow.turns]]
text = "Finally."
delay_ms = 3000
"""


THOUGHT = "The user wants the weather; answer from memory."


def thinking_server():
    """A fake Anthropic Messages server: every answer thinks (a signed block), then says so."""
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
         "content": [], "model": "claude-test", "stop_reason": None,
         "usage": {"input_tokens": 30, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "thinking_delta", "thinking": THOUGHT}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "signature_delta", "signature": "c2lnbmVk"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Sunny."}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}},
        {"type": "message_stop"},
    ]
    sse = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, body, kind):
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.answer(json.dumps({"id": "claude-test", "type": "model"}).encode(), "application/json")

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", "0")))
            self.answer(sse, "text/event-stream")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def thinking_spec(port):
    return f"""task = "What is the weather?"
root = "root"

[providers.claude]
kind = "anthropic"
base_url = "http://127.0.0.1:{port}"

[agents.root]
provider = "claude"
model = "claude-test"
"""


def call(base, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


def until(what, check, seconds=20):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--arbor", required=True)
    args.add_argument("--spec", required=True)
    args.add_argument("--out", required=True)
    a = args.parse_args()
    a.arbor = os.path.abspath(a.arbor)
    os.makedirs(a.out, exist_ok=True)
    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser_path:
        raise SystemExit("chromium is not installed (see .ci/web.sh)")

    work = tempfile.mkdtemp(prefix="arbor-web-")
    os.makedirs(os.path.join(work, "specs"))
    shutil.copy(a.spec, os.path.join(work, "specs", "approvals.toml"))
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(a.spec)), "question.toml"),
                os.path.join(work, "specs", "question.toml"))
    with open(os.path.join(work, "specs", "fanout.toml"), "w") as f:
        f.write(fan_out(50))
    thinker = thinking_server()
    for name, text in (("cut", CUT_OFF), ("stuck", STUCK), ("priced", PRICED),
                       ("thinking", thinking_spec(thinker.server_address[1]))):
        with open(os.path.join(work, "specs", f"{name}.toml"), "w") as f:
            f.write(text)
    server, base = start(a.arbor, work)
    port = int(base.rsplit(":", 1)[1])
    checks = 0
    try:
        run = call(base, "POST", "/v1/runs", {"spec": "approvals"})
        root = run["root_id"]
        until("the child to wait for approval",
              lambda: call(base, "GET", f"/v1/runs/{root}")["status"] == "suspended")

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=browser_path,
                                        args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{base}/#run={root}")

            card = page.get_by_test_id("approval")
            expect(card).to_have_count(1)
            expect(card).to_contain_text("echo")
            expect(card).to_contain_text("publisher")
            expect(card).to_contain_text("published v1.2 release notes")
            expect(page.get_by_test_id("run-status")).to_have_text("Needs input")
            expect(page.locator("#conn")).to_have_attribute("data-state", "live")
            checks += 5
            page.screenshot(path=os.path.join(a.out, "view-needs-input.png"), full_page=True)

            page.get_by_test_id("approve").click()
            expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
            expect(page.get_by_test_id("approval")).to_have_count(0)
            publisher = page.locator("[data-testid=node][data-name=publisher]")
            expect(publisher).to_have_attribute("data-state", "done")
            # The tree has ended: the server ended the stream, the view says so.
            expect(page.locator("#conn")).to_have_attribute("data-state", "ended", timeout=10000)
            checks += 4
            done = call(base, "GET", f"/v1/runs/{root}")
            assert done["status"] == "succeeded", done
            total = done["tree"]["sessions"][0]["usage"]["aggregate"]["total_tokens"]
            expect(page.get_by_test_id("tree-tokens")).to_have_text(f"{total:,}")
            checks += 2
            page.screenshot(path=os.path.join(a.out, "view-done.png"), full_page=True)

            # The transcript drawer shows what the approved call returned, once.
            publisher.click()
            drawer = page.locator("#transcript")
            expect(drawer).to_contain_text("published v1.2 release notes")
            # As a card: the call, its status and its result, found by its call id.
            results = page.locator("#transcript [data-testid=tool-card][data-tool=echo]",
                                   has_text="published v1.2 release notes")
            expect(results).to_have_count(1)
            expect(results).to_have_attribute("data-status", "ok")
            expect(results.locator("pre.result")).to_contain_text("published v1.2 release notes")
            # The decision taken in the view, once, with who took it.
            decided = page.locator("#transcript li", has_text="allow_once echo by web view (tenant local)")
            expect(decided).to_have_count(1)
            checks += 3

            # The server goes away and comes back: the view reconnects without a reload.
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=20) == 0
            expect(page.locator("#conn")).to_have_attribute("data-state", "reconnecting", timeout=10000)
            server, base = start(a.arbor, work, port)
            # Back: connected again (live, then ended at once: the tree had ended).
            expect(page.locator("#conn")).to_have_attribute("data-state", re.compile("^(live|ended)$"),
                                                            timeout=15000)
            expect(page.get_by_test_id("run-status")).to_have_text("Done")
            checks += 3
            page.screenshot(path=os.path.join(a.out, "view.png"), full_page=True)

            # An answer the provider cut off says so.
            cut = call(base, "POST", "/v1/runs", {"spec": "cut"})["root_id"]
            until("the cut-off run to finish",
                  lambda: call(base, "GET", f"/v1/runs/{cut}")["status"] == "succeeded")
            page.goto(f"{base}/#run={cut}")
            expect(page.get_by_test_id("run-status")).to_have_text("Done · answer cut off",
                                                                  timeout=20000)
            checks += 1

            # A priced run under a pool: the tree's cost, and the pool's spend of its limit.
            priced = call(base, "POST", "/v1/runs", {"spec": "priced"})["root_id"]
            until("the priced run to finish",
                  lambda: call(base, "GET", f"/v1/runs/{priced}")["status"] == "succeeded")
            page.goto(f"{base}/#run={priced}")
            expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
            expect(page.get_by_test_id("tree-cost")).to_have_text("0.045")
            expect(page.get_by_test_id("pool")).to_have_text(
                "root: 11,000 / 100,000 tokens (0 reserved)")
            checks += 2

            # A run a SIGKILL interrupted goes on with Resume: its call in flight rejoins the
            # slow child, which goes on from its transcript and answers.
            stuck = call(base, "POST", "/v1/runs", {"spec": "stuck"})["root_id"]
            until("the slow child to run",
                  lambda: any(s["name"] == "slow" and s["status"] == "running"
                              for s in call(base, "GET", f"/v1/runs/{stuck}")["tree"]["sessions"]))
            server.kill()
            server.wait(timeout=20)
            server, base = start(a.arbor, work, port)
            page.goto(f"{base}/#run={stuck}")
            expect(page.get_by_test_id("run-status")).to_have_text("Interrupted", timeout=20000)
            expect(page.get_by_test_id("resume")).to_be_visible()
            page.screenshot(path=os.path.join(a.out, "view-interrupted.png"), full_page=True)
            page.get_by_test_id("resume").click()
            expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
            expect(page.get_by_test_id("resume")).to_be_hidden()
            done = call(base, "GET", f"/v1/runs/{stuck}")
            assert done["result"]["text"] == "Recovered with the slow one's answer.", done
            checks += 4

            # A question from a child, asked before a SIGKILL of the server: after the restart
            # the view shows it with its choices; a click answers it, once, and the child
            # reads the answer as its call's result.
            asked = call(base, "POST", "/v1/runs", {"spec": "question"})["root_id"]
            until("the painter to ask",
                  lambda: call(base, "GET", f"/v1/runs/{asked}")["status"] == "suspended")
            server.kill()
            server.wait(timeout=20)
            server, base = start(a.arbor, work, port)
            page.goto(f"{base}/#run={asked}")
            question = page.get_by_test_id("question")
            expect(question).to_have_count(1, timeout=20000)
            expect(question.get_by_test_id("question-text")).to_have_text(
                "Which colour for the fence?")
            expect(question.get_by_test_id("choice")).to_have_text(["blue", "green"])
            checks += 3
            page.screenshot(path=os.path.join(a.out, "view-question.png"), full_page=True)
            question.get_by_test_id("choice").filter(has_text="green").click()
            expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
            expect(page.get_by_test_id("question")).to_have_count(0)
            page.locator("[data-testid=node][data-name=painter]").click()
            answered = page.locator("#transcript [data-testid=tool-card][data-tool=ask_human]")
            expect(answered).to_have_count(1)
            expect(answered.locator("pre.result")).to_have_text("green")
            checks += 3

            # A model's thinking: folded in the transcript, opened on a click.
            thought = call(base, "POST", "/v1/runs", {"spec": "thinking"})["root_id"]
            until("the thinking run to finish",
                  lambda: call(base, "GET", f"/v1/runs/{thought}")["status"] == "succeeded")
            page.goto(f"{base}/#run={thought}")
            expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
            page.locator("[data-testid=node][data-name=root]").click()
            folded = page.locator("#transcript li.reasoning details")
            expect(folded).to_have_count(1)
            expect(folded.locator("summary")).to_contain_text("thinking, turn 1")
            expect(folded.locator("pre")).to_be_hidden()
            folded.locator("summary").click()
            expect(folded.locator("pre")).to_have_text(THOUGHT)
            checks += 4
            page.screenshot(path=os.path.join(a.out, "view-thinking.png"), full_page=True)

            # A tree of 50 children: every node listed, nothing overflowing sideways.
            big = call(base, "POST", "/v1/runs", {"spec": "fanout"})["root_id"]
            until("the fan-out to finish",
                  lambda: call(base, "GET", f"/v1/runs/{big}")["status"] == "succeeded")
            page.goto(f"{base}/#run={big}")
            expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
            expect(page.get_by_test_id("node")).to_have_count(51)
            overflow = page.evaluate(
                "() => { const m = document.querySelector('.main');"
                " return m.scrollWidth - m.clientWidth; }")
            assert overflow <= 1, f"the view overflows sideways by {overflow}px"
            checks += 3
            page.screenshot(path=os.path.join(a.out, "view-50-children.png"), full_page=True)
            assert not errors, errors
            checks += 1
            browser.close()
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
        thinker.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    print(f"web view: {checks} checks passed; screenshots in {a.out}")


if __name__ == "__main__":
    sys.exit(main())
