// sparse_seq.c - the per-sequence sparse state: created on demand, grown with the positions the sequence
// holds, copied on fork, cut back on truncate, freed with the sequence; key summaries and query history.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/hugemem.h"
#include "../kernels/quant.h"
#include "sparse_impl.h"

int64_t kvt_sparse_alloc_bytes(int64_t n) {
    const int64_t huge = (int64_t)2 << 20;
    return n >= KVT_SPARSE_HUGE_MIN ? (n + huge - 1) / huge * huge : (n + 63) / 64 * 64;
}

void *kvt_sparse_zalloc(size_t n, bool *ok) {
    void *p;
    // a buffer of KVT_SPARSE_HUGE_MIN bytes or more (the int8 key copies of a layer at a long context) in whole 2 MiB
    // pages: the scans that read it (the worker's over every key, the re-rank's over scattered candidate pages) then
    // miss the TLB 512 times less (measured: docs/log/SPARSE-log-2.md, "Cheaper selection for RAM"); the rounding is counted
    // (kvt_sparse_alloc_bytes in the summary bytes)
    const bool big = n >= KVT_SPARSE_HUGE_MIN;
    const size_t size = n ? (size_t)kvt_sparse_alloc_bytes((int64_t)n) : 64;
    if (!(p = kvt_alloc_huge(size, big))) {
        *ok = false;
        return NULL;
    }
    memset(p, 0, n);
    return p;
}

static bool has_summaries(const kvt_sparse *s) {
    return s->p.mode == KVT_SPARSE_QUEST || s->p.mode == KVT_SPARSE_ASYNCSPADE;
}

static int64_t pages_of(const kvt_sparse *s, int64_t cap) { return (cap + s->p.page - 1) / s->p.page; }

// asyncspade keeps key copies of this width (for the predicted query's scan or the real query's).
static bool uses_bits(const kvt_sparse *s, int32_t bits) {
    return s->p.mode == KVT_SPARSE_ASYNCSPADE && (s->p.key_bits == bits || s->p.rerank_bits == bits);
}

int64_t kvt_sparse_kept_pages(const kvt_sparse *s) {
    if (s->p.mode != KVT_SPARSE_ASYNCSPADE || s->p.keep <= 0.0 || s->p.rerank <= 1.0 || s->p.rerank_block <= 1) return 0;
    return (s->d.n_ctx + s->p.rerank_block - 1) / s->p.rerank_block;
}

int64_t kvt_sparse_layer_pieces(const kvt_sparse *s) {
    if (s->p.mode != KVT_SPARSE_ASYNCSPADE || !s->p.share_layers || !s->p.share || s->p.rerank <= 1.0) return 0;
    const int64_t Q = s->p.rerank_block > 1 ? s->p.rerank_block : 1; // token level: a piece per position
    return (int64_t)s->d.n_head_kv * (s->d.n_ctx / Q + 2); // a head's pieces: at most one per page
}

// Bytes of one layer's key summaries with room for cap positions.
static int64_t layer_summary_bytes(const kvt_sparse *s, int64_t cap) {
    const int64_t H = s->d.n_head_kv, hd = s->d.head_dim;
    return kvt_sparse_layer_summary_bytes(&s->p, H, hd, cap, s->p.mode == KVT_SPARSE_QUEST ? pages_of(s, cap) : 0);
}

// The same for a layer's own buffers of positions [off, cap) (off > 0: asyncspade's copies after a shared base).
static int64_t own_bytes(const kvt_sparse *s, int64_t cap, int64_t off) { return cap > off ? layer_summary_bytes(s, cap - off) : 0; }

// A layer's shareable key summaries as four buffers (asyncspade: k8, k8s, k4, k4s, NULL where that width is not used;
// quest: lo, hi) cut into blocks of B positions (asyncspade 16, the int8 and 4-bit layouts' blocks; quest a page): each
// buffer holds a KV head's blocks side by side, kh's from kh * (blocks per head), bb[a] bytes each.
enum { KEYBUFS = 4 };
static int64_t key_block(const kvt_sparse *s) { return s->p.mode == KVT_SPARSE_QUEST ? s->p.page : 16; }
static int64_t key_blocks_of(const kvt_sparse *s, int64_t positions) { return (positions + key_block(s) - 1) / key_block(s); }
static void key_block_bytes(const kvt_sparse *s, int64_t bb[KEYBUFS]) {
    const int32_t hd = s->d.head_dim;
    for (int a = 0; a < KEYBUFS; a++) bb[a] = 0;
    if (s->p.mode == KVT_SPARSE_QUEST) {
        bb[0] = bb[1] = (int64_t)hd * 4; // a page's element-wise minimum and maximum
    } else if (s->p.mode == KVT_SPARSE_ASYNCSPADE) {
        bb[0] = uses_bits(s, 8) ? 16 * (int64_t)hd : 0, bb[1] = uses_bits(s, 8) ? 16 * 4 : 0;
        bb[2] = uses_bits(s, 4) ? 16 * kvt_sparse_k4_row(hd) : 0, bb[3] = uses_bits(s, 4) ? 16 * 2 * kvt_sparse_k4_groups(hd) : 0;
    }
}
static void layer_bufs(const kvt_sparse *s, const kvt_sparse_layer *ly, void *b[KEYBUFS]) {
    const bool quest = s->p.mode == KVT_SPARSE_QUEST;
    b[0] = quest ? (void *)ly->lo : (void *)ly->k8, b[1] = quest ? (void *)ly->hi : (void *)ly->k8s;
    b[2] = quest ? NULL : (void *)ly->k4, b[3] = quest ? NULL : (void *)ly->k4s;
}
static void set_keys(const kvt_sparse *s, kvt_sparse_layer *ly, void *const b[KEYBUFS]) {
    if (s->p.mode == KVT_SPARSE_QUEST) ly->lo = b[0], ly->hi = b[1];
    else ly->k8 = b[0], ly->k8s = b[1], ly->k4 = b[2], ly->k4s = b[3];
}

// Blocks [sb, sb + nb) of src (sc blocks per KV head) to blocks [db, db + nb) of dst (dc per head), every KV head.
static void copy_key_blocks(const kvt_sparse *s, void *const dst[KEYBUFS], int64_t dc, int64_t db, void *const src[KEYBUFS],
                            int64_t sc, int64_t sb, int64_t nb) {
    int64_t bb[KEYBUFS];
    key_block_bytes(s, bb);
    for (int a = 0; a < KEYBUFS; a++) {
        for (int64_t kh = 0; bb[a] > 0 && nb > 0 && kh < s->d.n_head_kv; kh++) {
            memcpy((uint8_t *)dst[a] + (kh * dc + db) * bb[a], (const uint8_t *)src[a] + (kh * sc + sb) * bb[a], (size_t)(nb * bb[a]));
        }
    }
}

static void keys_free(kvt_sparse *s, void *p);

static void big_drop(kvt_sparse *s, int64_t i);

static void pool_fit(kvt_sparse *s);

static void kbase_release(kvt_sparse *s, kvt_sparse_kbase *b) {
    if (!b || --b->refs > 0) return;
    if (b->kept) s->summary_kept -= b->bytes;
    else s->summary_held -= b->bytes;
    for (int a = 0; a < KEYBUFS; a++) keys_free(s, b->buf[a]);
    pool_fit(s); // (a kept base's buffers were outside summary_held)
    free(b);
}

static void layer_free(kvt_sparse *s, kvt_sparse_layer *ly) {
    kbase_release(s, ly->kb);
    ly->kb = NULL;
    void *keys[KEYBUFS];
    layer_bufs(s, ly, keys);
    for (int a = 0; a < KEYBUFS; a++) keys_free(s, keys[a]);
    free(ly->sel);
    free(ly->sel_score);
    free(ly->nsel);
    free(ly->hist);
    free(ly->qlog);
    free(ly->undo_hist);
    free(ly->undo_kept);
    free(ly->pred_q);
    free(ly->gram);
    free(ly->kept);
    free(ly->klog);
    free(ly->klog_pos);
    free(ly->lv);
    free(ly->lw);
    free(ly->shat);
    free(ly->rs_cal);
}

void kvt_sparse_seq_destroy(kvt_sparse *s, kvt_sparse_seq *q) {
    if (!q) return;
    for (int32_t l = 0; q->lay && l < s->d.n_layer; l++) layer_free(s, &q->lay[l]);
    s->summary_held -= q->summary_bytes;
    pool_fit(s);
    free(q->lay);
    free(q->steps);
    free(q);
}

