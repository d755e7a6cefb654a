// forward.c - the inference context: its KV store, the split of a micro-batch's layers over backends (backend.h: the
// CPU pass of llama / qwen2 / qwen3 / gemma3 in backend_cpu.c, the CUDA device layers in backend_gpu.c), the decode
// calls, sequences and logits.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../attn/attention.h"
#include "../kernels/quant.h"
#include "../kernels/vec.h"
#include "../kv/kv_paged.h"
#include "../sparse/sparse.h"
#include "../sched/sampler.h"
#include "backend_cuda.h"
#include "context_impl.h"
#include "gpu_layers.h"
#include "matmul_par.h"
#include "numerics.h"


kvt_context_params kvt_context_params_default(void) {
    kvt_context_params p = {0};
    p.n_ctx = 0;
    p.n_threads = 0;
    p.n_ubatch = 512;
    p.kv_type = KVT_TYPE_F16;
    p.kv_block = 512; // measured: docs/log/BENCHMARKS-log.md, "Block size"
    p.kv_prefetch = -1;
    p.sparse.sink = p.sparse.recent = -1; // the defaults of kvt_sparse_params_resolve
    return p;
}

bool kvt_context_params_paged(const kvt_context_params *p) {
    return p->kv_paged || p->kv_group > 0 || p->kv_fast_bytes > 0 || p->kv_host_bytes > 0 || p->kv_disk_dir;
}

static kvt_sparse_dims sparse_dims(const kvt_context *c) {
    const kvt_hparams *hp = &c->m->hp;
    const kvt_rope_params rp = {hp->n_rot, hp->rope_type == KVT_ROPE_NEOX, hp->rope_freq_base, hp->rope_freq_scale,
                                c->m->rope_freqs};
    return (kvt_sparse_dims){hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim, hp->head_dim_v, c->p.n_ctx,
                             c->p.n_threads, c->p.kv_type, rp, kvt_context_params_paged(&c->p) && c->p.kv_fast_bytes > 0,
                             hp->n_swa > 0 ? hp->swa_period : 0};
}

static int64_t sparse_summary_bytes(const kvt_context *c) {
    const kvt_sparse_dims d = sparse_dims(c);
    return kvt_sparse_summary_bytes(&c->p.sparse, &d);
}

static kvt_status kv_init(kvt_context *c, kvt_err *err) {
    const kvt_hparams *hp = &c->m->hp;
    if (!kvt_context_params_paged(&c->p)) {
        kvt_kv_params kp = {c->p.kv_type, hp->n_layer, hp->n_head_kv, hp->head_dim, hp->head_dim_v, c->p.n_ctx, c->p.kv_block, 0};
        return kvt_kv_contig_init(&kp, &c->kv, err);
    }
    kvt_kv_paged_params pp = kvt_kv_paged_params_default();
    pp.type = c->p.kv_type;
    pp.n_layer = hp->n_layer;
    pp.n_head_kv = hp->n_head_kv;
    pp.head_dim = hp->head_dim;
    pp.head_dim_v = hp->head_dim_v;
    pp.n_ctx = c->p.n_ctx;
    pp.block_tokens = c->p.kv_block;
    pp.group_heads = c->p.kv_group;
    pp.fast_bytes = c->p.kv_fast_bytes > 0 ? c->p.kv_fast_bytes - sparse_summary_bytes(c) : -1;
    if (c->p.kv_fast_bytes > 0 && pp.fast_bytes <= 0) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "--kv-fast %lld bytes cannot hold the sparse key summaries (%lld bytes)",
                          (long long)c->p.kv_fast_bytes, (long long)sparse_summary_bytes(c));
    }
    pp.host_bytes = c->p.kv_host_bytes;
    pp.disk_dir = c->p.kv_disk_dir;
    pp.disk_max = c->p.kv_disk_max > 0 ? c->p.kv_disk_max : -1;
    if (c->p.kv_evict) pp.evict = c->p.kv_evict;
    if (c->p.kv_prefetch >= 0) pp.prefetch = c->p.kv_prefetch;
    pp.io_mem_threads = c->p.kv_copy_threads;
    pp.n_readers = c->p.n_threads;
    pp.keep_files = c->p.kv_keep;
    pp.timing = c->p.kv_timing;
    pp.fault_read_at = c->p.kv_fault_read_at;
    int32_t *win = malloc((size_t)hp->n_layer * sizeof *win); // sliding windows: the store frees what they no longer see
    if (!win) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    for (int32_t l = 0; l < hp->n_layer; l++) win[l] = c->m->layers ? c->m->layers[l].window : 0;
    pp.layer_window = win;
    kvt_status st = kvt_kv_paged_init(&pp, &c->kv, err);
    free(win);
    return st;
}

