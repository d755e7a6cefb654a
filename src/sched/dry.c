#include "dry.h"

#include "../model/tokenizer.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { DRY_MAX_CHARS = 40, DRY_MAX_TAIL = 20 }; // llama.cpp's limits on a breaker string and on a tail's tokens

// One restart sequence: its head token, then tails[off..off+len) (the tokens after the head, newest last; len 0: the
// head alone restarts).
typedef struct {
    int32_t head, off, len;
} dry_entry;

struct kvt_dry_breakers {
    atomic_int refs; // the creator's and each sampler's (kvt_dry_init)
    dry_entry *e;    // [n] sorted by head, then tail
    int32_t n, cap;
    int32_t *tails; // [n_tails]
    int32_t n_tails, cap_tails;
};

static bool grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

// Adds (head, tail[0..len)) unless head already has that tail (llama.cpp's duplicate check).
static bool add_entry(kvt_dry_breakers *b, int32_t head, const int32_t *tail, int32_t len) {
    for (int32_t i = 0; i < b->n; i++)
        if (b->e[i].head == head && b->e[i].len == len &&
            (len == 0 || !memcmp(b->tails + b->e[i].off, tail, (size_t)len * sizeof *tail)))
            return true;
    if (!grow((void **)&b->e, &b->cap, b->n + 1, sizeof *b->e) ||
        !grow((void **)&b->tails, &b->cap_tails, b->n_tails + len, sizeof *b->tails))
        return false;
    if (len) memcpy(b->tails + b->n_tails, tail, (size_t)len * sizeof *tail);
    b->e[b->n++] = (dry_entry){head, b->n_tails, len};
    b->n_tails += len;
    return true;
}

static int cmp_entry(const void *x, const void *y) {
    const dry_entry *a = x, *b = y;
    return a->head != b->head ? (a->head < b->head ? -1 : 1) : a->len != b->len ? (a->len < b->len ? -1 : 1) : 0;
}

static void finish(kvt_dry_breakers *b) {
    if (b->n > 1) qsort(b->e, (size_t)b->n, sizeof *b->e, cmp_entry);
}

// The first entry of head (index into b->e) and how many; 0 when none.
static int32_t find_head(const kvt_dry_breakers *b, int32_t head, int32_t *first) {
    int32_t lo = 0, hi = b ? b->n : 0;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (b->e[mid].head < head) lo = mid + 1;
        else hi = mid;
    }
    int32_t k = lo;
    while (k < (b ? b->n : 0) && b->e[k].head == head) k++;
    *first = lo;
    return k - lo;
}

int32_t kvt_dry_breakers_count(const kvt_dry_breakers *b) { return b ? b->n : 0; }

kvt_dry_breakers *kvt_dry_breakers_ref(const kvt_dry_breakers *b) {
    kvt_dry_breakers *m = (kvt_dry_breakers *)b;
    if (m) atomic_fetch_add(&m->refs, 1);
    return m;
}

void kvt_dry_breakers_free(kvt_dry_breakers *b) {
    if (!b || atomic_fetch_sub(&b->refs, 1) > 1) return;
    free(b->e);
    free(b->tails);
    free(b);
}

static kvt_status oom(kvt_dry_breakers *b, kvt_err *err) {
    kvt_dry_breakers_free(b);
    return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the DRY sequence breakers");
}

kvt_status kvt_dry_breakers_from_tokens(const int32_t *const *seqs, const int32_t *lens, int32_t n,
                                        kvt_dry_breakers **out, kvt_err *err) {
    *out = NULL;
    kvt_dry_breakers *b = calloc(1, sizeof *b);
    if (!b) return oom(NULL, err);
    atomic_init(&b->refs, 1);
    for (int32_t i = 0; i < n; i++) {
        if (lens[i] <= 0) continue;
        const int32_t len = lens[i] - 1 < DRY_MAX_TAIL ? lens[i] - 1 : DRY_MAX_TAIL;
        if (!add_entry(b, seqs[i][0], seqs[i] + 1, len)) return oom(b, err);
    }
    finish(b);
    *out = b;
    return KVT_OK;
}

// Tokens of s[0..len) as llama.cpp's tokenize(text, add_special false, parse_special false), cut to DRY_MAX_TAIL;
// *ids malloc'd. Returns the count or -1 (err filled).
static int32_t tokenize_tail(const struct kvt_tokenizer *t, const char *s, size_t len, int32_t **ids, kvt_err *err) {
    int64_t cap = (int64_t)len + 8;
    for (;;) {
        int32_t *v = malloc((size_t)cap * sizeof *v);
        if (!v) {
            kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a DRY sequence breaker");
            return -1;
        }
        const int64_t k = kvt_tokenize(t, s, len, false, false, v, cap, err);
        if (k < 0) {
            free(v);
            return -1;
        }
        if (k <= cap) {
            *ids = v;
            return (int32_t)(k < DRY_MAX_TAIL ? k : DRY_MAX_TAIL);
        }
        free(v);
        cap = k;
    }
}

