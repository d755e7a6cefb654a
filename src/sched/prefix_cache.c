// prefix_cache.c - the serving scheduler's prefix cache (prefix_cache.h).
//
// An entry is one cached position block: its chain key, the entry of the block before it (its parent: a key
// names a whole prefix, so an entry is reachable only through its parents), and the store's handles of the
// block (kvt_kv_paged_block_ref: one hold on each of its n_layer * n_group store blocks). The blocks stay in
// the paged store's tiers like any other and move down under eviction; attach appends them to a sequence by
// reference (kvt_kv_paged_seq_push_ref). Entries are found through an open-addressing table on the key.
// Trim drops leaves (entries no other entry continues), least recently used first. Under asyncspade an entry may
// also keep the query window of a prompt that ended in or at its block (kvt_prefix_cache_keep_queries), within
// query_bytes, least recently used dropped first; under quest and asyncspade, the key summaries of a sequence that ended
// (kvt_prefix_cache_keep_keys) at the entry of its prompt's last full block, within key_bytes, likewise; or of a running
// sequence, taken when an attach needs them before it ends (hold_keys).
#include "prefix_cache.h"

#include <stdlib.h>
#include <string.h>

#include "../kv/kv_block_io.h"
#include "../kv/kv_paged.h"
#include "../sparse/sparse.h"

typedef struct {
    kvt_block_key key;
    int64_t parent;     // entry of the block before (-1: block 0)
    int64_t b;          // block index (positions [b * block_tokens, (b + 1) * block_tokens))
    int32_t n_tok;      // positions of the block it holds: block_tokens, or fewer for a prompt's last partial block
                        // (kvt_prefix_cache_keep_tail: a leaf, never in the second-level store)
    int32_t *tok;       // [n_tok] the block's token ids (owned): attach matches a prompt's partial block against them
    int64_t *ids;       // [n_shard] store handles, NULL: free entry
    int64_t children;   // entries whose parent this is
    uint64_t last_use;  // cache tick of the last attach or insert that passed through it
    kvt_sparse_qwin *qwin; // asyncspade: the query window of a prompt that ended in or at this block (NULL: none)
    kvt_sparse_ksum *ksum; // quest, asyncspade: the key summaries of a sequence whose prompt's last full block this is
    int32_t holder;        // quest, asyncspade: the running sequence that inserted this block last, holding its blocks (the
                           // end of its prompt or of a prompt chunk), whose summaries attach may take (hold_keys); -1: none.
                           // A mark only: checked against the blocks the sequence holds when used
} pentry;

struct kvt_prefix_cache {
    kvt_context *ctx;   // borrowed
    kvt_kv *kv;         // the context's store (borrowed)
    kvt_prefix_cache_params p;
    int32_t n_shard;
    pentry *e;          // [n_e] entries (free ones have ids NULL and sit in free_e)
    int64_t n_e, cap_e;
    int64_t *free_e, n_free;
    int64_t *tab;       // [cap_tab] entry index, -1 empty, -2 deleted; cap_tab a power of two
    int64_t cap_tab, n_tab_used; // slots not empty (live and deleted)
    uint64_t tick;
    int64_t n_holder;   // entries with a holder
    void *payload;      // [n_batch][payload_bytes] blocks read from / written to the second-level store (NULL without)
    int n_batch;        // blocks one lookup asks the store for at once (get_many pipelines them)
    kvt_prefix_cache_stats st;
};

// --- keys ------------------------------------------------------------------------------------------------

