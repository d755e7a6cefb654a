// session.c - persistent KV (format in session.h): the cache is read through
// kvt_kv_ops.acquire/release (block views) and written back through append
// (f32 rows; F16 -> f32 -> F16 is exact), so it works with every cache.
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/crc32c.h"
#include "../base/file.h"
#include "../gguf/gguf.h"
#include "../kernels/quant.h"
#include "../sparse/sparse.h"

uint32_t kvt_session_model_fingerprint(const kvt_model *m) {
    // the model is logically const: the cache only memoizes a pure function of its mapped bytes
    _Atomic uint64_t *cache = (_Atomic uint64_t *)&m->identity_cache;
    const uint64_t c = atomic_load_explicit(cache, memory_order_relaxed);
    if (c) return (uint32_t)c;
    uint32_t crc = 0;
    const int64_t nt = kvt_gguf_n_tensors(m->gguf);
    for (int64_t i = 0; i < nt; i++) {
        const kvt_gguf_tensor *t = kvt_gguf_tensor_at(m->gguf, i);
        crc = kvt_crc32c(crc, t->name.ptr, (size_t)t->name.len);
        uint32_t ty = (uint32_t)t->type;
        crc = kvt_crc32c(crc, &ty, sizeof ty);
        crc = kvt_crc32c(crc, t->ne, sizeof t->ne);
        crc = kvt_crc32c(crc, t->data, (size_t)t->size);
    }
    // and the hyperparameters the forward pass reads: the same weights with another rope base or scale, norm
    // epsilon, window, ... (a GGUF whose metadata was edited) give other K/V rows, which a session or prefix-cache
    // entry must not be taken for (each field as 4 little-endian bytes: the value does not depend on the layout)
    const kvt_hparams *hp = &m->hp;
    const float fv[] = {hp->rope_freq_base, hp->rope_freq_scale, hp->rms_eps,      hp->embd_scale,
                        hp->attn_scale,     hp->logit_softcap,   hp->rope_freq_base_swa, hp->rope_freq_scale_swa};
    const int32_t iv[] = {hp->arch, hp->n_embd, hp->n_layer, hp->n_ff, hp->n_head, hp->n_head_kv, hp->head_dim,
                          hp->head_dim_v, hp->n_rot, (int32_t)hp->rope_type, (int32_t)hp->ffn_act, hp->n_swa, hp->swa_period};
    for (size_t i = 0; i < sizeof fv / sizeof fv[0]; i++) {
        uint32_t u;
        memcpy(&u, &fv[i], 4);
        const uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
        crc = kvt_crc32c(crc, b, 4);
    }
    for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++) {
        const uint32_t u = (uint32_t)iv[i];
        const uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
        crc = kvt_crc32c(crc, b, 4);
    }
    atomic_store_explicit(cache, (uint64_t)1 << 32 | crc, memory_order_relaxed);
    return crc;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

// The identity part of the header (offsets 16..63) of a model + cache.
typedef struct {
    char arch[16];
    uint32_t n_layer, n_head_kv, head_dim, head_dim_v, n_vocab, n_embd, kv_type, model_fp;
    char model[KVT_SESSION_MODEL_NAME]; // file name of the model (no directory), NUL padded, for messages
} identity;

static identity identity_of(kvt_context *ctx) {
    const kvt_model *m = kvt_context_model(ctx);
    const kvt_kv *kv = kvt_context_kv(ctx);
    identity id;
    memset(&id, 0, sizeof id);
    snprintf(id.arch, sizeof id.arch, "%s", kvt_arch_name(m->hp.arch));
    id.n_layer = (uint32_t)m->hp.n_layer;
    id.n_head_kv = (uint32_t)m->hp.n_head_kv;
    id.head_dim = (uint32_t)m->hp.head_dim;
    id.head_dim_v = (uint32_t)m->hp.head_dim_v;
    id.n_vocab = (uint32_t)m->hp.n_vocab;
    id.n_embd = (uint32_t)m->hp.n_embd;
    id.kv_type = (uint32_t)kv->type;
    id.model_fp = kvt_session_model_fingerprint(m);
    const char *path = kvt_gguf_path(m->gguf), *slash = strrchr(path, '/');
    snprintf(id.model, sizeof id.model, "%s", slash ? slash + 1 : path);
    return id;
}

