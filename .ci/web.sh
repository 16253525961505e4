#!/usr/bin/env bash
# The service's clients, as real users run them: the web view in Debian's chromium driven by
# Playwright (tests/web/view_test.py: approvals, questions, reconnects, resume; and
# tests/web/tree_test.py: the tree, the timeline, the transcript, the controls, the run list
# and an axe-core accessibility check; tests/web/merge_test.py: a coding child's merge, its
# files and hunks, approved with Merge), and Schemathesis against /v1/openapi.json
# (tests/web/schema_test.sh). Installs what they need, idempotently: chromium by apt (once
# per machine), Playwright and Schemathesis by pip into a venv under the CI cache (kept
# between runs), axe-core by npm into tests/web/node_modules (from its package-lock.json).
# Expects `cargo test` to have built target/debug/arbor.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${ARBOR_CI_CACHE:-${XDG_CACHE_HOME:-${HOME:-$PWD/.ci}/.cache}/arbor}"
venv="$cache/web-venv"
playwright_version=1.65.2
schemathesis_version=4.32.5
t0=$SECONDS

if ! command -v chromium >/dev/null 2>&1; then
    echo "web: installing Debian's chromium (once per machine)"
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
want="playwright==$playwright_version schemathesis==$schemathesis_version"
if ! "$venv/bin/python" -m pip freeze 2>/dev/null | grep -qx "playwright==$playwright_version" ||
   ! "$venv/bin/python" -m pip freeze 2>/dev/null | grep -qx "schemathesis==$schemathesis_version"; then
    echo "web: installing $want into $venv"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q $want
fi
if ! cmp -s tests/web/package-lock.json tests/web/node_modules/.arbor-lock 2>/dev/null; then
    echo "web: installing axe-core into tests/web/node_modules"
    (cd tests/web && npm ci --silent --no-audit --no-fund >/dev/null)
    cp tests/web/package-lock.json tests/web/node_modules/.arbor-lock
fi
echo "web: tools ready in $((SECONDS - t0)) s"

if [ ! -x target/debug/arbor ]; then
    cargo build -q -p arbor-cli --locked
fi
artifacts=target/web-artifacts
mkdir -p "$artifacts"
timeout 180 "$venv/bin/python" tests/web/view_test.py \
    --arbor target/debug/arbor --spec examples/approvals.toml --out "$artifacts"
timeout 240 "$venv/bin/python" tests/web/tree_test.py --arbor target/debug/arbor --out "$artifacts"
timeout 120 "$venv/bin/python" tests/web/merge_test.py --arbor target/debug/arbor --out "$artifacts"
timeout 300 bash tests/web/schema_test.sh "$venv" target/debug/arbor
echo "web: done in $((SECONDS - t0)) s"
