// backend_cpu.c - the CPU backend (backend.h): a range of layers and the output over the context's buffers, KV store
// and thread pool, exactly the CPU forward pass as it ran before the backend table (same calls in the same order, so
// the logits are bit for bit those of before).
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "../attn/attention.h"
#include "../kernels/quant.h"
#include "../kernels/vec.h"
#include "../sparse/sparse.h"
#include "context_impl.h"
#include "ew_par.h"
#include "matmul_par.h"

// Decode, before a product job: the weights of the job after it become the prefetch window (weight_pf.h), so that the
// threads which wait at that job's end, or spin while the caller runs the serial steps after it, request their
// lines. Only cache hints: the same bits.
// fused: that job runs with kvt_mm_opts' fused_y (its tasks differ).
static void pf_next(kvt_context *c, const kvt_weight *const *w, int n_w, int64_t n, bool fused) {
    if (n > KVT_FFN_FUSE_TOKENS || c->wpf_budget <= 0) return;
    kvt_wpf_range r[KVT_WPF_RANGES];
    const kvt_mm_opts o = {NULL, NULL, 0, NULL, fused ? c->qkv_y : NULL};
    const int k = kvt_matmul_par_ranges(c->pool, w, n_w, n, &o, r, KVT_WPF_RANGES);
    kvt_wpf_post(&c->wpf, r, k, c->wpf_budget);
}

// Whether decode's q/k/v job of L runs in the fused form (qkv below: the heads' epilogue, the product's fused_y).
static bool qkv_fused(const kvt_context *c, const kvt_layer *L, int64_t n) {
    const kvt_hparams *hp = &c->m->hp;
    return n <= KVT_FFN_FUSE_TOKENS && L->wq.rows == (int64_t)hp->n_head * hp->head_dim &&
           L->wk.rows == (int64_t)hp->n_head_kv * hp->head_dim && L->wv.rows == (int64_t)hp->n_head_kv * hp->head_dim_v;
}

// The job after a layer's w_down: the q/k/v of the next layer L, or without one (L NULL) the output matrix when
// `out`, else none (an empty window).
static void pf_qkv(kvt_context *c, const kvt_layer *L, bool out, int64_t n) {
    const kvt_weight *w[3] = {L ? &L->wq : &c->m->output, L ? &L->wk : NULL, L ? &L->wv : NULL};
    pf_next(c, w, L ? 3 : out ? 1 : 0, n, L && qkv_fused(c, L, n));
}

static void matmul(kvt_context *c, const kvt_weight *w, const float *x, int64_t n, float *y) {
    kvt_matmul_par(c->pool, &w, &y, 1, x, n, c->qact);
}

// Decode's small steps inside the matmuls' pool jobs (kvt_mm_opts epilogues), so that no thread idles while the
// caller runs them between two jobs. Each is element-wise, so every element sees the operations it saw as a
// separate step, in the same order: the same bits.

// The residual add of an output projection (wo, w_down) without a post-norm: x[t, r0..r1) += tmp[t, r0..r1) for
// the rows a task just computed.
typedef struct {
    kvt_context *c;
    int64_t n; // tokens
} resid_fuse;

static void resid_epi(void *vctx, int part, int64_t chunk, int64_t r0, int64_t r1) {
    (void)part, (void)chunk;
    const resid_fuse *f = vctx;
    const int64_t E = f->c->m->hp.n_embd;
    for (int64_t t = 0; t < f->n; t++) kvt_vec_add_f32(f->c->x + t * E + r0, f->c->tmp + t * E + r0, r1 - r0);
}

// tmp = w in (in f32, or xq: already in w's dot type), then x += tmp inside the tasks when there is no post-norm;
// returns whether it added.
static bool matmul_resid(kvt_context *c, const kvt_weight *w, const float *in, const void *xq, int64_t n, const float *post) {
    resid_fuse f = {c, n};
    const kvt_mm_opts o = {post ? NULL : resid_epi, &f, 0, xq, NULL};
    kvt_matmul_par_ex(c->pool, &w, &c->tmp, 1, in, n, c->qact, &o);
    return !post;
}

// The gated activation of the FFN and the conversion of its rows into w_down's dot type, done by whichever of the
// gate and up tasks of a row chunk ends second (the chunks of both are the same rows), in decode (n <= 4 tokens).
typedef struct {
    kvt_context *c;
    int64_t n, F;                // tokens, n_ff
    bool gelu;
    const kvt_type_ops *dot;     // w_down's dot type
    kvt_type dot_type;
    int64_t dot_row;             // bytes of a converted row of F
} glu_fuse;

