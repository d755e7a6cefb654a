#!/usr/bin/env bash
# sparse_speed.sh - decode speed of sparse attention (issue 13, docs/SPARSE.md "Speed"): dense, quest and
# asyncspade side by side at ~8K context, (a) with the KV on disk behind a fast tier of 1/8 of the KV and
# (b) all in RAM, printing one markdown table.
#
# usage: tools/bench/sparse_speed.sh [-m MODEL] [-f TEXT] [-n TOKENS] [-r REPS] [-t THREADS] [-o DIR]
#   -m MODEL   GGUF (default ~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf)
#   -f TEXT    prompt text (default: docs/*.md as at commit DOCS_REV concatenated, cut to PROMPT_BYTES bytes:
#              7560 tokens with SmolLM2's tokenizer)
#   -n N       tokens generated per run (default 64; TPOT is the median of the N-1 decode steps)
#   -r R       runs of each config, the configs alternating (default 2)
#   -t T       threads (default 2)
#   -o DIR     where the JSON of each run goes (default /var/tmp/kvtier-sparse-speed)
# env: KV_DISK (default /var/tmp: a real disk, not tmpfs), KV_BLOCK (positions per KV block, default 64),
#      KV_GRAN (--kv-granularity, default head: one KV head per block, so a head's selection maps to blocks),
#      KV_EVICT (--kv-evict of the disk rows, default lru; spread or lookahead keep a cyclic layer-by-layer reuse
#      that is larger than the fast tier instead of losing all of it, as LRU does),
#      PROMPT_BYTES (default 21300), DOCS_REV (default e95fce2), CTX (default 8192), BUDGET (default 0.125), BIN (default build/kvtier),
#      KEEP (--sparse-keep of the "asyncspade pages keep" config, default 0.25: within 2% of dense on Gemma 3 4K),
#      RR_QBITS (--sparse-rerank-qbits of that config, default 8 as --sparse-preset keep; set it empty for a binary older
#      than the flag),
#      ONLY (comma list of config names to run, e.g. "dense,quest p16,asyncspade rr4 block64"; default all),
#      STORES (default "disk ram"), EXTRA (more asyncspade configs: "name|flags;name|flags", run with the others; their
#      summaries reserved as the flags ask, "name|flags|int8": the int8 copies' bytes whatever the flags),
#      BINS (binaries to compare, alternating run by run: "tag=path tag=path", e.g. "old=/tmp/kvtier.old new=build/kvtier";
#      each config's rows then appear per binary as "name@tag", compared with "quest p16@tag" of the same binary; the
#      first binary's `info` gives the model dims)
# Beside each run's JSON, run-*.json.cpu: the wall clock, /proc/stat's busy and steal ticks around the run and the run's own
# CPU (GNU time), so that perrun.py can tell a slow run's cause (other processes, the host's steal) from the run itself.
# After the table: the disk rows per run against Quest page 16's run of the same repetition (tools/bench/perrun.py),
# whether KV_DISK takes O_DIRECT (the store's disk reads then bypass the page cache; tmpfs does not), and where the disk
# rows' store stall goes per token (disk batches, their blocks, read and preparation times, victims written together).
#
# The prompt's prefill is the same dense computation in every mode, so it runs once: the text minus its
# last ~100 bytes is prefilled and saved (--kv-save); each run restores it (--kv-load, summaries included)
# and prefills the remaining ~80 tokens (so asyncspade's query history is full), then decodes. TPOT comes
# from the JSON's "decode" object (per-step times after the first token, the prefill apart).
#
# Fast tier: 1/8 of the KV of CTX positions (kv_bytes_per_token_f16 from `kvtier info`) for the paged
# blocks in every mode; the sparse modes' key summaries come on top (--kv-fast = KV/8 + summary bytes),
# since asyncspade's int8 copy (27% of the KV) cannot fit inside 1/8.
set -euo pipefail
cd "$(dirname "$0")/../.."
M=~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf
TEXT="" N=64 REPS=2 T=2 OUT=/var/tmp/kvtier-sparse-speed
while getopts "m:f:n:r:t:o:" o; do
    case $o in
        m) M=$OPTARG ;; f) TEXT=$OPTARG ;; n) N=$OPTARG ;; r) REPS=$OPTARG ;; t) T=$OPTARG ;; o) OUT=$OPTARG ;;
        *) sed -n 2,30p "$0"; exit 2 ;;
    esac
