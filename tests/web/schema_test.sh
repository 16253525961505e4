#!/usr/bin/env bash
# Schemathesis against a live `arbor serve`: every operation of /v1/openapi.json (but the
# event streams, which follow a live run) with a bounded number of generated requests; no response
# may be a 5xx or break the document's schema. Usage: schema_test.sh VENV ARBOR
set -euo pipefail
venv=$1
arbor=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/specs"
cp "$root/examples/approvals.toml" "$root/examples/review.toml" "$work/specs/"
cd "$work"
env -u ARBOR_TOKENS -u ARBOR_LOG "$arbor" serve --listen 127.0.0.1:0 --specs specs --memory 2>serve.log &
pid=$!
base=""
for _ in $(seq 1 300); do
    base=$(grep -o 'http://127.0.0.1:[0-9]*' serve.log | head -n1 || true)
    [ -n "$base" ] && break
    sleep 0.1
done
[ -n "$base" ] || { echo "schema: arbor serve did not start"; cat serve.log; exit 1; }
# Some data to read: a finished run and one waiting for approval, whose root every `{id}`
# gets (so the operations on a session reach their logic, not only the unknown-id answer).
curl -sf -X POST "$base/v1/runs" -H 'content-type: application/json' -d '{"spec":"review"}' >/dev/null
root=$(curl -sf -X POST "$base/v1/runs" -H 'content-type: application/json' -d '{"spec":"approvals"}' |
    grep -o '"root_id":"[^"]*"' | head -n1 | cut -d'"' -f4)
[ -n "$root" ] || { echo "schema: no run started"; exit 1; }
printf '[parameters]\n"path.id" = "%s"\n' "$root" >schemathesis.toml
"$venv/bin/st" --config-file schemathesis.toml run "$base/v1/openapi.json" \
    --checks not_a_server_error,response_schema_conformance,status_code_conformance \
    --exclude-path-regex '/events$' \
    --phases examples,coverage,fuzzing \
    --max-examples "${SCHEMA_EXAMPLES:-25}" \
    --request-timeout 10 \
    --seed 1 \
    --no-color
