#!/usr/bin/env bash
# serve_sparse_agree.sh - greedy agreement of sparse decoding under `kvtier serve` (docs/SPARSE.md "Sparse under serve"):
# for each configuration, one request at temperature 0 (the first prompt of tools/bench/serve_sparse.sh) to a server,
# against `kvtier generate` on the same text with the same flags and the same --kv-block (SPARSE.md "Sequences": attention
# over a selected set depends on the block size), and each configuration's tokens against dense's.
#
# usage: tools/bench/serve_sparse_agree.sh [-n TOKENS] [-f TEXT] [-o DIR]
#   -f TEXT  the prompt (default: the first 18000 bytes of DIR/docs.txt, serve_sparse.sh's text: 6006 SmolLM2 tokens)
# env: CONFIGS, CTX, KV_BLOCK, KV_GRAN, PORT, BIN, T, PCACHE as in serve_sparse.sh (PCACHE: the prompt from the prefix
#      store when it is there; serve's output is the same as after a prefill, which the table shows)
set -euo pipefail
cd "$(dirname "$0")/../.."
M=~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf
N=64 OUT=/var/tmp/kvtier-serve-sparse TEXT=""
while getopts "m:n:f:o:" o; do
    case $o in m) M=$OPTARG ;; n) N=$OPTARG ;; f) TEXT=$OPTARG ;; o) OUT=$OPTARG ;; *) sed -n 2,11p "$0"; exit 2 ;; esac
done
BIN=${BIN:-build/kvtier} T=${T:-2} CTX=${CTX:-8192} KV_BLOCK=${KV_BLOCK:-16} KV_GRAN=${KV_GRAN:-head} PORT=${PORT:-18614}
PCACHE=${PCACHE:-$OUT/pcache-ram}
CONFIGS=${CONFIGS:-"dense|--sparse off;keep|--sparse-preset keep --sparse-budget 0.125;quest|--sparse quest --sparse-page 16 --sparse-budget 0.125"}
if [ -n "$TEXT" ]; then cp "$TEXT" "$OUT/agree-prompt.txt"; else head -c 18000 "$OUT/docs.txt" > "$OUT/agree-prompt.txt"; fi
IFS=';' read -r -a cfgs <<< "$CONFIGS"
SRV=""
stop_server() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null; SRV=""; }
trap stop_server EXIT
for c in "${cfgs[@]}"; do
    name=${c%%|*} flags=${c#*|}
    # shellcheck disable=SC2086
    "$BIN" generate -m "$M" -f "$OUT/agree-prompt.txt" -n "$N" --temp 0 --ignore-eos -t "$T" -c "$CTX" --json \
        --kv-block "$KV_BLOCK" --kv-granularity "$KV_GRAN" $flags > "$OUT/agree-gen-$name.json" 2> "$OUT/agree-gen-$name.err"
    # shellcheck disable=SC2086
    "$BIN" serve -m "$M" -t "$T" -c "$CTX" -np 1 --port "$PORT" --kv-cache-dir "$PCACHE" --kv-block "$KV_BLOCK" \
        --kv-granularity "$KV_GRAN" $flags 2> "$OUT/agree-srv-$name.err" &
    SRV=$!
    for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break; sleep 0.1; done
    python3 - "$PORT" "$OUT/agree-prompt.txt" "$N" "$OUT/agree-gen-$name.json" "$OUT/agree-srv-$name.json" <<'EOF'
import json, sys, urllib.request
port, prompt, n, gen, dst = sys.argv[1], open(sys.argv[2]).read(), int(sys.argv[3]), sys.argv[4], sys.argv[5]
def post(path, body):
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=600))
a = post("/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "logprobs": 1})
ch = a["choices"][0]
g = json.load(open(gen))
# generate's ids as pieces (the server's /detokenize of each id), to compare with the completion's logprobs tokens
pieces = [post("/detokenize", {"tokens": [i]})["content"] for i in g["ids"]]
json.dump({"text": ch["text"], "tokens": ch["logprobs"]["tokens"], "gen_text": g["text"], "gen_pieces": pieces,
           "usage": a.get("usage")}, open(dst, "w"))
EOF
    stop_server
done
python3 - "$OUT" "$N" "${cfgs[@]}" <<'EOF'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
names = [c.split("|")[0] for c in sys.argv[3:]]
d = {x: json.load(open(f"{out}/agree-srv-{x}.json")) for x in names}
def agree(a, b):
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]: k += 1
    return k
print(f"| config | serve = generate (same flags, --kv-block) | first tokens equal to generate | cached prompt tokens "
      f"| first tokens equal to dense (serve) | tokens equal to dense at the same position |")
print("|---|---|---|---|---|---|")
ref = d[names[0]]["tokens"]
for x in names:
    s = d[x]
    same = s["tokens"] == s["gen_pieces"] and s["text"] == s["gen_text"]
    cached = ((s.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens", "?")
    pos = sum(1 for a, b in zip(s["tokens"], ref) if a == b)
    print(f"| {x} | {'yes' if same else 'NO'} | {agree(s['tokens'], s['gen_pieces'])} / {n} | {cached} | "
          f"{agree(s['tokens'], ref)} / {n} | {pos} / {n} |")
EOF
