#!/usr/bin/env python3
"""serve_bench.py - an open-loop load generator for OpenAI-compatible servers (kvtier serve, llama-server).

Requests arrive as a Poisson process (seeded) whatever the server's speed: a slow server builds a queue,
as in production, instead of slowing the client down (a closed loop hides that). Each request streams a
/v1/completions answer; the client times

  TTFT  time to the first streamed token (queueing + prefill),
  TPOT  (end - first token) / (tokens - 1) per request (the decode pace a user sees),
  E2E   end-to-end latency,

and reports p50/p95 of each, output throughput (tokens/s over the run), prompt tokens served from the
server's prefix cache (usage.prompt_tokens_details.cached_tokens) and, for kvtier with --metrics, the KV
bytes moved between tiers during the run (from /metrics before and after).

Prompts are token ids drawn uniformly from [--vocab-lo, --vocab-hi) (both servers accept an id list as
`prompt`), so their length is exact; with --shared-prefix P every prompt starts with the same P ids
(a system prompt). --prompt-file FILE (a JSON list of strings or id lists) takes the prompts from FILE in turn
instead (a real text's slices: tools/bench/serve_sparse.sh). Output lengths are drawn per workload; `ignore_eos` makes the server generate them all
(llama-server and kvtier both accept it).

Workloads (prompt tokens; output tokens), uniform over the ranges:
  chat           128-512;   64-256
  code           512-2048;  128-512
  summarization  2048-6000; 128-256
  uniform        --prompt-len; --max-tokens (fixed)
  mixed          chat 50%, code 30%, summarization 20%

Only the Python standard library is used. Example:
  tools/bench/serve_bench.py --url http://127.0.0.1:8080 --workload chat --rate 4 --num 64 --seed 1
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

WORKLOADS = {
    "chat": ((128, 512), (64, 256)),
    "code": ((512, 2048), (128, 512)),
    "summarization": ((2048, 6000), (128, 256)),
}
MIXED = (("chat", 0.5), ("code", 0.3), ("summarization", 0.2))


def percentile(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def make_requests(a):
    rng = random.Random(a.seed)
    shared = [rng.randrange(a.vocab_lo, a.vocab_hi) for _ in range(a.shared_prefix)]
    reqs, t = [], 0.0
    for i in range(a.num):
        kind = a.workload
        if kind == "mixed":
            r, acc = rng.random(), 0.0
            for name, w in MIXED:
                acc += w
                if r < acc:
                    kind = name
                    break
        if kind == "uniform":
            n_prompt, n_out = a.prompt_len, a.max_tokens
        else:
            (plo, phi), (olo, ohi) = WORKLOADS[kind]
            n_prompt, n_out = rng.randint(plo, phi), rng.randint(olo, ohi)
            if a.max_tokens:
                n_out = min(n_out, a.max_tokens)
        if a.max_prompt:
            n_prompt = min(n_prompt, a.max_prompt)
        if a.prompt_file:  # the file's prompts in turn (strings or id lists), not random ids
            prompt = a.prompts[i % len(a.prompts)]
        else:
            n_own = max(1, n_prompt - len(shared))
            prompt = shared + [rng.randrange(a.vocab_lo, a.vocab_hi) for _ in range(n_own)]
        if a.rate > 0:
            t += rng.expovariate(a.rate)
        reqs.append({"i": i, "kind": kind, "at": t, "prompt": prompt, "max_tokens": n_out})
    return reqs


def scrape_metrics(a):
    """kvtier's /metrics as {name{labels}: value}; {} if the server has none."""
    try:
        c = conn(a)
        c.request("GET", "/metrics", headers=headers(a))
        r = c.getresponse()
        body = r.read().decode("utf-8", "replace")
        c.close()
        if r.status != 200:
            return {}
    except OSError:
        return {}
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def conn(a):
    u = urllib.parse.urlparse(a.url)
    return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=a.timeout)


def headers(a):
    h = {"Content-Type": "application/json"}
    if a.api_key:
        h["Authorization"] = "Bearer " + a.api_key
    return h


def sse_events(resp):
    """The JSON events of a streamed response (server-sent events), until [DONE] or the end of the stream."""
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield json.loads(data)