done
BIN=${BIN:-build/kvtier}
KV_DISK=${KV_DISK:-/var/tmp}
KV_BLOCK=${KV_BLOCK:-64}
KV_GRAN=${KV_GRAN:-head}
KV_EVICT=${KV_EVICT:-lru}
CTX=${CTX:-8192}
BUDGET=${BUDGET:-0.125}
PROMPT_BYTES=${PROMPT_BYTES:-21300}
DOCS_REV=${DOCS_REV:-e95fce2}
KEEP=${KEEP:-0.25}
RR_QBITS=${RR_QBITS-8}
mkdir -p "$OUT"
if [ -z "$TEXT" ]; then
    TEXT=$OUT/prompt.txt
    # the repository's docs as at DOCS_REV (fixed, so that the prompt does not move as the docs change)
    for d in $(git ls-tree --name-only "$DOCS_REV" docs/ | grep '\.md$'); do git show "$DOCS_REV:$d"; done > "$OUT/docs.txt"
    head -c "$PROMPT_BYTES" "$OUT/docs.txt" > "$TEXT"
fi
head -c $(( $(wc -c < "$TEXT") - 150 )) "$TEXT" > "$OUT/prefix.txt"

# model dims -> the KV of CTX positions and the summary bytes of each mode (as kvt_sparse_summary_bytes)
[ -n "${BINS:-}" ] && BIN=$(set -- $BINS; echo "${1#*=}")
read -r KVB NL NKV HD < <("$BIN" info -m "$M" --json | python3 -c '
import json,sys; i=json.load(sys.stdin); print(i["kv_bytes_per_token_f16"], i["n_layer"], i["n_head_kv"], i["head_dim"])')
KV=$((KVB * CTX)); FAST=$((KV / 8))
# the layers whose summaries the engine reserves (kvt_sparse_summary_layers: the global ones from --sparse-dense-layers
# on); every layer for SmolLM2 without dense layers; set NL_SUM for window layers (Gemma 3: 3) or dense ones
NLS=${NL_SUM:-$NL}
# each buffer as kvt_sparse_alloc_bytes allocates it: 64-byte multiples, whole 2 MiB pages from 1 MiB on
abytes() { if [ "$1" -ge $((1 << 20)) ]; then echo $(( ($1 + (2 << 20) - 1) / (2 << 20) * (2 << 20) )); else echo $(( ($1 + 63) / 64 * 64 )); fi; }
quest_sum() { echo $((NLS * 2 * $(abytes $((NKV * ((CTX + $1 - 1) / $1) * HD * 4))))); }
CAP=$(( (CTX + 15) / 16 * 16 )) # n_ctx in whole 16-position blocks
ASYNC_SUM=$((NLS * ($(abytes $((NKV * CAP * HD))) + $(abytes $((NKV * CAP * 4)))) ))
# asyncspade's summary bytes for its flags: the int8 copies (f32 scale per position), the 4-bit ones (--sparse-key-bits
# 4: head_dim / 2 bytes per position and an f16 scale per 32 dimensions), or both (--sparse-rerank-bits 8 beside it)
async_sum() {
    local f=" $1 " kb=8 rb s=0 b row sc
    case "$f" in *" --sparse-key-bits 4 "*) kb=4 ;; esac
    rb=$kb
    case "$f" in *" --sparse-rerank-bits 4 "*) rb=4 ;; *" --sparse-rerank-bits 8 "*) rb=8 ;; esac
    for b in 4 8; do
        [ "$kb" = $b ] || [ "$rb" = $b ] || continue
        row=$HD sc=4
        [ $b = 4 ] && row=$(( (HD + 7) / 8 * 4 )) sc=$(( HD % 32 ? 2 : HD / 16 ))
        s=$((s + $(abytes $((NKV * CAP * row))) + $(abytes $((NKV * CAP * sc)))))
    done
    echo $((NLS * s))
}

