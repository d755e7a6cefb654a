#include "membw.h"

#include <stdlib.h>
#include <string.h>

#include "hugemem.h"
#include "timer.h"

#define CHUNK (64 * 1024)

// Access patterns the probe tries, its figure the best of them: decode kernels that read several streams per thread
// with software prefetch (q4_1_x8: 4 groups at once) read faster than one plain stream per thread, so a probe of one
// pattern only would understate the limit (the q4_1_x8 decode read 103-125% of it on an Intel Xeon, 2026-11-29).
typedef enum { BW_ONE, BW_FOUR, BW_FOUR_PF, BW_N_PATTERNS } bw_pattern;
#define STREAMS 4
#define PF_BYTES 4096 // the prefetch distance of the four-stream pattern (the decode GEMVs' on Intel: quant.h)

typedef struct {
    const uint64_t *buf;
    uint64_t *sums;  // [n_threads * 8] (one cache line each)
    int64_t stride;  // BW_FOUR*: uint64 words between a task's streams (its chunks t + k * tasks, k < STREAMS)
    bool pf;
} bw_job;

// XOR-reduces one chunk; the reduction keeps the loads alive. The AVX2 form
// reads 128 bytes per iteration so that the loop is limited by memory, not
// by instructions (a scalar loop tops out below DRAM bandwidth on one core).
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t chunk_xor_avx2(const uint64_t *p) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (int64_t i = 0; i < CHUNK / 8; i += 16) {
        a = _mm256_xor_si256(a, _mm256_load_si256((const __m256i *)(p + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256((const __m256i *)(p + i + 4)));
        c = _mm256_xor_si256(c, _mm256_load_si256((const __m256i *)(p + i + 8)));
        d = _mm256_xor_si256(d, _mm256_load_si256((const __m256i *)(p + i + 12)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    uint64_t r[4];
    _mm256_storeu_si256((__m256i *)r, a);
    return r[0] ^ r[1] ^ r[2] ^ r[3];
}
#define HAVE_AVX2_XOR 1
#endif

static uint64_t chunk_xor(const uint64_t *p) {
#ifdef HAVE_AVX2_XOR
    if (__builtin_cpu_supports("avx2")) return chunk_xor_avx2(p);
#endif
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = 0; i < CHUNK / 8; i += 4) {
        a ^= p[i];
        b ^= p[i + 1];
        c ^= p[i + 2];
        d ^= p[i + 3];
    }
    return a ^ b ^ c ^ d;
}

// XOR-reduces STREAMS chunks `stride` words apart, line by line in turn (several reads in flight per core, as the
// x8 decode GEMVs); with pf, each stream's lines PF_BYTES ahead prefetched into L2 first.
#ifdef HAVE_AVX2_XOR
__attribute__((target("avx2"))) static uint64_t chunks_xor4_avx2(const uint64_t *p, int64_t stride, bool pf) {
    __m256i x[STREAMS];
    for (int k = 0; k < STREAMS; k++) x[k] = _mm256_setzero_si256();
    for (int64_t i = 0; i < CHUNK / 8; i += 8) { // 64 bytes of each stream per step
        for (int k = 0; k < STREAMS; k++) {
            const uint64_t *q = p + k * stride + i;
            if (pf) _mm_prefetch((const char *)q + PF_BYTES, _MM_HINT_T1);
            x[k] = _mm256_xor_si256(x[k], _mm256_xor_si256(_mm256_load_si256((const __m256i *)q),
                                                           _mm256_load_si256((const __m256i *)(q + 4))));
        }
    }
    const __m256i a = _mm256_xor_si256(_mm256_xor_si256(x[0], x[1]), _mm256_xor_si256(x[2], x[3]));
    uint64_t r[4];
    _mm256_storeu_si256((__m256i *)r, a);
    return r[0] ^ r[1] ^ r[2] ^ r[3];
}
#endif

static uint64_t chunks_xor4(const uint64_t *p, int64_t stride, bool pf) {
#ifdef HAVE_AVX2_XOR
    if (__builtin_cpu_supports("avx2")) return chunks_xor4_avx2(p, stride, pf);
#endif
    uint64_t x[STREAMS] = {0};
    for (int64_t i = 0; i < CHUNK / 8; i += 8)
        for (int k = 0; k < STREAMS; k++) {
            const uint64_t *q = p + k * stride + i;
            if (pf) __builtin_prefetch((const char *)q + PF_BYTES);
            x[k] ^= q[0] ^ q[1] ^ q[2] ^ q[3] ^ q[4] ^ q[5] ^ q[6] ^ q[7];
        }
    return x[0] ^ x[1] ^ x[2] ^ x[3];
}

static void bw_task(void *vj, int64_t t, int thread) {
    bw_job *J = vj;
    const uint64_t *p = J->buf + t * (CHUNK / 8);
    J->sums[thread * 8] ^= J->stride ? chunks_xor4(p, J->stride, J->pf) : chunk_xor(p);
}

double kvt_measure_read_bw(kvt_threadpool *pool, int64_t bytes, int reps) {
    int64_t n_chunks = (bytes / CHUNK + STREAMS - 1) / STREAMS * STREAMS; // whole sets of STREAMS chunks
    if (n_chunks < STREAMS) n_chunks = STREAMS;
    // 2 MiB pages, as the repacked weights that decode streams: on 4 KiB pages the probe read 5-40% less here
    // (docs/BENCHMARKS.md), so a decode could pass "100% of DRAM"
    uint64_t *buf = kvt_alloc_huge((size_t)(n_chunks * CHUNK), true);
    int nt = kvt_threadpool_n_threads(pool);
    uint64_t *sums = calloc((size_t)nt * 8, sizeof(uint64_t));
    if (!buf || !sums) {
        free(buf);
        free(sums);
        return 0;
    }
    memset(buf, 1, (size_t)(n_chunks * CHUNK));
    double best = 0;
    for (int r = 0; r < reps; r++)
        for (int pat = 0; pat < BW_N_PATTERNS; pat++) {
            // BW_ONE: task t reads chunk t; BW_FOUR*: task t the chunks t + k * n_chunks / STREAMS
            bw_job J = {buf, sums, pat == BW_ONE ? 0 : n_chunks / STREAMS * (CHUNK / 8), pat == BW_FOUR_PF};
            int64_t t0 = kvt_time_ns();
            kvt_threadpool_run(pool, bw_task, &J, pat == BW_ONE ? n_chunks : n_chunks / STREAMS);
            double s = (double)(kvt_time_ns() - t0) / 1e9;
            double bw = (double)(n_chunks * CHUNK) / s;
            if (bw > best) best = bw;
        }
    free(buf);
    free(sums);
    return best;
}