static kvt_sparse_seq *seq_new(kvt_sparse *s) {
    kvt_sparse_seq *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->lay = calloc((size_t)s->d.n_layer, sizeof *q->lay);
    bool ok = q->lay != NULL;
    const int64_t H = s->d.n_head_kv, W1 = s->p.window + 1;
    for (int32_t l = 0; ok && l < s->d.n_layer; l++) {
        kvt_sparse_layer *ly = &q->lay[l];
        ly->sel_pos = ly->kept_pos = -1;
        ly->nsel = kvt_sparse_zalloc((size_t)H * 8, &ok);
        if (kvt_sparse_kept_pages(s) > 0) {
            ly->kept = kvt_sparse_zalloc((size_t)(H * kvt_sparse_kept_pages(s)), &ok);
            if (s->p.mode == KVT_SPARSE_ASYNCSPADE) ly->undo_kept = kvt_sparse_zalloc((size_t)(H * kvt_sparse_kept_pages(s)), &ok);
            const int32_t QC = kvt_sparse_qlog_rows(&s->p);
            ly->klog = kvt_sparse_zalloc((size_t)(QC * H * ((kvt_sparse_kept_pages(s) + 7) / 8)), &ok);
            ly->klog_pos = kvt_sparse_zalloc((size_t)QC * sizeof(int64_t), &ok);
            for (int32_t r = 0; ly->klog_pos && r < QC; r++) ly->klog_pos[r] = -1;
        }
        ly->lpos = ly->lalloc = -1;
        if (kvt_sparse_layer_pieces(s) > 0) {
            ly->lv = kvt_sparse_zalloc((size_t)kvt_sparse_layer_pieces(s) * 4, &ok);
            ly->lw = kvt_sparse_zalloc((size_t)kvt_sparse_layer_pieces(s) * 4, &ok);
        }
        if (s->p.mode == KVT_SPARSE_ASYNCSPADE) {
            ly->hist = kvt_sparse_zalloc((size_t)(H * W1 * s->gd) * 4, &ok);
            ly->qlog = kvt_sparse_zalloc((size_t)(H * kvt_sparse_qlog_rows(&s->p) * s->gd) * 4, &ok);
            ly->undo_hist = kvt_sparse_zalloc((size_t)(H * W1 * s->gd) * 4, &ok);
            ly->pred_q = kvt_sparse_zalloc((size_t)(H * s->gd) * 4, &ok);
            ly->gram = kvt_sparse_zalloc((size_t)(H * W1 * W1) * 8, &ok); // gram_n = 0: computed at the first prediction
        }
    }
    if (!ok) {
        if (q->lay) {
            for (int32_t l = 0; l < s->d.n_layer; l++) layer_free(s, &q->lay[l]);
        }
        free(q->lay);
        free(q);
        return NULL;
    }
    return q;
}

kvt_sparse_seq *kvt_sparse_seq_get(kvt_sparse *s, int32_t seq) {
    if (seq < 0) return NULL;
    if (seq >= s->n_seqs) {
        const int32_t n = seq + 1 > 2 * s->n_seqs ? seq + 1 : 2 * s->n_seqs;
        pthread_mutex_lock(&s->mu); // the worker looks sequences up in the table
        kvt_sparse_seq **t = realloc(s->seqs, (size_t)n * sizeof *t);
        if (t) {
            for (int32_t i = s->n_seqs; i < n; i++) t[i] = NULL;
            s->seqs = t;
            s->n_seqs = n;
        }
        pthread_mutex_unlock(&s->mu);
        if (!t) return NULL;
    }
    if (!s->seqs[seq]) s->seqs[seq] = seq_new(s);
    return s->seqs[seq];
}

// Fails with KVT_ERR_BUDGET, naming the reservation, when `more` bytes of summaries would pass it.
static kvt_status check_held(const kvt_sparse *s, int64_t more, kvt_err *err) {
    if (s->summary_limit < 0 || s->summary_held + more <= s->summary_limit) return KVT_OK;
    return kvt_errorf(err, KVT_ERR_BUDGET,
                      "sparse key summaries: %lld bytes held, %lld more exceed the %lld reserved in --kv-fast "
                      "(for %d sequence(s) of n_ctx positions: raise --sparse-seqs or --kv-fast)",
                      (long long)s->summary_held, (long long)more, (long long)s->summary_limit, s->p.seqs > 0 ? s->p.seqs : 1);
}

// b more bytes of summaries held over every sequence, the peak kept.
static void held_add(kvt_sparse *s, int64_t b) {
    s->summary_held += b;
    if (s->summary_held > s->summary_peak) s->summary_peak = s->summary_held;
}

// --- the key summaries' buffers, pooled between sequences (kvt_sparse.big) ---------------------------------------

// A pooled record of s->big released to the allocator.
static void big_drop(kvt_sparse *s, int64_t i) {
    free(s->big[i].p);
    if (s->big[i].pooled) s->pooled_bytes -= s->big[i].size;
    s->big[i] = s->big[--s->n_big];
}

// Room in s->big for one more record; false when out of memory.
static bool big_room(kvt_sparse *s) {
    if (s->n_big < s->cap_big) return true;
    const int64_t cap = s->cap_big ? 2 * s->cap_big : 64;
    struct kvt_sparse_big *nb = realloc(s->big, (size_t)cap * sizeof *nb);
    if (!nb) return false;
    s->big = nb, s->cap_big = cap;
    return true;
}

// n zeroed bytes for a key summary buffer: a pooled buffer of the same allocated size when there is one, else new
// (kvt_sparse_zalloc); *ok false when out of memory. The caller's thread only (the worker never allocates).
static void *keys_alloc(kvt_sparse *s, size_t n, bool *ok) {
    const int64_t size = kvt_sparse_alloc_bytes((int64_t)n);
    for (int64_t i = 0; i < s->n_big; i++) {
        if (s->big[i].pooled && s->big[i].size == size) {
            s->big[i].pooled = false;
            s->pooled_bytes -= size;
            s->pool_reuses++;
            memset(s->big[i].p, 0, n);
            return s->big[i].p;
        }
    }
    // under a reservation the pool gives way: summaries held (and this one, check_held's) and pooled stay within it
    for (int64_t i = s->n_big - 1; i >= 0 && s->summary_limit >= 0 && s->summary_held + s->pooled_bytes + size > s->summary_limit; i--) {
        if (s->big[i].pooled) big_drop(s, i);
    }
    if (!big_room(s)) {
        *ok = false;
        return NULL;
    }
    void *p = kvt_sparse_zalloc(n, ok);
    if (p) s->big[s->n_big++] = (struct kvt_sparse_big){p, size, false, 0};
    return p;
}

// The allocated size of key buffer a of a layer with room for cap own positions (0: buffer a not used).
static int64_t key_buf_size(const kvt_sparse *s, int a, int64_t cap) {
    int64_t bb[KEYBUFS];
    key_block_bytes(s, bb);
    return bb[a] > 0 ? kvt_sparse_alloc_bytes(s->d.n_head_kv * key_blocks_of(s, cap) * bb[a]) : 0;
}

// Whether some room of kvt_sparse_warm has a key buffer of allocated size `size`.
static bool warm_size(const kvt_sparse *s, int64_t size) {
    for (int k = 0; k < s->n_warm; k++) {
        for (int a = 0; a < KEYBUFS; a++) {
            if (key_buf_size(s, a, s->warm_caps[k]) == size) return true;
        }
    }
    return false;
}

// The oldest pooled buffer's record (spare_rooms: of a size no warmed room has), or -1.
static int64_t oldest_pooled(const kvt_sparse *s, bool spare_rooms) {
    int64_t old = -1;
    for (int64_t i = 0; i < s->n_big; i++) {
        if (s->big[i].pooled && (old < 0 || s->big[i].tick < s->big[old].tick) && !(spare_rooms && warm_size(s, s->big[i].size))) old = i;
    }
    return old;
}

// Under a reservation the pool gives way once a change of summary_held is done: its oldest buffers (of sizes no warmed
// room has first) leave while summaries held and pooled pass the reservation.
static void pool_fit(kvt_sparse *s) {
    while (s->summary_limit >= 0 && s->summary_held + s->pooled_bytes > s->summary_limit) {
        int64_t old = oldest_pooled(s, true);
        if (old < 0) old = oldest_pooled(s, false);
        if (old < 0) return;
        big_drop(s, old);
    }
}

