#!/usr/bin/env bash
# Fuzz smoke for CI: builds every cargo-fuzz target and runs each for a short while
# (FUZZ_SECONDS, default 20) from its seed corpus; exits non-zero on a crash, a panic, a
# timeout or a leak. Needs a nightly toolchain: without one it says so and exits 0, or 1 under CI=true (the
# stable fuzz-style tests in the crates' test suites still run). cargo-fuzz is installed
# once by .ci/tools.sh (kept between runs and clones on the same machine).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=${FUZZ_SECONDS:-20}

. .ci/tools.sh
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    ci_skip "fuzz smoke: no nightly toolchain (the stable fuzz-style tests ran with the suite)"
    exit
fi
if ! cargo fuzz --version >/dev/null 2>&1 && ! ci_tool cargo-fuzz; then
    ci_skip "fuzz smoke: cargo-fuzz could not be installed"
    exit
fi

# Its own target folder, so the fuzz build (instrumented, nightly) never invalidates the
# workspace's; kept in the CI cache outside the checkout (as .ci/web.sh keeps its venv), so a
# fresh clone on the same machine rebuilds only arbor's crates, not their dependencies (the
# build was about 8 of CI's 22 minutes).
cache="${ARBOR_CI_CACHE:-${XDG_CACHE_HOME:-${HOME:-$root/.ci}/.cache}/arbor}"
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$cache/fuzz-target}"
# Each checkout path builds arbor's crates anew beside the old ones, so the cache only grows
# (15 GB was seen on a development machine): past FUZZ_CACHE_MAX_GB (default 4) it is
# dropped and rebuilt once.
max_gb=${FUZZ_CACHE_MAX_GB:-4}
if [ -d "$CARGO_TARGET_DIR" ]; then
    used_gb=$(( $(du -sk "$CARGO_TARGET_DIR" | cut -f1) / 1024 / 1024 ))
    if [ "$used_gb" -ge "$max_gb" ]; then
        echo "fuzz smoke: its build cache holds ${used_gb} GB (over ${max_gb}); dropping it"
        rm -rf "$CARGO_TARGET_DIR"
    fi
fi

# Release with debug assertions (so integer overflow panics), without AddressSanitizer:
# the code is safe Rust, and the build is minutes shorter. The long campaign adds ASan.
flags="-O -a -s none"

start=$SECONDS
cargo +nightly fuzz build $flags
echo "fuzz smoke: built in $((SECONDS - start)) s"

# Corpora are copied so a run's new inputs never dirty the checkout.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for target in $(cargo +nightly fuzz list); do
    corpus="$work/$target"
    mkdir -p "$corpus"
    if [ -d "fuzz/corpus/$target" ]; then
        cp -R "fuzz/corpus/$target/." "$corpus/"
    fi
    t0=$SECONDS
    if cargo +nightly fuzz run $flags "$target" "$corpus" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -dict=fuzz/dict/json.dict -print_final_stats=1 >"$work/$target.log" 2>&1; then
        echo "fuzz smoke: $target ok ($((SECONDS - t0)) s, $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$work/$target.log" | grep -o '[0-9]*$') runs)"
    else
        echo "fuzz smoke: $target FAILED; its log:"
        tail -n 60 "$work/$target.log"
        status=1
    fi
done
echo "fuzz smoke: done in $((SECONDS - start)) s"
exit $status