static uint64_t mix64(uint64_t x) { // splitmix64's finalizer: a bijection with full avalanche
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// One lane: the chain of mix64 over (seed, previous key, n, token ids), each word added with a lane constant.
static uint64_t key_lane(uint64_t seed, uint64_t mul, const kvt_block_key *prev, const int32_t *tokens, int64_t n) {
    uint64_t h = mix64(seed);
    h = mix64(h ^ (prev ? prev->lo : 0x6b76746965726b31ull) * mul);
    h = mix64(h ^ (prev ? prev->hi : 0x70726566697830ull) * mul);
    h = mix64(h ^ (uint64_t)n * mul);
    for (int64_t i = 0; i < n; i++) h = mix64(h ^ ((uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull) * mul);
    return h;
}

kvt_block_key kvt_prefix_key_next(const kvt_block_key *prev, const int32_t *tokens, int64_t n) {
    kvt_block_key k = {key_lane(0x243f6a8885a308d3ull, 0xff51afd7ed558ccdull, prev, tokens, n),
                       key_lane(0x13198a2e03707344ull, 0xc4ceb9fe1a85ec53ull, prev, tokens, n)};
    return k;
}

// --- the table -------------------------------------------------------------------------------------------

static bool key_eq(const kvt_block_key *a, const kvt_block_key *b) { return a->lo == b->lo && a->hi == b->hi; }

// Entry of key, or -1.
static int64_t tab_find(const kvt_prefix_cache *pc, const kvt_block_key *key) {
    if (!pc->cap_tab) return -1;
    const uint64_t m = (uint64_t)pc->cap_tab - 1;
    for (uint64_t i = key->lo & m;; i = (i + 1) & m) {
        const int64_t x = pc->tab[i];
        if (x == -1) return -1;
        if (x >= 0 && key_eq(&pc->e[x].key, key)) return x;
    }
}

// The entry of block b of tokens' chain after entry x (block b - 1's; -1 for block 0), or -1 when the cache has none.
static int64_t chain_next(const kvt_prefix_cache *pc, int64_t x, const int32_t *tokens, int64_t b) {
    const int64_t bt = pc->kv->block_tokens;
    const kvt_block_key key = kvt_prefix_key_next(x >= 0 ? &pc->e[x].key : NULL, tokens + b * bt, bt);
    const int64_t y = tab_find(pc, &key);
    return y >= 0 && pc->e[y].b == b && pc->e[y].parent == x ? y : -1;
}

static void tab_put_raw(kvt_prefix_cache *pc, int64_t x) {
    const uint64_t m = (uint64_t)pc->cap_tab - 1;
    uint64_t i = pc->e[x].key.lo & m;
    while (pc->tab[i] >= 0) i = (i + 1) & m;
    if (pc->tab[i] == -1) pc->n_tab_used++;
    pc->tab[i] = x;
}

// Adds entry x (its key not in the table); false when out of memory.
static bool tab_add(kvt_prefix_cache *pc, int64_t x) {
    if ((pc->n_tab_used + 1) * 2 > pc->cap_tab) { // rebuild at half full (live and deleted slots)
        int64_t live = 0;
        for (int64_t i = 0; i < pc->n_e; i++) live += pc->e[i].ids != NULL;
        int64_t cap = 64;
        while (cap < (live + 1) * 4) cap *= 2;
        int64_t *t = malloc((size_t)cap * sizeof *t);
        if (!t) return false;
        for (int64_t i = 0; i < cap; i++) t[i] = -1;
        free(pc->tab);
        pc->tab = t;
        pc->cap_tab = cap;
        pc->n_tab_used = 0;
        for (int64_t i = 0; i < pc->n_e; i++) {
            if (pc->e[i].ids && i != x) tab_put_raw(pc, i);
        }
    }
    tab_put_raw(pc, x);
    return true;
}

static void tab_del(kvt_prefix_cache *pc, int64_t x) {
    const uint64_t m = (uint64_t)pc->cap_tab - 1;
    for (uint64_t i = pc->e[x].key.lo & m; pc->tab[i] != -1; i = (i + 1) & m) {
        if (pc->tab[i] == x) {
            pc->tab[i] = -2;
            return;
        }
    }
}

// --- entries ---------------------------------------------------------------------------------------------

// A new entry for the first n_tok positions of block b of seq, whose ids are tok[0, n_tok), under key (its store
// blocks held); -1 with err set on failure.
static int64_t entry_new(kvt_prefix_cache *pc, int32_t seq, int64_t b, int32_t n_tok, const int32_t *tok,
                         const kvt_block_key *key, int64_t parent, kvt_err *err) {
    int64_t *ids = malloc((size_t)pc->n_shard * sizeof *ids);
    int32_t *tc = malloc((size_t)n_tok * sizeof *tc);
    if (!ids || !tc) {
        free(ids);
        free(tc);
        kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a prefix cache entry");
        return -1;
    }
    memcpy(tc, tok, (size_t)n_tok * sizeof *tc);
    if (kvt_kv_paged_block_ref_part(pc->kv, seq, b, n_tok, ids, err)) {
        free(ids);
        free(tc);
        return -1;
    }
    int64_t x;
    if (pc->n_free > 0) x = pc->free_e[--pc->n_free];
    else {
        if (pc->n_e == pc->cap_e) {
            int64_t cap = pc->cap_e ? pc->cap_e * 2 : 64;
            pentry *ne = realloc(pc->e, (size_t)cap * sizeof *ne);
            int64_t *nf = ne ? realloc(pc->free_e, (size_t)cap * sizeof *nf) : NULL;
            if (ne) pc->e = ne;
            if (!nf) {
                kvt_kv_paged_block_unref(pc->kv, ids);
                free(ids);
                free(tc);
                kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a prefix cache entry");
                return -1;
            }
            pc->free_e = nf;
            pc->cap_e = cap;
        }
        x = pc->n_e++;
    }
    pc->e[x] = (pentry){*key, parent, b, n_tok, tc, ids, 0, pc->tick, NULL, NULL, -1};
    if (!tab_add(pc, x)) {
        kvt_kv_paged_block_unref(pc->kv, ids);
        free(ids);
        free(tc);
        pc->e[x].tok = NULL;
        pc->e[x].ids = NULL;
        pc->free_e[pc->n_free++] = x;
        kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the prefix cache's table");
        return -1;
    }
    if (parent >= 0) pc->e[parent].children++;
    pc->st.blocks++;
    pc->st.inserted++;
    return x;
}

static void qwin_drop(kvt_prefix_cache *pc, int64_t x) {
    pentry *E = &pc->e[x];
    if (!E->qwin) return;
    pc->st.query_windows--;
    pc->st.query_bytes -= kvt_sparse_qwin_bytes(E->qwin);
    kvt_sparse_qwin_free(E->qwin);
    E->qwin = NULL;
}

static void ksum_drop(kvt_prefix_cache *pc, int64_t x) {
    pentry *E = &pc->e[x];
    if (!E->ksum) return;
    pc->st.key_sums--;
    pc->st.key_bytes -= kvt_sparse_ksum_bytes(E->ksum);
    kvt_sparse_ksum_free(E->ksum);
    E->ksum = NULL;
}

static void holder_clear(kvt_prefix_cache *pc, int64_t x) {
    if (pc->e[x].holder < 0) return;
    pc->e[x].holder = -1;
    pc->n_holder--;
}

static void entry_drop(kvt_prefix_cache *pc, int64_t x) {
    pentry *E = &pc->e[x];
    holder_clear(pc, x);
    qwin_drop(pc, x);
    ksum_drop(pc, x);
    tab_del(pc, x);
    kvt_kv_paged_block_unref(pc->kv, E->ids);
    free(E->ids);
    free(E->tok);
    E->ids = NULL;
    E->tok = NULL;
    if (E->parent >= 0) pc->e[E->parent].children--;
    pc->free_e[pc->n_free++] = x; // free_e has room for every entry
    pc->st.blocks--;
    pc->st.dropped++;
}

// --- the interface ---------------------------------------------------------------------------------------

kvt_prefix_cache_params kvt_prefix_cache_params_default(void) {
    kvt_prefix_cache_params p = {0, NULL, KVT_PREFIX_QUERY_BYTES_DEFAULT, KVT_PREFIX_KEY_BYTES_DEFAULT};
    return p;
}

kvt_status kvt_prefix_cache_init(kvt_context *ctx, const kvt_prefix_cache_params *p, kvt_prefix_cache **out,
                                 kvt_err *err) {
    *out = NULL;
    kvt_kv *kv = kvt_context_kv(ctx);
    if (strcmp(kv->ops->name, "paged") != 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "the prefix cache needs the paged KV store (the context uses the %s "
                          "cache): give a --kv-* flag", kv->ops->name);
    }
    kvt_prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    pc->ctx = ctx;
    pc->kv = kv;
    pc->p = p ? *p : kvt_prefix_cache_params_default();
    pc->n_shard = kv->n_layer * kv->n_group;
    if (pc->p.store) {
        if (pc->p.store->payload_bytes != kvt_kv_block_payload_bytes(kv)) {
            const int64_t want = kvt_kv_block_payload_bytes(kv), got = pc->p.store->payload_bytes;
            const char *name = pc->p.store->ops->name;
            free(pc);
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "prefix store '%s' holds blocks of %lld bytes, this KV store's are "
                              "%lld bytes", name, (long long)got, (long long)want);
        }
        // a prompt's store lookups go out in batches of up to 8 blocks, at most 64 MiB of buffers
        const int64_t pb = pc->p.store->payload_bytes, lim = ((int64_t)64 << 20) / (pb > 0 ? pb : 1);
        pc->n_batch = (int)(lim < 1 ? 1 : lim > 8 ? 8 : lim);
        if (!(pc->payload = malloc((size_t)pc->n_batch * (size_t)pb))) {
            free(pc);
            return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a prefix block buffer");
        }
    }
    *out = pc;
    return KVT_OK;
}

