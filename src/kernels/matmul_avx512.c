// matmul_avx512.c - the matmul kernels of matmul_avx2.c rebuilt for AVX-512
// CPUs (Makefile flags for *_avx512.c; 512-bit float tiles, VPDPBUSD on pairs
// of 32-blocks). Exports kvt_mm_kernel_avx512; used only after runtime
// detection of AVX512F/BW/VL/VNNI.
#define KVT_SIMD_AVX512 1
#include "matmul_avx2.c"
