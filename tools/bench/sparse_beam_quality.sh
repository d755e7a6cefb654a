#!/usr/bin/env bash
# sparse_beam_quality.sh - what sparse attention costs a beam search (issue 13; docs/SPARSE.md "Sparse beam search:
# quality"): the same beam search dense and under each sparse mode, every kept beam rated again by the same model with
# dense attention (`beam --rescore-dense`), all in RAM. One line per (text, mode): the best beam's dense score (mean
# token log-probability under exact attention) and its gap to the dense search's best, the kept beams' mean dense score
# and gap, the sparse model's own score of its best beam, the tokens the best beam shares with the dense search's best
# before they part, and how many of the dense search's kept beams the sparse search kept too.
#
# env: MODEL (default ~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf), TEXTS (prompt files, space-separated; default the
#      longest start of ../shared/papers/{helm,headinfer,asyncspade,locality-aware-beam-scheduling,tierkv}.txt, at a line's end, of at most PROMPT_TOKENS
#      tokens), PROMPT_TOKENS (7600), CTX (8192), BUDGET (0.125 of CTX), BEAMS (4), WIDTH (2), STEP (16), N (64), THREADS (2),
#      MODES (dense oracle quest keep acc: keep / acc are asyncspade's presets), BIN (build/kvtier), REUSE (1: keep
#      the results already in OUT, run only the missing ones),
#      OUT (/tmp/kvtier-sparse-beam-quality).
set -euo pipefail
MODEL=${MODEL:-$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=${OUT:-/tmp/kvtier-sparse-beam-quality}; mkdir -p "$OUT"
BIN=${BIN:-build/kvtier}; BUDGET=${BUDGET:-0.125}
MODES=${MODES:-dense oracle quest keep acc}
if [ -z "${TEXTS:-}" ]; then
    TEXTS=""
    for p in helm headinfer asyncspade locality-aware-beam-scheduling tierkv; do
        [ -f "../shared/papers/$p.txt" ] || continue
        if [ -n "${REUSE:-}" ] && [ -s "$OUT/$p.txt" ]; then TEXTS="$TEXTS $OUT/$p.txt"; continue; fi
        # the longest start of whole lines that tokenizes to at most PROMPT_TOKENS tokens (BOS included)
        BIN=$BIN MODEL=$MODEL SRC="../shared/papers/$p.txt" DST="$OUT/$p.txt" MAXT=${PROMPT_TOKENS:-7600} python3 - <<'PY'
import os, subprocess
env = os.environ
lines = open(env['SRC'], 'rb').read().split(b'\n')
def ntok(k):
    open(env['DST'], 'wb').write(b'\n'.join(lines[:k]))
    return len(subprocess.run([env['BIN'], 'tokenize', '-m', env['MODEL'], '-f', env['DST'],
                               '--no-escape', '--no-parse-special'], check=True,
                              capture_output=True).stdout.split())
lo, hi = 1, len(lines)
while lo < hi:
    mid = (lo + hi + 1) // 2
    if ntok(mid) <= int(env['MAXT']): lo = mid
    else: hi = mid - 1
ntok(lo)
PY
        TEXTS="$TEXTS $OUT/$p.txt"
    done
    [ -n "$TEXTS" ] || { echo "sparse_beam_quality: no ../shared/papers texts; set TEXTS" >&2; exit 1; }
fi
COMMON=(-m "$MODEL" -c "${CTX:-8192}" --beams "${BEAMS:-4}" --width "${WIDTH:-2}" --step "${STEP:-16}" -n "${N:-64}"
        --json -t "${THREADS:-2}" --no-progress --rescore-dense --ignore-eos)
for t in $TEXTS; do
    name=$(basename "$t" .txt)
    for mode in $MODES; do
        case $mode in
            dense)  SP=() ;;
            oracle) SP=(--sparse oracle --sparse-budget "$BUDGET") ;;
            quest)  SP=(--sparse quest --sparse-budget "$BUDGET") ;;
            keep|acc) SP=(--sparse asyncspade --sparse-preset "$mode" --sparse-budget "$BUDGET") ;;
            *) echo "sparse_beam_quality: unknown mode $mode" >&2; exit 2 ;;
        esac
        f="$OUT/${name}_$mode.json"
        if [ -n "${REUSE:-}" ] && [ -s "$f" ]; then continue; fi
        "$BIN" beam "${COMMON[@]}" -f "$t" "${SP[@]}" > "$f"
    done
done
OUT=$OUT TEXTS="$TEXTS" MODES="$MODES" python3 - <<'PY'
import json, os
out, modes = os.environ['OUT'], os.environ['MODES'].split()
print('| text | mode | best beam: dense score (gap) | kept beams: mean dense score (gap) | best beam: own score |'
      ' tokens shared with dense best | dense beams kept too |')
print('| --- | --- | ---: | ---: | ---: | ---: | ---: |')
gaps = {m: [] for m in modes}
for t in os.environ['TEXTS'].split():
    name = os.path.basename(t)[:-4]
    ref = json.load(open(f'{out}/{name}_dense.json'))['beams'] if 'dense' in modes else None
    for mode in modes:
        d = json.load(open(f'{out}/{name}_{mode}.json'))
        b = d['beams']
        best = b[0]['dense_score']
        mean = sum(x['dense_score'] for x in b) / len(b)
        if ref:
            rb = ref[0]['dense_score']; rm = sum(x['dense_score'] for x in ref) / len(ref)
            shared = 0
            for u, v in zip(b[0]['ids'], ref[0]['ids']):
                if u != v: break
                shared += 1
            kept = sum(1 for x in ref if any(x['ids'] == y['ids'] for y in b))
            gaps[mode].append((best - rb, mean - rm))
            print(f"| {name} ({d['n_prompt']} tokens) | {mode} | {best:.4f} ({best - rb:+.4f}) | {mean:.4f} ({mean - rm:+.4f}) |"
                  f" {b[0]['score']:.4f} | {shared} of {len(b[0]['ids'])} | {kept} of {len(ref)} |")
        else:
            print(f"| {name} ({d['n_prompt']} tokens) | {mode} | {best:.4f} | {mean:.4f} | {b[0]['score']:.4f} | | |")
if 'dense' in modes:
    print()
    print('| mode | texts | best beam: mean gap (range) | kept beams: mean gap (range) | best beam at least dense\'s |')
    print('| --- | ---: | ---: | ---: | ---: |')
    for m in modes:
        g = gaps[m]
        if m == 'dense' or not g: continue
        bg, mg = [x[0] for x in g], [x[1] for x in g]
        print(f"| {m} | {len(g)} | {sum(bg) / len(bg):+.4f} ({min(bg):+.4f} to {max(bg):+.4f}) |"
              f" {sum(mg) / len(mg):+.4f} ({min(mg):+.4f} to {max(mg):+.4f}) | {sum(1 for x in bg if x >= 0)} of {len(g)} |")
PY