// Frees a buffer of keys_alloc (NULL is fine): to the pool, whose oldest buffers leave while it would hold more than
// pool_max bytes (a sequence's buffers of a shorter past, grown since, leave first).
static void keys_free(kvt_sparse *s, void *p) {
    if (!p) return;
    int64_t x = -1;
    for (int64_t i = 0; i < s->n_big && x < 0; i++) x = s->big[i].p == p ? i : -1;
    if (x < 0) {
        free(p);
        return;
    }
    const int64_t size = s->big[x].size;
    if (size > s->pool_max) {
        big_drop(s, x);
        return;
    }
    while (s->pooled_bytes + size > s->pool_max) { // the oldest pooled buffer leaves
        const int64_t old = oldest_pooled(s, false);
        if (old < 0) break;
        big_drop(s, old);
        if (x == s->n_big) x = old; // (big_drop moved the last record into old's place)
    }
    s->big[x].pooled = true;
    s->big[x].tick = ++s->pool_tick;
    s->pooled_bytes += size;
}

// Own key summary buffers of kc blocks per KV head (NULL where one is not used); false when out of memory.
static bool alloc_keys(kvt_sparse *s, int64_t kc, void *b[KEYBUFS]) {
    int64_t bb[KEYBUFS];
    key_block_bytes(s, bb);
    bool ok = true;
    for (int a = 0; a < KEYBUFS; a++) b[a] = bb[a] > 0 ? keys_alloc(s, (size_t)(s->d.n_head_kv * kc * bb[a]), &ok) : NULL;
    if (!ok) {
        for (int a = 0; a < KEYBUFS; a++) keys_free(s, b[a]), b[a] = NULL;
    }
    return ok;
}

// Moves layer ly to buffers of cap positions, keeping the first old_cap positions of each KV head.
static kvt_status layer_resize(kvt_sparse *s, kvt_sparse_seq *q, kvt_sparse_layer *ly, int64_t cap, kvt_err *err) {
    const int64_t H = s->d.n_head_kv, oc = ly->cap, off = kvt_sparse_off(ly);
    const int64_t grow = own_bytes(s, cap, off) - own_bytes(s, oc, off);
    kvt_status st = check_held(s, grow, err);
    if (st) return st;
    bool ok = true;
    int32_t *sel = kvt_sparse_zalloc((size_t)(H * cap) * 4, &ok);
    float *sel_score = s->p.mode == KVT_SPARSE_ASYNCSPADE ? kvt_sparse_zalloc((size_t)(H * cap) * 4, &ok) : NULL;
    void *kb[KEYBUFS] = {NULL, NULL, NULL, NULL}; // the own key summaries, blocks of positions [off, cap)
    const int64_t kc = key_blocks_of(s, cap - off), okc = key_blocks_of(s, oc - off);
    if (!alloc_keys(s, kc, kb)) ok = false;
    const int64_t qpg = s->qpg;
    float *shat = s->p.rerank_resid > 0.0 && s->p.mode == KVT_SPARSE_ASYNCSPADE ? kvt_sparse_zalloc((size_t)(H * qpg * cap) * 4, &ok) : NULL;
    double *rs_cal = shat && !ly->rs_cal ? kvt_sparse_zalloc((size_t)(2 * H) * 8, &ok) : NULL; // (once: not per position)
    if (!ok) {
        free(sel), free(sel_score), free(shat), free(rs_cal);
        for (int a = 0; a < KEYBUFS; a++) keys_free(s, kb[a]);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the sparse state of %lld positions", (long long)cap);
    }
    for (int64_t kh = 0; oc > 0 && kh < H; kh++) {
        memcpy(sel + kh * cap, ly->sel + kh * oc, (size_t)oc * 4);
        if (sel_score) memcpy(sel_score + kh * cap, ly->sel_score + kh * oc, (size_t)oc * 4);
        if (shat) memcpy(shat + kh * qpg * cap, ly->shat + kh * qpg * oc, (size_t)(qpg * oc) * 4); // rows of stride <= oc
    }
    void *old[KEYBUFS];
    layer_bufs(s, ly, old);
    if (oc > off) copy_key_blocks(s, kb, kc, 0, old, okc, 0, okc); // the own summaries, whole blocks
    free(ly->shat);
    ly->shat = shat;
    if (rs_cal) ly->rs_cal = rs_cal;
    free(ly->sel), free(ly->sel_score);
    for (int a = 0; a < KEYBUFS; a++) keys_free(s, old[a]);
    ly->sel = sel, ly->sel_score = sel_score;
    set_keys(s, ly, kb);
    ly->cap = cap;
    q->summary_bytes += grow;
    held_add(s, grow);
    pool_fit(s);
    return KVT_OK;
}

static int64_t grow_cap(const kvt_sparse *s, int64_t off, int64_t own, int64_t need);

// A layer whose keys [pos, ...) are about to be written (a rewind, a truncate) below its shared base: its own buffers
// take every position again (the base's copied in), and it lets the base go.
static kvt_status layer_own(kvt_sparse *s, kvt_sparse_seq *q, kvt_sparse_layer *ly, int64_t pos, kvt_err *err) {
    if (!ly->kb || pos >= kvt_sparse_off(ly)) return KVT_OK;
    kvt_status st;
    // a layer given a base by kvt_sparse_ksum_attach has no own buffers (cap 0) until its first key past it: room for
    // the base's positions and the next ones first
    if (ly->cap < kvt_sparse_off(ly) && (st = layer_resize(s, q, ly, grow_cap(s, ly->koff, 0, ly->koff + 1), err))) return st;
    const int64_t cap = ly->cap, off = kvt_sparse_off(ly), more = own_bytes(s, cap, 0) - own_bytes(s, cap, off);
    if ((st = check_held(s, more, err))) return st;
    const int64_t kc = key_blocks_of(s, cap), ob = off / key_block(s); // (off: whole blocks)
    void *b[KEYBUFS], *own[KEYBUFS];
    if (!alloc_keys(s, kc, b)) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the sparse key summaries of %lld positions", (long long)cap);
    kvt_sparse_kbase *kb = ly->kb;
    layer_bufs(s, ly, own);
    copy_key_blocks(s, b, kc, 0, kb->buf, kb->stride, 0, ob);
    copy_key_blocks(s, b, kc, ob, own, kc - ob, 0, kc - ob);
    for (int a = 0; a < KEYBUFS; a++) keys_free(s, own[a]);
    set_keys(s, ly, b);
    q->summary_bytes += more;
    held_add(s, more);
    ly->kb = NULL;
    kbase_release(s, kb);
    pool_fit(s);
    return KVT_OK;
}

// Whether a fork of ly shares its key summaries: asyncspade's copies and quest's bounds (not with
// --sparse-rerank-resid, whose predicted scores are kept by position beside them) of at least one whole block.
static bool shares_keys(const kvt_sparse *s, const kvt_sparse_layer *ly) {
    const bool has = ly->kb || (s->p.mode == KVT_SPARSE_QUEST ? ly->lo != NULL : s->p.mode == KVT_SPARSE_ASYNCSPADE && (ly->k8 || ly->k4));
    return has && s->p.rerank_resid <= 0.0 && ly->key_n >= key_block(s);
}

// Before a fork of ly: a layer without a base makes its key summaries of the whole blocks [0, n) a base (its buffers
// become the base's as they are, no copy) and keeps in new own buffers [n, cap) the positions from n (one partial
// block copied: quest's open page). A layer with a base keeps it (its forks copy its own positions past the base).
static kvt_status layer_freeze(kvt_sparse *s, kvt_sparse_seq *q, kvt_sparse_layer *ly, kvt_err *err) {
    if (ly->kb) return KVT_OK;
    const int64_t B = key_block(s), cap = ly->cap, n = ly->key_n / B * B, own = own_bytes(s, cap, n);
    const int64_t kc = key_blocks_of(s, cap), nb = n / B;
    kvt_status st = check_held(s, own, err);
    if (st) return st;
    kvt_sparse_kbase *kb = calloc(1, sizeof *kb);
    void *b[KEYBUFS];
    if (!kb || !alloc_keys(s, kc - nb, b)) {
        free(kb);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the sparse key summaries of %lld positions", (long long)(cap - n));
    }
    kb->n = n, kb->stride = kc, kb->bytes = own_bytes(s, cap, 0), kb->refs = 1;
    layer_bufs(s, ly, kb->buf);
    copy_key_blocks(s, b, kc - nb, 0, kb->buf, kc, nb, key_blocks_of(s, ly->key_n) - nb); // the open block
    set_keys(s, ly, b);
    q->summary_bytes += own - kb->bytes; // (the base's bytes stay in summary_held until it is freed)
    held_add(s, own);
    ly->kb = kb, ly->koff = n;
    return KVT_OK;
}

