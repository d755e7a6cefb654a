#include "membw.h"

#include <stdlib.h>
#include <string.h>

#include "hugemem.h"
#include "timer.h"

#define CHUNK (64 * 1024)

// Access patterns the probe tries, its figure the best of them: decode kernels that read several streams per thread
// with software prefetch (q4_1_x8: 4 groups at once) read faster than one plain stream per thread, so a probe of one
// pattern only would understate the limit (the q4_1_x8 decode read 103-125% of it on an Intel Xeon, 2026-11-29).
#define STREAMS 4
#define PF_BYTES 4096 // the prefetch distance of the four-stream pattern (the decode GEMVs' on Intel: quant.h)
// The two-stream pattern's distance, into L1: on an AMD EPYC Zen 5 (2 threads) it read 1.12-1.37x the four-stream
// prefetching pattern and 1.1-1.4x the others, as fast as the decode GEMVs' own reads there, which the three older
// patterns did not reach (q8_0_x8 at up to 169% of them: docs/log/BENCHMARKS-kernels-5.md, z5dq and z5kq).
#define PF2_BYTES 2048

typedef struct {
    const uint64_t *buf;
    uint64_t *sums;  // [n_threads * 8] (one cache line each)
    int64_t stride;  // multi-stream patterns: uint64 words between a task's streams (its chunks t + k * tasks)
    kvt_read_pattern pat;
} bw_job;

// XOR-reduces the bytes; the reduction keeps the loads alive. The AVX2 forms read 128 (one stream) or 64 bytes of each
// stream per iteration so that the loop is limited by memory, not by instructions (a scalar loop tops out below DRAM
// bandwidth on one core).
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t xor_one_avx2(const char *p, int64_t len) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (int64_t i = 0; i + 128 <= len; i += 128) {
        a = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)(p + i)));
        b = _mm256_xor_si256(b, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
        c = _mm256_xor_si256(c, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
        d = _mm256_xor_si256(d, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    uint64_t r[4];
    _mm256_storeu_si256((__m256i *)r, a);
    return r[0] ^ r[1] ^ r[2] ^ r[3];
}

// ns streams `stride` bytes apart, 64 bytes of each in turn (several reads in flight per core, as the x8 decode
// GEMVs); with pf, each stream's line pf bytes ahead prefetched first, into L2 (l1 false) or L1.
__attribute__((target("avx2"), always_inline)) static inline uint64_t xor_streams_avx2(const char *p, int64_t stride,
                                                                                     int64_t len, const int ns,
                                                                                     const int pf, const bool l1) {
    __m256i x[STREAMS];
    for (int k = 0; k < STREAMS; k++) x[k] = _mm256_setzero_si256();
    for (int64_t i = 0; i + 64 <= len; i += 64) {
        for (int k = 0; k < ns; k++) {
            const char *q = p + k * stride + i;
            if (pf && l1) _mm_prefetch(q + pf, _MM_HINT_T0);
            else if (pf) _mm_prefetch(q + pf, _MM_HINT_T1);
            x[k] = _mm256_xor_si256(x[k], _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)q),
                                                           _mm256_loadu_si256((const __m256i *)(q + 32))));
        }
    }
    const __m256i a = _mm256_xor_si256(_mm256_xor_si256(x[0], x[1]), _mm256_xor_si256(x[2], x[3]));
    uint64_t r[4];
    _mm256_storeu_si256((__m256i *)r, a);
    return r[0] ^ r[1] ^ r[2] ^ r[3];
}

// Pattern pat's form (its streams and prefetch constants).
__attribute__((target("avx2"))) static uint64_t xor_pat_avx2(const char *p, int64_t stride, int64_t len,
                                                            kvt_read_pattern pat) {
    if (pat == KVT_READ_ONE) return xor_one_avx2(p, len);
    if (pat == KVT_READ_FOUR) return xor_streams_avx2(p, stride, len, STREAMS, 0, false);
    if (pat == KVT_READ_FOUR_PF) return xor_streams_avx2(p, stride, len, STREAMS, PF_BYTES, false);
    return xor_streams_avx2(p, stride, len, 2, PF2_BYTES, true);
}
#define HAVE_AVX2_XOR 1
#endif

uint64_t kvt_read_streams(const void *p, int64_t stride, int64_t len, kvt_read_pattern pat) {
#ifdef HAVE_AVX2_XOR
    if (__builtin_cpu_supports("avx2")) return xor_pat_avx2(p, stride, len, pat);
#endif
    const int ns = kvt_read_pattern_streams(pat);
    const int pf = pat == KVT_READ_FOUR_PF ? PF_BYTES : pat == KVT_READ_TWO_PF_L1 ? PF2_BYTES : 0;
    const int step = pat == KVT_READ_ONE ? 128 : 64;
    uint64_t x[STREAMS] = {0};
    for (int64_t i = 0; i + step <= len; i += step)
        for (int k = 0; k < ns; k++) {
            const uint64_t *q = (const uint64_t *)((const char *)p + k * stride + i);
            if (pf) __builtin_prefetch((const char *)q + pf);
            for (int j = 0; j < step / 8; j++) x[k] ^= q[j];
        }
    return x[0] ^ x[1] ^ x[2] ^ x[3];
}