static void header_write(uint8_t *h, const identity *id, int64_t n_tokens, uint32_t tok_crc, uint32_t block_tokens) {
    memset(h, 0, KVT_SESSION_HEADER_BYTES);
    memcpy(h, KVT_SESSION_MAGIC, 8); // with its NUL
    put_u32(h + 8, KVT_SESSION_VERSION);
    put_u32(h + 12, KVT_SESSION_HEADER_BYTES);
    memcpy(h + 16, id->arch, 16);
    const uint32_t f[8] = {id->n_layer, id->n_head_kv, id->head_dim, id->head_dim_v,
                           id->n_vocab, id->n_embd,    id->kv_type,  id->model_fp};
    for (int i = 0; i < 8; i++) put_u32(h + 32 + 4 * i, f[i]);
    put_u64(h + 64, (uint64_t)n_tokens);
    put_u32(h + 72, tok_crc);
    memcpy(h + 76, id->model, KVT_SESSION_MODEL_NAME);
    put_u32(h + 124, block_tokens);
}

// First position of layer l's rows that a file of n_tokens positions holds: read_layer wrote the blocks (of the
// saver's block_tokens positions) wholly before n_tokens - window + 1 as zeros. block_tokens 0 (a file written before
// the header recorded it): n_tokens - window + 1, the most the zeros can reach whatever the block size.
static int64_t saved_from(int32_t window, int64_t n_tokens, int64_t block_tokens) {
    const int64_t seen = window > 0 ? n_tokens - window + 1 : 0;
    if (seen <= 0) return 0;
    return block_tokens > 0 ? seen / block_tokens * block_tokens : seen;
}

// Writer that keeps a running CRC32C; the first error sticks.
typedef struct {
    FILE *f;
    const char *path;
    uint32_t crc;
    int64_t off;
    kvt_status st;
    kvt_err *err;
} writer;

static void w_put(writer *w, const void *p, size_t n) {
    if (w->st || n == 0) return;
    w->crc = kvt_crc32c(w->crc, p, n);
    if (fwrite(p, 1, n, w->f) != n) {
        int e = errno;
        w->st = kvt_errorf(w->err, e == ENOSPC || e == EDQUOT ? KVT_ERR_BUDGET : KVT_ERR_IO,
                           "cannot write KV session file %s at offset %lld (%zu bytes): %s", w->path, (long long)w->off,
                           n, strerror(e));
    }
    w->off += (int64_t)n;
}

// Copies positions [0, n) of (seq, layer) into kb [n, n_head_kv*head_dim] and vb [n, n_head_kv*head_dim_v]
// (cache element type), group by group, through block views. A sliding-window layer (window > 0): the blocks wholly
// before n - window + 1, which no query from n on sees (a paged store has freed them), are zeros.
static kvt_status read_layer(kvt_kv *kv, int32_t seq, int32_t layer, int32_t window, int64_t n, uint8_t *kb,
                             uint8_t *vb, kvt_err *err) {
    const int64_t kw = kvt_row_size(kv->type, (int64_t)kv->n_head_kv * kv->head_dim);
    const int64_t vw = kvt_row_size(kv->type, (int64_t)kv->n_head_kv * kv->head_dim_v);
    const int64_t kh = kvt_row_size(kv->type, kv->head_dim), vh = kvt_row_size(kv->type, kv->head_dim_v); // one head
    const int64_t gh = kv->group_heads;
    const int64_t seen = window > 0 ? n - window + 1 : 0, b0 = seen > 0 ? seen / kv->block_tokens : 0; // blocks [0, b0) unseen
    memset(kb, 0, (size_t)(b0 * kv->block_tokens * kw));
    memset(vb, 0, (size_t)(b0 * kv->block_tokens * vw));
    for (int32_t g = 0; g < kv->n_group; g++) {
        for (int64_t b = b0; b < kvt_kv_n_blocks(kv, n); b++) {
            kvt_kv_view w;
            kvt_status st = kv->ops->acquire(kv, seq, layer, g, b, &w, err);
            if (st) return st;
            for (int64_t i = 0; i < w.n && w.pos0 + i < n; i++) {
                const int64_t p = w.pos0 + i;
                for (int64_t h = 0; h < gh; h++) {
                    memcpy(kb + p * kw + (g * gh + h) * kh, (const uint8_t *)w.k + h * w.k_hstride + i * w.k_stride,
                           (size_t)kh);
                    memcpy(vb + p * vw + (g * gh + h) * vh, (const uint8_t *)w.v + h * w.v_hstride + i * w.v_stride,
                           (size_t)vh);
                }
            }
            kv->ops->release(kv, seq, layer, g, b);
        }
    }
    return KVT_OK;
}