// The room a layer holding [off, off + own) positions grows to for need positions (need <= n_ctx): doubling, so that
// appends cost amortized O(1); at least 64 own positions; whole pages; at most n_ctx; asyncspade whole blocks of the
// int8 layout.
static int64_t grow_cap(const kvt_sparse *s, int64_t off, int64_t own, int64_t need) {
    int64_t cap = off + (2 * own > need - off ? 2 * own : need - off);
    if (cap - off < 64) cap = off + 64;
    cap = (cap + s->p.page - 1) / s->p.page * s->p.page;
    if (cap > s->d.n_ctx) cap = s->d.n_ctx;
    if (s->p.mode == KVT_SPARSE_ASYNCSPADE) cap = kvt_sparse_k8_cap(cap);
    return cap;
}

// Pooled buffers of allocated size `size` (kvt_sparse_alloc_bytes).
static int64_t pooled_of(const kvt_sparse *s, int64_t size) {
    int64_t n = 0;
    for (int64_t i = 0; i < s->n_big; i++) n += s->big[i].pooled && s->big[i].size == size;
    return n;
}

kvt_status kvt_sparse_layer_reserve(kvt_sparse *s, kvt_sparse_seq *q, int32_t layer, int64_t need, kvt_err *err) {
    kvt_sparse_layer *ly = &q->lay[layer];
    const int64_t N = s->d.n_ctx;
    if (need > N) need = N;
    if (need <= ly->cap) return KVT_OK;
    const int64_t off = kvt_sparse_off(ly), own = ly->cap - off; // (a shared base's positions are not grown)
    int64_t cap = grow_cap(s, off, own, need);
    // buffers warmed ahead of use (kvt_sparse_warm) are in the pool at the sizes of its rooms: a layer without a shared
    // base takes those of the smallest room that holds what it would grow to and is less than twice its need (as the
    // doubling's own worst case), within the reservation, so it faults no new memory in nor copies itself into larger
    // buffers before that room is full
    for (int k = s->n_warm - 1; off == 0 && k >= 0; k--) {
        const int64_t c = s->warm_caps[k];
        if (c < cap || 2 * need <= c) continue;
        int64_t size = 0; // (of the first key buffer the layers use)
        for (int a = 0; a < KEYBUFS && !size; a++) size = key_buf_size(s, a, c);
        if (size > 0 && pooled_of(s, size) > 0 &&
            (s->summary_limit < 0 || s->summary_held + own_bytes(s, c, 0) - own_bytes(s, ly->cap, 0) <= s->summary_limit)) {
            cap = c;
        }
        break;
    }
    return layer_resize(s, q, ly, cap, err);
}

bool kvt_sparse_warm(kvt_sparse *s, int64_t positions, int64_t min_set, int64_t max_bytes) {
    if (!s || !has_summaries(s) || positions <= 0) return false;
    // the rooms: one for `positions`, then halves while one sequence's set of a room is min_set bytes or more (a
    // shorter prompt's smaller buffers fault in quickly enough)
    const int64_t layers = kvt_sparse_summary_layers(&s->p, &s->d);
    s->n_warm = 0;
    for (int64_t c = grow_cap(s, 0, 0, positions < s->d.n_ctx ? positions : s->d.n_ctx);
         s->n_warm < KVT_SPARSE_WARM_ROOMS && (s->n_warm == 0 || layers * layer_summary_bytes(s, c) >= min_set);
         c = grow_cap(s, 0, 0, c / 2)) {
        if (s->n_warm > 0 && c >= s->warm_caps[s->n_warm - 1]) break;
        s->warm_caps[s->n_warm++] = c;
    }
    for (int k = 0; k < s->n_warm; k++) { // the largest room first
        for (int a = 0; a < KEYBUFS; a++) {
            const int64_t size = key_buf_size(s, a, s->warm_caps[k]);
            if (size <= 0) continue;
            int64_t want = 0; // the buffers of this size the rooms' sets take (two may share a size)
            for (int j = 0; j < s->n_warm; j++) {
                for (int b = 0; b < KEYBUFS; b++) want += layers * (key_buf_size(s, b, s->warm_caps[j]) == size);
            }
            if (pooled_of(s, size) >= want) continue;
            // within the pool's bound, the reservation (held + pooled) and max_bytes of pooled buffers: other sizes (a
            // shorter sequence's, freed) leave the pool first, the oldest first
            int64_t bound = s->pool_max;
            if (s->summary_limit >= 0 && s->summary_limit - s->summary_held < bound) bound = s->summary_limit - s->summary_held;
            if (max_bytes >= 0 && max_bytes < bound) bound = max_bytes;
            if (s->pooled_bytes + size > bound) {
                const int64_t old = oldest_pooled(s, true);
                if (old < 0) return false; // the pool holds the rooms' buffers only: as many as fit
                big_drop(s, old);
                return true; // (the next call looks again)
            }
            if (!big_room(s)) return false;
            bool ok = true;
            void *p = kvt_sparse_zalloc((size_t)size, &ok); // zeroed: every page faulted in
            if (!p) return false;
            s->big[s->n_big++] = (struct kvt_sparse_big){p, size, true, ++s->pool_tick};
            s->pooled_bytes += size;
            s->warm_bytes += size;
            return true;
        }
    }
    return false;
}

// Keys [pos0, pos0 + n) into ly's summaries, each rounded to the store's element type first (the bounds
// and the int8 copies describe the keys attention reads; stored: k was read from the store, already those values, so
// the rounding, an identity then, is skipped). Rows come in order: a page restarts at its first.
// A quest page's bounds lo, hi ([hd]) widened to hold key k ([hd]): a NaN element leaves them as they were. Every
// element is stored (min / max with the old value second, as a NaN keeps it), so the loop vectorizes.
KVT_SPARSE_CLONES
static void page_widen(const float *restrict k, int32_t hd, float *restrict lo, float *restrict hi) {
    for (int32_t x = 0; x < hd; x++) {
        const float v = k[x];
        lo[x] = v < lo[x] ? v : lo[x];
        hi[x] = v > hi[x] ? v : hi[x];
    }
}

static void observe_keys(kvt_sparse *s, kvt_sparse_layer *ly, int64_t pos0, int64_t n, const float *k, bool stored) {
    const kvt_type_ops *ops = kvt_type_ops_get(s->d.kv_type);
    const int32_t hd = s->d.head_dim, H = s->d.n_head_kv;
    // the own buffers' positions and pages (pos >= off: the callers give the layer its own summaries first, layer_own)
    const int64_t off = kvt_sparse_off(ly), kc = ly->cap - off, np = pages_of(s, kc);
    for (int64_t t = 0; t < n; t++) {
        const int64_t pos = pos0 + t;
        for (int32_t kh = 0; kh < H; kh++) {
            const float *kr = k + (t * H + kh) * hd;
            if (!stored) {
                ops->from_float(kr, s->krow_t, hd);
                ops->to_float(s->krow_t, s->krow, hd);
                kr = s->krow;
            }
            if (ly->k8) kvt_sparse_quant_key(kr, hd, 8, pos - off, ly->k8 + kh * kc * hd, ly->k8s + kh * kc);
            if (ly->k4) {
                kvt_sparse_quant_key(kr, hd, 4, pos - off, ly->k4 + kh * kc * kvt_sparse_k4_row(hd),
                                     ly->k4s + kh * kc * kvt_sparse_k4_groups(hd));
            }
            if (ly->lo) {
                const int64_t pg = (pos - off) / s->p.page; // (off: whole pages)
                float *lo = ly->lo + (kh * np + pg) * hd, *hi = ly->hi + (kh * np + pg) * hd;
                if (pos % s->p.page == 0) { // a page starts
                    memcpy(lo, kr, (size_t)hd * sizeof(float));
                    memcpy(hi, kr, (size_t)hd * sizeof(float));
                } else {
                    page_widen(kr, hd, lo, hi);
                }
            }
        }
    }
}

// A rewind to pos0: the summaries keep keys [0, pos0) (quest: whole pages; the open page is read again).
static void cut_keys(const kvt_sparse *s, kvt_sparse_layer *ly, int64_t pos0) {
    if (ly->key_n > pos0) ly->key_n = s->p.mode == KVT_SPARSE_QUEST ? pos0 - pos0 % s->p.page : pos0;
}

// Keys [ly->key_n, end) read back from the store into the summaries.
static kvt_status catch_up(kvt_sparse *s, kvt_kv *kv, int32_t seq, kvt_sparse_layer *ly, int32_t layer, int64_t end,
                           kvt_err *err) {
    while (ly->key_n < end) {
        const int64_t c = end - ly->key_n < KVT_SPARSE_CATCHUP ? end - ly->key_n : KVT_SPARSE_CATCHUP;
        kvt_status st = kvt_sparse_read_keys(kv, seq, layer, ly->key_n, c, s->kbuf, err);
        if (st) return st;
        observe_keys(s, ly, ly->key_n, c, s->kbuf, true);
        ly->key_n += c;
    }
    return KVT_OK;
}

