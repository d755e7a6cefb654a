#!/usr/bin/env bash
# memcap.sh - a context whose KV cache does not fit a memory cap: llama.cpp (all KV in RAM) against
# kvtier with a small fast tier and the rest of the KV on disk, both inside the same memory cgroup.
#
# Usage: tools/bench/memcap.sh [MODEL.gguf]
#   Env: CAP (memory cap, default 128M), PROMPT_BYTES (prompt size in bytes of licence text, default
#        30000: about 7000 SmolLM2 tokens), N (tokens generated, 16), FAST (kvtier --kv-fast, 16M),
#        DISK (kvtier --kv-disk dir, /tmp), LLAMA_SIMPLE (/work/peer/build/bin/llama-simple).
# Needs root and a cgroup memory controller (v1 or v2). Prints, for each run, whether it completed,
# its peak memory in the cgroup, and checks kvtier's capped ids against an uncapped kvtier run.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL="${1:-$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf}"
CAP="${CAP:-128M}" PROMPT_BYTES="${PROMPT_BYTES:-30000}" N="${N:-16}" FAST="${FAST:-16M}" DISK="${DISK:-/tmp}"
LLAMA_SIMPLE="${LLAMA_SIMPLE:-/work/peer/build/bin/llama-simple}"
KVTIER="${KVTIER:-build/kvtier}"
[ -x "$KVTIER" ] || make -s
tmp="$(mktemp -d)"
cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/GPL-2 > "$tmp/text.txt"
head -c "$PROMPT_BYTES" "$tmp/text.txt" > "$tmp/prompt.txt"
to_bytes() { numfmt --from=iec "$1"; }
cap_b="$(to_bytes "$CAP")"

# a fresh memory cgroup (v2 if mounted as such, else v1)
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    cg=/sys/fs/cgroup/kvtier-memcap-$$; mkdir "$cg"; echo "$cap_b" > "$cg/memory.max"; echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
    peak_file=memory.peak
else
    cg=/sys/fs/cgroup/memory/kvtier-memcap-$$; mkdir "$cg"; echo "$cap_b" > "$cg/memory.limit_in_bytes"
    peak_file=memory.max_usage_in_bytes
fi
trap 'rmdir "$cg" 2>/dev/null; rm -rf "$tmp"' EXIT
# in_cap OUT ERR CMD...: runs CMD inside the cgroup (stdout to OUT, stderr to ERR); prints the exit
# status, whether the kernel's OOM killer ended it, and the cgroup's peak memory
in_cap() {
    local out="$1" err="$2"; shift 2
    [ -f "$cg/memory.max_usage_in_bytes" ] && echo 0 > "$cg/memory.max_usage_in_bytes" || true
    set +e
    sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$cg" "$@" > "$out" 2> "$err"
    local rc=$?
    set -e
    local how="completed"
    [ $rc -ne 0 ] && how="FAILED"
    [ $rc -eq 137 ] && how="KILLED by the OOM killer (out of memory under the cap)"
    echo "   exit $rc: $how; peak memory in the cgroup $(cat "$cg/$peak_file" 2>/dev/null || echo ?) bytes"
}
n_prompt=$("$KVTIER" tokenize -m "$MODEL" -f "$tmp/prompt.txt" --no-escape --no-parse-special | wc -w)
ctx=$(( (n_prompt + N + 255) / 256 * 256 ))
kv_per_tok=$("$KVTIER" info -m "$MODEL" | awk '/^KV per token/ {print $4}')
echo "model $MODEL, prompt $n_prompt tokens, ctx $ctx, KV f16 $((kv_per_tok * ctx)) bytes; memory cap $cap_b bytes"

echo "== llama.cpp (llama-simple, all KV in RAM) under the cap"
in_cap "$tmp/llama.out" "$tmp/llama.err" "$LLAMA_SIMPLE" -m "$MODEL" -n "$N" "$(cat "$tmp/prompt.txt")"
grep -E "KV buffer size|failed|error" "$tmp/llama.err" | tail -n 3 | sed 's/^/   llama.cpp: /'
echo "== kvtier, --kv-fast $FAST --kv-disk $DISK, under the cap"
in_cap "$tmp/capped.json" "$tmp/capped.err" "$KVTIER" generate -m "$MODEL" -f "$tmp/prompt.txt" -n "$N" --temp 0 \
    -c "$ctx" -t 2 --ubatch 128 --kv-fast "$FAST" --kv-disk "$DISK" --json
tail -n 2 "$tmp/capped.err" | sed 's/^/   kvtier: /'
echo "== kvtier, no cap, all KV in memory (reference)"
"$KVTIER" generate -m "$MODEL" -f "$tmp/prompt.txt" -n "$N" --temp 0 -c "$ctx" -t 2 --json > "$tmp/ref.json"
python3 - "$tmp/capped.json" "$tmp/ref.json" <<'PY'
import json, sys
try:
    a = json.load(open(sys.argv[1]))
except Exception as e:
    print("kvtier capped run produced no result:", e); sys.exit(0)
b = json.load(open(sys.argv[2]))
kv = a.get("kv", {})
print(f"kvtier capped: {len(a['ids'])} ids, identical to the uncapped run: {a['ids'] == b['ids']}")
print(f"  peak KV bytes {kv.get('peak_bytes')}, moved {kv.get('moved_bytes')}, stall {kv.get('stall_ms')} ms")
print(f"  prefill {a['prefill_tok_s']:.1f} tok/s (uncapped {b['prefill_tok_s']:.1f}), decode {a['decode_tok_s']:.1f} tok/s (uncapped {b['decode_tok_s']:.1f})")
print("  text:", json.dumps(a["text"]))
PY
