#!/usr/bin/env bash
# gemma3_golden.sh - regenerate kvtier's Gemma 3 270M golden vectors from llama.cpp (the peer).
#
# What: the Gemma 3 counterpart of make_golden.sh (same helper, tools/golden/llama_golden.c, built
#   against an out-of-tree llama.cpp; llama.cpp code never enters this repo), on the real Gemma 3
#   270M Q4_K_M (`make model-gemma3`). Its vocabulary has 262144 entries, so logit vectors are kept
#   sparse: "id value" lines for llama.cpp's top 2048 ids (flash attention on) and every 64th id,
#   the same ids in both files (tests/test_model_ref.c reads either form).
#
# How:  tools/golden/gemma3_golden.sh          (from anywhere)
#   Environment (defaults in brackets):
#     LLAMA_CPP_DIR   llama.cpp source tree  [/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp]
#     LLAMA_BUILD_DIR llama.cpp build with bin/libllama.so, bin/llama-perplexity, bin/llama-tokenize [/work/peer/build]
#     MODEL           GGUF model  [~/.cache/kvtier/gemma-3-270m-Q4_K_M.gguf]
#     GOLDEN_BIN_DIR  where llama_golden is built [${TMPDIR:-/tmp}/kvtier-golden]
#     STEPS           which outputs to remake, any of "greedy band ppl tok" [all four]
#   Settings: 2 threads, F16 KV cache (llama.cpp's default), prompts tokenized with
#   llama_tokenize(add_special=true, parse_special=true) (Gemma adds BOS).
#
# Outputs (in tests/data/, prefix gemma3-270m):
#   .greedy.json, .logits.txt     a 26-token prompt ($PROMPT): ids, 32 greedy ids, sparse logits. (On the
#                                 6-token "The capital of France is" llama.cpp's two paths differ by 0.87
#                                 and kvtier's own F16 vs F32 KV cache by 1.5: this quantized model moves
#                                 its logits by ~1 for any rounding change, so one short prompt is a
#                                 noisy sample of the band; see tests/test_model_ref.c.)
#   .logits-fa-off.txt            the same logits from llama.cpp's other attention path (-fa off)
#   .bandK.json, .bandK.logits.txt, .bandK.logits-fa-off.txt   K = 1..4: four more prompts ($BAND_PROMPTS),
#                                 sparse logits of both paths; the test takes llama.cpp's band and kvtier's
#                                 distance as the largest over these and $PROMPT
#   -long.greedy.json             prompt = tests/data/gemma3-270m.long.txt (1636 tokens, past the
#                                 512-position sliding window), 16 greedy ids, context 2048
#   .ppl.json                     llama-perplexity on gemma3-270m.ppl.txt (6338 tokens: the first 21000 bytes
#                                 of docs/DESIGN.md + docs/BEAM.md of 2026-11-28) at -c 128 and -c 800 (-b = -c),
#                                 fa on and off. (It was long.txt, 1636 tokens: 768 scored predictions at
#                                 ctx 128, too few for a 0.5% check on a model whose logits move by 3-5% of
#                                 the largest for any rounding change: kvtier's AVX2 kernels went from 0.07%
#                                 to 0.64% outside llama.cpp's two paths when their q4_K summation order
#                                 became llama.cpp's own.)
#   .tok.inp / .tok.out           strings (llama.cpp's vocab-test format) and llama-tokenize's ids,
#                                 no BOS, parse_special off; .tok.special.out the same with it on
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LLAMA_CPP_DIR="${LLAMA_CPP_DIR:-/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp}"
LLAMA_BUILD_DIR="${LLAMA_BUILD_DIR:-/work/peer/build}"
MODEL="${MODEL:-$HOME/.cache/kvtier/gemma-3-270m-Q4_K_M.gguf}"
LIBDIR="$LLAMA_BUILD_DIR/bin"
OUT="$ROOT/tests/data"
P="$OUT/gemma3-270m"
TEXT="$P.long.txt"
PPL_TEXT="$P.ppl.txt"
BIN_DIR="${GOLDEN_BIN_DIR:-${TMPDIR:-/tmp}/kvtier-golden}"
BIN="$BIN_DIR/llama_golden"
STEPS="${STEPS:-greedy band ppl tok}"
step() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
BAND_PROMPTS=(
    "The history of the Roman Empire spans more than a thousand years, from the founding of the city to the fall of Constantinople. Historians often divide it"
    "In computer science, a hash table is a data structure that maps keys to values. It uses a hash function to compute an index into an array of buckets, from which"
    "Once upon a time, in a small village at the edge of a great forest, there lived an old woodcutter and his three daughters. One winter evening,"
    "The recipe calls for two cups of flour, one teaspoon of baking soda, a pinch of salt and three ripe bananas. First, preheat the oven to"
)
PROMPT="Photosynthesis is the process by which green plants use sunlight, water and carbon dioxide to make their own food. During this process"

need=("$LLAMA_CPP_DIR/include/llama.h" "$LIBDIR/libllama.so" "$MODEL" "$TEXT" "$PPL_TEXT")
if step ppl; then need+=("$LIBDIR/llama-perplexity"); fi
if step tok; then need+=("$LIBDIR/llama-tokenize"); fi
for f in "${need[@]}"; do
    [ -e "$f" ] || { echo "gemma3_golden: missing $f" >&2; exit 1; }
