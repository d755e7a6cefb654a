#!/usr/bin/env python3
# grammar_cost.py - what a grammar costs per generated token, kvtier serve beside llama-server on the same GGUF
# (docs/BENCHMARKS.md, "Grammars beside llama-server"): greedy /completion requests of N tokens on a chat prompt asking
# for JSON, without a constraint (ignore_eos, so that N tokens are made) and with json_schema {} (any JSON object) and a
# schema with properties; decode tokens per second from each server's own timings (predicted_per_second), median of
# --reps runs, alternating. A constrained answer ends when its JSON does: its tokens per second are over the tokens made.
# Usage: tools/bench/grammar_cost.py --kvtier build/kvtier --llama-server DIR/llama-server -m MODEL.gguf [-t 2]
#        [-n 128] [--reps 3]
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
import peer_http  # noqa: E402

PROMPT = "<|im_start|>user\nDescribe a cat as a JSON object with many fields.<|im_end|>\n<|im_start|>assistant\n"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "colours": {"type": "array", "items": {"type": "string"}},
                                           "indoor": {"type": "boolean"}, "weight_kg": {"type": "number"}},
          "required": ["name", "age", "colours", "indoor", "weight_kg"]}
CASES = [("none", {"ignore_eos": True}), ("json_schema {}", {"json_schema": {}}),
         ("json_schema with properties", {"json_schema": SCHEMA})]


def main():
    ap = argparse.ArgumentParser()
    peer_http.pair_args(ap, 8595)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    res = {}
    with peer_http.server_pair(a.kvtier, a.llama_server, a.m, a.port, "2048", a.t):
        for _ in range(a.reps):
            for name, extra in CASES:
                for e, port in enumerate((a.port, a.port + 1)):
                    body = dict(extra, prompt=PROMPT, n_predict=a.n, temperature=0, cache_prompt=False)
                    st, j = peer_http.post(port, body, "/completion")
                    if st != 200:
                        sys.exit("HTTP %d from port %d: %s" % (st, port, j))
                    res.setdefault((name, e), []).append((j["timings"]["predicted_per_second"],
                                                          j["timings"]["predicted_n"]))
    print("| constraint | kvtier t/s (tokens) | llama-server t/s (tokens) | kvtier / llama-server |")
    print("|---|---:|---:|---:|")
    for name, _ in CASES:
        k = statistics.median(x for x, _ in res[(name, 0)])
        ll = statistics.median(x for x, _ in res[(name, 1)])
        print("| %s | %.1f (%d) | %.1f (%d) | %.2f |" % (name, k, res[(name, 0)][0][1], ll, res[(name, 1)][0][1],
                                                         k / ll))


if __name__ == "__main__":
    main()
