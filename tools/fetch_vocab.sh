#!/usr/bin/env bash
# fetch_vocab.sh - llama.cpp's tokenizer test vocabularies for `make test-vocab`.
#
# What: the models/ggml-vocab-*.gguf files of llama.cpp with their .inp/.out vectors (strings
#   separated by "\n__ggml_vocab_test__\n"; one line of ids per string), taken from the
#   llama-cpp-python source distribution, which vendors llama.cpp. Nothing of it is built.
# How:  tools/fetch_vocab.sh DIR [VERSION]
#   DIR      where the vocab files go (kept: ~70 MB of vocab files, not the 77 MB tarball)
#   VERSION  llama-cpp-python version [0.3.36]
#   VOCAB_SDIST=path/llama_cpp_python-VERSION.tar.gz uses a tarball already on disk instead of
#   `pip download --no-deps --no-binary :all: llama-cpp-python==VERSION`.
# Exit status: 0 when DIR holds the files (fetched now or before), 1 when they cannot be had
#   (PyPI unreachable, no pip ...), with the reason on stderr.
set -euo pipefail
DIR="${1:?usage: tools/fetch_vocab.sh DIR [VERSION]}"
VER="${2:-0.3.36}"
PYTHON="${PYTHON:-python3}"
[ -f "$DIR/.complete" ] && exit 0

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
sdist="${VOCAB_SDIST:-}"
if [ -z "$sdist" ]; then
    echo "fetch_vocab: pip download llama-cpp-python==$VER (source distribution, ~77 MB, not built)" >&2
    if ! "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: --dest "$TMP/dl" \
            "llama-cpp-python==$VER" >"$TMP/pip.log" 2>&1; then
        tail -n 3 "$TMP/pip.log" >&2
        echo "fetch_vocab: cannot download llama-cpp-python==$VER (PyPI unreachable?)" >&2
        exit 1
    fi
    sdist="$(ls "$TMP"/dl/llama_cpp_python-*.tar.gz 2>/dev/null | head -n 1)"
fi
if [ ! -f "$sdist" ]; then
    echo "fetch_vocab: no source tarball ($sdist)" >&2
    exit 1
fi
mkdir -p "$TMP/x"
if ! tar -xzf "$sdist" -C "$TMP/x" --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*'; then
    echo "fetch_vocab: $sdist has no vendor/llama.cpp/models/ggml-vocab-* files" >&2
    exit 1
fi
mkdir -p "$DIR"
find "$TMP/x" -path '*/vendor/llama.cpp/models/ggml-vocab-*' -type f -exec mv {} "$DIR"/ \;
n="$(ls "$DIR"/ggml-vocab-*.gguf 2>/dev/null | wc -l)"
echo "fetch_vocab: $n vocabularies in $DIR" >&2
[ "$n" -gt 0 ] && touch "$DIR/.complete"
