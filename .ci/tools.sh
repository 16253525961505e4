# Sourced by the CI scripts: where their cargo tools live and how they get there.
#
# Tools are built from crates.io with `cargo install --locked`, at a pinned version, into
# $ARBOR_CI_TOOLS (default ~/.cache/arbor/ci-tools: outside the checkout, so that CI's fresh
# clone on a machine reuses what an earlier run built; set ARBOR_CI_TOOLS=.ci/tools to keep
# them in the checkout). Installing a version already there takes a fraction of a second.

ci_tools="${ARBOR_CI_TOOLS:-${XDG_CACHE_HOME:-${HOME:-$PWD/.ci/tools}/.cache}/arbor/ci-tools}"
mkdir -p "$ci_tools"
ci_tools=$(cd "$ci_tools" && pwd)
export PATH="$ci_tools/bin:$PATH"

# ci_tool CRATE[@VERSION]: installs the crate's binaries into $ci_tools unless that version
# is there. Returns non-zero (after saying so) when it cannot be installed.
ci_tool() {
    local spec=$1 log t0
    if [ -x "$ci_tools/bin/${spec%@*}" ] && [ "$spec" = "${spec%@*}" ]; then
        return 0
    fi
    log=$(mktemp)
    t0=$SECONDS
    if ! grep -qs "^\"${spec/@/ }" "$ci_tools/.crates.toml"; then
        echo "ci tools: installing $spec into $ci_tools (minutes, once per machine)"
    fi
    if ! cargo install --locked --root "$ci_tools" "$spec" >"$log" 2>&1; then
        echo "ci tools: $spec could not be installed; the end of its log:"
        tail -n 20 "$log"
        rm -f "$log"
        return 1
    fi
    if grep -q '^ *Installed package' "$log"; then
        echo "ci tools: installed $spec into $ci_tools in $((SECONDS - t0)) s"
    fi
    rm -f "$log"
}

# ci_skip MESSAGE: a step that cannot run here says so. Outside CI it is skipped (returns 0);
# under CI=true it fails (returns 1), so a missing tool never passes as a green step.
ci_skip() {
    if [ "${CI:-}" = true ]; then
        echo "$1: CI=true, so this FAILS instead of skipping"
        return 1
    fi
    echo "$1: skipped"
}