kvt_status kvt_context_kv_save(kvt_context *ctx, int32_t seq, const int32_t *tokens, int64_t n_tokens,
                               const char *path, kvt_err *err) {
    kvt_kv *kv = kvt_context_kv(ctx);
    const int64_t n_past = kvt_context_seq_n_past(ctx, seq);
    if (n_past < 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV save to %s: sequence %d does not exist", path, seq);
    if (n_tokens != n_past) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV save to %s: %lld token ids given, sequence %d holds %lld positions",
                          path, (long long)n_tokens, seq, (long long)n_past);
    }
    if (kv->type != KVT_TYPE_F16 && kv->type != KVT_TYPE_F32) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "KV save to %s: KV type %s not supported", path, kvt_type_name(kv->type));
    }
    const identity id = identity_of(ctx);
    const int64_t kw = kvt_row_size(kv->type, (int64_t)kv->n_head_kv * kv->head_dim);
    const int64_t vw = kvt_row_size(kv->type, (int64_t)kv->n_head_kv * kv->head_dim_v);
    const int64_t nr = n_tokens > 0 ? n_tokens : 1;
    uint8_t *kb = malloc((size_t)(nr * kw)); // [n_tokens, n_head_kv*head_dim] KV type, one layer
    uint8_t *vb = malloc((size_t)(nr * vw)); // [n_tokens, n_head_kv*head_dim_v] KV type
    uint8_t *tb = malloc((size_t)nr * 4);    // [n_tokens] i32 little-endian
    size_t tn = strlen(path) + 8;
    char *tmp = malloc(tn);
    if (!kb || !vb || !tb || !tmp) {
        free(kb), free(vb), free(tb), free(tmp);
        return kvt_errorf(err, KVT_ERR_NOMEM, "KV save to %s: out of memory for one layer (%lld bytes)", path,
                          (long long)(nr * (kw + vw)));
    }
    snprintf(tmp, tn, "%s.tmp", path);
    writer w = {fopen(tmp, "wb"), path, 0, 0, KVT_OK, err};
    if (!w.f) w.st = kvt_errorf(err, KVT_ERR_IO, "cannot create KV session file %s: %s", tmp, strerror(errno));
    for (int64_t i = 0; i < n_tokens; i++) put_u32(tb + 4 * i, (uint32_t)tokens[i]);
    uint8_t h[KVT_SESSION_HEADER_BYTES];
    header_write(h, &id, n_tokens, kvt_crc32c(0, tb, (size_t)n_tokens * 4), (uint32_t)kv->block_tokens);
    w_put(&w, h, sizeof h);
    w_put(&w, tb, (size_t)n_tokens * 4);
    for (int32_t l = 0; !w.st && l < kv->n_layer; l++) {
        const int32_t window = kvt_hparams_layer_window(&kvt_context_model(ctx)->hp, l);
        if ((w.st = read_layer(kv, seq, l, window, n_tokens, kb, vb, err))) break;
        w_put(&w, kb, (size_t)(n_tokens * kw));
        w_put(&w, vb, (size_t)(n_tokens * vw));
    }
    uint8_t c[4];
    put_u32(c, w.crc);
    w_put(&w, c, 4);
    if (w.f && fclose(w.f) != 0 && !w.st) {
        w.st = kvt_errorf(err, KVT_ERR_IO, "cannot write KV session file %s: %s", path, strerror(errno));
    }
    if (!w.st && rename(tmp, path) != 0) {
        w.st = kvt_errorf(err, KVT_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    }
    if (w.st && w.f) unlink(tmp);
    free(kb), free(vb), free(tb), free(tmp);
    return w.st;
}

