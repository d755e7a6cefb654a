// kq_decode_bench.c - decode GEMV bandwidth of the K-quant weight types against DRAM.
//   make kq-decode-bench
//   build/kq_decode_bench [-t threads=2] [-s scalar|avx2|avx512] [-r reps=5] [-M MiB=512] [-H 1|0] [-T type]... [-S shape]...
// Types: q4_K_x8 (q4_K repacked as the model loader does), q4_K, q6_K, and any repacked type of them. Shapes
// (rows x cols, TinyLlama-1.1B): gate 5632x2048, down 2048x5632, out 32000x2048, q 2048x2048, kv 256x2048.
// Per type and shape: copies of the matrix fill M MiB (more than the last-level cache), in an anonymous mapping
// with MADV_HUGEPAGE as the repacked weights are (-H 0: without, 4 KiB pages as a GGUF file's mapping); then, best of reps passes over all copies, wall time, with the
// engine's pool and its decode split (kvt_matmul_par: tasks of rows pulled by the threads):
//   gemv   - kvt_matmul_par of one activation row against each copy (decode's product; the activation's q8_K
//            conversion included, as in decode)
//   stream - the same tasks reading the same bytes with 256-bit loads (XOR-reduced), nothing computed
//   probe  - kvt_measure_read_bw (kvtier bench's DRAM probe: 512 MiB in 64 KiB chunks), once per type
// and prints GB/s of each and gemv as a share of stream and of probe. Timings are wall time: run under
// /work/quiet (or on an idle machine). The decode GEMVs' software prefetch distance is the CPU's
// (kvt_kernels_prefetch_type per type and, for f16_x16, kvt_kernels_prefetch_dense: quant.h); KVT_PREFETCH=BYTES sets
// another, to compare (pf=BYTES below sets all of them; pf=-1 restores the CPU's, kvt_kernels_reset_prefetch).
// Types: -T q4_1_x8, q8_0_x8, f16, q8_0, ... as well (the repacked ones packed as the model loader does).
//
// Paired A/B (-A SPEC and/or -B SPEC; -P pairs=40): two forms of the same decode GEMV compared within one process on
// the same matrix copies, call by call: each pair is one pass of A and one of B over all copies (order A B, then B A,
// ...) and one pass of each of two probe patterns over the same bytes, the faster counting (4 streams per task, lines
// 4 KiB ahead prefetched into L2: membw.c's KVT_READ_FOUR_PF; 2 streams, lines 2 KiB ahead into L1: KVT_READ_TWO_PF_L1)
// in the same alternation. SPEC: comma-separated v=N (the kernel's study
// form, matmul.h kvt_kernels_decode_variant: e.g. q8_0_x8 v=2, f16 v=14), pf=BYTES (the decode prefetch distance),
// t=TYPE (another layout of the -T type's rows, e.g. -T q6_K -B t=q6_K_x8: its own copies of the same rows), s=ISA
// (the kernels of another instruction set, at most the CPU's: e.g. -s avx512 -B s=avx2), or "0" (the defaults). Prints per form the median GB/s and its median share of the same pair's probe, the median
// of the paired ratios B/A and the share of pairs B wins; with -v, every pair. The bandwidth of a shared VM swings
// within minutes: only such paired figures resolve a 5-10% difference (docs/log/BENCHMARKS-kernels-2.md, ms11c).
//   build/kq_decode_bench -t 2 -s avx2 -M 512 -T q8_0_x8 -S gate -S down -A v=0 -B v=4 -P 40
//   build/kq_decode_bench -t 2 -s avx512 -M 512 -T q6_K -S down -S out -A 0 -B t=q6_K_R,s=avx2 -P 20
//     (q6_K's AVX-512 rows against the AVX2 q6_K_r rows of the same matrix: z5q6, docs/log/BENCHMARKS-kernels-5.md)

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../../src/base/membw.h"
#include "../../src/base/threadpool.h"
#include "../../src/base/timer.h"
#include "../../src/exec/matmul_par.h"
#include "../../src/kernels/matmul.h"
#include "../../src/kernels/quant.h"

typedef struct {
    const char *name;
    int64_t rows, cols;
} shape;
static const shape k_shapes[] = {{"gate", 5632, 2048}, {"down", 2048, 5632}, {"out", 32000, 2048},
                                 {"q", 2048, 2048},    {"kv", 256, 2048}};