SESSION=$OUT/prefix-$(cat "$M" "$OUT/prefix.txt" | cksum | cut -d' ' -f1)-$CTX.kvs # per model and text
if [ ! -s "$SESSION" ]; then
    echo "prefilling the prefix once (dense) -> $SESSION" >&2
    "$BIN" generate -m "$M" -f "$OUT/prefix.txt" -n 1 --temp 0 -t "$T" -c "$CTX" --json --kv-save "$SESSION" \
        > "$OUT/prefix.json"
fi

# name | sparse flags | summary bytes
CONFIGS=(
    "dense|--sparse off|0"
    "quest p16|--sparse quest --sparse-page 16|$(quest_sum 16)"
    "quest p4|--sparse quest --sparse-page 4|$(quest_sum 4)"
    "asyncspade|--sparse asyncspade|$ASYNC_SUM"
    "asyncspade fb0.85|--sparse asyncspade --sparse-fallback 0.85|$ASYNC_SUM"
    "quest p$KV_BLOCK|--sparse quest --sparse-page $KV_BLOCK|$(quest_sum "$KV_BLOCK")"
    "asyncspade block$KV_BLOCK|--sparse asyncspade --sparse-block $KV_BLOCK|$ASYNC_SUM"
    # the recommended configuration of 2026-11-26 (docs/log/SPARSE-log.md): 4K candidate positions in whole blocks from the predicted
    # query, prefetched by the worker; the real query keeps the best K of them (token level) on the int8 keys
    "asyncspade rr4 block$KV_BLOCK|--sparse asyncspade --sparse-rerank 4 --sparse-block $KV_BLOCK|$ASYNC_SUM"
    "asyncspade rr2 block$KV_BLOCK|--sparse asyncspade --sparse-rerank 2 --sparse-block $KV_BLOCK|$ASYNC_SUM"
    "asyncspade rr4|--sparse asyncspade --sparse-rerank 4|$ASYNC_SUM"
    # the worker prefetches only its K best candidates' blocks, best first (--sparse-prefetch-top 1)
    "asyncspade rr4 block$KV_BLOCK top1|--sparse asyncspade --sparse-rerank 4 --sparse-block $KV_BLOCK --sparse-prefetch-top 1|$ASYNC_SUM"
    # pages (docs/log/SPARSE-log-2.md, "Whole pages from the real query"): candidate pages by predicted mass, the real query keeps
    # whole pages (--sparse-rerank-block) so that the set fits the fast tier; the worker prefetches its K/2 best
    "asyncspade pages|--sparse asyncspade --sparse-rerank 4 --sparse-block $KV_BLOCK --sparse-block-sum --sparse-rerank-block $KV_BLOCK --sparse-prefetch-top 0.5|$ASYNC_SUM"
    # the same with hysteresis (docs/log/SPARSE-log-2.md, "hysteresis"): a page the previous step kept counts (1 + KEEP) times its
    # mass, so fewer pages (blocks) change per step
    "asyncspade pages keep|--sparse asyncspade --sparse-rerank 4 --sparse-block $KV_BLOCK --sparse-block-sum --sparse-rerank-block $KV_BLOCK --sparse-prefetch-top 0.5 --sparse-keep $KEEP${RR_QBITS:+ --sparse-rerank-qbits $RR_QBITS}|$ASYNC_SUM"
    # the documented accuracy configuration (docs/SPARSE.md: re-rank x6, the layer's KV heads sharing their budgets) in
    # pages of KV_BLOCK, and the same with x8 (docs/log/SPARSE-log-2.md, "Pages of 8 in blocks of 8": at KV_BLOCK=8 SmolLM2
    # 4K +2.07%, mass recall 0.908); their Quest baselines are "quest p16" (run at KV_BLOCK=16) and "quest p$KV_BLOCK"
    "doc x6 share p$KV_BLOCK|--sparse asyncspade --sparse-rerank 6 --sparse-block $KV_BLOCK --sparse-block-sum --sparse-rerank-block $KV_BLOCK --sparse-prefetch-top 0.5 --sparse-keep $KEEP --sparse-share|$ASYNC_SUM"
    "acc x8 share p$KV_BLOCK|--sparse asyncspade --sparse-rerank 8 --sparse-block $KV_BLOCK --sparse-block-sum --sparse-rerank-block $KV_BLOCK --sparse-prefetch-top 0.5 --sparse-keep $KEEP --sparse-share|$ASYNC_SUM"
)
# EXTRA="name|asyncspade flags;name|flags": asyncspade configurations added to the list (their summaries reserved:
# int8, or 4-bit with --sparse-key-bits 4); "name|flags|int8" reserves the int8 copies' bytes whatever the flags (a
# 4-bit config then gives the store's blocks what the int8 copies would have taken: the same --kv-fast in all)
if [ -n "${EXTRA:-}" ]; then
    IFS=';' read -r -a extra <<< "$EXTRA"
    for e in "${extra[@]}"; do
        case "$e" in
            *"|int8") CONFIGS+=("${e%|int8}|$ASYNC_SUM") ;;
            *) CONFIGS+=("$e|$(async_sum "${e#*|}")") ;;
        esac
    done
fi
if [ -n "${ONLY:-}" ]; then
    sel=() seen=","
    for c in "${CONFIGS[@]}"; do # a name once (quest p16 is also quest p$KV_BLOCK when KV_BLOCK is 16)
        case ",$ONLY," in *",${c%%|*},"*) case "$seen" in *",${c%%|*},"*) ;; *) sel+=("$c"); seen="$seen${c%%|*}," ;; esac ;; esac
    done
    CONFIGS=("${sel[@]}")
