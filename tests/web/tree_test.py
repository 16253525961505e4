"""The web view's tree, timeline, transcript, controls and run list in a real browser
(Debian's chromium driven by Playwright), and an accessibility check (axe-core, from npm,
run in the page).

Against a live `arbor serve`: a depth-3 tree whose leaf runs a slow tool (its row nested
under its parent's, showing the tool it runs, folding and unfolding with the mouse and the
keyboard, filtered by state); the timeline's bars, one per session, and the shaded wait of
a child waiting for approval; the transcript as a chat whose spawn card opens the child;
starting a run from the form, cancelling one, messaging a session and deleting a running
child after a confirmation naming what stops; the run list's spec names, short ids, status,
spec and label filters and paging; the page at a laptop's half screen; no request leaving
the server's origin; axe-core reporting no serious or critical issue on each view.
Saves screenshots under the artifacts directory.

Usage: python tree_test.py --arbor PATH --out DIR
"""

import argparse
import re
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from playwright.sync_api import expect, sync_playwright

from view_test import call, start, until

HERE = os.path.dirname(os.path.abspath(__file__))
AXE = os.path.join(HERE, "node_modules", "axe-core", "axe.min.js")

DEEP = """task = "Plan and build the feature"
root = "root"

[agents.root]
children = ["planner"]
repeat_last = true
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "planner", name = "planner", input = "Plan it" } }]
[[agents.root.turns]]
text = "Planned and built."

[agents.planner]
children = ["worker"]
[[agents.planner.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "worker", name = "worker", input = "Build it" } }]
[[agents.planner.turns]]
text = "The plan is done."

[agents.worker]
tools = ["sleep"]
[[agents.worker.turns]]
tool_calls = [{ name = "sleep", arguments = { ms = 6000 } }]
[[agents.worker.turns]]
text = "Built."
"""

SLOW = """task = "Wait a long time"
root = "root"

[agents.root]
children = ["sleeper"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "sleeper", name = "sleeper", input = "Sleep" } }]
[[agents.root.turns]]
text = "Went on without it."

[agents.sleeper]
tools = ["sleep"]
limits = { timeout_ms = 120000 }
[[agents.sleeper.turns]]
tool_calls = [{ name = "sleep", arguments = { ms = 60000 } }]
[[agents.sleeper.turns]]
text = "Slept."
"""

QUICK = """task = "Answer at once"
root = "root"

[agents.root]
repeat_last = true
[[agents.root.turns]]
text = "Done at once."
"""