kvt_status kvt_sparse_layer_keys(kvt_sparse *s, kvt_kv *kv, int32_t seq, kvt_sparse_seq *q, int32_t layer, int64_t pos0,
                                 int64_t n, const float *k, bool sparse_layer, kvt_err *err) {
    kvt_sparse_layer *ly = &q->lay[layer];
    if (!sparse_layer) { // never selected for: no summaries (a sliding window's store no longer holds old keys)
        ly->key_n = pos0 + n;
        return KVT_OK;
    }
    cut_keys(s, ly, pos0);
    kvt_status st = layer_own(s, q, ly, ly->key_n, err); // keys written from key_n: below a shared base, own them all
    if (st) return st;
    st = kvt_sparse_layer_reserve(s, q, layer, pos0 + n + 1, err); // + 1: the next step's selection
    if (st) return st;
    if (!has_summaries(s)) {
        ly->key_n = pos0 + n;
        return KVT_OK;
    }
    if ((st = catch_up(s, kv, seq, ly, layer, pos0, err))) return st;
    if (!k) return catch_up(s, kv, seq, ly, layer, pos0 + n, err);
    observe_keys(s, ly, pos0, n, k, false);
    ly->key_n = pos0 + n;
    return KVT_OK;
}

void kvt_sparse_observe_queries(kvt_sparse *s, kvt_sparse_layer *ly, int64_t pos0, int64_t n, const float *q, bool rewind) {
    if (!ly->hist) return;
    const int32_t W1 = s->p.window + 1, gd = s->gd, H = s->d.n_head_kv, QC = kvt_sparse_qlog_rows(&s->p);
    if (rewind) ly->hist_n = ly->gram_n = ly->gram_shift = 0;
    if (rewind || ly->qlog_end != pos0) ly->qlog_n = 0;
    for (int64_t t = n > QC ? n - QC : 0; t < n; t++) { // the log: position pos0 + t in row (pos0 + t) % QC
        const int64_t row = (pos0 + t) % QC;
        for (int32_t kh = 0; kh < H; kh++) {
            memcpy(ly->qlog + ((int64_t)kh * QC + row) * gd, q + (t * H + kh) * (int64_t)gd, (size_t)gd * sizeof(float));
        }
    }
    ly->qlog_n = (int32_t)(ly->qlog_n + n < QC ? ly->qlog_n + n : QC);
    ly->qlog_end = pos0 + n;
    const int64_t t0 = n > W1 ? n - W1 : 0;
    for (int64_t t = t0; t < n; t++) {
        const int32_t hn = ly->hist_n;
        if (hn == W1) ly->gram_shift++; // the oldest row leaves: the predictor's products move up a row
        for (int32_t kh = 0; kh < H; kh++) {
            float *h = ly->hist + (int64_t)kh * W1 * gd;
            if (hn == W1) memmove(h, h + gd, (size_t)(W1 - 1) * gd * sizeof(float));
            memcpy(h + (int64_t)(hn == W1 ? W1 - 1 : hn) * gd, q + (t * H + kh) * (int64_t)gd, (size_t)gd * sizeof(float));
        }
        ly->hist_n = hn == W1 ? W1 : hn + 1;
    }
}

void kvt_sparse_observe_loaded(kvt_sparse *s, int32_t seq, int32_t layer, int64_t pos0, int64_t n, const float *k) {
    if (!s || layer < s->p.dense_layers || layer >= s->d.n_layer || pos0 < 0 || n <= 0 || pos0 + n > s->d.n_ctx) return;
    kvt_sparse_seq *q = kvt_sparse_seq_get(s, seq);
    if (!q) return; // out of memory: the keys are read back from the store when the sequence attends
    kvt_sparse_wait_layer(s, q, layer); // the worker reads the summaries of the layer it selects for
    kvt_sparse_layer *ly = &q->lay[layer];
    if (ly->hist_next > pos0) ly->hist_next = -1; // the queries of the rewritten positions are gone
    if (q->lb_pos >= pos0) q->lb_pos = -1;         // and the layers' budgets set at them
    cut_keys(s, ly, pos0);
    kvt_err e;
    if (!has_summaries(s) || ly->key_n != pos0 || layer_own(s, q, ly, pos0, &e) || kvt_sparse_layer_reserve(s, q, layer, pos0 + n, &e)) return;
    observe_keys(s, ly, pos0, n, k, true); // (read from a session file of the store's element type)
    ly->key_n = pos0 + n;
}

// --- the sequence calls of the context -------------------------------------------------------------------

static kvt_sparse_seq *seq_of(const kvt_sparse *s, int32_t seq) {
    return seq >= 0 && seq < s->n_seqs ? s->seqs[seq] : NULL;
}

void kvt_sparse_seq_free(kvt_sparse *s, int32_t seq) {
    kvt_sparse_seq *q = s ? seq_of(s, seq) : NULL;
    if (!q) return;
    kvt_sparse_wait_seq(s, q);
    kvt_sparse_seq_destroy(s, q);
    s->seqs[seq] = NULL;
}

// --- a failed pass taken back (kvt_sparse_pass_begin, kvt_sparse_undo_save, kvt_sparse_seq_undo) -------------------

void kvt_sparse_pass_begin(kvt_sparse *s) {
    if (s) s->pass++;
}

void kvt_sparse_undo_save(kvt_sparse *s, kvt_sparse_layer *ly, int64_t pos0, int64_t n) {
    if (!ly->hist || ly->undo_pass == s->pass) return; // (the state before the pass: its first call saved it)
    const int32_t W1 = s->p.window + 1, gd = s->gd, H = s->d.n_head_kv;
    // a decode step (one call a pass) saves the row it pushes out, if any; a prompt (calls per micro-batch) or a rewind
    // every row
    const bool step = n == 1 && pos0 == ly->hist_next;
    const int32_t out = step ? (ly->hist_n == W1 ? 1 : 0) : ly->hist_n;
    for (int32_t kh = 0; out > 0 && kh < H; kh++) {
        memcpy(ly->undo_hist + (int64_t)kh * W1 * gd, ly->hist + (int64_t)kh * W1 * gd, (size_t)out * gd * sizeof(float));
    }
    ly->undo_pass = s->pass, ly->undo_n = out, ly->undo_hist_n = ly->hist_n;
    ly->undo_hist_next = ly->hist_next, ly->undo_kept_pos = ly->kept_pos;
    // the hysteresis' pages of P - 1 (P = pos0 + n - 1), which the step's re-rank reads and then overwrites
    ly->undo_kept_saved = ly->kept && ly->kept_pos == pos0 + n - 2;
    if (ly->undo_kept_saved) memcpy(ly->undo_kept, ly->kept, (size_t)(H * kvt_sparse_kept_pages(s)));
}

// The query log of ly cut back to positions [0, n).
static void qlog_cut(kvt_sparse_layer *ly, int64_t n) {
    if (ly->qlog_end <= n) return;
    const int64_t first = ly->qlog_end - ly->qlog_n; // (rows below it were overwritten: not held)
    ly->qlog_n = n > first ? (int32_t)(n - first) : 0;
    ly->qlog_end = n;
}

void kvt_sparse_kept_log(const kvt_sparse *s, kvt_sparse_layer *ly) {
    if (!ly->klog || ly->kept_pos < 0) return;
    const int64_t np = kvt_sparse_kept_pages(s), nb = (np + 7) / 8, H = s->d.n_head_kv, QC = kvt_sparse_qlog_rows(&s->p);
    const int64_t r = ly->kept_pos % QC;
    uint8_t *b = ly->klog + r * H * nb;
    memset(b, 0, (size_t)(H * nb));
    for (int64_t kh = 0; kh < H; kh++) {
        for (int64_t pg = 0; pg < np; pg++) b[kh * nb + pg / 8] |= (uint8_t)((ly->kept[kh * np + pg] != 0) << (pg % 8));
    }
    ly->klog_pos[r] = ly->kept_pos;
}

// The hysteresis' log of ly cut back to decode positions [0, n).
static void klog_cut(const kvt_sparse *s, kvt_sparse_layer *ly, int64_t n) {
    for (int32_t r = 0; ly->klog && r < kvt_sparse_qlog_rows(&s->p); r++) {
        if (ly->klog_pos[r] >= n) ly->klog_pos[r] = -1;
    }
}