// The split (backend.h): the CPU backend, and with p.n_gpu_layers > 0 (llama.cpp's -ngl: the last n_gpu_layers
// layers; past n_layer, the output norm and the logits too) or p.gpu_output the CUDA backend. Their KV lives on the
// device; the CPU's store holds the other layers'.
static kvt_status stages_init(kvt_context *c, kvt_err *err) {
    const int32_t nl = c->m->hp.n_layer;
    c->cpu_be.ops = &kvt_backend_cpu_ops;
    c->ub_seq = malloc((size_t)c->p.n_ubatch * sizeof *c->ub_seq);
    c->ub_pos = malloc((size_t)c->p.n_ubatch * sizeof *c->ub_pos);
    if (!c->ub_seq || !c->ub_pos) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    const bool gpu_output = c->p.gpu_output || c->p.n_gpu_layers > nl;
    if (c->p.n_gpu_layers <= 0 && !gpu_output) {
        c->stages[c->n_stages++] = (kvt_stage){&c->cpu_be, 0, nl, true};
        return KVT_OK;
    }
    if (c->p.sparse.mode != KVT_SPARSE_OFF) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "--gpu-layers with sparse decoding is not implemented yet");
    }
    const int32_t il0 = c->p.n_gpu_layers >= nl ? 0 : nl - (c->p.n_gpu_layers > 0 ? c->p.n_gpu_layers : 0);
    const kvt_gpu_layers_params gp = {il0,           c->p.n_ubatch, c->p.n_ctx,  c->p.kv_block, c->p.kv_vram_bytes,
                                      c->p.kv_evict, 0,             gpu_output,  c->p.kv_group, c->p.kv_pinned_bytes,
                                      c->p.kv_disk_dir, c->p.kv_disk_max, c->p.kv_copy_min, c->p.gpu_graphs,
                                      c->p.kv_disk_sync};
    kvt_err e = {0};
    kvt_cuda_backend lib;
    kvt_status st = kvt_cuda_backend_open(&lib, &e);
    if (st) {
        return kvt_errorf(err, st, "%d layers%s on the GPU (--gpu-layers or a plan's split): %s", c->p.n_gpu_layers,
                          gpu_output ? " and the output" : "", e.msg);
    }
    if ((st = kvt_backend_cuda_init(&lib, c->m, &gp, &c->gpu_be, err))) return st;
    if (il0 > 0) c->stages[c->n_stages++] = (kvt_stage){&c->cpu_be, 0, il0, false};
    c->stages[c->n_stages++] = (kvt_stage){c->gpu_be, il0, nl, gpu_output};
    if (!gpu_output) c->stages[c->n_stages++] = (kvt_stage){&c->cpu_be, nl, nl, true};
    return KVT_OK;
}

// Positions [n_keep, ...) of seq leave the KV caches (the CPU store's and a device backend's).
static void kv_truncate(kvt_context *c, int32_t seq, int64_t n_keep) {
    c->kv->ops->truncate(c->kv, seq, n_keep);
    if (c->gpu_be) c->gpu_be->ops->seq_truncate(c->gpu_be, seq, n_keep);
}

// A pass failed: seq's positions [n_keep, ...) leave the KV caches, and its sparse state goes back to what it was
// before the pass (kvt_sparse_seq_undo; see kvt_context_pass_repeatable).
static void pass_undo(kvt_context *c, int32_t seq, int64_t n_keep) {
    kvt_sparse_seq_undo(c->sp, seq, n_keep);
    kv_truncate(c, seq, n_keep);
}

static void *xalloc(kvt_context *c, size_t bytes, bool *ok) {
    void *p = NULL;
    bytes = (bytes + 63) / 64 * 64;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        *ok = false;
        return NULL;
    }
    c->scratch_bytes += (int64_t)bytes;
    return p;
}

// Flags that contradict each other or the model, before anything is allocated.
static kvt_status check_params(const kvt_model *m, const kvt_context_params *p, kvt_err *err) {
    if (p->kv_disk_dir && !p->kv_disk_dir[0]) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--kv-disk: the KV disk directory is an empty path");
    }
    if (p->kv_disk_max > 0 && !p->kv_disk_dir) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--kv-disk-max %lld bytes without --kv-disk DIR: there is no disk tier to budget",
                          (long long)p->kv_disk_max);
    }
    if (p->kv_pinned_bytes > 0 && ((p->n_gpu_layers <= 0 && !p->gpu_output) || !p->kv_disk_dir)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "--kv-pinned %lld bytes needs -ngl (the device layers' KV) and --kv-disk DIR "
                          "(the disk tier below pinned host memory)", (long long)p->kv_pinned_bytes);
    }
    if (p->plan_shape[0]) {
        char shape[192];
        kvt_hparams_shape_str(&m->hp, shape, sizeof shape);
        if (strcmp(shape, p->plan_shape) != 0) {
            return kvt_errorf(err, KVT_ERR_INVALID_ARG,
                              "--plan %s was made for %s (%s), not for this model %s (%s): make a plan for it with "
                              "`kvtier plan -m MODEL -o FILE`",
                              p->plan_file ? p->plan_file : "", p->plan_model[0] ? p->plan_model : "another model", p->plan_shape,
                              m->gguf ? kvt_gguf_path(m->gguf) : "(in memory)", shape);
        }
    }
    return KVT_OK;
}