// Compares the file's identity with the context's; names the first field that differs.
static kvt_status check_identity(const uint8_t *h, const identity *id, const char *path, kvt_err *err) {
    char arch[17];
    memcpy(arch, h + 16, 16);
    arch[16] = 0;
    if (strcmp(arch, id->arch) != 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV session file %s is for another model: architecture %s, this model is %s",
                          path, arch, id->arch);
    }
    static const char *names[8] = {"n_layer", "n_head_kv", "head_dim", "head_dim_v",
                                   "n_vocab", "n_embd",    "KV type",  "model fingerprint"};
    const uint32_t want[8] = {id->n_layer, id->n_head_kv, id->head_dim, id->head_dim_v,
                              id->n_vocab, id->n_embd,    id->kv_type,  id->model_fp};
    for (int i = 0; i < 8; i++) {
        const uint32_t got = get_u32(h + 32 + 4 * i);
        if (got == want[i]) continue;
        if (i == 6) {
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV session file %s holds %s KV, this context uses %s (--kv-type)",
                              path, kvt_type_name((kvt_type)got), kvt_type_name((kvt_type)want[i]));
        }
        if (i == 7) {
            char saved[KVT_SESSION_MODEL_NAME + 1];
            memcpy(saved, h + 76, KVT_SESSION_MODEL_NAME);
            saved[KVT_SESSION_MODEL_NAME] = 0;
            return kvt_errorf(err, KVT_ERR_INVALID_ARG,
                              "KV session file %s is for another model: saved from '%s' (fingerprint 0x%08x), this model "
                              "'%s' has 0x%08x (same shape, other weights or hyperparameters)",
                              path, saved, got, id->model, want[i]);
        }
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV session file %s is for another model: %s %u, this model %u", path,
                          names[i], got, want[i]);
    }
    return KVT_OK;
}

