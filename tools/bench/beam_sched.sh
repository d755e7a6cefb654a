#!/bin/sh
# beam_sched.sh - bytes moved and end-to-end time of the four beam schedules (issue 4),
# normalised to layerwise: the shape of the paper's Figures 9 and 10.
#
#   tools/bench/beam_sched.sh [MODEL]        (default: a random smollm2-135m Q8_0 made by mkmodel)
#
# Model >= 100M parameters, F16 KV (the default), prompt of exactly 128 tokens, width 2,
# KV blocks of 16 positions, fast tier = FAST_FRAC of the beams' KV at the end of the run (the
# shared prompt counted once), the rest in a host tier (memcpy transfers). The first step expands
# the prompt into beams x width continuations, so every step runs beams x width sequences.
# Environment: BEAMS ("4 8 16 32 64"), STEPS ("32 64 128"), STEPS_PER_RUN (1: -n = step; the
# acceptance row 32 beams x step 32 always runs 2 steps), FAST_FRAC (0.5), FAST_BYTES (overrides the
# fraction; the fraction assumes smollm2-135m's 23040 KV bytes per token), THREADS (2), LOWER (host:
# the rest of the KV in an 8 GB host tier, memcpy transfers; disk: in a disk tier under DISK_DIR, /tmp,
# O_DIRECT transfers, the CPU-only set-up).
set -eu
KVT=${KVT:-build/kvtier}
MODEL=${1:-/tmp/kvt_bench_smollm2_135m_q8.gguf}
BEAMS=${BEAMS:-"4 8 16 32 64"}
STEPS=${STEPS:-"32 64 128"}
STEPS_PER_RUN=${STEPS_PER_RUN:-1}
FAST_FRAC=${FAST_FRAC:-0.5}
THREADS=${THREADS:-2}
LOWER=${LOWER:-host}
case "$LOWER" in
  host) LOWER_FLAGS="--kv-host 8G" ;;
  disk) LOWER_FLAGS="--kv-disk ${DISK_DIR:-/tmp}" ;;
  *) echo "beam_sched.sh: LOWER must be host or disk" >&2; exit 1 ;;
esac
[ -f "$MODEL" ] || "$KVT" mkmodel --shape smollm2-135m --type q8_0 -o "$MODEL" -q
PROMPT=$(mktemp)
trap 'rm -f "$PROMPT"' EXIT
python3 -c "print(' '.join(['cat'] * 127), end='')" > "$PROMPT" # 128 tokens with BOS (SmolLM2 vocabulary)
echo "| beams | step | -n | fast tier | schedule | groups/step | moved bytes | bytes / layerwise | predicted load+store | time ms | time / layerwise | compute ms | stall ms |"
echo "|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"
for step in $STEPS; do
  for beams in $BEAMS; do
    n=$((step * STEPS_PER_RUN))
    if [ "$beams" = 32 ] && [ "$step" = 32 ] && [ "$n" -lt 64 ]; then n=64; fi
    lw_bytes=0; lw_ms=0
    for sched in layerwise beam prefix balanced; do
      "$KVT" beam -m "$MODEL" -f "$PROMPT" --beams "$beams" --width 2 --step "$step" -n "$n" --ignore-eos \
        --schedule "$sched" --kv-block 16 --kv-fast "${FAST_BYTES:-$(python3 -c "
n_layer, kvtok = 30, 23040  # smollm2-135m: 30 layers x 3 KV heads x 64 x K,V x F16
print(int(((128 + $beams * 2 * $n) * kvtok) * $FAST_FRAC))")}" $LOWER_FLAGS -t "$THREADS" --json |
      python3 -c "
import json,sys
d=json.load(sys.stdin); k=d['kv']; s='$sched'
moved=sum(v for key,v in k['moved_bytes'].items() if key!='fast_to_fast')
pred=d['predicted'][s]['load_bytes']+d['predicted'][s]['store_bytes']
t=d['time_ms']
lw=open('/tmp/kvt_beam_lw').read().split() if s!='layerwise' else [moved,t['total']]
if s=='layerwise': open('/tmp/kvt_beam_lw','w').write('%d %f'%(moved,t['total']))
lb,lt=float(lw[0]),float(lw[1])
print('| %d | %d | %d | %d | %s | %s | %d | %s | %d | %.0f | %.2f | %.0f | %.0f |'%(d['n_beams'],d['step'],d['n_tokens'],
  k['budget_bytes']['fast'],s,'/'.join(map(str,d['groups_per_step'])),moved,
  ('%.3f'%(moved/lb)) if lb>0 else '-',pred,t['total'],t['total']/lt,t['compute'],t['stall']))
"
    done
  done
done
rm -f /tmp/kvt_beam_lw
