// test_kernels_attn.c - the attention kernels of src/kernels/vec.h against their references, on the scalar code and
// this CPU's SIMD: kvt_attn_merge_f16 (llama.cpp's flash-attention step for an F16 V, bit for bit), kvt_attn_kq_f16 and
// kvt_attn_kq_kf32 (several positions and query heads per call = the vector dot per pair).
//
// int test_kernels_attn(void) prints one line per case ("ok NAME" / "FAIL NAME: detail") and returns the number of
// failures (called by test_kernels.c).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/f16.h"
#include "../src/kernels/matmul.h"
#include "../src/kernels/quant.h"
#include "../src/kernels/vec.h"

static int g_fail;

#include "test_check.h"
#include "test_rng.h"

// kvt_attn_merge_f16 against a plain transcription of llama.cpp's CPU flash-attention step for an F16 V
// (ggml_compute_forward_flash_attn_ext_f16_one_chunk; on AVX512-FP16 CPUs with the first hdv & ~127 columns in
// f16 arithmetic), bit for bit, on the scalar code and on this CPU's SIMD,
// over tiles that cross KVT_MERGE_ROWS, column counts with partial vectors, and a state carried between calls;
// and close to the dense f64 softmax.
// d rounded once to f16 (nearest even; d exact in double for the values used here)
static float round_f16_d(double d) {
    if (d == 0 || !isfinite(d)) return (float)d;
    int e;
    frexp(d, &e);                          // |d| in [2^(e-1), 2^e)
    const double q = ldexp(1.0, (e - 1 >= -14 ? e - 1 : -14) - 10); // f16 quantum at d (subnormals: 2^-24)
    const double r = nearbyint(d / q) * q;
    return fabs(r) > 65504.0 ? (float)copysign(INFINITY, r) : (float)r;
}

// np: the columns llama.cpp's AVX512-FP16 build accumulates in f16 arithmetic (one rounding per operation,
// the factors rounded to f16 first); the others in f32 then rounded to f16.
static void attn_merge_ref(const float *s, int64_t n, const uint16_t *v, int64_t hdv, float *m, float *l, float *o, int64_t np) {
    for (int64_t r = 0; r < n; r++) {
        float ms = 1.0f, vs = 1.0f;
        if (s[r] > *m) {
            const float old = *m;
            *m = s[r];
            ms = expf(old - *m);
            const float msh = kvt_f16_to_f32(kvt_f32_to_f16(ms));
            for (int64_t k = 0; k < hdv; k++) o[k] = k < np ? round_f16_d((double)o[k] * msh) : kvt_f16_to_f32(kvt_f32_to_f16(o[k] * ms));
        } else {
            vs = expf(s[r] - *m);
        }
        const float vsh = kvt_f16_to_f32(kvt_f32_to_f16(vs));
        for (int64_t k = 0; k < hdv; k++) {
            const float x = kvt_f16_to_f32(v[r * hdv + k]);
            o[k] = k < np ? round_f16_d((double)x * vsh + o[k]) : kvt_f16_to_f32(kvt_f32_to_f16(fmaf(x, vs, o[k])));
        }
        *l = fmaf(*l, ms, vs);
    }
}

// nh heads' scores sh[h][0..n) (row stride NMAX) over the F16 V rows v ([n][hdv]) merged by kvt_attn_merge_f16 in one
// call or, with cut > 0, two (the state carried over), on every ISA up to isa, against each head alone in the llama.cpp
// transcription: returns how many (ISA, head) states differ. Leaves the ISA at isa.
enum { MERGE_NMAX = 150, MERGE_DMAX = 136 };
static int merge_heads_check(kvt_isa isa, int nh, const float (*sh)[MERGE_NMAX], int64_t n, int64_t cut, const uint16_t *v,
                             int64_t hdv) {
    static float oh[12][MERGE_DMAX], o1[MERGE_DMAX];
    float mh[12], lh[12];
    int bad = 0;
    for (int si = KVT_ISA_SCALAR; si <= (int)isa; si++) { // every ISA here
        kvt_kernels_set_isa((kvt_isa)si);
        const int64_t np = kvt_attn_merge_f16_cols(hdv);
        for (int h = 0; h < nh; h++) mh[h] = -INFINITY, lh[h] = 0, memset(oh[h], 0, sizeof oh[h]);
        kvt_attn_merge_f16(nh, sh[0], MERGE_NMAX, cut, v, hdv * 2, mh, lh, oh[0], MERGE_DMAX, hdv);
        kvt_attn_merge_f16(nh, sh[0] + cut, MERGE_NMAX, n - cut, v + cut * hdv, hdv * 2, mh, lh, oh[0], MERGE_DMAX, hdv);
        for (int h = 0; h < nh; h++) {
            float m1 = -INFINITY, l1 = 0;
            memset(o1, 0, sizeof o1);
            attn_merge_ref(sh[h], n, v, hdv, &m1, &l1, o1, np);
            bad += memcmp(o1, oh[h], (size_t)hdv * 4) != 0 || m1 != mh[h] || l1 != lh[h];
        }
    }
    kvt_kernels_set_isa(isa);
    return bad;
}