void kvt_prefix_cache_free(kvt_prefix_cache *pc) {
    if (!pc) return;
    for (int64_t i = 0; i < pc->n_e; i++) {
        if (pc->e[i].ids) {
            kvt_kv_paged_block_unref(pc->kv, pc->e[i].ids);
            free(pc->e[i].ids);
            free(pc->e[i].tok);
            kvt_sparse_qwin_free(pc->e[i].qwin);
            kvt_sparse_ksum_free(pc->e[i].ksum);
        }
    }
    free(pc->e);
    free(pc->free_e);
    free(pc->tab);
    free(pc->payload);
    free(pc);
}

// Blocks of tokens[0, n) that attach may give through a query window: the most blocks d, at most (n - 1) / bt and
// more than min_b, of a chain of entries from block 0 with a window covering d * bt for a prompt of n
// (kvt_sparse_qwin_covers) at its entry d or, for a whole-block prompt, d + 1 (a window's queries before a block's end
// are the chain's, so the window of a prompt repeated as it was serves at its last block but one); 0 when none (*x:
// the entry holding the window).
static int64_t window_blocks(const kvt_prefix_cache *pc, const int32_t *tokens, int64_t n, int64_t min_b, int64_t *x) {
    if (pc->st.query_windows == 0 || n < 2) return 0;
    const int64_t bt = pc->kv->block_tokens, nbx = (n - 1) / bt, nbw = n / bt;
    int64_t best = 0;
    for (int64_t b = 0, y = -1; b < nbw && (y = chain_next(pc, y, tokens, b)) >= 0; b++) {
        const int64_t d = b + 1 < nbx ? b + 1 : nbx;
        if (d > min_b && d > best && pc->e[y].qwin && kvt_sparse_qwin_covers(pc->e[y].qwin, d * bt, n)) best = d, *x = y;
    }
    return best;
}