fi
# BINS: each config once per binary, the binaries alternating within a config (name@tag)
BINLIST=()
if [ -n "${BINS:-}" ]; then
    for b in $BINS; do BINLIST+=("$b"); done
    bc=()
    for c in "${CONFIGS[@]}"; do
        IFS='|' read -r name flags sum <<< "$c"
        for b in "${BINLIST[@]}"; do bc+=("$name@${b%%=*}|$flags|$sum"); done
    done
    CONFIGS=("${bc[@]}")
fi
bin_of() { # the binary of a config name (name@tag: the tag's; else BIN)
    local tag=${1##*@}
    if [ "$tag" != "$1" ]; then for b in "${BINLIST[@]}"; do [ "${b%%=*}" = "$tag" ] && { echo "${b#*=}"; return; }; done; fi
    echo "$BIN"
}
NAMES=$(printf '%s\n' "${CONFIGS[@]}" | cut -d'|' -f1 | paste -sd'|')
HZ=$(getconf CLK_TCK)
run_timed() { # FILE CMD...: CMD, its user and system CPU seconds into FILE where GNU time is installed
    local o=$1
    shift
    if [ -x /usr/bin/time ]; then /usr/bin/time -f "%U %S" -o "$o" "$@"; else "$@"; fi
}
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
rm -f "$OUT"/run-*.json "$OUT"/run-*.json.cpu "$OUT"/run-*.json.time
for rep in $(seq 1 "$REPS"); do
    for store in ${STORES:-disk ram}; do
        for c in "${CONFIGS[@]}"; do
            IFS='|' read -r name flags sum <<< "$c"
            tier=()
            [ "$store" = disk ] && tier=(--kv-fast $((FAST + sum)) --kv-disk "$KV_DISK" --kv-block "$KV_BLOCK" --kv-granularity "$KV_GRAN" --kv-evict "$KV_EVICT")
            [ "${name%@*}" = dense ] || flags="$flags --sparse-budget $BUDGET"
            f="$OUT/run-$store-${name// /_}-$rep.json"
            # the machine around the run ($f.cpu, read by perrun.py): wall clock, /proc/stat's busy and steal ticks of all
            # vCPUs, and the run's own user + system CPU (/usr/bin/time), so that a slow run shows whether other work or
            # the host took the vCPUs meanwhile
            c0=$(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8, $9}' /proc/stat) w0=$(date +%s.%N)
            # shellcheck disable=SC2086
            run_timed "$f.time" "$(bin_of "$name")" generate -m "$M" -f "$TEXT" -n "$N" --temp 0 --ignore-eos -t "$T" -c "$CTX" --json \
                --kv-load "$SESSION" "${tier[@]}" $flags > "$f" 2> "$f.err" || { echo "FAILED: $f" >&2; cat "$f.err" >&2; }
            echo "$w0 $(date +%s.%N) $c0 $(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8, $9}' /proc/stat) $HZ $(cat "$f.time" 2>/dev/null | tail -1)" > "$f.cpu"
            echo "$(date -u +%T) $store $name rep $rep load $(cut -d' ' -f1 /proc/loadavg)" >&2
        done
    done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
# the disk tier's file is opened with O_DIRECT (src/kv/kv_tier.c; buffered only where open refuses it), so on a disk
# file system its reads bypass this machine's page cache; tmpfs (which takes O_DIRECT on recent kernels) is memory
FSTYPE=$(stat -f -c %T "$KV_DISK" 2>/dev/null || echo unknown)
case "$FSTYPE" in
    tmpfs|ramfs) DIRECT="$FSTYPE: memory, not a disk measurement" ;;
    *) DIRECT="$FSTYPE, the store's file opened with O_DIRECT: its reads bypass the page cache" ;;
