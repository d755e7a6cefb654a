// bf16x16_mode.h - the floating-point mode of bf16x16.h's order (internal to the bf16_x16 kernels): MXCSR's
// flush-to-zero (bit 15) and denormals-are-zero (bit 6) set around a kernel's FMAs, so that each FMA rounds as one
// step of VDPBF16PS. enter returns the caller's MXCSR for leave. Both are calls the compiler does not inline into the
// kernels (bf16x16.c), so no FMA of a kernel moves across them.
#ifndef KVT_BF16X16_MODE_H
#define KVT_BF16X16_MODE_H

#ifdef __SSE2__
#include <xmmintrin.h>
#endif

#define KVT_MXCSR_FTZ_DAZ 0x8040u

__attribute__((noinline)) unsigned kvt_bf16x16_mode_enter(void);
__attribute__((noinline)) void kvt_bf16x16_mode_leave(unsigned m);

#endif