static void test_attn_merge_f16(void) {
    // llama.cpp's AVX512-FP16 path (see quant_avx2.c): this CPU's SIMD kernels take it when it has the instructions
    const int fp16 = kvt_attn_merge_f16_cols(128) > 0;
    enum { NMAX = MERGE_NMAX, DMAX = MERGE_DMAX };
    static uint16_t v[NMAX * DMAX];
    static float s[NMAX], o_ref[DMAX], o_sc[DMAX], o_simd[DMAX];
    static const int64_t dims[] = {64, 128, 136, 5, 72};
    static const int64_t lens[] = {1, 2, 7, 32, 63, 64, 65, 100, 150};
    int bad = 0, far = 0;
    double worst = 0;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int64_t hdv = dims[di], n = lens[li];
            for (int64_t i = 0; i < n * hdv; i++) v[i] = kvt_f32_to_f16(2.0f * rnd_normal());
            for (int64_t i = 0; i < n; i++) s[i] = 2.0f * rnd_normal() + 0.02f * (float)i; // new maxima now and then
            float m[3] = {-INFINITY, -INFINITY, -INFINITY}, l[3] = {0, 0, 0};
            memset(o_ref, 0, sizeof o_ref), memset(o_sc, 0, sizeof o_sc), memset(o_simd, 0, sizeof o_simd);
            const int64_t cut = n / 3; // two calls: the state carries over
            float o_r16[DMAX] = {0}, m16 = -INFINITY, l16 = 0;
            attn_merge_ref(s, n, v, hdv, &m[0], &l[0], o_ref, 0);
            attn_merge_ref(s, n, v, hdv, &m16, &l16, o_r16, fp16 ? hdv & ~(int64_t)127 : 0);
            const kvt_isa isa = kvt_kernels_set_isa(KVT_ISA_SCALAR);
            kvt_attn_merge_f16(1, s, 0, cut, v, hdv * 2, &m[1], &l[1], o_sc, 0, hdv);
            kvt_attn_merge_f16(1, s + cut, 0, n - cut, v + cut * hdv, hdv * 2, &m[1], &l[1], o_sc, 0, hdv);
            bad += memcmp(o_ref, o_sc, (size_t)hdv * 4) != 0 || m[0] != m[1] || l[0] != l[1];
            for (int si = isa < KVT_ISA_AVX2 ? (int)isa : KVT_ISA_AVX2; si <= (int)isa; si++) { // each SIMD level here, this last
                kvt_kernels_set_isa((kvt_isa)si);
                m[2] = -INFINITY, l[2] = 0;
                memset(o_simd, 0, sizeof o_simd);
                kvt_attn_merge_f16(1, s, 0, cut, v, hdv * 2, &m[2], &l[2], o_simd, 0, hdv);
                kvt_attn_merge_f16(1, s + cut, 0, n - cut, v + cut * hdv, hdv * 2, &m[2], &l[2], o_simd, 0, hdv);
                bad += memcmp(si == (int)isa ? o_r16 : o_ref, o_simd, (size_t)hdv * 4) != 0 || m[0] != m[2] || l[0] != l[2];
            }
            kvt_kernels_set_isa(isa);
            double mx = -INFINITY, sum = 0;
            for (int64_t i = 0; i < n; i++) mx = fmax(mx, s[i]);
            for (int64_t k = 0; k < hdv; k++) {
                double acc = 0;
                sum = 0;
                for (int64_t i = 0; i < n; i++) {
                    const double w = exp((double)s[i] - mx);
                    acc += w * kvt_f16_to_f32(v[i * hdv + k]);
                    sum += w;
                }
                worst = fmax(worst, fabs(o_simd[k] / l[2] - acc / sum));
            }
            far += fabs(l[2] - sum) > 1e-4 * sum;
        }
    // several heads over the same V rows in one call (AVX2: their factors 8 at a time, one head a lane, o 4, 3, 2
    // or 1 heads at a time): each as if alone
    const kvt_isa isa = kvt_kernels_isa();
    for (int nh = 1; nh <= 12; nh++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li += 2) {
            const int64_t hdv = nh % 2 ? 136 : nh % 4 ? 72 : 64, n = lens[li];
            static float sh[12][NMAX];
            for (int64_t i = 0; i < n * hdv; i++) v[i] = kvt_f32_to_f16(rnd_normal());
            for (int h = 0; h < nh; h++)
                for (int64_t i = 0; i < n; i++) sh[h][i] = 2.0f * rnd_normal();
            if (nh % 3 == 0) sh[nh - 1][n / 2] = sh[0][n - 1] = 20.0f; // a late new max, in a later block of positions
            // even head counts: two calls, the state carried over
            bad += merge_heads_check(isa, nh, (const float (*)[MERGE_NMAX])sh, n, nh % 2 ? 0 : n / 3, v, hdv);
        }
    // values at f16's edges: o ending at -0 or in f16's subnormals, large V, o overflowing to infinity
    for (int kind = 0; kind < 4; kind++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li += 3) {
            const int nh = 8;
            const int64_t hdv = 64, n = lens[li];
            static float sh[8][NMAX];
            for (int64_t i = 0; i < n * hdv; i++) {
                const int64_t k = i % hdv;
                float x = rnd_normal();
                if (kind == 0) x = k < 16 ? -0.0f : k < 32 ? -1e-7f * (1.0f + fabsf(x)) : k < 48 ? 0.0f : x; // -0, tiny
                if (kind == 1) x *= 3e-5f;                                    // subnormal o
                if (kind == 2) x *= k < 8 ? 3000.0f : 1.0f;                   // large V: the conversions
                if (kind == 3) x = k < 8 ? 50000.0f : k < 16 ? -60000.0f : x; // o overflows
                v[i] = kvt_f32_to_f16(x);
            }
            for (int h = 0; h < nh; h++)
                for (int64_t i = 0; i < n; i++) sh[h][i] = (kind == 0 ? 30.0f : 2.0f) * rnd_normal();
            bad += merge_heads_check(isa, nh, (const float (*)[MERGE_NMAX])sh, n, 0, v, hdv);
        }
    CHECK("attn_merge_f16", bad == 0 && far == 0 && worst < 2e-2,
          "%d states differ from llama.cpp's steps, %d sums off, max |out - dense softmax| %.3g", bad, far, worst);
}