static void glu_epi(void *vctx, int part, int64_t chunk, int64_t r0, int64_t r1) {
    (void)part;
    const glu_fuse *f = vctx;
    kvt_context *c = f->c;
    // acq_rel: the second sees the first's rows
    if (atomic_fetch_add_explicit(&c->ffn_pair[chunk], 1, memory_order_acq_rel) == 0) return;
    uint8_t *xq = c->qffn;
    const int64_t off = kvt_row_size(f->dot_type, r0); // r0 is a multiple of the dot type's block (row_align)
    for (int64_t t = 0; t < f->n; t++) {
        float *g = c->gate + t * f->F + r0;
        if (f->gelu) kvt_geglu_f32(g, c->up + t * f->F + r0, r1 - r0);
        else kvt_swiglu_f32(g, c->up + t * f->F + r0, r1 - r0);
        f->dot->from_float(g, xq + t * f->dot_row + off, r1 - r0);
    }
}

// gate, up, the gated activation and w_down; returns whether w_down's output was added to x (matmul_resid).
// next, out: the job after w_down (pf_qkv's L and out), for the prefetch window.
static bool ffn(kvt_context *c, const kvt_layer *L, int64_t n, const kvt_layer *next, bool out) {
    const kvt_hparams *hp = &c->m->hp;
    const kvt_weight *gu[2] = {&L->w_gate, &L->w_up};
    float *gu_out[2] = {c->gate, c->up};
    const bool gelu = hp->ffn_act == KVT_FFN_GEGLU;
    const kvt_type_ops *wd = kvt_type_ops_get(L->w_down.type);
    const kvt_type_ops *dot = wd ? kvt_type_ops_get(wd->vec_dot_type) : NULL;
    int64_t blck = 0, bsize = 0;
    const bool fuse = n <= KVT_FFN_FUSE_TOKENS && dot && dot->from_float && L->w_gate.type == L->w_up.type &&
                      L->w_gate.rows == hp->n_ff &&
                      L->w_gate.rows == L->w_up.rows && L->w_gate.cols == L->w_up.cols &&
                      kvt_type_layout(wd->vec_dot_type, &blck, &bsize) && blck > 0 && hp->n_ff % blck == 0;
    if (!fuse) {
        kvt_matmul_par(c->pool, gu, gu_out, 2, c->xn, n, c->qact);
        kvt_glu_par(c->pool, gelu, c->gate, c->up, n * hp->n_ff);
        pf_qkv(c, next, out, n);
        return matmul_resid(c, &L->w_down, c->gate, NULL, n, L->post_ffn_norm);
    }
    glu_fuse f = {c, n, hp->n_ff, gelu, dot, wd->vec_dot_type, kvt_row_size(wd->vec_dot_type, hp->n_ff)};
    memset(c->ffn_pair, 0, (size_t)(hp->n_ff / KVT_MATMUL_MIN_CHUNK_ROWS + 1) * sizeof *c->ffn_pair);
    const kvt_mm_opts og = {glu_epi, &f, blck, NULL, NULL};
    pf_next(c, (const kvt_weight *const[]){&L->w_down}, 1, n, false);
    kvt_matmul_par_ex(c->pool, gu, gu_out, 2, c->xn, n, c->qact, &og);
    pf_qkv(c, next, out, n);
    return matmul_resid(c, &L->w_down, NULL, c->qffn, n, L->post_ffn_norm);
}

// Per-head RMS norm (qwen3) then rope, for one token's `heads` heads at x; cs = the token's rope table.
static void qk_finish(const kvt_context *c, float *x, const float *cs, int32_t heads, const float *norm) {
    const kvt_hparams *hp = &c->m->hp;
    kvt_rope_params rp = {hp->n_rot, hp->rope_type == KVT_ROPE_NEOX, hp->rope_freq_base, hp->rope_freq_scale,
                          c->m->rope_freqs};
    for (int32_t h = 0; h < heads; h++) {
        float *xh = x + (int64_t)h * hp->head_dim;
        if (norm) kvt_rmsnorm_f32(xh, xh, norm, hp->head_dim, hp->rms_eps);
        kvt_rope_apply(&rp, cs, xh);
    }
}

