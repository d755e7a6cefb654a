// f16x16_avx512.c - the f16_x16 kernels (f16x16_simd.h) for AVX-512 (Makefile flags of *_avx512.c); used only after
// runtime detection.
#define KVT_SIMD_AVX512 1
#include "f16x16_simd.h"