kvt_status kvt_dry_breakers_init(const struct kvt_tokenizer *t, const char *const *strs, const size_t *lens, int32_t n,
                                 kvt_dry_breakers **out, kvt_err *err) {
    *out = NULL;
    kvt_dry_breakers *b = calloc(1, sizeof *b);
    if (!b) return oom(NULL, err);
    atomic_init(&b->refs, 1);
    const int32_t n_vocab = kvt_tokenizer_n_vocab(t);
    int64_t wcap = 256;
    char *word = malloc((size_t)wcap);
    if (!word) return oom(b, err);
    for (int32_t k = 0; k < n; k++) {
        const char *str = strs[k];
        const size_t sl = lens[k] < DRY_MAX_CHARS ? lens[k] : DRY_MAX_CHARS;
        if (sl == 0) continue;
        // the tokens of each tail str[i..sl) (1 <= i < sl), tokenized when first needed
        int32_t *tail[DRY_MAX_CHARS] = {0}, tail_n[DRY_MAX_CHARS];
        for (size_t i = 0; i < DRY_MAX_CHARS; i++) tail_n[i] = -1;
        kvt_status st = KVT_OK;
        for (int32_t id = 0; id < n_vocab && st == KVT_OK; id++) {
            // the token's text as llama.cpp's detokenize({id}, special = true)
            int64_t wl = kvt_detokenize_ex(t, &id, 1, word, wcap, false, true);
            if (wl > wcap) {
                char *w2 = realloc(word, (size_t)wl);
                if (!w2) {
                    st = KVT_ERR_NOMEM;
                    break;
                }
                word = w2;
                wcap = wl;
                wl = kvt_detokenize_ex(t, &id, 1, word, wcap, false, true);
            }
            if (wl < 0) {
                st = KVT_ERR_NOMEM;
                break;
            }
            if (memmem(word, (size_t)wl, str, sl)) { // holds the whole breaker: restarts alone
                if (!add_entry(b, id, NULL, 0)) st = KVT_ERR_NOMEM;
                continue;
            }
            // ends with the breaker's first bytes: restarts when the tokens of the rest follow
            for (int64_t pos = 0; pos < wl && st == KVT_OK; pos++) {
                if (word[pos] != str[0]) continue;
                size_t i = 1;
                bool match = true;
                for (; i < sl && pos + (int64_t)i < wl; i++) {
                    if (word[pos + (int64_t)i] != str[i]) {
                        match = false;
                        break;
                    }
                }
                if (!match) continue; // (i < sl here: the whole breaker is not in word)
                if (tail_n[i] < 0 && (tail_n[i] = tokenize_tail(t, str + i, sl - i, &tail[i], err)) < 0) {
                    st = err && err->status ? err->status : KVT_ERR_INVALID_ARG;
                    tail_n[i] = 0;
                    break;
                }
                if (!add_entry(b, id, tail[i], tail_n[i])) st = KVT_ERR_NOMEM;
            }
        }
        for (size_t i = 0; i < DRY_MAX_CHARS; i++) free(tail[i]);
        if (st != KVT_OK) {
            free(word);
            kvt_dry_breakers_free(b);
            if (st == KVT_ERR_NOMEM) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the DRY sequence breakers");
            char where[48];
            snprintf(where, sizeof where, "DRY sequence breaker %d", (int)k);
            kvt_err_prefix(err, where);
            return st;
        }
    }
    free(word);
    finish(b);
    *out = b;
    return KVT_OK;
}

// ---- the per-sampler state ----

struct kvt_dry {
    kvt_dry_params p;
    kvt_dry_breakers *b; // a reference
    int32_t n_vocab;
    int32_t *ring;   // [p.last_n] the last tokens accepted
    int64_t n_seen;  // tokens accepted so far
    int32_t *r;      // [p.last_n] the window, newest first (r[i] is llama.cpp's last_tokens.rat(i))
    int32_t *rep;    // [p.last_n] the repeat counts (llama.cpp's dry_repeat_count)
    int32_t *maxrep; // [n_vocab] the longest repetition each token would extend (-1: none)
    int32_t *tok;    // [p.last_n] the tokens with maxrep set, in order found
    float *pen;      // [p.last_n] their penalties
};

int kvt_dry_params_on(const kvt_dry_params *p) {
    return p->multiplier != 0.0f && p->base >= 1.0f && p->last_n > 0;
}

kvt_status kvt_dry_init(const kvt_dry_params *p, const kvt_dry_breakers *breakers, int32_t n_vocab, kvt_dry **out,
                        kvt_err *err) {
    *out = NULL;
    kvt_dry *d = calloc(1, sizeof *d);
    if (!d) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the DRY sampler");
    d->p = *p;
    if (d->p.last_n < 0) d->p.last_n = 0;
    if (d->p.allowed_length < 0) d->p.allowed_length = 0;
    d->b = kvt_dry_breakers_ref(breakers);
    d->n_vocab = n_vocab;
    const size_t w = (size_t)d->p.last_n + 1;
    d->ring = malloc(w * sizeof *d->ring);
    d->r = malloc(w * sizeof *d->r);
    d->rep = malloc(w * sizeof *d->rep);
    d->tok = malloc(w * sizeof *d->tok);
    d->pen = malloc(w * sizeof *d->pen);
    d->maxrep = malloc((size_t)n_vocab * sizeof *d->maxrep);
    if (!d->ring || !d->r || !d->rep || !d->tok || !d->pen || !d->maxrep) {
        kvt_dry_free(d);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for the DRY sampler (a window of %d tokens)",
                          (int)p->last_n);
    }
    for (int32_t i = 0; i < n_vocab; i++) d->maxrep[i] = -1;
    *out = d;
    return KVT_OK;
}

