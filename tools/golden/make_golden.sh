#!/usr/bin/env bash
# make_golden.sh - llama.cpp's golden outputs for one GGUF model (or for every model of tests/data).
#
# What: builds tools/golden/llama_golden.c (our own program, using only llama.h) against an
#   out-of-tree llama.cpp source + build, then runs it and llama-perplexity on the model with
#   both of llama.cpp's attention paths (flash attention on, llama.cpp's default here, and off).
#   llama.cpp code never enters this repo. tests/test_model_ref.c reads the outputs.
#
# How:
#   tools/golden/make_golden.sh MODEL.gguf STEM [OUTDIR]   goldens of one model (OUTDIR: tests/data)
#   tools/golden/make_golden.sh --tests-data                every model of tests/data (list below)
#   Environment (defaults in brackets):
#     LLAMA_CPP_DIR   llama.cpp source tree  [/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp]
#     LLAMA_BUILD_DIR llama.cpp build, holding bin/libllama.so, bin/llama-perplexity [/work/peer/build]
#                     (tools/peer/build_peer.sh builds both, outside this repo)
#     PROMPT          prompt of STEM.greedy.json and the logits ["Once upon a time"]
#     PROMPT2, PROMPT2_STEM  optional second prompt, greedy ids only, into PROMPT2_STEM.greedy.json
#     PPL_TEXT        perplexity text [tests/data/story.txt]
#     PPL_CTXS        context sizes for llama-perplexity ["32 64 128"]
#     N_GEN           greedy tokens per prompt [32]
#     GOLDEN_BIN_DIR  where llama_golden is built [${TMPDIR:-/tmp}/kvtier-golden]
#   Settings: 2 threads, default (F16) KV cache, context 512 for greedy; prompts tokenized
#   with llama_tokenize(add_special=true, parse_special=true) (BOS where the model adds it).
#   llama-perplexity runs with -c CTX -b CTX -t 2. It needs >= 2*CTX tokens of text; a CTX
#   for which the text is too short is left out with a warning (story.txt is 383 SmolLM2
#   tokens, so CTX=256 is left out there).
#
# Outputs (in OUTDIR):
#   STEM.greedy.json         prompt, prompt_ids, greedy_ids (N_GEN argmax ids), top2_gaps, greedy_text
#   STEM.logits.txt          logits after the last prompt token, "%.6f" per line (flash attention on)
#   STEM.logits-fa-off.txt   the same logits from llama.cpp's other attention path (-fa off)
#   STEM.bos-logits.txt      the logits after BOS alone (only for models that add a BOS): one
#                            position, no attention mixing, both paths equal; kvtier must match
#                            them to 0.01% of the largest logit (the matmuls are exact)
#   STEM.ppl.json            [{"ctx": CTX, "ppl": X, "ppl_fa_off": Y}, ...] ("Final estimate: PPL = X")
#   The spread between the two attention paths is llama.cpp's own band on that file; the tests
#   require kvtier within max(band, 1%) of the largest logit (tests/test_model_ref.c). It is
#   ~0.01-0.3% on F32/F16 models and several % on quantized ones (SmolLM2 Q4_1: 3.9%): llama.cpp
#   quantizes activations to Q8 for quantized matmuls, which amplifies rounding differences.
#
# The models of tests/data and how their goldens were made (--tests-data runs these):
#   stories260K, llama-2-tiny-random, qwen3-tiny  MODEL=tests/data/STEM.gguf, the defaults above
#   smollm2  MODEL=$SMOLLM2 [~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf, `make model`],
#            PROMPT="The capital of France is" PROMPT2="Once upon a time" PROMPT2_STEM=smollm2-story
#            PPL_CTXS="64 128 256"
#   quant-q4_k_m  made with the quantized set by tools/golden/make_quant.sh (SHIP=1 copies it here)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/tools/golden"

if [ "${1:-}" = "--tests-data" ]; then
    for stem in stories260K llama-2-tiny-random qwen3-tiny; do
        "$HERE/make_golden.sh" "$ROOT/tests/data/$stem.gguf" "$stem"
    done
    SMOLLM2="${SMOLLM2:-$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf}"
    PROMPT="The capital of France is" PROMPT2="Once upon a time" PROMPT2_STEM=smollm2-story PPL_CTXS="64 128 256" \
        "$HERE/make_golden.sh" "$SMOLLM2" smollm2
    exit 0
fi
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
MODEL="$1"
STEM="$2"
OUT="${3:-$ROOT/tests/data}"
LLAMA_CPP_DIR="${LLAMA_CPP_DIR:-/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp}"
LLAMA_BUILD_DIR="${LLAMA_BUILD_DIR:-/work/peer/build}"
PROMPT="${PROMPT:-Once upon a time}"
PPL_TEXT="${PPL_TEXT:-$ROOT/tests/data/story.txt}"
PPL_CTXS="${PPL_CTXS:-32 64 128}"
N_GEN="${N_GEN:-32}"
LIBDIR="$LLAMA_BUILD_DIR/bin"
BIN_DIR="${GOLDEN_BIN_DIR:-${TMPDIR:-/tmp}/kvtier-golden}"
BIN="$BIN_DIR/llama_golden"