// The per-token element-wise work between the matmuls of a layer. Each token's rows are independent
// of the others', so a micro-batch splits them over the pool by token ranges (SwiGLU, in
// kvt_swiglu_par, by element ranges); each element sees the same operations in the same order as
// on one thread, so the result is bitwise that of a serial loop.
enum {
    EW_ADD = 1,  // x += tmp                                  (residual)
    EW_NORM = 2, // xn = rmsnorm(x) * norm                    (pre-norm of the next matmul)
    EW_QK = 4,   // q, k, v += biases; q, k: per-head norm, rope
};
typedef struct {
    kvt_context *c;
    const kvt_layer *L; // biases, q/k norms (EW_QK)
    const float *norm;  // [n_embd] weight of EW_NORM
    const float *post;  // [n_embd] weight of the norm of tmp before EW_ADD (gemma3 post-norms), or NULL
    int flags;
} ew_job;

static void ew_range(void *vctx, int64_t t0, int64_t t1) {
    const ew_job *j = vctx;
    kvt_context *c = j->c;
    const kvt_hparams *hp = &c->m->hp;
    const int64_t E = hp->n_embd;
    const kvt_layer *L = j->L;
    const int64_t Q = L ? L->wq.rows : 0, K = L ? L->wk.rows : 0, V = L ? L->wv.rows : 0;
    for (int64_t t = t0; t < t1; t++) {
        if (j->post) kvt_rmsnorm_f32(c->tmp + t * E, c->tmp + t * E, j->post, E, hp->rms_eps);
        if (j->flags & EW_ADD) kvt_vec_add_f32(c->x + t * E, c->tmp + t * E, E);
        if (j->flags & EW_NORM) kvt_rmsnorm_f32(c->xn + t * E, c->x + t * E, j->norm, E, hp->rms_eps);
        if (j->flags & EW_QK) {
            if (L->bq) kvt_vec_add_f32(c->q + t * Q, L->bq, Q);
            if (L->bk) kvt_vec_add_f32(c->k + t * K, L->bk, K);
            if (L->bv) kvt_vec_add_f32(c->v + t * V, L->bv, V);
            const float *cs = c->rope_cs + ((L->rope_local ? c->p.n_ubatch : 0) + t) * hp->n_rot;
            qk_finish(c, c->q + t * Q, cs, hp->n_head, L->q_norm);
            qk_finish(c, c->k + t * K, cs, hp->n_head_kv, L->k_norm);
        }
    }
}

// EW_QK of decode inside the q/k/v job: the task that completes a q or k head's rows (the heads' row counts in
// c->head_rows) adds its bias, norms and ropes it for every token; v's bias is added by the task of its rows.
typedef struct {
    kvt_context *c;
    const kvt_layer *L;
    int64_t n; // tokens
} qk_fuse;

static void qk_epi(void *vctx, int part, int64_t chunk, int64_t r0, int64_t r1) {
    (void)chunk;
    const qk_fuse *f = vctx;
    kvt_context *c = f->c;
    const kvt_hparams *hp = &c->m->hp;
    const kvt_layer *L = f->L;
    const int64_t Q = L->wq.rows, K = L->wk.rows, V = L->wv.rows, hd = hp->head_dim;
    if (part == 2) {
        if (L->bv) {
            for (int64_t t = 0; t < f->n; t++) kvt_vec_add_f32(c->v + t * V + r0, L->bv + r0, r1 - r0);
        }
        return;
    }
    float *y = part == 0 ? c->q : c->k;
    const float *bias = part == 0 ? L->bq : L->bk, *norm = part == 0 ? L->q_norm : L->k_norm;
    const int64_t ld = part == 0 ? Q : K;
    _Atomic int *cnt = c->head_rows + (part == 0 ? 0 : hp->n_head);
    for (int64_t h = r0 / hd; h * hd < r1; h++) {
        const int64_t a = h * hd > r0 ? h * hd : r0, b = (h + 1) * hd < r1 ? (h + 1) * hd : r1;
        // acq_rel: the task that completes the head sees the rows the others wrote
        if (atomic_fetch_add_explicit(&cnt[h], (int)(b - a), memory_order_acq_rel) + (b - a) < hd) continue;
        for (int64_t t = 0; t < f->n; t++) {
            float *xh = y + t * ld + h * hd;
            if (bias) kvt_vec_add_f32(xh, bias + h * hd, hd);
            const float *cs = c->rope_cs + ((L->rope_local ? c->p.n_ubatch : 0) + t) * hp->n_rot;
            qk_finish(c, xh, cs, 1, norm);
        }
    }
}

// Runs the element-wise stage `flags` over n tokens: two tokens per task at least, on the pool when
// there are two such tasks, else on the caller.
static void ew_run(kvt_context *c, const kvt_layer *L, int flags, const float *norm, const float *post, int64_t n) {
    ew_job j = {c, L, norm, post, flags};
    kvt_par_ranges(c->pool, n, 2, ew_range, &j);
}

