"""A live ``arbor serve`` for the client's tests: the repository's example specs, an
in-memory store, a bearer token, a free loopback port. ``ARBOR`` names the binary (default:
the workspace's target/debug/arbor)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "clients" / "python"))

TOKEN = "client-test-token"

#: A lead whose one coding child commits a change to ``greet.sh``.
CODING = """task = "t"
root = "lead"
[workspace]
repository = "REPO"
worktrees = "WORKTREES"
id = "client"
[agents.lead]
children = ["edit"]
[[agents.lead.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "edit", name = "edit", input = "go" } }]
[[agents.lead.turns]]
text = "done"
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory):
    arbor = os.environ.get("ARBOR", str(ROOT / "target" / "debug" / "arbor"))
    work = tmp_path_factory.mktemp("serve")
    specs = work / "specs"
    specs.mkdir()
    for name in ("approvals", "question", "review", "quickstart"):
        shutil.copy(ROOT / "examples" / f"{name}.toml", specs / f"{name}.toml")
    # A coding child's repository (its merge, diff and discard).
    repo = work / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (repo / "greet.sh").write_text("greeting() { echo hello; }\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run(
        [*git, "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
        + ["commit", "-q", "-m", "init"],
        check=True,
    )
    (specs / "coding.toml").write_text(
        CODING.replace("REPO", str(repo)).replace("WORKTREES", str(work / "worktrees"))
    )
    line = subprocess.run(
        [arbor, "serve", "--hash-token", "tests"],
        input=TOKEN,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (work / "tokens").write_text(line + "\n")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(work / "serve.log", "w")
    proc = subprocess.Popen(
        [
            arbor,
            "serve",
            "--memory",
            "--specs",
            str(specs),
            "--tokens",
            str(work / "tokens"),
            "--listen",
            f"127.0.0.1:{port}",
            "--max-streams-per-tenant",
            "4",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "ARBOR_LOG": "warn"},
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(
                f"arbor serve did not start: {(work / 'serve.log').read_text()}"
            )
        time.sleep(0.05)
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