done
mkdir -p "$BIN_DIR"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# sparse_pair ON OFF OUT_ON OUT_OFF: the top 2048 ids of the fa-on logits and every 64th id, in id order,
# in both files ("id value" lines)
sparse_pair() {
python3 - "$@" <<'PY'
import sys
on = [float(x) for x in open(sys.argv[1])]
off = [float(x) for x in open(sys.argv[2])]
ids = set(sorted(range(len(on)), key=lambda i: -on[i])[:2048]) | set(range(0, len(on), 64))
for src, dst in ((on, sys.argv[3]), (off, sys.argv[4])):
    with open(dst, "w") as f:
        for i in sorted(ids):
            f.write("%d %.6f\n" % (i, src[i]))
print("sparse logits: %d of %d ids" % (len(ids), len(on)))
PY
}

if step greedy || step band; then
echo "== building $BIN"
gcc -std=c11 -O2 -Wall -Wextra -I"$LLAMA_CPP_DIR/include" -I"$LLAMA_CPP_DIR/ggml/include" \
    "$ROOT/tools/golden/llama_golden.c" -o "$BIN" -L"$LIBDIR" -Wl,-rpath,"$LIBDIR" -lllama -lggml -lggml-base
fi

if step greedy; then
echo "== greedy and logits"
"$BIN" -m "$MODEL" -p "$PROMPT" -n 32 -t 2 -c 512 -o "$P.greedy.json" -l "$TMP/on.txt"
GOLDEN_FA_OFF=1 "$BIN" -m "$MODEL" -p "$PROMPT" -n 1 -t 2 -c 512 -o "$TMP/off.json" -l "$TMP/off.txt"
sparse_pair "$TMP/on.txt" "$TMP/off.txt" "$P.logits.txt" "$P.logits-fa-off.txt"
"$BIN" -m "$MODEL" -p "$(cat "$TEXT")" -n 16 -t 2 -c 2048 -o "$P-long.greedy.json"

fi

if step band; then
# Four more prompts: this quantized model moves its logits by several % of the largest for any rounding
# change, so the band (and kvtier's distance) is taken as the largest over these and $PROMPT.
echo "== band prompts"
k=1
for bp in "${BAND_PROMPTS[@]}"; do
    "$BIN" -m "$MODEL" -p "$bp" -n 1 -t 2 -c 512 -o "$P.band$k.json" -l "$TMP/on.txt"
    GOLDEN_FA_OFF=1 "$BIN" -m "$MODEL" -p "$bp" -n 1 -t 2 -c 512 -o "$TMP/off.json" -l "$TMP/off.txt"
    sparse_pair "$TMP/on.txt" "$TMP/off.txt" "$P.band$k.logits.txt" "$P.band$k.logits-fa-off.txt"
    k=$((k + 1))
done
fi

if step ppl; then
echo "== perplexity"
entries=()
for c in 128 800; do
    ppl=() 
    for fa in on off; do
        "$LIBDIR/llama-perplexity" -m "$MODEL" -f "$PPL_TEXT" -c "$c" -b "$c" -t 2 -fa "$fa" > "$TMP/ppl.log" 2>&1
        ppl+=("$(sed -n 's/.*Final estimate: PPL = \([0-9.eE+-]*\).*/\1/p' "$TMP/ppl.log" | tail -n1)")
    done
    echo "ctx=$c ppl=${ppl[0]} ppl_fa_off=${ppl[1]}"
    entries+=("$(printf '{"ctx": %d, "ppl": %.4f, "ppl_fa_off": %.4f}' "$c" "${ppl[0]}" "${ppl[1]}")")
done
{ printf '['; sep=''; for e in "${entries[@]}"; do printf '%s%s' "$sep" "$e"; sep=', '; done; printf ']\n'; } > "$P.ppl.json"

fi

if step tok; then
echo "== tokenizer"
SEP=$'\n__ggml_vocab_test__\n'
strings=(
    'Hello world' ' Hello world' 'Hello World!' '  leading and trailing  ' $'line one\nline two\n\n\nthree'
    $'\t\ttabs\tand  spaces   ' 'The capital of France is' "I'm sure you'll see they've done it, haven't they?"
    '1234567890 3.14159 1,000,000 $42.50 -7e+10 0x1F' $'def main():\n    print("hi")\n\treturn 0\n'
    'naïve café Straße İstanbul ǅ ﬁ' '你好，世界！ こんにちは 안녕하세요 Привет мир' 'emoji 🦙🏳️‍🌈 ❤️ 😀😀'
    '<start_of_turn>user Hi<end_of_turn>' '<b>bold</b> <i>x</i> </s> <unk>' '١٢٣ ² ½ Ⅻ ░▒▓'
    $'a\u00a0b\u3000c\u2009d' '                 many spaces' '.................' 'https://example.com/a?b=c&d=e'
)
: > "$P.tok.inp"
: > "$P.tok.out"
: > "$P.tok.special.out"
i=0
for s in "${strings[@]}"; do
    printf '%s%s' "$s" "$SEP" >> "$P.tok.inp"
    printf '%s' "$s" > "$TMP/s$i.txt"
    LD_LIBRARY_PATH="$LIBDIR" "$LIBDIR/llama-tokenize" -m "$MODEL" -f "$TMP/s$i.txt" --ids --log-disable --no-escape \
        --no-bos --no-parse-special 2>/dev/null | tail -n 1 | tr -d '[],' >> "$P.tok.out"
    LD_LIBRARY_PATH="$LIBDIR" "$LIBDIR/llama-tokenize" -m "$MODEL" -f "$TMP/s$i.txt" --ids --log-disable --no-escape \
        --no-bos 2>/dev/null | tail -n 1 | tr -d '[],' >> "$P.tok.special.out"
    i=$((i + 1))
done
fi
echo "== outputs:"
ls -l "$P"*