// The tasks of kvt_matmul_par's decode split (its chunk rule: 8 tasks per thread, at least 256 KiB (MIN_TASK_BYTES of src/exec/matmul_par.c), rows a
// multiple of 16), each reading its rows' bytes.
typedef struct {
    const char *w;
    int64_t wrs, rows, chunk;
    uint64_t sums[64 * 8];
} stream_job;
// The task's rows read in pattern pat (membw.c's kvt_read_streams): one stream, or the range in that pattern's parts,
// 64 bytes of each in turn.
static void stream_pat(void *vj, int64_t t, int thread, kvt_read_pattern pat) {
    stream_job *J = vj;
    const int64_t r0 = t * J->chunk, r1 = r0 + J->chunk < J->rows ? r0 + J->chunk : J->rows;
    const int64_t len = (r1 - r0) * J->wrs / (64 * kvt_read_pattern_streams(pat)) * 64; // bytes per part
    J->sums[(thread & 63) * 8] ^= kvt_read_streams(J->w + r0 * J->wrs, len, len, pat);
}
static void stream_task(void *vj, int64_t t, int thread) { stream_pat(vj, t, thread, KVT_READ_ONE); }
// The probe patterns over one task's bytes of the same copy: KVT_READ_FOUR_PF (4 parts, lines 4 KiB ahead into L2) and
// KVT_READ_TWO_PF_L1 (2 parts, 2 KiB ahead into L1: the faster on an AMD Zen 5, docs/log/BENCHMARKS-kernels-5.md, z5kq).
static void stream4_task(void *vj, int64_t t, int thread) { stream_pat(vj, t, thread, KVT_READ_FOUR_PF); }
static void stream2_task(void *vj, int64_t t, int thread) { stream_pat(vj, t, thread, KVT_READ_TWO_PF_L1); }