def run_one(a, req, t0, res):
    delay = t0 + req["at"] - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    body = {
        "model": a.model,
        "prompt": req["prompt"],
        "max_tokens": req["max_tokens"],
        "temperature": a.temperature,
        "seed": a.seed * 100003 + req["i"],
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": not a.no_ignore_eos,
    }
    out = {"i": req["i"], "kind": req["kind"], "n_prompt": len(req["prompt"]), "ok": False}
    start = time.monotonic()
    out["sent"] = start - t0
    try:
        c = conn(a)
        c.request("POST", "/v1/completions", body=json.dumps(body), headers=headers(a))
        r = c.getresponse()
        if r.status != 200:
            out["error"] = "HTTP %d: %s" % (r.status, r.read(300).decode("utf-8", "replace"))
            c.close()
            res.append(out)
            return
        first, n_chunks, usage = None, 0, None
        for ev in sse_events(r):
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices") or []:
                if ch.get("text"):
                    n_chunks += 1
                    if first is None:
                        first = time.monotonic()
        end = time.monotonic()
        c.close()
        n_out = usage["completion_tokens"] if usage else n_chunks
        out.update(ok=True, n_out=n_out, e2e=end - start, end=end - t0)
        if first is not None:
            out["ttft"] = first - start
            if n_out > 1:
                out["tpot"] = (end - first) / (n_out - 1)
        if usage:
            out["n_prompt"] = usage.get("prompt_tokens", out["n_prompt"])
            det = usage.get("prompt_tokens_details") or {}
            out["cached"] = det.get("cached_tokens", 0) or 0
    except (OSError, ValueError, http.client.HTTPException) as ex:
        out["error"] = "%s: %s" % (type(ex).__name__, ex)
    res.append(out)


def moved_bytes(m0, m1):
    tot = 0.0
    for k, v in m1.items():
        if k.startswith("kvtier_kv_moved_bytes_total"):
            tot += v - m0.get(k, 0.0)
    return tot


def per_iteration(m0, m1):
    """Where kvtier's iterations spent their time (from /metrics before and after): the compute threads' KV acquire
    time and its parts, the copy threads' CPU, the process's CPU and context switches, per iteration (ms or counts)."""
    d = lambda k: m1.get(k, 0.0) - m0.get(k, 0.0)
    it = d("kvtier_iterations_total")
    if not m1 or it <= 0:
        return None
    out = {"iterations": it}
    for part in ("acquire", "lock", "wait_busy", "wait_room", "load"):
        out[part + "_ms"] = 1e3 * d('kvtier_kv_reader_seconds_total{part="%s"}' % part) / it
    out["copy_threads_cpu_ms"] = 1e3 * d("kvtier_kv_copy_thread_cpu_seconds_total") / it
    out["copy_help_ms"] = 1e3 * d("kvtier_kv_copy_help_seconds_total") / it  # of which in the compute pool's waits
    out["process_cpu_ms"] = 1e3 * d("kvtier_process_cpu_seconds_total") / it
    out["stall_ms"] = 1e3 * d("kvtier_kv_stall_seconds_total") / it
    out["wakeups"] = d("kvtier_kv_wakeups_total") / it
    out["queue_entries"] = d('kvtier_kv_prefetch_queue_total{result="all"}') / it
    out["queue_idle"] = d('kvtier_kv_prefetch_queue_total{result="idle"}') / it
    out["csw_voluntary"] = d('kvtier_context_switches_total{kind="voluntary"}') / it
    out["csw_involuntary"] = d('kvtier_context_switches_total{kind="involuntary"}') / it
    return out


