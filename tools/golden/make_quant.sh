#!/usr/bin/env bash
# make_quant.sh - quantized test models made by llama.cpp's own llama-quantize, with goldens.
#
# What: writes one BF16 llama-architecture GGUF with `kvtier mkmodel` (random weights), has
#   llama.cpp's llama-quantize make the other types from it, and records llama.cpp's goldens for
#   every file with tools/golden/make_golden.sh (logits with flash attention on and off, greedy
#   ids, perplexity on tests/data/story.txt). The spread of llama.cpp's two attention paths is
#   its own band on each file: tests/test_model_ref.c requires kvtier within max(band, 1%).
#
# How:  tools/golden/make_quant.sh OUTDIR        (`make quant` runs it with OUTDIR=~/.cache/kvtier/quant)
#   Environment (defaults in brackets):
#     KVTIER          the kvtier binary [build/kvtier]
#     LLAMA_BUILD_DIR llama.cpp build, holding bin/llama-quantize [/work/peer/build]
#                     (and LLAMA_CPP_DIR etc. for make_golden.sh; see there)
#     TYPES           llama-quantize types ["BF16 Q8_0 Q4_0 Q4_1 Q4_K_M Q5_K_M Q6_K Q2_K Q3_K_S Q3_K_M
#                     Q3_K_L Q5_1 IQ4_NL IQ4_XS"]
#     SHAPE           mkmodel shape flags ["--arch llama --dim 256 --layers 4 --heads 4 --kv-heads 2
#                     --ff 768 --vocab 4096 --ctx 2048 --seed 11"]: grouped-query attention,
#                     head_dim 64, every width a multiple of 256 so the K-quants apply everywhere,
#                     a synthetic SentencePiece vocabulary (byte fallback) and an untied output
#     SHIP            1: also copy quant-q4_k_m.* into tests/data (the file the bare-clone suite checks)
#
# Outputs (in OUTDIR): quant-TYPE.gguf (TYPE in lower case: quant-bf16, quant-q8_0, ..., quant-q6_k;
#   quant-bf16 is mkmodel's file itself), and for each quant-TYPE.{greedy.json,logits.txt,
#   logits-fa-off.txt,bos-logits.txt,ppl.json}. `make test-quant` (KVT_QUANT_DIR=OUTDIR) checks every file present.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -eq 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
OUT="$1"
KVTIER="${KVTIER:-$ROOT/build/kvtier}"
LLAMA_BUILD_DIR="${LLAMA_BUILD_DIR:-/work/peer/build}"
TYPES="${TYPES:-BF16 Q8_0 Q4_0 Q4_1 Q4_K_M Q5_K_M Q6_K Q2_K Q3_K_S Q3_K_M Q3_K_L Q5_1 IQ4_NL IQ4_XS}"
SHAPE="${SHAPE:---arch llama --dim 256 --layers 4 --heads 4 --kv-heads 2 --ff 768 --vocab 4096 --ctx 2048 --seed 11}"
QUANTIZE="$LLAMA_BUILD_DIR/bin/llama-quantize"
for f in "$KVTIER" "$QUANTIZE"; do
    [ -x "$f" ] || { echo "make_quant: missing $f (build kvtier with make; llama.cpp with tools/peer/build_peer.sh)" >&2; exit 1; }
done
mkdir -p "$OUT"

src="$OUT/quant-bf16.gguf"
echo "== $src"
# shellcheck disable=SC2086 # SHAPE is a list of flags
"$KVTIER" mkmodel $SHAPE --type bf16 -o "$src"
for t in $TYPES; do
    stem="quant-$(echo "$t" | tr '[:upper:]' '[:lower:]')"
    if [ "$stem" != quant-bf16 ]; then
        echo "== llama-quantize $t"
        "$QUANTIZE" "$src" "$OUT/$stem.gguf" "$t" > "$OUT/$stem.quantize.log" 2>&1 ||
            { tail -n 20 "$OUT/$stem.quantize.log" >&2; exit 1; }
        rm -f "$OUT/$stem.quantize.log"
    fi
    "$ROOT/tools/golden/make_golden.sh" "$OUT/$stem.gguf" "$stem" "$OUT"
done
if [ "${SHIP:-0}" = 1 ]; then
    for ext in gguf greedy.json logits.txt logits-fa-off.txt bos-logits.txt ppl.json; do
        cp "$OUT/quant-q4_k_m.$ext" "$ROOT/tests/data/"
    done
    echo "== quant-q4_k_m copied into tests/data"
fi
ls -l "$OUT"
