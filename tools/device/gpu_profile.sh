#!/usr/bin/env bash
# gpu_profile.sh - run on a machine with a CUDA GPU: builds kvtier and the CUDA probe
# (build/libkvtier-cuda.so), measures the machine's profile (CPU, disk and GPU figures),
# checks the probe against nvidia-smi's view of the device, and plans a few shapes on the
# measured profile. Output files go to ${OUT:-/tmp/gpu-out}.
#   usage: tools/device/gpu_profile.sh [THREADS]
set -euo pipefail
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
T=${1:-$(nproc)}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia-smi.txt"
nvcc --version | tail -1
make -j"$(nproc)" URING=0 all >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
ls -l build/kvtier build/libkvtier-cuda.so
cuobjdump --list-elf build/libkvtier-cuda.so | head -5 || true
# the profile: CPU DRAM/GEMV/GEMM, O_DIRECT disk in /tmp, GPU through the probe
/usr/bin/time -v build/kvtier profile -t "$T" --dir /tmp -o "$OUT/profile.json" 2>"$OUT/profile.time" || { cat "$OUT/profile.time"; exit 1; }
grep -E "Elapsed|Maximum resident" "$OUT/profile.time"
cat "$OUT/profile.json"
for s in qwen3-8b qwen3-32b llama3-8b; do
  build/kvtier plan --shape "$s" --profile "$OUT/profile.json" --ctx 32768 >"$OUT/plan-$s.txt" 2>&1 || true
done
tail -25 "$OUT/plan-qwen3-8b.txt"
