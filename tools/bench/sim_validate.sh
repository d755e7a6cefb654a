#!/usr/bin/env bash
# sim_validate.sh - the simulator against the real engine (issue 14): the oversubscription runs of
# tools/bench/serve_oversub.sh (kvtier serve, fast tier = demand / rho in RAM, a host tier of twice the demand
# below it, a disk tier under that) and `kvtier sim` on the same settings with this machine's measured profile;
# one table: rho, policy, measured TPOT mean / p95, predicted TPOT mean / p95, error %.
#
# Usage: tools/bench/sim_validate.sh [MODEL.gguf]
#   Env: RHOS ("1 2 3 5"), POLICIES ("plan lru lfu"), NP (8), PROMPT (512), GEN (128), T (2), BLOCK (64),
#        KVTIER (build/kvtier), DISK (/tmp), SHAPE (smollm2-135m: the model's shape for the simulator),
#        OUT (directory for the raw results, default a new /tmp/sim_validate.XXXXXX, kept),
#        REUSE (an earlier run's OUT: take its real results and calibration, run only the simulator),
#        COPY_ON_COMPUTE (1: the simulator's fast <-> host copies take the compute cores; 0: a separate link),
#        KV_PREFETCH (16, kvtier serve's --kv-prefetch default: the copy engine's prefetch the simulator's lru and lfu
#        reproduce), LAYERS (the model's n_layer: the simulator's blocks are one layer each, as the store's),
#        WINDOW (256: victims examined per eviction, the store's VICTIM_SAMPLE),
#        CALIB (serve: the copy rate measured in the real runs, below; kvbench: the single-sequence kvbench rate of
#        passes 1-7), COPY_LANES (compute threads that copy at once, the profile's sim_copy_lanes: the engine's rule,
#        T where the online CPUs less T leave no core for a copy thread (its readers and the pool's waiting threads
#        copy, kv_paged.h io_mem_threads), else 1; set 1 for real runs made with --kv-copy-threads N or before
#        2026-11-28 late).
#
# Calibration (all on this machine, before the simulator runs; written to OUT/profile.json):
#   - links, disk, RAM: `kvtier profile --quick`;
#   - prefill compute per prompt token and a decode iteration at batch 1: `kvtier bench -p PROMPT -n 64`
#     (pp tok/s and tg tok/s, -t T);
#   - the fast <-> host copy cost, CALIB=serve (default since pass 8): measured under the serving load itself, in
#     the real runs at rho > 1: bytes the store moved / CPU seconds of its copy engine (kvtier_kv_moved_bytes_total
#     over kvtier_kv_copy_thread_cpu_seconds_total from /metrics, every policy and rho > 1 pooled): the copies, their
#     victim searches and bookkeeping as the engine pays them with 8 sequences, not a fit to TPOT (written to
#     OUT/profile-serve.json); CALIB=kvbench: `kvtier kvbench --only c --policies lru` (one sequence of 4096
#     positions, fast tier 1/4 of its KV, host the rest, no disk): (TPOT - T_compute) / bytes moved per token;
#     both as one rate (sim_copy_gbps);
#   - the per-sequence cost of a decode iteration: the one fitted number, so that the simulator's mean TPOT at
#     rho 1 (nothing moves) equals the mean of the measured rho-1 runs: iteration = tg_ms + per_seq x (n - 1).
# The policies: plan = `--kv-evict lru --lookahead 4` (the scheduler's plan) against sim `--policy lru --plan 4`
# (the same plan functions, src/sched/sched_policy.c and src/kv/kv_prefetch.c); lru and lfu (`--lookahead 0`)
# against sim lru and lfu. p95 is nearest-rank over the NP requests on both sides.
set -euo pipefail
cd "$(dirname "$0")/../.."
M="${1:-$HOME/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf}"
RHOS="${RHOS:-1 2 3 5}" NP="${NP:-8}" PROMPT="${PROMPT:-512}" GEN="${GEN:-128}" T="${T:-2}" BLOCK="${BLOCK:-64}"
KVTIER="${KVTIER:-build/kvtier}" DISK="${DISK:-/tmp}" POLICIES="${POLICIES:-plan lru lfu}" SHAPE="${SHAPE:-smollm2-135m}"
COPY_ON_COMPUTE="${COPY_ON_COMPUTE:-1}" KV_PREFETCH="${KV_PREFETCH:-16}" WINDOW="${WINDOW:-256}" CALIB="${CALIB:-serve}"
COPY_LANES="${COPY_LANES:-$([ "$(nproc)" -le "$T" ] && echo "$T" || echo 1)}"
[ -x "$KVTIER" ] || make -s build/kvtier
case " $RHOS " in *" 1 "*) ;; *) echo "sim_validate: RHOS must contain 1 (the calibration run)" >&2; exit 2 ;; esac
if [ -n "${REUSE:-}" ]; then OUT="$REUSE"; else OUT="${OUT:-$(mktemp -d /tmp/sim_validate.XXXXXX)}"; fi
mkdir -p "$OUT"
per_pos="$("$KVTIER" info -m "$M" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["kv_bytes_per_token_f16"])')"
LAYERS="${LAYERS:-$("$KVTIER" info -m "$M" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["n_layer"])')}"
demand=$((NP * (PROMPT + GEN) * per_pos))
load() { cut -d' ' -f1 /proc/loadavg; }

