#!/usr/bin/env bash
# The typed clients' suites against a live `arbor serve` each starts (in-memory store, a
# bearer token, a free loopback port): first a check that their generated code matches
# clients/openapi.json, then the Python client's pytest suite and the TypeScript client's
# node:test suite (compiled with tsc, which also type-checks both against the generated
# types). Builds target/debug/arbor if it is not current; tools come from clients/tools.sh.
set -euo pipefail
cd "$(dirname "$0")"
t0=$SECONDS
. ./tools.sh
# Built (a no-op when it is current), so a stale binary is never what is tested.
(cd .. && cargo build -q -p arbor-cli --locked)
export ARBOR="$PWD/../target/debug/arbor"
bash generate.sh --check
(cd python && timeout 300 "$venv/bin/python" -m pytest -q -p no:cacheprovider)
(cd typescript && rm -rf dist && node_modules/.bin/tsc -p . && timeout 300 node --test dist/test/*.test.js)
echo "clients: done in $((SECONDS - t0)) s"
