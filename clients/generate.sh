#!/usr/bin/env bash
# Regenerates the typed clients' generated code from clients/openapi.json (the document
# `arbor serve` serves; arbor-server's test `the_clients_document_is_current` keeps it so):
# the Python client's pydantic models (datamodel-code-generator) and the TypeScript client's
# path and schema types (openapi-typescript); and the Python client's blocking client from
# its async source (unasync: arbor_client/_async -> arbor_client/_sync). With --check, regenerates into a scratch
# folder and fails if the committed code differs (CI runs it so).
#
# Tools are pinned and installed once per machine into the CI cache (clients/tools.sh).
set -euo pipefail
cd "$(dirname "$0")"
check=false
[ "${1:-}" = "--check" ] && check=true

. ./tools.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$venv/bin/datamodel-codegen" --input openapi.json --input-file-type openapi \
    --output "$out/models.py" --output-model-type pydantic_v2.BaseModel \
    --target-python-version 3.10 --use-standard-collections --use-union-operator \
    --field-constraints --disable-timestamp --use-schema-description \
    --use-field-description --enum-field-as-literal all --collapse-root-models \
    --formatters black isort \
    2> >(grep -v -e FutureWarning -e 'warnings.warn' -e NamingHintWarning -e _warn_naming_hint >&2)
"$node_tools/node_modules/.bin/openapi-typescript" openapi.json -o "$out/schema.ts" >/dev/null
mkdir -p "$out/_async" "$out/_sync"
cp python/arbor_client/_async/client.py "$out/_async/client.py"
"$venv/bin/python" python/unasync_rules.py "$out/_async/" "$out/_sync/"
"$venv/bin/black" -q "$out/_sync/client.py"

if $check; then
    status=0
    cmp -s "$out/models.py" python/arbor_client/models.py || {
        echo "clients: python/arbor_client/models.py is stale: run bash clients/generate.sh" >&2
        status=1
    }
    cmp -s "$out/schema.ts" typescript/src/schema.ts || {
        echo "clients: typescript/src/schema.ts is stale: run bash clients/generate.sh" >&2
        status=1
    }
    cmp -s "$out/_sync/client.py" python/arbor_client/_sync/client.py || {
        echo "clients: python/arbor_client/_sync/client.py is stale: run bash clients/generate.sh" >&2
        status=1
    }
    exit $status
fi
cp "$out/models.py" python/arbor_client/models.py
cp "$out/schema.ts" typescript/src/schema.ts
cp "$out/_sync/client.py" python/arbor_client/_sync/client.py
echo "clients: generated python/arbor_client/{models.py,_sync/client.py} and typescript/src/schema.ts"