// q, k, v = wq|wk|wv xn, then EW_QK (in decode inside the job: qk_epi; the matrices that lie back to back in one
// type as one, kvt_mm_opts' fused_y: SmolLM2 Q4_1's 6 tasks a layer become 2).
static void qkv(kvt_context *c, const kvt_layer *L, int64_t n) {
    const kvt_hparams *hp = &c->m->hp;
    const kvt_weight *w[3] = {&L->wq, &L->wk, &L->wv};
    float *y[3] = {c->q, c->k, c->v};
    if (!qkv_fused(c, L, n)) {
        kvt_matmul_par(c->pool, w, y, 3, c->xn, n, c->qact);
        ew_run(c, L, EW_QK, NULL, NULL, n);
        return;
    }
    memset(c->head_rows, 0, (size_t)(hp->n_head + hp->n_head_kv) * sizeof *c->head_rows);
    qk_fuse f = {c, L, n};
    const kvt_mm_opts o = {qk_epi, &f, 0, NULL, c->qkv_y};
    kvt_matmul_par_ex(c->pool, w, y, 3, c->xn, n, c->qact, &o);
}


// Attention of n tokens of seq at [pos0, pos0 + n) (their keys k, just appended; prompt: a prompt's tokens): dense,
// or sparse (src/sparse/).
static kvt_status attn_rows(kvt_context *c, int32_t seq, int32_t il, const kvt_attn_params *ap, const float *q,
                            const float *k, int64_t pos0, int64_t n, bool prompt, float *out, kvt_err *err) {
    if (c->sp) {
        return kvt_sparse_attention(c->sp, c->kv, seq, il, ap, q, k, pos0, n, prompt, out, c->pool, c->attn_scratch, c->attn_ws,
                                    err);
    }
    return kvt_attention(c->kv, seq, il, ap, q, pos0, n, out, c->pool, c->attn_scratch, c->attn_ws, err);
}

// Appends the micro-batch's K/V of layer il and attends over each sequence's cache. Across sequences,
// consecutive rows of one sequence (a run: a prefill chunk) append and attend together, as a run alone does.
static kvt_status attend(kvt_context *c, const kvt_ubatch *u, int32_t il, const kvt_attn_params *ap, kvt_err *err) {
    const kvt_hparams *hp = &c->m->hp;
    if (!u->seqs) {
        kvt_status st = c->kv->ops->append(c->kv, u->seq, il, u->pos0, u->n, c->k, c->v, err);
        if (st) return st;
        return attn_rows(c, u->seq, il, ap, c->q, c->k, u->pos0, u->n, u->prompt, c->att, err);
    }
    const int64_t Q = (int64_t)hp->n_head * hp->head_dim, K = (int64_t)hp->n_head_kv * hp->head_dim,
                  V = (int64_t)hp->n_head_kv * hp->head_dim_v, A = (int64_t)hp->n_head * hp->head_dim_v;
    for (int64_t t = 0; t < u->n;) {
        int64_t r = 1; // rows of this run
        while (t + r < u->n && u->seqs[t + r] == u->seqs[t] && u->pos[t + r] == u->pos[t] + r) r++;
        kvt_status st = c->kv->ops->append(c->kv, u->seqs[t], il, u->pos[t], r, c->k + t * K, c->v + t * V, err);
        if (st) return st;
        st = attn_rows(c, u->seqs[t], il, ap, c->q + t * Q, c->k + t * K, u->pos[t], r, u->prompt_rows && u->prompt_rows[t],
                       c->att + t * A, err);
        if (st) return st;
        t += r;
    }
    return KVT_OK;
}

static kvt_context *ctx_of(kvt_backend *b) { return (kvt_context *)((char *)b - offsetof(kvt_context, cpu_be)); }

// For a head that wants the logits of 0 < n_out < n rows: packs those rows' residual (x) and attention output (att)
// at the start of their buffers (row k from row out[k] >= k, or from n - n_out + k), so that the last layer's output
// projection and FFN run on those rows only (llama.cpp skips the FFN of the other rows too: no row's value past the
// last attention is used but the head's; with n_out 0 none is). Each row's operations are its own whatever the rows
// beside it (matmul.h), so the logits keep their bits.
static void rows_out(kvt_context *c, const kvt_head *head, int64_t n) {
    const kvt_hparams *hp = &c->m->hp;
    const int64_t E = hp->n_embd, A = (int64_t)hp->n_head * hp->head_dim_v;
    for (int64_t k = 0; k < head->n_out; k++) {
        const int64_t t = head->out ? head->out[k] : n - head->n_out + k;
        if (t == k) continue;
        memcpy(c->x + k * E, c->x + t * E, (size_t)E * sizeof(float));
        memcpy(c->att + k * A, c->att + t * A, (size_t)A * sizeof(float));
    }
}

