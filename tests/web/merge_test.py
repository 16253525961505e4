"""A coding child's merge in the web view, in a real browser (Debian's chromium driven by
Playwright) against a live `arbor serve` and real git.

A lead's coding child commits a change; the lead's merge_child waits for a person. The
view's card shows the merge's summary and its files with lines added and removed; Show
changes reads the child's patch (its hunks, added and removed lines marked) from
/v1/sessions/{id}/diff; Merge approves it and the tree goes on: the main checkout then holds
exactly one merge commit of the child's branch, and the decision is in the lead's transcript
with who took it. Saves a screenshot under the artifacts directory.

Usage: python merge_test.py --arbor PATH --out DIR
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from playwright.sync_api import expect, sync_playwright

from view_test import call, start, until

SPEC = """task = "Capitalise the greeting and merge it"
root = "lead"

[workspace]
repository = "%(repo)s"
worktrees = "%(worktrees)s"
id = "web"

[agents.lead]
children = ["edit"]
tools = ["merge_child"]
[[agents.lead.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "edit", name = "edit", input = "Capitalise it" } }]
[[agents.lead.turns]]
tool_calls = [{ name = "merge_child", arguments = { child = "edit" } }]
[[agents.lead.turns]]
text = "Merged."

[agents.edit]
workspace = true
tools = ["edit_file", "run_command"]
[[agents.edit.turns]]
tool_calls = [{ name = "edit_file", arguments = { path = "greet.sh", old = "hello", new = "Hello" } }]
[[agents.edit.turns]]
tool_calls = [{ name = "run_command", arguments = { argv = ["git", "-c", "user.name=e", "-c", "user.email=e@example.invalid", "commit", "-q", "-am", "Capitalise the greeting"] } }]
[[agents.edit.turns]]
text = "Committed."
"""


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


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
    work = tempfile.mkdtemp(prefix="arbor-merge-")
    repo = os.path.join(work, "repo")
    os.makedirs(repo)
    git(repo, "init", "-q", "-b", "main")
    with open(os.path.join(repo, "greet.sh"), "w") as f:
        f.write("greeting() { echo hello; }\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "init")
    start_commit = git(repo, "rev-parse", "HEAD")
    os.makedirs(os.path.join(work, "specs"))
    with open(os.path.join(work, "specs", "merge.toml"), "w") as f:
        f.write(SPEC % {"repo": repo, "worktrees": os.path.join(work, "worktrees")})
    server, base = start(a.arbor, work)
    checks = 0
    try:
        root = call(base, "POST", "/v1/runs", {"spec": "merge"})["root_id"]
        until("the merge to wait for a person",
              lambda: call(base, "GET", f"/v1/runs/{root}")["status"] == "suspended")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=browser_path,
                                        args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{base}/#run={root}")

            card = page.locator("[data-testid=approval][data-tool=merge_child]")
            expect(card).to_have_count(1)
            expect(card.get_by_test_id("review-summary")).to_contain_text(
                "merge edit (agent/")
            expect(card.get_by_test_id("review-summary")).to_contain_text("1 files, +1 -1")
            expect(card.get_by_test_id("review-file")).to_have_text("greet.sh +1 -1")
            expect(card.get_by_test_id("approve")).to_have_text("Merge")
            checks += 4

            # The hunks, read from the child's diff.
            card.get_by_test_id("show-changes").click()
            patch = card.get_by_test_id("patch")
            expect(patch).to_contain_text("@@")
            expect(patch.locator(".line.add")).to_contain_text(["+greeting() { echo Hello; }"])
            expect(patch.locator(".line.del")).to_contain_text(["-greeting() { echo hello; }"])
            expect(card.get_by_test_id("show-changes")).to_have_text("Hide changes")
            assert git(repo, "rev-parse", "HEAD") == start_commit, "nothing merged before Merge"
            checks += 4
            page.screenshot(path=os.path.join(a.out, "merge-review.png"), full_page=True)

            card.get_by_test_id("approve").click()
            expect(page.get_by_test_id("run-status")).to_have_text("Done", timeout=20000)
            expect(page.get_by_test_id("approval")).to_have_count(0)
            checks += 2
            merges = git(repo, "rev-list", "--merges", "--count", "main")
            assert merges == "1", merges
            with open(os.path.join(repo, "greet.sh")) as f:
                assert f.read() == "greeting() { echo Hello; }\n"
            checks += 1

            # The decision, once, with who took it; the merge's result in the lead's chat.
            page.locator("[data-testid=node][data-name=lead]").click()
            decided = page.locator("#transcript li",
                                   has_text="allow_once merge_child by web view (tenant local)")
            expect(decided).to_have_count(1)
            result = page.locator("#transcript [data-testid=tool-card][data-tool=merge_child]")
            expect(result).to_have_attribute("data-status", "ok")
            expect(result.locator("pre.result")).to_contain_text('"merged":true')
            checks += 2
            assert not errors, errors
            browser.close()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)
    print(f"merge view: {checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
