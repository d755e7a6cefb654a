#!/usr/bin/env python3
"""serve_hit_check.py - a prompt served twice (a miss, then a prefix-cache hit) must give `kvtier generate`'s greedy text.

For each cut of a text (its first C characters), the cut is sent twice to one `kvtier serve` and once to `kvtier
generate` with the same engine flags; the three texts must be equal. Prints each cut's prompt tokens, the cached tokens
of both requests and the prefix cache's query-window counters (asyncspade, docs/SERVING.md). Exit 1 on a difference.
With --live the first request is a holder that streams N more tokens (ignore_eos) and the second is sent while it
runs (after its first token): the hit then takes its key summaries from the running holder (kvtier_prefix_key_live_total);
the holder's text must begin with generate's.

usage: tools/serve_hit_check.py --model M --flags "--sparse-preset keep --sparse-budget 0.125 --kv-block 16"
                                --text FILE --cuts 3000,3007,3013 [--kvtier build/kvtier] [--port 18710] [-n 24]
"""
import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
from serve_bench import sse_events  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvtier", default="build/kvtier")
    ap.add_argument("--model", required=True)
    ap.add_argument("--flags", default="")
    ap.add_argument("--text", required=True)
    ap.add_argument("--cuts", required=True)
    ap.add_argument("--port", type=int, default=18710)
    ap.add_argument("-n", type=int, default=24)
    ap.add_argument("--live", type=int, default=0, metavar="N", help="the first request streams N more tokens as the hit runs")
    a = ap.parse_args()
    flags = a.flags.split()
    text = open(a.text).read()
    srv = subprocess.Popen([a.kvtier, "serve", "-m", a.model, "-t", "2", "-c", "8192", "-np", "2", "--port",
                            str(a.port), "--metrics", *flags], stderr=subprocess.DEVNULL)

    def request(method, path, body=None, want=200):
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=600)
        c.request(method, path, json.dumps(body) if body is not None else None, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != want:
            raise OSError("%s %s: HTTP %d %s" % (method, path, r.status, data[:200]))
        return data

    for _ in range(300):  # the model loads
        try:
            request("GET", "/health")
            break
        except OSError:
            time.sleep(0.1)
    bad = 0
    for cut in [int(x) for x in a.cuts.split(",")]:
        prompt = text[:cut]
        if a.live:
            outs = live_pair(a, prompt, request)
        else:
            outs = [json.loads(request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": a.n, "temperature": 0}))
                    for _ in range(2)]
        texts = [o["choices"][0]["text"] for o in outs]
        cached = [(o["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0) for o in outs]
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            f.write(prompt)
            f.flush()
            g = subprocess.run([a.kvtier, "generate", "-m", a.model, "-t", "2", "-c", "8192", "-f", f.name, "-n", str(a.n),
                                "--temp", "0", "--json", *flags], capture_output=True, text=True)
        if g.returncode != 0:
            print("cut %d: generate failed: %s" % (cut, g.stderr[-400:]))
            bad += 1
            continue
        gt = json.loads(request("POST", "/detokenize", {"tokens": json.loads(g.stdout)["ids"]}))["content"]
        ok = texts[1] == gt and (texts[0].startswith(gt) if a.live else texts[0] == gt)
        bad += not ok
        if not ok:
            print("  generate %r\n  first    %r\n  second   %r" % (gt[:80], texts[0][:80], texts[1][:80]))
        print("cut %d: %d prompt tokens, cached %s: %s %r" % (cut, outs[1]["usage"]["prompt_tokens"], cached,
                                                              "same" if ok else "DIFFERENT", texts[1][:40]))
    print(" ".join(line for line in request("GET", "/metrics").decode().splitlines()
                   if line.startswith(("kvtier_prefix_query", "kvtier_prefix_key"))))
    srv.terminate()
    srv.wait()
    return 1 if bad else 0


def live_pair(a, prompt, request):
    """The holder (streamed, n + live tokens, ignore_eos) and the hit sent after its first token: both responses."""
    first, held, usage = threading.Event(), [], {}

    def hold():
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=600)
        c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": a.n + a.live, "temperature": 0,
                  "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}),
                  {"Content-Type": "application/json"})
        for ev in sse_events(c.getresponse()):
            usage.update(ev.get("usage") or {})
            for ch in ev.get("choices") or []:
                held.append(ch.get("text") or "")
                first.set()
        first.set()
        c.close()

    th = threading.Thread(target=hold)
    th.start()
    first.wait(600)
    hit = json.loads(request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": a.n, "temperature": 0}))
    th.join()
    return [{"choices": [{"text": "".join(held)}], "usage": usage}, hit]


if __name__ == "__main__":
    sys.exit(main())