#define KVT_SPARSE_POOL_SPIN 200 // the pool's spin budget while an asyncspade worker runs (KVT_THREADPOOL_SPIN_DEFAULT otherwise)

// The pool's idle work (kvt_threadpool_set_idle): a queued KV copy of the tiered store, else a chunk of decode's
// weight prefetch window (weight_pf.h).
static bool ctx_idle(void *arg) {
    kvt_context *c = arg;
    return c && (kvt_kv_paged_help(c->kv) || kvt_wpf_step(&c->wpf));
}

kvt_status kvt_context_init(const kvt_model *m, const kvt_context_params *pp, kvt_context **out, kvt_err *err) {
    *out = NULL;
    const kvt_hparams *hp = &m->hp;
    kvt_status cst = check_params(m, pp, err);
    if (cst) return cst;
    kvt_model_repack(m); // the CPU kernels' layouts, made on the first context (a no-op after it)
    kvt_context *c = calloc(1, sizeof *c);
    if (!c) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    c->m = m;
    c->cap_seq = 4;
    c->n_past = malloc((size_t)c->cap_seq * sizeof *c->n_past);
    if (!c->n_past) {
        free(c);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    }
    c->n_past[0] = 0;
    for (int32_t i = 1; i < c->cap_seq; i++) c->n_past[i] = -1;
    c->p = *pp;
    if (c->p.n_ctx <= 0) c->p.n_ctx = hp->n_ctx_train;
    if (c->p.n_threads <= 0) c->p.n_threads = kvt_physical_cores();
    if (c->p.n_ubatch <= 0) c->p.n_ubatch = 512;
    if (c->p.n_ubatch > c->p.n_ctx) c->p.n_ubatch = c->p.n_ctx;
    if (c->p.kv_block <= 0) c->p.kv_block = 512;
    kvt_status st = kvt_threadpool_init(c->p.n_threads, &c->pool, err);
    if (st) {
        free(c->n_past);
        free(c);
        return st;
    }
    const kvt_sparse_dims sd = sparse_dims(c);
    if ((st = kv_init(c, err)) || (st = kvt_sparse_init(&c->p.sparse, &sd, &c->sp, err)) || (st = stages_init(c, err))) {
        kvt_context_free(c);
        return st;
    }
    kvt_wpf_init(&c->wpf);
    c->wpf_budget = KVT_WPF_BUDGET; // KVT_WEIGHT_PF=BYTES sets the window (0: off), for measurements on other CPUs
    const char *wpf = getenv("KVT_WEIGHT_PF");
    if (wpf && *wpf) {
        char *end = NULL;
        const long long b = strtoll(wpf, &end, 10);
        if (end && !*end && b >= 0) c->wpf_budget = b;
    }
    kvt_threadpool_set_idle(c->pool, ctx_idle, c); // threads waiting in the pool take queued KV copies, then prefetch
    // The asyncspade selection worker shares the cores with the pool: the pool's workers give theirs up after a short
    // spin between jobs instead of ~0.7 ms (docs/log/SPARSE-log-2.md, "The pool's spin while the asyncspade worker runs").
    if (c->p.sparse.mode == KVT_SPARSE_ASYNCSPADE && !c->p.sparse.sync) kvt_threadpool_set_spin(c->pool, KVT_SPARSE_POOL_SPIN);
    const int64_t ub = c->p.n_ubatch, E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim,
                  K = (int64_t)hp->n_head_kv * hp->head_dim, V = (int64_t)hp->n_head_kv * hp->head_dim_v,
                  A = (int64_t)hp->n_head * hp->head_dim_v, F = hp->n_ff;
    int64_t wmax = E;
    if (F > wmax) wmax = F;
    if (A > wmax) wmax = A;
    bool ok = true;
    c->x = xalloc(c, (size_t)(ub * E) * 4, &ok);
    c->xn = xalloc(c, (size_t)(ub * E) * 4, &ok);
    c->q = xalloc(c, (size_t)(ub * Q) * 4, &ok);
    c->k = xalloc(c, (size_t)(ub * K) * 4, &ok);
    c->v = xalloc(c, (size_t)(ub * V) * 4, &ok);
    c->att = xalloc(c, (size_t)(ub * A) * 4, &ok);
    c->gate = xalloc(c, (size_t)(ub * F) * 4, &ok);
    c->up = xalloc(c, (size_t)(ub * F) * 4, &ok);
    c->tmp = xalloc(c, (size_t)(ub * E) * 4, &ok);
    c->qact = xalloc(c, (size_t)kvt_matmul_scratch_bytes(wmax, ub), &ok);
    c->qffn = xalloc(c, (size_t)kvt_matmul_scratch_bytes(F, KVT_FFN_FUSE_TOKENS), &ok);
    c->ffn_pair = xalloc(c, (size_t)(F / KVT_MATMUL_MIN_CHUNK_ROWS + 1) * sizeof *c->ffn_pair, &ok);
    c->qkv_y = xalloc(c, (size_t)(KVT_FFN_FUSE_TOKENS * (Q + K + V)) * 4, &ok);
    c->head_rows = xalloc(c, (size_t)(hp->n_head + hp->n_head_kv) * sizeof *c->head_rows, &ok);
    c->rope_cs = xalloc(c, (size_t)(2 * ub * hp->n_rot) * 4, &ok);
    c->attn_scratch = calloc((size_t)c->p.n_threads, sizeof(void *));
    if (!c->attn_scratch) ok = false;
    for (int i = 0; ok && i < c->p.n_threads; i++) {
        c->attn_scratch[i] = xalloc(c, (size_t)kvt_attn_scratch_bytes(c->kv, hp->n_head, KVT_ATTN_TILE), &ok);
    }
    c->attn_ws = xalloc(c, (size_t)kvt_attn_workspace_bytes(c->kv, hp->n_head, c->p.n_threads), &ok);
    c->logits_rows = 1;
    c->logits = xalloc(c, (size_t)hp->n_vocab * 4, &ok);
    if (!ok) {
        kvt_context_free(c);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for activations (n_ubatch %lld)", (long long)ub);
    }
    *out = c;
    return KVT_OK;
}

