#!/usr/bin/env python3
"""sparse_sweep.py - random combinations of the sparse decoding flags (docs/SPARSE.md), each checked for crashes and
for agreement.

A combination is a mode and any of the other --sparse-* flags, edge values included: sink and recent past the context,
budgets of 1 position or past the context, pages larger than the context, 4-bit copies, every preset. Each one runs
  1. once under a sanitizer build (--asan BIN: `make BUILD=build-asan OPT=-O1 CFLAGS="-fsanitize=address,undefined
     -fno-omit-frame-pointer -fno-sanitize-recover=all" build-asan/kvtier`): a sanitizer report fails the sweep; a
     refusal is fine when it is a clean error (exit 1 or 2 with a message);
  2. with -t 1 and -t 2 on three stores (contiguous; paged in RAM; paged with a bounded fast tier and the rest on disk,
     --kv-block and --kv-granularity drawn): the generated ids (beam: every kept beam's ids and score) must be the same
     in all six runs (docs/SPARSE.md: the selection depends on neither the thread count nor the tiers);
  or, with --serve, instead of 2: `kvtier serve -np 2` with the same flags and store (in RAM, or a fast tier and disk)
     against generate: the prompt's ids go to /completion as a longer request and, 0.3 s later, once more while it runs
     (a prefix-cache hit sharing the running one's key summaries), twice one after the other (hits) and twice at once
     (decoded in one batch); every answer (the longer one's first tokens) must be generate's ids (docs/SPARSE.md
     "Sequences");
  or, with --preempt: `kvtier serve -np 4` (the --asan build when given: a sanitizer report fails) over a small fast and
     host tier and disk (--preempt-fast, --preempt-host),
     four prompts cut from different places at once with long answers, so that sequences are swapped out and resumed
     (the count from /metrics is printed); each answer must be generate's ids for its prompt alone.

usage: tools/sparse_sweep.py [-n N] [--seed S] [--beam | --ppl | --serve | --preempt] [--bin B] [--asan B] [-m MODEL] [--text FILE] [--fast BYTES]
  exit status 1 when a combination crashed or disagreed; each combination's command line is printed on failure.
The sweeps of 2026-12-04 and what they found: docs/log/SPARSE-log-4.md, "A sweep of the flags"; --preempt (2026-12-05):
"Preemption under serve: a sweep" there.
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time
import urllib.request

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("-n", type=int, default=20, help="combinations (default 20)")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--beam", action="store_true", help="kvtier beam (a schedule drawn too) instead of generate")
ap.add_argument("--ppl", action="store_true", help="kvtier perplexity (chunks of -c 128 or 256; the perplexity and "
                "the per-step aggregates must agree) instead of generate")
ap.add_argument("--serve", action="store_true",
                help="kvtier serve (-np 2) against generate: the prompt's ids to /completion twice one after the other "
                     "(the second a prefix-cache hit), then twice at once (batched); every answer = generate's ids")
ap.add_argument("--preempt", action="store_true",
                help="kvtier serve -np 4 over a small fast and host tier and disk: four different prompts at once, long "
                     "answers (preemptions counted from /metrics); every answer = generate's ids for its prompt alone")
ap.add_argument("--preempt-fast", default="1M", help="--kv-fast of --preempt (default 1M; when that cannot hold the summaries: their bytes + 1 MiB)")
ap.add_argument("--preempt-host", default="6M", help="--kv-host of --preempt (default 6M: SmolLM2's four prompts admitted "
                "together, their answers outgrowing it)")
ap.add_argument("--port", type=int, default=18631)
ap.add_argument("--bin", default="build/kvtier")
ap.add_argument("--asan", default="build-asan/kvtier", help="sanitizer build ('' to skip the crash check)")
ap.add_argument("-m", "--model", default=os.path.expanduser("~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--text", default="../shared/papers/helm.txt", help="prompts are cut from it (default: README.md when absent)")
ap.add_argument("--fast", default=None, help="--kv-fast of the tiered store (default 10M, beam and serve 40M: room for the summaries)")
ap.add_argument("--tmp", default="/tmp", help="--kv-disk directory and the prompt file's")
ap.add_argument("--chars", default=None, help="prompt lengths in bytes to draw from (default 300,600,900, --preempt 100,200,300; "
                "e.g. 300,900,2600 for prompts past Gemma 3's 512-position sliding window)")
a = ap.parse_args()
a.chars = a.chars or ("100,200,300" if a.preempt else "300,600,900")
rng = random.Random(a.seed)
text_file = a.text if os.path.exists(a.text) else "README.md"
text = open(text_file, errors="replace").read()
fast = a.fast or ("40M" if a.beam or a.serve else "10M")


def maybe(f, p, flag, vals):
    if rng.random() < p:
        f += [flag, str(rng.choice(vals))]


def flags():
    mode = rng.choice(["oracle", "quest", "asyncspade", "asyncspade", "asyncspade"])
    f = ["--sparse", mode]
    maybe(f, 0.7, "--sparse-budget", [0.125, 0.25, 0.01, 0.5, 1, 2, 8, 40, 64, 100, 1000, 0.999])
    maybe(f, 0.4, "--sparse-sink", [0, 1, 4, 64, 1000])
    maybe(f, 0.4, "--sparse-recent", [1, 2, 32, 100, 1000])
    maybe(f, 0.3, "--sparse-dense-layers", [0, 1, 29, 30, 100])
    if mode == "quest":
        maybe(f, 0.6, "--sparse-page", [1, 2, 16, 64, 512, 1000])
    if mode == "asyncspade":
        if rng.random() < 0.3:
            f += ["--sparse-preset", rng.choice(["keep", "doc", "acc"])]
        maybe(f, 0.3, "--sparse-window", [1, 2, 8, 16, 64])
        maybe(f, 0.5, "--sparse-rerank", [1, 1.25, 2, 4, 8])
        maybe(f, 0.3, "--sparse-block", [0, 1, 2, 4, 16, 64, 700])
        maybe(f, 0.3, "--sparse-rerank-block", [0, 1, 4, 16, 33])
        maybe(f, 0.2, "--sparse-page-elems", [0, 1, 64, 256, 10000])
        maybe(f, 0.2, "--sparse-keep", [0, 0.25, 5])
        if rng.random() < 0.3:
            f.append("--sparse-share")
            if rng.random() < 0.5:
                f.append("--sparse-share-layers")
                maybe(f, 0.4, "--sparse-layer-floor", [0, 0.5, 1])
        for flag in ("--sparse-block-sum", "--sparse-sync", "--sparse-rope-align"):
            if rng.random() < 0.15:
                f.append(flag)
        maybe(f, 0.2, "--sparse-predictor", ["ridge", "last", "ridge-head"])
        maybe(f, 0.1, "--sparse-lambda", [1e-6, 1e-3, 10])
        maybe(f, 0.2, "--sparse-fallback", [0, 0.5, 0.85, 1])
        maybe(f, 0.2, "--sparse-real-layers", [0, 1, 2, 30])
        maybe(f, 0.2, "--sparse-key-bits", [4, 8])
        maybe(f, 0.2, "--sparse-rerank-bits", [4, 8])
        maybe(f, 0.2, "--sparse-rerank-qbits", [8, 16])
        maybe(f, 0.1, "--sparse-rerank-resid", [0, 0.25, 1])
        maybe(f, 0.2, "--sparse-prefetch-top", [0, 0.5, 1])
        maybe(f, 0.2, "--sparse-prefetch-layers", [0, 1, 3])
    if not a.beam and rng.random() < 0.2:
        f.append("--sparse-stats")
    return f


def post(path, body):
    r = urllib.request.Request("http://127.0.0.1:%d%s" % (a.port, path), json.dumps(body).encode(),
                               {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=600))


def generate(args):
    """kvtier generate --json with args: (None, its JSON), or ("refused: ..." for a clean refusal, else the failure, None)."""
    g = subprocess.run([a.bin, "generate", "-m", a.model, "--temp", "0", "--ignore-eos", "--json", "--no-progress",
                        "-t", "2"] + args, capture_output=True, text=True)
    if g.returncode:
        clean = g.returncode in (1, 2) and g.stderr.strip()
        return ("refused: " if clean else "generate exit %d: " % g.returncode) + g.stderr.strip()[-300:], None
    return None, json.loads(g.stdout)


def start_server(cmd):
    """Starts cmd (a kvtier serve), its stderr in a file (a pipe could fill up): (None, server) once it answers /health,
    else (why it ended, None): "refused: ..." for a clean refusal of the budget, the server stopped."""
    log = open(os.path.join(a.tmp, "kvt_sparse_sweep_serve_%d.err" % os.getpid()), "w+")
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
    srv.log = log
    for _ in range(300):
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/health" % a.port, timeout=1)
            return None, srv
        except Exception:
            if srv.poll() is not None:
                msg = (stop_server(srv).strip().splitlines() or [""])[-1]
                clean = srv.returncode in (1, 2) and ("--kv-fast" in msg or "--kv-host" in msg)
                return ("refused: " if clean else "serve exit %d: " % srv.returncode) + msg[-300:], None
            time.sleep(0.1)
    stop_server(srv)
    return "serve did not answer /health in 30 s", None


def stop_server(srv):
    """Ends the server (SIGTERM) and returns its stderr; its log file removed. Safe to call twice."""
    srv.terminate()
    srv.wait()
    if srv.log.closed:
        return ""
    srv.log.seek(0)
    err = srv.log.read()
    srv.log.close()
    os.unlink(srv.log.name)
    return err


def serve_check(f, ctx, blk, gran, tier, pf, n):
    """generate's ids against serve's, a hit beside a running request, sequential (cache hits) and batched: None when
    they agree, "refused: ..." for a clean refusal, else the failure."""
    why, gd = generate(["-f", pf, "-c", str(ctx), "-n", str(n), "--kv-block", blk, "--kv-granularity", gran] + tier + f)
    if why:
        return why
    why, srv = start_server([a.bin, "serve", "-m", a.model, "-t", "2", "-c", str(2 * ctx), "-np", "2", "--port",
                            str(a.port), "--kv-block", blk, "--kv-granularity", gran] + tier + f)
    if why: # (two sequences' summaries may not fit a fast tier that held one)
        return why
    try:
        body = {"prompt": gd["prompt_ids"], "n_predict": n, "temperature": 0, "ignore_eos": True, "return_tokens": True,
                "cache_prompt": True}
        with concurrent.futures.ThreadPoolExecutor(2) as ex: # a hit while the first request still runs (its summaries
            held = ex.submit(post, "/completion", dict(body, n_predict=n + 64)) # taken from it), then as below
            time.sleep(0.3)
            got = [post("/completion", body)["tokens"]]
            got = [held.result()["tokens"][:n]] + got
        got += [post("/completion", body)["tokens"] for _ in range(2)]
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            got += list(ex.map(lambda _: post("/completion", body)["tokens"], range(2)))
        bad = [k for k, t in enumerate(got) if t != gd["ids"]]
        return None if not bad else "serve answers %s differ from generate: %s against %s" % (
            bad, [got[k][:12] for k in bad], gd["ids"][:12])
    finally:
        stop_server(srv)


def preempt_check(f, ctx, blk, gran, n, nchars):
    """Four prompts from four places of the text, served at once over a small fast + host tier and disk (-np 4): each
    answer against generate's ids alone. Returns (why or None, preemptions, the prompts' places)."""
    want, where = [], []
    for k in range(4):
        off = rng.randrange(0, max(1, len(text) - nchars[k] - 10))
        pk = "%s.%d" % (pf, k)
        where.append("%d@%d" % (nchars[k], off))
        with open(pk, "w") as fp:
            fp.write(text[off:off + nchars[k]])
        why, gd = generate(["-f", pk, "-c", str(ctx), "-n", str(n[k])] + f)
        os.unlink(pk)
        if why:
            return why, 0, where
        want.append(gd)
    before = set(x for x in os.listdir(a.tmp) if x.startswith("kvtier-kv-"))
    fast = a.preempt_fast
    for attempt in range(2): # a fast tier too small for the summaries: once more with the summaries' bytes + 1 MiB
        why, srv = start_server([a.asan or a.bin, "serve", "-m", a.model, "-t", "2", "-c", str(4 * ctx), "-np", "4",
                                 "--port", str(a.port), "--metrics", "--kv-block", blk, "--kv-granularity", gran,
                                 "--kv-fast", fast, "--kv-host", a.preempt_host, "--kv-disk", a.tmp] + f)
        if not why:
            break
        need = re.search(r"cannot hold the sparse key summaries \((\d+) bytes\)", why)
        if attempt or not need:
            return why, 0, where
        fast = str(int(need.group(1)) + (1 << 20))
    try:
        bodies = [{"prompt": w["prompt_ids"], "n_predict": len(w["ids"]), "temperature": 0, "ignore_eos": True,
                   "return_tokens": True} for w in want]
        try:
            with concurrent.futures.ThreadPoolExecutor(4) as ex:
                got = list(ex.map(lambda b: post("/completion", b)["tokens"], bodies))
        except Exception as e: # (a crash or an error answer: the server's last words)
            time.sleep(1)
            code = srv.poll()
            return "serve failed (%s: %s; exit %s): %s" % (type(e).__name__, e, code, stop_server(srv)[-2500:]), 0, where
        m = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % a.port, timeout=10).read().decode()
        pre = int(sum(float(l.split()[-1]) for l in m.splitlines() if l.startswith("kvtier_preemptions_total")))
        err = stop_server(srv)
        if "Sanitizer" in err or "runtime error" in err:
            return "sanitizer report from serve: " + err[-2500:], pre, where
        left = set(x for x in os.listdir(a.tmp) if x.startswith("kvtier-kv-")) - before
        if left: # (serve removes its disk file when it ends on SIGTERM: docs/SERVING.md)
            return "serve left %s in %s" % (sorted(left), a.tmp), pre, where
        bad = [k for k in range(4) if got[k] != want[k]["ids"]]
        return (None if not bad else "serve answers %s differ from generate: %s against %s" % (
            bad, [got[k][:12] for k in bad], [want[k]["ids"][:12] for k in bad])), pre, where
    finally:
        stop_server(srv)


def outcome(p):
    d = json.loads(p.stdout)
    if "ppl" in d: # the perplexity and what the selections were (not their timings)
        sp = d.get("sparse", {})
        return [d["ppl"], d["n_scored"]] + [sp.get(k) for k in ("selected_frac", "mass_recall", "oracle_overlap")]
    return d["ids"] if "ids" in d else [(b["ids"], b["score"]) for b in d["beams"]]


def quote(args):
    return " ".join(shlex.quote(x) for x in args)


bad = 0
pf = os.path.join(a.tmp, "kvt_sparse_sweep_%d.txt" % os.getpid())
for i in range(a.n):
    ctx = rng.choice([384, 512, 1024]) if max(int(x) for x in a.chars.split(",")) <= 900 else 2048
    ctx = max(ctx, 1024) if a.preempt else ctx # (a prompt and up to 200 tokens)
    chars = [int(x) for x in a.chars.split(",")]
    off, nchar = rng.randrange(0, max(1, len(text) - max(1000, max(chars) + 100))), rng.choice(chars)
    with open(pf, "w") as fp:
        fp.write(text[off:off + nchar])
    f = flags()
    if a.beam:
        base = ["beam", "-m", a.model, "-f", pf, "-c", str(ctx), "--beams", str(rng.choice([2, 4])), "--width", "2",
                "--step", str(rng.choice([4, 8])), "-n", str(rng.choice([8, 24])), "--schedule",
                rng.choice(["layerwise", "beam", "prefix", "balanced"])]
    elif a.ppl:
        base = ["perplexity", "-m", a.model, "-f", pf, "-c", str(rng.choice([128, 256])), "--json"]
    else:
        base = ["generate", "-m", a.model, "-f", pf, "-c", str(ctx), "-n", str(rng.choice([4, 16, 40])), "--temp", "0"]
    if not a.ppl:
        base += ["--ignore-eos", "--json", "--no-progress"]
    blk, gran = str(rng.choice([4, 16, 64])), rng.choice(["layer", "head"])
    stores = [[], ["--kv-block", blk, "--kv-granularity", gran],
              ["--kv-block", blk, "--kv-granularity", gran, "--kv-fast", fast, "--kv-disk", a.tmp]]
    desc = "[%d] %s (prompt: %d bytes at offset %d of %s)" % (i, quote(f), nchar, off, text_file)
    if a.asan:
        s = rng.choice(stores)
        p = subprocess.run([a.asan] + base + f + s + ["-t", "2"], capture_output=True, text=True)
        if p.returncode not in (0, 1, 2) or "Sanitizer" in p.stderr or "runtime error" in p.stderr:
            print("CRASH %s\n  %s\n%s" % (desc, quote([a.asan] + base + f + s), p.stderr[-2500:]), flush=True)
            bad += 1
            continue
        if p.returncode and not (s and "--kv-fast" in p.stderr): # (a fast tier too small: the other stores still run)
            print("refused %s: %s" % (desc, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "no message"), flush=True)
            if not p.stderr.strip():
                bad += 1
            continue
    if a.preempt:
        why, pre, where = preempt_check(f, ctx, blk, gran, [rng.choice([60, 120, 200]) for _ in range(4)],
                                        [rng.choice(chars) for _ in range(4)])
        refused = why is not None and why.startswith("refused: ")
        print("%s [%d] %s (prompts: bytes@offset %s of %s; --kv-block %s --kv-granularity %s), %d preemptions%s" % (
            "ok  " if not why else "refused" if refused else "DIFF", i, quote(f), " ".join(where), text_file, blk, gran,
            pre, "" if not why else ": " + why), flush=True)
        bad += why is not None and not refused
        continue
    if a.serve: # in RAM, or a fast tier and the rest on disk
        tier = rng.choice([[], ["--kv-fast", fast, "--kv-disk", a.tmp]])
        why = serve_check(f, ctx, blk, gran, tier, pf, int(base[base.index("-n") + 1]))
        refused = why is not None and why.startswith("refused: ")
        print("%s %s %s%s" % ("ok  " if not why else "refused" if refused else "DIFF", desc, quote(tier),
                              "" if not why else ": " + why), flush=True)
        bad += why is not None and not refused
        continue
    got = {}
    for si, s in enumerate(stores):
        for t in (1, 2):
            p = subprocess.run([a.bin] + base + f + s + ["-t", str(t)], capture_output=True, text=True)
            got[(si, t)] = outcome(p) if p.returncode == 0 else "exit %d: %s" % (p.returncode, p.stderr.strip()[-200:])
    ran = [v for v in got.values() if not isinstance(v, str)]
    refused = [v for v in got.values() if isinstance(v, str)]
    if not ran and len(set(refused)) == 1 and refused[0][:7] in ("exit 1:", "exit 2:") and len(refused[0]) > 9:
        print("refused %s: %s" % (desc, refused[0]), flush=True) # (without --asan: the same clean error everywhere)
        continue
    # a bounded fast tier may refuse (too small for the summaries): the runs that ran must agree, and at least 4 run
    ok = len(ran) >= 4 and all(v == ran[0] for v in ran) and all("--kv-fast" in v for v in refused)
    print("%s %s" % ("ok  " if ok else "DIFF", desc), flush=True)
    if not ok:
        bad += 1
        for k, v in got.items():
            print("   store %d -t %d: %s" % (k[0], k[1], v if isinstance(v, str) else str(v)[:160]))
        print("   " + quote([a.bin] + base + f + stores[2]))
os.unlink(pf) if os.path.exists(pf) else None
print("%d of %d combinations failed" % (bad, a.n))
sys.exit(1 if bad else 0)
