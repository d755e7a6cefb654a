// test_kv_attn.c - attention mass from the streaming attention to the paged store (attention.h,
// kvt_kv_paged_attn_mass) and the attn-ema policy that ranks by it: the reported mass of every block is the
// softmax weight of its positions (against a direct computation), whether decode attends in one task or in
// chunks on two threads; the attention's result is the same bits as under another policy; and a block that
// attention weights heavily outranks more recently used blocks with little mass (lru evicts it instead); attn-ema
// prefetches a block its EMA finds important when the policy ranks a resident block below it.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/attn/attention.h"
#include "../src/kv/kv_paged.h"
#include "test.h"

enum { HEADS = 2, DIM = 8, BT = 16, NB = 9, NPOS = NB * BT, HEAVY = 2 };

// Keys: block HEAVY along the first axis (3 e0), the others small values exact in F16; values likewise.
static float key_of(int64_t p, int d) {
    if (p / BT == HEAVY) return d == 0 ? 3.0f : 0.0f;
    return (float)((p * 7 + d * 3) % 5 - 2) * 0.0625f;
}

typedef struct {
    int64_t victim; // layer-0 block index of the first T0 eviction, -1 none
} first_victim;

static void on_evict(void *ud, int32_t layer, int32_t group, int64_t index) {
    first_victim *v = ud;
    (void)layer;
    (void)group;
    if (v->victim < 0) v->victim = index;
}

// One layer, one KV head (two query heads), 16-position blocks, a fast tier of fast_blocks blocks over an
// unbounded host tier, the given policy; eviction callback cb(ud).
static kvt_kv_paged_params store_params(int64_t fast_blocks, const char *policy, void (*cb)(void *, int32_t, int32_t, int64_t),
                                        void *ud) {
    kvt_kv_paged_params p = kvt_kv_paged_params_default();
    p.n_layer = 1;
    p.n_head_kv = 1;
    p.head_dim = p.head_dim_v = DIM;
    p.n_ctx = NPOS + BT;
    p.block_tokens = BT;
    p.fast_bytes = fast_blocks * kvt_kv_paged_block_bytes(&p);
    p.host_bytes = -1;
    p.evict = policy;
    p.on_evict = cb;
    p.on_evict_ud = ud;
    return p;
}

// The store of store_params with a fast tier of NB blocks and no copy engine; the NPOS positions appended.
static kvt_kv *make_store(const char *policy, first_victim *fv, kvt_err *err) {
    kvt_kv_paged_params p = store_params(NB, policy, on_evict, fv);
    p.prefetch = 0;
    kvt_kv *kv = NULL;
    if (kvt_kv_paged_init(&p, &kv, err)) return NULL;
    float k[NPOS * DIM], v[NPOS * DIM];
    for (int64_t i = 0; i < NPOS; i++)
        for (int d = 0; d < DIM; d++) k[i * DIM + d] = key_of(i, d), v[i * DIM + d] = (float)((i + d) % 3) * 0.5f;
    if (kv->ops->append(kv, 0, 0, 0, NPOS, k, v, err)) {
        kvt_kv_free(kv);
        return NULL;
    }
    return kv;
}

// The token at NPOS - 1 attends every position, on `threads` threads (two: its chunks as separate tasks).
static bool decode(kvt_kv *kv, int threads, float *out, kvt_err *err) {
    const kvt_attn_params ap = {HEADS, 1.0f / sqrtf((float)DIM), 0, 0};
    float q[HEADS * DIM] = {0};
    q[0] = 3.0f; // head 0 looks for block HEAVY; head 1 (all 0) weighs every position alike
    kvt_threadpool *pool = NULL;
    bool ok = !kvt_threadpool_init(threads, &pool, err);
    void *sc[2] = {NULL, NULL}, *ws = malloc((size_t)kvt_attn_workspace_bytes(kv, HEADS, threads));
    for (int i = 0; ok && i < threads; i++) ok = !posix_memalign(&sc[i], 64, (size_t)kvt_attn_scratch_bytes(kv, HEADS, 0));
    ok = ok && ws && !kvt_attention(kv, 0, 0, &ap, q, NPOS - 1, 1, out, pool, sc, ws, err);
    free(sc[0]);
    free(sc[1]);
    free(ws);
    kvt_threadpool_free(pool);
    return ok;
}

