#!/usr/bin/env python3
"""perrun.py - per-run ratios of a tools/bench/sparse_speed.sh output directory (docs/SPARSE.md "Speed").

usage: tools/bench/perrun.py DIR [--base "quest p16"] [--store disk]

For every config and repetition r: the run's TPOT (the JSON's decode.step_ms_median), the ratio base TPOT / this TPOT
against the base config's run of the same repetition (and, with BINS, the same binary: name@tag against base@tag), and
the same ratio by the medians of the last --late steps of both runs (the steps right after the prompt's restore are
slower while the fast tier settles, and a 16-token run's median can fall on them),
disk->fast MB per token, the selection stall (% of TPOT), the store stall and the asyncspade worker's CPU per token;
where sparse_speed.sh left a run's machine record (run-*.json.cpu), the share of the vCPUs that other processes used
and that the host stole (/proc/stat's steal) during the run (restore and prefill included). Then per config: how many
runs are >= 1.2x the base, and the lowest ratio. The repetitions alternate the configs, so run r of each was measured
within the same minute or so.
"""
import argparse, glob, json, os, re, statistics

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--base", default="quest p16")
ap.add_argument("--store", default="disk")
ap.add_argument("--goal", type=float, default=1.2)
ap.add_argument("--late", type=int, default=8, help="the ratio also by the medians of each run's last LATE steps (0: not shown)")
a = ap.parse_args()

runs = {}  # name -> {rep: json}
pat = re.compile(r"run-%s-(.+)-(\d+)\.json$" % re.escape(a.store))
for p in glob.glob(os.path.join(a.dir, "run-%s-*.json" % a.store)):
    m = pat.search(os.path.basename(p))
    if not m: continue
    try: j = json.load(open(p))
    except Exception: continue
    j["_path"] = p
    runs.setdefault(m.group(1).replace("_", " "), {})[int(m.group(2))] = j

def machine(p):
    """Others' CPU and steal during run p, % of all vCPUs' time, from sparse_speed.sh's p.cpu; None if absent."""
    try:
        f = open(p + ".cpu").read().split()
        w0, w1, b0, s0, b1, s1, hz = (float(x) for x in f[:7])
        own = sum(float(x) for x in f[7:9]) if len(f) >= 9 else 0.0
    except Exception:
        return None
    cap = (w1 - w0) * (os.cpu_count() or 1)
    if cap <= 0: return None
    return 100 * max(0.0, (b1 - b0) / hz - own) / cap, 100 * (s1 - s0) / hz / cap

def base_of(name):
    return a.base + name[name.index("@"):] if "@" in name else a.base

def late(j):
    st = j["decode"].get("step_ms") or []
    return statistics.median(st[-a.late:]) if a.late > 0 and len(st) >= a.late else None

print("| mode | run | TPOT ms | vs %s | vs it, last %d steps | disk->fast MB/token | selection stall ms (%% TPOT) | store stall ms/token "
      "| worker CPU ms/token | others' CPU / steal %% of the vCPUs |" % (a.base, a.late))
print("|---|---|---|---|---|---|---|---|---|---|")
summary = []
for name in sorted(runs, key=lambda n: (n.split("@")[0] != a.base, n)):
    ratios, lratios = [], []
    for rep in sorted(runs[name]):
        j = runs[name][rep]
        d, s = j["decode"], j.get("sparse")
        t = d["step_ms_median"]
        b = runs.get(base_of(name), {}).get(rep)
        r = b["decode"]["step_ms_median"] / t if b and base_of(name) != name else None
        if r is not None: ratios.append(r)
        st = s["stall_ms_per_step"] if s else 0.0
        rl = late(b) / late(j) if r is not None and late(b) and late(j) else None
        if rl is not None: lratios.append(rl)
        print(f"| {name} | {rep} | {t:.1f} | {'-' if r is None else f'{r:.2f}x'} | {'-' if rl is None else f'{rl:.2f}x'} | "
              f"{d['kv_moved_bytes_per_step'].get('disk_to_fast', 0) / 1e6:.2f} | {st:.2f} ({100 * st / t:.0f}%) | "
              f"{d.get('kv_stall_ms_per_step', 0):.1f} | {s['worker_cpu_ms_per_step'] if s else 0.0:.1f} | "
              f"{'-' if not machine(j['_path']) else '%.0f%% / %.1f%%' % machine(j['_path'])} |")
    if ratios:
        summary.append((name, ratios, lratios))
print()
for name, r, rl in summary:
    ok = sum(x >= a.goal for x in r)
    print(f"{name}: {ok} of {len(r)} runs >= {a.goal}x {a.base} (lowest {min(r):.3f}x, median {statistics.median(r):.3f}x)"
          + (f"; by the last {a.late} steps {sum(x >= a.goal for x in rl)} of {len(rl)} (lowest {min(rl):.3f}x)" if rl else ""))