kvt_status kvt_context_kv_load(kvt_context *ctx, int32_t seq, const char *path, const int32_t *prompt,
                               int64_t n_prompt, int64_t max_keep, kvt_session_info *info, kvt_err *err) {
    kvt_kv *kv = kvt_context_kv(ctx);
    kvt_session_info inf = {0, 0, 0};
    if (info) *info = inf;
    const int64_t n_past = kvt_context_seq_n_past(ctx, seq);
    if (n_past != 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV load of %s: sequence %d %s", path, seq,
                          n_past < 0 ? "does not exist" : "is not empty");
    }
    int fd;
    int64_t size;
    kvt_status ost = kvt_file_open_regular(path, "KV session file", &fd, &size, err); // never blocks on a FIFO
    if (ost) return ost;
    if (size < KVT_SESSION_HEADER_BYTES + 4) {
        close(fd);
        return kvt_errorf(err, KVT_ERR_FORMAT, "KV session file %s is truncated: %lld bytes, the header alone is %d", path,
                          (long long)size, KVT_SESSION_HEADER_BYTES + 4);
    }
    const uint8_t *f = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f == MAP_FAILED) return kvt_errorf(err, KVT_ERR_IO, "cannot map KV session file %s: %s", path, strerror(errno));
    kvt_status st = KVT_OK;
    float *kf = NULL, *vf = NULL;
    const identity id = identity_of(ctx);
    const uint64_t n_tok = get_u64(f + 64);
    const int64_t kw = kvt_row_size(kv->type, (int64_t)kv->n_head_kv * kv->head_dim);
    const int64_t vw = kvt_row_size(kv->type, (int64_t)kv->n_head_kv * kv->head_dim_v);
    if (memcmp(f, KVT_SESSION_MAGIC, 8) != 0) {
        st = kvt_errorf(err, KVT_ERR_FORMAT, "%s is not a KV session file (bad magic)", path);
    } else if (get_u32(f + 8) != KVT_SESSION_VERSION || get_u32(f + 12) != KVT_SESSION_HEADER_BYTES) {
        st = kvt_errorf(err, KVT_ERR_FORMAT, "KV session file %s has version %u (header %u bytes); this build reads version %u",
                        path, get_u32(f + 8), get_u32(f + 12), KVT_SESSION_VERSION);
    } else if ((st = check_identity(f, &id, path, err))) {
        // message set
    }
    // bytes per saved token: its id and its K and V rows in every layer (no overflow: each row < 2^40)
    const int64_t per_token = 4 + (int64_t)kv->n_layer * (kw + vw);
    if (!st && n_tok > (uint64_t)(INT64_MAX - KVT_SESSION_HEADER_BYTES - 4) / (uint64_t)per_token) {
        st = kvt_errorf(err, KVT_ERR_FORMAT, "KV session file %s: implausible token count %llu", path,
                        (unsigned long long)n_tok);
    }
    const int64_t nt = st ? 0 : (int64_t)n_tok;
    const int64_t want = KVT_SESSION_HEADER_BYTES + nt * per_token + 4;
    if (!st && size != want) {
        st = kvt_errorf(err, KVT_ERR_FORMAT, "KV session file %s is %s: %lld bytes, %lld expected for %lld tokens", path,
                        size < want ? "truncated" : "longer than its header says", (long long)size, (long long)want,
                        (long long)nt);
    }
    if (!st) {
        const uint32_t crc = kvt_crc32c(0, f, (size_t)(size - 4)), stored = get_u32(f + size - 4);
        if (crc != stored) {
            st = kvt_errorf(err, KVT_ERR_CHECKSUM, "KV session file %s is corrupt: CRC32C 0x%08x, stored 0x%08x", path, crc,
                            stored);
        }
    }
    const uint8_t *toks = f + KVT_SESSION_HEADER_BYTES;
    if (!st && kvt_crc32c(0, toks, (size_t)nt * 4) != get_u32(f + 72)) {
        st = kvt_errorf(err, KVT_ERR_CHECKSUM, "KV session file %s: token ids do not match their CRC32C", path);
    }
    int64_t n_use = 0;
    if (!st) {
        n_use = nt;
        if (prompt) {
            int64_t c = 0;
            while (c < nt && c < n_prompt && (int32_t)get_u32(toks + 4 * c) == prompt[c]) c++;
            n_use = c;
        }
        inf.n_saved = nt;
        inf.n_common = n_use;
        if (max_keep >= 0 && n_use > max_keep) n_use = max_keep;
        // A sliding-window layer's file rows start at saved_from (zeros before it). The next query, at n_use, sees
        // positions from n_use - window + 1 on: a prefix that ends earlier than the saved tokens would attend to the
        // zeros, and any shorter prefix too, so then nothing is restored and the prompt is recomputed.
        const int64_t bt = (int64_t)get_u32(f + 124);
        for (int32_t l = 0; n_use > 0 && l < kv->n_layer; l++) {
            const int32_t w = kvt_hparams_layer_window(&kvt_context_model(ctx)->hp, l);
            const int64_t from = saved_from(w, nt, bt);
            if (from > 0 && n_use - w + 1 < from) n_use = 0;
        }
        if (n_use > kvt_context_n_ctx(ctx)) {
            st = kvt_errorf(err, KVT_ERR_BUDGET, "KV session file %s holds %lld positions, the context holds %lld (-c)",
                            path, (long long)n_use, (long long)kvt_context_n_ctx(ctx));
        }
    }
    // restore layer by layer in chunks of CH positions through f32 rows
    enum { CH = 64 };
    const int64_t kn = (int64_t)kv->n_head_kv * kv->head_dim, vn = (int64_t)kv->n_head_kv * kv->head_dim_v;
    if (!st && n_use > 0) {
        kf = malloc((size_t)(CH * kn) * sizeof *kf); // [CH, n_head_kv*head_dim] f32
        vf = malloc((size_t)(CH * vn) * sizeof *vf); // [CH, n_head_kv*head_dim_v] f32
        if (!kf || !vf) st = kvt_errorf(err, KVT_ERR_NOMEM, "KV load of %s: out of memory", path);
    }
    const kvt_type_ops *ops = kvt_type_ops_get(kv->type);
    for (int32_t l = 0; !st && n_use > 0 && l < kv->n_layer; l++) {
        const uint8_t *kl = toks + nt * 4 + (int64_t)l * nt * (kw + vw); // [nt, kw bytes] K rows of layer l
        const uint8_t *vl = kl + nt * kw;                                // [nt, vw bytes] V rows
        for (int64_t p = 0; !st && p < n_use; p += CH) {
            const int64_t c = n_use - p < CH ? n_use - p : CH;
            for (int64_t i = 0; i < c; i++) {
                ops->to_float(kl + (p + i) * kw, kf + i * kn, kn);
                ops->to_float(vl + (p + i) * vw, vf + i * vn, vn);
            }
            st = kv->ops->append(kv, seq, l, p, c, kf, vf, err);
            // sparse decode attention keeps key summaries per sequence: restored keys enter them as
            // appended ones do (no-op for modes without summaries)
            if (!st && kvt_context_sparse(ctx)) kvt_sparse_observe_loaded(kvt_context_sparse(ctx), seq, l, p, c, kf);
        }
    }
    if (!st && n_use > 0) st = kvt_context_seq_set_n_past(ctx, seq, n_use, err);
    if (st) kv->ops->truncate(kv, seq, 0);
    else inf.n_loaded = n_use;
    if (info) *info = inf;
    free(kf);
    free(vf);
    munmap((void *)f, (size_t)size);
    return st;
}