int kvt_read_pattern_streams(kvt_read_pattern pat) {
    return pat == KVT_READ_ONE ? 1 : pat == KVT_READ_TWO_PF_L1 ? 2 : STREAMS;
}

static void bw_task(void *vj, int64_t t, int thread) {
    bw_job *J = vj;
    J->sums[thread * 8] ^= kvt_read_streams(J->buf + t * (CHUNK / 8), J->stride * 8, CHUNK, J->pat);
}

struct kvt_read_probe {
    uint64_t *buf;    // [n_win][n_chunks * CHUNK / 8], 2 MiB pages, written once (faulted in) at init
    uint64_t *sums;   // [n_threads * 8]: one cache line a thread
    int64_t n_chunks; // of a pass (a window), a multiple of STREAMS
    int64_t n_win;    // windows the passes read in turns
    int64_t next;     // passes so far (the next one reads window next % n_win)
    int n_threads;
};

kvt_status kvt_read_probe_init(int64_t bytes, int64_t ring_bytes, int n_threads, kvt_read_probe **out, kvt_err *err) {
    *out = NULL;
    if (n_threads < 1) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "read probe: %d threads", n_threads);
    int64_t n_chunks = (bytes / CHUNK + STREAMS - 1) / STREAMS * STREAMS; // whole sets of STREAMS chunks
    if (n_chunks < STREAMS) n_chunks = STREAMS;
    const int64_t n_win = ring_bytes > n_chunks * CHUNK ? (ring_bytes + n_chunks * CHUNK - 1) / (n_chunks * CHUNK) : 1;
    kvt_read_probe *p = calloc(1, sizeof *p);
    // 2 MiB pages, as the repacked weights that decode streams: on 4 KiB pages the probe read 5-40% less here
    // (docs/BENCHMARKS.md), so a decode could pass "100% of DRAM"
    if (p) p->buf = kvt_alloc_huge((size_t)(n_win * n_chunks * CHUNK), true);
    if (p) p->sums = calloc((size_t)n_threads * 8, sizeof(uint64_t));
    if (!p || !p->buf || !p->sums) {
        kvt_read_probe_free(p);
        return kvt_errorf(err, KVT_ERR_NOMEM, "read probe: out of memory for %lld bytes", (long long)(n_win * n_chunks * CHUNK));
    }
    memset(p->buf, 1, (size_t)(n_win * n_chunks * CHUNK)); // every page faulted in now, not in a timed pass
    p->n_chunks = n_chunks;
    p->n_win = n_win;
    p->n_threads = n_threads;
    *out = p;
    return KVT_OK;
}

void kvt_read_probe_free(kvt_read_probe *p) {
    if (!p) return;
    free(p->buf);
    free(p->sums);
    free(p);
}

int64_t kvt_read_probe_bytes(const kvt_read_probe *p) { return p->n_chunks * CHUNK; }

double kvt_read_probe_pass(kvt_read_probe *p, kvt_threadpool *pool, kvt_read_pattern pat) {
    if (kvt_threadpool_n_threads(pool) > p->n_threads || pat < 0 || pat >= KVT_READ_N_PATTERNS) return 0;
    // ns streams a task: task t reads the chunks t + k * n_chunks / ns, k < ns (n_chunks is a multiple of 4)
    const int64_t n_str = kvt_read_pattern_streams(pat);
    const uint64_t *win = p->buf + p->next++ % p->n_win * p->n_chunks * (CHUNK / 8);
    bw_job J = {win, p->sums, p->n_chunks / n_str * (CHUNK / 8), pat};
    const int64_t t0 = kvt_time_ns();
    kvt_threadpool_run(pool, bw_task, &J, p->n_chunks / n_str);
    const int64_t ns = kvt_time_ns() - t0;
    return ns > 0 ? (double)ns / 1e9 : 1e-9;
}

double kvt_measure_read_bw(kvt_threadpool *pool, int64_t bytes, int reps) {
    kvt_read_probe *p = NULL;
    if (kvt_read_probe_init(bytes, bytes, kvt_threadpool_n_threads(pool), &p, NULL) != KVT_OK) return 0;
    double best = 0;
    for (int r = 0; r < reps; r++)
        for (int pat = 0; pat < KVT_READ_N_PATTERNS; pat++) {
            const double bw = (double)kvt_read_probe_bytes(p) / kvt_read_probe_pass(p, pool, (kvt_read_pattern)pat);
            if (bw > best) best = bw;
        }
    kvt_read_probe_free(p);
    return best;
}
