#!/usr/bin/env bash
# serve_sparse.sh - sparse decode attention under `kvtier serve` (continuous batching; issue 13, docs/SPARSE.md
# "Sparse under serve"): P concurrent long requests from a real text, each configuration in its own server, the
# configurations alternating round by round.
#
# usage: tools/bench/serve_sparse.sh [-m MODEL] [-n TOKENS] [-p PARALLEL] [-r ROUNDS] [-o DIR]
#   -n N   tokens generated per request in the timed (hot) requests (default 64)
#   -p P   concurrent requests and -np (default 3)
#   -r R   rounds (default 1); a round runs every configuration once, in CONFIGS' order (RSTART: the first round's
#          number, default 1, so that rounds run as separate commands add to one DIR; the table covers rounds 1..last)
# env: CONFIGS ("name|flags;name|flags", default dense, KEEP and Quest page 16 at 1/8), PROMPT_TOKENS (ids of each
#      prompt, default 6000), CTX (-c, default 8192), KV_BLOCK (default 16), KV_GRAN (default head),
#      STORE (ram: the paged store in RAM, the default; disk: --kv-fast FAST_FRAC of the P sequences' KV plus the
#      summaries' reservation, --kv-disk KV_DISK), FAST_FRAC (default 0.125), KV_DISK (default /var/tmp), HOT (timed
#      requests per server start, default 2), PORT (default 18613), BIN (default build/kvtier), T (threads, default 2),
#      PCACHE (--kv-cache-dir, default DIR/pcache-STORE: the prompts' KV blocks kept on disk across server starts)
#
# Per server start: a first round (the P prompts at once, max_tokens 1; its TTFT is the "cold" TTFT: the dense
# prefill of all of them on the first start, a hit of the prefix store PCACHE (the blocks read from its files) on the
# later ones; prefill is dense in every mode, so one prefill serves every configuration), then HOT timed rounds (the same P prompts at once, N tokens
# each, temperature 0, ignore_eos): every prompt but its last --sparse-window + 1 tokens comes from the prefix cache
# (asyncspade; 1 token otherwise), so their TTFT is a cache hit's (the summaries read back from the store), and their
# TPOT is P sequences decoding together. Each round's JSON (tools/bench/serve_bench.py --json) goes to DIR; the table
# at the end gives per configuration: TPOT (median and p90 over every request of the hot rounds), throughput, TTFT,
# KV moved bytes and the store's stall per iteration, iterations per hot run (3 x N: the requests ran one at a time),
# and from serve's sparse counters (/metrics): the selection stall's share of the decode time, the stall per sparse step
# (and of it the wait for the asyncspade worker), the KV bytes a step reads, the bytes moved between tiers per token.
#
# The prompts: the repository's docs as at commit e95fce2 (the text of tools/bench/sparse_speed.sh), P slices starting
# 40000 bytes apart (distinct text: no shared prefix between the requests), each its first PROMPT_TOKENS ids (`kvtier
# tokenize`), sent as id lists.
set -euo pipefail
cd "$(dirname "$0")/../.."
M=~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf
N=64 P=3 R=1 OUT=/var/tmp/kvtier-serve-sparse
while getopts "m:n:p:r:o:" o; do
    case $o in
        m) M=$OPTARG ;; n) N=$OPTARG ;; p) P=$OPTARG ;; r) R=$OPTARG ;; o) OUT=$OPTARG ;;
        *) sed -n 2,25p "$0"; exit 2 ;;
    esac
done
BIN=${BIN:-build/kvtier}
T=${T:-2}
CTX=${CTX:-8192}
KV_BLOCK=${KV_BLOCK:-16}
KV_GRAN=${KV_GRAN:-head}
STORE=${STORE:-ram}
FAST_FRAC=${FAST_FRAC:-0.125}
KV_DISK=${KV_DISK:-/var/tmp}
HOT=${HOT:-2}
PORT=${PORT:-18613}
PROMPT_TOKENS=${PROMPT_TOKENS:-6000}
PCACHE=${PCACHE:-$OUT/pcache-$STORE}
mkdir -p "$PCACHE"
CONFIGS=${CONFIGS:-"dense|--sparse off;keep|--sparse-preset keep --sparse-budget 0.125;quest|--sparse quest --sparse-page 16 --sparse-budget 0.125"}
mkdir -p "$OUT"
if [ ! -s "$OUT/prompts.json" ]; then
    for d in $(git ls-tree --name-only e95fce2 docs/ | grep '\.md$'); do git show "e95fce2:$d"; done > "$OUT/docs.txt"
    for i in $(seq 0 $((P - 1))); do # slice i: PROMPT_TOKENS ids of the text from byte i * 40000 on
        python3 -c "import sys; d = open(sys.argv[1], 'rb').read(); i, n = int(sys.argv[2]), int(sys.argv[3])
