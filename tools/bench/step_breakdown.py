#!/usr/bin/env python3
# step_breakdown.py - where a decode token's time goes, from tools/bench/step_stats.patch's output.
#   KVT_STEP_STATS=1 build/kvtier bench -m M -p 0 -n 32 -r 3 -t 2 -o json 2>&1 (after a line "== LABEL"), any number of
#   runs in one file; then: tools/bench/step_breakdown.py FILE
# Per run: the token-set's wall time against its weight bytes at the bench's adjacent DRAM probes (their mean), split
# into (1) the product tasks' time beyond their bytes at half the probe a thread (negative where one thread ran alone
# at a job's end, faster than half), (2) idle threads in the product jobs (2 x wall - busy, over 2), (3) the steps
# that are not products (attention, the element-wise steps); then per step and per weight shape (type, rows x cols;
# "first": each thread's first task of a job) the figures behind them. Measurement only (docs/log/BENCHMARKS-kernels-3.md, k11m).
import json
import re
import sys

PROD = ['qkv', 'wo', 'gate/up', 'down', 'output']
txt = open(sys.argv[1]).read()
for blk in txt.split('== ')[1:]:
    label = ' '.join(blk.split('\n')[0].split()[:3])
    js = [l for l in blk.split('\n') if l.startswith('[')]
    if not js:
        continue
    r = json.loads(js[0])[0]
    probe = sum(r['probe_adjacent_gbps']) / len(r['probe_adjacent_gbps'])
    steps = {}
    for m in re.finditer(r'^\s+(\S+)\s+([\d.]+) ms\s+([\d.]+)%\s+busy\s+([\d.]+) ms', blk, re.M):
        steps[m.group(1)] = (float(m.group(2)), float(m.group(4)))
    shapes = {}
    for m in re.finditer(r'thread (\d) shape (\S+)\s+(\d+) x\s+(\d+): tasks\s+(\d+),\s+([\d.]+) ms,\s+([\d.]+) MB', blk):
        a = shapes.setdefault((m.group(2), m.group(3), m.group(4)), [0, 0.0, 0.0])
        a[0] += int(m.group(5))
        a[1] += float(m.group(6))
        a[2] += float(m.group(7))
    tot = sum(v[0] for v in steps.values())
    mb = sum(a[2] for a in shapes.values())
    ideal = mb / probe  # MB / (GB/s) = ms
    kern = sum(a[1] - a[2] / (probe / 2) for a in shapes.values()) / 2
    idle = sum(2 * steps[s][0] - steps[s][1] for s in PROD if s in steps) / 2
    other = sum(v[0] for k, v in steps.items() if k not in PROD)
    print(f"{label}: tg {r['avg_ts']:.2f} t/s, adjacent {r['dram_pct_adjacent']:.1f}%, probe {probe:.2f} GB/s; "
          f"{tot:.0f} ms for {mb / 1e3:.1f} GB, {ideal:.0f} ms at the probe ({100 * ideal / tot:.1f}%)")
    print(f"  tasks beyond half the probe a thread {kern:.0f} ms ({100 * kern / tot:.1f}%), idle threads in the products "
          f"{idle:.0f} ms ({100 * idle / tot:.1f}%), other steps {other:.0f} ms ({100 * other / tot:.1f}%)")
    for s, (w, b) in steps.items():
        extra = f", busy {100 * b / 2 / w:.1f}% of 2 x wall, idle {(2 * w - b) / 2:.1f} ms" if s in PROD and w > 0 else ""
        print(f"    {s:10s} {w:8.1f} ms ({100 * w / tot:4.1f}%){extra}")
    for k, a in shapes.items():
        if a[1] <= 0:
            continue
        loss = (a[1] - a[2] / (probe / 2)) / 2
        print(f"    {k[0]:8s} {k[1]:>5} x {k[2]:<5} {a[0]:6d} tasks, {a[2] / a[0] * 1e3:5.0f} KB, {a[1] / a[0] * 1e3:6.1f} us a task, "
              f"{a[2] / a[1]:5.2f} GB/s a thread ({100 * a[2] / a[1] / (probe / 2):5.1f}% of half the probe), "
              f"beyond: {loss:6.1f} ms ({100 * loss / tot:.1f}%)")