// The least recently used entry that keeps key summaries (keys) or a query window, or -1.
static int64_t oldest_with(const kvt_prefix_cache *pc, bool keys) {
    int64_t old = -1;
    for (int64_t i = 0; i < pc->n_e; i++) {
        const bool has = pc->e[i].ids && (keys ? pc->e[i].ksum != NULL : pc->e[i].qwin != NULL);
        if (has && (old < 0 || pc->e[i].last_use < pc->e[old].last_use)) old = i;
    }
    return old;
}

// Positions of entry E's key summaries before lim that a chain through it may share: its kept copy's, or (live) those of
// its holder (all of its chain's: checked when taken, hold_keys).
static int64_t kept_upto(const kvt_prefix_cache *pc, const pentry *E, bool live, int64_t lim) {
    const int64_t end = live ? (E->holder >= 0 ? (E->b + 1) * pc->kv->block_tokens : 0) : kvt_sparse_ksum_end(E->ksum);
    return end < lim ? end : lim;
}

// The entry whose kept key summaries (live: whose holder's) cover the most of the chain that ends at entry `last`:
// *cover positions of it. An entry continuing the chain (or `last` itself) covers all of it as far as its summaries go
// (a prompt repeated whole keeps them at its last block, which attach leaves to be computed; a shorter prompt's chain
// stops inside a longer one's); else the deepest entry before `last` with some. -1 when none.
static int64_t best_keys(const kvt_prefix_cache *pc, int64_t last, bool live, int64_t *cover) {
    *cover = 0;
    if (live ? pc->n_holder == 0 : pc->st.key_sums == 0) return -1;
    const int64_t bt = pc->kv->block_tokens, lb = pc->e[last].b;
    int64_t best = -1;
    for (int64_t i = 0; i < pc->n_e; i++) { // continuations: their chain passes through last
        if (!pc->e[i].ids || pc->e[i].b < lb || kept_upto(pc, &pc->e[i], live, INT64_MAX) == 0) continue;
        int64_t j = i;
        while (j >= 0 && pc->e[j].b > lb) j = pc->e[j].parent;
        const int64_t c = kept_upto(pc, &pc->e[i], live, (lb + 1) * bt);
        if (j == last && c > *cover) best = i, *cover = c;
    }
    for (int64_t j = pc->e[last].parent; j >= 0 && best < 0; j = pc->e[j].parent) { // else the deepest before it
        if (kept_upto(pc, &pc->e[j], live, INT64_MAX) == 0) continue;
        best = j, *cover = kept_upto(pc, &pc->e[j], live, (pc->e[j].b + 1) * bt);
    }
    return best;
}

// k (its end past the copy entry x keeps, else freed) becomes x's copy, least recently used copies dropped to fit
// key_bytes (k is freed when it alone exceeds it). Whether it did.
static bool ksum_put(kvt_prefix_cache *pc, int64_t x, kvt_sparse_ksum *k) {
    const int64_t bytes = kvt_sparse_ksum_bytes(k), had = kvt_sparse_ksum_end(pc->e[x].ksum);
    if (kvt_sparse_ksum_end(k) <= had || bytes > pc->p.key_bytes) {
        kvt_sparse_ksum_free(k);
        return false;
    }
    ksum_drop(pc, x);
    for (int64_t old; pc->st.key_bytes + bytes > pc->p.key_bytes && (old = oldest_with(pc, true)) >= 0;) {
        ksum_drop(pc, old); // least recently used copies out
    }
    pc->e[x].ksum = k;
    pc->st.key_sums++;
    pc->st.key_bytes += bytes;
    return true;
}