open(sys.argv[4], 'wb').write(d[i * 40000:i * 40000 + 4 * n])" "$OUT/docs.txt" "$i" "$PROMPT_TOKENS" "$OUT/slice$i.txt"
        "$BIN" tokenize -m "$M" -f "$OUT/slice$i.txt" --no-escape --no-parse-special > "$OUT/slice$i.ids"
        python3 -c "import sys; print('[' + ','.join(open(sys.argv[1]).read().split()[:int(sys.argv[2])]) + ']')" "$OUT/slice$i.ids" "$PROMPT_TOKENS"
    done | paste -sd, | sed 's/^/[/; s/$/]/' > "$OUT/prompts.json"
fi
read -r KVB NL NKV HD < <("$BIN" info -m "$M" --json | python3 -c '
import json,sys; i=json.load(sys.stdin); print(i["kv_bytes_per_token_f16"], i["n_layer"], i["n_head_kv"], i["head_dim"])')
# --kv-fast of the disk store: FAST_FRAC of the P sequences' KV of CTX positions for the blocks, plus the mode's key
# summaries for P sequences (reserved from --kv-fast: --sparse-seqs is serve's -np), as kvt_sparse_summary_bytes and
# tools/bench/sparse_speed.sh count them, each buffer as allocated (64-byte multiples, whole 2 MiB pages from 1 MiB
# on): asyncspade's int8 copies (head_dim bytes per position, KV head and layer; CTX in whole 16-position blocks) and
# their f32 scales, Quest's f32 min/max per page of 16, dense none. (Before 2026-12-01 05:10 UTC this left out the
# rounding: under asyncspade the store's blocks then got 1/3 of FAST_FRAC, the 2 MiB pages taking the rest.) The layers
# counted: NL_SUM (default every layer), as kvt_sparse_summary_layers (the global layers from --sparse-dense-layers on).
fast_of() {
    python3 - "$1" "$FAST_FRAC" "$KVB" "$CTX" "$P" "${NL_SUM:-$NL}" "$NKV" "$HD" <<'PY'
import sys
f, frac = " %s " % sys.argv[1], float(sys.argv[2])
kvb, ctx, p, nl, nkv, hd = map(int, sys.argv[3:])
ab = lambda n: (n + (2 << 20) - 1) // (2 << 20) * (2 << 20) if n >= 1 << 20 else (n + 63) // 64 * 64
blocks = int(frac * kvb * ctx * p)
if " --sparse off " in f: s = 0
elif " --sparse quest " in f: s = nl * 2 * ab(nkv * ((ctx + 15) // 16) * hd * 4)
else: cap = (ctx + 15) // 16 * 16; s = nl * (ab(nkv * cap * hd) + ab(nkv * cap * 4))
print(blocks + p * s)
PY
}
IFS=';' read -r -a cfgs <<< "$CONFIGS"
SRV=""
stop_server() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null; SRV=""; }
trap stop_server EXIT
RSTART=${RSTART:-1}
for r in $(seq "$RSTART" $((RSTART + R - 1))); do
    for c in "${cfgs[@]}"; do
        name=${c%%|*} flags=${c#*|}
        f="$OUT/$STORE-$name-$r"
        tier=(--kv-block "$KV_BLOCK" --kv-granularity "$KV_GRAN")
        [ "$STORE" = disk ] && tier+=(--kv-fast "$(fast_of "$flags")" --kv-disk "$KV_DISK")
        # shellcheck disable=SC2086
        "$BIN" serve -m "$M" -t "$T" -c "$CTX" -np "$P" --port "$PORT" --metrics --kv-cache-dir "$PCACHE" "${tier[@]}" $flags 2> "$f.err" &
        SRV=$!
        for _ in $(seq 1 200); do
            curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break
            sleep 0.1
        done
        echo "$(date -u +%T) $STORE $name round $r load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        tools/bench/serve_bench.py --url "http://127.0.0.1:$PORT" --prompt-file "$OUT/prompts.json" --workload uniform \
            --max-tokens 1 --num "$P" --json --label "$name cold" > "$f-cold.json"
        for h in $(seq 1 "$HOT"); do # (none with HOT=0: only the first round, e.g. to fill PCACHE)
            tools/bench/serve_bench.py --url "http://127.0.0.1:$PORT" --prompt-file "$OUT/prompts.json" --workload uniform \
                --max-tokens "$N" --num "$P" --json --label "$name" > "$f-hot$h.json"
        done
        stop_server
    done
done
python3 - "$OUT" "$STORE" $((RSTART + R - 1)) "$HOT" "${cfgs[@]}" <<'EOF'
import json, os, statistics, sys
out, store, R, H = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
names = [c.split("|")[0] for c in sys.argv[5:]]
def pct(v, p):
    s = sorted(v); k = (len(s) - 1) * p / 100; lo = int(k); hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"CPU: {cpu}, {os.cpu_count()} vCPUs; store {store}; {R} rounds x {H} hot runs per configuration\n")
print("| config | TPOT median ms | TPOT p90 ms | TPOT per round (median) | tok/s (per run) | TTFT hit median ms | TTFT cold median / max ms "
      "| cached / prompt tokens | KV moved MB per hot run | store stall ms / iteration | process CPU ms / iteration "
      "| iterations per hot run | selection stall % of decode time | selection stall ms per step (worker wait) "
      "| KV read MB per step | moved MB per token |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for n in names:
    tp, thr, tt, cold, moved, st, cpu_it, rounds, cached, prompt = [], [], [], [], [], [], [], [], 0, 0
    its, share, sms, wms, rd, mpt = [], [], [], [], [], []
    for r in range(1, R + 1):
        try: c = json.load(open(f"{out}/{store}-{n}-{r}-cold.json")); cold += c["ttft_ms"]
        except Exception: pass
        rt = []
        for h in range(1, H + 1):
            try: j = json.load(open(f"{out}/{store}-{n}-{r}-hot{h}.json"))
            except Exception: continue
            tp += j["tpot_ms"]; rt += j["tpot_ms"]; thr.append(j["throughput_tok_s"]); tt += j["ttft_ms"]
            cached += j["cached_tokens"]; prompt += j["prompt_tokens"]
            if j["kv_moved_bytes"] is not None: moved.append(j["kv_moved_bytes"] / 1e6)
            pi = j.get("per_iteration") or {}
            if pi: st.append(pi["stall_ms"]); cpu_it.append(pi["process_cpu_ms"]); its.append(pi["iterations"])
            sp = j.get("sparse") or {}
            if sp:
                if sp["decode_s"] > 0: share.append(100 * sp["stall_s"] / sp["decode_s"])
                if sp["steps"] > 0:
                    sms.append(1e3 * sp["stall_s"] / sp["steps"]); wms.append(1e3 * sp["wait_s"] / sp["steps"])
                    rd.append(sp["kv_read_bytes"] / sp["steps"] / 1e6)
                if sp["generated_tokens"] > 0: mpt.append(sp["moved_bytes"] / sp["generated_tokens"] / 1e6)
        if rt: rounds.append(statistics.median(rt))
    if not tp: print(f"| {n} | failed |"); continue
    f = lambda v, d=1: "-" if not v else (f"{min(v):.{d}f}-{max(v):.{d}f}" if len(v) > 1 else f"{v[0]:.{d}f}")
    print(f"| {n} | {statistics.median(tp):.1f} | {pct(tp, 90):.1f} | {' '.join(f'{x:.1f}' for x in rounds)} | {f(thr)} | "
          f"{statistics.median(tt):.0f} | {statistics.median(cold):.0f} / {max(cold):.0f} | {cached} / {prompt} | {f(moved)} | "
          f"{f(st, 2)} | {f(cpu_it)} | {f(its, 0)} | {f(share)} | {f(sms, 2)} ({f(wms, 2)}) | {f(rd, 2)} | {f(mpt, 2)} |")
EOF