// Expected mass of each block: the softmax weights of head 0 and head 1 over the positions, averaged.
static void expected_mass(double *mass) {
    const double scale = 1.0 / sqrt((double)DIM);
    double w[NPOS], sum = 0;
    for (int64_t p = 0; p < NPOS; p++) sum += (w[p] = exp(3.0 * key_of(p, 0) * scale));
    for (int b = 0; b < NB; b++) {
        mass[b] = 0;
        for (int64_t p = b * BT; p < (b + 1) * BT; p++) mass[b] += 0.5 * (w[p] / sum + 1.0 / NPOS);
    }
}

static void test_mass_export(void) {
    kvt_err err = {0};
    first_victim fv = {-1};
    kvt_kv *kv = make_store("attn-ema", &fv, &err), *ref = make_store("lru", &fv, &err);
    float out[HEADS * DIM], out1[HEADS * DIM], out_ref[HEADS * DIM];
    double mass[NB], worst = 0, sum = 0;
    expected_mass(mass);
    // one thread, then two (chunked): the EMA (weight 1/2) is mass / 2, then 3 mass / 4
    bool ok = kv && ref && kvt_kv_paged_wants_attn_mass(kv) && !kvt_kv_paged_wants_attn_mass(ref) &&
              decode(kv, 1, out1, &err);
    for (int b = 0; ok && b < NB; b++) worst = fmax(worst, fabs(kvt_kv_paged_block_attn_ema(kv, 0, 0, 0, b) - 0.5 * mass[b]));
    ok = ok && decode(kv, 2, out, &err) && decode(ref, 2, out_ref, &err);
    for (int b = 0; ok && b < NB; b++) {
        const double e = kvt_kv_paged_block_attn_ema(kv, 0, 0, 0, b);
        worst = fmax(worst, fabs(e - 0.75 * mass[b]));
        sum += e;
    }
    ok = ok && worst < 1e-5 && mass[HEAVY] > 0.4 && !memcmp(out, out_ref, sizeof out) && !memcmp(out, out1, sizeof out) &&
         kvt_kv_paged_block_attn_ema(ref, 0, 0, 0, 0) == 0.0f;
    kvt_kv_free(kv);
    kvt_kv_free(ref);
    test_result(ok, "kv attn: decode attention reports each block's softmax mass to an attn-ema store (1 and 2 "
                    "threads), its result the same bits as under lru",
                "%s; worst error %.2e, EMA sum %.4f (0.75 expected), heavy block mass %.3f", err.msg, worst, sum,
                mass[HEAVY]);
}

// After one decode step every block was read; then every block but HEAVY is read again (HEAVY is the least
// recently used), and a new block needs a slot in the full fast tier: attn-ema evicts a block of little mass,
// lru the heavy one.
static void test_mass_outranks_recency(void) {
    int64_t victim[2] = {-2, -2};
    const char *pols[2] = {"attn-ema", "lru"};
    kvt_err err = {0};
    bool ok = true;
    for (int i = 0; ok && i < 2; i++) {
        first_victim fv = {-1};
        kvt_kv *kv = make_store(pols[i], &fv, &err);
        float out[HEADS * DIM], k[DIM] = {0}, v[DIM] = {0};
        ok = kv && fv.victim < 0 && decode(kv, 1, out, &err);
        for (int64_t b = 0; ok && b < NB; b++) {
            kvt_kv_view view;
            if (b == HEAVY) continue;
            ok = !kv->ops->acquire(kv, 0, 0, 0, b, &view, &err);
            if (ok) kv->ops->release(kv, 0, 0, 0, b);
        }
        ok = ok && !kv->ops->append(kv, 0, 0, NPOS, 1, k, v, &err);
        victim[i] = fv.victim;
        kvt_kv_free(kv);
    }
    ok = ok && victim[0] >= 0 && victim[0] != HEAVY && victim[1] == HEAVY;
    test_result(ok, "kv attn: attn-ema keeps the block attention weights most although it was used least recently "
                    "(lru evicts it)",
                "%s; victims: attn-ema block %lld, lru block %lld", err.msg, (long long)victim[0], (long long)victim[1]);
}

