#!/usr/bin/env python3
"""Accuracy of sparse decode attention (docs/SPARSE.md): perplexity, attention mass recall and overlap with
the oracle set at several budgets, and passkey retrieval, each mode beside dense, with `kvtier`.

  tools/sparse_eval.py ppl     -m MODEL -f TEXT [-c 2048] [--chunks 2] [--budgets 0.25,0.125,0.0625]
                               [--dense-layers 0,1,2] [--config NAME=FLAGS ...] [--modes oracle,quest,NAME]
  tools/sparse_eval.py passkey -m MODEL [--lengths 2048,4096,8192] [--depths D,...] [--budget 0.125]
                               [--config NAME=FLAGS ...] [--modes off,oracle,quest,NAME] [--base SESSION]
                               [--check-load]
  tools/sparse_eval.py agree   -m MODEL -f TEXT [-c 2048] [-n 256] [--budget 0.125] [--config NAME=FLAGS ...]
                               [--modes oracle,quest,NAME]
  tools/sparse_eval.py recall  -m MODEL -f TEXT [--lengths 4096,8192] [-n 128] [--budget 0.125] [--modes ...]
  tools/sparse_eval.py variants -m MODEL -f TEXT [-c 1024] [--chunks 1] [--budget 0.125] [--only NAME,...]

`variants` runs dense, the oracle, Quest at three page sizes and the asyncspade variants of docs/SPARSE.md
(predictors, dense/real layers, recent window, re-rank, fallback) at one budget, with per-layer stats.

Every run prints one JSON line per measurement (stdout) and a table at the end. Extra kvtier flags after --.
"""
import argparse
import atexit
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

MODES = ["oracle", "quest", "asyncspade"]


def kvtier(args, kv):
    cmd = [args.kvtier] + kv + args.extra
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr[-2000:]))
    return json.loads(r.stdout), time.time() - t0


CONFIGS = {}  # passkey: name -> kvtier flags of a configuration added with --config NAME=FLAGS


def sparse_flags(mode, budget):
    if mode == "off":
        return []
    base = CONFIGS[mode] if mode in CONFIGS else ["--sparse", mode]
    return base + ["--sparse-budget", str(budget), "--sparse-stats"]


