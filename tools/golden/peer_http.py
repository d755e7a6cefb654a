"""peer_http.py - what the scripts that set kvtier serve beside llama-server share (infill_vs_llama.py,
dry_vs_llama.py, tools/bench/dry_cost.py, embd_golden.py): a JSON POST that returns the status and the answer, errors
included, the wait for a server's /health, and the two servers started side by side and stopped."""
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request


def post(port, body, path):
    """POST body as JSON to 127.0.0.1:port/path: (HTTP status, the answer's JSON)."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def pair_args(ap, port, threads="2", ctx=None):
    """The flags every side-by-side script takes: --kvtier, --llama-server, -m, -t (threads of both servers), --port
    (kvtier's; llama-server's the next one) and, when ctx is given, -c (the context of both)."""
    ap.add_argument("--kvtier", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("-m", required=True)
    if ctx is not None:
        ap.add_argument("-c", default=ctx)
    ap.add_argument("-t", default=threads, help="threads of both servers")
    ap.add_argument("--port", type=int, default=port)


def parted(a, b):
    """The first index where the sequences a and b differ (the shorter one's length when one is the other's prefix);
    None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def wait_ready(port, proc):
    """Until GET /health answers 200 (two minutes at most); exits when the server process ended."""
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit("a server exited at start (port %d)" % port)
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("a server did not start (port %d)" % port)


@contextlib.contextmanager
def server_pair(kvtier, llama_server, model, port, ctx, threads, extra=()):
    """kvtier serve on port and llama-server on port + 1 (one slot), the same model, context, threads and extra flags,
    both ready; stopped on leaving."""
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(os.path.abspath(llama_server)))
    procs = [subprocess.Popen([kvtier, "serve", "-m", model, "--port", str(port), "-c", str(ctx), "-t", str(threads),
                               *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen([llama_server, "-m", model, "--port", str(port + 1), "-c", str(ctx), "-np", "1", "-t",
                               str(threads), *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
    try:
        for i, p in enumerate(procs):
            wait_ready(port + i, p)
        yield
    finally:
        for p in procs:
            p.terminate()
            p.wait()