void kvt_context_free(kvt_context *c) {
    if (!c) return;
    if (c->gpu_be) c->gpu_be->ops->free(c->gpu_be);
    free(c->ub_seq);
    free(c->ub_pos);
    kvt_sparse_free(c->sp);
    kvt_threadpool_free(c->pool);
    kvt_kv_free(c->kv);
    free(c->x);
    free(c->xn);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->gate);
    free(c->up);
    free(c->tmp);
    free(c->qact);
    free(c->qffn);
    free((void *)c->ffn_pair);
    free((void *)c->head_rows);
    free(c->qkv_y);
    free(c->rope_cs);
    if (c->attn_scratch) {
        for (int i = 0; i < c->p.n_threads; i++) free(c->attn_scratch[i]);
    }
    free(c->attn_scratch);
    free(c->attn_ws);
    free(c->logits);
    free(c->n_past);
    free(c);
}

static int64_t ub_pos(const kvt_ubatch *u, int64_t t) { return u->seqs ? u->pos[t] : u->pos0 + t; }

// One micro-batch: the embedding rows into the residual stream, then each stage of the split in layer order
// (backend.h); logits ([n_out, n_vocab]) of rows out[0..n_out) (increasing), or, out NULL, of the last n_out rows.
// lazy_row0 >= 0: the stage with the output may keep them in its backend (kvt_head.logits NULL; c->lazy_be), to be
// fetched into c->logits from row lazy_row0 by kvt_context_logits, or only their greedy ids by kvt_context_argmax;
// < 0: written to logits now.
static kvt_status forward_ubatch(kvt_context *c, kvt_ubatch *u, const int64_t *out, int64_t n_out, float *logits,
                                 int64_t lazy_row0, kvt_err *err) {
    const int32_t *tokens = u->tokens;
    const int64_t n = u->n;
    const kvt_model *m = c->m;
    const kvt_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    c->lazy_be = NULL;
    c->lazy_failed = false;
    for (int64_t t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= hp->n_vocab) {
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "token id %d out of range (vocabulary %d)", tokens[t], hp->n_vocab);
        }
        if (!kvt_matrix_row_to_float(m->tok_embd.type, m->tok_embd.data, tokens[t], E, c->x + t * E)) // (repacked too)
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "token_embd of type %s cannot be read", kvt_type_name(m->tok_embd.type));
        if (hp->embd_scale != 1.0f) kvt_vec_scale_f32(c->x + t * E, hp->embd_scale, E);
        c->ub_seq[t] = u->seqs ? u->seqs[t] : u->seq;
        c->ub_pos[t] = ub_pos(u, t);
    }
    u->row_seq = c->ub_seq;
    u->row_pos = c->ub_pos;
    for (int32_t i = 0; i < c->n_stages; i++) {
        const kvt_stage *s = &c->stages[i];
        const bool keep = s->head && lazy_row0 >= 0 && s->b->ops->logits && n_out > 0; // the logits stay there
        const kvt_head head = {out, n_out, keep ? NULL : logits, c->embd};
        kvt_status st = s->b->ops->eval(s->b, u, s->il0, s->il1, c->x, s->head ? &head : NULL, err);
        if (st) return st;
        if (keep) c->lazy_be = s->b, c->lazy_row0 = lazy_row0, c->lazy_rows = n_out;
    }
    return KVT_OK;
}

static bool seq_valid(const kvt_context *c, int32_t seq) { return seq >= 0 && seq < c->cap_seq && c->n_past[seq] >= 0; }

static kvt_status logits_reserve(kvt_context *c, int64_t rows, kvt_err *err) {
    const int32_t n_vocab = c->m->hp.n_vocab;
    if (rows <= c->logits_rows) return KVT_OK;
    float *l = realloc(c->logits, (size_t)(rows * n_vocab) * sizeof(float));
    if (!l) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for %lld x %d logits", (long long)rows, n_vocab);
    c->logits = l;
    c->logits_rows = rows;
    return KVT_OK;
}

