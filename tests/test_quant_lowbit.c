// test_quant_lowbit.c - suite `quant_lowbit`: kvtier's q5_1, q2_K, q3_K, iq4_nl and iq4_xs kernels
// (src/kernels/quant_lowbit.h) against llama.cpp's own: tests/data/quant_golden.txt
// (tools/golden/quant_golden.py: rows quantized by ggml's reference quantizer, ggml's dequantization of them, an
// activation row quantized by ggml-cpu and ggml-cpu's dot product). Per row and ISA: the dequantization bit for
// bit; the AVX2 / AVX-512 dot bit for bit (they sum in llama.cpp's AVX2 order; iq4_xs on AVX-512: the reference's
// bits, its order), the scalar reference's within 1e-5 of the sum of |products| (its own order).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/quant_lowbit.h"
#include "test.h"

// Hex text into bytes; false unless exactly n bytes.
static bool unhex(const char *s, uint8_t *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return false;
        out[i] = (uint8_t)v;
    }
    return s[2 * n] == 0 || s[2 * n] == '\n';
}

typedef struct {
    kvt_type t;
    int64_t n;
    uint8_t *w, *x;
    float *f, dot;
} golden_row;

// The golden file's next row of type *t (a "type" line sets it): false at the end or on a malformed line
// (*bad set then). Lines are at most ~12 KB (512 floats); line is the caller's buffer.
static bool next_row(FILE *fp, char *line, size_t cap, golden_row *r, bool *bad) {
    *bad = false;
    int got = 0;
    while (got < 4 && fgets(line, (int)cap, fp)) {
        if (line[0] == '#') continue;
        char name[32];
        long long n, rows;
        if (sscanf(line, "type %31s %lld %lld", name, &n, &rows) == 3) {
            if (!kvt_type_from_name(name, &r->t) || n <= 0 || n % KVT_QK_K || got) return *bad = true, false;
            r->n = n;
            free(r->w), free(r->x), free(r->f);
            r->w = malloc((size_t)kvt_row_size(r->t, n));
            r->x = malloc((size_t)kvt_row_size(kvt_type_ops_ref(r->t)->vec_dot_type, n));
            r->f = malloc((size_t)n * sizeof *r->f);
            if (!r->w || !r->x || !r->f) return *bad = true, false;
            continue;
        }
        if (!r->w) return *bad = true, false;
        if (!strncmp(line, "w ", 2)) {
            if (!unhex(line + 2, r->w, kvt_row_size(r->t, r->n))) return *bad = true, false;
        } else if (!strncmp(line, "x ", 2)) {
            if (!unhex(line + 2, r->x, kvt_row_size(kvt_type_ops_ref(r->t)->vec_dot_type, r->n))) return *bad = true, false;
        } else if (!strncmp(line, "f ", 2)) {
            char *p = line + 2;
            for (int64_t i = 0; i < r->n; i++) {
                char *e;
                r->f[i] = strtof(p, &e);
                if (e == p) return *bad = true, false;
                p = e;
            }
        } else if (sscanf(line, "dot %f", &r->dot) != 1) {
            return *bad = true, false;
        }
        got++;
    }
    if (got && got < 4) *bad = true;
    return got == 4;
}

