// quant_ops_table.h - the layout of a kvt_type_ops table (quant.h), one for the reference code (quant.c) and
// the SIMD builds (quant_avx2.c, compiled for AVX2 and AVX-512). The file that uses it defines, for every type
// NAME listed below, NAME_to_float and NAME_from_float, and for the weight types NAME_dot and NAME_multi, then
// writes KVT_TYPE_OPS_TABLE(table) to define `static const kvt_type_ops table[KVT_TYPE_COUNT]`. Each entry
// names the activation type its dot product takes (q8_1 for q4_1, q8_K for the k-quants, q8_0 for the rest).
// The activation-only types (q8_1, q8_K) have no dot of their own. Types not listed stay zero (no to_float).
#ifndef KVT_QUANT_OPS_TABLE_H
#define KVT_QUANT_OPS_TABLE_H

// The multi-row dot name##_multi of a reference type, built from its single-row dot name##_dot: one call per row
// (quant.c, quant_lowbit.c).
#define KVT_DOT_MULTI_FROM_DOT(name)                                                                                  \
    static void name##_multi(int64_t n, const void *x, const void *y, size_t y_stride, int nt, float *s,              \
                             int64_t s_stride) {                                                                      \
        for (int t = 0; t < nt; t++) name##_dot(n, s + t * s_stride, x, (const char *)y + t * y_stride);             \
    }

#define KVT_OPS_(name, vt) {name##_to_float, name##_from_float, name##_dot, vt, name##_multi}
#define KVT_OPS_ACT_(name, vt) {name##_to_float, name##_from_float, NULL, vt, NULL}

#define KVT_TYPE_OPS_TABLE(table)                                                                   \
    static const kvt_type_ops table[KVT_TYPE_COUNT] = {                                             \
        [KVT_TYPE_F32] = KVT_OPS_(f32, KVT_TYPE_F32),                                               \
        [KVT_TYPE_F16] = KVT_OPS_(f16, KVT_TYPE_F16),                                               \
        [KVT_TYPE_BF16] = KVT_OPS_(bf16, KVT_TYPE_BF16),                                            \
        [KVT_TYPE_Q4_0] = KVT_OPS_(q4_0, KVT_TYPE_Q8_0),                                            \
        [KVT_TYPE_Q4_1] = KVT_OPS_(q4_1, KVT_TYPE_Q8_1),                                            \
        [KVT_TYPE_Q5_0] = KVT_OPS_(q5_0, KVT_TYPE_Q8_0),                                            \
        [KVT_TYPE_Q8_0] = KVT_OPS_(q8_0, KVT_TYPE_Q8_0),                                            \
        [KVT_TYPE_Q8_1] = KVT_OPS_ACT_(q8_1, KVT_TYPE_Q8_1),                                        \
        [KVT_TYPE_Q4_K] = KVT_OPS_(q4_K, KVT_TYPE_Q8_K),                                            \
        [KVT_TYPE_Q5_K] = KVT_OPS_(q5_K, KVT_TYPE_Q8_K),                                            \
        [KVT_TYPE_Q6_K] = KVT_OPS_(q6_K, KVT_TYPE_Q8_K),                                            \
        [KVT_TYPE_Q8_K] = KVT_OPS_ACT_(q8_K, KVT_TYPE_Q8_K),                                        \
    }

#endif