// kvt_decode_seq (prompt: n > 1) and kvt_decode_prompt (prompt: true).
static kvt_status decode_seq(kvt_context *c, int32_t seq, const int32_t *tokens, int64_t n, bool all_logits, bool prompt,
                             kvt_err *err) {
    const kvt_hparams *hp = &c->m->hp;
    if (n <= 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "decode needs at least one token");
    if (!seq_valid(c, seq)) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sequence %d does not exist", seq);
    const int64_t past = c->n_past[seq];
    if (past + n > c->p.n_ctx) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "context full: %lld + %lld tokens exceed n_ctx %lld", (long long)past,
                          (long long)n, (long long)c->p.n_ctx);
    }
    int64_t rows = all_logits ? n : 1;
    kvt_status st0 = logits_reserve(c, rows, err);
    if (st0) return st0;
    kvt_sparse_pass_begin(c->sp);
    for (int64_t i = 0; i < n; i += c->p.n_ubatch) {
        int64_t nb = n - i < c->p.n_ubatch ? n - i : c->p.n_ubatch;
        float *dst = all_logits ? c->logits + i * hp->n_vocab : c->logits;
        const bool last = i + nb == n; // without all_logits only the last micro-batch's last row is kept
        kvt_ubatch u = {tokens + i, nb, seq, past + i, NULL, NULL, prompt, NULL, NULL, NULL};
        kvt_status st = forward_ubatch(c, &u, NULL, all_logits ? nb : last, dst, last ? (all_logits ? i : 0) : -1, err);
        if (st) {
            pass_undo(c, seq, past);
            return st;
        }
        if (c->p.progress && n > c->p.n_ubatch) c->p.progress(c->p.progress_user, i + nb, n);
    }
    c->n_past[seq] = past + n;
    c->n_out = rows;
    return KVT_OK;
}

kvt_status kvt_decode_seq(kvt_context *c, int32_t seq, const int32_t *tokens, int64_t n, bool all_logits, kvt_err *err) {
    return decode_seq(c, seq, tokens, n, all_logits, n > 1, err);
}

kvt_status kvt_decode_prompt(kvt_context *c, int32_t seq, const int32_t *tokens, int64_t n, bool all_logits, kvt_err *err) {
    return decode_seq(c, seq, tokens, n, all_logits, true, err);
}

kvt_status kvt_decode_embd(kvt_context *c, int32_t seq, const int32_t *tokens, int64_t n, float *embd,
                           kvt_cancel_fn cancel, void *cancel_user, kvt_err *err) {
    const int64_t E = c->m->hp.n_embd;
    if (n <= 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "embeddings need at least one token");
    if (!seq_valid(c, seq)) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sequence %d does not exist", seq);
    for (int32_t i = 0; i < c->n_stages; i++) {
        if (c->stages[i].head && c->stages[i].b != &c->cpu_be) {
            return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "embeddings with the output norm on the GPU (-ngl past the "
                              "layers, or a plan's split) are not implemented yet");
        }
    }
    const int64_t past = c->n_past[seq];
    if (past + n > c->p.n_ctx) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "context full: %lld + %lld tokens exceed n_ctx %lld", (long long)past,
                          (long long)n, (long long)c->p.n_ctx);
    }
    kvt_status st = KVT_OK;
    kvt_sparse_pass_begin(c->sp);
    for (int64_t i = 0; !st && i < n; i += c->p.n_ubatch) {
        const int64_t nb = n - i < c->p.n_ubatch ? n - i : c->p.n_ubatch;
        if (cancel && cancel(cancel_user)) {
            st = kvt_errorf(err, KVT_ERR_CANCELLED, "embeddings cancelled after %lld of %lld tokens", (long long)i,
                            (long long)n);
            break;
        }
        kvt_ubatch u = {tokens + i, nb, seq, past + i, NULL, NULL, true, NULL, NULL, NULL};
        c->embd = embd + i * E;
        st = forward_ubatch(c, &u, NULL, nb, NULL, -1, err);
        c->embd = NULL;
    }
    pass_undo(c, seq, past); // the sequence's KV (and sparse state) as before the call
    return st;
}

