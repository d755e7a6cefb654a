#!/usr/bin/env bash
# serve_vs_llamacpp.sh - kvtier serve and llama-server side by side: same model file, threads, slots
# and context per sequence, the same seeded open-loop load (tools/bench/serve_bench.py), one run.
#
# Usage: tools/bench/serve_vs_llamacpp.sh [MODEL.gguf ...]
#   Env: CONC ("1 8 32": concurrent clients = slots), T (threads, 2), CTX (context per sequence, 1024),
#        PROMPT (prompt tokens, 128), GEN (tokens generated per request, 64), REQS (requests per client, 2),
#        LLAMA_SERVER (/work/peer/build/bin/llama-server), KVTIER (build/kvtier), VOCAB_HI (30000),
#        KV_FLAGS (extra kvtier flags, e.g. "--kv-fast 64M --kv-disk /tmp").
# llama-server's -c is the context of all slots together, so it gets CTX x slots; kvtier's -c is per
# sequence. Both generate exactly GEN tokens per request (ignore_eos), temperature 0.
# Prints one markdown table: per server and concurrency, throughput, TTFT/TPOT/E2E p50 and p95, and
# the ratios kvtier / llama-server (throughput: higher is better; TPOT p95: lower is better).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=("$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf")
CONC="${CONC:-1 8 32}" T="${T:-2}" CTX="${CTX:-1024}" PROMPT="${PROMPT:-128}" GEN="${GEN:-64}" REQS="${REQS:-2}"
LLAMA_SERVER="${LLAMA_SERVER:-/work/peer/build/bin/llama-server}" KVTIER="${KVTIER:-build/kvtier}"
VOCAB_HI="${VOCAB_HI:-30000}" KV_FLAGS="${KV_FLAGS:-}"
[ -x "$KVTIER" ] || make -s
[ -x "$LLAMA_SERVER" ] || { echo "llama-server not found at $LLAMA_SERVER (tools/peer/build_peer.sh builds it)" >&2; exit 1; }
port=$((20000 + RANDOM % 20000))
tmp="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

wait_health() {
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || { echo "server exited:" >&2; tail -5 "$tmp/server.log" >&2; return 1; }
        sleep 0.5
    done
    return 1
}

bench() { # label conc
    python3 tools/bench/serve_bench.py --url "http://127.0.0.1:$port" --workload uniform --prompt-len "$PROMPT" \
        --max-tokens "$GEN" --num $(($2 * REQS)) --concurrency "$2" --seed 7 --vocab-hi "$VOCAB_HI" --label "$1" --json
}

echo "# serve side by side: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, -t $T, ctx/seq $CTX, prompt $PROMPT, gen $GEN, $(date -u +%F)"
echo
echo "| model | clients | server | tok/s | TTFT p50 | TTFT p95 | TPOT p50 | TPOT p95 | E2E p95 | done/fail | tok/s ratio | TPOT p95 ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for m in "${MODELS[@]}"; do
    name="$(basename "$m" .gguf)"
    for c in $CONC; do
        for srv in llama-server kvtier; do
            if [ "$srv" = llama-server ]; then
                "$LLAMA_SERVER" -m "$m" --host 127.0.0.1 --port "$port" -t "$T" -np "$c" -c $((CTX * c)) \
                    --no-webui >"$tmp/server.log" 2>&1 &
            else
                # shellcheck disable=SC2086
                "$KVTIER" serve -m "$m" --host 127.0.0.1 --port "$port" -t "$T" -np "$c" -c "$CTX" --metrics \
                    $KV_FLAGS >"$tmp/server.log" 2>&1 &
            fi
            pid=$!
            wait_health
            bench "$srv" "$c" >"$tmp/$srv.json" || true
            kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
        done
        python3 - "$name" "$c" "$tmp/llama-server.json" "$tmp/kvtier.json" <<'EOF'
import json, sys
name, c, fl, fk = sys.argv[1:5]
L, K = json.load(open(fl)), json.load(open(fk))
for lab, r in (("llama-server", L), ("kvtier", K)):
    ratio_t = ratio_p = ""
    if lab == "kvtier" and L.get("throughput_tok_s"):
        ratio_t = "%.2f" % (r["throughput_tok_s"] / L["throughput_tok_s"])
        ratio_p = "%.2f" % (r["tpot_ms_p95"] / L["tpot_ms_p95"]) if L.get("tpot_ms_p95") else ""
    print("| %s | %s | %s | %.1f | %.0f ms | %.0f ms | %.1f ms | %.1f ms | %.0f ms | %d/%d | %s | %s |" % (
        name, c, lab, r["throughput_tok_s"], r["ttft_ms_p50"], r["ttft_ms_p95"], r["tpot_ms_p50"],
        r["tpot_ms_p95"], r["e2e_ms_p95"], r["completed"], r["failed"], ratio_t, ratio_p))
EOF
    done
done
