#!/usr/bin/env bash
# serve_warm.sh - what `kvtier serve --kv-warm` buys (docs/SERVING.md "Memory warmed ahead of use"): one binary, with
# --kv-warm 0 (no warming, as before 2026-12-05) and with its default (one context), alternating, a fresh server each
# time. Two cases:
#   hit   -np 1, --kv-cache-dir DIR holding the blocks of one PROMPT-token prompt (made first when missing), WAIT s
#         idle after /health, then that prompt once with max_tokens 1: its TTFT (the blocks are imported into new
#         KV memory)
#   seq   one warm-up request, then N prompts of LEN random token ids (no prefix hits), GAP s apart: their TTFTs
# Each line: case, setting, round, the TTFTs in ms and their median, the bytes warmed (/metrics) at the end.
# With OLD=another binary, the settings are OLD and BIN, each with its default warming (e.g. a change to it).
#
# usage: tools/bench/serve_warm.sh [BIN]   (default build/kvtier)
# env: M (model, default SmolLM2-135M Q4_1), DIR (/var/tmp/kvtier-serve-warm), ROUNDS (3), CASES ("hit seq"),
#      PROMPT (6000), WAIT (3), N (8), LEN (512), GAP (1), T (2), PORT (18625), FLAGS (more server flags, e.g. a --sparse
#      preset).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/kvtier}
M=${M:-$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf}
DIR=${DIR:-/var/tmp/kvtier-serve-warm}
ROUNDS=${ROUNDS:-3} CASES=${CASES:-"hit seq"} PROMPT=${PROMPT:-6000} WAIT=${WAIT:-3} N=${N:-8} LEN=${LEN:-512}
GAP=${GAP:-1} T=${T:-2} PORT=${PORT:-18625} FLAGS=${FLAGS:-}
URL=http://127.0.0.1:$PORT
SRV=""
stop_server() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null; SRV=""; }
trap stop_server EXIT
start_server() { # flags...
    # shellcheck disable=SC2086
    "$BIN" serve -m "$M" -t "$T" --port "$PORT" --metrics $FLAGS "$@" 2> /dev/null &
    SRV=$!
    for _ in $(seq 1 300); do curl -sf "$URL/health" > /dev/null 2>&1 && return 0; sleep 0.05; done
    echo "serve_warm.sh: the server did not start" >&2
    exit 1
}
ttft() { # prompt length, seed: one request's TTFT in ms
    python3 tools/bench/serve_bench.py --url "$URL" --workload uniform --prompt-len "$1" --seed "$2" --max-tokens 1 \
        --num 1 --json | python3 -c 'import json, sys; d = json.load(sys.stdin); assert d["completed"] == 1, d["errors"]; print("%.1f" % d["ttft_ms_p50"])'
}
warmed() { curl -s "$URL/metrics" | awk '/^kvtier_kv_warm_bytes_total\{tier="fast"\}/ {printf "%.0f MiB", $2 / 1048576}
    /^kvtier_sparse_summary_warm_bytes_total/ {printf ", summaries %.0f MiB", $2 / 1048576}'; }
median() { python3 -c 'import statistics, sys; print("%.1f" % statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

if [[ " $CASES " == *" hit "* ]] && ! ls "$DIR"/*.kvb > /dev/null 2>&1; then
    mkdir -p "$DIR"
    start_server -np 1 --kv-cache-dir "$DIR" --kv-warm 0
    echo "# writing the $PROMPT-token prompt's blocks to $DIR: $(ttft "$PROMPT" 7) ms"
    stop_server
fi
echo "# $(date -u '+%F %H:%M') UTC, ${OLD:+$OLD against }$BIN, $(basename "$M"), -t $T${FLAGS:+, $FLAGS}"
NEW=$BIN
for r in $(seq 1 "$ROUNDS"); do
    for c in $CASES; do
        for w in off on; do
            wf=(); BIN=$NEW
            lab="warm $w"
            if [ -n "${OLD:-}" ]; then
                lab=new; [ $w = off ] && BIN=$OLD lab=old
            elif [ $w = off ]; then
                wf=(--kv-warm 0)
            fi
            if [ "$c" = hit ]; then
                start_server -np 1 --kv-cache-dir "$DIR" "${wf[@]}"
                sleep "$WAIT"
                t=$(ttft "$PROMPT" 7)
                echo "hit  $lab  round $r  ttft $t ms  (warmed $(warmed))"
            else
                start_server "${wf[@]}"
                sleep "$WAIT"
                ttft "$LEN" 1000 > /dev/null
                ts=()
                for i in $(seq 1 "$N"); do sleep "$GAP"; ts+=("$(ttft "$LEN" $((1000 + r * 100 + i)))"); done
                echo "seq  $lab  round $r  ttft ${ts[*]} ms  median $(median "${ts[@]}")  (warmed $(warmed))"
            fi
            stop_server
        done
    done
done
