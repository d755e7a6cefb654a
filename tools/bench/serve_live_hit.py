#!/usr/bin/env python3
"""serve_live_hit.py - the time to first token of a prefix-cache hit that arrives while the first request with its
prompt still runs (issue 13, docs/SPARSE.md "Under serve"), against one running `kvtier serve` (-np 2 or more).

A "holder" request of the prompt streams --holder-tokens tokens (ignore_eos); once its first token came and
--settle seconds passed, one "hit" request of the same prompt (max_tokens 1) is sent and timed (send to first
streamed token); then the holder's next --after tokens are timed (its median gap before the hit and after it: what
taking its summaries costs its decode) and it is dropped (its connection closed). Only the first hit after a fresh holder is
measured: a hit that ends leaves its own key summaries to the prefix cache, so later hits would share those.
Prints one JSON object: ttft_ms of the hit, its cached prompt tokens, the holder's tokens before the hit, and the
deltas of the prefix-cache key counters of /metrics over the hit (kvtier_prefix_key_*).

Only the Python standard library is used. Example (LIVE=1 tools/bench/serve_hit.sh runs it per server):
  tools/bench/serve_live_hit.py --url http://127.0.0.1:18616 --prompt-file /var/tmp/kvtier-serve-sparse-p1/prompts.json
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse

from serve_bench import sse_events


def conn(url, timeout):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)


def metrics(url):
    c = conn(url, 30)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode("utf-8", "replace")
    c.close()
    out = {}
    for line in body.splitlines():
        if line.startswith("kvtier_prefix_key"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


def stream(url, prompt, max_tokens, on_token, stop):
    """Streams one completion; on_token(n) after each token chunk; returns when done or when stop is set."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    c = conn(url, 600)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read(300).decode("utf-8", "replace")))
    n, usage = 0, None
    for ev in sse_events(r):
        if stop and stop.is_set():
            break
        usage = ev.get("usage") or usage
        for ch in ev.get("choices") or []:
            if ch.get("text") is not None:
                n += 1
                on_token(n)
    c.close()
    return usage


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--prompt-file", required=True, help="a JSON list of prompts (strings or id lists): the first is used")
    ap.add_argument("--holder-tokens", type=int, default=1500)
    ap.add_argument("--settle", type=float, default=0.5, help="seconds between the holder's first token and the hit")
    ap.add_argument("--after", type=int, default=200, help="holder tokens timed after the hit (its TPOT before and after)")
    a = ap.parse_args()
    prompt = json.load(open(a.prompt_file))[0]
    first, holder_n, stop, times = threading.Event(), [0], threading.Event(), []

    def tok(n):
        holder_n[0] = n
        times.append(time.monotonic())
        first.set()

    err = []

    def hold():
        try:
            stream(a.url, prompt, a.holder_tokens, tok, stop)
        except (OSError, RuntimeError, http.client.HTTPException) as ex:
            err.append(str(ex))
            first.set()

    th = threading.Thread(target=hold, daemon=True)
    th.start()
    if not first.wait(600) or err:
        sys.exit("holder failed: %s" % (err[0] if err else "no token in 600 s"))
    time.sleep(a.settle)
    m0 = metrics(a.url)
    at = holder_n[0]
    t_first = []
    t0 = time.monotonic()
    usage = stream(a.url, prompt, 1, lambda n: t_first.append(time.monotonic()) if not t_first else None, None)
    t_end = time.monotonic()
    m1 = metrics(a.url)
    while th.is_alive() and sum(t > t_end for t in times) < a.after + 1:
        time.sleep(0.01)
    stop.set()
    if not t_first:
        sys.exit("the hit streamed no token")
    det = (usage or {}).get("prompt_tokens_details") or {}
    before = [y - x for x, y in zip(times, times[1:]) if y < t0][1:]  # (its first gap left out)
    after = [y - x for x, y in zip(times, times[1:]) if x > t_end][:a.after]
    med = lambda v: sorted(v)[len(v) // 2] * 1e3 if v else float("nan")
    out = {"ttft_ms": (t_first[0] - t0) * 1e3, "cached": det.get("cached_tokens", 0), "holder_tokens_before": at,
           "holder_running": th.is_alive(), "holder_tpot_before_ms": med(before), "holder_tpot_after_ms": med(after),
           "holder_gaps_after": len(after)}
    for k in sorted(set(m0) | set(m1)):
        if k.endswith("_total"):
            out[k] = m1.get(k, 0.0) - m0.get(k, 0.0)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
