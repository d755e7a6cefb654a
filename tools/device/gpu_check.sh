#!/usr/bin/env bash
# gpu_check.sh - issue 15's kernel checks on a lent GPU machine (H100/H200; a copy of the working
# tree, nothing outside reachable, 10 minutes per command). Builds the test binary and
# build/libkvtier-cuda.so for sm_90 only, runs the `cuda` suite (every kernel against the CPU
# reference, outputs poisoned with NaN first), then compute-sanitizer memcheck over the same suite
# when installed, and prints one table: kernel, type, tokens, normalized MSE against its limit, and
# mul_mat_vec's GB/s at one token beside the probe's device read bandwidth.
# Output files go to ${OUT:-/tmp/gpu-check}.
#   usage: tools/device/gpu_check.sh            (MEMCHECK=0 skips the sanitizer run)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/nvidia-smi.txt"
nvcc --version | tail -1
t0=$(date +%s)
make -j"$(nproc)" URING=0 NVCC_ARCH='-gencode arch=compute_90,code=sm_90' build/kvtier-tests build/libkvtier-cuda.so \
  >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
rc=0
timeout 300 build/kvtier-tests cuda >"$OUT/cuda.txt" 2>&1 || rc=$?
grep -E "^(ok|FAIL|skip) |^# cuda device" "$OUT/cuda.txt"
# the device layers of a CPU/GPU split against the CPU forward pass (src/exec/gpu_layers.c)
timeout 120 build/kvtier-tests cuda_layers >"$OUT/cuda_layers.txt" 2>&1 || rc=$?
grep -E "^(ok|FAIL|skip) |^# cuda layers" "$OUT/cuda_layers.txt"
echo
awk '
  function num(x) { return (x == "inf" || x == "nan" || x == "-nan") ? 1e30 : x + 0 }
  /^# cuda-result / {                     # one row per kernel and type: the worst nmse over its token counts
    k = $3 " " $4
    if (!(k in worst)) { order[++n] = k; worst[k] = -1 }
    if (num($7) > worst[k]) { worst[k] = num($7); shown[k] = $7 }
    toks[k] = toks[k] (toks[k] == "" ? "" : ",") $5
  }
  /^# cuda-bw / { bw[++nb] = $0 }
  END {
    printf "%-20s %-16s %-22s %11s %8s\n", "kernel", "type/shape", "tokens", "worst nmse", "limit"
    for (i = 1; i <= n; i++) {
      split(order[i], f, " ")
      lim = (f[1] ~ /^(mul_mat|attn)/) ? 5e-4 : 1e-6
      printf "%-20s %-16s %-22s %11s %8.0e %s\n", f[1], f[2], toks[order[i]], shown[order[i]], lim, worst[order[i]] <= lim ? "ok" : "FAIL"
    }
    if (nb) printf "\n%-20s %-10s %10s %14s %8s\n", "mul_mat_vec 4096^2", "type", "GB/s", "device GB/s", "share"
    for (i = 1; i <= nb; i++) {
      split(bw[i], f, " ")
      printf "%-20s %-10s %10.1f %14.1f %7.0f%%\n", "  1 token", f[3], f[4], f[5], (f[5] > 0 ? 100 * f[4] / f[5] : 0)
    }
  }' "$OUT/cuda.txt"
echo
tail -1 "$OUT/cuda.txt"
# on a GPU machine a skipped case means the check did not run (no library, no device): a failure
if grep -q "^skip " "$OUT/cuda.txt" || ! grep -q "^ok " "$OUT/cuda.txt" || grep -q "^FAIL " "$OUT/cuda_layers.txt"; then
  echo "gpu_check: cases were skipped or none passed: the GPU checks did not run"; rc=1
fi
if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
  KVT_CUDA_NO_BENCH=1 timeout 240 compute-sanitizer --tool memcheck --leak-check no build/kvtier-tests cuda >"$OUT/memcheck.txt" 2>&1
  echo "compute-sanitizer memcheck (exit $?): $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1)"
  timeout 240 compute-sanitizer --tool memcheck --leak-check no build/kvtier-tests cuda_layers >"$OUT/memcheck_layers.txt" 2>&1
  echo "compute-sanitizer memcheck of cuda_layers (exit $?): $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_layers.txt" | tail -1)"
fi
exit $rc
