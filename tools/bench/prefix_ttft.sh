#!/usr/bin/env bash
# prefix_ttft.sh - a repeated long prompt on a second server: TTFT cold, from Redis (--kv-remote) and from a cache
# directory (--kv-cache-dir); then the decode gaps of a request X that is decoding while another request's prefix
# arrives from Redis. One redis-server of its own (loopback, a free port, no persistence) and kvtier servers on free
# ports; everything is stopped and removed at the end.
#   tools/bench/prefix_ttft.sh [prompt_tokens=4096] [reps=3]   (reps 0: the gap cases only)
# env: MODEL (SmolLM2-135M Q4_1), BIN (build/kvtier), BASE_BIN (a kvtier to compare the gap with, e.g. one built
# before the background fetch; empty: none), SERVE_ARGS (more flags for every server, e.g. "--kv-fast 48M
# --kv-host 512M"), N_DECODE (tokens of X, 300), GAP_REPS (runs of each gap case, 3), GAP_N (Y's prompt in the gap
# cases: by default the longest 64k + 1 <= prompt_tokens, a prefix of the TTFT prompt, so that Y's blocks come from
# Redis and Y computes one token: X's gap then measures Y's admission, not Y's prefill attending over 4K positions).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-4096} REPS=${2:-3}
MODEL=${MODEL:-$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf}
BIN=${BIN:-build/kvtier} BASE_BIN=${BASE_BIN:-} SERVE_ARGS=${SERVE_ARGS:-} N_DECODE=${N_DECODE:-300} GAP_REPS=${GAP_REPS:-3}
GAP_N=${GAP_N:-$(( (N - 1) / 64 * 64 + 1 ))}
CLIENT="python3 tools/bench/prefix_ttft.py"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RPORT=$(free_port)
TMP=$(mktemp -d /tmp/kvt_prefix_ttft.XXXXXX)
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" --logfile '' >/dev/null 2>&1 &
RPID=$!
SPID=
stop_server() { if [ -n "$SPID" ]; then kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; SPID=; fi; }
trap 'stop_server; kill $RPID 2>/dev/null; wait $RPID 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
REDIS="redis://127.0.0.1:$RPORT"
# start_server BIN NP FLAGS...: a server on a free port ($PORT), waits for /health
start_server() {
  local bin=$1 np=$2; shift 2
  PORT=$(free_port)
  # shellcheck disable=SC2086
  "$bin" serve -m "$MODEL" -c 8192 -np "$np" --port "$PORT" --metrics $SERVE_ARGS "$@" 2>>"$TMP/serve.log" &
  SPID=$!
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not start"; tail "$TMP/serve.log"; exit 1
}
# puts go out in the background (the server flushes them when it stops, SIGTERM): a moment for them
settle() { sleep 1; }
echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; $(basename "$MODEL"), -c 8192, prompt $N tokens, $REPS reps"
echo "# SERVE_ARGS: ${SERVE_ARGS:-none}; gap: X decodes $N_DECODE tokens, Y's prompt $GAP_N tokens"
for r in $(seq "$REPS"); do
  seed=$((r * 7))
  redis-cli -p "$RPORT" flushall >/dev/null
  rm -rf "$TMP/dir"
  # one cold prefill puts the prompt's blocks in both stores (the directory in front of Redis)
  start_server "$BIN" 1 --kv-cache-dir "$TMP/dir" --kv-remote "$REDIS"
  cold=$($CLIENT ttft "$PORT" "$N" "$seed"); settle; stop_server
  start_server "$BIN" 1 --kv-remote "$REDIS"
  redis=$($CLIENT ttft "$PORT" "$N" "$seed")
  staged=$(curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^kvtier_prefix_staged_blocks_total/{print $2}'); stop_server
  start_server "$BIN" 1 --kv-cache-dir "$TMP/dir"
  dir=$($CLIENT ttft "$PORT" "$N" "$seed"); stop_server
  echo "ttft_ms(cached) rep $r: cold $cold | redis $redis (staged blocks ${staged:-0}) | dir $dir"
done
# the gap: X decodes while Y's prefix comes from Redis (Y: the last rep's prompt, in Redis since its cold run; every
# server starts with an empty memory cache)
gap_case() { # label bin flags...
  local label=$1 bin=$2; shift 2
  for r in $(seq "$GAP_REPS"); do
    start_server "$bin" 2 --kv-remote "$REDIS" "$@"
    local g; g=$($CLIENT gap "$PORT" "$GAP_N" "$seed" "$N_DECODE" 1.0)
    local a; a=$(curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^kvtier_prefix_attach_seconds_total/{printf "%.1f", $2 * 1e3}')
    echo "gap $label rep $r: max_gap_ms p95_gap_ms p95_all_ms y_ttft_ms y_cached = $g; admission (attach) ms ${a:-n/a}"
    stop_server
  done
}
if [ "$REPS" = 0 ]; then # no TTFT runs: put the gap prompt in Redis first
  seed=7
  start_server "$BIN" 1 --kv-remote "$REDIS"; $CLIENT ttft "$PORT" "$N" "$seed" >/dev/null; settle; stop_server
fi
[ -n "$BASE_BIN" ] && gap_case "before ($BASE_BIN)" "$BASE_BIN"
gap_case "fetch off (--kv-fetch-max 0)" "$BIN" --kv-fetch-max 0
gap_case "background fetch" "$BIN"
gap_case "background fetch, host tier (--kv-fast 160M --kv-host 512M)" "$BIN" --kv-fast 160M --kv-host 512M