for f in "$LLAMA_CPP_DIR/include/llama.h" "$LLAMA_CPP_DIR/ggml/include/ggml.h" \
         "$LIBDIR/libllama.so" "$LIBDIR/llama-perplexity" "$MODEL" "$PPL_TEXT"; do
    [ -e "$f" ] || { echo "make_golden: missing $f" >&2; exit 1; }
done
mkdir -p "$OUT" "$BIN_DIR"

# (a) build the helper against the peer's headers and shared libs (rpath -> no LD_LIBRARY_PATH)
if [ ! -x "$BIN" ] || [ "$HERE/llama_golden.c" -nt "$BIN" ] || [ "$LIBDIR/libllama.so" -nt "$BIN" ]; then
    echo "== building $BIN"
    gcc -std=c11 -O2 -Wall -Wextra \
        -I"$LLAMA_CPP_DIR/include" -I"$LLAMA_CPP_DIR/ggml/include" \
        "$HERE/llama_golden.c" -o "$BIN" \
        -L"$LIBDIR" -Wl,-rpath,"$LIBDIR" -lllama -lggml -lggml-base
fi

# (b) greedy ids and logits, both attention paths
echo "== $STEM: greedy ids and logits"
"$BIN" -m "$MODEL" -p "$PROMPT" -n "$N_GEN" -t 2 -c 512 -o "$OUT/$STEM.greedy.json" -l "$OUT/$STEM.logits.txt"
GOLDEN_FA_OFF=1 "$BIN" -m "$MODEL" -p "$PROMPT" -n 1 -t 2 -c 512 \
    -o "$BIN_DIR/fa-off.greedy.json" -l "$OUT/$STEM.logits-fa-off.txt"
# logits after BOS alone (models that add a BOS): no attention mixing, so llama.cpp's two paths
# agree exactly and the check is of the matmuls and their activation quantization only
rm -f "$OUT/$STEM.bos-logits.txt"
"$BIN" -m "$MODEL" -p "" -n 1 -t 2 -c 64 -o "$BIN_DIR/bos.greedy.json" -l "$OUT/$STEM.bos-logits.txt" 2>/dev/null ||
    { rm -f "$OUT/$STEM.bos-logits.txt"; echo "== $STEM adds no BOS: no bos-logits"; }
if [ -n "${PROMPT2:-}" ]; then
    "$BIN" -m "$MODEL" -p "$PROMPT2" -n "$N_GEN" -t 2 -c 512 -o "$OUT/${PROMPT2_STEM:-$STEM-2}.greedy.json"
fi

# (c) perplexity, both attention paths
echo "== $STEM: perplexity"
ppl_of() { # CTX FA -> PPL on stdout (empty when llama-perplexity refused)
    local log ppl="" try
    log="$(mktemp)"
    # llama.cpp logs from a thread of its own and now and then exits (status 0) before the
    # last lines are written: run again until "Final estimate" is there
    for try in 1 2 3 4 5 6 7 8 9 10; do
        if ! "$LIBDIR/llama-perplexity" -m "$MODEL" -f "$PPL_TEXT" -c "$1" -b "$1" -t 2 -fa "$2" >"$log" 2>&1; then
            grep -iE "need at least|error" "$log" >&2 || tail -n 5 "$log" >&2
            break
        fi
        ppl="$(sed -n 's/.*Final estimate: PPL = \([0-9.eE+-]*\).*/\1/p' "$log" | tail -n1)"
        [ -z "$ppl" ] || break
        echo "make_golden: llama-perplexity output cut short (try $try), again" >&2
    done
    rm -f "$log"
    echo "$ppl"
}
entries=()
for c in $PPL_CTXS; do
    ppl="$(ppl_of "$c" auto)" # llama.cpp's default: flash attention where supported (the CPU: on)
    ppl2="$(ppl_of "$c" off)"
    if [ -z "$ppl" ] || [ -z "$ppl2" ]; then
        echo "make_golden: WARNING: no PPL for ctx=$c (left out)" >&2
        continue
    fi
    echo "ctx=$c ppl=$ppl ppl_fa_off=$ppl2"
    entries+=("$(printf '{"ctx": %d, "ppl": %.4f, "ppl_fa_off": %.4f}' "$c" "$ppl" "$ppl2")")
done
[ ${#entries[@]} -gt 0 ] || { echo "make_golden: no perplexity at any of $PPL_CTXS" >&2; exit 1; }
{ printf '['; sep=''; for e in "${entries[@]}"; do printf '%s%s' "$sep" "$e"; sep=', '; done; printf ']\n'; } \
    > "$OUT/$STEM.ppl.json"

# (d) llama.cpp's band on this file: max |fa on - fa off| / max |fa on|
awk 'NR == FNR { a[FNR] = $1; next }
     { d = $1 - a[FNR]; if (d < 0) d = -d; if (d > s) s = d; m0 = a[FNR] < 0 ? -a[FNR] : a[FNR]; if (m0 > m) m = m0 }
     END { printf "== %s: %d logits, llama.cpp fa on/off band %.3f%% of max |logit| %.5f\n", stem, FNR, 100 * s / m, m }' \
    stem="$STEM" "$OUT/$STEM.logits.txt" "$OUT/$STEM.logits-fa-off.txt"
ls -l "$OUT/$STEM".*