static void on_evict_mask(void *ud, int32_t layer, int32_t group, int64_t index) {
    (void)layer;
    (void)group;
    *(uint32_t *)ud |= 1u << index;
}

// attn-ema's prefetch (kvt_kv_paged_attn_prefetch, kvt_attn_prefetch_wanted): a fast tier of 6 of the 9 blocks with a host tier below and a
// copy engine; the appends leave 3 blocks in the host tier, the first of them (`target`, named by the store's
// on_evict) is the block under test. A mass report that makes it important (EMA 0.225 >= 1.25 / 9) while the
// resident blocks weigh little gets it loaded ahead of use (the next acquire hits); when the resident blocks weigh
// more (EMA 0.375 each) the policy keeps them and the prefetch is dropped (the acquire misses); an even report (no
// block important) queues nothing.
static void test_mass_prefetch(void) {
    const int64_t want_hit[3] = {1, 0, 0};
    kvt_err err = {0};
    bool ok = true;
    int64_t got[3][2] = {{0}}, target = -1;
    for (int c = 0; ok && c < 3; c++) {
        uint32_t out = 0; // blocks evicted from the fast tier
        const kvt_kv_paged_params p = store_params(6, "attn-ema", on_evict_mask, &out);
        kvt_kv *kv = NULL;
        float k[NPOS * DIM] = {0}, v[NPOS * DIM] = {0};
        ok = !kvt_kv_paged_init(&p, &kv, &err) && !kv->ops->append(kv, 0, 0, 0, NPOS, k, v, &err) && out;
        target = ok ? __builtin_ctz(out) : -1;
        float mass[NB]; // the target; the resident blocks; the other blocks in the host tier
        for (int b = 0; b < NB; b++)
            mass[b] = c == 2 ? 1.0f / NB : b == target ? 0.3f : (out >> b & 1) ? 0.02f : c == 1 ? 0.5f : 0.02f;
        kvt_kv_stats s0, s1;
        if (ok) {
            kvt_kv_paged_drain(kv);
            kv->ops->stats(kv, &s0);
            kvt_kv_paged_attn_mass(kv, 0, 0, 0, 0, mass, NB);
            kvt_kv_paged_attn_mass(kv, 0, 0, 0, 0, mass, NB); // EMA 3/4 of the mass
            kvt_kv_paged_attn_prefetch(kv, 0, 0, 0, 0, NB, 1.0 / NB);
            kvt_kv_paged_drain(kv);
            kv->ops->stats(kv, &s1);
            got[c][1] = s1.prefetches - s0.prefetches;
            kvt_kv_view view; // (its read then queues the schedule prefetch: counted no more)
            ok = !kv->ops->acquire(kv, 0, 0, 0, target, &view, &err);
            if (ok) kv->ops->release(kv, 0, 0, 0, target);
            kv->ops->stats(kv, &s1);
            got[c][0] = s1.hits - s0.hits;
            ok = ok && got[c][0] == want_hit[c] && got[c][1] == want_hit[c];
        }
        kvt_kv_free(kv);
    }
    test_result(ok, "kv attn: attn-ema prefetches a block its attention EMA finds important, only if the policy ranks "
                    "a resident block below it",
                "%s; block %lld, hits / prefetches: important %lld / %lld (1 / 1), outranked %lld / %lld (0 / 0), even "
                "%lld / %lld (0 / 0)", err.msg, (long long)target, (long long)got[0][0], (long long)got[0][1],
                (long long)got[1][0], (long long)got[1][1], (long long)got[2][0], (long long)got[2][1]);
}

void test_kv_attn(const test_env *env) {
    (void)env;
    test_mass_export();
    test_mass_outranks_recency();
    test_mass_prefetch();
}
