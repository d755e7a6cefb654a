#!/usr/bin/env python3
"""quant_golden.py - llama.cpp's own quantizer, dequantizer and dot product on a few rows of each weight type that
kvtier computes through its row kernels only (q5_1, q2_K, q3_K, iq4_nl, iq4_xs: src/kernels/quant_lowbit.h), written
to tests/data/quant_golden.txt for tests/test_kernels.c (suite `kernels`), which needs nothing else.

How: python3 tools/golden/quant_golden.py [--lib DIR] [-o FILE]
  DIR holds llama.cpp's libggml-base.so and libggml-cpu.so [/work/peer/build/bin] (tools/peer/build_peer.sh builds
  them outside this repo); FILE [tests/data/quant_golden.txt].

Per type, for each of ROWS rows of N elements (seeded random values, one row with an offset stretch and a zero block):
  w   the row quantized by ggml's reference quantizer (ggml_get_type_traits(t)->from_float_ref), hex
  f   ggml's dequantization of w (to_float), one float per element ("%.9g": exact)
  x   an activation row quantized by ggml-cpu for the type's dot (ggml_get_type_traits_cpu(vec_dot_type)), hex
  dot ggml-cpu's vec_dot(w, x) ("%.9g")
The test requires kvtier's to_float bit for bit, its AVX2 / AVX-512 dot bit for bit (they sum in llama.cpp's AVX2
order) and its scalar reference's dot within 1e-5 of the sum of |products| (its own order).
"""
import argparse
import ctypes as C
import os
import random
import struct

GGML = {"q5_1": 7, "q2_K": 10, "q3_K": 11, "iq4_nl": 20, "iq4_xs": 23}
N, ROWS, SEED = 512, 3, 1234


class Traits(C.Structure):
    _fields_ = [("type_name", C.c_char_p), ("blck_size", C.c_int64), ("blck_size_interleave", C.c_int64),
                ("type_size", C.c_size_t), ("is_quantized", C.c_bool), ("to_float", C.c_void_p),
                ("from_float_ref", C.c_void_p)]


class CpuTraits(C.Structure):
    _fields_ = [("from_float", C.c_void_p), ("vec_dot", C.c_void_p), ("vec_dot_type", C.c_int),
                ("nrows", C.c_int64)]


TO_FLOAT = C.CFUNCTYPE(None, C.c_void_p, C.POINTER(C.c_float), C.c_int64)
FROM_FLOAT = C.CFUNCTYPE(None, C.POINTER(C.c_float), C.c_void_p, C.c_int64)
VEC_DOT = C.CFUNCTYPE(None, C.c_int, C.POINTER(C.c_float), C.c_size_t, C.c_void_p, C.c_size_t, C.c_void_p,
                      C.c_size_t, C.c_int)


def row_values(rng, r):
    v = [rng.gauss(0.0, 1.0) * (0.05 if r else 1.0) for _ in range(N)]
    if r == 2:  # an offset, low-magnitude stretch and an all-zero super-block
        for i in range(64, 192):
            v[i] = v[i] * 0.01 + 0.02
        for i in range(256, 512):
            v[i] = 0.0
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default="/work/peer/build/bin")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("-o", default=os.path.join(here, "..", "..", "tests", "data", "quant_golden.txt"))
    a = ap.parse_args()
    base = C.CDLL(os.path.join(a.lib, "libggml-base.so"))
    cpu = C.CDLL(os.path.join(a.lib, "libggml-cpu.so"))
    base.ggml_get_type_traits.restype = C.POINTER(Traits)
    cpu.ggml_get_type_traits_cpu.restype = C.POINTER(CpuTraits)
    cpu.ggml_cpu_init()
    rng = random.Random(SEED)
    out = ["# llama.cpp's quantizer, dequantizer and dot product per type (tools/golden/quant_golden.py); "
           f"{ROWS} rows of {N} elements per type"]
    for name, t in GGML.items():
        tr = base.ggml_get_type_traits(t).contents
        ct = cpu.ggml_get_type_traits_cpu(t).contents
        vt = ct.vec_dot_type
        vtr = base.ggml_get_type_traits(vt).contents
        vct = cpu.ggml_get_type_traits_cpu(vt).contents
        wbytes = N // tr.blck_size * tr.type_size
        xbytes = N // vtr.blck_size * vtr.type_size
        out.append(f"type {name} {N} {ROWS}")
        for r in range(ROWS):
            src = (C.c_float * N)(*row_values(rng, r))
            act = (C.c_float * N)(*[rng.uniform(-1.0, 1.0) for _ in range(N)])
            w = C.create_string_buffer(wbytes)
            x = C.create_string_buffer(xbytes)
            FROM_FLOAT(tr.from_float_ref)(src, w, N)
            deq = (C.c_float * N)()
            TO_FLOAT(tr.to_float)(w, deq, N)
            FROM_FLOAT(vct.from_float)(act, x, N)
            s = C.c_float()
            VEC_DOT(ct.vec_dot)(N, C.byref(s), 0, w, 0, x, 0, 1)
            out.append("w " + w.raw.hex())
            out.append("f " + " ".join("%.9g" % struct.unpack("f", struct.pack("f", v))[0] for v in deq))
            out.append("x " + x.raw.hex())
            out.append("dot %.9g" % s.value)
    with open(a.o, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"wrote {a.o}: {len(GGML)} types x {ROWS} rows of {N}")


if __name__ == "__main__":
    main()
