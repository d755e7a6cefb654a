// quant_lowbit_avx512.c - the kernels of quant_lowbit_avx2.c rebuilt for AVX-512 CPUs (the Makefile's flags for
// *_avx512.c): with KVT_SIMD_AVX512 the integer dot primitive of bits_avx2.h is VPDPBUSD; the table is
// kvt_lowbit_ops_avx512. Selected at runtime only where the CPU reports AVX512F/BW/VL/VNNI.
#define KVT_SIMD_AVX512 1
#include "quant_lowbit_avx2.c"