// ly->kept as decode position n - 1 left it, from the log, when the log holds it.
static void klog_take(const kvt_sparse *s, kvt_sparse_layer *ly, int64_t n) {
    const int64_t np = kvt_sparse_kept_pages(s), nb = (np + 7) / 8, H = s->d.n_head_kv, QC = kvt_sparse_qlog_rows(&s->p);
    if (!ly->klog || n < 1 || ly->klog_pos[(n - 1) % QC] != n - 1) return;
    const uint8_t *b = ly->klog + (n - 1) % QC * H * nb;
    for (int64_t kh = 0; kh < H; kh++) {
        for (int64_t pg = 0; pg < np; pg++) ly->kept[kh * np + pg] = (uint8_t)((b[kh * nb + pg / 8] >> (pg % 8)) & 1);
    }
    ly->kept_pos = n - 1;
}

// ly's query history cut back to the queries of positions [0, n) (a truncate, a fork at n): no selection is current
// (the next step's is made when its query arrives, with the worker's bits), and asyncspade's history becomes the rows a
// sequence that observed [0, n) holds, [max(0, n - W - 1), n), taken from the query log when it reaches back that far
// (a truncate at most KVT_SPARSE_QLOG_DEPTH positions back from the last query observed), else it restarts at the
// next call (a rewind).
static void hist_cut(const kvt_sparse *s, kvt_sparse_layer *ly, int64_t n) {
    if (ly->hist_next <= n) return;
    ly->sel_pos = ly->kept_pos = -1;
    klog_cut(s, ly, n);
    const int32_t W1 = s->p.window + 1, gd = s->gd, H = s->d.n_head_kv, QC = kvt_sparse_qlog_rows(&s->p);
    const int64_t lo = n > W1 ? n - W1 : 0;
    if (!ly->hist || ly->qlog_end != ly->hist_next || ly->qlog_end - ly->qlog_n > lo) {
        ly->hist_next = -1; // the next call rewinds
        ly->qlog_n = 0;
        return;
    }
    const int32_t m = (int32_t)(n - lo);
    for (int32_t kh = 0; kh < H; kh++) {
        for (int32_t r = 0; r < m; r++) {
            memcpy(ly->hist + ((int64_t)kh * W1 + r) * gd, ly->qlog + ((int64_t)kh * QC + (lo + r) % QC) * gd,
                   (size_t)gd * sizeof(float));
        }
    }
    ly->hist_n = m;
    ly->gram_n = ly->gram_shift = 0; // computed whole at the next prediction: the same bits
    ly->hist_next = n;
    qlog_cut(ly, n);
    klog_take(s, ly, n); // the hysteresis of step n - 1, as a sequence that decoded it has it
}

// Positions [n_keep, ...) of seq leave its sparse state (kvt_sparse_seq_truncate, kvt_sparse_seq_undo): key summaries
// cut back, step records dropped; undo: the layers the failed pass (kvt_sparse.pass) reached as they were before it,
// else the query history cut back (hist_cut).
static void cut_back(kvt_sparse *s, int32_t seq, int64_t n_keep, bool undo) {
    kvt_sparse_seq *q = s ? seq_of(s, seq) : NULL;
    if (!q) return;
    if (n_keep <= 0) {
        kvt_sparse_seq_free(s, seq);
        return;
    }
    kvt_sparse_wait_seq(s, q); // (the worker's jobs write the selections changed below)
    // share_layers: the layers' budgets of a position no longer held (a failed pass's, taken back, are those it repeats)
    if (!undo && q->lb_pos >= n_keep) q->lb_pos = -1;
    const int32_t W1 = s->p.window + 1, gd = s->gd, H = s->d.n_head_kv;
    for (int32_t l = 0; l < s->d.n_layer; l++) {
        kvt_sparse_layer *ly = &q->lay[l];
        cut_keys(s, ly, n_keep);
        if (undo && ly->hist && ly->undo_pass == s->pass && s->pass > 0) {
            for (int32_t kh = 0; kh < H; kh++) { // the rows pushed out in front of those that stayed
                float *h = ly->hist + (int64_t)kh * W1 * gd;
                const int32_t stayed = ly->undo_hist_n - ly->undo_n;
                memmove(h + (int64_t)ly->undo_n * gd, h, (size_t)stayed * gd * sizeof(float));
                memcpy(h, ly->undo_hist + (int64_t)kh * W1 * gd, (size_t)ly->undo_n * gd * sizeof(float));
            }
            ly->hist_n = ly->undo_hist_n, ly->hist_next = ly->undo_hist_next;
            ly->gram_n = ly->gram_shift = 0; // computed whole at the next prediction: the same bits
            ly->sel_pos = -1;                // the step's selection made again, synchronously (the worker's bits)
            if (ly->undo_kept_saved) memcpy(ly->kept, ly->undo_kept, (size_t)(H * kvt_sparse_kept_pages(s)));
            ly->kept_pos = ly->undo_kept_pos;
            ly->undo_pass = 0;
            qlog_cut(ly, n_keep); // (the rows the pass wrote over are gone from it: the log holds fewer)
            klog_cut(s, ly, n_keep);
        } else {
            hist_cut(s, ly, n_keep);
        }
    }
    int64_t k = 0;
    for (int64_t i = 0; i < q->n_steps; i++) {
        if (q->steps[i].pos < n_keep) q->steps[k++] = q->steps[i];
    }
    q->n_steps = k;
}

void kvt_sparse_seq_truncate(kvt_sparse *s, int32_t seq, int64_t n_keep) { cut_back(s, seq, n_keep, false); }

void kvt_sparse_seq_undo(kvt_sparse *s, int32_t seq, int64_t n_keep) { cut_back(s, seq, n_keep, true); }

kvt_status kvt_sparse_seq_fork(kvt_sparse *s, int32_t src, int32_t dst, int64_t n, kvt_err *err) {
    if (!s) return KVT_OK;
    kvt_sparse_seq_free(s, dst);
    kvt_sparse_seq *a = seq_of(s, src);
    if (!a) return KVT_OK; // nothing yet: dst builds its state as src would
    kvt_sparse_wait_seq(s, a);
    kvt_sparse_seq *b = kvt_sparse_seq_get(s, dst);
    if (!b) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the sparse state of sequence %d", dst);
    a = s->seqs[src]; // the table may have moved
    b->lb_pos = a->lb_pos;
    const int64_t H = s->d.n_head_kv, W1 = s->p.window + 1;
    for (int32_t l = 0; l < s->d.n_layer; l++) {
        kvt_sparse_layer *x = &a->lay[l], *y = &b->lay[l];
        // the key summaries (asyncspade's copies, quest's bounds): the whole blocks src holds become (or stay) a base
        // both share; dst's own buffers take src's positions past it, with room to grow from there (the rest of the
        // state is copied whole)
        kvt_status st = KVT_OK;
        if (x->kb && (x->key_n < kvt_sparse_off(x) || !shares_keys(s, x))) st = layer_own(s, a, x, 0, err); // (cut below its base)
        const bool share = !st && shares_keys(s, x);
        if (share) st = layer_freeze(s, a, x, err);
        int64_t cap = x->cap;
        if (!st && share) {
            y->kb = x->kb, y->kb->refs++, y->koff = x->koff;
            const int64_t want = key_blocks_of(s, x->key_n + 1) * key_block(s); // (reserve grows it from there)
            if (want < cap) cap = want;
        }
        if (!st && cap > 0) st = layer_resize(s, b, y, cap, err);
        if (st) {
            kvt_sparse_seq_free(s, dst);
            return st;
        }
        for (int64_t kh = 0; cap > 0 && kh < H; kh++) { // the rows' first nsel entries (nsel <= cap, key_n + 1 at most)
            const size_t m = (size_t)(cap == x->cap || x->nsel[kh] > cap ? cap : x->nsel[kh]) * 4;
            memcpy(y->sel + kh * cap, x->sel + kh * x->cap, m);
            if (x->sel_score) memcpy(y->sel_score + kh * cap, x->sel_score + kh * x->cap, m);
        }
        const int64_t off = kvt_sparse_off(x); // (y's too)
        if (cap > off) { // the key summaries of the own positions [off, key_n): whole blocks
            void *dk[KEYBUFS], *sk[KEYBUFS];
            layer_bufs(s, y, dk), layer_bufs(s, x, sk);
            const int64_t yc = key_blocks_of(s, cap - off), xc = key_blocks_of(s, x->cap - off);
            copy_key_blocks(s, dk, yc, 0, sk, xc, 0, share ? key_blocks_of(s, x->key_n - off) : xc);
        }
        memcpy(y->nsel, x->nsel, (size_t)H * 8);
        if (cap > 0 && x->shat) memcpy(y->shat, x->shat, (size_t)(H * s->qpg * cap) * 4);
        if (cap > 0 && x->rs_cal) memcpy(y->rs_cal, x->rs_cal, (size_t)(2 * H) * 8);
        if (x->hist) {
            memcpy(y->hist, x->hist, (size_t)(H * W1 * s->gd) * 4);
            memcpy(y->pred_q, x->pred_q, (size_t)(H * s->gd) * 4);
            const int32_t QC = kvt_sparse_qlog_rows(&s->p);
            for (int32_t t = 0; t < x->qlog_n; t++) { // the rows the log holds
                const int64_t row = (x->qlog_end - 1 - t) % QC;
                for (int64_t kh = 0; kh < H; kh++) {
                    memcpy(y->qlog + (kh * QC + row) * s->gd, x->qlog + (kh * QC + row) * s->gd, (size_t)s->gd * 4);
                }
            }
        }
        y->qlog_end = x->qlog_end;
        y->qlog_n = x->qlog_n;
        y->key_n = x->key_n;
        y->hist_n = x->hist_n;
        y->hist_next = x->hist_next;
        y->sel_pos = x->sel_pos;
        if (x->kept) memcpy(y->kept, x->kept, (size_t)(H * kvt_sparse_kept_pages(s)));
        y->kept_pos = x->kept_pos;
        if (x->klog) {
            const int32_t QC = kvt_sparse_qlog_rows(&s->p);
            memcpy(y->klog, x->klog, (size_t)(QC * H * ((kvt_sparse_kept_pages(s) + 7) / 8)));
            memcpy(y->klog_pos, x->klog_pos, (size_t)QC * sizeof(int64_t));
        }
        if (x->lv) {
            memcpy(y->lv, x->lv, (size_t)x->ln * 4);
            memcpy(y->lw, x->lw, (size_t)x->ln * 4);
        }
        y->ln = x->ln, y->lkk = x->lkk, y->lpos = x->lpos, y->lalloc = x->lalloc;
        cut_keys(s, y, n);
        hist_cut(s, y, n);
    }
    return KVT_OK;
}

