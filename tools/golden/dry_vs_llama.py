#!/usr/bin/env python3
# dry_vs_llama.py - llama.cpp's DRY penalty in kvtier serve against llama-server on the same GGUF (docs/SERVING.md,
# "Samplers"): greedy /completion requests (temperature 0, so that the answers are comparable; DRY acts before the
# temperature) on prompts that invite repetition, each under several DRY settings and once without DRY. For each
# request: the generated ids of both servers (return_tokens), SAME or the index where they part; and whether DRY
# changed kvtier's answer at all (against the request without DRY), so that a SAME is not a DRY that did nothing.
# Usage: tools/golden/dry_vs_llama.py --kvtier build/kvtier --llama-server DIR/llama-server -m MODEL.gguf [-c 2048]
#        [-t THREADS of both] [-n TOKENS]
# Where the answers part, the script explains the parting: it takes each server's raw log-probabilities of the 20
# likeliest tokens at that step (n_probs, before any sampler), applies DRY to them in Python (the penalties follow from
# the ids alone: llama.cpp's definition, brute force), and says whether each engine's pick is what its own logits give
# ("near-tie": the engines' logits order two candidates differently, the known 3-4% spread of SmolLM2 Q4_1; llama.cpp's
# own logits differ by as much between a prompt batch and a decode step) or not ("DRY DIFFERS": a bug). The same check
# runs on every step of every DRY answer of both engines (the last lines: steps whose pick the definition reproduces). Exit 1 when a prompt is tokenized differently or a parting is not a near-tie.
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_http  # noqa: E402

PROMPTS = [
    "<|im_start|>user\nWrite the word hello twenty times, separated by commas.<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2,",
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat",
    "Shopping list:\n- apples\n- bread\n- milk\n- apples\n- bread\n- milk\n-",
    "Once upon a time, there was a little girl named Lily. She loved to play outside.",
    "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 1\n\ndef h(x):\n",
]

SETTINGS = [
    {},  # no DRY: where plain greedy parts
    {"dry_multiplier": 0.8},  # llama-server's defaults otherwise: base 1.75, allowed 2, last_n 64, "\n" ":" "\"" "*"
    {"dry_multiplier": 2.0, "dry_base": 1.1, "dry_allowed_length": 1, "dry_penalty_last_n": 256},
    {"dry_multiplier": 0.8, "dry_sequence_breakers": [" the", ", 1", "mat."]},  # breakers of several tokens
    {"dry_multiplier": 1.0, "dry_base": 0.5, "dry_allowed_length": 0, "dry_penalty_last_n": 32},  # base < 1: 1.75
    {"dry_multiplier": 0.5, "dry_base": 100.0, "dry_allowed_length": 1},  # the exponent's cap
    {"dry_multiplier": 0.8, "samplers": ["dry", "top_k", "temperature"], "top_k": 5},
    {"dry_multiplier": 0.8, "dry_penalty_last_n": 0},  # off
]


def post(port, body, path="/completion"):
    return peer_http.post(port, body, path)



class Vocab:
    """Token texts and tokenizations from a server (llama-server's /detokenize and /tokenize), cached."""

    def __init__(self, port):
        self.port, self.text, self.toks = port, {}, {}

    def piece(self, t):
        if t not in self.text:
            self.text[t] = post(self.port, {"tokens": [t]}, "/detokenize")[1]["content"]
        return self.text[t]

    def tokenize(self, s):
        if s not in self.toks:
            self.toks[s] = post(self.port, {"content": s}, "/tokenize")[1]["tokens"]
        return self.toks[s]


def restarts(v, t, breakers):
    """llama.cpp's processed breakers for one head token t: the tails (token lists; [] alone) that restart after it."""
    word, out = v.piece(t), []
    for b in breakers:
        b = b.encode()[:40].decode("utf-8", "ignore")
        if not b:
            continue
        if b in word:
            out.append([])
            continue
        for pos in range(len(word)):
            if word[pos] != b[0]:
                continue
            i = 1
            while i < len(b) and pos + i < len(word) and word[pos + i] == b[i]:
                i += 1
            if pos + i == len(word) and i < len(b):
                tail = v.tokenize(b[i:])[:20]
                if tail not in out:
                    out.append(tail)
    return out


def dry_penalties(v, hist, s):
    """The DRY penalty of each token after hist under settings s (llama-server's defaults), by the definition."""
    mult, base = s.get("dry_multiplier", 0.0), s.get("dry_base", 1.75)
    base = 1.75 if base < 1 else base
    allowed, last_n = s.get("dry_allowed_length", 2), min(s.get("dry_penalty_last_n", 64), 10 ** 9)
    breakers = s.get("dry_sequence_breakers", ["\n", ":", "\"", "*"])
    L = min(len(hist), last_n)
    if mult == 0 or last_n == 0 or L <= allowed:
        return {}
    r = hist[::-1][:L]
    rep_limit = L
    for i in range(L):
        longest = -1
        for tail in restarts(v, r[i], breakers):
            if longest < len(tail) <= i and all(tail[o] == r[i - o - 1] for o in range(len(tail))):
                longest = len(tail)
        if longest >= 0:
            rep_limit = i - longest
            break
    if rep_limit < allowed:
        return {}
    best = {}
    for k in range(1, L):
        n = 0
        while n + k < L and r[n] == r[n + k]:
            n += 1
        n = min(n, rep_limit)
        if n >= allowed:
            best[r[k - 1]] = max(best.get(r[k - 1], -1), n)
    import math
    cap = int(88.7228391 / math.log(base)) if base > 1.000001 else 0
    pen = {}
    for t, n in best.items():
        if [] in restarts(v, t, breakers):
            continue
        e = n - allowed
        pen[t] = mult * base ** (min(e, cap) if cap > 0 else e)
    return pen


