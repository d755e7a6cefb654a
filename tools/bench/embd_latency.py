#!/usr/bin/env python3
"""embd_latency.py - /v1/embeddings latency of `kvtier serve --embeddings` and llama-server, one client.

Starts each server in turn (-c 512 -t 2, pooling mean) on SmolLM2 and times 12 requests of a 15-token and an 84-token
input; prints the median of the last 10 (ms). Run it quiet: `cd /tmp && python3 /work/notes/quiet.py python3
REPO/tools/bench/embd_latency.py` (docs/SERVING.md, "Embeddings").
Environment: KVTIER [build/kvtier of this repo], LLAMA_BUILD_DIR [/work/peer/build], MODEL [SmolLM2 in the cache].
"""
import json
import os
import statistics
import subprocess
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
M = os.environ.get("MODEL", os.path.expanduser("~/.cache/kvtier/SmolLM2-135M-Instruct.Q4_1.gguf"))
KVTIER = os.environ.get("KVTIER", os.path.join(HERE, "..", "..", "build", "kvtier"))
LLAMA = os.environ.get("LLAMA_BUILD_DIR", "/work/peer/build")
long = "Once upon a time, in a land far away, there lived a small dragon who loved to read books about the stars and the sea." * 3
def run(cmd, env, port):
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            if urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1).status == 200: break
        except OSError: time.sleep(0.1)
    res = {}
    for name, text in (("15 tok", "The capital of France is Paris, and the capital of Germany is Berlin."), ("84 tok", long)):
        ts = []
        for i in range(12):
            t0 = time.perf_counter()
            urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:%d/v1/embeddings" % port, data=json.dumps({"input": text}).encode())).read()
            ts.append((time.perf_counter() - t0) * 1000)
        res[name] = statistics.median(ts[2:])
    p.terminate(); p.wait()
    return res
print("kvtier", run([KVTIER, "serve", "-m", M, "--port", "18451", "-c", "512", "-t", "2", "--embeddings"], os.environ, 18451))
print("llama-server", run([os.path.join(LLAMA, "bin", "llama-server"), "-m", M, "--embeddings", "--pooling", "mean", "--port", "18452", "-c", "512", "-t", "2"], dict(os.environ, LD_LIBRARY_PATH=os.path.join(LLAMA, "bin")), 18452))
