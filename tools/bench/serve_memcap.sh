#!/usr/bin/env bash
# serve_memcap.sh - llama-server and kvtier serve under the same memory cap (a memory cgroup), with the
# load of tools/bench/serve_oversub.sh: NP sequences whose KV demand the cap holds only 1/rho of.
#
# For rho = 1 both servers run in an uncapped cgroup; each one's peak memory there is its footprint with
# all KV in RAM. For rho > 1 the cap is llama-server's rho-1 peak minus (1 - 1/rho) of the KV demand: the
# memory that would hold llama-server with only 1/rho of its KV. kvtier runs in the same cap with
# --kv-fast demand/rho, no host tier, and the rest of its KV in a disk tier (--kv-disk DISK, on a real
# disk: a tmpfs file would be charged to the cgroup). Prints, per server and rho: completed/failed
# requests, how the server ended (the OOM killer's SIGKILL is exit 137), peak memory (anonymous memory and
# page cache charged to the cgroup: each run starts with the page cache dropped), TPOT, throughput.
#
# Usage: tools/bench/serve_memcap.sh [MODEL.gguf]
#   Env: RHOS ("1 2 5"), NP (8), PROMPT (512), GEN (256), T (2), BLOCK (64), DISK (/var/tmp),
#        LLAMA_SERVER (/work/peer/build/bin/llama-server), KVTIER (build/kvtier).
# Needs root and a memory cgroup controller (v1 or v2).
set -euo pipefail
cd "$(dirname "$0")/../.."
M="${1:-$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf}"
RHOS="${RHOS:-1 2 5}" NP="${NP:-8}" PROMPT="${PROMPT:-512}" GEN="${GEN:-256}" T="${T:-2}" BLOCK="${BLOCK:-64}"
DISK="${DISK:-/var/tmp}" LLAMA_SERVER="${LLAMA_SERVER:-/work/peer/build/bin/llama-server}" KVTIER="${KVTIER:-build/kvtier}"
[ -x "$KVTIER" ] || make -s
per_pos="$("$KVTIER" info -m "$M" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["kv_bytes_per_token_f16"])')"
demand=$((NP * (PROMPT + GEN) * per_pos))
ctx=$((PROMPT + GEN + 8))
port=$((20000 + RANDOM % 20000))
tmp="$(mktemp -d)"
pid=""
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    cg=/sys/fs/cgroup/kvtier-servecap-$$; limit_file=memory.max; peak_file=memory.peak
else
    cg=/sys/fs/cgroup/memory/kvtier-servecap-$$; limit_file=memory.limit_in_bytes; peak_file=memory.max_usage_in_bytes
fi
mkdir "$cg"
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rmdir "$cg" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

set_cap() { # BYTES or max
    if [ "$limit_file" = memory.max ]; then echo "$1" > "$cg/memory.max"; echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
    else [ "$1" = max ] && echo -1 > "$cg/$limit_file" || echo "$1" > "$cg/$limit_file"; fi
    [ -f "$cg/memory.max_usage_in_bytes" ] && echo 0 > "$cg/memory.max_usage_in_bytes" || true
}
# run SERVER RHO CAP: starts the server in the cgroup, drives the load, prints one table row
run() {
    local srv="$1" rho="$2" cap="$3" fast
    fast=$((demand / rho))
    set_cap "$cap"
    # the model file's pages are charged to the cgroup that first reads them: start each run with a cold page cache
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    if [ "$srv" = llama-server ]; then
        sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$cg" "$LLAMA_SERVER" -m "$M" --host 127.0.0.1 --port "$port" \
            -t "$T" -np "$NP" -c $((ctx * NP)) --no-webui >"$tmp/server.log" 2>&1 &
    else
        local kv=(--kv-fast "$fast" --kv-disk "$DISK")
        [ "$rho" = 1 ] && kv=()
        sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$cg" "$KVTIER" serve -m "$M" --host 127.0.0.1 --port "$port" \
            -t "$T" -np "$NP" -c "$ctx" --kv-block "$BLOCK" --metrics "${kv[@]}" >"$tmp/server.log" 2>&1 &
    fi
    pid=$!
    for _ in $(seq 300); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    python3 tools/bench/serve_bench.py --url "http://127.0.0.1:$port" --workload uniform --prompt-len "$PROMPT" \
        --max-tokens "$GEN" --num "$NP" --concurrency "$NP" --seed 11 --timeout 300 --json >"$tmp/r.json" 2>"$tmp/bench.err" || true
    [ -s "$tmp/r.json" ] || echo '{}' >"$tmp/r.json"
    local how="running"
    if kill -0 "$pid" 2>/dev/null; then kill "$pid"; wait "$pid" 2>/dev/null || true; how="alive, stopped"
    else set +e; wait "$pid"; local rc=$?; set -e; how="exited $rc"; [ $rc -eq 137 ] && how="OOM-killed (137)"; fi
    pid=""
    local peak
    peak="$(cat "$cg/$peak_file" 2>/dev/null || echo 0)"
    python3 - "$srv" "$rho" "$cap" "$peak" "$how" "$tmp/r.json" "$tmp/server.log" "$tmp/bench.err" <<'EOF'
import json, sys
srv, rho, cap, peak, how, f, log, berr = sys.argv[1:9]
try:
    r = json.load(open(f))
except Exception:
    r = {}
cap_s = "none" if cap == "max" else "%.0f MiB" % (int(cap) / 1048576)
if not r.get("completed") and "num" in r:
    print("| %s | %s | %s | 0/%d | - | - | %.0f MiB | %s |" % (srv, rho, cap_s, r["num"], int(peak) / 1048576, how))
elif not r.get("completed"):
    tail = (open(berr, errors="replace").read().strip().splitlines()[-1:] or
            open(log, errors="replace").read().strip().splitlines()[-1:] or [""])
    print("| %s | %s | %s | 0/%s | - | - | %.0f MiB | %s: %s |" % (srv, rho, cap_s, r.get("num", "?"), int(peak) / 1048576, how, tail[0][:80]))
else:
    print("| %s | %s | %s | %d/%d | %.1f ms | %.1f | %.0f MiB | %s |" % (srv, rho, cap_s, r["completed"], r["completed"] + r["failed"],
          r["tpot_ms_p95"], r["throughput_tok_s"], int(peak) / 1048576, how))
EOF
    if [ "$rho" = 1 ]; then echo "$peak" > "$tmp/peak.$srv"; fi
}

echo "# memory cap: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, -t $T, $(basename "$M"), -np $NP, prompt $PROMPT + gen $GEN, KV demand $((demand / 1048576)) MiB, $(date -u +'%F %H:%M') UTC"
echo
echo "| server | rho | cap | done | TPOT p95 | tok/s | peak in cgroup | how it ended |"
echo "|---|---|---|---|---|---|---|---|"
for rho in $RHOS; do
    if [ "$rho" = 1 ]; then
        run llama-server 1 max
        run kvtier 1 max
        continue
    fi
    base="$(cat "$tmp/peak.llama-server" 2>/dev/null || echo 0)"
    [ "$base" -gt 0 ] || { echo "run rho 1 first (RHOS must start with 1)" >&2; exit 1; }
    cap=$(python3 -c "print(int($base - $demand * (1 - 1 / $rho)))")
    run llama-server "$rho" "$cap"
    run kvtier "$rho" "$cap"
done
