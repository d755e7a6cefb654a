// victim_bench.c - micro-benchmark of the paged store's victim search (kv_paged.c pick_victim ->
// kv_victim.c): a store of small blocks whose fast tier holds half of them, host tier unbounded, no copy
// engine; a decode-order scan (layer by layer, block by block) over every block, so that under lru / lfu
// most acquires miss and each miss searches a window of 256 resident blocks for a victim. Blocks are
// small (block_tokens x 2 x head_dim F16), so the copy is a few hundred bytes and the search dominates.
//   make victim-bench
//   build/victim_bench [policy=lru] [layers=30] [ctx=4096] [block=64] [steps=20] [reps=5] [disk_dir]
// With disk_dir the store also has a disk tier there (unused by the blocks, as the host tier never fills: every
// search then looks for a clean block in vain, the search's slowest case).
// Prints, per rep, wall and thread-CPU ns per acquire and the misses, then the best and median of each (on a
// shared machine the CPU time is the steadier figure: it leaves out the time the thread waited for a core).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/base/timer.h"
#include "../../src/kv/kv_paged.h"

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *policy = argc > 1 ? argv[1] : "lru";
    const int32_t layers = argc > 2 ? atoi(argv[2]) : 30;
    const int64_t ctx = argc > 3 ? atoll(argv[3]) : 4096, block = argc > 4 ? atoll(argv[4]) : 64;
    const int steps = argc > 5 ? atoi(argv[5]) : 20;
    int reps = argc > 6 ? atoi(argv[6]) : 5;
    if (reps < 1 || reps > 64) reps = 5;
    const char *disk = argc > 7 ? argv[7] : NULL;
    if (layers < 1 || ctx < block || block < 1 || steps < 1) {
        fprintf(stderr, "victim_bench: bad arguments\n");
        return 2;
    }
    kvt_kv_paged_params p = kvt_kv_paged_params_default();
    p.n_layer = layers;
    p.n_head_kv = 1;
    p.head_dim = p.head_dim_v = 4;
    p.n_ctx = ctx;
    p.block_tokens = block;
    const int64_t nb = ctx / block;
    p.fast_bytes = (int64_t)layers * nb / 2 * kvt_kv_paged_block_bytes(&p);
    p.host_bytes = -1;
    p.evict = policy;
    p.disk_dir = disk;
    p.prefetch = 0;
    p.n_io_threads = 0;
    float *kvd = calloc((size_t)(block * 4), sizeof *kvd);
    double ns[64], cpu[64];
    for (int r = 0; r < reps; r++) {
        kvt_kv *kv = NULL;
        kvt_err err = {0};
        if (!kvd || kvt_kv_paged_init(&p, &kv, &err)) {
            fprintf(stderr, "victim_bench: %s\n", kvd ? err.msg : "out of memory");
            return 1;
        }
        for (int64_t b = 0; b < nb; b++) {
            for (int32_t L = 0; L < layers; L++) {
                if (kv->ops->append(kv, 0, L, b * block, block, kvd, kvd, &err)) {
                    fprintf(stderr, "victim_bench: %s\n", err.msg);
                    return 1;
                }
            }
        }
        kvt_kv_stats st0 = {0}, st1 = {0};
        kvt_kv_get_stats(kv, &st0);
        const int64_t t0 = kvt_time_ns(), c0 = kvt_thread_cpu_ns();
        for (int s = 0; s < steps; s++) {
            for (int32_t L = 0; L < layers; L++) {
                for (int64_t b = 0; b < nb; b++) {
                    kvt_kv_view view;
                    if (kv->ops->acquire(kv, 0, L, 0, b, &view, &err)) {
                        fprintf(stderr, "victim_bench: %s\n", err.msg);
                        return 1;
                    }
                    kv->ops->release(kv, 0, L, 0, b);
                }
            }
        }
        const int64_t t1 = kvt_time_ns(), c1 = kvt_thread_cpu_ns();
        kvt_kv_get_stats(kv, &st1);
        const double n = (double)steps * layers * (double)nb;
        ns[r] = (double)(t1 - t0) / n;
        cpu[r] = (double)(c1 - c0) / n;
        printf("%s rep %d: %.1f ns (CPU %.1f ns) per acquire, %lld misses of %.0f acquires\n", policy, r, ns[r], cpu[r],
               (long long)(st1.misses - st0.misses), n);
        kvt_kv_free(kv);
    }
    qsort(ns, (size_t)reps, sizeof ns[0], cmp);
    qsort(cpu, (size_t)reps, sizeof cpu[0], cmp);
    printf("%s: best %.1f ns, median %.1f ns per acquire; CPU best %.1f, median %.1f (layers %d, ctx %lld, block %lld, %d "
           "steps%s)\n", policy, ns[0], ns[reps / 2], cpu[0], cpu[reps / 2], layers, (long long)ctx, (long long)block, steps,
           disk ? ", disk tier" : "");
    free(kvd);
    return 0;
}
