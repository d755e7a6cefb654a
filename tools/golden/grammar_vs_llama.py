#!/usr/bin/env python3
# grammar_vs_llama.py - constrained sampling in kvtier serve against llama-server on the same GGUF (docs/SERVING.md,
# "Grammars and JSON schemas"): greedy requests (temperature 0) with a GBNF `grammar`, a `json_schema`, or a chat
# `response_format`, on /completion and /v1/chat/completions. For each case: both answers, SAME or the token index
# where they part; whether kvtier's answer follows the constraint (a JSON answer parsed and checked against the case's
# own test; a grammar answer against its Python regular expression); and where the answers part, why.
# Usage: tools/golden/grammar_vs_llama.py --kvtier build/kvtier --llama-server DIR/llama-server -m MODEL.gguf
#        [-c 2048] [-t THREADS of both] [-n TOKENS]
# A parting is explained from each engine's raw log-probabilities of its 20 likeliest tokens at that step (n_probs,
# before any sampler): both engines pick the likeliest token their grammar allows, so if engine A picked x and B
# picked y, and B's own logits put x above y, B's grammar refused x where A's allowed it ("GRAMMAR DIFFERS": a bug,
# exit 1) unless the two logits are within --tie nats of each other; if the engines order x and y differently, it is a
# near-tie of their logits (the known 3-4% spread of SmolLM2 Q4_1), not a grammar matter. An answer cut by the token
# limit is checked as far as it goes only by the parting (not for validity).
# The chat cases are not like for like: llama-server's chat endpoint (llama.cpp's chat auto-parser, this version)
# builds its response_format grammar as optional space, then the schema's JSON or the same inside a ```json fence,
# then optional space, and strips the fence from the content; kvtier's is the schema's JSON alone (llama-server's
# /completion json_schema rule). A chat parting where llama-server took the fence is reported as such.
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_http  # noqa: E402


def chat(q):
    return "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n" % q


def is_obj(keys):
    return lambda v: isinstance(v, dict) and all(k in v for k in keys)


PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
          "required": ["name", "age"]}
CITY = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Berlin"]},
                                         "population": {"type": "number"}, "capital": {"type": "boolean"}},
        "required": ["city", "population", "capital"], "additionalProperties": False}

# (name, path, body fields, check of kvtier's answer text: a regular expression (full match) or a JSON predicate)
CASES = [
    ("yes/no", "/completion", {"prompt": chat("Is the sky blue? Answer yes or no."),
                               "grammar": 'root ::= "yes" | "no"'}, re.compile(r"yes|no")),
    ("list of three", "/completion", {"prompt": chat("Name three fruits."),
                                      "grammar": 'root ::= ("- " [a-zA-Z ]+ "\\n"){3}'},
     re.compile(r"(- [a-zA-Z ]+\n){3}")),
    ("arithmetic", "/completion", {"prompt": "The sum of twelve and seven, written as digits: ",
                                   "grammar": 'root ::= expr\nexpr ::= term (("+" | "-") term)*\n'
                                              'term ::= [0-9]+ | "(" expr ")"'},
     re.compile(r"[0-9+\-()]+")),
    ("date", "/completion", {"prompt": chat("When did the Berlin wall fall? Give the date."),
                             "grammar": 'root ::= [0-9]{4} "-" [0-1] [0-9] "-" [0-3] [0-9]'},
     re.compile(r"[0-9]{4}-[01][0-9]-[0-3][0-9]")),
    ("non-ascii", "/completion", {"prompt": chat("Write a greeting in French."),
                                  "grammar": 'root ::= [A-Za-zÀ-ÿ ,!]+ "."'},
     re.compile(r"[A-Za-zÀ-ÿ ,!]+\.")),
    ("schema person", "/completion", {"prompt": chat("Describe a fictional person as JSON with name, age and tags."),
                                      "json_schema": PERSON}, is_obj(["name", "age"])),
    ("schema {}", "/completion", {"prompt": chat("Give a JSON object describing a cat."), "json_schema": {}},
     lambda v: isinstance(v, dict)),
    ("chat json_object", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Give a JSON object describing a dog."}],
      "response_format": {"type": "json_object"}}, lambda v: isinstance(v, dict)),
    ("chat json_schema", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Which is the capital of France? Answer as JSON."}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}}},
     lambda v: is_obj(["city", "population", "capital"])(v) and v["city"] in ("Paris", "London", "Berlin") and
     set(v) <= {"city", "population", "capital"}),
    ("chat schema enum array", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "List two primary colours as JSON."}],
      "json_schema": {"type": "array", "items": {"enum": ["red", "yellow", "blue"]}, "minItems": 2,
                      "maxItems": 2}},
     lambda v: isinstance(v, list) and len(v) == 2 and all(x in ("red", "yellow", "blue") for x in v)),
]


