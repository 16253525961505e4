# Sourced: the typed clients' tools, pinned, installed idempotently: a Python venv with the
# generator, the client's dependencies and pytest, in the CI cache (kept between runs); the
# TypeScript client's node_modules (openapi-fetch; openapi-typescript, typescript) from its
# package-lock.json, in clients/typescript (npm's own cache keeps the downloads). Sets $venv
# and $node_tools.
cache="${ARBOR_CI_CACHE:-${XDG_CACHE_HOME:-${HOME:-$PWD/.ci}/.cache}/arbor}"
venv="$cache/clients-venv"
_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
node_tools="$_here/typescript"

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
# The marker names the pins and the venv's Python: a venv made again (another Python) gets
# its packages again.
_want="$("$venv/bin/python" -V 2>&1)
$(cat "$_here/python/requirements-dev.txt")"
if [ "$(cat "$venv/.requirements" 2>/dev/null)" != "$_want" ]; then
    echo "clients: installing the Python tools into $venv"
    "$venv/bin/python" -m pip install -q -r "$_here/python/requirements-dev.txt"
    printf '%s' "$_want" > "$venv/.requirements"
fi
if ! cmp -s "$node_tools/package-lock.json" "$node_tools/node_modules/.arbor-lock" 2>/dev/null; then
    echo "clients: installing the TypeScript client's packages into $node_tools/node_modules"
    (cd "$node_tools" && npm ci --silent --no-audit --no-fund >/dev/null)
    cp "$node_tools/package-lock.json" "$node_tools/node_modules/.arbor-lock"
fi
