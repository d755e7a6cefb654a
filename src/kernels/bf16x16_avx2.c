// bf16x16_avx2.c - the bf16_x16 kernels (bf16x16_simd.h) for AVX2 + FMA (Makefile flags of *_avx2.c).
#include "bf16x16_simd.h"
