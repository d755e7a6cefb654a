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
echo
awk '
  /^# cuda-result / {
    lim = ($3 ~ /^(mul_mat|attn)/) ? 5e-4 : 1e-6
    ok = ($7 + 0 <= lim && $7 != "inf" && $7 != "nan") ? "ok" : "FAIL"
    if (!hdr++) printf "%-22s %-18s %7s %11s %8s %s\n", "kernel", "type/shape", "tokens", "nmse", "limit", ""
    printf "%-22s %-18s %7s %11s %8.0e %s\n", $3, $4, $5, $7, lim, ok
  }
  /^# cuda-bw / {
    if (!bw++) printf "\n%-22s %-10s %10s %14s %8s\n", "mul_mat_vec 4096^2 x1", "type", "GB/s", "device GB/s", "share"
    printf "%-22s %-10s %10.1f %14.1f %7.0f%%\n", "", $3, $4, $5, ($5 > 0 ? 100 * $4 / $5 : 0)
  }' "$OUT/cuda.txt"
echo
tail -1 "$OUT/cuda.txt"
if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
  KVT_CUDA_NO_BENCH=1 timeout 240 compute-sanitizer --tool memcheck --leak-check no build/kvtier-tests cuda >"$OUT/memcheck.txt" 2>&1
  echo "compute-sanitizer memcheck (exit $?): $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1)"
fi
exit $rc