kvt_status kvt_decode_batch(kvt_context *c, const int32_t *seqs, const int32_t *tokens, int64_t n, kvt_err *err) {
    const int32_t n_vocab = c->m->hp.n_vocab;
    if (n <= 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "decode needs at least one token");
    for (int64_t i = 0; i < n; i++) {
        if (!seq_valid(c, seqs[i])) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sequence %d does not exist", seqs[i]);
        if (c->n_past[seqs[i]] + 1 > c->p.n_ctx) {
            return kvt_errorf(err, KVT_ERR_BUDGET, "context full: sequence %d holds %lld tokens, n_ctx %lld", seqs[i],
                              (long long)c->n_past[seqs[i]], (long long)c->p.n_ctx);
        }
        for (int64_t j = 0; j < i; j++) {
            if (seqs[j] == seqs[i]) {
                return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sequence %d appears twice in a batch", seqs[i]);
            }
        }
    }
    kvt_status st = logits_reserve(c, n, err);
    if (st) return st;
    int64_t *pos = malloc((size_t)n * sizeof *pos); // [n] position of each token
    if (!pos) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a batch of %lld tokens", (long long)n);
    for (int64_t i = 0; i < n; i++) pos[i] = c->n_past[seqs[i]];
    kvt_sparse_pass_begin(c->sp);
    for (int64_t i = 0; !st && i < n; i += c->p.n_ubatch) {
        const int64_t nb = n - i < c->p.n_ubatch ? n - i : c->p.n_ubatch;
        kvt_ubatch u = {tokens + i, nb, -1, 0, seqs + i, pos + i, false, NULL, NULL, NULL};
        st = forward_ubatch(c, &u, NULL, nb, c->logits + i * n_vocab, i + nb == n ? i : -1, err);
    }
    for (int64_t i = 0; i < n; i++) {
        if (st) pass_undo(c, seqs[i], pos[i]);
        else c->n_past[seqs[i]] = pos[i] + 1;
    }
    free(pos);
    if (!st) c->n_out = n;
    return st;
}

kvt_status kvt_decode_runs(kvt_context *c, const kvt_batch_run *runs, int64_t n_runs, kvt_err *err) {
    const int32_t n_vocab = c->m->hp.n_vocab;
    if (n_runs <= 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "decode needs at least one run");
    int64_t n = 0, n_out = 0;
    for (int64_t i = 0; i < n_runs; i++) {
        const int32_t s = runs[i].seq;
        if (runs[i].n <= 0 || !runs[i].tokens) {
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "run %lld (sequence %d) has no tokens", (long long)i, s);
        }
        if (!seq_valid(c, s)) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sequence %d does not exist", s);
        if (c->n_past[s] + runs[i].n > c->p.n_ctx) {
            return kvt_errorf(err, KVT_ERR_BUDGET, "context full: sequence %d holds %lld tokens, + %lld exceed n_ctx %lld", s,
                              (long long)c->n_past[s], (long long)runs[i].n, (long long)c->p.n_ctx);
        }
        for (int64_t j = 0; j < i; j++) {
            if (runs[j].seq == s) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sequence %d appears twice in a batch", s);
        }
        n += runs[i].n;
        n_out += runs[i].logits ? 1 : 0;
    }
    kvt_status st = logits_reserve(c, n_out > 0 ? n_out : 1, err);
    if (st) return st;
    int32_t *tok = malloc((size_t)n * sizeof *tok), *seqs = malloc((size_t)n * sizeof *seqs);
    int64_t *pos = malloc((size_t)n * sizeof *pos), *out = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof *out);
    uint8_t *prompt = malloc((size_t)n);
    if (!tok || !seqs || !pos || !out || !prompt) {
        free(tok), free(seqs), free(pos), free(out), free(prompt);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a batch of %lld tokens", (long long)n);
    }
    for (int64_t i = 0, r = 0, k = 0; i < n_runs; i++) { // rows; out: the rows whose logits are kept
        for (int64_t t = 0; t < runs[i].n; t++, r++) {
            tok[r] = runs[i].tokens[t];
            seqs[r] = runs[i].seq;
            pos[r] = c->n_past[runs[i].seq] + t;
            prompt[r] = runs[i].prompt || runs[i].n > 1;
        }
        if (runs[i].logits) out[k++] = r - 1;
    }
    kvt_sparse_pass_begin(c->sp);
    for (int64_t i = 0, k = 0; !st && i < n; i += c->p.n_ubatch) {
        const int64_t nb = n - i < c->p.n_ubatch ? n - i : c->p.n_ubatch;
        int64_t k1 = k;
        while (k1 < n_out && out[k1] < i + nb) out[k1++] -= i; // rows of this micro-batch, relative to it
        kvt_ubatch u = {tok + i, nb, -1, 0, seqs + i, pos + i, false, prompt + i, NULL, NULL};
        st = forward_ubatch(c, &u, out + k, k1 - k, c->logits + k * n_vocab, i + nb == n ? k : -1, err);
        k = k1;
    }
    for (int64_t i = 0; i < n_runs; i++) {
        if (st) pass_undo(c, runs[i].seq, c->n_past[runs[i].seq]);
        else c->n_past[runs[i].seq] += runs[i].n;
    }
    free(tok), free(seqs), free(pos), free(out), free(prompt);
    if (!st) c->n_out = n_out;
    return st;
}

kvt_status kvt_decode(kvt_context *c, const int32_t *tokens, int64_t n, bool all_logits, kvt_err *err) {
    return kvt_decode_seq(c, 0, tokens, n, all_logits, err);
}

