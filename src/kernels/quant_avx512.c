// quant_avx512.c - the kernels of quant_avx2.c rebuilt for AVX-512 CPUs
// (Makefile flags for *_avx512.c: -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni -mavx2 -mfma -mf16c). With KVT_SIMD_AVX512 the integer dot
// primitive becomes VPDPBUSD and the float kernels use 512-bit vectors; the
// exported table is kvt_type_ops_avx512_table. Selected at runtime only when
// the CPU reports AVX512F/BW/VL/VNNI.
#define KVT_SIMD_AVX512 1
#include "quant_avx2.c"
