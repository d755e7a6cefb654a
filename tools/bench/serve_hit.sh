#!/usr/bin/env bash
# serve_hit.sh - the time to first token of one prefix-cache hit under `kvtier serve` (issue 13, docs/SPARSE.md "Under
# serve"): for each round, configuration and binary (alternating), a server with -np 1, 2 warm-up requests, then the
# median TTFT of HITS requests of one long prompt with max_tokens 1 (every request after the first is a hit: the prompt's
# blocks from the prefix cache, the rest computed).
# With LIVE=1 the hit arrives while the first request with its prompt still runs: per round, configuration and binary a
# fresh server with -np 2, --metrics and no second-level store, a holder request of the prompt decoding (HOLD tokens,
# default 1500) and one hit timed 0.5 s after the holder's first token (tools/bench/serve_live_hit.py: only the first
# hit beside a fresh holder, since a hit that ends leaves summaries of its own); each line gives the prefix cache's key
# counters over the hit too.
#
# usage: tools/bench/serve_hit.sh [BIN ...]   (default build/kvtier)
# env: M (model, default SmolLM2-135M Q4_1), DIR (the prompts and the prefix store of `tools/bench/serve_sparse.sh -p 1
#      -o DIR`, made by it when missing; default /var/tmp/kvtier-serve-sparse-p1), ROUNDS (3), HITS (6), PORT (18615),
#      CONFIGS ("name|flags;...", default KEEP and Quest page 16 at 1/8), T (threads, 2), CTX (8192), KV_BLOCK (16),
#      LIVE (0), HOLD (1500).
set -euo pipefail
cd "$(dirname "$0")/../.."
M=${M:-$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf}
DIR=${DIR:-/var/tmp/kvtier-serve-sparse-p1}
ROUNDS=${ROUNDS:-3} HITS=${HITS:-6} PORT=${PORT:-18615}
CONFIGS=${CONFIGS:-"keep|--sparse-preset keep --sparse-budget 0.125;quest|--sparse quest --sparse-page 16 --sparse-budget 0.125"}
bins=("$@"); [ ${#bins[@]} -gt 0 ] || bins=(build/kvtier)
[ -s "$DIR/prompts.json" ] || CONFIGS="dense|--sparse off" HOT=0 tools/bench/serve_sparse.sh -m "$M" -p 1 -o "$DIR" > /dev/null
IFS=';' read -r -a cfgs <<< "$CONFIGS"
SRV=""
stop_server() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null; SRV=""; }
trap stop_server EXIT
for r in $(seq 1 "$ROUNDS"); do
    for c in "${cfgs[@]}"; do
        name=${c%%|*} flags=${c#*|}
        for b in "${bins[@]}"; do
            srv_flags=(-np 1 --kv-cache-dir "$DIR/pcache-ram")
            [ "${LIVE:-0}" = 1 ] && srv_flags=(-np 2 --metrics)
            # shellcheck disable=SC2086
            "$b" serve -m "$M" -t "${T:-2}" -c "${CTX:-8192}" --port "$PORT" "${srv_flags[@]}" \
                --kv-block "${KV_BLOCK:-16}" --kv-granularity head $flags 2> /dev/null &
            SRV=$!
            for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break; sleep 0.1; done
            if [ "${LIVE:-0}" = 1 ]; then
                j=$(tools/bench/serve_live_hit.py --url "http://127.0.0.1:$PORT" --prompt-file "$DIR/prompts.json" \
                    --holder-tokens "${HOLD:-1500}")
                stop_server
                python3 -c "import json, sys; j = json.loads(sys.argv[4])
print('round %s %s %s: live hit TTFT %.1f ms, cached %d, holder at %d tokens%s; key hits %d, taken from a running sequence %d; holder TPOT %.2f ms before, %.2f after (%d gaps)' % (
    sys.argv[1], sys.argv[2], sys.argv[3], j['ttft_ms'], j['cached'], j['holder_tokens_before'],
    '' if j['holder_running'] else ' (ended)', j.get('kvtier_prefix_key_hits_total', 0), j.get('kvtier_prefix_key_live_total', 0),
    j['holder_tpot_before_ms'], j['holder_tpot_after_ms'], j['holder_gaps_after']))" \
                    "$r" "$name" "$b" "$j"
                continue
            fi
            v=()
            for i in $(seq 1 $((HITS + 2))); do
                t=$(tools/bench/serve_bench.py --url "http://127.0.0.1:$PORT" --prompt-file "$DIR/prompts.json" --workload uniform \
                    --max-tokens 1 --num 1 --json --label hit | python3 -c "import json, sys; print(json.load(sys.stdin)['ttft_ms'][0])")
                [ "$i" -gt 2 ] && v+=("$t")
            done
            stop_server
            python3 -c "import statistics, sys; v = [float(x) for x in sys.argv[4:]]
print('round %s %s %s: hit TTFT median %.1f ms (%s)' % (sys.argv[1], sys.argv[2], sys.argv[3], statistics.median(v), ' '.join('%.0f' % x for x in v)))" \
                "$r" "$name" "$b" "${v[@]}"
        done
    done
done
