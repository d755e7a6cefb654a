"""peer_http.py - what the scripts that set kvtier serve beside llama-server share (infill_vs_llama.py,
dry_vs_llama.py): a JSON POST that returns the status and the answer, errors included, and the wait for a server's
/health."""
import json
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