# ---- the real engine
if [ -z "${REUSE:-}" ]; then
    port=$((20000 + RANDOM % 20000))
    pid=""
    trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT
    for rho in $RHOS; do
        fast=$(python3 -c "print(int($demand / $rho))")
        for pol in $POLICIES; do
            case $pol in
                plan) flags=(--kv-evict lru --lookahead 4) ;;
                lru) flags=(--kv-evict lru --lookahead 0) ;;
                lfu) flags=(--kv-evict lfu --lookahead 0) ;;
                *) echo "sim_validate: policy $pol is not plan|lru|lfu" >&2; exit 2 ;;
            esac
            l0=$(load)
            "$KVTIER" serve -m "$M" --host 127.0.0.1 --port "$port" -t "$T" -np "$NP" -c $((PROMPT + GEN + 8)) --metrics \
                --kv-block "$BLOCK" --kv-fast "$fast" --kv-host $((demand * 2)) --kv-disk "$DISK" "${flags[@]}" \
                >"$OUT/server-$rho-$pol.log" 2>&1 &
            pid=$!
            for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.2; done
            python3 tools/bench/serve_bench.py --url "http://127.0.0.1:$port" --workload uniform --prompt-len "$PROMPT" \
                --max-tokens "$GEN" --num "$NP" --concurrency "$NP" --seed 11 --json >"$OUT/real-$rho-$pol.json" || true
            kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
            echo "$l0 $(load)" >"$OUT/load-$rho-$pol.txt"
            echo "real rho $rho $pol: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("TPOT mean %.1f ms, %d/%d done" % (r["tpot_ms_mean"], r["completed"], r["num"]))' "$OUT/real-$rho-$pol.json")" >&2
        done
    done
fi

# ---- calibration
if [ ! -f "$OUT/profile.json" ]; then
    echo "calibrating (kvtier profile --quick, bench, kvbench) ..." >&2
    l0=$(load)
    "$KVTIER" profile --quick -o "$OUT/machine.json" 2>"$OUT/profile.log"
    "$KVTIER" bench -m "$M" -t "$T" -p "$PROMPT" -n 64 -r 2 --kv-block "$BLOCK" -o json >"$OUT/bench.json" 2>"$OUT/bench.log"
    "$KVTIER" kvbench -m "$M" -t "$T" --ctx 4096 -n 24 --only c --policies lru --kv-block "$BLOCK" --dir "$DISK" \
        >"$OUT/kvbench.md" 2>"$OUT/kvbench.log"
    echo "$l0 $(load)" >"$OUT/load-calibration.txt"
    python3 - "$OUT" <<'EOF'
