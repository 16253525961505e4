#!/usr/bin/env bash
# The checks the anchor projects run beside their tests (run by .ci/run after clippy):
#
#   doc    cargo doc --no-deps --workspace, every rustdoc warning an error
#   hack   cargo hack check --each-feature --workspace: each crate alone, with no features,
#          with each feature by itself and with all of them (features built together hide a
#          missing `dep:` or cfg)
#   msrv   cargo +<rust-version> check --workspace --all-targets --locked, on the minimum
#          Rust version the root Cargo.toml declares (the toolchain is installed by rustup)
#   api    arbor-core's public API (rustdoc JSON on nightly, .ci/public_api.py) against the
#          committed crates/arbor-core/public-api.txt: a change to the surface is deliberate
#          (PUBLIC_API=bless bash .ci/habits.sh rewrites the file)
#   deny   cargo deny check against deny.toml: licences, bans (duplicates warn), sources
#          (crates.io only), and advisories when RustSec's database can be had
#
# HABITS=doc,deny runs some of them. Every step runs even if one before failed; the script
# exits non-zero if any failed. cargo-hack and cargo-deny are installed at pinned versions
# by .ci/tools.sh (minutes the first time on a machine, then cached). A step whose tool or
# toolchain cannot be installed here is skipped, saying so; under CI=true it fails instead.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. .ci/tools.sh

CARGO_HACK=cargo-hack@0.6.46
CARGO_DENY=cargo-deny@0.20.2

steps=",${HABITS:-doc,hack,msrv,api,deny},"
failed=()
start=$SECONDS

# step NAME COMMAND...: runs one step, timed.
step() {
    local name=$1 t0=$SECONDS
    shift
    echo "habits: $name: $*"
    if "$@"; then
        echo "habits: $name ok ($((SECONDS - t0)) s)"
    else
        echo "habits: $name FAILED ($((SECONDS - t0)) s)"
        failed+=("$name")
    fi
}

doc() {
    RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --no-deps --workspace --locked
}

hack() {
    ci_tool "$CARGO_HACK" || { ci_skip "habits: hack: no cargo-hack"; return; }
    # Dev-dependencies stay (--no-dev-deps would rewrite Cargo.lock, which --locked forbids);
    # `check` builds no test target, so their features are not unified in.
    cargo hack check --each-feature --workspace --locked --quiet
}

msrv() {
    local version
    version=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)
    if [ -z "$version" ]; then
        echo "habits: msrv: no rust-version in Cargo.toml"
        return 1
    fi
    if ! rustup run "$version" rustc --version >/dev/null 2>&1; then
        echo "habits: msrv: installing Rust $version"
        if ! rustup toolchain install "$version" --profile minimal >/dev/null 2>&1; then
            ci_skip "habits: msrv: Rust $version cannot be installed here"
            return
        fi
    fi
    # Its own target folder: another compiler's artifacts never evict the main build's.
    # Removed afterwards: nothing reuses it, and it is about a gigabyte.
    local out="${CARGO_TARGET_DIR:-$root/target}/msrv" status=0
    CARGO_TARGET_DIR="$out" cargo "+$version" check --workspace --all-targets --locked --quiet ||
        status=1
    rm -rf "$out"
    return $status
}

api() {
    if ! rustup run nightly rustc --version >/dev/null 2>&1; then
        ci_skip "habits: api: no nightly toolchain (rustdoc's JSON needs one)"
        return
    fi
    local out="${CARGO_TARGET_DIR:-$root/target}/public-api" snapshot=crates/arbor-core/public-api.txt
    RUSTDOCFLAGS="-Z unstable-options --output-format json" CARGO_TARGET_DIR="$out" \
        cargo +nightly doc -p arbor-core --no-deps --locked --quiet || return 1
    python3 .ci/public_api.py "$out/doc/arbor_core.json" >"$out/public-api.txt" || return 1
    if [ "${PUBLIC_API:-}" = bless ]; then
        cp "$out/public-api.txt" "$snapshot"
        echo "habits: api: wrote $snapshot ($(wc -l <"$snapshot") items)"
        return 0
    fi
    if ! diff -u "$snapshot" "$out/public-api.txt"; then
        echo "habits: api: arbor-core's public API changed (the diff above, - committed + now):"
        echo "habits: api: if it is meant, PUBLIC_API=bless HABITS=api bash .ci/habits.sh and commit"
        return 1
    fi
}

deny() {
    ci_tool "$CARGO_DENY" || { ci_skip "habits: deny: no cargo-deny"; return; }
    local status=0
    cargo deny --locked check --hide-inclusion-graph bans licenses sources || status=1
    # Advisories need RustSec's database, a git clone into $CARGO_HOME/advisory-dbs. Fetch
    # it; where that fails (no network), use a copy fetched before, else the copy shipped in
    # .ci/advisory-db.tar.gz (see .ci/advisory-db.txt), unpacked into a throwaway git repo.
    local dbs="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs"
    if timeout 120 cargo deny --locked fetch db >/dev/null 2>&1; then
        cargo deny --locked check --hide-inclusion-graph advisories || status=1
    elif compgen -G "$dbs/*/crates" >/dev/null; then
        echo "habits: deny: RustSec's database cannot be fetched; checking against the copy in $dbs"
        cargo deny --offline --locked check --hide-inclusion-graph advisories || status=1
    else
        shipped_advisories || status=1
    fi
    return $status
}

# shipped_advisories: the advisories check against .ci/advisory-db.tar.gz. cargo-deny reads
# its database as a git repository named after the database's URL, under `db-path`; the copy
# is committed with the upstream commit's date, so cargo-deny judges its age truthfully.
shipped_advisories() {
    local tmp db date
    tmp=$(mktemp -d)
    db="$tmp/dbs/advisory-db-3157b0e258782691"
    date=$(sed -n 's/^date: *//p' .ci/advisory-db.txt)
    mkdir -p "$db"
    tar -xzf .ci/advisory-db.tar.gz -C "$db"
    (cd "$db" && git init -q && git add -A &&
        GIT_COMMITTER_DATE="$date" git -c user.name=ci -c user.email=ci@localhost \
            commit -q --date "$date" -m "RustSec advisory-db (shipped copy)")
    sed "s|^\[advisories\]|[advisories]\ndb-path = \"$tmp/dbs\"|" deny.toml >"$tmp/deny.toml"
    echo "habits: deny: RustSec's database cannot be fetched; checking against the shipped copy of $date"
    cargo deny --config "$tmp/deny.toml" --offline --locked check --hide-inclusion-graph advisories
    local status=$?
    rm -rf "$tmp"
    return $status
    return $status
}

for name in doc hack msrv api deny; do
    case "$steps" in
        *",$name,"*) step "$name" "$name" ;;
    esac
done

echo "habits: done in $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "habits: failed: ${failed[*]}"
    exit 1
fi
