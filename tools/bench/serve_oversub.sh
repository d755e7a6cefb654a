#!/usr/bin/env bash
# serve_oversub.sh - oversubscription of the fast tier under continuous batching (tierkv.txt Fig. 3 /
# Table 5 on the real engine): the KV demand of the admitted sequences is rho x the fast tier; the host
# tier below holds the rest (and a disk tier under it). For each rho, TPOT with the scheduler's plan
# driving prefetch and eviction (--lookahead, TierKV Alg. 1) beside the store's own LRU and LFU without
# a plan, under the same seeded load (tools/bench/serve_bench.py).
#
# Usage: tools/bench/serve_oversub.sh [MODEL.gguf]
#   Env: RHOS ("1 2 3 5"), NP (sequences at once, 8), PROMPT (512), GEN (256), T (2), BLOCK (--kv-block, 64),
#        KVTIER (build/kvtier), DISK (directory of the disk tier, /tmp), POLICIES ("plan lru lfu"; also
#        plan-spread: the plan with the spread policy inside an iteration, spread: spread alone), TIMING (1: the
#        servers time their KV readers, --kv-timing, and a second table says where each iteration's time went:
#        compute threads' KV acquire time and its parts, copy threads' CPU, process CPU, context switches;
#        /metrics before and after, per iteration), OUT (a directory that keeps each run's JSON and server log),
#        SERVE_FLAGS (more kvtier serve flags for every run, e.g. "--kv-copy-threads 1": one copy thread, the
#        default before 2026-11-28 late on 2 vCPUs with -t 2).
# The demand is NP x (PROMPT + GEN) positions x the model's KV bytes per position (kvtier info prints it).
set -euo pipefail
cd "$(dirname "$0")/../.."
M="${1:-$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf}"
RHOS="${RHOS:-1 2 3 5}" NP="${NP:-8}" PROMPT="${PROMPT:-512}" GEN="${GEN:-256}" T="${T:-2}" BLOCK="${BLOCK:-64}"
KVTIER="${KVTIER:-build/kvtier}" DISK="${DISK:-/tmp}" POLICIES="${POLICIES:-plan lru lfu}" TIMING="${TIMING:-0}"
read -r -a extra <<<"${SERVE_FLAGS:-}"
timing=()
[ "$TIMING" = 1 ] && timing=(--kv-timing)
[ -x "$KVTIER" ] || make -s
# KV bytes per position (F16 K and V of every layer), from kvtier info
per_pos="$("$KVTIER" info -m "$M" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["kv_bytes_per_token_f16"])')"
demand=$((NP * (PROMPT + GEN) * per_pos))
port=$((20000 + RANDOM % 20000))
tmp="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
echo "# oversubscription: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, -t $T, $(basename "$M"), -np $NP, prompt $PROMPT + gen $GEN, KV demand $((demand / 1048576)) MiB, block $BLOCK, $(date -u +'%F %H:%M') UTC"
echo
echo "| rho | fast tier | policy | tok/s | TPOT mean | TPOT p50 | TPOT p95 | TPOT p95 / rho 1 | KV moved | done/fail |"
echo "|---|---|---|---|---|---|---|---|---|---|"
declare -A base=()
for rho in $RHOS; do
    fast=$(python3 -c "print(int($demand / $rho))")
    for pol in $POLICIES; do
        case $pol in
            plan) flags=(--kv-evict lru --lookahead 4) ;;
            plan-spread) flags=(--kv-evict spread --lookahead 4) ;;
            spread) flags=(--kv-evict spread --lookahead 0) ;;
            lru) flags=(--kv-evict lru --lookahead 0) ;;
            lfu) flags=(--kv-evict lfu --lookahead 0) ;;
        esac
        "$KVTIER" serve -m "$M" --host 127.0.0.1 --port "$port" -t "$T" -np "$NP" -c $((PROMPT + GEN + 8)) --metrics \
            --kv-block "$BLOCK" --kv-fast "$fast" --kv-host $((demand * 2)) --kv-disk "$DISK" "${flags[@]}" "${timing[@]}" "${extra[@]}" \
            >"$tmp/server.log" 2>&1 &
        pid=$!
        for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.2; done
        python3 tools/bench/serve_bench.py --url "http://127.0.0.1:$port" --workload uniform --prompt-len "$PROMPT" \
            --max-tokens "$GEN" --num "$NP" --concurrency "$NP" --seed 11 --json >"$tmp/r.json" || true
        kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
        if [ -n "${OUT:-}" ]; then mkdir -p "$OUT"; cp "$tmp/r.json" "$OUT/$rho-$pol.json"; cp "$tmp/server.log" "$OUT/$rho-$pol.log"; fi
        echo "$rho $pol $(cut -d' ' -f1 /proc/loadavg)" >>"$tmp/loads"
        cp "$tmp/r.json" "$tmp/r-$rho-$pol.json"
        [ -n "${base[$pol]:-}" ] || base[$pol]="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tpot_ms_p95"])' "$tmp/r.json")"
        python3 - "$rho" "$fast" "$pol" "${base[$pol]}" "$tmp/r.json" <<'EOF'
import json, sys
rho, fast, pol, b, f = sys.argv[1:6]
r = json.load(open(f))
mv = r.get("kv_moved_bytes")
print("| %s | %.1f MiB | %s | %.1f | %.1f ms | %.1f ms | %.1f ms | %.2f | %s | %d/%d |" % (
    rho, int(fast) / 1048576, pol, r["throughput_tok_s"], r["tpot_ms_mean"], r["tpot_ms_p50"], r["tpot_ms_p95"],
    r["tpot_ms_p95"] / float(b), "-" if mv is None else "%.0f MB" % (mv / 1e6), r["completed"], r["failed"]))
EOF
    done
done
echo
echo "load average (1 min) after each run: $(awk '{printf "%s/%s %s; ", $1, $2, $3}' "$tmp/loads")"
if [ "$TIMING" = 1 ]; then
    echo
    echo "Where each iteration's time went (per iteration; KV acquire time summed over the compute threads):"
    echo
    echo "| rho | policy | iterations | acquire ms | lock ms | wait busy ms | wait room ms | own loads ms | stall ms | copy threads CPU ms | of which in pool waits ms | process CPU ms | queue entries (idle) | wake-ups | context switches vol / invol |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for rho in $RHOS; do
        for pol in $POLICIES; do
            python3 - "$rho" "$pol" "$tmp/r-$rho-$pol.json" <<'EOF'
import json, sys
rho, pol, f = sys.argv[1:4]
p = json.load(open(f)).get("per_iteration")
if p:
    print("| %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f (%.0f) | %.0f | %.0f / %.0f |" % (
        rho, pol, p["iterations"], p["acquire_ms"], p["lock_ms"], p["wait_busy_ms"], p["wait_room_ms"], p["load_ms"],
        p["stall_ms"], p["copy_threads_cpu_ms"], p.get("copy_help_ms", 0.0), p["process_cpu_ms"], p["queue_entries"], p["queue_idle"], p["wakeups"],
        p["csw_voluntary"], p["csw_involuntary"]))
EOF
        done
    done
fi