import json, re, sys
out = sys.argv[1]
prof = json.load(open(out + "/machine.json"))
bench = json.load(open(out + "/bench.json"))
tests = bench if isinstance(bench, list) else bench.get("tests", bench.get("results", []))
pp = [t for t in tests if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0]
tg = [t for t in tests if t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0]
pp_tps, tg_tps = pp[0]["avg_ts"], tg[0]["avg_ts"]
row = [l for l in open(out + "/kvbench.md") if l.startswith("| lru |")][0].split("|")
tpot, tc, mb = float(row[2]), float(row[3]), float(row[8])
copy_gbps = mb * 1e6 / ((tpot - tc) * 1e-3) / 1e9 if tpot > tc else prof["cpu_read_gbps"]
prof.update(name="this machine (sim_validate.sh)", sim_prefill_ms_per_tok=1e3 / pp_tps, sim_iter_ms=1e3 / tg_tps,
            sim_iter_ms_per_seq=0.0, sim_iter_us_per_ctx=0.0, sim_copy_gbps=copy_gbps, sim_copy_block_us=0.0,
            note="pp %.1f tok/s, tg %.1f tok/s (kvtier bench); kvbench (c) lru: TPOT %.1f ms, T_compute %.1f ms, "
                 "%.2f MB moved per token" % (pp_tps, tg_tps, tpot, tc, mb))
json.dump(prof, open(out + "/profile.json", "w"), indent=1)
EOF
fi

# ---- the copy rate under the serving load (CALIB=serve): the real runs' own counters, rho > 1
PROFILE="$OUT/profile.json"
python3 - "$OUT/profile.json" "$COPY_LANES" <<'EOF'
import json, sys
prof = json.load(open(sys.argv[1]))
prof["sim_copy_lanes"] = float(sys.argv[2])  # compute threads copying at once (kvtier sim: the copy link runs that much faster)
json.dump(prof, open(sys.argv[1], "w"), indent=1)
EOF
if [ "$CALIB" = serve ]; then
    PROFILE="$OUT/profile-serve.json"
    python3 - "$OUT" <<'EOF'
import glob, json, sys
out = sys.argv[1]
prof = json.load(open(out + "/profile.json"))
cpu = moved = 0.0
for f in glob.glob(out + "/real-*.json"):
    if "/real-1-" in f: continue
    r = json.load(open(f))
    p = r.get("per_iteration") or {}
    if not p or not r.get("kv_moved_bytes"): continue
    cpu += p["copy_threads_cpu_ms"] * p["iterations"] / 1e3
    moved += r["kv_moved_bytes"]
if cpu > 0:
    prof["note"] = prof.get("note", "") + "; copies under the serving load: %.2f GB over %.2f s of copy-engine CPU (real runs, rho > 1)" % (
        moved / 1e9, cpu)
    prof["sim_copy_gbps_kvbench"] = prof["sim_copy_gbps"]
    prof["sim_copy_gbps"] = moved / cpu / 1e9
json.dump(prof, open(out + "/profile-serve.json", "w"), indent=1)
EOF
fi

# ---- the simulator, and the table
python3 - "$OUT" "$KVTIER" "$SHAPE" "$NP" "$PROMPT" "$GEN" "$BLOCK" "$demand" "$COPY_ON_COMPUTE" "$RHOS" "$POLICIES" \
    "$LAYERS" "$KV_PREFETCH" "$WINDOW" "$PROFILE" <<'EOF'
import json, math, subprocess, sys
out, kvtier, shape, np_, prompt, gen, block, demand, coc = sys.argv[1:10]
rhos, pols = sys.argv[10].split(), sys.argv[11].split()
layers, kv_prefetch, window, profile = sys.argv[12:16]
np_, demand = int(np_), int(demand)
simpol = {"plan": "lru", "lru": "lru", "lfu": "lfu"}  # plan: the scheduler's plan as the engine runs it (--plan 4)