// --- a sequence's query window, kept by a prefix cache (sparse.h) ----------------------------------------------

struct kvt_sparse_qwin {
    int64_t end;             // the position after the last row
    int32_t rows, w1;        // rows per (layer, KV head): min(w1, end); w1 = window + 1 of the state that took it
    int32_t n_layer, H, gd;  // the state's shape (checked on restore)
    float *q;                // [n_layer][H][rows][gd] the queries of positions [end - rows, end), oldest first
};

kvt_status kvt_sparse_qwin_take(kvt_sparse *s, int32_t seq, int64_t end, kvt_sparse_qwin **out, kvt_err *err) {
    *out = NULL;
    kvt_sparse_seq *q = s && s->p.mode == KVT_SPARSE_ASYNCSPADE ? seq_of(s, seq) : NULL;
    if (!q || end <= 0) return KVT_OK;
    // no wait for the sequence's worker job: it reads the history (and writes the Gram matrix, the prediction and
    // the selection); only the caller's thread writes the history, and this is that thread
    const int32_t W1 = s->p.window + 1, H = s->d.n_head_kv, gd = s->gd, L = s->d.n_layer;
    const int32_t rows = end < W1 ? (int32_t)end : W1;
    for (int32_t l = 0; l < L; l++) { // every layer observed the queries of [0, end) last: a whole history
        const kvt_sparse_layer *ly = &q->lay[l];
        if (!ly->hist || ly->hist_next != end || ly->hist_n != rows) return KVT_OK;
    }
    const size_t row = (size_t)gd * sizeof(float);
    kvt_sparse_qwin *w = malloc(sizeof *w);
    float *buf = malloc((size_t)L * H * rows * row);
    if (!w || !buf) {
        free(w);
        free(buf);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the query window of sequence %d (%lld bytes)", seq,
                          (long long)((size_t)L * H * rows * row));
    }
    *w = (kvt_sparse_qwin){end, rows, W1, L, H, gd, buf};
    for (int32_t l = 0; l < L; l++) {
        for (int32_t kh = 0; kh < H; kh++) { // hist holds exactly `rows` rows, oldest first
            memcpy(w->q + ((int64_t)l * H + kh) * rows * gd, q->lay[l].hist + (int64_t)kh * W1 * gd, (size_t)rows * row);
        }
    }
    *out = w;
    return KVT_OK;
}

void kvt_sparse_qwin_free(kvt_sparse_qwin *w) {
    if (!w) return;
    free(w->q);
    free(w);
}

int64_t kvt_sparse_qwin_end(const kvt_sparse_qwin *w) { return w ? w->end : 0; }

int64_t kvt_sparse_qwin_bytes(const kvt_sparse_qwin *w) {
    return w ? (int64_t)sizeof *w + (int64_t)w->n_layer * w->H * w->rows * w->gd * (int64_t)sizeof(float) : 0;
}

bool kvt_sparse_qwin_covers(const kvt_sparse_qwin *w, int64_t at, int64_t n) {
    if (!w || at < 1 || at > w->end || at <= w->end - w->rows || n <= at) return false;
    const int64_t need = n > w->w1 ? n - w->w1 : 0; // the first position whose query the history keeps at n
    return need >= w->end - w->rows;
}

kvt_status kvt_sparse_qwin_restore(kvt_sparse *s, int32_t seq, const kvt_sparse_qwin *w, int64_t at, kvt_err *err) {
    const int32_t W1 = s ? s->p.window + 1 : 0;
    if (!s || !w || w->w1 != W1 || w->n_layer != s->d.n_layer || w->H != s->d.n_head_kv || w->gd != s->gd ||
        at < 1 || at > w->end || at <= w->end - w->rows) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "query window: does not fit sequence %d at position %lld (window of "
                          "positions [%lld, %lld))", seq, (long long)at, w ? (long long)(w->end - w->rows) : 0LL,
                          w ? (long long)w->end : 0LL);
    }
    kvt_sparse_seq *q = kvt_sparse_seq_get(s, seq);
    if (!q) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the sparse state of sequence %d", seq);
    kvt_sparse_wait_seq(s, q);
    const int64_t first = w->end - w->rows, lo = at - W1 > first ? at - W1 : first; // rows [lo, at) kept
    const int32_t m = (int32_t)(at - lo), gd = w->gd;
    for (int32_t l = 0; l < w->n_layer; l++) {
        kvt_sparse_layer *ly = &q->lay[l];
        if (!ly->hist) continue;
        for (int32_t kh = 0; kh < w->H; kh++) {
            memcpy(ly->hist + (int64_t)kh * W1 * gd, w->q + (((int64_t)l * w->H + kh) * w->rows + (lo - first)) * gd,
                   (size_t)m * gd * sizeof(float));
        }
        ly->hist_n = m;
        ly->gram_n = ly->gram_shift = 0; // computed whole at the next prediction: the same bits
        ly->hist_next = at;
        ly->sel_pos = ly->kept_pos = -1;
        const int32_t QC = kvt_sparse_qlog_rows(&s->p); // the log: the same rows (m <= W1 < QC)
        for (int32_t kh = 0; kh < w->H; kh++) {
            for (int32_t r = 0; r < m; r++) {
                memcpy(ly->qlog + ((int64_t)kh * QC + (lo + r) % QC) * gd, ly->hist + ((int64_t)kh * W1 + r) * gd,
                       (size_t)gd * sizeof(float));
            }
        }
        ly->qlog_end = at, ly->qlog_n = m;
    }
    return KVT_OK;
}

// --- a sequence's key summaries, kept by a prefix cache (sparse.h) ---------------------------------------------

struct kvt_sparse_ksum {
    kvt_sparse *s;          // the state whose bases these are (attach checks it)
    int64_t n;              // every kept layer's base holds the summaries of positions [0, n): whole blocks
    int64_t bytes;          // the bases' allocated bytes
    kvt_sparse_kbase **kb;  // [n_layer] a base per layer that keeps summaries (NULL: a dense or sliding-window layer)
};

// Whether ly keeps key summaries (its own buffers or a shared base).
static bool layer_has_keys(const kvt_sparse *s, const kvt_sparse_layer *ly) {
    return ly->kb || (s->p.mode == KVT_SPARSE_QUEST ? ly->lo != NULL : ly->k8 != NULL || ly->k4 != NULL);
}