// When a running sequence holds more of the chain that ends at entry `last` than the kept copies cover (`cover`
// positions), it gives its key summaries of its marked entry's chain to that entry now (kvt_sparse_seq_keep: no copy,
// it goes on as a fork's parent does), as it would when freed: a request arriving while the first with its prefix
// still runs shares them instead of reading the keys back. A mark is taken once (then cleared); one whose sequence no
// longer holds the entry's blocks is passed over. seq: the sequence attaching (never its own holder). Whether it did.
static bool hold_keys(kvt_prefix_cache *pc, int32_t seq, int64_t last, int64_t cover) {
    kvt_sparse *sp = kvt_context_sparse(pc->ctx);
    int64_t lc = 0;
    for (int64_t y; sp && pc->p.key_bytes > 0 && (y = best_keys(pc, last, true, &lc)) >= 0 && lc > cover;) {
        const pentry *E = &pc->e[y];
        const int32_t h = E->holder;
        holder_clear(pc, y);
        if (h == seq || !kvt_kv_paged_seq_holds(pc->kv, h, E->b, E->ids)) continue;
        kvt_sparse_ksum *k = NULL;
        kvt_err e2;
        if (kvt_sparse_seq_keep(sp, h, (E->b + 1) * pc->kv->block_tokens, &k, &e2) || !k) continue;
        if (ksum_put(pc, y, k)) {
            pc->st.key_live++;
            return true;
        }
    }
    return false;
}

int64_t kvt_prefix_cache_probe(const kvt_prefix_cache *pc, const int32_t *tokens, int64_t n, int64_t max_tokens) {
    const int64_t bt = pc->kv->block_tokens, lim = max_tokens < n ? max_tokens : n;
    int64_t nb = lim > 0 ? lim / bt : 0, xw = -1;
    const int64_t nw = window_blocks(pc, tokens, n, nb, &xw);
    if (nw > nb) nb = nw;
    int64_t b = 0;
    for (int64_t x = -1; b < nb && (x = chain_next(pc, x, tokens, b)) >= 0;) b++;
    return b;
}

// Positions of block b of tokens[0, n) (after the chain ending at entry parent, -1 for block 0), at most lim - b * bt
// of them, that the cached entry of block b after parent which shares the most with the prompt shares (its ids'
// common prefix with the prompt's; *entry: that entry); 0 when none. Without sparse attention only: quest's and
// asyncspade's summaries and query windows are kept per whole block.
static int64_t partial_match(const kvt_prefix_cache *pc, int64_t parent, int64_t b, const int32_t *tokens, int64_t n,
                             int64_t lim, int64_t *entry) {
    const int64_t bt = pc->kv->block_tokens, p0 = b * bt;
    int64_t want = (lim < n ? lim : n) - p0;
    if (want > bt) want = bt;
    if (want <= 0 || kvt_context_sparse(pc->ctx) || (parent >= 0 && pc->e[parent].children == 0)) return 0;
    int64_t best = 0;
    for (int64_t i = 0; i < pc->n_e && best < want; i++) {
        const pentry *E = &pc->e[i];
        if (!E->ids || E->b != b || E->parent != parent) continue;
        int64_t m = 0;
        const int64_t lim_i = E->n_tok < want ? E->n_tok : want;
        while (m < lim_i && E->tok[m] == tokens[p0 + m]) m++;
        if (m > best) best = m, *entry = i;
    }
    return best;
}

// An imported block b of seq (key) joins the memory cache after parent: the new entry, or -1 when it cannot (the key
// is there already, or out of memory: a later lookup re-imports it), which ends the chain of entries.
static int64_t join(kvt_prefix_cache *pc, int32_t seq, int64_t b, const int32_t *tokens, const kvt_block_key *key,
                    int64_t parent) {
    if (tab_find(pc, key) >= 0) return -1;
    kvt_err e2;
    const int64_t bt = pc->kv->block_tokens;
    return entry_new(pc, seq, b, (int32_t)bt, tokens + b * bt, key, parent, &e2);
}

kvt_status kvt_prefix_cache_attach(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n,
                                   int64_t max_tokens, int64_t *n_cached, kvt_err *err) {
    return kvt_prefix_cache_attach_staged(pc, seq, tokens, n, max_tokens, NULL, n_cached, err);
}