def sparse_counters(m0, m1):
    """kvtier's sparse decode counters over the run (from /metrics before and after; None without them): steps, positions
    selected / held, KV and summary bytes read, selection stall and of it the worker wait (s), the worker's wall and CPU
    (s), and beside them the run's decode seconds, generated tokens and bytes moved between tiers."""
    if not m1 or "kvtier_sparse_steps_total" not in m1:
        return None
    d = lambda k: m1.get(k, 0.0) - m0.get(k, 0.0)
    return {"steps": d("kvtier_sparse_steps_total"),
            "selected": d('kvtier_sparse_positions_total{kind="selected"}'),
            "context": d('kvtier_sparse_positions_total{kind="context"}'),
            "kv_read_bytes": d('kvtier_sparse_read_bytes_total{kind="kv"}'),
            "summary_read_bytes": d('kvtier_sparse_read_bytes_total{kind="summary"}'),
            "stall_s": d("kvtier_sparse_stall_seconds_total"), "wait_s": d("kvtier_sparse_worker_wait_seconds_total"),
            "worker_s": d('kvtier_sparse_worker_seconds_total{kind="wall"}'),
            "worker_cpu_s": d('kvtier_sparse_worker_seconds_total{kind="cpu"}'),
            "decode_s": d("kvtier_decode_seconds_total"), "prompt_s": d("kvtier_prompt_seconds_total"),
            "generated_tokens": d("kvtier_generated_tokens_total"), "iterations": d("kvtier_iterations_total"),
            "moved_bytes": moved_bytes(m0, m1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="default")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--workload", default="chat", choices=["chat", "code", "summarization", "uniform", "mixed"])
    ap.add_argument("--rate", type=float, default=0.0, help="requests per second (Poisson); 0: all at once")
    ap.add_argument("--concurrency", type=int, default=0,
                    help="at most this many requests in flight (0: no cap, open loop)")
    ap.add_argument("--num", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=256, help="uniform workload: prompt tokens")
    ap.add_argument("--max-tokens", type=int, default=0, help="uniform: output tokens; others: a cap (0: none)")
    ap.add_argument("--max-prompt", type=int, default=0, help="cap on prompt tokens (a server's -c)")
    ap.add_argument("--shared-prefix", type=int, default=0, help="ids every prompt starts with")
    ap.add_argument("--prompt-file", default="",
                    help="JSON list of prompts (strings or token-id lists), used in turn instead of random ids")
    ap.add_argument("--vocab-lo", type=int, default=1000)
    ap.add_argument("--vocab-hi", type=int, default=30000)
    ap.add_argument("--no-ignore-eos", action="store_true", help="let the model stop at end-of-generation")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="sampling temperature of every request (0: greedy; /v1's other settings: top_p 1, no top_k)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--label", default="", help="name of this run in the table")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    a = ap.parse_args()
    if a.workload == "uniform" and a.max_tokens <= 0:
        ap.error("--workload uniform needs --max-tokens")

    a.prompts = json.load(open(a.prompt_file)) if a.prompt_file else None
    reqs = make_requests(a)
    m0 = scrape_metrics(a)
    res, threads = [], []
    sem = threading.Semaphore(a.concurrency) if a.concurrency > 0 else None

    def worker(req):
        if sem:
            with sem:
                run_one(a, req, t0, res)
        else:
            run_one(a, req, t0, res)

    t0 = time.monotonic()
    for req in reqs:
        th = threading.Thread(target=worker, args=(req,), daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    m1 = scrape_metrics(a)

    ok = [r for r in res if r["ok"]]
    ttft = [r["ttft"] for r in ok if "ttft" in r]
    tpot = [r["tpot"] for r in ok if "tpot" in r]
    e2e = [r["e2e"] for r in ok]
    n_out = sum(r["n_out"] for r in ok)
    n_prompt = sum(r["n_prompt"] for r in ok)
    cached = sum(r.get("cached", 0) for r in ok)
    span = max((r["end"] for r in ok), default=wall)
    summary = {
        "label": a.label, "url": a.url, "workload": a.workload, "rate": a.rate, "concurrency": a.concurrency,
        "num": a.num, "seed": a.seed, "completed": len(ok), "failed": len(res) - len(ok),
        "errors": sorted({r["error"][:120] for r in res if not r["ok"]})[:5],
        "prompt_tokens": n_prompt, "output_tokens": n_out, "cached_tokens": cached,
        "wall_s": wall, "throughput_tok_s": n_out / span if span > 0 else 0.0,
        "req_s": len(ok) / span if span > 0 else 0.0,
        "ttft_ms_p50": 1e3 * percentile(ttft, 50), "ttft_ms_p95": 1e3 * percentile(ttft, 95),
        "tpot_ms_p50": 1e3 * percentile(tpot, 50), "tpot_ms_p95": 1e3 * percentile(tpot, 95),
        "tpot_ms_mean": 1e3 * sum(tpot) / len(tpot) if tpot else float("nan"),
        "tpot_ms": [1e3 * r["tpot"] for r in sorted(ok, key=lambda r: r["i"]) if "tpot" in r],
        "ttft_ms": [1e3 * r["ttft"] for r in sorted(ok, key=lambda r: r["i"]) if "ttft" in r],
        "e2e_ms_p50": 1e3 * percentile(e2e, 50), "e2e_ms_p95": 1e3 * percentile(e2e, 95),
        "kv_moved_bytes": moved_bytes(m0, m1) if m1 else None,
        "kv_hits": m1.get("kvtier_kv_hits_total", 0) - m0.get("kvtier_kv_hits_total", 0) if m1 else None,
        "kv_misses": m1.get("kvtier_kv_misses_total", 0) - m0.get("kvtier_kv_misses_total", 0) if m1 else None,
        "per_iteration": per_iteration(m0, m1),
        "sparse": sparse_counters(m0, m1),
    }
    if a.json:
        print(json.dumps(summary))
        return 0 if summary["failed"] == 0 else 1
    cols = ["label", "workload", "rate", "conc", "done", "fail", "tok/s", "TTFT p50", "TTFT p95", "TPOT p50",
            "TPOT p95", "E2E p50", "E2E p95", "cached", "KV moved"]
    row = [a.label or "-", a.workload, "%g" % a.rate, str(a.concurrency), str(len(ok)), str(len(res) - len(ok)),
           "%.1f" % summary["throughput_tok_s"],
           "%.0f ms" % summary["ttft_ms_p50"], "%.0f ms" % summary["ttft_ms_p95"],
           "%.1f ms" % summary["tpot_ms_p50"], "%.1f ms" % summary["tpot_ms_p95"],
           "%.0f ms" % summary["e2e_ms_p50"], "%.0f ms" % summary["e2e_ms_p95"],
           "%d/%d" % (cached, n_prompt),
           "-" if summary["kv_moved_bytes"] is None else "%.1f MB" % (summary["kv_moved_bytes"] / 1e6)]
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    print("| " + " | ".join(row) + " |")
    for e in summary["errors"]:
        print("error: " + e, file=sys.stderr)
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
