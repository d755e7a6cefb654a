#!/usr/bin/env python3
"""perrun.py - per-run ratios of a tools/bench/sparse_speed.sh output directory (docs/SPARSE.md "Speed").

usage: tools/bench/perrun.py DIR [--base "quest p16"] [--store disk]

For every config and repetition r: the run's TPOT (the JSON's decode.step_ms_median), the ratio base TPOT / this TPOT
against the base config's run of the same repetition (and, with BINS, the same binary: name@tag against base@tag),
disk->fast MB per token, the selection stall (% of TPOT) and the store stall. Then per config: how many runs are
>= 1.2x the base, and the lowest ratio. The repetitions alternate the configs, so run r of each was measured
within the same minute or so.
"""
import argparse, glob, json, os, re, statistics

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--base", default="quest p16")
ap.add_argument("--store", default="disk")
ap.add_argument("--goal", type=float, default=1.2)
a = ap.parse_args()

runs = {}  # name -> {rep: json}
pat = re.compile(r"run-%s-(.+)-(\d+)\.json$" % re.escape(a.store))
for p in glob.glob(os.path.join(a.dir, "run-%s-*.json" % a.store)):
    m = pat.search(os.path.basename(p))
    if not m: continue
    try: j = json.load(open(p))
    except Exception: continue
    runs.setdefault(m.group(1).replace("_", " "), {})[int(m.group(2))] = j

def base_of(name):
    return a.base + name[name.index("@"):] if "@" in name else a.base

print("| mode | run | TPOT ms | vs %s | disk->fast MB/token | selection stall ms (%% TPOT) | store stall ms/token |" % a.base)
print("|---|---|---|---|---|---|---|")
summary = []
for name in sorted(runs, key=lambda n: (n.split("@")[0] != a.base, n)):
    ratios = []
    for rep in sorted(runs[name]):
        j = runs[name][rep]
        d, s = j["decode"], j.get("sparse")
        t = d["step_ms_median"]
        b = runs.get(base_of(name), {}).get(rep)
        r = b["decode"]["step_ms_median"] / t if b and base_of(name) != name else None
        if r is not None: ratios.append(r)
        st = s["stall_ms_per_step"] if s else 0.0
        print(f"| {name} | {rep} | {t:.1f} | {'-' if r is None else f'{r:.2f}x'} | "
              f"{d['kv_moved_bytes_per_step'].get('disk_to_fast', 0) / 1e6:.2f} | {st:.2f} ({100 * st / t:.0f}%) | "
              f"{d.get('kv_stall_ms_per_step', 0):.1f} |")
    if ratios:
        summary.append((name, ratios))
print()
for name, r in summary:
    ok = sum(x >= a.goal for x in r)
    print(f"{name}: {ok} of {len(r)} runs >= {a.goal}x {a.base} (lowest {min(r):.3f}x, median {statistics.median(r):.3f}x)")