def p95(xs):  # nearest rank, as kvtier sim
    s = sorted(xs)
    return s[math.ceil(0.95 * len(s)) - 1]

def sim(rho, pol, per_seq):
    fast = int(demand / float(rho))
    cmd = [kvtier, "sim", "--profile", profile, "--shape", shape, "--workload", "fixed", "--prompt", prompt,
           "--gen", gen, "--requests", str(np_), "--batch", str(np_), "--burst", "--block", block, "--fast-bytes", str(fast),
           "--host-bytes", str(2 * demand), "--policy", simpol[pol], "--seeds", "1", "--json", "--sched", "kvtier",
           "--iter-ms", "%.6f" % tg_ms, "--iter-ms-per-seq", "%.6f" % per_seq, "--copy-on-compute", coc, "--clean-below", "ssd",
           "--layers", layers, "--kv-prefetch", kv_prefetch, "--victim-window", window] + (
           ["--plan", "4"] if pol == "plan" else [])
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)

prof = json.load(open(profile))
tg_ms = prof["sim_iter_ms"]  # batch 1: the iteration is tg_ms + per_seq x (decoding sequences - 1) (kvtier sim)
real = {}
for rho in rhos:
    for pol in pols:
        r = json.load(open("%s/real-%s-%s.json" % (out, rho, pol)))
        h, m = r.get("kv_hits") or 0, r.get("kv_misses") or 0
        real[rho, pol] = (r["tpot_ms_mean"], p95(r["tpot_ms"]), r.get("kv_moved_bytes") or 0, r["completed"], r["num"],
                          open("%s/load-%s-%s.txt" % (out, rho, pol)).read().split(), h / (h + m) if h + m else 1.0)
# the per-sequence cost: the simulator's rho-1 mean TPOT = the measured rho-1 runs' mean (bisection)
target = sum(real["1", p][0] for p in pols) / len(pols)
lo, hi = 0.0, 4.0 * target
for _ in range(40):
    mid = (lo + hi) / 2
    if sim("1", pols[0], mid)["tpot_ms_mean"] < target: lo = mid
    else: hi = mid
per_seq = (lo + hi) / 2
print("calibration: prefill %.3f ms/token, iteration %.2f ms (batch 1) + %.2f ms per decoding sequence after the first, "
      "copies %.2f GB/s per thread on %g compute threads at once (%s; %s); fitted per-sequence cost from the rho-1 mean TPOT %.1f ms" % (
      prof["sim_prefill_ms_per_tok"], tg_ms, per_seq, prof["sim_copy_gbps"], prof.get("sim_copy_lanes", 1),
      "no overlap with compute" if coc == "1" else "a separate link",
      "measured in the real runs at rho > 1" if "sim_copy_gbps_kvbench" in prof else "kvbench (c), one sequence", target))
print()
print("| rho | policy | measured TPOT mean | measured p95 | predicted mean | predicted p95 | error mean | error p95 | "
      "GB moved: measured / predicted | hit rate: measured / predicted | load avg before-after |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for rho in rhos:
    for pol in pols:
        m_mean, m_p95, moved, done, num, ld, hit = real[rho, pol]
        s = sim(rho, pol, per_seq)
        e1 = 100 * (s["tpot_ms_mean"] - m_mean) / m_mean
        e2 = 100 * (s["tpot_ms_p95"] - m_p95) / m_p95
        print("| %s | %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %+.1f%% | %+.1f%% | %.1f / %.1f | %.3f / %.3f | %s-%s |" % (
            rho, pol, m_mean, m_p95, s["tpot_ms_mean"], s["tpot_ms_p95"], e1, e2, moved / 1e9, s["moved_bytes"] / 1e9,
            hit, s["hit_rate"], ld[0], ld[1]) + ("" if done == num else " (%d/%d done)" % (done, num)))
EOF
