#include "membw.h"

#include <stdlib.h>
#include <string.h>

#include "hugemem.h"
#include "timer.h"

#define CHUNK (64 * 1024)

typedef struct {
    const uint64_t *buf;
    uint64_t *sums; // [n_threads * 8] (one cache line each)
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

static void bw_task(void *vj, int64_t t, int thread) {
    bw_job *J = vj;
    J->sums[thread * 8] ^= chunk_xor(J->buf + t * (CHUNK / 8));
}

double kvt_measure_read_bw(kvt_threadpool *pool, int64_t bytes, int reps) {
    int64_t n_chunks = bytes / CHUNK;
    if (n_chunks < 1) n_chunks = 1;
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
    bw_job J = {buf, sums};
    double best = 0;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = kvt_time_ns();
        kvt_threadpool_run(pool, bw_task, &J, n_chunks);
        double s = (double)(kvt_time_ns() - t0) / 1e9;
        double bw = (double)(n_chunks * CHUNK) / s;
        if (bw > best) best = bw;
    }
    free(buf);
    free(sums);
    return best;
}
