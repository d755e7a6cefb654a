#!/usr/bin/env bash
# prefix_store_bench.sh - the Redis prefix-block store against redis-benchmark, on one redis-server of its own
# (loopback TCP on a free port and a unix socket, no persistence), at one block size; then the directory store
# in a temporary folder for comparison. Kills the server and removes its files at the end.
#   make prefix-store-bench && tools/bench/prefix_store_bench.sh [block_bytes=614400] [blocks=200] [threads=4]
set -euo pipefail
cd "$(dirname "$0")/../.."
BYTES=${1:-614400} N=${2:-200} T=${3:-4}
BIN=${BUILD:-build}/prefix_store_bench
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || { echo "redis-server/redis-benchmark absent"; exit 1; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
SOCK=/tmp/kvt_bench_redis_$$.sock
DIR=$(mktemp -d /tmp/kvt_bench_dir.XXXXXX)
redis-server --port "$PORT" --bind 127.0.0.1 --unixsocket "$SOCK" --unixsocketperm 700 --save '' --appendonly no \
  --dir /tmp --logfile '' >/dev/null 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -f "$SOCK"; rm -rf "$DIR"' EXIT
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')"
"$BIN" "redis://127.0.0.1:$PORT" "$BYTES" "$N" "$T" 8
redis-cli -p "$PORT" flushall >/dev/null
"$BIN" "unix://$SOCK" "$BYTES" "$N" "$T" 8
redis-cli -p "$PORT" flushall >/dev/null
echo "# redis-benchmark -d $BYTES -t set,get -n $N (TCP), 1 and $T clients, then pipelined (-P 8), 1 client"
for c in 1 "$T"; do
  redis-benchmark -p "$PORT" -d "$BYTES" -t set,get -n "$N" -c "$c" -q 2>/dev/null | tr '\r' '\n' | grep 'requests per second' |
    awk -v b="$BYTES" -v c="$c" '{printf "redis-benchmark %s c=%s  %10.1f req/s  %8.1f MB/s\n", $1, c, $2, $2*b/1e6}'
done
redis-benchmark -p "$PORT" -d "$BYTES" -t set,get -n "$N" -c 1 -P 8 -q 2>/dev/null | tr '\r' '\n' | grep 'requests per second' |
  awk -v b="$BYTES" '{printf "redis-benchmark %s c=1 P=8  %10.1f req/s  %8.1f MB/s\n", $1, $2, $2*b/1e6}'
# without -r every SET overwrites one key (the server reuses its memory); a put of ours writes a new key
# each time: -r with a key space much larger than N makes almost every SET a new key, as ours
redis-cli -p "$PORT" flushall >/dev/null
redis-benchmark -p "$PORT" -d "$BYTES" -t set -n "$N" -c 1 -r $((N * 1000)) -q 2>/dev/null | tr '\r' '\n' | grep 'requests per second' |
  awk -v b="$BYTES" '{printf "redis-benchmark %s c=1 new keys (-r)  %10.1f req/s  %8.1f MB/s\n", $1, $2, $2*b/1e6}'
"$BIN" "dir:$DIR" "$BYTES" "$N" "$T" 8