kvt_status kvt_prefix_cache_attach_staged(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n,
                                          int64_t max_tokens, const kvt_prefix_staged *sg, int64_t *n_cached,
                                          kvt_err *err) {
    *n_cached = 0;
    pc->st.lookups++;
    const int64_t past = kvt_context_seq_n_past(pc->ctx, seq);
    if (past != 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "prefix cache attach: sequence %d %s", seq,
                          past < 0 ? "does not exist" : "already holds positions");
    }
    const int64_t bt = pc->kv->block_tokens, lim = max_tokens < n ? max_tokens : n;
    int64_t nb = lim > 0 ? lim / bt : 0, xw = -1;
    const int64_t nb0 = nb, nw = window_blocks(pc, tokens, n, nb, &xw); // past max_tokens with a query window
    if (nw > nb) nb = nw;
    pc->tick++;
    kvt_block_key key, *prev = NULL;
    int64_t parent = -1, b = 0, from_store = 0, from_staged = 0;
    kvt_status st = KVT_OK;
    for (; b < nb; b++) { // blocks the memory cache holds
        key = kvt_prefix_key_next(prev, tokens + b * bt, bt);
        int64_t x = tab_find(pc, &key);
        if (!(x >= 0 && pc->e[x].b == b && pc->e[x].parent == parent)) break;
        if ((st = kvt_kv_paged_seq_push_ref(pc->kv, seq, b, pc->e[x].ids, err))) break;
        pc->e[x].last_use = pc->tick;
        parent = x;
        prev = &pc->e[x].key;
    }
    // then blocks staged beforehand or held by the second-level store (asked for n_batch at a time), imported in
    // order until the first miss; key is block b's
    kvt_block_key keys[8];
    void *dsts[8];
    bool hits[8];
    bool more = !st && (pc->p.store || sg) && b < nb;
    while (more) {
        if (sg && b >= sg->b0 && b < sg->b0 + sg->n) { // a staged copy: no store round trip
            const int64_t i = b - sg->b0;
            if (!key_eq(&sg->keys[i], &key) || (st = kvt_kv_block_import(pc->kv, seq, b, sg->payloads[i], err))) break;
            from_store++;
            from_staged++;
            parent = join(pc, seq, b, tokens, &key, parent);
            const kvt_block_key cur = key;
            if (++b < nb) key = kvt_prefix_key_next(&cur, tokens + b * bt, bt);
            more = parent >= 0 && b < nb;
            continue;
        }
        if (!pc->p.store || (sg && sg->last && b >= sg->b0 + sg->n)) break; // the store has nothing more
        const int64_t end = sg && b < sg->b0 && sg->n > 0 && sg->b0 < nb ? sg->b0 : nb; // up to the staged blocks
        int n = 0;
        for (kvt_block_key k = key; n < pc->n_batch && b + n < end; n++) {
            if (n > 0) k = kvt_prefix_key_next(&keys[n - 1], tokens + (b + n) * bt, bt);
            keys[n] = k;
            dsts[n] = (char *)pc->payload + (size_t)n * (size_t)pc->p.store->payload_bytes;
        }
        kvt_prefix_store_get_many(pc->p.store, keys, n, dsts, hits);
        for (int i = 0; i < n && more; i++, b++) {
            if (!hits[i] || (st = kvt_kv_block_import(pc->kv, seq, b, dsts[i], err))) {
                more = false;
                break;
            }
            from_store++;
            // the imported block joins the memory cache (a failure here only costs a later re-import)
            if ((parent = join(pc, seq, b, tokens, &keys[i], parent)) < 0) more = false; // b++ still counts this block
        }
        if (more && b < nb) key = kvt_prefix_key_next(&keys[n - 1], tokens + b * bt, bt);
        more = more && b < nb;
    }
    // then the positions of block b that a cached block (full, or a prompt's partial last one) after the chain shares
    // with the prompt, up to lim: its blocks by reference, cut to those positions; the sequence's first write into
    // them copies them (the store's copy on write, from whatever tier they are in), and the entry keeps its own
    int64_t xp = -1;
    const int64_t part = !st && (b == 0 || parent >= 0) ? partial_match(pc, parent, b, tokens, n, lim, &xp) : 0;
    if (part > 0 && !(st = kvt_kv_paged_seq_push_ref(pc->kv, seq, b, pc->e[xp].ids, err))) {
        pc->kv->ops->truncate(pc->kv, seq, b * bt + part);
        pc->e[xp].last_use = pc->tick;
    }
    if (st) { // n_past is still 0
        pc->kv->ops->truncate(pc->kv, seq, 0);
        return st;
    }
    if ((st = kvt_context_seq_set_n_past(pc->ctx, seq, b * bt + part, err))) {
        pc->kv->ops->truncate(pc->kv, seq, 0);
        return st;
    }
    if (b > nb0) { // the memory cache went past max_tokens to nw blocks (= nb = b): xw (the entry of block nw - 1, or
                   // of block nw for a whole-block prompt) holds the window
        if ((st = kvt_sparse_qwin_restore(kvt_context_sparse(pc->ctx), seq, pc->e[xw].qwin, b * bt, err))) {
            kvt_context_seq_truncate(pc->ctx, seq, 0);
            return st;
        }
        pc->st.query_hits++;
        pc->st.query_tokens += (b - nb0) * bt;
    }
    // (parent: block b - 1's entry, or -1 where an imported block could not join the memory cache)
    int64_t cover = 0, xk = b > 0 && parent >= 0 ? best_keys(pc, parent, false, &cover) : -1;
    if (b > 0 && parent >= 0 && hold_keys(pc, seq, parent, cover)) xk = best_keys(pc, parent, false, &cover);
    if (xk >= 0) {
        int64_t shared = 0;
        if ((st = kvt_sparse_ksum_attach(kvt_context_sparse(pc->ctx), seq, pc->e[xk].ksum, cover, &shared, err))) {
            kvt_context_seq_truncate(pc->ctx, seq, 0);
            return st;
        }
        pc->st.key_hits += shared > 0;
        pc->st.key_tokens += shared;
        pc->e[xk].last_use = pc->tick; // (it may lie past the attached blocks: its copy was used all the same)
    }
    *n_cached = b * bt + part;
    pc->st.store_hit_tokens += from_store * bt;
    pc->st.staged_tokens += from_staged * bt;
    pc->st.hit_tokens += (b - from_store) * bt + part;
    pc->st.part_hits += part > 0;
    pc->st.part_tokens += part;
    return KVT_OK;
}