// A kept copy takes b: its bytes leave summary_held for summary_kept (at the first).
static void kbase_keep(kvt_sparse *s, kvt_sparse_kbase *b) {
    if (b->kept++ > 0) return;
    s->summary_held -= b->bytes;
    s->summary_kept += b->bytes;
}

// A kept copy lets b go (its reference follows, kbase_release): after the last, the layers that still hold b count its
// bytes in summary_held again, under the reservation.
static void kbase_unkeep(kvt_sparse *s, kvt_sparse_kbase *b) {
    if (!b || --b->kept > 0) return;
    s->summary_kept -= b->bytes;
    held_add(s, b->bytes);
}

// The base of layer ly's summaries [0, n) (n <= its key_n, whole blocks), a reference taken for the caller:
// - its own buffers, when it has no base: they become the base as they are (no copy; the layer, about to be freed,
//   keeps none);
// - its base, when that holds [0, n) already;
// - else a new base of n positions: its base's [0, off) and its own [off, n) copied in.
static kvt_sparse_kbase *layer_keep(kvt_sparse *s, kvt_sparse_seq *q, kvt_sparse_layer *ly, int64_t n) {
    const int64_t B = key_block(s);
    kvt_sparse_kbase *kb = NULL;
    if (ly->kb && ly->koff >= n) {
        kb = ly->kb;
    } else if (!ly->kb) {
        if (!(kb = calloc(1, sizeof *kb))) return NULL;
        kb->n = n, kb->stride = key_blocks_of(s, ly->cap), kb->bytes = own_bytes(s, ly->cap, 0);
        layer_bufs(s, ly, kb->buf);
        void *none[KEYBUFS] = {NULL, NULL, NULL, NULL};
        set_keys(s, ly, none);
        q->summary_bytes -= kb->bytes; // the base's bytes stay in summary_held until kbase_keep moves them
    } else {
        const int64_t off = ly->koff, kc = key_blocks_of(s, n), ob = off / B;
        void *b[KEYBUFS], *own[KEYBUFS];
        if (!(kb = calloc(1, sizeof *kb)) || !alloc_keys(s, kc, b)) {
            free(kb);
            return NULL;
        }
        layer_bufs(s, ly, own);
        copy_key_blocks(s, b, kc, 0, ly->kb->buf, ly->kb->stride, 0, ob);
        copy_key_blocks(s, b, kc, ob, own, key_blocks_of(s, ly->cap - off), 0, kc - ob);
        kb->n = n, kb->stride = kc, kb->bytes = own_bytes(s, n, 0);
        for (int a = 0; a < KEYBUFS; a++) kb->buf[a] = b[a];
        held_add(s, kb->bytes);
    }
    kb->refs++;
    kbase_keep(s, kb);
    return kb;
}

bool kvt_sparse_keeps_keys(const kvt_sparse *s) { return s && has_summaries(s) && s->p.rerank_resid <= 0.0; }

bool kvt_sparse_pass_repeatable(const kvt_sparse *s) {
    return !s || s->p.mode != KVT_SPARSE_ASYNCSPADE || s->p.rerank_resid <= 0.0; // (its calibration counts every call)
}

// The kept summaries of seq's whole blocks of [0, end) (*out, NULL when none: see kvt_sparse_seq_free_keep). live: seq
// goes on, so a layer without a base first makes its summaries a base as a fork does (layer_freeze), and shares it.
static kvt_status keep_summaries(kvt_sparse *s, kvt_sparse_seq *q, int32_t seq, int64_t end, bool live,
                                 kvt_sparse_ksum **out, kvt_err *err) {
    *out = NULL;
    kvt_sparse_wait_seq(s, q);
    const int64_t B = key_block(s);
    int64_t n = end / B * B;
    int32_t kept = 0;
    for (int32_t l = 0; l < s->d.n_layer; l++) {
        const kvt_sparse_layer *ly = &q->lay[l];
        if (!layer_has_keys(s, ly)) continue;
        kept++;
        if (ly->key_n / B * B < n) n = ly->key_n / B * B; // (quest: key_n counts whole pages only)
    }
    // (--sparse-rerank-resid keeps predicted scores by position beside the summaries: its forks copy, so does this)
    if (!kvt_sparse_keeps_keys(s) || kept == 0 || n < B) return KVT_OK;
    // a live sequence's layers first make their buffers bases, every one (a layer that cannot, for the reservation's
    // room or memory, leaves nothing kept: those made stay, as after a fork, and nothing moves to summary_kept)
    for (int32_t l = 0; live && l < s->d.n_layer; l++) {
        kvt_status st = layer_has_keys(s, &q->lay[l]) ? layer_freeze(s, q, &q->lay[l], err) : KVT_OK;
        if (st) return st;
    }
    kvt_sparse_ksum *k = calloc(1, sizeof *k);
    if (k && !(k->kb = calloc((size_t)s->d.n_layer, sizeof *k->kb))) free(k), k = NULL;
    if (k) k->s = s, k->n = n;
    kvt_status st = k ? KVT_OK : kvt_errorf(err, KVT_ERR_NOMEM, "out of memory keeping the key summaries of sequence %d", seq);
    for (int32_t l = 0; !st && l < s->d.n_layer; l++) {
        kvt_sparse_layer *ly = &q->lay[l];
        if (!layer_has_keys(s, ly)) continue;
        // (a live layer's base holds [0, key_n) >= n once frozen, so layer_keep shares it: it never takes the buffers)
        if (!(k->kb[l] = layer_keep(s, q, ly, n))) {
            st = kvt_errorf(err, KVT_ERR_NOMEM, "out of memory keeping the key summaries of sequence %d (%lld positions)", seq, (long long)n);
        } else {
            k->bytes += k->kb[l]->bytes;
        }
    }
    if (st) kvt_sparse_ksum_free(k), k = NULL;
    *out = k;
    return st;
}

kvt_status kvt_sparse_seq_free_keep(kvt_sparse *s, int32_t seq, int64_t end, kvt_sparse_ksum **out, kvt_err *err) {
    *out = NULL;
    kvt_sparse_seq *q = s ? seq_of(s, seq) : NULL;
    if (!q) return KVT_OK;
    const kvt_status st = keep_summaries(s, q, seq, end, false, out, err);
    kvt_sparse_seq_free(s, seq);
    return st;
}

kvt_status kvt_sparse_seq_keep(kvt_sparse *s, int32_t seq, int64_t end, kvt_sparse_ksum **out, kvt_err *err) {
    *out = NULL;
    kvt_sparse_seq *q = s ? seq_of(s, seq) : NULL;
    return q ? keep_summaries(s, q, seq, end, true, out, err) : KVT_OK;
}

void kvt_sparse_ksum_free(kvt_sparse_ksum *k) {
    if (!k) return;
    for (int32_t l = 0; k->s && l < k->s->d.n_layer; l++) kbase_unkeep(k->s, k->kb[l]), kbase_release(k->s, k->kb[l]);
    free(k->kb);
    free(k);
}

int64_t kvt_sparse_ksum_end(const kvt_sparse_ksum *k) { return k ? k->n : 0; }
int64_t kvt_sparse_ksum_bytes(const kvt_sparse_ksum *k) { return k ? k->bytes : 0; }

kvt_status kvt_sparse_ksum_attach(kvt_sparse *s, int32_t seq, const kvt_sparse_ksum *k, int64_t at, int64_t *shared,
                                  kvt_err *err) {
    *shared = 0;
    if (!s || !k || k->s != s) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "kept key summaries: not of this context's sparse state");
    const int64_t B = key_block(s), n = (at < k->n ? at : k->n) / B * B;
    if (n < B) return KVT_OK;
    kvt_sparse_seq *q = kvt_sparse_seq_get(s, seq);
    if (!q) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the sparse state of sequence %d", seq);
    kvt_sparse_wait_seq(s, q);
    for (int32_t l = 0; l < s->d.n_layer; l++) {
        const kvt_sparse_layer *ly = &q->lay[l];
        if (k->kb[l] && (ly->kb || ly->cap > 0 || ly->key_n > 0)) {
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "kept key summaries: sequence %d already holds summaries (layer %d, "
                              "%lld positions)", seq, l, (long long)ly->key_n);
        }
    }
    for (int32_t l = 0; l < s->d.n_layer; l++) {
        kvt_sparse_layer *ly = &q->lay[l];
        if (!k->kb[l]) continue;
        ly->kb = k->kb[l], ly->kb->refs++, ly->koff = n;
        ly->key_n = n; // (its own buffers come with its first keys past n: kvt_sparse_layer_reserve)
    }
    *shared = n;
    return KVT_OK;
}
