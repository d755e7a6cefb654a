// test_kernels_cpu.c - the per-CPU choices of the decode kernels (quant.c detect_prefetch) on AMD CPUs with
// AVX-512, checked on the CPU they are made for (quant.h: the distances, kvt_kernels_decode_avx2):
//   Zen 4 (family 0x19 with AVX-512; z4q4k): no prefetch but KVT_PF_AMD_ZEN4_Q4K (2048 bytes) for q4_K_x8, whose decode
//     runs its AVX2 GEMV; every other decode on its AVX-512 kernel.
//   Zen 5 (family 0x1A on; z5dq, z5dq2, z5f16, z5q6): 1024 bytes for the 32-block x8 GEMVs (q8_0_x8, q4_1_x8, their
//     decode form then 34) and q4_K_x8, none for the other K-quant ones, 256 for the dense ones (f16 and bf16 then
//     take decode form 24); f16_x16, q4_K_x8 and q6_K_r decode on their AVX2 GEMVs, q6_K repacked to q6_K_r.
// Other CPUs: nothing to check here (their distances: quant.h). Skipped under KVT_PREFETCH.
// int test_kernels_cpu_amd(void) prints one line per case ("ok NAME" / "FAIL NAME: detail") and returns the
// number of failures (called by test_kernels.c after kvt_kernels_reset_prefetch).
#include <stdio.h>
#include <stdlib.h>

#include "../src/kernels/matmul.h"
#include "../src/kernels/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static int g_fail;

#include "test_check.h"

static void check_zen4(void) {
    CHECK("prefetch_zen4", kvt_kernels_prefetch() == 0 && kvt_kernels_prefetch_type(KVT_TYPE_Q8_0_X8) == 0 &&
                               kvt_kernels_prefetch_type(KVT_TYPE_Q4_1_X8) == 0 && kvt_kernels_prefetch_dense() == 0 &&
                               !kvt_kernels_prefetch_type(KVT_TYPE_Q4_K) && !kvt_kernels_prefetch_type(KVT_TYPE_Q6_K),
          "distances %lld (q8_0_x8 %lld, dense %lld): not 0", (long long)kvt_kernels_prefetch(),
          (long long)kvt_kernels_prefetch_type(KVT_TYPE_Q8_0_X8), (long long)kvt_kernels_prefetch_dense());
    CHECK("prefetch_zen4", kvt_kernels_prefetch_type(KVT_TYPE_Q4_K_X8) == 2048 && kvt_kernels_decode_avx2(KVT_TYPE_Q4_K_X8),
          "q4_K_x8: distance %lld, AVX2 decode %d (want 2048, 1)", (long long)kvt_kernels_prefetch_type(KVT_TYPE_Q4_K_X8),
          kvt_kernels_decode_avx2(KVT_TYPE_Q4_K_X8));
    CHECK("prefetch_zen4", !kvt_kernels_decode_avx2(KVT_TYPE_F16_X16) && !kvt_kernels_decode_avx2(KVT_TYPE_Q6_K_R) &&
                               !kvt_kernels_decode_avx2(KVT_TYPE_Q8_0_X8) && !kvt_kernels_decode_avx2(KVT_TYPE_Q4_1_X8),
          "a decode other than q4_K_x8's on its AVX2 GEMV");
    const kvt_repack_ops *q6 = kvt_type_repack(KVT_TYPE_Q6_K);
    CHECK("prefetch_zen4", kvt_kernels_isa() != KVT_ISA_AVX512 || !q6 || q6->to != KVT_TYPE_Q6_K_R,
          "q6_K repacked to q6_K_r on AVX-512 (its AVX-512 rows decode there)");
}

static void check_zen5(void) {
    CHECK("prefetch_zen5", kvt_kernels_prefetch() == 1024 && kvt_kernels_prefetch_type(KVT_TYPE_Q8_0_X8) == 1024 &&
                               kvt_kernels_prefetch_type(KVT_TYPE_Q4_1_X8) == 1024 &&
                               kvt_kernels_decode_form(KVT_TYPE_Q4_1_X8) == 34,
          "x8 distances %lld %lld, q4_1_x8 form %d", (long long)kvt_kernels_prefetch_type(KVT_TYPE_Q8_0_X8),
          (long long)kvt_kernels_prefetch_type(KVT_TYPE_Q4_1_X8), kvt_kernels_decode_form(KVT_TYPE_Q4_1_X8));
    CHECK("prefetch_zen5", !kvt_kernels_prefetch_type(KVT_TYPE_Q4_K) && !kvt_kernels_prefetch_type(KVT_TYPE_Q6_K) &&
                               kvt_kernels_prefetch_type(KVT_TYPE_Q4_K_X8) == 1024,
          "K-quant distances not 0 (q4_K_x8: not 1024)");
    CHECK("prefetch_zen5", kvt_kernels_prefetch_dense() == 256 && kvt_kernels_decode_form(KVT_TYPE_BF16) == 24,
          "dense distance %lld, bf16 form %d", (long long)kvt_kernels_prefetch_dense(), kvt_kernels_decode_form(KVT_TYPE_BF16));
    CHECK("prefetch_zen5", kvt_kernels_decode_avx2(KVT_TYPE_F16_X16) && kvt_kernels_decode_avx2(KVT_TYPE_Q4_K_X8) &&
                               kvt_kernels_decode_avx2(KVT_TYPE_Q6_K_R) && !kvt_kernels_decode_avx2(KVT_TYPE_Q8_0_X8),
          "f16_x16 / q4_K_x8 / q6_K_r decode not on its AVX2 GEMV");
    // q6_K repacked to q6_K_r there (z5q6), its decode with the q6_K rows' prefetch (distance slot 0: into L1 KQ_PF ahead)
    const kvt_repack_ops *q6 = kvt_type_repack(KVT_TYPE_Q6_K);
    CHECK("prefetch_zen5", kvt_kernels_isa() != KVT_ISA_AVX512 || (q6 && q6->to == KVT_TYPE_Q6_K_R && !kvt_kernels_prefetch_type(KVT_TYPE_Q6_K_R)),
          "q6_K not repacked to q6_K_r on AVX-512 (or its distance not 0)");
}

int test_kernels_cpu_amd(void) {
    g_fail = 0;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    const char *e = getenv("KVT_PREFETCH");
    if ((e && *e) || !__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u) return 0;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned fam = (a >> 8 & 0xF) == 0xF ? 0xF + (a >> 20 & 0xFF) : a >> 8 & 0xF;
    if (fam == 0x19) check_zen4();
    else if (fam >= 0x1A) check_zen5();
#endif
    return g_fail;
}
