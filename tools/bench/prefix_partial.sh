#!/usr/bin/env bash
# prefix_partial.sh - a repeated prompt on one server: the cached positions and TTFT of its first (cold) and its
# repeated (warm) request, for prompts of 128, 500 and 2000 token ids (seeded), side by side for a kvtier built
# before position-granular prefix reuse (BASE_BIN), this one (BIN) and llama-server (LLAMA_BIN, -c 8192, its
# default --cache-reuse). Each server alone, -np 1, on a free port; stopped at the end.
#   tools/bench/prefix_partial.sh [reps=3] [lengths="128 500 2000"]
# env: MODEL (SmolLM2-135M Q4_1), BIN (build/kvtier), BASE_BIN (empty: skipped), LLAMA_BIN (empty: skipped; run
# with LD_LIBRARY_PATH set to its directory), WHICH (base|new|llama: one server only)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-3} LENS=${2:-"128 500 2000"}
MODEL=${MODEL:-$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf}
BIN=${BIN:-build/kvtier} BASE_BIN=${BASE_BIN:-} LLAMA_BIN=${LLAMA_BIN:-} WHICH=${WHICH:-}
CLIENT="python3 tools/bench/prefix_ttft.py"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
LOG=$(mktemp /tmp/kvt_prefix_partial.XXXXXX)
SPID=
stop_server() { if [ -n "$SPID" ]; then kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; SPID=; fi; }
trap 'stop_server; rm -f "$LOG"' EXIT
start() { # start NAME CMD...: waits for /health
  PORT=$(free_port)
  "$@" --port "$PORT" >>"$LOG" 2>&1 &
  SPID=$!
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not start"; tail "$LOG"; exit 1
}
run() { # run NAME: per length, a cold request then REPS repeats; median warm TTFT
  local name=$1
  for n in $LENS; do
    seed=$((n * 3 + 1))
    read -r cold_ms cold_c < <($CLIENT ttft "$PORT" "$n" "$seed")
    ws=() wc=0
    for _ in $(seq "$REPS"); do read -r t c < <($CLIENT ttft "$PORT" "$n" "$seed"); ws+=("$t"); wc=$c; done
    med=$(printf '%s\n' "${ws[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    printf '| %s | %d | %s | %d | %s | %d |\n' "$name" "$n" "$cold_ms" "$cold_c" "$med" "$wc"
  done
}
echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; $(basename "$MODEL"), -c 8192, -np 1, $REPS repeats (median)"
echo "| server | prompt | cold TTFT ms | cold cached | repeat TTFT ms | repeat cached |"
echo "|---|---|---|---|---|---|"
if [ -n "$BASE_BIN" ] && [ -z "$WHICH" -o "$WHICH" = base ]; then
  start "$BASE_BIN" serve -m "$MODEL" -c 8192 -np 1; run "kvtier (before)"; stop_server
fi
if [ -z "$WHICH" -o "$WHICH" = new ]; then
  start "$BIN" serve -m "$MODEL" -c 8192 -np 1; run "kvtier (after)"; stop_server
fi
if [ -n "$LLAMA_BIN" ] && [ -z "$WHICH" -o "$WHICH" = llama ]; then
  start "$LLAMA_BIN" -m "$MODEL" -c 8192 -np 1 -t "$(nproc)"; run "llama-server"; stop_server
fi