kvt_status kvt_context_seq_fork(kvt_context *c, int32_t src, int32_t *dst, kvt_err *err) {
    if (!seq_valid(c, src)) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sequence %d does not exist", src);
    if (!c->kv->ops->seq_fork) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "the %s KV cache holds one sequence; forking needs the paged store",
                          c->kv->ops->name);
    }
    kvt_status st = c->kv->ops->seq_fork(c->kv, src, dst, err);
    if (st) return st;
    if (*dst >= c->cap_seq) {
        int32_t cap = c->cap_seq * 2 > *dst + 1 ? c->cap_seq * 2 : *dst + 1;
        int64_t *np = realloc(c->n_past, (size_t)cap * sizeof *np);
        if (!np) {
            c->kv->ops->seq_free(c->kv, *dst);
            return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for sequence table");
        }
        for (int32_t i = c->cap_seq; i < cap; i++) np[i] = -1;
        c->n_past = np;
        c->cap_seq = cap;
    }
    // the fork's sparse state: a copy of src's, so that it selects as src would with the same tokens; its device KV
    if ((st = kvt_sparse_seq_fork(c->sp, src, *dst, c->n_past[src], err)) ||
        (c->gpu_be && (st = c->gpu_be->ops->seq_fork(c->gpu_be, src, *dst, err)))) {
        c->kv->ops->seq_free(c->kv, *dst);
        return st;
    }
    c->n_past[*dst] = c->n_past[src];
    return KVT_OK;
}

void kvt_context_seq_free(kvt_context *c, int32_t seq) {
    if (seq <= 0 || !seq_valid(c, seq)) return; // sequence 0 lives as long as the context
    kvt_sparse_seq_free(c->sp, seq); // first: it waits for the worker's jobs of seq (which prefetch its blocks)
    c->kv->ops->seq_free(c->kv, seq);
    if (c->gpu_be) c->gpu_be->ops->seq_truncate(c->gpu_be, seq, 0);
    c->n_past[seq] = -1;
}

kvt_status kvt_context_seq_set_n_past(kvt_context *c, int32_t seq, int64_t n, kvt_err *err) {
    if (!seq_valid(c, seq)) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sequence %d does not exist", seq);
    if (c->gpu_be && n > 0) { // the KV written through kvt_context_kv is the CPU store's: the device layers would have none
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "restoring a KV cache with --gpu-layers is not implemented yet");
    }
    if (n < 0 || n > c->p.n_ctx) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "%lld positions exceed n_ctx %lld", (long long)n, (long long)c->p.n_ctx);
    }
    kvt_sparse_seq_truncate(c->sp, seq, n); // its key summaries catch up from the store (or were loaded)
    c->n_past[seq] = n;
    return KVT_OK;
}

int64_t kvt_context_seq_n_past(const kvt_context *c, int32_t seq) { return seq_valid(c, seq) ? c->n_past[seq] : -1; }

void kvt_context_seq_truncate(kvt_context *c, int32_t seq, int64_t n_keep) {
    if (seq_valid(c, seq) && n_keep < c->n_past[seq]) {
        c->n_past[seq] = n_keep < 0 ? 0 : n_keep;
        kvt_sparse_seq_truncate(c->sp, seq, c->n_past[seq]);
        kv_truncate(c, seq, c->n_past[seq]);
    }
}

const float *kvt_context_logits(kvt_context *c) {
    if (c->lazy_be) { // the device kept them: fetch them now (once)
        kvt_backend *b = c->lazy_be;
        c->lazy_be = NULL;
        float *dst = c->logits + c->lazy_row0 * c->m->hp.n_vocab;
        if (b->ops->logits(b, c->lazy_rows, dst, &c->lazy_err)) {
            for (int64_t i = 0; i < c->lazy_rows * c->m->hp.n_vocab; i++) dst[i] = NAN;
            c->lazy_failed = true;
        }
    }
    return c->logits;
}

kvt_status kvt_context_argmax(kvt_context *c, int32_t *ids, bool *finite, kvt_err *err) {
    const int64_t V = c->m->hp.n_vocab;
    *finite = true;
    if (c->lazy_failed) return kvt_errorf(err, KVT_ERR_IO, "%s", c->lazy_err.msg);
    const int64_t host_rows = c->lazy_be ? c->lazy_row0 : c->n_out; // rows already on the host
    for (int64_t r = 0; r < host_rows; r++) {
        ids[r] = kvt_argmax(c->logits + r * V, V);
        if (!kvt_all_finite(c->logits + r * V, V)) *finite = false;
    }
    if (!c->lazy_be) return KVT_OK;
    kvt_status st = c->lazy_be->ops->argmax ? c->lazy_be->ops->argmax(c->lazy_be, c->lazy_rows, ids + host_rows, err)
                                            : KVT_ERR_UNSUPPORTED;
    if (st == KVT_ERR_UNSUPPORTED) { // not offered (a final softcap): the logits, then the host's argmax
        kvt_context_logits(c);
        if (c->lazy_failed) return kvt_errorf(err, KVT_ERR_IO, "%s", c->lazy_err.msg);
        for (int64_t r = host_rows; r < c->n_out; r++) {
            ids[r] = kvt_argmax(c->logits + r * V, V);
            if (!kvt_all_finite(c->logits + r * V, V)) *finite = false;
        }
        return KVT_OK;
    }
    if (st) return st;
    for (int64_t r = host_rows; r < c->n_out; r++) {
        if (ids[r] < 0) *finite = false, ids[r] = 0;
    }
    return KVT_OK;
}
int64_t kvt_context_n_past(const kvt_context *c) { return c->n_past[0]; }
int64_t kvt_context_n_ctx(const kvt_context *c) { return c->p.n_ctx; }
int kvt_context_n_threads(const kvt_context *c) { return c->p.n_threads; }
kvt_threadpool *kvt_context_pool(kvt_context *c) { return c->pool; }
void kvt_context_pool_stats(const kvt_context *c, kvt_threadpool_stats *out) { kvt_threadpool_get_stats(c->pool, out); }
const kvt_model *kvt_context_model(const kvt_context *c) { return c->m; }
kvt_kv *kvt_context_kv(kvt_context *c) { return c->kv; }