kvt_status kvt_prefix_cache_insert(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n, kvt_err *err) {
    const int64_t bt = pc->kv->block_tokens, nb = n / bt;
    if (n > kvt_context_seq_n_past(pc->ctx, seq)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "prefix cache insert: sequence %d holds %lld positions, not %lld", seq,
                          (long long)kvt_context_seq_n_past(pc->ctx, seq), (long long)n);
    }
    pc->tick++;
    kvt_block_key key, *prev = NULL;
    int64_t parent = -1;
    for (int64_t b = 0; b < nb; b++) {
        key = kvt_prefix_key_next(prev, tokens + b * bt, bt);
        prev = &key;
        int64_t x = tab_find(pc, &key);
        if (x < 0) {
            kvt_err e2;
            if ((x = entry_new(pc, seq, b, (int32_t)bt, tokens + b * bt, &key, parent, &e2)) < 0) {
                // a sliding window freed part of the block (its layers keep no early block): the prefix ends here
                if (e2.status == KVT_ERR_INVALID_ARG) break;
                *err = e2;
                return e2.status;
            }
            if (pc->p.store) {
                kvt_status st = kvt_kv_block_export(pc->kv, seq, b, pc->payload, err);
                if (st) return st;
                kvt_prefix_store_put(pc->p.store, &key, pc->payload);
            }
        }
        pc->e[x].last_use = pc->tick;
        parent = x;
    }
    // seq holds the chain: the last entry is marked with it, unless its blocks are another sequence's (seq computed the
    // same tokens beside it: that one keeps the mark)
    pentry *L = parent >= 0 ? &pc->e[parent] : NULL;
    if (L && pc->p.key_bytes > 0 && kvt_sparse_keeps_keys(kvt_context_sparse(pc->ctx)) &&
        kvt_kv_paged_seq_holds(pc->kv, seq, L->b, L->ids)) {
        if (L->holder < 0) pc->n_holder++;
        L->holder = seq;
    }
    if (pc->p.max_blocks > 0) kvt_prefix_cache_trim(pc, pc->p.max_blocks);
    return KVT_OK;
}

// The entry of block nb - 1 of tokens' chain (insert registered it), or -1.
static int64_t last_entry(const kvt_prefix_cache *pc, const int32_t *tokens, int64_t nb) {
    int64_t x = -1;
    for (int64_t b = 0; b < nb; b++) {
        if ((x = chain_next(pc, x, tokens, b)) < 0) return -1;
    }
    return x;
}