def text_of(path, j):
    return j["choices"][0]["message"]["content"] if path.startswith("/v1/") else j["content"]


def follows(check, text):
    if isinstance(check, re.Pattern):
        return check.fullmatch(text) is not None
    try:
        return bool(check(json.loads(text)))
    except (ValueError, KeyError, TypeError):
        return False


def main():
    ap = argparse.ArgumentParser()
    peer_http.pair_args(ap, 8495, ctx="2048")
    ap.add_argument("-n", type=int, default=96, help="tokens per answer")
    ap.add_argument("--tie", type=float, default=0.5, help="nats under which two logits are a near-tie")
    a = ap.parse_args()
    same = bad = invalid = 0
    with peer_http.server_pair(a.kvtier, a.llama_server, a.m, a.port, a.c, a.t):
        for name, path, fields, check in CASES:
            body = dict(fields, temperature=0, cache_prompt=False, seed=1)
            if path == "/completion":
                body.update(n_predict=a.n, return_tokens=True, n_probs=20)
            else:
                body.update(max_tokens=a.n, logprobs=True, top_logprobs=20)
            answers = []
            for port in (a.port, a.port + 1):
                st, j = peer_http.post(port, body, path)
                if st != 200:
                    sys.exit("%s: HTTP %d from port %d: %s" % (name, st, port, json.dumps(j)[:300]))
                answers.append(j)
            texts = [text_of(path, j) for j in answers]
            cut = (answers[0].get("stop_type") == "limit" if path == "/completion"
                   else answers[0]["choices"][0]["finish_reason"] == "length")
            ok = cut or follows(check, texts[0])
            invalid += not ok
            if path == "/completion":
                toks = [j["tokens"] for j in answers]
                tops = [[{x["id"]: x["logprob"] for x in p["top_logprobs"]} for p in j["completion_probabilities"]]
                        for j in answers]
            else:  # the chat answer's tokens by their bytes (logprobs.content), the alternatives by text
                toks = [[tuple(c["bytes"]) for c in j["choices"][0]["logprobs"]["content"]] for j in answers]
                tops = [[{tuple(x["bytes"]): x["logprob"] for x in c["top_logprobs"]}
                         for c in j["choices"][0]["logprobs"]["content"]] for j in answers]
            k = peer_http.parted(toks[0], toks[1])
            why = ""
            if k is None:
                same += 1
            elif k < len(toks[0]) and k < len(toks[1]):
                x, y = toks[0][k], toks[1][k]
                lk, ll = tops[0][k], tops[1][k]  # kvtier's and llama-server's raw top 20 at step k
                # B refused A's pick when B's own logits rank it above B's pick by more than the tie margin
                refused = [e for e, (mine, other, top) in enumerate(((x, y, lk), (y, x, ll)))
                           if other in top and mine in top and top[other] > top[mine] + a.tie]
                if path != "/completion":  # (not like for like: above)
                    why = ("llama-server's chat grammar: the ```json fence (its content strips it)"
                           if k == 0 and bytes(y).startswith(b"`") else
                           "llama-server's chat grammar (space around the JSON, the fence) is another language%s" %
                           (" (the texts are the same)" if texts[0] == texts[1] else ""))
                elif refused:
                    bad += 1
                    why = "GRAMMAR DIFFERS: %s refused the other's pick" % " and ".join(
                        ("kvtier", "llama-server")[e] for e in refused)
                else:
                    why = "near-tie (kvtier %s, llama-server %s)" % (
                        " ".join("%.3f" % lk.get(t, float("nan")) for t in (x, y)),
                        " ".join("%.3f" % ll.get(t, float("nan")) for t in (x, y)))
            else:
                why = "one is a prefix of the other (lengths %d, %d)" % (len(toks[0]), len(toks[1]))
            print("%-24s %-22s %-6s %s%s" % (name, path, "SAME" if k is None else "at %d" % k,
                                             "cut" if cut else "valid" if ok else "INVALID", "  " + why if why else ""))
            print("    kvtier:       %s" % json.dumps(texts[0])[:160])
            if k is not None:
                print("    llama-server: %s" % json.dumps(texts[1])[:160])
    print("%d of %d cases the same answer; %d kvtier answers not following their constraint; %d grammar differences"
          % (same, len(CASES), invalid, bad))
    return 1 if bad or invalid else 0


if __name__ == "__main__":
    sys.exit(main())