def axe(page, what, checks):
    """Runs axe-core in the page: no serious or critical violation."""
    page.add_script_tag(path=AXE)
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    bad = [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert not bad, f"axe on {what}: " + "; ".join(bad)
    return checks + 1


def flows(page, base, out, checks, foreign, errors):
    """Items 3 to 8 of the issue, in one page; returns the checks passed and the deep root."""
    # (6) Start a run from the form: a depth-3 tree whose leaf sleeps.
    page.goto(f"{base}/")
    expect(page.get_by_test_id("start-spec")).to_contain_text("deep")
    page.get_by_test_id("start-spec").select_option("deep")
    page.get_by_test_id("start-task").fill("Plan and build the login page")
    page.get_by_test_id("start").click()
    expect(page).to_have_url(re.compile("#run="))
    root = page.url.split("#run=")[1]
    # (3) The tree: the worker nested two levels down, showing the tool it runs.
    worker = page.locator("[role=treeitem][aria-level='3'] > [data-testid=node][data-name=worker]")
    expect(worker).to_have_count(1, timeout=15000)
    expect(worker.get_by_test_id("running-tools")).to_have_text("⚙ sleep", timeout=15000)
    planner_item = page.locator("[role=treeitem][aria-level='2']", has=page.locator("[data-name=planner]"))
    expect(planner_item).to_have_attribute("aria-expanded", "true")
    expect(page.locator("#run-headline")).to_have_text("Plan and build the login page")
    checks += 5
    # The state filter while it runs: Working keeps the three working rows.
    page.get_by_test_id("filter-working").click()
    expect(page.get_by_test_id("filter-working")).to_have_attribute("aria-pressed", "true")
    expect(page.locator("[data-testid=node][data-state=working]")).to_have_count(3)
    page.get_by_test_id("filter-all").click()
    checks += 2
    page.screenshot(path=os.path.join(out, "tree-running.png"), full_page=True)
    checks = axe(page, "the running tree", checks)
    # Fold the planner with a click: its worker is gone from the tree; unfold with the
    # keyboard (Right), then move down to the worker (Down) and open it (Enter).
    planner_item.locator("> .row [data-testid=toggle]").click()
    expect(planner_item).to_have_attribute("aria-expanded", "false")
    expect(page.locator("[data-testid=node][data-name=worker]")).to_have_count(0)
    page.keyboard.press("ArrowRight")
    expect(planner_item).to_have_attribute("aria-expanded", "true")
    expect(page.locator("[data-testid=node][data-name=worker]")).to_have_count(1)
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    expect(page.locator("#drawer-title")).to_have_text("worker")
    checks += 5
    # Once done: the Done filter keeps the three, and no row names a running tool.
    expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
    page.get_by_test_id("filter-done").click()
    expect(page.locator("[data-testid=node][data-state=done]")).to_have_count(3)
    expect(page.get_by_test_id("running-tools").filter(has_text="⚙")).to_have_count(0)
    page.get_by_test_id("filter-all").click()
    checks += 3

    # (5) The transcript as a chat: the root's spawn card opens the planner.
    page.locator("[data-testid=node][data-name=root]").click()
    card = page.locator("#transcript [data-testid=tool-card][data-tool=spawn_agent]")
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-status", "ok")
    expect(page.locator("#transcript [data-role=user] .bubble")).to_have_text("Plan and build the login page")
    expect(page.locator("#transcript li.usage details").first).not_to_have_attribute("open", "")
    card.get_by_test_id("open-child").click()
    expect(page.locator("#drawer-title")).to_have_text("planner")
    checks += 5
    page.screenshot(path=os.path.join(out, "transcript.png"), full_page=True)
    checks = axe(page, "the transcript", checks)

    # (4) The timeline: a bar per session, each with a width.
    page.get_by_test_id("tab-timeline").click()
    rows = page.get_by_test_id("timeline-row")
    expect(rows).to_have_count(3)
    # Measured once laid out (the panel shown, on a loaded machine a moment after the click).
    try:
        page.wait_for_function(
            "() => { const bs = [...document.querySelectorAll('[data-testid=bar]')];"
            " return bs.length === 3 && bs.every(b => b.getBoundingClientRect().width > 0); }",
            timeout=10000)
    except Exception:
        pass  # the assertion below names the widths
    widths = page.eval_on_selector_all("[data-testid=bar]", "bs => bs.map(b => b.getBoundingClientRect().width)")
    assert len(widths) == 3 and all(w > 0 for w in widths), widths
    page.screenshot(path=os.path.join(out, "timeline.png"), full_page=True)
    checks = axe(page, "the timeline", checks + 2)
    # A child waiting for approval: its wait is shaded, live.
    waiting = call(base, "POST", "/v1/runs", {"spec": "approvals"})["root_id"]
    until("the child to wait", lambda: call(base, "GET", f"/v1/runs/{waiting}")["status"] == "suspended")
    page.goto(f"{base}/#run={waiting}")
    page.get_by_test_id("tab-timeline").click()
    publisher_row = page.locator("[data-testid=timeline-row][data-name=publisher]")
    expect(publisher_row.get_by_test_id("wait")).to_have_count(1, timeout=10000)
    checks += 1
    page.screenshot(path=os.path.join(out, "timeline-waiting.png"), full_page=True)
    # Approved and resumed: the wait stays shaded where it was, now with its end.
    [pending] = call(base, "GET", f"/v1/sessions/{waiting}/approvals")["suspensions"][0]["pending"]
    call(base, "POST", f"/v1/sessions/{waiting}/approvals",
         {"decisions": [{"id": pending["id"], "verdict": "allow_once"}]})
    call(base, "POST", f"/v1/runs/{waiting}/resume")
    expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
    waited = publisher_row.get_by_test_id("wait")
    expect(waited).to_have_count(1, timeout=10000)
    expect(waited).to_have_attribute("title", re.compile("^waited "), timeout=10000)
    checks += 2
    # Decided elsewhere and not resumed: the view offers Resume, which goes on.
    held = call(base, "POST", "/v1/runs", {"spec": "approvals"})["root_id"]
    until("the child to wait", lambda: call(base, "GET", f"/v1/runs/{held}")["status"] == "suspended")
    [pending] = call(base, "GET", f"/v1/sessions/{held}/approvals")["suspensions"][0]["pending"]
    call(base, "POST", f"/v1/sessions/{held}/approvals",
         {"decisions": [{"id": pending["id"], "verdict": "reject_once", "reason": "not now"}]})
    page.goto(f"{base}/#run={held}")
    page.get_by_test_id("tab-tree").click()
    expect(page.get_by_test_id("resume")).to_be_visible(timeout=10000)
    page.get_by_test_id("resume").click()
    expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
    expect(page.get_by_test_id("resume")).to_be_hidden()
    checks += 3
    page.get_by_test_id("tab-tree").click()
    checks = axe(page, "a run waiting for approval", checks)

    # (6) Cancel a run: the slow tree stops, Aborted.
    slow = call(base, "POST", "/v1/runs", {"spec": "slow"})["root_id"]
    page.goto(f"{base}/#run={slow}")
    expect(page.locator("[data-testid=node][data-name=sleeper]")).to_have_attribute(
        "data-state", "working", timeout=15000)
    page.get_by_test_id("cancel-run").click()
    expect(page.get_by_test_id("run-status")).to_have_text("Aborted", timeout=20000)
    checks += 1
    # (6) Delete a running child after a confirmation naming what stops.
    slow2 = call(base, "POST", "/v1/runs", {"spec": "slow"})["root_id"]
    page.goto(f"{base}/#run={slow2}")
    sleeper = page.locator("[data-testid=node][data-name=sleeper]")
    expect(sleeper).to_have_attribute("data-state", "working", timeout=15000)
    sleeper.click()
    page.get_by_test_id("delete").click()
    dialog = page.get_by_test_id("delete-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_test_id("delete-stops")).to_have_text("sleeper (Working)")
    page.screenshot(path=os.path.join(out, "delete-confirm.png"))
    checks = axe(page, "the delete confirmation", checks)
    dialog.get_by_test_id("delete-confirm").click()
    expect(page.locator("#drawer-note")).to_contain_text("Deleted", timeout=10000)
    expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
    sleeper_id = next(s["id"] for s in call(base, "GET", f"/v1/runs/{slow2}")["tree"]["sessions"]
                      if s["name"] == "sleeper")
    gone = call(base, "GET", f"/v1/sessions/{sleeper_id}")
    assert gone["deleted"] is True and gone["tombstone"], gone
    checks += 3
    # (6) Message a kept child: it runs again on the message and answers.
    replies = call(base, "POST", "/v1/runs", {"spec": "replies"})["root_id"]
    until("the replies run", lambda: call(base, "GET", f"/v1/runs/{replies}")["status"] == "succeeded")
    page.goto(f"{base}/#run={replies}")
    page.locator("[data-testid=node][data-name=papers]").click()
    expect(page.locator("#transcript li.divider[data-kind=run_started]")).to_have_count(1)
    page.get_by_test_id("message-text").fill("Which one first?")
    page.get_by_test_id("message-send").click()
    expect(page.locator("#drawer-note")).to_have_text("Sent.")
    expect(page.locator("#transcript [data-role=inbox] .bubble", has_text="Which one first?")).to_have_count(
        1, timeout=15000)
    expect(page.locator("#transcript li.divider[data-kind=run_started]")).to_have_count(2, timeout=15000)
    checks += 3

    # (7) The run list: spec names, short ids, filters, labels and paging.
    for i in range(30):
        labels = {"batch": "paged"} if i % 2 == 0 else {"batch": "other"}
        call(base, "POST", "/v1/runs", {"spec": "quick", "labels": labels})
    page.goto(f"{base}/")
    runs = page.get_by_test_id("run")
    expect(runs).to_have_count(25, timeout=15000)
    expect(page.get_by_test_id("runs-more")).to_be_visible()
    page.get_by_test_id("runs-more").click()
    expect(runs).to_have_count(36)
    expect(page.get_by_test_id("runs-more")).to_be_hidden()
    page.get_by_test_id("filter-spec").select_option("deep")
    expect(runs).to_have_count(1)
    expect(runs.get_by_test_id("run-spec")).to_have_text("deep")
    expect(runs.locator("code.short")).to_have_text(root[:8])
    page.get_by_test_id("filter-spec").select_option("")
    page.get_by_test_id("filter-status").select_option("aborted")
    expect(runs).to_have_count(1)
    page.get_by_test_id("filter-status").select_option("")
    page.get_by_test_id("filter-label").fill("batch:paged")
    expect(runs).to_have_count(15)
    expect(page.get_by_test_id("runs-more")).to_be_hidden()
    assert runs.locator(".label").all_inner_texts() == ["batch:paged"] * 15
    checks += 9
    page.screenshot(path=os.path.join(out, "run-list.png"), full_page=True)
    checks = axe(page, "the run list", checks)

    # (8) A laptop's half screen: nothing overflows sideways.
    page.set_viewport_size({"width": 700, "height": 800})
    page.goto(f"{base}/#run={root}")
    expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 1, f"the page overflows sideways by {overflow}px at 700px"
    page.screenshot(path=os.path.join(out, "half-screen.png"), full_page=True)
    checks = axe(page, "the half screen", checks + 1)
    assert not foreign, f"requests left the server's origin: {foreign}"
    assert not errors, errors
    checks += 2
    return checks, root


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--arbor", required=True)
    args.add_argument("--out", required=True)
    a = args.parse_args()
    a.arbor = os.path.abspath(a.arbor)
    os.makedirs(a.out, exist_ok=True)
    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser_path:
        raise SystemExit("chromium is not installed (see .ci/web.sh)")
    if not os.path.exists(AXE):
        raise SystemExit("axe-core is not installed (see .ci/web.sh: npm ci in tests/web)")

    work = tempfile.mkdtemp(prefix="arbor-web-tree-")
    os.makedirs(os.path.join(work, "specs"))
    examples = os.path.join(HERE, "..", "..", "examples")
    for example in ("approvals.toml", "replies.toml"):
        shutil.copy(os.path.join(examples, example), os.path.join(work, "specs"))
    for name, text in (("deep", DEEP), ("slow", SLOW), ("quick", QUICK)):
        with open(os.path.join(work, "specs", f"{name}.toml"), "w") as f:
            f.write(text)
    server, base = start(a.arbor, work)
    checks = 0
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=browser_path,
                                        args=["--no-sandbox", "--disable-gpu"])
            # axe is injected as a script of its own: this context lets it past the CSP (the
            # page's own scripts are checked against the CSP in `strict` below).
            context = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True)
            page = context.new_page()
            errors, foreign = [], []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: None if r.url.startswith(base) else foreign.append(r.url))
            try:
                checks, root = flows(page, base, a.out, checks, foreign, errors)
            except Exception:
                page.screenshot(path=os.path.join(a.out, "failure.png"), full_page=True)
                raise
            context.close()


            # The page's own scripts run under its CSP ('self' only).
            strict = browser.new_page()
            csp_errors = []
            strict.on("console", lambda m: csp_errors.append(m.text) if "Content Security Policy" in m.text else None)
            response = strict.goto(f"{base}/#run={root}")
            assert "script-src 'self'" in response.headers["content-security-policy"]
            expect(strict.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
            assert not csp_errors, csp_errors
            checks += 2
            browser.close()
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(work, ignore_errors=True)
    print(f"web tree: {checks} checks passed; screenshots in {a.out}")


if __name__ == "__main__":
    sys.exit(main())
