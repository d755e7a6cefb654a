// dot_vs_ggml.c - one core's row dot products of a weight type, kvtier's kernels beside llama.cpp's own vec_dot on
// the same rows (quantized by ggml's reference quantizer, activations by ggml-cpu), in weight GB/s.
//
// Build (against the peer built by tools/peer/build_peer.sh; not part of kvtier's build):
//   L=/work/peer/llama_cpp_python-0.3.36/vendor/llama.cpp B=/work/peer/build/bin
//   make build/libkvtier.a
//   gcc -std=c11 -D_GNU_SOURCE -O2 -I. -I$L/ggml/include tools/bench/dot_vs_ggml.c build/libkvtier.a
//     -o /tmp/dot_vs_ggml -L$B -Wl,-rpath,$B -lggml-cpu -lggml-base -lm -lpthread          (one command line)
// Run: /tmp/dot_vs_ggml GGML_TYPE_ID [ROWS [REPS [NT]]]   (rows of 2048 elements; ROWS 1024: from L2, 100000: from
//   DRAM; NT 1..4 activation rows per weight row: kvtier's vec_dot_multi against NT calls of ggml's vec_dot.)
//   GGML type ids: q5_1 7, q2_K 10, q3_K 11, q4_K 12, q5_K 13, q6_K 14, iq4_nl 20, iq4_xs 23. KVT_ISA picks kvtier's
//   kernels. Prints the best of REPS passes of each engine, alternating.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "src/kernels/quant.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s GGML_TYPE_ID [ROWS [REPS [NT]]]\n", argv[0]);
        return 2;
    }
    const int type = atoi(argv[1]);
    const int64_t n = 2048, rows = argc > 2 ? atoll(argv[2]) : 1024;
    const int reps = argc > 3 ? atoi(argv[3]) : 20, nt = argc > 4 ? atoi(argv[4]) : 1;
    const kvt_type_ops *ops = kvt_type_ops_get((kvt_type)type);
    if (rows < 1 || reps < 1 || nt < 1 || nt > KVT_DOT_MULTI_MAX || !ops || !ops->vec_dot) {
        fprintf(stderr, "dot_vs_ggml: bad arguments or a type kvtier does not compute with\n");
        return 2;
    }
    ggml_cpu_init();
    const struct ggml_type_traits *tr = ggml_get_type_traits(type);
    const struct ggml_type_traits_cpu *ct = ggml_get_type_traits_cpu(type);
    const struct ggml_type_traits *vtr = ggml_get_type_traits(ct->vec_dot_type);
    const size_t rs = (size_t)(n / tr->blck_size) * tr->type_size, xs = (size_t)(n / vtr->blck_size) * vtr->type_size;
    // f: [rows, n] random values; w: [rows] weight rows of rs bytes; x: [4] activation rows of xs bytes; s: [rows, 4]
    float *f = malloc((size_t)(n * rows) * sizeof *f), *s = malloc((size_t)rows * 4 * sizeof *s);
    char *w = malloc(rs * (size_t)rows), *x = malloc(xs * 4);
    if (!f || !s || !w || !x) return 1;
    for (int64_t i = 0; i < n * rows; i++) f[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int64_t r = 0; r < rows; r++) tr->from_float_ref(f + r * n, w + r * rs, n);
    for (int k = 0; k < 4; k++) ggml_get_type_traits_cpu(ct->vec_dot_type)->from_float(f + k * n, x + k * xs, n);
    double best_g = 1e30, best_k = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        const double t0 = now_s();
        for (int64_t r = 0; r < rows; r++)
            for (int k = 0; k < nt; k++) ct->vec_dot((int)n, s + r * 4 + k, 0, w + r * rs, 0, x + k * xs, 0, 1);
        const double t1 = now_s();
        for (int64_t r = 0; r < rows; r++) {
            if (nt == 1) ops->vec_dot(n, s + r * 4, w + r * rs, x);
            else ops->vec_dot_multi(n, w + r * rs, x, xs, nt, s + r * 4, 1);
        }
        const double t2 = now_s();
        if (t1 - t0 < best_g) best_g = t1 - t0;
        if (t2 - t1 < best_k) best_k = t2 - t1;
    }
    const double gb = (double)rows * (double)rs / 1e9;
    printf("%s, %lld rows of %lld, %d activation row(s), kvtier %s: ggml %.2f GB/s, kvtier %.2f GB/s (kvtier / ggml %.2f)\n",
           tr->type_name, (long long)rows, (long long)n, nt, kvt_isa_name(kvt_kernels_isa()), gb / best_g, gb / best_k,
           best_g / best_k);
    free(f), free(s), free(w), free(x);
    return 0;
}
