// weight_pf.c - decode's weight prefetch in the pool's idle time (weight_pf.h).
//
// The window is replaced in three steps, all sequentially consistent: the cursor moves to a new generation with no
// chunk left (index 0xffffffff), the ranges are written, then the cursor goes to chunk 0 of that generation. A thread
// loads the cursor, then the window, then claims the chunk with a compare-exchange on the cursor: if it succeeds, no
// replacement began between the two (the cursor would have moved), so the window it read is the one of its chunk.
#include "weight_pf.h"

#define NONE 0xffffffffu

void kvt_wpf_init(kvt_wpf *p) {
    atomic_init(&p->cur, NONE);
    atomic_init(&p->n_chunk, 0);
    atomic_init(&p->n_range, 0);
    for (int i = 0; i < KVT_WPF_RANGES; i++) atomic_init(&p->base[i], 0), atomic_init(&p->len[i], 0);
}

void kvt_wpf_post(kvt_wpf *p, const kvt_wpf_range *r, int n, int64_t budget) {
    const uint64_t gen = (atomic_load(&p->cur) >> 32) + 1;
    atomic_store(&p->cur, gen << 32 | NONE);
    if (n > KVT_WPF_RANGES) n = KVT_WPF_RANGES;
    if (n <= 0 || budget <= 0) return;
    int64_t longest = 0, total = 0;
    for (int i = 0; i < n; i++) {
        const int64_t b = r[i].bytes > 0 ? r[i].bytes : 0;
        atomic_store(&p->base[i], (uintptr_t)r[i].p);
        atomic_store(&p->len[i], b);
        if (b > longest) longest = b;
        total += b;
    }
    if (total <= 0) return;
    // rounds of one chunk per range: as many as the longest range has chunks, fewer when the budget ends first
    int64_t rounds = (longest + KVT_WPF_CHUNK - 1) / KVT_WPF_CHUNK, per_round = (int64_t)n * KVT_WPF_CHUNK;
    if (total > budget && budget / per_round + 1 < rounds) rounds = budget / per_round + 1;
    int64_t n_chunk = rounds * n;
    if (n_chunk > NONE - 1) n_chunk = NONE - 1;
    atomic_store(&p->n_range, n);
    atomic_store(&p->n_chunk, n_chunk);
    atomic_store(&p->cur, gen << 32);
}

bool kvt_wpf_step(kvt_wpf *p) {
    for (;;) {
        uint64_t c = atomic_load(&p->cur);
        const int64_t k = (int64_t)(c & NONE), n_chunk = atomic_load(&p->n_chunk);
        const int n = atomic_load(&p->n_range);
        if (k >= n_chunk || n <= 0) return false; // also the index NONE of a window being replaced
        const int i = (int)(k % n);
        const int64_t off = k / n * KVT_WPF_CHUNK, len = atomic_load(&p->len[i]);
        const uintptr_t base = atomic_load(&p->base[i]);
        if (!atomic_compare_exchange_strong(&p->cur, &c, c + 1)) continue;
        if (off >= len) continue; // this range is shorter than the others: the next chunk
        const int64_t end = off + KVT_WPF_CHUNK < len ? off + KVT_WPF_CHUNK : len;
        const char *b = (const char *)base;
        for (int64_t o = off; o < end; o += 64) __builtin_prefetch(b + o, 0, 2); // into L2 (prefetcht1)
        return true;
    }
}
