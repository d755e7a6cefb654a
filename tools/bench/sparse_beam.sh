#!/usr/bin/env bash
# sparse_beam.sh - beam search under sparse attention with the KV on disk (issue 13; docs/BENCHMARKS.md "sparse beam
# search on disk"): dense beam, asyncspade KEEP with the default reservation of key summaries, and optionally a
# baseline binary's KEEP with the same KV budget, ROUNDS rounds alternating; one line per run (decode time = total -
# prefill, its parts, KV bytes read from disk, summaries reserved / held at the peak, the beams' scores).
#
# env: MODEL (default ~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf), TEXT (prompt file; default the first
#      PROMPT_BYTES bytes of ../shared/papers/helm.txt), PROMPT_BYTES (15000: 3981 tokens), CTX (8192), BEAMS (4),
#      WIDTH (2), STEP (16), N (64), THREADS (2), KV_FAST (KV blocks' fast bytes, 28508160), SETS (the summary sets
#      the new binary reserves: its default for these beams, 3), SET_BYTES (one set's bytes: 65863680 for SmolLM2 at
#      8K), BIN (build/kvtier), OLD (a baseline binary, run with 1 + BEAMS x WIDTH sets; empty: none), ROUNDS (3),
#      OUT (/tmp/kvtier-sparse-beam), KV_DISK (OUT/d).
set -euo pipefail
MODEL=${MODEL:-$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=${OUT:-/tmp/kvtier-sparse-beam}; KV_DISK=${KV_DISK:-$OUT/d}; mkdir -p "$OUT" "$KV_DISK"
if [ -z "${TEXT:-}" ]; then TEXT=$OUT/prompt.txt; head -c "${PROMPT_BYTES:-15000}" ../shared/papers/helm.txt > "$TEXT"; fi
BIN=${BIN:-build/kvtier}; OLD=${OLD:-}; ROUNDS=${ROUNDS:-3}
BEAMS=${BEAMS:-4}; WIDTH=${WIDTH:-2}; KV_FAST=${KV_FAST:-28508160}; SETS=${SETS:-3}; SET_BYTES=${SET_BYTES:-65863680}
COMMON=(-m "$MODEL" -f "$TEXT" -c "${CTX:-8192}" --beams "$BEAMS" --width "$WIDTH" --step "${STEP:-16}" -n "${N:-64}" --json
        -t "${THREADS:-2}" --no-progress --kv-disk "$KV_DISK" --kv-block 16)
SP=(--sparse asyncspade --sparse-preset keep --sparse-budget 0.125)
for r in $(seq 1 "$ROUNDS"); do
    "$BIN" beam "${COMMON[@]}" --kv-fast "$KV_FAST" > "$OUT/dense_$r.json"
    "$BIN" beam "${COMMON[@]}" "${SP[@]}" --kv-fast $((SETS * SET_BYTES + KV_FAST)) > "$OUT/new_$r.json"
    if [ -n "$OLD" ]; then
        "$OLD" beam "${COMMON[@]}" "${SP[@]}" --kv-fast $(((1 + BEAMS * WIDTH) * SET_BYTES + KV_FAST)) > "$OUT/old_$r.json"
    fi
done
OUT=$OUT ROUNDS=$ROUNDS python3 - <<'PY'
import json, os
out, rounds = os.environ['OUT'], int(os.environ['ROUNDS'])
for c in ('dense', 'new', 'old'):
    for r in range(1, rounds + 1):
        f = f'{out}/{c}_{r}.json'
        if not os.path.exists(f): continue
        d = json.load(open(f)); t = d['time_ms']; sp = d.get('sparse') or {}
        print(c, r, 'decode %.1f s (compute %.1f, stall %.1f, select %.2f), prefill %.1f s' % ((t['total'] - t['prefill']) / 1e3,
              t['compute'] / 1e3, t['stall'] / 1e3, t['select'] / 1e3, t['prefill'] / 1e3),
              '| disk->fast %.2f GB' % (d['kv']['moved_bytes'].get('disk_to_fast', 0) / 1e9),
              '| summaries reserved', sp.get('summary_bytes'), 'peak', sp.get('summary_peak_bytes'),
              '| scores', [round(b['score'], 6) for b in d['beams']])
PY
