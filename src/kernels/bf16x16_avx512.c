// bf16x16_avx512.c - the bf16_x16 kernels (bf16x16_simd.h) for AVX-512 (Makefile flags of *_avx512.c; VDPBF16PS in
// functions of their own target, used after runtime detection).
#define KVT_SIMD_AVX512 1
#include "bf16x16_simd.h"