// nq random queries of n values, row stride qst: q16 their f16 bits and qf the same values as f32.
static void fill_queries_f16(uint16_t *q16, float *qf, int nq, int64_t n, int64_t qst) {
    for (int h = 0; h < nq; h++)
        for (int64_t i = 0; i < n; i++) {
            q16[h * qst + i] = kvt_f32_to_f16(2.0f * rnd_normal());
            qf[h * qst + i] = kvt_f16_to_f32(q16[h * qst + i]);
        }
}

// kvt_attn_kq_f16: on every ISA here (scalar, AVX2, AVX-512 where the CPU has it) each score is that ISA's F16
// vec_dot of (K row, query) times scale, bit for bit, for any head count (pairs and a single), row count, head dim
// (with and without a tail past the vector steps) and strides.
static void test_attn_kq_f16(void) {
    enum { NP = 37, DMAX = 272, QMAX = 5 };
    static uint16_t k[NP * (DMAX + 8)], q16[QMAX * DMAX];
    static float qf[QMAX * DMAX], sk[QMAX * 64], sr[QMAX * 64];
    static const int64_t dims[] = {64, 256, 72, 40, 128, 264, 8, 192};
    const kvt_isa isa = kvt_kernels_isa();
    int bad = 0, cases = 0;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int nq = 1; nq <= QMAX; nq++) {
            const int64_t n = dims[di], kst = (n + (nq % 2) * 8) * 2, qst = n + (nq == 3 ? 16 : 0); // padded rows too
            const float scale = nq == 2 ? 1.0f : 0.125f + 0.01f * (float)nq;
            for (int64_t i = 0; i < NP * kst / 2; i++) k[i] = kvt_f32_to_f16(rnd_normal());
            fill_queries_f16(q16, qf, nq, n, qst);
            for (int si = KVT_ISA_SCALAR; si <= (int)isa; si++) {
                kvt_kernels_set_isa((kvt_isa)si);
                if (kvt_kernels_isa() != (kvt_isa)si) continue;
                const kvt_vec_dot_fn dot = kvt_type_ops_get(KVT_TYPE_F16)->vec_dot;
                for (int64_t np = 1; np <= NP; np += 9) {
                    for (int64_t i = 0; i < QMAX * 64; i++) sk[i] = sr[i] = -1.0f;
                    kvt_attn_kq_f16(n, k, kst, np, q16, qf, qst, nq, scale, sk, 64);
                    for (int h = 0; h < nq; h++)
                        for (int64_t x = 0; x < np; x++) {
                            float d;
                            dot(n, &d, (const char *)k + x * kst, q16 + h * qst);
                            sr[h * 64 + x] = d * scale;
                        }
                    bad += memcmp(sk, sr, sizeof sk) != 0;
                    cases++;
                }
            }
            kvt_kernels_set_isa(isa);
        }
    CHECK("attn_kq_f16", bad == 0 && cases > 0, "%d of %d cases differ from the F16 vec_dot times scale", bad, cases);
}

