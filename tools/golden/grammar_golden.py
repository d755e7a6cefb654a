#!/usr/bin/env python3
# grammar_golden.py - the allowed-token sets of llama.cpp's grammar sampler, recorded for tests/test_grammar.c
# (test_grammar_golden): kvtier's matcher (src/sched/grammar.h) must allow exactly the tokens llama.cpp allows.
#
# For each grammar (llama.cpp's grammars/*.gbnf, and small ones of ours with character classes, negations, {m,n},
# non-ASCII ranges and ".") and a few seeded random walks: at each step llama_sampler_apply of a
# llama_sampler_init_grammar(vocab, text, "root") to every token id (logit 0), the allowed set (logit != -inf)
# recorded as its size and the 64-bit FNV-1a hash of its sorted ids (each as 4 little-endian bytes); then a random
# allowed token that does not end generation is accepted (llama_sampler_accept; only allowed tokens, as llama.cpp
# aborts on others; walk w picks its tokens as choose() mode w % 3: uniform, by first byte, shortest by first
# byte). A walk stops when only end-of-generation tokens are allowed, or after --steps steps (about 40 s in all).
#
# Usage: tools/golden/grammar_golden.py [--lib /work/peer/build/bin/libllama.so]
#        [--vocab tests/data/ggml-vocab-llama-spm.gguf] [--out tests/data/grammar_golden.txt] [--walks 3] [--steps 40]
#        [--grammars DIR] [--debug KVT_IDS_FILE]
# --debug FILE: replays the golden (--out, not rewritten) and, for each step listed in FILE (lines
# `GRAMMAR WALK STEP id id ...`, the allowed ids of another engine, as tests/test_grammar.c writes them with
# KVT_GRAMMAR_GOLDEN_DUMP=FILE), prints the ids only llama.cpp allows and the ids only the other allows, with their
# pieces.
# The committed golden was made with llama.cpp from llama-cpp-python 0.3.36 (its vendor/llama.cpp, built as
# /work/peer/build by tools/peer/build_peer.sh) and tests/data/ggml-vocab-llama-spm.gguf (32000 tokens).
import argparse
import ctypes
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEER = "/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp"

FORMAT = """\
# grammar_golden.txt - llama.cpp's grammar sampler on tests/data/ggml-vocab-llama-spm.gguf, made by
# tools/golden/grammar_golden.py (read by tests/test_grammar.c). Lines:
#   grammar NAME                 a grammar (root rule "root") ...
#   text ESCAPED                 ... its text on one line: \\\\ \\n \\t \\r and \\xHH (other bytes below 0x20, 0x7f)
#   walk SEED                    a random walk from the grammar's start
#   N_ALLOWED HASH CHOSEN_ID     one step: how many token ids the sampler allows (all ids, logit 0 in, != -inf out),
#                                the 64-bit FNV-1a (hex) of the sorted allowed ids as little-endian int32 bytes, and
#                                the id then accepted (-1: none; the walk ends, only end-of-generation was allowed)
# Lines starting with # are comments.
"""

# our own small grammars: char classes, negations, repetitions {m,n}, non-ASCII ranges, ".", alternations
OWN = [
    ("classes", 'root ::= [a-zA-Z_] [a-zA-Z0-9_]* ("." [a-z]+)? " "? [0-9]{1,3}'),
    ("negation", 'root ::= "\\"" ( [^"\\\\\\n] | "\\\\" ["\\\\nt] )* "\\"" ws\nws ::= [ \\t]*'),
    ("repeat", 'root ::= "x" [0-9]{2,4} "-" [a-c]{3} ("," [a-z]{0,2}){1,3} "!"'),
    ("non_ascii", 'root ::= ([A-Za-z\\u00C0-\\u00FF] | [\\u4e00-\\u9fff] | [\\U0001F600-\\U0001F64F] | " ")+ "."'),
    ("dot", 'root ::= "<" .{1,6} ">" .* "|"'),
    ("neg_nonascii", 'root ::= [^a-z\\u00e9\\u4e00-\\u9fff]+ "z"'),
    ("alt_nested", 'root ::= (("ab" | "a" [0-9]) | "b"+ ("c" | [d-f]{2}))* "end"'),
    # complete at every character boundary: end-of-generation against a pending UTF-8 sequence (byte tokens)
    ("utf8_complete", 'root ::= ([a-z] | [\\u00e0-\\u00ff] | [\\u4e00-\\u9fff])*'),
]

PEER_GRAMMARS = ["json", "json_arr", "arithmetic", "list", "chess", "japanese", "c", "english"]


class TokenData(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int32), ("logit", ctypes.c_float), ("p", ctypes.c_float)]


class TokenDataArray(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(TokenData)), ("size", ctypes.c_size_t), ("selected", ctypes.c_int64),
                ("sorted", ctypes.c_bool)]