void kvt_dry_free(kvt_dry *d) {
    if (!d) return;
    free(d->ring);
    free(d->r);
    free(d->rep);
    free(d->tok);
    free(d->pen);
    free(d->maxrep);
    kvt_dry_breakers_free(d->b);
    free(d);
}

void kvt_dry_accept(kvt_dry *d, int32_t token) {
    if (!kvt_dry_params_on(&d->p)) return;
    d->ring[d->n_seen % d->p.last_n] = token;
    d->n_seen++;
}

static int32_t imin(int32_t a, int32_t b) { return a < b ? a : b; }

int32_t kvt_dry_penalties(kvt_dry *d, const int32_t **tokens, const float **penalties) {
    *tokens = d->tok;
    *penalties = d->pen;
    if (!kvt_dry_params_on(&d->p)) return 0;
    const int32_t L = (int32_t)(d->n_seen < d->p.last_n ? d->n_seen : d->p.last_n);
    const int32_t allowed = d->p.allowed_length;
    if (L <= allowed) return 0;
    const int32_t *r = d->r;
    for (int32_t i = 0; i < L; i++) d->r[i] = d->ring[(d->n_seen - 1 - i) % d->p.last_n];

    // 1. the newest restart bounds the repetition: a head at r[i] whose longest tail r[i-1], r[i-2], ... matches
    int32_t rep_limit = L;
    for (int32_t i = 0; i < L; i++) {
        int32_t first, cnt = find_head(d->b, r[i], &first), longest = -1;
        for (int32_t e = first; e < first + cnt; e++) {
            const dry_entry *x = &d->b->e[e];
            if (x->len <= longest || x->len > i) continue;
            bool match = true;
            for (int32_t o = 0; o < x->len && match; o++) match = d->b->tails[x->off + o] == r[i - o - 1];
            if (match) longest = x->len;
        }
        if (longest >= 0) {
            rep_limit = i - longest;
            break;
        }
    }
    if (rep_limit < allowed) return 0;

    // 2. the reversed Z-algorithm: rep[L - 1 - k] = how many of the newest tokens also end k positions back (capped at
    // rep_limit); llama.cpp's loop, its Z-box bounds lt..rt
    int32_t *rep = d->rep;
    for (int32_t i = 0; i < L; i++) rep[i] = 0;
    {
        const int32_t last = L - 1;
        int32_t lt = 0, rt = 0;
        for (int32_t k = 1; k < L; k++) {
            if (k > rt) {
                int32_t n = 0;
                while (n + k < L && r[n] == r[n + k]) n++;
                rep[last - k] = imin(n, rep_limit);
                if (n > 0) {
                    lt = k;
                    rt = k + n - 1;
                }
            } else {
                const int32_t pp = k - lt, right = rt - k + 1;
                if (rep[last - pp] < right) {
                    rep[last - k] = imin(rep[last - pp], rep_limit);
                } else {
                    int32_t i = rt + 1;
                    while (i < L && r[i] == r[i - k]) i++;
                    rep[last - k] = imin(i - k, rep_limit);
                    lt = k;
                    rt = i - 1;
                }
            }
        }
    }

    // 3. the token after each match long enough would extend it: keep each token's longest
    int32_t m = 0;
    for (int32_t i = 0; i < L - 1; i++) {
        const int32_t len = rep[i];
        if (len < allowed) continue;
        const int32_t t = r[L - 2 - i];
        if (t < 0 || t >= d->n_vocab) continue;
        if (d->maxrep[t] < 0) d->tok[m++] = t;
        if (d->maxrep[t] < len) d->maxrep[t] = len;
    }

    // 4. the penalties, but not for a token that restarts on its own; the exponent capped so that base ^ exp stays a
    // float (llama.cpp's float log, its double pow)
    int32_t max_exp = 0;
    if (d->p.base > 1.000001f) max_exp = (int32_t)(88.7228391f / logf(d->p.base));
    int32_t k = 0;
    for (int32_t i = 0; i < m; i++) {
        const int32_t t = d->tok[i];
        int32_t exp = d->maxrep[t] - allowed;
        d->maxrep[t] = -1;
        int32_t first, cnt = find_head(d->b, t, &first);
        bool alone = false;
        for (int32_t e = first; e < first + cnt && !alone; e++) alone = d->b->e[e].len == 0;
        if (alone) continue;
        if (max_exp > 0 && exp > max_exp) exp = max_exp;
        d->tok[k] = t;
        d->pen[k++] = (float)((double)d->p.multiplier * pow((double)d->p.base, (double)exp));
    }
    return k;
}