esac

python3 - "$OUT" "$KVB" "$FAST" "$LOAD0" "$LOAD1" "$REPS" "$KV_BLOCK" "$KV_EVICT" "$NAMES" "${STORES:-disk ram}" "$KV_DISK" "$DIRECT" <<'EOF'
import glob, json, os, statistics, sys
out, kvb, fast, load0, load1, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
B, evict = sys.argv[7], sys.argv[8]
names, stores = sys.argv[9].split("|"), sys.argv[10].split()
def runs(store, name):
    r = []
    for i in range(1, reps + 1):
        p = f"{out}/run-{store}-{name.replace(' ', '_')}-{i}.json"
        try: r.append(json.load(open(p)))
        except Exception: pass
    return r
def rng(v, fmt):
    if not v: return "-"
    lo, hi = min(v), max(v)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else (fmt.format(lo) + "-" + fmt.format(hi))
def mb(x): return x / 1e6
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"CPU: {cpu}, {os.cpu_count()} vCPUs; load average (1/5/15 min) {load0} at the start, {load1} at the end; "
      f"{reps} runs per config, alternating; ranges are over the runs\n")
print("| store | mode | TPOT ms (median step) | TPOT median / mean of the runs | tok/s | KV read/token: disk->fast MB | host->fast MB "
      "| fast (attention) MB | selection stall ms/token | stall % of TPOT | worker CPU ms/token | store stall ms/token "
      "| speed-up vs dense | vs quest p16 | vs quest p4 |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for store in stores:
    tp = {n: [r["decode"]["step_ms_median"] for r in runs(store, n)] for n in names}
    med = {n: statistics.median(v) if v else None for n, v in tp.items()}
    mean = {n: statistics.mean(v) if v else None for n, v in tp.items()}
    for n in names:
        rs = runs(store, n)
        if not rs: print(f"| {store} | {n} | failed |"); continue
        t = tp[n]
        d = [r["decode"] for r in rs]
        sp = [r.get("sparse") for r in rs]
        disk = [x["kv_moved_bytes_per_step"].get("disk_to_fast", 0) for x in d]
        host = [x["kv_moved_bytes_per_step"].get("host_to_fast", 0) for x in d]
        ctx_mean = [r["n_prompt"] + (r["n_gen"] - 1) / 2 for r in rs]
        fastr = [s["kv_read_bytes_per_step"] if s else kvb * c for s, c in zip(sp, ctx_mean)]
        stall = [s["stall_ms_per_step"] if s else 0.0 for s in sp]
        pct = [100 * s / x for s, x in zip(stall, t)]
        sst = [x.get("kv_stall_ms_per_step", 0) for x in d]
        wcpu = [s["worker_cpu_ms_per_step"] if s else 0.0 for s in sp]
        tag = n[n.index("@"):] if "@" in n else ""
        def vs(o):
            o += tag # the same binary's
            if not med.get(o) or o == n: return "-"
            r = f"{med[o] / med[n]:.2f}x"
            return r if len(tp[n]) < 2 else r + f" (means {mean[o] / mean[n]:.2f}x)"
        print(f"| {store} | {n} | {rng(t, '{:.1f}')} | {med[n]:.1f} / {mean[n]:.1f} | {rng([1e3 / x for x in t], '{:.1f}')} | "
              f"{rng([mb(x) for x in disk], '{:.2f}')} | {rng([mb(x) for x in host], '{:.2f}')} | "
              f"{rng([mb(x) for x in fastr], '{:.2f}')} | {rng(stall, '{:.2f}')} | {rng(pct, '{:.0f}%')} | "
              f"{rng(wcpu, '{:.1f}')} | {rng(sst, '{:.1f}')} | {vs('dense')} | {vs('quest p16')} | {vs('quest p4')} |")
print(f"\nKV_DISK {sys.argv[11]} ({sys.argv[12]}). fast tier (disk rows): {fast} bytes = 1/8 of the KV of the context for the blocks, plus each mode's key "
      f"summaries, eviction {evict}; RAM rows: the contiguous store, no tiers. Speed-ups: ratio of the median TPOTs.")
EOF
# per run: each config's run r against quest p16's run r (the same binary's), disk rows (tools/bench/perrun.py)
case " ${STORES:-disk ram} " in *" disk "*) echo; python3 tools/bench/perrun.py "$OUT" --store disk ;; esac
# where the disk rows' store stall goes, per decoded token (medians over the runs; the JSON's "decode" object): the
# disk batches (the final set's late blocks, read on the caller's thread one submission per layer, and the copy
# engine's), the blocks in them and their read and preparation time, the victims without a disk copy written together
# before a late batch (io_clean_*), and the blocks the final sets handed over that were only on disk
case " ${STORES:-disk ram} " in *" disk "*)
python3 - "$OUT" "$NAMES" "$REPS" <<'EOF2'
import json, statistics, sys
out, names, reps = sys.argv[1], sys.argv[2].split("|"), int(sys.argv[3])
print("\n| mode (disk) | store stall ms | disk batches | blocks in them | batch read ms | batch prep ms | clean batches | clean blocks "
      "| late hand-overs only on disk |")
print("|---|---|---|---|---|---|---|---|---|")
for n in names:
    d = []
    for i in range(1, reps + 1):
        try: d.append(json.load(open(f"{out}/run-disk-{n.replace(' ', '_')}-{i}.json"))["decode"])
        except Exception: pass
    if not d: continue
    m = lambda f: statistics.median(f(x) for x in d)
    k = lambda key: m(lambda x: x["kv_miss_kinds_per_step"].get(key, 0))
    print(f"| {n} | {m(lambda x: x['kv_stall_ms_per_step']):.1f} | {k('io_batches'):.1f} | {k('io_batch_blocks'):.0f} | "
          f"{k('io_batch_read_ms'):.1f} | {k('io_batch_prep_ms'):.1f} | {k('io_clean_batches'):.1f} | {k('io_clean_blocks'):.0f} | "
          f"{m(lambda x: x['kv_handover_late_per_step']['absent']):.0f} |")
EOF2
;; esac