// kvt_attn_kq_kf32: where it reports done (the AVX2 kernels, head dims multiple of 32; AVX-512, multiple of 64), each score has the bits of
// kvt_attn_kq_f16 on the same rows given as f16 (the F16 vec_dot times scale), for any head count, row count and
// strides; elsewhere it writes nothing and says so (scalar: the reference kvt_attn_kq_f16 is then used).
static void test_attn_kq_kf32(void) {
    enum { NP = 37, DMAX = 256, QMAX = 9 };
    static uint16_t k[NP * (DMAX + 8)], q16[QMAX * (DMAX + 16)];
    static float kf[NP * (DMAX + 8)], qf[QMAX * (DMAX + 16)], sk[QMAX * 64], sr[QMAX * 64];
    static const int64_t dims[] = {64, 256, 32, 128, 72, 192};
    const kvt_isa isa = kvt_kernels_isa();
    int bad = 0, cases = 0, done[KVT_ISA_AVX512 + 1] = {0};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int nq = 1; nq <= QMAX; nq++) {
            const int64_t n = dims[di], kst = n + (nq % 2) * 8, qst = n + (nq == 3 ? 16 : 0);
            const float scale = 0.125f + 0.01f * (float)nq;
            for (int64_t i = 0; i < NP * kst; i++) k[i] = kvt_f32_to_f16(rnd_normal()), kf[i] = kvt_f16_to_f32(k[i]);
            fill_queries_f16(q16, qf, nq, n, qst);
            for (int si = KVT_ISA_SCALAR; si <= (int)isa; si++) {
                kvt_kernels_set_isa((kvt_isa)si);
                if (kvt_kernels_isa() != (kvt_isa)si) continue;
                for (int64_t np = 1; np <= NP; np += 3) {
                    for (int64_t i = 0; i < QMAX * 64; i++) sk[i] = sr[i] = -1.0f;
                    const int ok = kvt_attn_kq_kf32_ok(n), r = kvt_attn_kq_kf32(n, kf, kst, np, qf, qst, nq, scale, sk, 64);
                    kvt_attn_kq_f16(n, k, kst * 2, np, q16, qf, qst, nq, scale, sr, 64);
                    if (r != ok) bad++;
                    else if (r) bad += memcmp(sk, sr, sizeof sk) != 0, done[si]++;
                    else for (int64_t i = 0; i < QMAX * 64; i++) bad += sk[i] != -1.0f;
                    cases++;
                }
            }
            kvt_kernels_set_isa(isa);
        }
    // every SIMD ISA of this CPU computes (the scalar one never)
    const bool all = done[KVT_ISA_SCALAR] == 0 && (isa < KVT_ISA_AVX2 || done[KVT_ISA_AVX2] > 0) &&
                     (isa < KVT_ISA_AVX512 || done[KVT_ISA_AVX512] > 0);
    CHECK("attn_kq_kf32", bad == 0 && cases > 0 && all, "%d of %d cases differ from kvt_attn_kq_f16 (computed: %d AVX2, %d AVX-512)",
          bad, cases, done[KVT_ISA_AVX2], done[KVT_ISA_AVX512]);
}

int test_kernels_attn(void) {
    g_fail = 0;
    test_attn_merge_f16();
    test_attn_kq_f16();
    test_attn_kq_kf32();
    return g_fail;
}
