#!/usr/bin/env python3
# infill_vs_llama.py - POST /infill of kvtier serve against llama-server on the same GGUF: the same prompt text,
# tokens_evaluated and (greedy, n_predict 16, return_tokens) generated ids, request by request (docs/SERVING.md,
# "Fill in the middle"); then the editor plugins' fields (EDITOR: n_indent, the infill sampler, response_fields) with
# the content and stop_type too, on /infill and on /completion (COMPLETION_EDITOR). The model needs FIM tokens; SmolLM2 and Gemma 3 270M have none, so give them some by id:
#   python3 llama.cpp/gguf-py/gguf/scripts/gguf_new_metadata.py IN.gguf OUT.gguf --special-token-by-id fim_pre 6 \
#       --special-token-by-id fim_suf 7 --special-token-by-id fim_mid 8 [--special-token-by-id fim_sep 5]
# Usage: tools/golden/infill_vs_llama.py --kvtier build/kvtier --llama-server DIR/llama-server -m OUT.gguf -c 4096
#        [-t THREADS of both, 1 by default] [-- FLAGS FOR BOTH, e.g. --spm-infill -b 256]
# Prints SAME / DIFF per request (DIFF with both answers); exit 1 if a prompt differs.
# --speed N: instead, N rounds (the two servers' order alternating) of one FIM request of ~2.5K tokens (a repository
# context of two files, then a prefix made unique per request, a suffix), n_predict 32 with ignore_eos; prints per server
# the prompt sizes, the medians of the prompt and decode rates from the answers' timings, and of the wall time.
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_http  # noqa: E402

CASES = [
    {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n"},
    {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n", "prompt": "return"},
    {"input_prefix": "x = ", "input_suffix": "",
     "input_extra": [{"filename": "util.py", "text": "def helper():\n    return 42\n"}, {"text": "y = 1\n"}]},
    {"input_prefix": ["def f(", 1234, "):"], "input_suffix": "", "prompt": "<fim_pad>"},
    {"input_prefix": "".join("def f%d(x):\n    return x * %d\n\n" % (i, i) for i in range(120)),
     "input_suffix": "".join("print(f%d(2))\n" % i for i in range(80)),
     "input_extra": [{"filename": "m%d.py" % k, "text": "".join("A%d_%d = %d\n" % (k, i, i) for i in range(200))}
                     for k in range(3)]},
]

# The editor plugins' requests (llama.vim's fields; the infill sampler, then a greedy temperature so that the answers
# are comparable), on the first cases: the content, ids, stop_type and the keys of the answer must match too.
EDITOR = [
    {"n_predict": 64, "n_indent": 4, "samplers": ["top_k", "top_p", "infill", "temperature"], "top_k": 40,
     "top_p": 0.99, "t_max_prompt_ms": 500, "t_max_predict_ms": 100000, "cache_prompt": True},
    {"n_predict": 64, "n_indent": 1, "samplers": ["top_k", "top_p", "infill", "temperature"], "top_k": 40,
     "top_p": 0.99},
    {"n_predict": 64, "samplers": ["top_k", "infill", "temperature"], "top_k": 10,
     "response_fields": ["content", "tokens", "stop_type", "timings/prompt_n", "truncated", "nope/x"]},
]

# The same fields on /completion (llama-server takes them there too), on prompts whose greedy answers run over lines.
COMPLETION_PROMPTS = [
    "def fibonacci(n):\n    ",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        ",
    "<|im_start|>user\nWrite a Python function that sorts a list, with comments.<|im_end|>\n<|im_start|>assistant\n"
    "```python\ndef",
]
COMPLETION_EDITOR = [
    {"n_indent": 4}, {"n_indent": 8},
    {"samplers": ["top_k", "top_p", "infill", "temperature"], "top_k": 40, "top_p": 0.99},
    {"samplers": ["top_k", "top_p", "infill", "temperature"], "top_k": 40, "top_p": 0.99, "n_indent": 4},
]


def post(port, body, path="/infill"):
    return peer_http.post(port, body, path)


def speed(port, rounds):
    res = {port: [], port + 1: []}
    for rnd in range(rounds):
        for p in (port, port + 1) if rnd % 2 == 0 else (port + 1, port):
            body = {"input_prefix": "# run %d on %d\n" % (rnd, p) +
                    "".join("def f%d(x):\n    return x * %d\n\n" % (i, i) for i in range(60)),
                    "input_suffix": "".join("print(f%d(2))\n" % i for i in range(40)),
                    "input_extra": [{"filename": "m%d.py" % k, "text": "".join("A%d_%d = %d\n" % (k, i, i) for i in range(60))}
                                    for k in range(2)],
                    "n_predict": 32, "temperature": 0, "ignore_eos": True}
            t0 = time.time()
            st, j = post(p, body)
            assert st == 200, (st, j)
            t = j["timings"]
            res[p].append((time.time() - t0, t["prompt_n"], t["prompt_ms"], t["predicted_n"], t["predicted_ms"]))
    for p, name in ((port, "kvtier"), (port + 1, "llama-server")):
        r = res[p]
        print("%-12s prompt_n %s  prompt t/s %.1f  decode t/s %.1f  wall s %.3f (medians of %d)" % (
            name, sorted(set(x[1] for x in r)), statistics.median(x[1] / x[2] * 1e3 for x in r),
            statistics.median(x[3] / x[4] * 1e3 for x in r), statistics.median(x[0] for x in r), len(r)))
    return 0



def main():
    ap = argparse.ArgumentParser()
    peer_http.pair_args(ap, 8391, threads="1", ctx="4096")
    ap.add_argument("--speed", type=int, default=0, help="rounds of the timing run (0: compare the answers)")
    ap.add_argument("rest", nargs="*")
    a = ap.parse_args()
    bad = 0
    with peer_http.server_pair(a.kvtier, a.llama_server, a.m, a.port, a.c, a.t, a.rest):
        if a.speed:
            return speed(a.port, a.speed)
        bodies = [(c, dict(c, n_predict=16, temperature=0, return_tokens=True)) for c in CASES]
        bodies = [("/infill", c, b) for c, b in bodies]
        bodies += [("/infill", dict(c, **e), dict(c, temperature=0, return_tokens=True, **e)) for c in CASES[:3]
                   for e in EDITOR]
        bodies += [("/completion", dict(e, prompt=c), dict(e, prompt=c, n_predict=96, temperature=0, return_tokens=True))
                   for c in COMPLETION_PROMPTS for e in COMPLETION_EDITOR]
        for path, c, b in bodies:
            got = []
            for port in (a.port, a.port + 1):
                st, j = post(port, b, path)
                got.append((st, j.get("prompt"), j.get("tokens_evaluated"), j.get("tokens"), j.get("error"),
                            j.get("content"), j.get("stop_type"), sorted(j) if "response_fields" in b else None))
            same_prompt = got[0][:3] == got[1][:3]
            bad += not same_prompt
            print("%s%s %s %s %s" % ("SAME" if got[0] == got[1] else "DIFF", "" if same_prompt else " (PROMPT)", path,
                                     got[0][6], json.dumps(c)[:160]))
            if got[0] != got[1]:
                for g in got:
                    print("    %r" % (g,))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
