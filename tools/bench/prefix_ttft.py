#!/usr/bin/env python3
"""prefix_ttft.py - the client of prefix_ttft.sh (standard library only).

  prefix_ttft.py ttft PORT N_PROMPT SEED
      streams one /v1/completions of N_PROMPT token ids (seeded) with max_tokens 4 and prints
      "ttft_ms cached_tokens".
  prefix_ttft.py gap PORT N_PROMPT SEED N_DECODE DELAY_S
      starts request X (a 32-token prompt of its own, N_DECODE tokens, ignore_eos) and, DELAY_S after X's
      first token, request Y (the N_PROMPT-token prompt of SEED). Prints, for X, the largest gap between
      two consecutive tokens and the 95th percentile of its gaps while Y is admitted (from Y's send to
      Y's first token plus 0.2 s), its p95 gap over the whole run, and Y's TTFT and cached tokens:
      "max_gap_ms p95_gap_ms p95_all_ms y_ttft_ms y_cached".
"""
import http.client
import json
import random
import sys
import threading
import time

from serve_bench import sse_events


def ids(n, seed):
    r = random.Random(seed)
    return [r.randrange(100, 40000) for _ in range(n)]


def stream(port, prompt, max_tokens, times, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True, "temperature": 0,
            "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    out["sent"] = t0
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = c.getresponse()
    if resp.status != 200:
        raise SystemExit("HTTP %d: %s" % (resp.status, resp.read()[:300]))
    cached = 0
    for j in sse_events(resp):
        if j.get("usage"):
            cached = (j["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", cached)
        if j.get("timings") and "cache_n" in j["timings"]:  # llama-server
            cached = j["timings"]["cache_n"]
        if j.get("choices") and j["choices"][0].get("text") is not None and not j.get("usage"):
            times.append(time.monotonic())
    out["cached"] = cached
    c.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    n, seed = int(sys.argv[3]), int(sys.argv[4])
    if mode == "ttft":
        t, o = [], {}
        stream(port, ids(n, seed), 4, t, o)
        print("%.1f %d" % ((t[0] - o["sent"]) * 1e3, o["cached"]))
        return
    n_dec, delay = int(sys.argv[5]), float(sys.argv[6])
    tx, ox, ty, oy = [], {}, [], {}
    x = threading.Thread(target=stream, args=(port, ids(32, seed + 1000), n_dec, tx, ox))
    x.start()
    while not tx:
        time.sleep(0.01)
    time.sleep(delay)
    stream(port, ids(n, seed), 4, ty, oy)
    x.join()
    lo, hi = oy["sent"], ty[0] + 0.2
    gaps = [(b - a) * 1e3 for a, b in zip(tx, tx[1:]) if b >= lo and a <= hi]
    all_gaps = [(b - a) * 1e3 for a, b in zip(tx, tx[1:])]
    print("%.1f %.1f %.1f %.1f %d" % (max(gaps), pct(gaps, 95), pct(all_gaps, 95), (ty[0] - oy["sent"]) * 1e3,
                                      oy["cached"]))


if __name__ == "__main__":
    main()