def run_ppl(args):
    """Perplexity of dense, then of every mode (--modes, --config names) at every budget and every
    --dense-layers count (first layers dense), with the mass recall and oracle overlap of the sparse steps."""
    rows = []
    base = ["perplexity", "-m", args.model, "-f", args.file, "-c", str(args.ctx), "--chunks", str(args.chunks), "--json",
            "-t", str(args.threads)]
    dense, sec = kvtier(args, base)
    rows.append(("off", 1.0, 0, dense["ppl"], None, None, None, sec))
    print(json.dumps({"mode": "off", "ppl": dense["ppl"], "n_scored": dense["n_scored"], "s": sec}), flush=True)
    modes = [m for m in args.modes if m != "off"] if args.modes else MODES + list(CONFIGS)
    for dl in args.dense_layers:
        for b in args.budgets:
            for mode in modes:
                extra = ["--sparse-dense-layers", str(dl)] if dl else []
                r, sec = kvtier(args, base + sparse_flags(mode, b) + extra)
                sp = r["sparse"]
                rows.append((mode, b, dl, r["ppl"], sp["mass_recall"], sp["mass_recall_p5"], sp["oracle_overlap"], sec))
                print(json.dumps({"mode": mode, "budget": b, "dense_layers": dl, "ppl": r["ppl"], "sparse": sp, "s": sec}),
                      flush=True)
    print("\n| mode | budget | dense layers | ppl | change vs dense | mass recall mean | p5 | oracle overlap | run s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, b, dl, ppl, mr, p5, ov, sec in rows:
        ch = "%+.2f%%" % (100.0 * (ppl / dense["ppl"] - 1.0))
        f = lambda x: "-" if x is None else "%.3f" % x
        print("| %s | %s | %d | %.4f | %s | %s | %s | %s | %.0f |" % (mode, b, dl, ppl, ch, f(mr), f(p5), f(ov), sec))


ASYNC = ["--sparse", "asyncspade", "--sparse-sync"]
VARIANTS = [
    ("oracle", ["--sparse", "oracle"]),
    ("quest page 16", ["--sparse", "quest", "--sparse-page", "16"]),
    ("quest page 8", ["--sparse", "quest", "--sparse-page", "8"]),
    ("quest page 4", ["--sparse", "quest", "--sparse-page", "4"]),
    ("asyncspade ridge (the paper's)", ASYNC),
    ("ridge per query head", ASYNC + ["--sparse-predictor", "ridge-head"]),
    ("simplex weights", ASYNC + ["--sparse-predictor", "simplex"]),
    ("ridge, rope-aligned", ASYNC + ["--sparse-rope-align"]),
    ("last query", ASYNC + ["--sparse-predictor", "last"]),
    ("ridge, 2 dense layers", ASYNC + ["--sparse-dense-layers", "2"]),
    ("ridge, recent 64", ASYNC + ["--sparse-recent", "64"]),
    ("ridge, re-rank x4", ASYNC + ["--sparse-rerank", "4"]),
    ("re-rank x2 block 64", ASYNC + ["--sparse-rerank", "2", "--sparse-block", "64"]),
    ("re-rank x4 block 64", ASYNC + ["--sparse-rerank", "4", "--sparse-block", "64"]),
    ("re-rank x4 block 16", ASYNC + ["--sparse-rerank", "4", "--sparse-block", "16"]),
    ("re-rank x8 block 64", ASYNC + ["--sparse-rerank", "8", "--sparse-block", "64"]),
    ("ridge, first 12 layers real", ASYNC + ["--sparse-real-layers", "12"]),
    ("ridge, fallback 0.8", ASYNC + ["--sparse-fallback", "0.8"]),
    ("ridge, fallback 0.85", ASYNC + ["--sparse-fallback", "0.85"]),
    ("last, fallback 0.8", ASYNC + ["--sparse-predictor", "last", "--sparse-fallback", "0.8"]),
]


def run_variants(args):
    base = ["perplexity", "-m", args.model, "-f", args.file, "-c", str(args.ctx), "--chunks", str(args.chunks), "--json",
            "-t", str(args.threads)]
    only = set(args.only.split(";" if ";" in args.only else ",")) if args.only else None
    dense, sec = kvtier(args, base)
    print(json.dumps({"variant": "dense", "ppl": dense["ppl"], "s": sec}), flush=True)
    rows = []
    for name, flags in VARIANTS:
        if only and name not in only:
            continue
        r, sec = kvtier(args, base + flags + ["--sparse-budget", str(args.budget), "--sparse-stats"])
        sp = r["sparse"]
        rows.append((name, r["ppl"], sp))
        print(json.dumps({"variant": name, "flags": flags, "ppl": r["ppl"], "sparse": sp, "s": sec}), flush=True)
    print("\n| variant | ppl | vs dense | mass recall mean | p5 | oracle overlap | query cos | fallback share |")
    print("|---|---|---|---|---|---|---|---|")
    print("| dense | %.3f | - | 1 | 1 | - | - | - |" % dense["ppl"])
    for name, ppl, sp in rows:
        qc = sp.get("query_cos", -1)
        fb = sp.get("fallback_frac", 0)
        print("| %s | %.3f | %+.2f%% | %.3f | %.3f | %.3f | %s | %s |" % (
            name, ppl, 100.0 * (ppl / dense["ppl"] - 1.0), sp["mass_recall"], sp["mass_recall_p5"], sp["oracle_overlap"],
            "%.3f" % qc if qc is not None and qc >= 0 else "-", "%.1f%%" % (100 * fb) if fb else "-"))


FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ")


HEADER = "There is important info hidden inside a lot of irrelevant text. Find it and memorize it. "
QUESTION = "\nWhat is the pass key? The pass key is"


def passkey_prompt(n_words_target, depth, key):
    # ~ 25 tokens per filler sentence group; the key line at the given depth of the filler
    n = max(1, n_words_target // 25)
    lines = [FILLER] * n
    at = int(depth * n)
    lines.insert(at, "The pass key is %d. Remember it. %d is the pass key. " % (key, key))
    return HEADER + "".join(lines) + QUESTION


def prefill_session(args, text_f, sess, n_ctx, load=None, start=0):
    """Prefills text_f densely (generate -n 1) and saves its KV to sess; with load, the common prefix of a saved
    session is restored first (only the rest is computed). With --max-prefill C, the text past character start is
    prefilled in pieces of about C tokens, one kvtier call each (a piece restores the one before it: the same KV, as
    prefill does not depend on how the prompt is split). Returns (prompt tokens, tokens restored by the first call,
    seconds)."""
    text = open(text_f).read()
    cuts = [len(text)]
    if args.max_prefill > 0:  # characters per piece from the filler's characters per token (Gemma 3: ~3.75)
        step = int(args.max_prefill * 3.5)
        cuts = list(range(start + step, len(text), step)) + [len(text)]
    n, reused, total = 0, None, 0.0
    for i, c in enumerate(cuts):
        part_f = text_f + ".part" if c < len(text) else text_f
        if c < len(text):
            open(part_f, "w").write(text[:c])
        out = sess if c == len(text) else "%s.%d" % (sess, i)
        kv = ["generate", "-m", args.model, "-f", part_f, "-n", "1", "--temp", "0", "--json", "--kv-save", out, "-c",
              str(n_ctx), "-t", str(args.threads), "--no-progress"]
        r, sec = kvtier(args, kv + (["--kv-load", load] if load else []))
        if i > 0:
            os.unlink(load)  # the previous piece's session
        load, n, total = out, r["n_prompt"], total + sec
        reused = r.get("kv_loaded_tokens", 0) if reused is None else reused
    return n, reused, total


def run_passkey(args):
    """Passkey retrieval. The prompt's prefix up to the key is the same filler at every depth and length, so one
    session of the filler alone (the longest length's, prefilled once: --base, or built here) gives every (length,
    depth) its tokens before the key (--kv-load reuses a saved session's common prefix); from there the prompt up to
    ~3 filler groups before the question is prefilled once per (length, depth) and saved (--kv-save). Every mode
    (dense too) restores that, prefills the rest (~80 tokens: more than asyncspade's query window, so its predictor
    has the history it would have after prefilling the whole prompt; prompt tokens attend densely in every mode)
    and generates the answer, whose tokens attend under the mode. --check-load: each mode also prefills the whole
    prompt itself; its tokens must equal the restored run's."""
    import tempfile
    rnd = random.Random(7)
    tmp = tempfile.mkdtemp(prefix="kvt-passkey-")
    atexit.register(shutil.rmtree, tmp, True)  # nothing left in /tmp, whatever the exit
    results = {}
    depths = args.depths if args.depths else [i / 9.0 for i in range(10)]
    base = args.base
    if not base and not args.no_share:  # the filler alone, as long as the longest prompt's
        n_max = max(1, (max(args.lengths) - 64) // 25)
        base_f, base = os.path.join(tmp, "base.txt"), os.path.join(tmp, "base.kvs")
        open(base_f, "w").write(HEADER + FILLER * n_max)
        n, _, sec = prefill_session(args, base_f, base, max(args.lengths) + 64)
        print(json.dumps({"base_prefill_tokens": n, "s": sec}), flush=True)
    for length in args.lengths:
        for depth in depths:
            key = rnd.randint(10000, 99999)
            prompt = passkey_prompt(length - 64, depth, key)
            cut = prompt.rindex(QUESTION) - 3 * len(FILLER)
            pre_f, full_f, sess = (os.path.join(tmp, x) for x in ("prefix.txt", "prompt.txt", "prefix.kvs"))
            open(pre_f, "w").write(prompt[:cut])
            open(full_f, "w").write(prompt)
            ctx = ["-c", str(length + 64), "-t", str(args.threads), "--no-progress"]
            n_pre, n_reused, sec = prefill_session(args, pre_f, sess, length + 64, base, prompt.index("The pass key is"))
            print(json.dumps({"length": length, "depth": round(depth, 3), "prefix_tokens": n_pre, "reused": n_reused,
                              "prefill_s": sec}), flush=True)
            for mode in args.modes:
                kv = ["generate", "-m", args.model, "-f", full_f, "-n", "8", "--temp", "0", "--json"] + ctx \
                    + sparse_flags(mode, args.budget)
                r, sec = kvtier(args, kv + ["--kv-load", sess])
                ok = str(key) in r["text"]  # the generated text
                gen = r["text"][-60:].replace("\n", " ")
                row = {"mode": mode, "length": length, "n_prompt": r["n_prompt"], "depth": round(depth, 3), "key": key,
                       "ok": ok, "tail": gen, "s": sec}
                if args.check_load:  # the same run prefilling the whole prompt itself
                    r2, sec2 = kvtier(args, kv)
                    sa, sb = r.get("sparse", {}), r2.get("sparse", {})  # and the same selections' figures
                    same_sel = all(sa.get(k) == sb.get(k) for k in ("selected_frac", "mass_recall", "oracle_overlap"))
                    row["load_equal"] = r2["ids"] == r["ids"] and same_sel
                    row["self_prefill_s"] = sec2
                    results.setdefault(("load_equal", mode), []).append(row["load_equal"])
                results.setdefault((mode, length), []).append(ok)
                print(json.dumps(row), flush=True)
            os.unlink(sess)
    print("\n| mode | length | passed |")
    print("|---|---|---|")
    for (mode, length), oks in sorted(((k, v) for k, v in results.items() if k[0] != "load_equal"),
                                      key=lambda x: (x[0][1], args.modes.index(x[0][0]))):
        print("| %s | %d | %d / %d |" % (mode, length, sum(oks), len(oks)))
    for (_, mode), eq in ((k, v) for k, v in results.items() if k[0] == "load_equal"):
        print("restored = self-prefilled tokens, %s: %d / %d" % (mode, sum(eq), len(eq)))


def text_prompt(args, tmp, n_ctx):
    """The text's first tokens as a prompt that leaves room for -n generated tokens in n_ctx: writes it to
    tmp/prompt.txt and, ~64 tokens shorter, to tmp/prefix.txt (the part saved once: each run prefills the rest,
    densely as any prompt, so that asyncspade's query history is full when decoding starts, a restored KV carrying
    no queries). Returns both paths."""
    ids = subprocess.run([args.kvtier, "tokenize", "-m", args.model, "-f", args.file, "--no-bos",
                          "--no-escape", "--no-parse-special"], capture_output=True,
                         text=True, check=True).stdout.split()
    n_prompt = n_ctx - args.n_gen - 8
    text = open(args.file, encoding="utf-8", errors="replace").read()
    # cut the text at about n_prompt tokens (characters per token measured on the whole text)
    cut = int(len(text) * n_prompt / max(1, len(ids)))
    pre_f = os.path.join(tmp, "prompt.txt")
    for it in range(12):  # correct the cut by the prompt's own characters per token until it fits
        open(pre_f, "w").write(text[:cut])
        n = len(subprocess.run([args.kvtier, "tokenize", "-m", args.model, "-f", pre_f, "--no-escape",
                                "--no-parse-special"], capture_output=True, text=True,
                               check=True).stdout.split())
        if n <= n_prompt and (n > n_prompt - 16 or it >= 3):
            break
        cut = int(cut * (n_prompt - 8) / n) if n > n_prompt or it < 3 else cut
    save_f = os.path.join(tmp, "prefix.txt")
    open(save_f, "w").write(text[:max(0, cut - int(64 * cut / max(1, n_prompt)))])
    return pre_f, save_f


def run_recall(args):
    """Attention mass recall over decode steps at several context lengths: per length, the text's first tokens as
    the prompt (prefilled once, restored by each mode), then -n tokens generated greedily by each mode (--modes,
    --config names) with --sparse-stats. Reports the mean and 5th percentile over (step, layer, KV head) pairs and
    the mean per sparse layer (layers whose figure is -1, dense ones, left out). The steps are the mode's own
    greedy continuation, not the text (perplexity's figure scores the text's second half)."""
    import tempfile
    modes = [m for m in args.modes if m != "off"]
    rows = []
    for length in args.lengths:
        tmp = tempfile.mkdtemp(prefix="kvt-recall-")
        atexit.register(shutil.rmtree, tmp, True)  # nothing left in /tmp, whatever the exit
        pre_f, save_f = text_prompt(args, tmp, length)
        sess = os.path.join(tmp, "prefix.kvs")
        n_pre, _, psec = prefill_session(args, save_f, sess, length)
        for mode in modes:
            r, sec = kvtier(args, ["generate", "-m", args.model, "-f", pre_f, "-n", str(args.n_gen), "--temp", "0",
                                   "--json", "--ignore-eos", "--kv-load", sess, "-c", str(length), "-t",
                                   str(args.threads), "--no-progress"] + sparse_flags(mode, args.budget))
            sp = r["sparse"]
            per = {i: l["mass_recall"] for i, l in enumerate(sp.get("layers", []))
                   if any(v is not None and v >= 0 for v in l["mass_recall"])}
            rows.append((length, r["n_prompt"], mode, sp, per))
            print(json.dumps({"length": length, "n_prompt": r["n_prompt"], "prefix_tokens": n_pre, "prefill_s": psec,
                              "mode": mode, "budget": args.budget, "n_gen": len(r["ids"]), "mass_recall": sp["mass_recall"],
                              "mass_recall_p5": sp["mass_recall_p5"], "oracle_overlap": sp["oracle_overlap"],
                              "layers": per, "s": sec}), flush=True)
        os.unlink(sess)
    print("\n| context | prompt tokens | mode | mass recall mean | p5 | oracle overlap | per sparse layer (mean over KV heads) |")
    print("|---|---|---|---|---|---|---|")
    for length, n_prompt, mode, sp, per in rows:
        pl = ", ".join("%d: %.3f" % (i, sum(v) / len(v)) for i, v in per.items())
        print("| %d | %d | %s | %.3f | %.3f | %.3f | %s |" % (length, n_prompt, mode, sp["mass_recall"],
                                                             sp["mass_recall_p5"], sp["oracle_overlap"], pl))


def run_agree(args):
    """Greedy agreement with dense: the text's first tokens as the prompt (about -c minus the generated count),
    then -n tokens generated greedily by dense and by each mode; reports the tokens equal to dense's before the
    first difference and the share equal position by position, and the distinct tokens of each continuation (a
    few: a repetition loop, which every mode tends to reproduce, so that agreement says little there)."""
    import tempfile
    tmp = tempfile.mkdtemp(prefix="kvt-agree-")
    atexit.register(shutil.rmtree, tmp, True)  # nothing left in /tmp, whatever the exit
    pre_f, save_f = text_prompt(args, tmp, args.ctx)
    sess = os.path.join(tmp, "prompt.kvs")
    ctx = ["-c", str(args.ctx), "-t", str(args.threads), "--no-progress", "--ignore-eos"]
    kvtier(args, ["generate", "-m", args.model, "-f", save_f, "-n", "1", "--temp", "0", "--json", "--kv-save", sess] + ctx)
    ref = None
    print("\n| mode | budget | tokens equal before the first difference | equal position by position | distinct tokens | run s |")
    print("|---|---|---|---|---|---|")
    modes = [m for m in args.modes if m != "off"] if args.modes else MODES + list(CONFIGS)
    for mode in ["off"] + modes:
        r, sec = kvtier(args, ["generate", "-m", args.model, "-f", pre_f, "-n", str(args.n_gen), "--temp", "0", "--json",
                               "--kv-load", sess] + ctx + sparse_flags(mode, args.budget))
        toks = r["ids"]
        if ref is None:
            ref = toks
        first = next((i for i, (a, b) in enumerate(zip(ref, toks)) if a != b), min(len(ref), len(toks)))
        same = sum(1 for a, b in zip(ref, toks) if a == b)
        print(json.dumps({"mode": mode, "budget": args.budget, "n_prompt": r["n_prompt"], "n_gen": len(toks),
                          "first_diff": first, "equal": same, "distinct": len(set(toks)), "s": sec}), flush=True)
        print("| %s | %s | %d / %d | %d / %d | %d | %.0f |" % (mode, args.budget if mode != "off" else 1, first, len(ref),
                                                               same, len(ref), len(set(toks)), sec), flush=True)
    os.unlink(sess)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["ppl", "passkey", "variants", "agree", "recall"])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file")
    ap.add_argument("-c", "--ctx", type=int, default=2048)
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--budgets", default="0.25,0.125,0.0625")
    ap.add_argument("--budget", default="0.125")
    ap.add_argument("--lengths", default="2048,4096,8192")
    ap.add_argument("--depths", default="", help="passkey: comma list (default: 10 depths, 0 to 1)")
    ap.add_argument("-n", "--n-gen", type=int, default=256, help="agree: tokens generated")
    ap.add_argument("--only", default="", help="variants: names, separated by ';' (or ',' when no name has one)")
    ap.add_argument("--modes", default="", help="passkey: comma list of modes and --config names (default: off and "
                    "the three modes, then the configs)")
    ap.add_argument("--config", action="append", default=[], metavar="NAME=FLAGS",
                    help="passkey: a configuration run beside the modes, e.g. 'rerank=--sparse asyncspade --sparse-rerank 4'")
    ap.add_argument("--dense-layers", default="0", help="ppl: comma list of --sparse-dense-layers counts (default 0)")
    ap.add_argument("--base", default="", help="passkey: a session of the filler alone (HEADER + FILLER * n, n at least "
                    "the longest length's), instead of prefilling it here")
    ap.add_argument("--no-share", action="store_true", help="passkey: no filler session; each (length, depth) prefix "
                    "prefilled from the start")
    ap.add_argument("--max-prefill", type=int, default=0, help="passkey: prefill a (length, depth) prefix in kvtier calls "
                    "of about this many tokens each (short runs on a shared machine); 0: one call")
    ap.add_argument("--check-load", action="store_true", help="passkey: each mode also prefills the whole prompt "
                    "itself; its tokens are compared with the restored run's")
    ap.add_argument("--kvtier", default="build/kvtier")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    args.budgets = [float(x) for x in args.budgets.split(",")]
    args.lengths = [int(x) for x in args.lengths.split(",")]
    args.depths = [float(x) for x in args.depths.split(",")] if args.depths else []
    args.dense_layers = [int(x) for x in args.dense_layers.split(",")]
    for c in args.config:
        name, _, flags = c.partition("=")
        CONFIGS[name] = flags.split()
    args.modes = args.modes.split(",") if args.modes else ["off"] + MODES + list(CONFIGS)
    if args.what in ("ppl", "variants", "agree", "recall"):
        if not args.file:
            sys.exit("%s needs -f TEXT" % args.what)
        {"ppl": run_ppl, "variants": run_variants, "agree": run_agree, "recall": run_recall}[args.what](args)
    else:
        run_passkey(args)


if __name__ == "__main__":
    main()