void kvt_context_set_plan(kvt_context *c, const int32_t *seqs, int64_t n) {
    if (!strcmp(c->kv->ops->name, "paged")) kvt_kv_paged_set_plan(c->kv, seqs, n);
    if (c->gpu_be) c->gpu_be->ops->set_plan(c->gpu_be, seqs, n);
}
struct kvt_sparse *kvt_context_sparse(kvt_context *c) { return c->sp; }
int64_t kvt_context_prompt_tail(const kvt_context *c) { return kvt_sparse_prompt_tail(c->sp); }
int64_t kvt_context_prompt_cacheable(const kvt_context *c, int64_t n_prompt) {
    const int64_t n = n_prompt - kvt_context_prompt_tail(c);
    return n > 0 ? n : 0;
}
void kvt_context_kv_stats(kvt_context *c, kvt_kv_stats *out) { kvt_kv_get_stats(c->kv, out); }
bool kvt_context_gpu_stats(const kvt_context *c, kvt_gpu_layers_stats *out) {
    memset(out, 0, sizeof *out);
    if (!c->gpu_be) return false;
    kvt_gpu_layers_get_stats(kvt_backend_cuda_layers(c->gpu_be), out);
    return true;
}
int64_t kvt_context_scratch_bytes(const kvt_context *c) { return c->scratch_bytes; }
int64_t kvt_context_kv_bytes(const kvt_context *c) {
    kvt_kv_params kp = {c->p.kv_type, c->m->hp.n_layer, c->m->hp.n_head_kv, c->m->hp.head_dim, c->m->hp.head_dim_v,
                        c->p.n_ctx, c->p.kv_block, 0};
    return kvt_kv_contig_bytes(&kp);
}

int64_t kvt_context_kv_block(const kvt_context *c) { return c->p.kv_block; }
int64_t kvt_context_kv_block_bytes(const kvt_context *c) {
    const kvt_hparams *hp = &c->m->hp;
    return (int64_t)hp->n_layer * hp->n_head_kv * kvt_row_size(c->p.kv_type, (hp->head_dim + hp->head_dim_v) * c->p.kv_block);
}

bool kvt_context_pass_repeatable(const kvt_context *c) { return kvt_sparse_pass_repeatable(c->sp); }

bool kvt_context_sparse_selects(const kvt_context *c) {
    const kvt_sparse_params *p = c->sp ? kvt_sparse_get_params(c->sp) : NULL;
    return p && (p->mode == KVT_SPARSE_QUEST || p->mode == KVT_SPARSE_ASYNCSPADE);
}

int64_t kvt_context_decode_bytes(const kvt_context *c, int64_t n) {
    const kvt_hparams *hp = &c->m->hp;
    const int64_t B = c->p.kv_block > 0 ? c->p.kv_block : 1, nb = (n + B - 1) / B, H = hp->n_head_kv;
    const int64_t g = c->p.kv_group > 0 && c->p.kv_group < H ? c->p.kv_group : H, shards = (H + g - 1) / g;
    const int64_t head_block = kvt_row_size(c->p.kv_type, (hp->head_dim + hp->head_dim_v) * B); // one head's block
    const kvt_sparse_params *sp = kvt_context_sparse_selects(c) ? kvt_sparse_get_params(c->sp) : NULL;
    const int64_t per_head = sp ? kvt_sparse_step_blocks(sp, n, B) : nb;
    int64_t bytes = 0;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const int64_t w = kvt_hparams_layer_window(hp, l);
        int64_t blocks = shards * nb; // shard blocks
        if (w > 0) {
            const int64_t wb = (w + B - 1) / B + 1;
            blocks = shards * (wb < nb ? wb : nb);
        } else if (sp && l >= sp->dense_layers) { // each KV head its selection: a shard (g heads) at most their union
            const int64_t sel = g * per_head;
            blocks = shards * (sel < nb ? sel : nb);
        }
        bytes += blocks * g * head_block;
    }
    return bytes;
}

void kvt_context_truncate(kvt_context *c, int64_t n_keep) { kvt_context_seq_truncate(c, 0, n_keep); }
