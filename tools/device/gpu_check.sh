#!/usr/bin/env bash
# gpu_check.sh - issue 15's checks and benchmarks on a lent GPU machine (H100/H200; a copy of the working tree,
# nothing outside reachable, 10 minutes per command). Each part is switchable (PART=0 leaves it out) and has its own
# time limit; a part that would start after BUDGET_S seconds (default 540) is skipped and says so. At the end one
# table: every figure beside its measured limit or goal. Output files go to ${OUT:-/tmp/gpu-check}; models are made
# here by `kvtier mkmodel` into ${MODELS:-build/dev-models} (kept between calls while the machine stays warm).
#
#   BUILD      make the binaries and build/libkvtier-cuda.so for sm_90 (${NVCC_ARCH} overrides)
#   SUITES     `cuda` (every kernel against the CPU reference, outputs poisoned first; nmse table; matvec GB/s) and
#              `cuda_layers` (-ngl against the CPU pass; the device KV's VRAM budgets bit for bit the all-VRAM run)
#   RATES      llama3-8b Q4_K_M, all layers and the logits on the device: `kvtier bench -p 512 -n 128`: decode GB/s
#              (and, RATES_GRAPHS=1, decode tok/s with --cuda-graphs beside the eager one, and the same greedy text)
#              of weights beside the profile's device read bandwidth (goal >= 60%), prefill tok/s (goal >= 5000);
#              RATES_Q8=1 (default) the same decode with mul_mat_vec over q8_1 activations (KVT_CUDA_MMV=q8_1), eager
#              and with --cuda-graphs, its GB/s beside the f32 path's and the device's; RATES_TILED=1 (default) the
#              prefill with the tiled attention kernel (KVT_CUDA_ATTN=tiled) beside the chunked one's; RATES_GQA=1 (default)
#              the prefill with the GQA attention kernel (KVT_CUDA_ATTN_DECODE=gqa) beside the per-head one's;
#              RATES_MMVQ (default "1:1 4:1 2:2") ROWS:ILP pairs: the decode with ROWS weight rows a warp and ILP items
#              a lane in flight in the q8_1 matvec of q4_K / q6_K (KVT_CUDA_MMVQ_ROWS / KVT_CUDA_MMVQ_ILP)
#   LBS        the same model, `kvtier beam` 32 beams, step 32, blocks of LBS_BLOCK (32) positions, KV within --kv-vram
#              (LBS_VRAM, default 512M) below
#              the beams' KV: layerwise and balanced, time of each (goal balanced <= 1/3 of layerwise), beams equal
#   HELM       Qwen3-8B shape (f16: the device runs no bf16), `kvtier plan --vram 8G` on this machine's profile,
#              then the planned split (`generate --plan FILE`): measured ms/token against the plan's (goal 15%);
#              then (HELM_VALIDATE=1) `kvtier plan --validate --gpu` of the same (the plan's split run and compared by
#              the planner itself); the profile's rates of kvtier's own matvec and batched KV copies in the table
#   HEADINFER  llama3-8b Q4_K_M, a HI_CTX-token prompt (16384), all KV in VRAM (and again with the GQA decode attention,
#              KVT_CUDA_ATTN_DECODE=gqa; HI_GQA=0 leaves it out), within --kv-vram 1G (lookahead), and
#              within it head-wise (--kv-granularity head; HI_HEAD=0 leaves it out):
#              TPOT beside the link time of the KV bytes that crossed PCIe per step (goal 1.2x), tokens equal
#   KVTIERS    llama3-8b Q4_K_M, a KT_CTX-token prompt (4096), blocks of KT_BLOCK (32) positions: all KV in VRAM, within
#              --kv-vram KT_VRAM (128M; copies under 1 MiB batched), the same with one DMA per block (--kv-copy-dma),
#              and over --kv-pinned KT_PINNED (128M) with the rest on disk (--kv-disk, T2) on the disk thread, and the
#              same with the synchronous disk I/O (--kv-disk-sync): tokens equal, TPOT of each, bytes per tier per run,
#              batched against DMA, the disk thread against the synchronous I/O
#   MEMCHECK   compute-sanitizer memcheck of both suites (when installed)
#   NCU        (after RATES) where the time goes: Nsight Compute's per-kernel durations (--clock-control none) of a
#              512-token prefill and of 8 decode steps of the llama3-8b Q4_K_M, the kernels' shares of each
# e.g. the call plan of docs/GPU.md: `HELM=0 HEADINFER=0 MEMCHECK=0 tools/device/gpu_check.sh`, then
# `BUILD=0 SUITES=0 RATES=0 LBS=0 tools/device/gpu_check.sh` on the still-warm machine.
# Dry run without a GPU over the emulation (logic only, every figure meaningless):
#   BUILD=0 KVT_CUDA_LIB=build/libkvtier-cuda-fake.so PROFILE=profiles/h200-16c.json \
#   MKMODEL_FLAGS="--layers 2 --dim 256 --heads 4 --kv-heads 2 --ff 512 --vocab 1000" HI_CTX=256 LBS_PROMPT=64 \
#   LBS_VRAM=64K HELM_VRAM=... tools/device/gpu_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.." || exit 1
MODELS=${MODELS:-build/dev-models}; mkdir -p "$MODELS"
T=$(nproc)
KVT=build/kvtier
SUMMARY="$OUT/summary.txt"; : >"$SUMMARY"
# one row of the final table: part, figure, measured, limit or goal, verdict
row() { printf "%s\t%s\t%s\t%s\t%s\n" "$1" "$2" "$3" "$4" "$5" >>"$SUMMARY"; }
# the first number after "KEY": in FILE (plain JSON as kvtier writes it); empty if absent
jnum() { grep -o "\"$2\": *-\?[0-9.e+-]*" "$1" 2>/dev/null | head -1 | sed 's/.*: *//'; }
# the same after the first occurrence of the text AFTER (a nested object)
jnum_in() { local s; s=$(tr -d '\n' <"$1" 2>/dev/null); s=${s#*"$2"}; printf "%s" "$s" | grep -o "\"$3\": *-\?[0-9.e+-]*" | head -1 | sed 's/.*: *//'; }
calc() { awk "BEGIN { printf \"$1\", ($2) }"; }
t0=$(date +%s)
left() { [ $(( $(date +%s) - t0 )) -lt "${BUDGET_S:-540}" ] || { echo "$1: skipped (${BUDGET_S:-540} s used; run it alone)"; row "$1" "-" "skipped" "-" "not run (time)"; return 1; }; }
rc=0

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/nvidia-smi.txt"
else echo "nvidia-smi: absent (no NVIDIA driver here${KVT_CUDA_LIB:+; KVT_CUDA_LIB=$KVT_CUDA_LIB})"; fi
command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -1
if [ "${BUILD:-1}" = 1 ]; then
  make -j"$T" URING=0 NVCC_ARCH="${NVCC_ARCH:--gencode arch=compute_90,code=sm_90}" build/kvtier-tests build/kvtier \
    build/libkvtier-cuda.so >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi

# the device layers' host time in a kvtier --json output: "run R ms (device KV K, waits for the device S) over C calls"
gtimes() {
  python3 -c '
import json, sys
try: g = json.load(open(sys.argv[1]))["gpu"]; t = g["time_ms"]
except Exception: print("(no device times)"); sys.exit(0)
print("host %.0f ms in %d calls: device KV %.0f, waits for the device %.0f, queuing the rest %.0f" %
      (t["run"], g["calls"], t["kv"], t["sync"], t["run"] - t["kv"] - t["sync"]))' "$1" 2>/dev/null
}

# a model of a named shape made here (MKMODEL_FLAGS: extra flags, e.g. a tiny variant for a dry run)
model() { # SHAPE TYPE -> prints the path
  local f="$MODELS/$1-$2${MKMODEL_FLAGS:+-small}.gguf"
  if [ ! -f "$f" ]; then
    # shellcheck disable=SC2086
    timeout "${MK_S:-240}" $KVT mkmodel --shape "$1" --type "$2" ${MKMODEL_FLAGS:-} -t "$T" -q -o "$f.tmp" >&2 && mv "$f.tmp" "$f" ||
      { echo "mkmodel $1 $2 failed" >&2; rm -f "$f.tmp"; return 1; }
  fi
  echo "$f"
}
# this machine's profile (PROFILE: a given file instead, e.g. for a dry run)
profile() {
  if [ -n "${PROFILE:-}" ]; then cp "$PROFILE" "$OUT/profile.json"; return; fi
  [ -s "$OUT/profile.json" ] || timeout 120 $KVT profile --quick -t "$T" -o "$OUT/profile.json" >"$OUT/profile.log" 2>&1
}
# about N tokens of random text for MODEL (sized by tokenizing a first draft: the synthetic vocabulary's made-up
# pieces merge a few bytes each)
mktext() { awk -v n="$1" -v s="${2:-1}" 'BEGIN { srand(s); for (i = 0; i < n; i++) printf "%c", (rand() < 0.2 ? 32 : 97 + int(rand() * 26)) }'; }
prompt_of() { # MODEL NTOK FILE
  mktext $((3 * $2)) >"$3"
  local ntok; ntok=$($KVT tokenize -m "$1" -f "$3" 2>/dev/null | wc -w)
  [ "${ntok:-0}" -gt 0 ] && mktext $((3 * $2 * $2 / ntok)) >"$3"
  return 0
}

# --- SUITES: every kernel against the CPU reference; the device layers and the device KV's tiers
suites() {
  timeout "${SUITES_S:-300}" build/kvtier-tests cuda >"$OUT/cuda.txt" 2>&1 || rc=$?
  grep -E "^(ok|FAIL|skip) |^# cuda device" "$OUT/cuda.txt"
  KVT_CUDA_MMV=f32 timeout "${LAYERS_S:-150}" build/kvtier-tests cuda_layers >"$OUT/cuda_layers.txt" 2>&1 || rc=$?
  grep -E "^(ok|FAIL|skip) |^# cuda layers" "$OUT/cuda_layers.txt" | cut -c1-200
  # the device layers with mul_mat_vec over q8_1 activations (KVT_CUDA_MMV=q8_1; LAYERS_Q8=0 leaves it out): the same
  # limits against the CPU pass (nmse 1e-3 per row, greedy ids equal but at near ties)
  if [ "${LAYERS_Q8:-1}" = 1 ]; then
    KVT_CUDA_MMV=q8_1 timeout "${LAYERS_S:-150}" build/kvtier-tests cuda_layers >"$OUT/cuda_layers_q8.txt" 2>&1 || rc=$?
    echo "cuda_layers with KVT_CUDA_MMV=q8_1:"; grep -E "^(FAIL|skip) |passed" "$OUT/cuda_layers_q8.txt" | cut -c1-200
  fi
  echo
  awk '
    function num(x) { return (x == "inf" || x == "nan" || x == "-nan") ? 1e30 : x + 0 }
    # "# cuda-result KERNEL SHAPE: N of M outputs differ from the per-head kernel'"'"'s" (a bit-for-bit check: limit 0)
    /^# cuda-result / && $6 == "of" { bits[++nbits] = sprintf("%-20s %-16s %-22s %11s %8s %s", $3, $4, $5 " of " $7 " differ", $5, "0", $5 == 0 ? "ok" : "FAIL"); next }
    /^# cuda-result / {                     # one row per kernel and type: the worst nmse over its token counts
      k = $3 " " $4
      if (!(k in worst)) { order[++n] = k; worst[k] = -1 }
      if (num($7) > worst[k]) { worst[k] = num($7); shown[k] = $7 }
      if (index("," toks[k] ",", "," $5 ",") == 0) toks[k] = toks[k] (toks[k] == "" ? "" : ",") $5
    }
    /^# cuda-bw / { bw[++nb] = $0 }
    /^# cuda-copy / { cp[++nc] = $0 }
    END {
      printf "%-20s %-16s %-22s %11s %8s\n", "kernel", "type/shape", "tokens", "worst nmse", "limit"
      for (i = 1; i <= n; i++) {
        split(order[i], f, " ")
        lim = (f[1] ~ /^(mul_mat|attn)/) ? 5e-4 : 1e-6
        printf "%-20s %-16s %-22s %11s %8.0e %s\n", f[1], f[2], toks[order[i]], shown[order[i]], lim, worst[order[i]] <= lim ? "ok" : "FAIL"
      }
      for (i = 1; i <= nbits; i++) print bits[i]
      # "# cuda-bw TYPE GBPS DEVICE_GBPS PATH SHAPE": PATH f32 or q8_1 (the activations of mul_mat_vec), SHAPE rows x cols
      if (nb) printf "\n%-20s %-10s %-6s %10s %14s %8s\n", "mul_mat_vec, 1 token", "type", "acts", "GB/s", "device GB/s", "share"
      for (i = 1; i <= nb; i++) {
        split(bw[i], f, " ")
        printf "%-20s %-10s %-6s %10.1f %14.1f %7.0f%%\n", "  " (f[7] == "" ? "4096x4096" : f[7]), f[3], (f[6] == "" ? "f32" : f[6]), f[4], f[5], (f[5] > 0 ? 100 * f[4] / f[5] : 0)
      }
      # "# cuda-copy DIR SIZE batched X dma-per-block Y dma-one Z GB/s"
      if (nc) printf "\n%-20s %-6s %12s %16s %12s %8s\n", "copy_batch 64 MiB", "block", "batched GB/s", "DMA/block GB/s", "one DMA GB/s", "share"
      for (i = 1; i <= nc; i++) {
        split(cp[i], f, " ")
        printf "%-20s %-6s %12.1f %16.1f %12.1f %7.0f%%\n", "  " f[3], f[4], f[6], f[8], f[10], (f[10] > 0 ? 100 * f[6] / f[10] : 0)
      }
    }' "$OUT/cuda.txt"
  echo
  tail -1 "$OUT/cuda.txt"
  local s
  local c
  while read -r c; do # copy_batch against one DMA of the same 64 MiB (the KV streamed from pinned host: goal 80%)
    # shellcheck disable=SC2086
    set -- $c # # cuda-copy DIR SIZE batched X dma-per-block Y dma-one Z GB/s
    row suites "copy_batch $3 blocks of $4 GB/s (DMA per block $8)" "$6" ">= 80% of one DMA ${10}" \
      "$(calc '%s' "${10} > 0 && $6 >= 0.8 * ${10} ? sprintf(\"ok (%.0f%%)\", 100 * $6 / ${10}) : sprintf(\"NOT MET (%.0f%%)\", ${10} > 0 ? 100 * $6 / ${10} : 0)")"
  done < <(grep "^# cuda-copy " "$OUT/cuda.txt")
  for s in cuda cuda_layers $([ "${LAYERS_Q8:-1}" = 1 ] && echo cuda_layers_q8); do
    row suites "$s: cases ok / fail / skip" "$(grep -c '^ok ' "$OUT/$s.txt") / $(grep -c '^FAIL ' "$OUT/$s.txt") / $(grep -c '^skip ' "$OUT/$s.txt")" \
      "fail 0 (skips named above)" "$(grep -q '^ok ' "$OUT/$s.txt" && ! grep -qE '^FAIL ' "$OUT/$s.txt" && echo ok || echo FAIL)"
  done
  # on a GPU machine a skipped kernel case means the check did not run (no library, no device): a failure. cuda_layers
  # may skip the emulation's planted graph failure and a model this machine lacks (Gemma 3): they say so
  if grep -q "^skip " "$OUT/cuda.txt" || ! grep -q "^ok " "$OUT/cuda.txt"; then
    echo "gpu_check: kernel cases were skipped or none passed: the GPU checks did not run"; rc=1
  elif grep -q "^FAIL " "$OUT/cuda.txt" "$OUT/cuda_layers.txt"; then
    echo "gpu_check: failures in the suites (above)"; rc=1
  fi
}
[ "${SUITES:-1}" = 1 ] && left suites && suites

# prefill_variant MODEL PP ENV=VALUE NAME LABEL BASE: `bench -p RATES_P -n 0` with ENV=VALUE into rates_NAME.json, its
# tok/s beside the goal and the default kernel's PP (BASE names that kernel)
prefill_variant() {
  local m=$1 pp=$2 env=$3 name=$4 label=$5 base=$6 v
  env "$env" timeout "${RATES_S:-150}" $KVT bench -m "$m" -ngl 999 -p "${RATES_P:-512}" -n 0 -r "${RATES_R:-3}" -t "$T" -o json \
    >"$OUT/rates_$name.json" 2>"$OUT/rates_$name.err" || { echo "rates: $env failed: $(tail -1 "$OUT/rates_$name.err")"; row rates "prefill, $label" failed - FAIL; rc=1; }
  v=$(tr -d '\n' <"$OUT/rates_$name.json" | grep -o '"n_gen": *0,[^}]*"avg_ts": *[0-9.e+-]*' | head -1 | sed 's/.*: *//')
  row rates "prefill ${RATES_P:-512} tok/s, $label ($env)" "${v:-?}" ">= 5000; $base ${pp:-?}" \
    "$(calc '%s' "${v:-0} >= 5000 ? sprintf(\"ok (%.2fx $base)\", ${v:-0} / (${pp:-0} > 0 ? ${pp:-0} : 1)) : sprintf(\"NOT MET (%.2fx $base)\", ${v:-0} / (${pp:-0} > 0 ? ${pp:-0} : 1))")"
}

# --- RATES: decode and prefill of a llama3-8b Q4_K_M, all on the device
rates() {
  local m; m=$(model llama3-8b q4_k_m) || { row rates mkmodel failed - FAIL; rc=1; return; }
  profile
  local dev; dev=$(jnum "$OUT/profile.json" gpu_mem_gbps)
  # the f32 activations' path (KVT_CUDA_MMV=f32) here; the q8_1 path (the default since 2026-11-30) below, RATES_Q8
  KVT_CUDA_MMV=f32 timeout "${RATES_S:-150}" $KVT bench -m "$m" -ngl 999 -p "${RATES_P:-512}" -n "${RATES_N:-128}" -r "${RATES_R:-3}" -t "$T" -o json \
    >"$OUT/rates.json" 2>"$OUT/rates.err" || { echo "rates: failed: $(tail -1 "$OUT/rates.err")"; row rates bench failed - FAIL; rc=1; return; }
  # bench -o json: one object per test; the pp one first, then tg
  local pp tg gb
  pp=$(tr -d '\n' <"$OUT/rates.json" | grep -o '"n_gen": *0,[^}]*"avg_ts": *[0-9.e+-]*' | head -1 | sed 's/.*: *//')
  tg=$(tr -d '\n' <"$OUT/rates.json" | grep -o '"n_prompt": *0,[^}]*"avg_ts": *[0-9.e+-]*' | head -1 | sed 's/.*: *//')
  gb=$(tr -d '\n' <"$OUT/rates.json" | grep -o '"n_prompt": *0,[^}]*"gbps": *[0-9.e+-]*' | head -1 | sed 's/.*: *//')
  row rates "prefill ${RATES_P:-512} tok/s (llama3-8b Q4_K_M)" "${pp:-?}" ">= 5000" "$(calc '%s' "${pp:-0} >= 5000 ? \"ok\" : \"NOT MET\"")"
  row rates "decode tok/s (tg${RATES_N:-128}), f32 activations (KVT_CUDA_MMV=f32)" "${tg:-?}" "-" "-"
  row rates "decode GB/s of weights, f32 activations" "${gb:-?}" ">= 60% of ${dev:-?} GB/s" \
    "$(calc '%s' "(${dev:-0} > 0 && ${gb:-0} >= 0.6 * ${dev:-0}) ? sprintf(\"ok (%.0f%%)\", 100 * ${gb:-0} / ${dev:-1}) : sprintf(\"NOT MET (%.0f%%)\", ${dev:-0} > 0 ? 100 * ${gb:-0} / ${dev:-1} : 0)")"
  # mul_mat_vec over q8_1 activations (KVT_CUDA_MMV=q8_1, the default since 2026-11-30): decode rate and
  # GB/s beside the f32 path's and the device's bandwidth (RATES_Q8=0 leaves it out)
  local tgq="" gbq=""
  if [ "${RATES_Q8:-1}" = 1 ]; then
    KVT_CUDA_MMV=q8_1 timeout "${RATES_S:-150}" $KVT bench -m "$m" -ngl 999 -p 0 -n "${RATES_N:-128}" -r "${RATES_R:-3}" -t "$T" -o json \
      >"$OUT/rates_q8.json" 2>"$OUT/rates_q8.err" || { echo "rates: KVT_CUDA_MMV=q8_1 failed: $(tail -1 "$OUT/rates_q8.err")"; row rates "decode, q8_1 activations" failed - FAIL; rc=1; }
    tgq=$(tr -d '\n' <"$OUT/rates_q8.json" | grep -o '"n_prompt": *0,[^}]*"avg_ts": *[0-9.e+-]*' | head -1 | sed 's/.*: *//')
    gbq=$(tr -d '\n' <"$OUT/rates_q8.json" | grep -o '"n_prompt": *0,[^}]*"gbps": *[0-9.e+-]*' | head -1 | sed 's/.*: *//')
    row rates "decode tok/s, q8_1 activations (KVT_CUDA_MMV=q8_1)" "${tgq:-?}" "f32 path ${tg:-?}" \
      "$(calc '%s' "${tgq:-0} > ${tg:-0} ? sprintf(\"faster (%.2fx)\", ${tgq:-0} / (${tg:-0} > 0 ? ${tg:-0} : 1)) : sprintf(\"not faster (%.2fx)\", ${tgq:-0} / (${tg:-0} > 0 ? ${tg:-0} : 1))")"
    row rates "decode GB/s of weights, q8_1 activations" "${gbq:-?}" ">= 60% of ${dev:-?} GB/s" \
      "$(calc '%s' "(${dev:-0} > 0 && ${gbq:-0} >= 0.6 * ${dev:-0}) ? sprintf(\"ok (%.0f%%)\", 100 * ${gbq:-0} / ${dev:-1}) : sprintf(\"NOT MET (%.0f%%)\", ${dev:-0} > 0 ? 100 * ${gbq:-0} / ${dev:-1} : 0)")"
  fi
  # decode with other shapes of the q8_1 matvec of q4_K / q6_K: ROWS:ILP pairs, the weight rows per warp
  # (KVT_CUDA_MMVQ_ROWS, default 2) and the items a lane has in flight (KVT_CUDA_MMVQ_ILP, default 1); the same bits;
  # tok/s beside the default's (RATES_MMVQ="" leaves it out)
  local rr ri
  for rr in ${RATES_MMVQ-1:1 4:1 2:2}; do
    [ "${RATES_Q8:-1}" = 1 ] || break
    ri=${rr#*:}; rr=${rr%%:*}
    KVT_CUDA_MMV=q8_1 KVT_CUDA_MMVQ_ROWS=$rr KVT_CUDA_MMVQ_ILP=$ri timeout "${RATES_S:-150}" $KVT bench -m "$m" -ngl 999 -p 0 \
      -n "${RATES_N:-128}" -r "${RATES_R:-3}" -t "$T" -o json >"$OUT/rates_r${rr}i$ri.json" 2>"$OUT/rates_r${rr}i$ri.err" ||
      { echo "rates: KVT_CUDA_MMVQ_ROWS=$rr KVT_CUDA_MMVQ_ILP=$ri failed: $(tail -1 "$OUT/rates_r${rr}i$ri.err")"; continue; }
    local tgr; tgr=$(tr -d '\n' <"$OUT/rates_r${rr}i$ri.json" | grep -o '"n_prompt": *0,[^}]*"avg_ts": *[0-9.e+-]*' | head -1 | sed 's/.*: *//')
    row rates "decode tok/s, q8_1, $rr rows a warp, $ri items a lane (KVT_CUDA_MMVQ_ROWS/_ILP)" "${tgr:-?}" "2 rows, 1 item ${tgq:-?}" \
      "$(calc '%.2f' "${tgr:-0} / (${tgq:-0} > 0 ? ${tgq:-0} : 1)")x"
  done
  # prefill with another attention kernel, tok/s beside the default's (pp) and the goal: the GQA one
  # (KVT_CUDA_ATTN_DECODE=gqa: one block per KV head's query heads, K/V read once for them, bit for bit the per-head
  # kernel; RATES_GQA=0 leaves it out) and the tiled one (KVT_CUDA_ATTN=tiled, the default stays chunked until this is
  # measured; RATES_TILED=0 leaves it out)
  [ "${RATES_GQA:-1}" = 1 ] && prefill_variant "$m" "$pp" KVT_CUDA_ATTN_DECODE=gqa gqa "GQA attention" "per head"
  [ "${RATES_TILED:-1}" = 1 ] && prefill_variant "$m" "$pp" KVT_CUDA_ATTN=tiled tiled "tiled attention" chunked
  # decode steps as CUDA graphs (--cuda-graphs, off by default until this passes): rate beside the eager one, same text
  [ "${RATES_GRAPHS:-1}" = 1 ] || return
  KVT_CUDA_MMV=f32 timeout "${RATES_S:-150}" $KVT bench -m "$m" -ngl 999 -p 0 -n "${RATES_N:-128}" -r "${RATES_R:-3}" -t "$T" -o json --cuda-graphs \
    >"$OUT/rates_graphs.json" 2>"$OUT/rates_graphs.err" || { echo "rates: --cuda-graphs failed: $(tail -1 "$OUT/rates_graphs.err")"; row rates "decode with --cuda-graphs" failed - FAIL; rc=1; return; }
  local tgg a b
  tgg=$(tr -d '\n' <"$OUT/rates_graphs.json" | grep -o '"n_prompt": *0,[^}]*"avg_ts": *[0-9.e+-]*' | head -1 | sed 's/.*: *//')
  row rates "decode tok/s with --cuda-graphs" "${tgg:-?}" "above eager ${tg:-?}" \
    "$(calc '%s' "${tgg:-0} > ${tg:-0} ? sprintf(\"ok (%.2fx)\", ${tgg:-0} / (${tg:-0} > 0 ? ${tg:-0} : 1)) : sprintf(\"no gain (%.2fx)\", ${tgg:-0} / (${tg:-0} > 0 ? ${tg:-0} : 1))")"
  if [ "${RATES_Q8:-1}" = 1 ]; then # both: graphs and q8_1 activations
    KVT_CUDA_MMV=q8_1 timeout "${RATES_S:-150}" $KVT bench -m "$m" -ngl 999 -p 0 -n "${RATES_N:-128}" -r "${RATES_R:-3}" -t "$T" -o json \
      --cuda-graphs >"$OUT/rates_q8_graphs.json" 2>"$OUT/rates_q8_graphs.err" || echo "rates: q8_1 with --cuda-graphs failed: $(tail -1 "$OUT/rates_q8_graphs.err")"
    local tgqg gbqg
    tgqg=$(tr -d '\n' <"$OUT/rates_q8_graphs.json" | grep -o '"n_prompt": *0,[^}]*"avg_ts": *[0-9.e+-]*' | head -1 | sed 's/.*: *//')
    gbqg=$(tr -d '\n' <"$OUT/rates_q8_graphs.json" | grep -o '"n_prompt": *0,[^}]*"gbps": *[0-9.e+-]*' | head -1 | sed 's/.*: *//')
    row rates "decode tok/s, q8_1 activations with --cuda-graphs" "${tgqg:-?}" "q8_1 eager ${tgq:-?}" "${gbqg:-?} GB/s of ${dev:-?}"
  fi
  a=$(timeout 120 $KVT generate -m "$m" -ngl 999 -p "The history of" -n 32 --temp 0 -t "$T" 2>/dev/null)
  b=$(timeout 120 $KVT generate -m "$m" -ngl 999 -p "The history of" -n 32 --temp 0 -t "$T" --cuda-graphs --json 2>/dev/null)
  local steps; steps=$(printf "%s" "$b" | grep -o '"graph_steps": *[0-9]*' | sed 's/.*: *//')
  b=$(timeout 120 $KVT generate -m "$m" -ngl 999 -p "The history of" -n 32 --temp 0 -t "$T" --cuda-graphs 2>/dev/null)
  row rates "--cuda-graphs: greedy text of 32 tokens, graph steps" "$([ -n "$a" ] && [ "$a" = "$b" ] && echo same || echo DIFFERENT), ${steps:-?}" \
    "same, > 0" "$([ -n "$a" ] && [ "$a" = "$b" ] && [ "${steps:-0}" -gt 0 ] && echo ok || echo FAIL)"
}
[ "${RATES:-1}" = 1 ] && left rates && rates

# --- NCU: the kernels' shares of a prefill and of decode steps (ncu replays each kernel: the times are the kernels'
# own, without launch gaps; the wall time of the same run is RATES')
ncu_shares() { # CSV -> the top kernels by total duration, one line each
  python3 - "$1" <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Average" in r), None)
if hdr is None: print("  (no per-kernel summary in the ncu output)"); sys.exit(0)
h = rows[hdr]; k, n, a, u = h.index("Kernel Name"), h.index("Invocations"), h.index("Average"), h.index("Metric Unit")
tot = collections.Counter(); cnt = collections.Counter()
for r in rows[hdr + 1:]:
    if len(r) <= max(k, n, a, u): continue
    try: avg = float(r[a].replace(",", "")); inv = int(r[n].replace(",", ""))
    except ValueError: continue
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(r[u], 1e-6)
    name = r[k].replace("(anonymous namespace)::", "")
    name = (name[5:] if name.startswith("void ") else name).split("(")[0][:48]
    tot[name] += avg * inv * scale; cnt[name] += inv
s = sum(tot.values()) or 1
print("  %-48s %8s %10s %6s" % ("kernel", "calls", "ms", "share"))
for name, ms in tot.most_common(14): print("  %-48s %8d %10.3f %5.1f%%" % (name, cnt[name], ms, 100 * ms / s))
print("  %-48s %8d %10.3f" % ("all kernels", sum(cnt.values()), s))
PY
}
ncu_part() {
  command -v ncu >/dev/null 2>&1 || { echo "ncu: not installed here"; return; }
  local m; m=$(model llama3-8b q4_k_m) || return
  local pass
  # bench runs each test twice (a warm-up, then -r 1): the prefill pass 2 x 512 tokens, the decode pass 2 x 2 steps
  # (~850 kernels a step: 2026-12-04 measured ~10 ms of ncu per kernel, so few steps)
  for pass in "prefill:-p ${RATES_P:-512} -n 0:2" "decode:-p 0 -n 2:4"; do
    local name=${pass%%:*} rest=${pass#*:}
    local args=${rest%%:*} runs=${rest##*:}
    # (at most NCU_LAUNCHES kernels: ncu stops the program for each one)
    # shellcheck disable=SC2086
    timeout "${NCU_S:-150}" ncu --clock-control none --launch-count "${NCU_LAUNCHES:-4000}" --print-summary per-kernel --csv --metrics gpu__time_duration.sum \
      $KVT bench -m "$m" -ngl 999 $args -r 1 -t "$T" >"$OUT/ncu_$name.csv" 2>"$OUT/ncu_$name.err" ||
      { echo "ncu $name: failed: $(tail -2 "$OUT/ncu_$name.err")"; continue; }
    echo "ncu, llama3-8b Q4_K_M $name ($args, warm-up + 1 run): kernel time by kernel"
    ncu_shares "$OUT/ncu_$name.csv" | tee "$OUT/ncu_$name.txt"
    # the kernels' own time per pass (prefill) or step (decode), beside the wall time RATES measured: the difference is
    # launch gaps and host work
    local all; all=$(grep "all kernels" "$OUT/ncu_$name.txt" | awk '{ print $NF }')
    row ncu "$name: kernel ms per $([ "$name" = decode ] && echo step || echo pass) (ncu, $runs $([ "$name" = decode ] && echo steps || echo passes))" \
      "$(calc '%.3f' "${all:-0} / $runs")" "-" "wall: see rates"
  done
}
[ "${NCU:-1}" = 1 ] && left ncu && ncu_part

# --- LBS (lbs.txt): 32 beams, step 32, the beams' KV larger than the VRAM budget; layerwise against balanced
lbs() {
  local m; m=$(model llama3-8b q4_k_m) || { row lbs mkmodel failed - FAIL; rc=1; return; }
  prompt_of "$m" "${LBS_PROMPT:-512}" "$OUT/lbs_prompt.txt"
  local s ms=() ids=() kvb=()
  for s in layerwise balanced; do
    timeout "${LBS_S:-200}" $KVT beam -m "$m" -ngl 999 -f "$OUT/lbs_prompt.txt" --beams "${LBS_BEAMS:-32}" --step 32 -n "${LBS_N:-64}" \
      --ignore-eos --schedule "$s" --kv-vram "${LBS_VRAM:-512M}" --kv-block "${LBS_BLOCK:-32}" --kv-evict lookahead -t "$T" --json \
      >"$OUT/lbs_$s.json" 2>"$OUT/lbs_$s.err" || { echo "lbs $s: failed: $(tail -1 "$OUT/lbs_$s.err")"; row lbs "$s" failed - FAIL; rc=1; return; }
    ms+=("$(jnum_in "$OUT/lbs_$s.json" '"time_ms"' total)")
    ids+=("$(tr -d '\n' <"$OUT/lbs_$s.json" | grep -o '"ids":\[[0-9,]*\]' | tr '\n' ' ')")
    kvb+=("$(jnum_in "$OUT/lbs_$s.json" '"gpu"' host_to_device_bytes)")
    echo "lbs $s: $(jnum_in "$OUT/lbs_$s.json" '"time_ms"' total) ms, groups per step $(tr -d '\n' <"$OUT/lbs_$s.json" | grep -o '"groups_per_step":\[[0-9,]*\]')," \
         "KV loaded $(jnum_in "$OUT/lbs_$s.json" '"gpu"' host_to_device_bytes) B, zero-copy read $(jnum_in "$OUT/lbs_$s.json" '"gpu"' zero_copy_read_bytes) B," \
         "forks copied $(jnum "$OUT/lbs_$s.json" fork_copied_bytes) B; $(gtimes "$OUT/lbs_$s.json")"
  done
  # the beams' KV must exceed the budget: the device KV's slots at the end (VRAM + pinned host) against it
  local v h; v=$(jnum_in "$OUT/lbs_layerwise.json" '"gpu"' vram_bytes); h=$(jnum_in "$OUT/lbs_layerwise.json" '"gpu"' pinned_bytes)
  row lbs "device KV allocated (VRAM + pinned, chunks of 8 MiB)" "$(calc '%.0f' "${v:-0} + ${h:-0}") B" "> ${LBS_VRAM:-512M}" "-"
  row lbs "layerwise ms (${LBS_BEAMS:-32} beams, step 32, -n ${LBS_N:-64}, --kv-vram ${LBS_VRAM:-512M})" "${ms[0]}" "-" "KV H2D ${kvb[0]} B"
  row lbs "balanced ms" "${ms[1]}" "<= $(calc '%.0f' "${ms[0]:-0} / 3") (1/3 of layerwise)" \
    "$(calc '%s' "${ms[1]:-1e30} <= ${ms[0]:-0} / 3 ? sprintf(\"ok (%.2fx)\", ${ms[0]:-0} / ${ms[1]:-1}) : sprintf(\"NOT MET (%.2fx)\", ${ms[0]:-0} / (${ms[1]:-0} > 0 ? ${ms[1]:-1} : 1))"); KV H2D ${kvb[1]} B"
  row lbs "beams of both schedules" "$([ -n "${ids[0]}" ] && [ "${ids[0]}" = "${ids[1]}" ] && echo equal || echo DIFFER)" "equal" \
    "$([ -n "${ids[0]}" ] && [ "${ids[0]}" = "${ids[1]}" ] && echo ok || echo FAIL)"
}
[ "${LBS:-1}" = 1 ] && left lbs && lbs

# --- HELM (helm.txt): VRAM capped at 8 GB, Qwen3-8B shape, the planned CPU/GPU split run as planned
helm() {
  local m; m=$(model qwen3-8b "${HELM_TYPE:-f16}") || { row helm mkmodel failed - FAIL; rc=1; return; }
  profile
  local np=${HELM_PROMPT:-128} ng=${HELM_GEN:-32}
  # the per-unit overheads of this CPU (helm 6.4.4), calibrated on a small model first unless the profile has them
  # (kvtier profile writes 0: not calibrated)
  local cal; cal=$(jnum "$OUT/profile.json" cpu_block_overhead_ms)
  if [ "${HELM_CALIBRATE:-1}" = 1 ] && { [ -z "$cal" ] || [ "$cal" = 0 ]; }; then
    local sm; sm=$(model smollm2-135m q8_0) &&
      timeout 90 $KVT plan --validate --calibrate -t "$T" -m "$sm" --profile "$OUT/profile.json" --reps 3 >"$OUT/helm_calibrate.txt" 2>&1
  fi
  timeout 60 $KVT plan -m "$m" --profile "$OUT/profile.json" --vram "${HELM_VRAM:-8G}" --ctx $((np + ng)) --prompt "$np" \
    -o "$OUT/helm_plan.json" >"$OUT/helm_plan.txt" 2>&1 || { echo "helm: plan failed: $(tail -2 "$OUT/helm_plan.txt")"; row helm plan failed - FAIL; rc=1; return; }
  grep -E "^(split|decode|predicted|KV tiers)" "$OUT/helm_plan.txt"
  local pred cpu gpu
  pred=$(jnum "$OUT/helm_plan.json" predicted_ms_per_token)
  cpu=$(jnum "$OUT/helm_plan.json" cpu_units); gpu=$(jnum "$OUT/helm_plan.json" gpu_units)
  prompt_of "$m" "$np" "$OUT/helm_prompt.txt"
  timeout "${HELM_S:-200}" $KVT generate -m "$m" --plan "$OUT/helm_plan.json" -t "$T" -c $((np * 2 + ng + 64)) -f "$OUT/helm_prompt.txt" \
    -n "$ng" --temp 0 --ignore-eos --no-progress --json >"$OUT/helm_run.json" 2>"$OUT/helm_run.err" ||
    { echo "helm: run failed: $(tail -1 "$OUT/helm_run.err")"; row helm run failed - FAIL; rc=1; return; }
  local meas; meas=$(jnum_in "$OUT/helm_run.json" '"decode"' step_ms_median)
  echo "helm: split cpu($cpu) -> cuda($gpu), predicted ${pred:-?} ms/token, measured ${meas:-?} ms/token"
  row helm "Qwen3-8B ${HELM_TYPE:-f16} --vram ${HELM_VRAM:-8G}: split cpu($cpu)->cuda($gpu) ms/token" "${meas:-?}" \
    "plan ${pred:-?} +-15%" "$(calc '%s' "(${pred:-0} > 0 && ${meas:-0} > 0) ? sprintf(\"%s (%+.1f%%)\", (${meas:-0} - ${pred:-0}) / ${meas:-1} * 100 < 15 && (${meas:-0} - ${pred:-0}) / ${meas:-1} * 100 > -15 ? \"ok\" : \"NOT MET\", (${pred:-0} - ${meas:-0}) / ${meas:-1} * 100) : \"-\"")"
  # the profile's rates of kvtier's own device path (kvtier profile: the table's matvec and batched copies)
  local q4=""; grep -q '"gpu_gemv_gbps"' "$OUT/profile.json" && q4=$(jnum_in "$OUT/profile.json" '"gpu_gemv_gbps"' q4_K)
  row helm "profile: kvtier matvec Q4_K GB/s (4096 x 4096, 1 row)" "${q4:-?}" "device read $(jnum "$OUT/profile.json" gpu_mem_gbps) GB/s" "-"
  row helm "profile: device KV batched copies GB/s (16 KiB blocks)" "$(jnum "$OUT/profile.json" gpu_kv_copy_gbps)" "H2D $(jnum "$OUT/profile.json" h2d_gbps) GB/s" "-"
  # the planner's own check of the same plan on the GPU path: its split run, prefill and decode beside its predictions
  [ "${HELM_VALIDATE:-1}" = 1 ] && left "helm validate" || return
  timeout "${HELM_VALIDATE_S:-120}" $KVT plan --validate --gpu -m "$m" --profile "$OUT/profile.json" --vram "${HELM_VRAM:-8G}" \
    --prompt "${HELM_VALIDATE_PROMPT:-64}" -n "${HELM_VALIDATE_N:-16}" --reps 1 -t "$T" --json >"$OUT/helm_validate.json" 2>"$OUT/helm_validate.err" ||
    { echo "helm: plan --validate --gpu failed: $(tail -1 "$OUT/helm_validate.err")"; row helm "plan --validate --gpu" failed - FAIL; rc=1; return; }
  cat "$OUT/helm_validate.json"
  local e; e=$(jnum "$OUT/helm_validate.json" decode_err_pct)
  row helm "plan --validate --gpu: decode ms/token (-ngl $(jnum "$OUT/helm_validate.json" n_gpu_layers))" \
    "$(jnum "$OUT/helm_validate.json" decode_meas_ms)" "pred $(jnum "$OUT/helm_validate.json" decode_pred_ms) +-15%" \
    "$(grep -q '"emulated":true' "$OUT/helm_validate.json" && echo "emulation" || calc '%s' "(${e:-100} < 15 && ${e:-100} > -15) ? \"ok (${e:-?}%)\" : \"NOT MET (${e:-?}%)\"")"
}
[ "${HELM:-1}" = 1 ] && left helm && helm

# --- HeadInfer (headinfer.txt): llama3-8b shape, KV within 1 GiB of VRAM, the rest in pinned host memory, exact
headinfer() {
  local m; m=${HI_MODEL:-$(model llama3-8b q4_k_m)} || { row headinfer mkmodel failed - FAIL; rc=1; return; }
  local ctx=${HI_CTX:-16384} gen=${HI_GEN:-17}
  profile
  local gbps; gbps=$(jnum "$OUT/profile.json" h2d_gbps)
  prompt_of "$m" $((ctx - 64)) "$OUT/hi_prompt.txt"
  printf "\n%-22s %8s %10s %12s %14s %10s %8s\n" "headinfer llama3-8b" "prompt" "TPOT ms" "KV MB/step" "link ms/step" "TPOT/link" "tokens"
  local kvv flags ids0="" line
  # all KV in VRAM (and, HI_GQA=1, the same with the GQA decode attention kernel, KVT_CUDA_ATTN_DECODE=gqa: the same
  # tokens, its TPOT beside the per-head kernel's); within the budget (blocks of every KV head); within it head-wise (a
  # block per KV head, HeadInfer's granularity; HI_HEAD=0 leaves it out)
  local runs="all"; [ "${HI_GQA:-1}" = 1 ] && runs="$runs all/gqa"
  runs="$runs ${HI_VRAM:-1G}"; [ "${HI_HEAD:-1}" = 1 ] && runs="$runs ${HI_VRAM:-1G}/head"
  for kvv in $runs; do
    [ "$kvv" = all ] || left "headinfer KV $kvv" || continue
    local base=${kvv%%/*} sfx="" envp=""; [ "$base" = "$kvv" ] || sfx=${kvv#*/}
    flags=""; [ "$base" = all ] || flags="--kv-vram $base --kv-evict lookahead"
    [ "$sfx" = head ] && flags="$flags --kv-granularity head"
    [ "$sfx" = gqa ] && envp="KVT_CUDA_ATTN_DECODE=gqa"
    local f=${sfx:+_$sfx}
    # shellcheck disable=SC2086
    env $envp timeout "${HI_S:-200}" $KVT generate -m "$m" -ngl 999 -t "$T" -c $((ctx + ctx / 16 + gen + 64)) -f "$OUT/hi_prompt.txt" -n "$gen" \
      --temp 0 --ignore-eos --no-progress --json $flags >"$OUT/hi_$base$f.json" 2>"$OUT/hi_$base$f.err" ||
      { echo "headinfer $kvv: failed: $(tail -1 "$OUT/hi_$base$f.err")"; row headinfer "KV $kvv" failed - FAIL; rc=1; continue; }
    local j="$OUT/hi_$base$f.json" ids
    ids=$(grep -o '"ids":\[[0-9,]*\]' "$j" | head -1)
    [ -z "$ids0" ] && ids0=$ids
    line=$(awk -v kvv="$kvv" -v gbps="${gbps:-0}" -v same="$([ "$ids" = "$ids0" ] && echo same || echo DIFFER)" '
      function num(key,   m) { if (match($0, "\"" key "\":[0-9.e+-]*")) { m = substr($0, RSTART, RLENGTH); sub(/.*:/, "", m); return m + 0 } return 0 }
      { tpot = num("step_ms_median"); np = num("n_prompt") }
      { s = $0; sub(/.*"gpu_kv_bytes_per_step":/, "", s); $0 = s; step = num("host_to_device") + num("device_to_host") + num("zero_copy_read") }
      END { link = (gbps > 0) ? step / (gbps * 1e6) : 0; ratio = (link > 0) ? sprintf("%.2f", tpot / link) : "-"
            printf "%-22s %8d %10.2f %12.1f %14.2f %10s %8s\n", "  KV " kvv, np, tpot, step / 1e6, link, ratio, same }' "$j")
    echo "$line"
    echo "      $(gtimes "$j")"
    # shellcheck disable=SC2086
    set -- $line # KV, budget, prompt, TPOT, MB/step, link ms, TPOT/link, tokens
    row headinfer "TPOT ms, ${ctx}-token prompt, KV $kvv" "$4" "$([ "$base" = all ] && echo - || echo "1.2 x link $6 ms")" \
      "$([ "$base" = all ] && echo - || calc '%s' "(\"$7\" != \"-\" && \"$7\" + 0 <= 1.2) ? \"ok ($7x)\" : \"NOT MET ($7x)\"") tokens $8"
  done
  echo "  (link ms/step: the KV bytes that crossed PCIe per decode step at the probe's ${gbps:-?} GB/s pinned H2D)"
}
[ "${HEADINFER:-1}" = 1 ] && left headinfer && headinfer

# --- KVTIERS: the device KV's tiers on the device: VRAM budget with batched copies or one DMA per block, and T2
kvtiers() {
  local m; m=${KT_MODEL:-$(model llama3-8b q4_k_m)} || { row kvtiers mkmodel failed - FAIL; rc=1; return; }
  local ctx=${KT_CTX:-4096} gen=${KT_GEN:-9} blk=${KT_BLOCK:-32} v=${KT_VRAM:-128M}
  prompt_of "$m" $((ctx - 64)) "$OUT/kt_prompt.txt"
  mkdir -p "$OUT/kvdisk"
  printf "\n%-10s %10s %14s %14s %14s %10s %8s %8s %8s\n" "kvtiers" "TPOT ms" "H2D MB" "disk->host MB" "transfers" "batches" "syncs" "stalls" "tokens"
  local r ids0="" tp=() name
  for r in all vram dma disk disksync; do
    left "kvtiers $r" || continue
    local flags="--kv-block $blk"
    case $r in
      vram) flags="$flags --kv-vram $v --kv-evict lookahead" ;;
      dma) flags="$flags --kv-vram $v --kv-evict lookahead --kv-copy-dma" ;;
      disk) flags="$flags --kv-vram $v --kv-evict lookahead --kv-pinned ${KT_PINNED:-128M} --kv-disk $OUT/kvdisk" ;;
      disksync) flags="$flags --kv-vram $v --kv-evict lookahead --kv-pinned ${KT_PINNED:-128M} --kv-disk $OUT/kvdisk --kv-disk-sync" ;;
    esac
    # shellcheck disable=SC2086
    timeout "${KT_S:-120}" $KVT generate -m "$m" -ngl 999 -t "$T" -c $((ctx + gen + 64)) -f "$OUT/kt_prompt.txt" -n "$gen" \
      --temp 0 --ignore-eos --no-progress --json $flags >"$OUT/kt_$r.json" 2>"$OUT/kt_$r.err" ||
      { echo "kvtiers $r: failed: $(tail -1 "$OUT/kt_$r.err")"; row kvtiers "$r" failed - FAIL; rc=1; continue; }
    local j="$OUT/kt_$r.json" ids tpot
    ids=$(grep -o '"ids":\[[0-9,]*\]' "$j" | head -1); [ -z "$ids0" ] && ids0=$ids
    tpot=$(jnum_in "$j" '"decode"' step_ms_median); tp+=("$tpot")
    printf "%-10s %10s %14s %14s %14s %10s %8s %8s %8s\n" "  $r" "$tpot" \
      "$(calc '%.1f' "$(jnum_in "$j" '"vram_budget_bytes"' host_to_device_bytes) / 1e6")" \
      "$(calc '%.1f' "$(jnum_in "$j" '"vram_budget_bytes"' disk_to_host_bytes) / 1e6")" "$(jnum_in "$j" '"vram_budget_bytes"' transfers)" \
      "$(jnum_in "$j" '"vram_budget_bytes"' batches)" "$(jnum_in "$j" '"vram_budget_bytes"' syncs)" \
      "$(jnum_in "$j" '"vram_budget_bytes"' disk_stalls)" "$([ "$ids" = "$ids0" ] && echo same || echo DIFFER)"
    name="TPOT ms, ${ctx}-token prompt, blocks of $blk, $r"
    row kvtiers "$name" "$tpot" "-" "tokens $([ "$ids" = "$ids0" ] && echo same || { rc=1; echo DIFFER; })"
  done
  [ ${#tp[@]} -ge 3 ] && row kvtiers "batched copies against one DMA per block (TPOT ratio)" "$(calc '%.2f' "${tp[1]} / ${tp[2]}")" \
    "< 1 (faster)" "$(calc '%s' "${tp[1]} < ${tp[2]} ? \"ok\" : \"NOT MET\"")"
  [ ${#tp[@]} -ge 5 ] && row kvtiers "T2 on the disk thread against synchronous disk I/O (TPOT ratio)" "$(calc '%.2f' "${tp[3]} / ${tp[4]}")" \
    "< 1 (faster)" "$(calc '%s' "${tp[3]} < ${tp[4]} ? \"ok\" : \"NOT MET\"")"
}
[ "${KVTIERS:-1}" = 1 ] && left kvtiers && kvtiers

if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1 && left memcheck; then
  KVT_CUDA_NO_BENCH=1 timeout 240 compute-sanitizer --tool memcheck --leak-check no build/kvtier-tests cuda >"$OUT/memcheck.txt" 2>&1
  echo "compute-sanitizer memcheck (exit $?): $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1)"
  row memcheck "cuda suite" "$(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1 | sed 's/.*SUMMARY: //')" "0 errors" "-"
  if left "memcheck of cuda_layers"; then
    timeout 240 compute-sanitizer --tool memcheck --leak-check no build/kvtier-tests cuda_layers >"$OUT/memcheck_layers.txt" 2>&1
    echo "compute-sanitizer memcheck of cuda_layers (exit $?): $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_layers.txt" | tail -1)"
    row memcheck "cuda_layers suite" "$(grep -E 'ERROR SUMMARY' "$OUT/memcheck_layers.txt" | tail -1 | sed 's/.*SUMMARY: //')" "0 errors" "-"
  fi
fi

echo
echo "== gpu_check: $(( $(date +%s) - t0 )) s${KVT_CUDA_LIB:+ (KVT_CUDA_LIB=$KVT_CUDA_LIB: not a GPU, figures meaningless)}"
awk -F'\t' 'BEGIN { printf "%-10s %-62s %-16s %-30s %s\n", "part", "figure", "measured", "limit / goal", "verdict" }
            { printf "%-10s %-62s %-16s %-30s %s\n", $1, substr($2, 1, 62), $3, $4, $5 }' "$SUMMARY"
exit $rc
