#include "membw.h"

#include <stdlib.h>
#include <string.h>

#include "timer.h"

#define CHUNK (64 * 1024)

typedef struct {
    const uint64_t *buf;
    uint64_t *sums; // [n_threads * 8] (one cache line each)
} bw_job;

static void bw_task(void *vj, int64_t t, int thread) {
    bw_job *J = vj;
    const uint64_t *p = J->buf + t * (CHUNK / 8);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = 0; i < CHUNK / 8; i += 4) {
        a ^= p[i];
        b ^= p[i + 1];
        c ^= p[i + 2];
        d ^= p[i + 3];
    }
    J->sums[thread * 8] ^= a ^ b ^ c ^ d;
}

double kvt_measure_read_bw(kvt_threadpool *pool, int64_t bytes, int reps) {
    int64_t n_chunks = bytes / CHUNK;
    if (n_chunks < 1) n_chunks = 1;
    uint64_t *buf = malloc((size_t)(n_chunks * CHUNK));
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