// Layers [il0, il1) then, with a head, the output of its rows.
static kvt_status cpu_eval(kvt_backend *b, const kvt_ubatch *u, int32_t il0, int32_t il1, float *x, const kvt_head *head,
                           kvt_err *err) {
    kvt_context *c = ctx_of(b);
    int64_t n = u->n; // rows computed (the last layer: only the head's past its attention)
    const kvt_model *m = c->m;
    const kvt_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    if (x != c->x) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "cpu backend: the residual stream must be the context's");
    if (il0 < il1) {
        kvt_rope_params rp = {hp->n_rot, hp->rope_type == KVT_ROPE_NEOX, hp->rope_freq_base, hp->rope_freq_scale,
                              m->rope_freqs};
        for (int64_t t = 0; t < n; t++) kvt_rope_cache(&rp, u->row_pos[t], c->rope_cs + t * hp->n_rot);
        if (hp->n_swa > 0) { // the local layers' table (their own base, no scaling)
            rp.freq_base = hp->rope_freq_base_swa;
            rp.freq_scale = hp->rope_freq_scale_swa;
            float *cs = c->rope_cs + c->p.n_ubatch * hp->n_rot;
            for (int64_t t = 0; t < n; t++) kvt_rope_cache(&rp, u->row_pos[t], cs + t * hp->n_rot);
        }
        ew_run(c, NULL, EW_NORM, m->layers[il0].attn_norm, NULL, n);
    }
    for (int32_t il = il0; il < il1; il++) {
        const kvt_layer *L = &m->layers[il];
        const kvt_attn_params ap = {hp->n_head, hp->attn_scale, KVT_ATTN_TILE, L->window};
        pf_next(c, (const kvt_weight *const[]){&L->wo}, 1, n, false);
        qkv(c, L, n);
        kvt_status st = attend(c, u, il, &ap, err);
        if (st) return st;
        // the last layer past attention: output rows only
        if (il + 1 == il1 && head && (head->logits || head->embd) && head->n_out < n) {
            if (head->n_out <= 0) return KVT_OK;
            rows_out(c, head, n);
            n = head->n_out;
        }
        pf_next(c, (const kvt_weight *const[]){&L->w_gate, &L->w_up}, 2, n, false);
        const int add_o = matmul_resid(c, &L->wo, c->att, NULL, n, L->post_attn_norm) ? 0 : EW_ADD;
        ew_run(c, NULL, add_o | EW_NORM, L->ffn_norm, L->post_attn_norm, n);
        const bool out = head && head->n_out > 0 && head->logits && !head->embd;
        const int add_d = ffn(c, L, n, il + 1 < il1 ? &m->layers[il + 1] : NULL, out) ? 0 : EW_ADD;
        // residual, then the next layer's attention pre-norm in the same pass
        if (il + 1 < il1) ew_run(c, NULL, add_d | EW_NORM, m->layers[il + 1].attn_norm, L->post_ffn_norm, n);
        else if (add_d) ew_run(c, NULL, add_d, NULL, L->post_ffn_norm, n);
    }
    // logits of the rows asked for: their normed rows packed at the start of xn (row k from row out[k] >= k; from
    // row k itself when the last layer already packed them, n == n_out)
    if (!head || head->n_out <= 0 || (!head->logits && !head->embd)) return KVT_OK;
    float *normed = head->embd ? head->embd : c->xn; // embeddings: the normed rows are the result, no LM head
    for (int64_t k = 0; k < head->n_out; k++) {
        const int64_t t = n == head->n_out ? k : head->out ? head->out[k] : n - head->n_out + k;
        kvt_rmsnorm_f32(normed + k * E, c->x + t * E, m->output_norm, E, hp->rms_eps);
    }
    if (head->embd) return KVT_OK;
    pf_qkv(c, il0 == 0 && il1 > 0 ? &m->layers[0] : NULL, false, head->n_out); // the next token's first job
    matmul(c, &m->output, c->xn, head->n_out, head->logits);
    if (hp->logit_softcap > 0.0f) {
        const float cap = hp->logit_softcap;
        for (int64_t i = 0; i < head->n_out * hp->n_vocab; i++) head->logits[i] = cap * tanhf(head->logits[i] / cap);
    }
    return KVT_OK;
}

// The KV of the CPU layers is the context's store, which forward.c forks and truncates itself.
const kvt_backend_ops kvt_backend_cpu_ops = {"cpu", cpu_eval, NULL, NULL, NULL, NULL, NULL, NULL};
