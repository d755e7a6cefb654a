#!/usr/bin/env python3
# dry_cost.py - what DRY adds to a request, kvtier serve beside llama-server on the same GGUF (docs/BENCHMARKS.md,
# "DRY: what a request pays"): one-token /completion requests on a cached prompt, without DRY, with DRY and the default
# breakers, and with the breakers sent as SillyTavern sends them (the default list, in every request); the median of
# 7 after one warm-up, per server. llama.cpp builds its breakers' table over the whole vocabulary for every request;
# kvtier keeps the last set's table. Then the decode rate (timings.predicted_per_second, median of 3 after a warm-up)
# of 128 sampled tokens (temperature 0.8, seed 1, ignore_eos) without DRY, with DRY, and with adaptive-p (target 0.3).
# Usage: tools/bench/dry_cost.py --kvtier build/kvtier --llama-server DIR/llama-server -m MODEL.gguf [-t 2]
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
import peer_http  # noqa: E402

CASES = [("no DRY", {}), ("DRY, default breakers", {"dry_multiplier": 0.8}),
         ("DRY, the list sent each time", {"dry_multiplier": 0.8, "dry_sequence_breakers": ["\n", ":", "\"", "*"]})]


def main():
    ap = argparse.ArgumentParser()
    peer_http.pair_args(ap, 8397)
    a = ap.parse_args()
    with peer_http.server_pair(a.kvtier, a.llama_server, a.m, a.port, 2048, a.t):
        body = {"prompt": "Hello there, how are you today?", "n_predict": 1, "temperature": 0, "cache_prompt": True}
        print("| request | kvtier ms | llama-server ms |\n| --- | ---: | ---: |")
        for name, extra in CASES:
            med = []
            for port in (a.port, a.port + 1):
                ts = []
                for k in range(8):
                    t0 = time.time()
                    st, j = peer_http.post(port, dict(body, **extra), "/completion")
                    assert st == 200, j
                    if k:
                        ts.append((time.time() - t0) * 1e3)
                med.append(statistics.median(ts))
            print("| %s | %.1f | %.1f |" % (name, med[0], med[1]))
        body = {"prompt": "Once upon a time", "n_predict": 128, "temperature": 0.8, "seed": 1, "ignore_eos": True}
        print("\n| 128 sampled tokens | kvtier t/s | llama-server t/s |\n| --- | ---: | ---: |")
        for name, extra in (("plain", {}), ("DRY", {"dry_multiplier": 0.8}),
                            ("adaptive-p", {"samplers": ["top_k", "top_p", "min_p", "temperature", "adaptive_p"],
                                            "adaptive_target": 0.3})):
            med = []
            for port in (a.port, a.port + 1):
                rates = []
                for k in range(4):
                    st, j = peer_http.post(port, dict(body, **extra), "/completion")
                    assert st == 200, j
                    if k:
                        rates.append(j["timings"]["predicted_per_second"])
                med.append(statistics.median(rates))
            print("| %s | %.1f | %.1f |" % (name, med[0], med[1]))


if __name__ == "__main__":
    main()
