// gemm_avx512.c - the GEMM tiles of gemm_avx2.c rebuilt for AVX-512 CPUs
// (Makefile flags for *_avx512.c): float and 32-block tiles bit-identical per
// output to the AVX-512 rows kernels of matmul_avx512.c. Exports
// kvt_gemm_*_avx512; used only after runtime detection of AVX512F/BW/VL/VNNI.
#define KVT_SIMD_AVX512 1
#include "gemm_avx2.c"
