#!/usr/bin/env bash
# validate_plan.sh - the planner's CPU validation (issue 5) on another machine: builds kvtier, makes
# random-weight models of five sizes (135M to 1.7B) and three weight types with `kvtier mkmodel`,
# measures a profile, calibrates the per-unit overheads (delta, delta_pre) on smollm2-135m q8_0 and
# validates the rest.
#   usage: tools/device/validate_plan.sh [THREADS]     (output under ${OUT:-/tmp/val-out})
set -euo pipefail
OUT=${OUT:-/tmp/val-out}; mkdir -p "$OUT"
T=${1:-8}
M=/tmp/kvt-val-models; mkdir -p "$M"
make -j"$(nproc)" URING=0 build/kvtier >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
for st in smollm2-135m:q8_0 smollm2-135m:f16 smollm2-135m:q4_k_m smollm2-360m:q8_0 smollm2-360m:f16 \
          qwen3-0.6b:q8_0 qwen3-0.6b:f16 tinyllama-1.1b:q8_0 tinyllama-1.1b:q4_k_m tinyllama-1.1b:f16 \
          qwen3-1.7b:q8_0 qwen3-1.7b:f16; do
  s=${st%%:*}; t=${st##*:}
  [ -f "$M/$s-$t.gguf" ] || build/kvtier mkmodel --shape "$s" --type "$t" -o "$M/$s-$t.gguf" -q
done
build/kvtier profile -t "$T" -o "$OUT/profile.json" 2>"$OUT/profile.log"
build/kvtier plan --validate -t "$T" -m "$M/smollm2-135m-q8_0.gguf" --profile "$OUT/profile.json" --calibrate --reps 5 \
  2>&1 | tee "$OUT/validate.txt"
for st in smollm2-135m-f16 smollm2-135m-q4_k_m smollm2-360m-q8_0 smollm2-360m-f16 qwen3-0.6b-q8_0 qwen3-0.6b-f16 \
          tinyllama-1.1b-q8_0 tinyllama-1.1b-q4_k_m tinyllama-1.1b-f16 qwen3-1.7b-q8_0 qwen3-1.7b-f16; do
  echo "== $st" | tee -a "$OUT/validate.txt"
  build/kvtier plan --validate -t "$T" -m "$M/$st.gguf" --profile "$OUT/profile.json" --reps 5 2>&1 | tail -4 | tee -a "$OUT/validate.txt"
done