void test_quant_lowbit(const test_env *env) {
    char path[1024];
    if (!test_data(env, "quant_golden.txt", path, sizeof path)) {
        test_skip("quant_lowbit: llama.cpp's goldens", test_data_missing(env, "quant_golden.txt"));
        return;
    }
    FILE *fp = fopen(path, "r");
    if (!fp) {
        test_result(false, "quant_lowbit: llama.cpp's goldens", "cannot open %s", path);
        return;
    }
    static char line[32768];
    golden_row r = {0};
    bool bad = false;
    int rows = 0, types_seen = 0;
    kvt_type last = KVT_TYPE_COUNT;
    char name[160];
    while (next_row(fp, line, sizeof line, &r, &bad)) {
        if (r.t != last) types_seen++, last = r.t;
        rows++;
        float *y = malloc((size_t)r.n * sizeof *y);
        if (!y) break;
        for (int isa = KVT_ISA_SCALAR; isa <= KVT_ISA_AVX512; isa++) {
            const kvt_type_ops *ops = kvt_type_ops_isa(r.t, (kvt_isa)isa);
            if (!ops) continue; // an ISA this CPU does not run
            ops->to_float(r.w, y, r.n);
            int64_t first = -1;
            for (int64_t i = 0; i < r.n && first < 0; i++)
                if (memcmp(&y[i], &r.f[i], sizeof y[i])) first = i;
            snprintf(name, sizeof name, "quant_lowbit: %s row %d, %s: to_float = llama.cpp's, bit for bit", kvt_type_name(r.t),
                     rows, kvt_isa_name((kvt_isa)isa));
            test_result(first < 0, name, "element %lld: %.9g, llama.cpp %.9g", (long long)first, first < 0 ? 0.0 : (double)y[first],
                        first < 0 ? 0.0 : (double)r.f[first]);
            // the dot: against llama.cpp's, relative to the sum of |products| of the dequantized rows
            const kvt_type_ops *vops = kvt_type_ops_ref(ops->vec_dot_type);
            float *xa = malloc((size_t)r.n * sizeof *xa);
            if (!xa) break;
            vops->to_float(r.x, xa, r.n);
            double mag = 0;
            for (int64_t i = 0; i < r.n; i++) mag += fabs((double)r.f[i] * xa[i]);
            free(xa);
            float s;
            ops->vec_dot(r.n, &s, r.w, r.x);
            const double e = fabs((double)s - r.dot) / (mag + 1e-30);
            if (isa == KVT_ISA_SCALAR) {
                snprintf(name, sizeof name, "quant_lowbit: %s row %d, scalar: dot within 1e-5 of llama.cpp's (%.2g)", kvt_type_name(r.t),
                         rows, e);
                test_result(e <= 1e-5, name, "ours %.9g, llama.cpp %.9g (sum |products| %.6g)", (double)s, (double)r.dot, mag);
            } else if (r.t == KVT_TYPE_IQ4_XS && isa == KVT_ISA_AVX512) { // the reference's order (quant_lowbit_avx2.c)
                float want;
                kvt_type_ops_ref(r.t)->vec_dot(r.n, &want, r.w, r.x);
                snprintf(name, sizeof name, "quant_lowbit: %s row %d, %s: dot = the reference's, bit for bit (%.2g from llama.cpp's)",
                         kvt_type_name(r.t), rows, kvt_isa_name((kvt_isa)isa), e);
                test_result(memcmp(&s, &want, sizeof s) == 0 && e <= 1e-5, name, "ours %.9g, reference %.9g, llama.cpp %.9g",
                            (double)s, (double)want, (double)r.dot);
            } else { // llama.cpp's AVX2 order (quant_lowbit_avx2.c)
                snprintf(name, sizeof name, "quant_lowbit: %s row %d, %s: dot = llama.cpp's, bit for bit", kvt_type_name(r.t), rows,
                         kvt_isa_name((kvt_isa)isa));
                test_result(memcmp(&s, &r.dot, sizeof s) == 0, name, "ours %.9g, llama.cpp %.9g", (double)s, (double)r.dot);
            }
        }
        // an odd count of 32-element blocks (iq4_nl's last block alone, as llama.cpp's scalar tail) and 1..4 rows:
        // the first 3 blocks of the row against the reference, and the multi-row dot = the one-row dot, bit for bit
        if (r.t == KVT_TYPE_IQ4_NL || r.t == KVT_TYPE_Q5_1) {
            const int64_t m = 3 * KVT_QK;
            const kvt_type_ops *ref = kvt_type_ops_ref(r.t);
            float want, got, multi[4];
            ref->vec_dot(m, &want, r.w, r.x);
            for (int isa = KVT_ISA_AVX2; isa <= KVT_ISA_AVX512; isa++) {
                const kvt_type_ops *ops = kvt_type_ops_isa(r.t, (kvt_isa)isa);
                if (!ops) continue;
                ops->vec_dot(m, &got, r.w, r.x);
                bool same = true;
                for (int nt = 1; nt <= 4; nt++) {
                    ops->vec_dot_multi(m, r.w, r.x, 0, nt, multi, 1); // the same activation row nt times
                    for (int k = 0; k < nt; k++) same = same && !memcmp(&multi[k], &got, sizeof got);
                }
                snprintf(name, sizeof name, "quant_lowbit: %s row %d, %s: 3 blocks (an odd count) = the reference, 1..4 rows alike",
                         kvt_type_name(r.t), rows, kvt_isa_name((kvt_isa)isa));
                test_result(fabsf(got - want) <= 1e-5f * (fabsf(want) + 1.0f) && same, name, "ours %.9g, reference %.9g%s",
                            (double)got, (double)want, same ? "" : ", the rows differ");
            }
        }
        free(y);
    }
    fclose(fp);
    free(r.w), free(r.x), free(r.f);
    test_result(!bad && types_seen == 5, "quant_lowbit: the golden file holds the five types, well formed",
                "%s, %d types", bad ? "a malformed line" : "complete", types_seen);
}
