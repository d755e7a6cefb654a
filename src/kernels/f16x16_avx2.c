// f16x16_avx2.c - the f16_x16 kernels (f16x16_simd.h) for AVX2 + FMA + F16C (Makefile flags of *_avx2.c).
#include "f16x16_simd.h"