class ModelParams(ctypes.Structure):  # include/llama.h, struct llama_model_params (this version)
    _fields_ = [("devices", ctypes.c_void_p), ("tensor_buft_overrides", ctypes.c_void_p),
                ("n_gpu_layers", ctypes.c_int32), ("split_mode", ctypes.c_int), ("load_mode", ctypes.c_int),
                ("lazy_mode", ctypes.c_int), ("main_gpu", ctypes.c_int32), ("tensor_split", ctypes.c_void_p),
                ("progress_callback", ctypes.c_void_p), ("progress_callback_user_data", ctypes.c_void_p),
                ("kv_overrides", ctypes.c_void_p), ("vocab_only", ctypes.c_bool), ("check_tensors", ctypes.c_bool),
                ("use_extra_bufts", ctypes.c_bool), ("no_host", ctypes.c_bool), ("no_alloc", ctypes.c_bool),
                ("load_mtp", ctypes.c_bool)]


def load_lib(path):
    libdir = os.path.dirname(os.path.abspath(path))
    os.environ["LD_LIBRARY_PATH"] = libdir + ":" + os.environ.get("LD_LIBRARY_PATH", "")
    for dep in ("libggml-base.so", "libggml-cpu.so", "libggml.so"):  # so that libllama's DT_NEEDED resolve
        p = os.path.join(libdir, dep)
        if os.path.exists(p):
            ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    vp = ctypes.c_void_p
    sigs = {
        "llama_backend_init": (None, []),
        "llama_model_default_params": (ModelParams, []),
        "llama_model_load_from_file": (vp, [ctypes.c_char_p, ModelParams]),
        "llama_model_get_vocab": (vp, [vp]),
        "llama_vocab_n_tokens": (ctypes.c_int32, [vp]),
        "llama_vocab_is_eog": (ctypes.c_bool, [vp, ctypes.c_int32]),
        "llama_token_to_piece": (ctypes.c_int32, [vp, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32,
                                                  ctypes.c_int32, ctypes.c_bool]),
        "llama_sampler_init_grammar": (vp, [vp, ctypes.c_char_p, ctypes.c_char_p]),
        "llama_sampler_apply": (None, [vp, ctypes.POINTER(TokenDataArray)]),
        "llama_sampler_accept": (None, [vp, ctypes.c_int32]),
        "llama_sampler_free": (None, [vp]),
        "llama_model_free": (None, [vp]),
        "llama_log_set": (None, [vp, vp]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib


LOG_CB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
QUIET = LOG_CB(lambda level, text, ud: None)


def fnv1a(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        for b in (i & 0xffffffff).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h


def escape(text):
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7f:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return "".join(out)


def unescape(s):
    b = s.encode("utf-8")
    out = bytearray()
    i = 0
    while i < len(b):
        c = b[i]
        if c == 0x5c and i + 1 < len(b):
            n = chr(b[i + 1])
            if n == "x":
                out.append(int(b[i + 2:i + 4], 16))
                i += 4
                continue
            out.append({"\\": 0x5c, "n": 0x0a, "t": 0x09, "r": 0x0d}[n])
            i += 2
            continue
        out.append(c)
        i += 1
    return bytes(out)


class Llama:
    def __init__(self, lib_path, vocab_path):
        self.lib = load_lib(lib_path)
        self.lib.llama_log_set(ctypes.cast(QUIET, ctypes.c_void_p), None)
        self.lib.llama_backend_init()
        mp = self.lib.llama_model_default_params()
        mp.vocab_only = True
        self.model = self.lib.llama_model_load_from_file(vocab_path.encode(), mp)
        if not self.model:
            sys.exit("cannot load %s" % vocab_path)
        self.vocab = self.lib.llama_model_get_vocab(self.model)
        self.n = self.lib.llama_vocab_n_tokens(self.vocab)
        self.eog = [bool(self.lib.llama_vocab_is_eog(self.vocab, i)) for i in range(self.n)]
        self.pieces = [self.piece(i) for i in range(self.n)]
        self.arr = (TokenData * self.n)()

    def piece(self, i):
        buf = ctypes.create_string_buffer(256)
        k = self.lib.llama_token_to_piece(self.vocab, i, buf, 256, 0, True)
        return buf.raw[:max(k, 0)]

    def sampler(self, text):
        return self.lib.llama_sampler_init_grammar(self.vocab, text, b"root")

    def allowed(self, smpl):
        for i in range(self.n):
            self.arr[i].id = i
            self.arr[i].logit = 0.0
            self.arr[i].p = 0.0
        cur = TokenDataArray(self.arr, self.n, -1, False)
        self.lib.llama_sampler_apply(smpl, ctypes.byref(cur))
        return sorted(cur.data[i].id for i in range(cur.size) if cur.data[i].logit != float("-inf"))

    def close(self):
        self.lib.llama_model_free(self.model)


def grammars(gdir):
    out = []
    for name in PEER_GRAMMARS:
        p = os.path.join(gdir, name + ".gbnf")
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                out.append((name, f.read()))
        else:
            print("skip %s: no %s" % (name, p), file=sys.stderr)
    return out + OWN


def choose(ll, rng, ids, mode):
    """A random allowed id that does not end generation (-1: none). mode 0: uniform over the ids; 1: a uniform first
    byte of the pieces (a third of the time an ASCII punctuation, space or control one, so that walks leave strings
    and close brackets), then uniform over the ids with that first byte; 2: as 1, then the shortest pieces with that
    first byte (single bytes: partial UTF-8 sequences, structural characters)."""
    non_eog = [i for i in ids if not ll.eog[i]]
    if not non_eog:
        return -1
    if mode == 0:
        return rng.choice(non_eog)
    groups = {}
    for i in non_eog:
        groups.setdefault(ll.pieces[i][0], []).append(i)
    keys = sorted(groups)
    punct = [k for k in keys if k < 0x80 and not chr(k).isalnum()]
    key = rng.choice(punct if punct and rng.random() < 1 / 3 else keys)
    group = groups[key]
    if mode == 2:
        short = min(len(ll.pieces[i]) for i in group)
        group = [i for i in group if len(ll.pieces[i]) == short]
    return rng.choice(group)


def walk(ll, text, seed, steps, mode):
    smpl = ll.sampler(text)
    rng = random.Random(seed)
    rows = []
    for _ in range(steps):
        ids = ll.allowed(smpl)
        chosen = choose(ll, rng, ids, mode)
        rows.append((len(ids), fnv1a(ids), chosen))
        if chosen < 0:
            break
        ll.lib.llama_sampler_accept(smpl, chosen)
    ll.lib.llama_sampler_free(smpl)
    return rows


def make(args, ll):
    lines = [FORMAT.rstrip("\n")]
    n_steps = 0
    for gi, (name, text) in enumerate(grammars(args.grammars)):
        raw = text.encode("utf-8")
        probe = ll.sampler(raw)  # NULL (llama.cpp logs the parse error) or an exception: not recorded
        if not probe:
            print("skip %s: llama.cpp refuses it" % name, file=sys.stderr)
            continue
        ll.lib.llama_sampler_free(probe)
        lines.append("grammar " + name)
        lines.append("text " + escape(text))
        for w in range(args.walks):
            seed = 1000 * (gi + 1) + w
            rows = walk(ll, raw, seed, args.steps, w % 3)
            lines.append("walk %d" % seed)
            lines += ["%d %016x %d" % r for r in rows]
            n_steps += len(rows)
        print("%-12s %d walks" % (name, args.walks), file=sys.stderr)
    data = "\n".join(lines) + "\n"
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(data)
    print("wrote %s: %d bytes, %d steps" % (args.out, len(data.encode()), n_steps), file=sys.stderr)


def parse_golden(path):
    cases = []  # (name, text bytes, [(seed, [(n, hash, chosen)])])
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if line.startswith("grammar "):
                cases.append([line[8:], b"", []])
            elif line.startswith("text "):
                cases[-1][1] = unescape(line[5:])
            elif line.startswith("walk "):
                cases[-1][2].append((int(line[5:]), []))
            else:
                n, h, c = line.split()
                cases[-1][2][-1][1].append((int(n), int(h, 16), int(c)))
    return cases


def debug(args, ll):
    other = {}
    with open(args.debug) as f:
        for line in f:
            p = line.split()
            if len(p) >= 3:
                other[(p[0], int(p[1]), int(p[2]))] = set(int(x) for x in p[3:])
    for name, text, walks in parse_golden(args.out):
        for wi, (seed, rows) in enumerate(walks):
            smpl = ll.sampler(text)
            for si, (n, h, chosen) in enumerate(rows):
                ids = ll.allowed(smpl)
                if (len(ids), fnv1a(ids)) != (n, h):
                    print("%s walk %d step %d: llama.cpp now gives %d ids, the golden %d" % (name, wi, si, len(ids), n))
                key = (name, wi, si)
                if key in other:
                    mine = set(ids)
                    for label, d in (("only llama.cpp", mine - other[key]), ("only other", other[key] - mine)):
                        for i in sorted(d)[:40]:
                            print("%s walk %d step %d: %s allows %d %r%s" % (name, wi, si, label, i, ll.pieces[i],
                                                                           " (eog)" if ll.eog[i] else ""))
                if chosen < 0:
                    break
                ll.lib.llama_sampler_accept(smpl, chosen)
            ll.lib.llama_sampler_free(smpl)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lib", default="/work/peer/build/bin/libllama.so")
    ap.add_argument("--vocab", default=os.path.join(ROOT, "tests/data/ggml-vocab-llama-spm.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/grammar_golden.txt"))
    ap.add_argument("--grammars", default=os.path.join(PEER, "grammars"))
    ap.add_argument("--walks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--debug", metavar="IDS_FILE")
    args = ap.parse_args()
    ll = Llama(args.lib, args.vocab)
    if args.debug:
        debug(args, ll)
    else:
        make(args, ll)
    ll.close()


if __name__ == "__main__":
    main()