// A form of -A / -B: the study form v, the prefetch distance pf (-1: the CPU's), the weight type t (-1: the -T
// type; another one of the same bytes per row, e.g. q6_K against q6_K_x8: its own copies, built the same way) and the
// kernels' ISA s (-1: -s's; e.g. s=avx2 against the AVX-512 build's form of the same rows).
typedef struct {
    int v;
    int64_t pf;
    int t, isa;
} form;
static int form_parse(const char *s, form *f) {
    f->v = 0, f->pf = -1, f->t = -1, f->isa = -1;
    if (!strcmp(s, "0")) return 1;
    while (*s) {
        char *end;
        if (!strncmp(s, "v=", 2)) f->v = (int)strtol(s + 2, &end, 10);
        else if (!strncmp(s, "pf=", 3)) f->pf = strtoll(s + 3, &end, 10);
        else if (!strncmp(s, "t=", 2)) {
            char name[32];
            size_t k = 0;
            for (end = (char *)s + 2; *end && *end != ',' && k + 1 < sizeof name; end++) name[k++] = *end;
            name[k] = 0;
            kvt_type t;
            if (!kvt_type_from_name(name, &t)) return 0;
            f->t = (int)t;
        } else if (!strncmp(s, "s=", 2)) {
            f->isa = -1;
            for (int i = KVT_ISA_SCALAR; i <= KVT_ISA_AVX512; i++) {
                const char *nm = kvt_isa_name((kvt_isa)i);
                const size_t l = strlen(nm);
                if (!strncmp(s + 2, nm, l) && (!s[2 + l] || s[2 + l] == ',')) f->isa = i, end = (char *)s + 2 + l;
            }
            if (f->isa < 0) return 0;
        } else return 0;
        if (end == s || (*end && *end != ',')) return 0;
        s = *end ? end + 1 : end;
    }
    return 1;
}
static int cmp_dbl(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int64_t decode_chunk(int64_t rows, int64_t wrs, int nt) {
    int64_t chunk = rows / ((int64_t)nt * 8);
    const int64_t min_rows = 256 * 1024 / wrs;
    if (chunk < min_rows) chunk = min_rows;
    return chunk < 16 ? 16 : (chunk + 15) / 16 * 16;
}

int main(int argc, char **argv) {
    int nth = 2, reps = 5, ntypes = 0, nshapes = 0, isa = -1;
    int64_t mib = 512;
    int huge = 1, pairs = 40, paired = 0, verbose = 0;
    form fa = {0, -1, -1, -1}, fb = {0, -1, -1, -1};
    kvt_type types[8];
    shape shapes[8];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) nth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-M") && i + 1 < argc) mib = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-H") && i + 1 < argc) huge = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-P") && i + 1 < argc) pairs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-v")) verbose = 1;
        else if ((!strcmp(argv[i], "-A") || !strcmp(argv[i], "-B")) && i + 1 < argc) {
            paired = 1;
            if (!form_parse(argv[i + 1], argv[i][1] == 'A' ? &fa : &fb))
                return fprintf(stderr, "bad form %s (v=N,pf=BYTES,t=TYPE or 0)\n", argv[i + 1]), 1;
            i++;
        }
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            const char *s = argv[++i];
            isa = !strcmp(s, "scalar") ? 0 : !strcmp(s, "avx2") ? 1 : 2;
        } else if (!strcmp(argv[i], "-T") && i + 1 < argc && ntypes < 8) {
            if (!kvt_type_from_name(argv[++i], &types[ntypes++])) return fprintf(stderr, "unknown type %s\n", argv[i]), 1;
        } else if (!strcmp(argv[i], "-S") && i + 1 < argc && nshapes < 8) {
            const char *s = argv[++i];
            size_t k = 0;
            while (k < sizeof k_shapes / sizeof k_shapes[0] && strcmp(k_shapes[k].name, s)) k++;
            if (k == sizeof k_shapes / sizeof k_shapes[0]) return fprintf(stderr, "unknown shape %s\n", s), 1;
            shapes[nshapes++] = k_shapes[k];
        } else {
            fprintf(stderr,
                    "usage: %s [-t threads] [-s scalar|avx2|avx512] [-r reps] [-M MiB] [-H 1|0] [-T type]... [-S shape]...\n"
                    "       [-A form] [-B form] [-P pairs] [-v]   (paired A/B; form: v=N,pf=BYTES,t=TYPE or 0: see the source)\n",
                    argv[0]);
            return 1;
        }
    }
    if (nth < 1 || nth > 64) nth = 2;
    if (reps < 1) reps = 1;
    if (pairs < 1) pairs = 1;
    if (isa >= 0) kvt_kernels_set_isa((kvt_isa)isa);
    if (!ntypes) types[0] = KVT_TYPE_Q4_K_X8, types[1] = KVT_TYPE_Q6_K, ntypes = 2;
    if (!nshapes) shapes[0] = k_shapes[0], shapes[1] = k_shapes[1], shapes[2] = k_shapes[2], nshapes = 3;
    kvt_threadpool *pool;
    kvt_err err;
    if (kvt_threadpool_init(nth, &pool, &err) != KVT_OK) return fprintf(stderr, "pool: %s\n", err.msg), 1;
    printf("isa %s, %d thread(s), %lld MiB of copies per case, %s pages, x8 decode prefetch %lld bytes (q4_K_x8 %lld, q6_K rows %lld)\n",
           kvt_isa_name(kvt_kernels_isa()), nth, (long long)mib, huge ? "huge (madvise)" : "4 KiB",
           (long long)kvt_kernels_prefetch(), (long long)kvt_kernels_prefetch_type(KVT_TYPE_Q4_K_X8),
           (long long)kvt_kernels_prefetch_type(KVT_TYPE_Q6_K_R));
    const int64_t pf_cpu = kvt_kernels_prefetch();
    const kvt_isa isa_run = kvt_kernels_isa(); // -s's (a form's s= sets another for its passes)
    if (paired) {
        printf("paired: A = v=%d,pf=%lld%s%s,s=%s, B = v=%d,pf=%lld%s%s,s=%s, %d pairs (one pass of A, B and each of the 2 probe patterns)\n",
               fa.v, (long long)(fa.pf < 0 ? pf_cpu : fa.pf), fa.t >= 0 ? ",t=" : "", fa.t >= 0 ? kvt_type_name((kvt_type)fa.t) : "",
               kvt_isa_name(fa.isa < 0 ? isa_run : (kvt_isa)fa.isa), fb.v, (long long)(fb.pf < 0 ? pf_cpu : fb.pf),
               fb.t >= 0 ? ",t=" : "", fb.t >= 0 ? kvt_type_name((kvt_type)fb.t) : "",
               kvt_isa_name(fb.isa < 0 ? isa_run : (kvt_isa)fb.isa), pairs);
        printf("%-8s %-5s %12s %8s %8s %8s %7s %7s %7s %7s\n", "type", "shape", "rows x cols", "A GB/s", "B GB/s",
               "probe", "A%prb", "B%prb", "B/A", "B wins");
    } else {
        printf("%-8s %-5s %12s %9s %9s %9s %8s %8s\n", "type", "shape", "rows x cols", "gemv", "stream", "probe",
               "%stream", "%probe");
    }
    const double probe = paired ? 0 : kvt_measure_read_bw(pool, (int64_t)512 << 20, 5) / 1e9;
    for (int ti = 0; ti < ntypes; ti++)
        for (int si = 0; si < nshapes; si++) {
            const kvt_type t = types[ti], qt = kvt_type_repacked_from(t);
            const kvt_repack_ops *rp = qt != t ? kvt_type_repack_into(t) : NULL;
            const int64_t rows = shapes[si].rows, n = shapes[si].cols, wrs = kvt_row_size(qt, n);
            const kvt_type_ops *ops = kvt_type_ops_get(qt);
            if (!ops || !ops->vec_dot || wrs <= 0) {
                printf("%-8s unsupported\n", kvt_type_name(t));
                continue;
            }
            const size_t wbytes = (size_t)(wrs * rows), stride = (wbytes + 4095) & ~(size_t)4095;
            const int copies = (int)(((size_t)mib << 20) / stride) + 1;
            char *w = mmap(NULL, stride * (size_t)copies, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            float *f = malloc((size_t)n * sizeof *f), *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)rows * sizeof *y);
            char *tmp = malloc(wbytes);
            void *scratch = aligned_alloc(64, ((size_t)kvt_matmul_scratch_bytes(n, 1) + 63) & ~(size_t)63);
            if (w == MAP_FAILED || !f || !x || !y || !tmp || !scratch) return fprintf(stderr, "out of memory\n"), 1;
            if (huge) madvise(w, stride * (size_t)copies, MADV_HUGEPAGE);
            uint64_t s = 88172645463325252ull;
            for (int64_t r = 0; r < rows; r++) { // 64 distinct rows, tiled
                if (r < 64) {
                    for (int64_t i = 0; i < n; i++) {
                        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                        f[i] = ((float)(s >> 40) / 16777216.f - 0.5f) * 0.1f;
                    }
                    ops->from_float(f, tmp + r * wrs, n);
                } else {
                    memcpy(tmp + r * wrs, tmp + (r % 64) * wrs, (size_t)wrs);
                }
            }
            for (int64_t i = 0; i < n; i++) x[i] = f[i] * 3.f;
            if (rp) {
                if (rows % rp->row_align) return fprintf(stderr, "rows not a multiple of %d\n", rp->row_align), 1;
                rp->pack(tmp, w, rows, n);
            } else {
                memcpy(w, tmp, wbytes);
            }
            for (int c = 1; c < copies; c++) memcpy(w + stride * (size_t)c, w, wbytes);
            // a paired form of another type (t=): its own copies of the same rows, made the same way
            char *wf[2] = {w, w};
            kvt_type tf[2] = {t, t};
            for (int k = 0; k < 2 && paired; k++) {
                const form *fm = k ? &fb : &fa;
                if (fm->t < 0 || (kvt_type)fm->t == t) continue;
                const kvt_type ft = (kvt_type)fm->t, fq = kvt_type_repacked_from(ft);
                if (fq != qt) return fprintf(stderr, "t=%s is not a layout of %s\n", kvt_type_name(ft), kvt_type_name(qt)), 1;
                const kvt_repack_ops *frp = fq != ft ? kvt_type_repack_into(ft) : NULL;
                char *b = mmap(NULL, stride * (size_t)copies, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (b == MAP_FAILED) return fprintf(stderr, "out of memory\n"), 1;
                if (huge) madvise(b, stride * (size_t)copies, MADV_HUGEPAGE);
                if (frp) frp->pack(tmp, b, rows, n);
                else memcpy(b, tmp, wbytes);
                for (int c = 1; c < copies; c++) memcpy(b + stride * (size_t)c, b, wbytes);
                wf[k] = b, tf[k] = ft;
            }
            kvt_weight W = {.data = w, .type = t, .cols = n, .rows = rows};
            stream_job *J = calloc(1, sizeof *J);
            J->wrs = wrs, J->rows = rows, J->chunk = decode_chunk(rows, wrs, nth);
            const int64_t ntask = (rows + J->chunk - 1) / J->chunk;
            if (paired) {
                // one pass over all copies: f (a form) or the probe pattern (f NULL); returns GB/s
                double *ga = malloc((size_t)pairs * 5 * sizeof *ga), *gb = ga + pairs, *gp = gb + pairs, *ra = gp + pairs,
                       *rb = ra + pairs;
                if (!ga) return fprintf(stderr, "out of memory\n"), 1;
                int wins = 0;
                for (int i = -1; i < pairs; i++) { // i -1: warm-up
                    double g[3];
                    for (int k = 0; k < 3; k++) {
                        const int which = k == 2 ? 2 : (i & 1) ? 1 - k : k; // A B P, then B A P
                        const form *f = which == 0 ? &fa : &fb;
                        int64_t t0 = kvt_time_ns();
                        if (which < 2) {
                            kvt_kernels_set_decode_variant(tf[which], f->v);
                            kvt_kernels_set_isa(f->isa < 0 ? isa_run : (kvt_isa)f->isa);
                            if (f->pf < 0) kvt_kernels_reset_prefetch(); // the CPU's, per type too
                            else kvt_kernels_set_prefetch(f->pf), kvt_kernels_set_prefetch_dense(f->pf);
                            W.type = tf[which];
                            t0 = kvt_time_ns();
                            for (int c = 0; c < copies; c++) {
                                W.data = wf[which] + stride * (size_t)c;
                                const kvt_weight *wp = &W;
                                kvt_matmul_par(pool, &wp, &y, 1, x, 1, scratch);
                            }
                        } else { // the faster of the two probe patterns (a pass of each)
                            double best = 0;
                            for (int pt = 0; pt < 2; pt++) {
                                t0 = kvt_time_ns();
                                for (int c = 0; c < copies; c++) {
                                    J->w = w + stride * (size_t)c;
                                    kvt_threadpool_run(pool, pt ? stream2_task : stream4_task, J, ntask);
                                }
                                const double gp = (double)wbytes * copies / ((double)(kvt_time_ns() - t0) / 1e9) / 1e9;
                                if (gp > best) best = gp;
                            }
                            g[2] = best;
                            continue;
                        }
                        g[which] = (double)wbytes * copies / ((double)(kvt_time_ns() - t0) / 1e9) / 1e9;
                    }
                    kvt_kernels_set_decode_variant(tf[0], 0);
                    kvt_kernels_set_decode_variant(tf[1], 0);
                    kvt_kernels_reset_prefetch();
                    kvt_kernels_set_isa(isa_run);
                    if (i < 0) continue;
                    ga[i] = g[0], gb[i] = g[1], gp[i] = g[2];
                    wins += g[1] > g[0];
                    if (verbose)
                        printf("  pair %2d: A %6.2f B %6.2f probe %6.2f GB/s  B/A %.3f\n", i, g[0], g[1], g[2], g[1] / g[0]);
                }
                double *q = malloc((size_t)pairs * sizeof *q);
                if (!q) return fprintf(stderr, "out of memory\n"), 1;
                for (int i = 0; i < pairs; i++) q[i] = gb[i] / ga[i], ra[i] = ga[i] / gp[i], rb[i] = gb[i] / gp[i];
                const double mq = median(q, pairs), mra = median(ra, pairs), mrb = median(rb, pairs);
                const double ma = median(ga, pairs), mb = median(gb, pairs), mp = median(gp, pairs);
                printf("%-8s %-5s %5lld x %-5lld %8.2f %8.2f %8.2f %6.0f%% %6.0f%% %7.3f %6.0f%%\n", kvt_type_name(t),
                       shapes[si].name, (long long)rows, (long long)n, ma, mb, mp, 100 * mra, 100 * mrb, mq,
                       100.0 * wins / pairs);
                free(ga), free(q);
            } else {
                double best_g = 1e30, best_s = 1e30;
                for (int rep = -1; rep < reps; rep++) { // rep -1: warm-up
                    int64_t t0 = kvt_time_ns();
                    for (int c = 0; c < copies; c++) {
                        W.data = w + stride * (size_t)c;
                        const kvt_weight *wp = &W;
                        kvt_matmul_par(pool, &wp, &y, 1, x, 1, scratch);
                    }
                    const double g = (double)(kvt_time_ns() - t0) / 1e9 / copies;
                    t0 = kvt_time_ns();
                    for (int c = 0; c < copies; c++) {
                        J->w = w + stride * (size_t)c;
                        kvt_threadpool_run(pool, stream_task, J, ntask);
                    }
                    const double st = (double)(kvt_time_ns() - t0) / 1e9 / copies;
                    if (rep >= 0 && g < best_g) best_g = g;
                    if (rep >= 0 && st < best_s) best_s = st;
                }
                const double gg = (double)wbytes / best_g / 1e9, sg = (double)wbytes / best_s / 1e9;
                printf("%-8s %-5s %5lld x %-5lld %9.2f %9.2f %9.2f %7.0f%% %7.0f%%   (y0 %g)\n", kvt_type_name(t),
                       shapes[si].name, (long long)rows, (long long)n, gg, sg, probe, 100 * gg / sg, 100 * gg / probe, y[0]);
            }
            fflush(stdout);
            munmap(w, stride * (size_t)copies);
            for (int k = 0; k < 2; k++)
                if (wf[k] != w) munmap(wf[k], stride * (size_t)copies);
            free(f), free(x), free(y), free(tmp), free(scratch), free(J);
        }
    kvt_threadpool_free(pool);
    return 0;
}