void kvt_prefix_cache_keep_tail(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n) {
    const int64_t bt = pc->kv->block_tokens, nb = n / bt, m = n - nb * bt;
    if (m == 0 || kvt_context_sparse(pc->ctx) || n > kvt_context_seq_n_past(pc->ctx, seq)) return;
    const int64_t x = nb > 0 ? last_entry(pc, tokens, nb) : -1;
    if (nb > 0 && x < 0) return; // the full blocks are not all cached (a sliding window freed one)
    const kvt_block_key key = kvt_prefix_key_next(x >= 0 ? &pc->e[x].key : NULL, tokens + nb * bt, m);
    pc->tick++;
    int64_t y = tab_find(pc, &key);
    kvt_err e2;
    if (y < 0) y = entry_new(pc, seq, nb, (int32_t)m, tokens + nb * bt, &key, x, &e2);
    if (y < 0) return;
    pc->e[y].last_use = pc->tick;
    if (pc->p.max_blocks > 0) kvt_prefix_cache_trim(pc, pc->p.max_blocks);
}

void kvt_prefix_cache_keep_queries(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n) {
    const int64_t bt = pc->kv->block_tokens, nb = n / bt;
    if (pc->p.query_bytes <= 0 || nb < 1 || kvt_context_prompt_tail(pc->ctx) <= 1) return;
    const int64_t x = last_entry(pc, tokens, nb);
    if (x < 0) return;
    // a window kept there ending at or before n serves every prompt this one would (its queries before the block's
    // end are the same bits: they depend on the block chain's tokens alone), and more
    if (pc->e[x].qwin && kvt_sparse_qwin_end(pc->e[x].qwin) <= n) return;
    kvt_sparse_qwin *w = NULL;
    kvt_err e2;
    if (kvt_sparse_qwin_take(kvt_context_sparse(pc->ctx), seq, n, &w, &e2) || !w) return;
    const int64_t bytes = kvt_sparse_qwin_bytes(w);
    if (!kvt_sparse_qwin_covers(w, nb * bt, n + 1) || bytes > pc->p.query_bytes) { // no query before the block's end
        kvt_sparse_qwin_free(w);
        return;
    }
    qwin_drop(pc, x); // a window of a longer prompt that ended in the same block
    for (int64_t old; pc->st.query_bytes + bytes > pc->p.query_bytes && (old = oldest_with(pc, false)) >= 0;) {
        qwin_drop(pc, old); // least recently used windows out
    }
    pc->e[x].qwin = w;
    pc->st.query_windows++;
    pc->st.query_bytes += bytes;
}

void kvt_prefix_cache_keep_keys(kvt_prefix_cache *pc, int32_t seq, const int32_t *tokens, int64_t n) {
    const int64_t bt = pc->kv->block_tokens, nb = n / bt;
    // seq's holder marks (its prompt chunks' too, a prompt cut short included) go with it
    for (int64_t b = 0, x = -1; b < nb && pc->n_holder > 0 && (x = chain_next(pc, x, tokens, b)) >= 0; b++) {
        if (pc->e[x].holder == seq) holder_clear(pc, x);
    }
    kvt_sparse *sp = kvt_context_sparse(pc->ctx);
    if (pc->p.key_bytes <= 0 || !sp || nb < 1 || n > kvt_context_seq_n_past(pc->ctx, seq)) return;
    const int64_t x = last_entry(pc, tokens, nb);
    if (x < 0) return;
    const int64_t end = nb * bt, had = kvt_sparse_ksum_end(pc->e[x].ksum);
    if (had >= end) return; // the entry's copy covers its chain already
    kvt_sparse_ksum *k = NULL;
    kvt_err e2;
    if (kvt_sparse_seq_free_keep(sp, seq, end, &k, &e2) || !k) return;
    ksum_put(pc, x, k);
}

int64_t kvt_prefix_cache_trim(kvt_prefix_cache *pc, int64_t keep_blocks) {
    // blocks the cache alone holds: entries no running sequence shares (a drop changes no other entry's count)
    bool *alone = malloc((size_t)(pc->n_e ? pc->n_e : 1) * sizeof *alone);
    if (!alone) return 0;
    int64_t n_alone = 0, released = 0;
    for (int64_t i = 0; i < pc->n_e; i++) {
        alone[i] = pc->e[i].ids && kvt_kv_paged_block_holders(pc->kv, pc->e[i].ids) <= 1;
        n_alone += alone[i];
    }
    while (n_alone > keep_blocks) {
        int64_t best = -1;
        for (int64_t i = 0; i < pc->n_e; i++) {
            if (!alone[i] || pc->e[i].children > 0) continue;
            if (best < 0 || pc->e[i].last_use < pc->e[best].last_use) best = i;
        }
        if (best < 0) break; // the rest is shared with running sequences or continued by shared blocks
        entry_drop(pc, best);
        alone[best] = false;
        n_alone--;
        released++;
    }
    free(alone);
    return released;
}

void kvt_prefix_cache_stats_get(const kvt_prefix_cache *pc, kvt_prefix_cache_stats *out) { *out = pc->st; }
