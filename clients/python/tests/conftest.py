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
