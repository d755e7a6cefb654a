#!/usr/bin/env python3
"""embd_golden.py - llama-server's embeddings of a few inputs, the golden file of serve_test.py's t_embd_llama.

What: starts llama-server (the peer llama.cpp, outside this repo) with --embeddings --pooling POOL on MODEL, asks
  POST /v1/embeddings for each input and writes, as JSON: the model's file name, the pooling, llama-server's
  prompt_tokens per input and its vectors (unit length: its default embd_normalize 2), 9 significant digits each.

  llama.cpp's own vectors move between CPUs (its AVX2 and AVX-512 kernels round differently: 2.4e-3 on the second
  input between an AMD EPYC Zen 3, AVX2, and an Intel Xeon with AVX-512), so the file keeps one set per CPU kind:
  --add-cpu NAME adds this machine's vectors to an existing file under "alternates" (serve_test accepts kvtier within
  1e-4 of any set: kvtier follows llama.cpp's rounding on each ISA, 6e-8 on the Intel Xeon).

How:
  tools/golden/embd_golden.py [--model M.gguf] [--pooling mean] [-o tests/data/smollm2.embd.json] [--add-cpu NAME]
  Environment: LLAMA_BUILD_DIR, the llama.cpp build holding bin/llama-server and its libraries [/work/peer/build]
  (tools/peer/build_peer.sh). Settings: -c 512 -t 2, llama-server's defaults otherwise (F16 KV cache).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_http  # noqa: E402

INPUTS = ["Hello world", "The capital of France is Paris, and the capital of Germany is Berlin."]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--pooling", default="mean")
    ap.add_argument("-o", "--out", default="tests/data/smollm2.embd.json")
    ap.add_argument("--add-cpu", help="add this machine's vectors to OUT's alternates under this CPU name")
    ap.add_argument("--cpu", default="", help="the CPU of a new file's first set (its name in test messages)")
    a = ap.parse_args()
    build = os.environ.get("LLAMA_BUILD_DIR", "/work/peer/build")
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "bin"))
    port = free_port()
    p = subprocess.Popen([os.path.join(build, "bin", "llama-server"), "-m", a.model, "--embeddings", "--pooling",
                          a.pooling, "--port", str(port), "-c", "512", "-t", "2"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        peer_http.wait_ready(port, p)
        out = {"model": os.path.basename(a.model), "pooling": a.pooling, "cpu": a.add_cpu or a.cpu,
               "source": "llama-server --embeddings "
               "--pooling %s -c 512 -t 2, POST /v1/embeddings (tools/golden/embd_golden.py)" % a.pooling,
               "inputs": INPUTS, "prompt_tokens": [], "embeddings": []}
        for text in INPUTS:
            r = post(port, "/v1/embeddings", {"input": text})
            out["prompt_tokens"].append(r["usage"]["prompt_tokens"])
            out["embeddings"].append([float("%.9g" % x) for x in r["data"][0]["embedding"]])
    finally:
        p.terminate()
        p.wait()
    if a.add_cpu:
        with open(a.out) as f:
            old = json.load(f)
        if old["inputs"] != INPUTS or old["pooling"] != a.pooling:
            raise SystemExit("%s holds other inputs or another pooling" % a.out)
        old.setdefault("alternates", []).append({"cpu": a.add_cpu, "embeddings": out["embeddings"]})
        out = old
    with open(a.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote %s: %d inputs, %d floats each" % (a.out, len(INPUTS), len(out["embeddings"][0])))


if __name__ == "__main__":
    main()