def explain(v, prompt, answers, k, s):
    """Each engine's greedy pick at step k from its own raw top-20 of that step (the answers' n_probs: llama.cpp's logits
    differ between a prompt batch and a decode step, so a recomputation would not do) with the Python DRY applied over
    the shared history, and the gap to the runner-up."""
    hist = v.tokenize(prompt) + answers[0]["tokens"][:k]
    pen = dry_penalties(v, hist, s)
    picks = []
    for j in answers:
        top = j["completion_probabilities"][k]["top_logprobs"]
        scored = sorted(((x["logprob"] - pen.get(x["id"], 0.0), x["id"]) for x in top), reverse=True)
        picks.append((scored[0][1], scored[0][0] - scored[1][0]))
    return picks


def consistent(v, prompt, j, s):
    """Steps of one answer whose pick is the argmax of that step's raw top-20 after the Python DRY, and the steps
    checked (a pick outside the top 20, or a gap under 1e-4 nats, is not checked)."""
    ok = n = 0
    base = v.tokenize(prompt)
    for i, t in enumerate(j["tokens"]):
        top = j["completion_probabilities"][i]["top_logprobs"]
        pen = dry_penalties(v, base + j["tokens"][:i], s)
        scored = sorted(((x["logprob"] - pen.get(x["id"], 0.0), x["id"]) for x in top), reverse=True)
        if t not in [x["id"] for x in top] or scored[0][0] - scored[1][0] < 1e-4:
            continue
        n += 1
        ok += scored[0][1] == t
    return ok, n


def main():
    ap = argparse.ArgumentParser()
    peer_http.pair_args(ap, 8395, ctx="2048")
    ap.add_argument("-n", type=int, default=96, help="tokens per answer")
    a = ap.parse_args()
    bad = same = total = acted = 0
    steps = [[0, 0], [0, 0]]  # per engine: steps whose pick the Python DRY reproduces, steps checked
    with peer_http.server_pair(a.kvtier, a.llama_server, a.m, a.port, a.c, a.t):
        vocab = Vocab(a.port + 1)
        for p in PROMPTS:
            plain = None
            for s in SETTINGS:
                body = dict(s, prompt=p, n_predict=a.n, temperature=0, return_tokens=True, cache_prompt=False,
                            n_probs=20)
                got, answers = [], []
                for port in (a.port, a.port + 1):
                    st, j = post(port, body)
                    if st != 200:
                        sys.exit("HTTP %d from port %d: %s" % (st, port, json.dumps(j)[:300]))
                    got.append((j.get("tokens_evaluated"), j.get("tokens", [])))
                    answers.append(j)
                if got[0][0] != got[1][0]:
                    bad += 1
                if s:
                    for e, j in enumerate(answers):
                        ok, n = consistent(vocab, p, j, s)
                        steps[e][0] += ok
                        steps[e][1] += n
                k = peer_http.parted(got[0][1], got[1][1])
                why = ""
                if k is not None and k < min(len(got[0][1]), len(got[1][1])):
                    picks = explain(vocab, p, answers, k, s)
                    ok = picks[0][0] == got[0][1][k] and picks[1][0] == got[1][1][k]
                    why = ("near-tie (gaps %.3f / %.3f nats after DRY)" % (picks[0][1], picks[1][1]) if ok else
                           "DRY DIFFERS: picks %r, answers %d / %d" % (picks, got[0][1][k], got[1][1][k]))
                    bad += not ok
                if plain is None:
                    plain = got[0][1]
                    changed = "-"
                else:
                    changed = "DRY acted" if got[0][1] != plain else "as without DRY"
                    acted += got[0][1] != plain
                    total += 1
                    same += k is None
                print("%-5s %-14s %-55s %-30s %s" % ("SAME" if k is None else "@%d" % k, changed, json.dumps(s)[:55],
                                                     json.dumps(p)[:30], why))
    print("DRY requests with llama-server's ids: %d of %d (kvtier's answer changed by DRY in %d)" % (same, total, acted))
    for name, (ok, n) in zip(("kvtier", "llama-server"), steps):
        print("%s: %d of %d steps pick the argmax of their own logits after DRY by the definition" % (name, ok, n))
    return 1 if bad or any(ok != n for ok, n in steps) else 0


if __name__ == "__main__":
    sys.exit(main())
