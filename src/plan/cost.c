// cost.c - partition units of a model and the roofline cost model (helm.txt §4.1).
#include "cost.h"

#include "../exec/context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t kvt_unit_read_bytes(const kvt_unit *u) {
    int64_t s = 0;
    for (int i = 0; i < u->n_parts; i++) s += u->parts[i].bytes;
    return s;
}

static void unit_add(kvt_unit *u, kvt_type t, int64_t bytes, int64_t macs) {
    for (int i = 0; i < u->n_parts; i++) {
        if (u->parts[i].type == t) {
            u->parts[i].bytes += bytes;
            u->parts[i].macs += macs;
            return;
        }
    }
    if (u->n_parts < KVT_UNIT_MAX_PARTS) {
        u->parts[u->n_parts++] = (kvt_unit_part){t, bytes, macs};
    } else { // more types than slots: account under the last slot's type (bytes stay exact)
        u->parts[KVT_UNIT_MAX_PARTS - 1].bytes += bytes;
        u->parts[KVT_UNIT_MAX_PARTS - 1].macs += macs;
    }
}

static kvt_status costs_alloc(kvt_costs *c, const kvt_hparams *hp, kvt_err *err) {
    memset(c, 0, sizeof *c);
    c->hp = *hp;
    c->kv_type = KVT_TYPE_F16;
    c->n_units = hp->n_layer + 2;
    c->units = calloc((size_t)c->n_units, sizeof(kvt_unit));
    if (!c->units) return kvt_errorf(err, KVT_ERR_NOMEM, "plan: out of memory");
    const int64_t kv = (int64_t)hp->n_head_kv * (hp->head_dim + hp->head_dim_v) * 2; // K+V of one token, f16
    for (int i = 0; i < c->n_units; i++) {
        kvt_unit *u = &c->units[i];
        u->kind = i == 0 ? KVT_UNIT_EMBED : i == c->n_units - 1 ? KVT_UNIT_OUTPUT : KVT_UNIT_BLOCK;
        u->layer = u->kind == KVT_UNIT_BLOCK ? i - 1 : -1;
        u->act_bytes = (int64_t)hp->n_embd * 4;
        if (u->kind == KVT_UNIT_BLOCK) {
            u->kv_bytes_per_tok = kv;
            u->attn_flops_per_tok = 4 * (int64_t)hp->n_head * hp->head_dim;
            u->window = kvt_hparams_layer_window(hp, u->layer); // gemma3's local layers read only their window
        }
    }
    return KVT_OK;
}

void kvt_costs_free(kvt_costs *c) {
    free(c->units);
    c->units = NULL;
    c->n_units = 0;
}

kvt_status kvt_costs_from_gguf(const kvt_gguf *g, kvt_costs *c, kvt_err *err) {
    kvt_hparams hp;
    kvt_status st = kvt_hparams_read(g, &hp, err);
    if (st) return st;
    if ((st = costs_alloc(c, &hp, err))) return st;
    snprintf(c->name, sizeof c->name, "%s", kvt_gguf_path(g));
    kvt_unit *emb = &c->units[0], *out = &c->units[c->n_units - 1];
    const kvt_gguf_tensor *te = NULL;
    bool have_output = false;
    for (int64_t i = 0; i < kvt_gguf_n_tensors(g); i++) {
        const kvt_gguf_tensor *t = kvt_gguf_tensor_at(g, i);
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 95 ? t->name.len : 95), t->name.ptr);
        const int64_t bytes = (int64_t)t->size, macs = t->n_dims >= 2 ? t->ne[0] * t->ne[1] : 0;
        c->weight_bytes += bytes;
        kvt_unit *u = NULL;
        int layer;
        if (!strcmp(name, "token_embd.weight")) {
            te = t;
            emb->param_bytes += bytes;
            unit_add(emb, t->type, kvt_row_size(t->type, t->ne[0]), 0); // one row per token
            continue;
        } else if (!strncmp(name, "output", 6)) {
            u = out;
            have_output |= !strcmp(name, "output.weight");
        } else if (sscanf(name, "blk.%d.", &layer) == 1 && layer >= 0 && layer < hp.n_layer) {
            u = &c->units[layer + 1];
        } else {
            continue; // rope_freqs and other small tables: negligible
        }
        u->param_bytes += bytes;
        unit_add(u, t->type, bytes, macs);
    }
    if (!te) {
        kvt_costs_free(c); // the caller frees only what succeeded
        return kvt_errorf(err, KVT_ERR_NOT_FOUND, "%s: no token_embd.weight", kvt_gguf_path(g));
    }
    if (!have_output) { // tied: the output projection reads token_embd
        c->tied_bytes = (int64_t)te->size;
        out->param_bytes += (int64_t)te->size;
        unit_add(out, te->type, (int64_t)te->size, te->ne[0] * te->ne[1]);
    }
    return KVT_OK;
}

// Row bytes of a [rows, cols] matrix of type wt; types whose block does not divide cols
// fall back to q8_0 (cols % 32 == 0) or f16, as mkmodel does.
static int64_t mat_bytes(kvt_type wt, int64_t cols, int64_t rows, kvt_type *used) {
    kvt_type t = wt;
    if (kvt_row_size(t, cols) < 0) t = kvt_row_size(KVT_TYPE_Q8_0, cols) >= 0 ? KVT_TYPE_Q8_0 : KVT_TYPE_F16;
    *used = t;
    return kvt_row_size(t, cols) * rows;
}

kvt_status kvt_costs_from_shape(const kvt_shape *s, kvt_type wt, kvt_costs *c, kvt_err *err) {
    kvt_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.arch = s->arch;
    hp.n_vocab = s->n_vocab;
    hp.n_embd = s->n_embd;
    hp.n_layer = s->n_layer;
    hp.n_head = s->n_head;
    hp.n_head_kv = s->n_head_kv;
    hp.head_dim = hp.head_dim_v = s->head_dim;
    hp.n_ff = s->n_ff;
    hp.n_ctx_train = s->n_ctx_train;
    hp.n_rot = s->head_dim;
    hp.rope_freq_base = s->rope_freq_base;
    hp.rope_freq_scale = 1.0f;
    hp.rms_eps = s->rms_eps;
    if (!kvt_type_supported(wt)) return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "plan: weight type %s is not supported", kvt_type_name(wt));
    kvt_status st = costs_alloc(c, &hp, err);
    if (st) return st;
    snprintf(c->name, sizeof c->name, "%s (%s)", s->name, kvt_type_name(wt));
    const int64_t H = s->n_embd, Q = (int64_t)s->n_head * s->head_dim, K = (int64_t)s->n_head_kv * s->head_dim, F = s->n_ff;
    kvt_type t;
    int64_t b = mat_bytes(wt, H, s->n_vocab, &t);
    kvt_unit *emb = &c->units[0], *out = &c->units[c->n_units - 1];
    emb->param_bytes = b;
    unit_add(emb, t, b / s->n_vocab, 0);
    c->weight_bytes = b;
    if (s->tied_output) {
        c->tied_bytes = b;
    }
    out->param_bytes = b + H * 4;
    unit_add(out, t, b, H * s->n_vocab);
    unit_add(out, KVT_TYPE_F32, H * 4, 0);
    c->weight_bytes += (s->tied_output ? 0 : b) + H * 4;
    const int64_t mats[7][2] = {{H, Q}, {H, K}, {H, K}, {Q, H}, {H, F}, {H, F}, {F, H}}; // {cols, rows}
    for (int l = 0; l < s->n_layer; l++) {
        kvt_unit *u = &c->units[l + 1];
        for (int m = 0; m < 7; m++) {
            int64_t mb = mat_bytes(wt, mats[m][0], mats[m][1], &t);
            u->param_bytes += mb;
            unit_add(u, t, mb, mats[m][0] * mats[m][1]);
        }
        int64_t small = 2 * H * 4 + (s->qk_norm ? 2 * (int64_t)s->head_dim * 4 : 0) + (s->qkv_bias ? (Q + 2 * K) * 4 : 0);
        u->param_bytes += small;
        unit_add(u, KVT_TYPE_F32, small, 0);
        c->weight_bytes += u->param_bytes;
    }
    return KVT_OK;
}

// ---------------------------------------------------------------- devices

kvt_device kvt_device_cpu(const kvt_profile *p) {
    kvt_device d;
    memset(&d, 0, sizeof d);
    d.mem_gbps = p->cpu_read_gbps;
    for (int t = 0; t < KVT_TYPE_COUNT; t++) {
        d.gemv_gbps[t] = p->cpu_gemv_gbps[t];
        d.gemv_gbps_w[0][t] = p->cpu_gemv_gbps_1024[t];
        d.gemv_gbps_w[1][t] = p->cpu_gemv_gbps_2048[t];
        d.prefill_gflops[t] = p->cpu_gemm_gflops[t];
        d.prefill_gflops_w[0][t] = p->cpu_gemm_gflops_1024[t];
        d.prefill_gflops_w[1][t] = p->cpu_gemm_gflops_2048[t];
        if (p->cpu_gemm_gflops[t] > d.prefill_gflops_any) d.prefill_gflops_any = p->cpu_gemm_gflops[t];
    }
    // attention: our kernel's measured rate; profiles without it (hand-written) fall back to the f16 GEMM rate
    d.attn_gflops = p->cpu_attn_gflops > 0 ? p->cpu_attn_gflops : p->cpu_gemm_gflops[KVT_TYPE_F16] > 0 ? p->cpu_gemm_gflops[KVT_TYPE_F16] : 0;
    d.attn_prefill_gflops = p->cpu_attn_prefill_gflops > 0 ? p->cpu_attn_prefill_gflops : d.attn_gflops;
    d.attn_prefill_deep_gflops = p->cpu_attn_prefill_deep_gflops;
    d.prefill_chunk = kvt_context_params_default().n_ubatch; // the forward pass attends a prompt in chunks of n_ubatch
    d.swiglu_gelems = p->cpu_swiglu_gelems;
    d.l3_bytes = p->l3_bytes;
    d.l3_gbps = kvt_profile_l3_gbps(p);
    d.block_overhead_ms = p->cpu_block_overhead_ms;
    d.prefill_overhead_ms = p->cpu_prefill_overhead_ms;
    d.eta_m = d.eta_c = 1.0;
    return d;
}

kvt_device kvt_device_gpu(const kvt_profile *p) {
    kvt_device d;
    memset(&d, 0, sizeof d);
    d.gpu = true;
    d.mem_gbps = p->gpu_mem_gbps;
    for (int t = 0; t < KVT_TYPE_COUNT; t++) d.gemv_gbps[t] = p->gpu_gemv_gbps[t]; // kvtier's matvec (0: mem_gbps)
    d.prefill_gflops_any = p->gpu_gemm_gflops;
    d.attn_gflops = p->gpu_gemm_gflops;
    d.attn_prefill_gflops = p->gpu_gemm_gflops;
    d.block_overhead_ms = p->gpu_block_overhead_ms;
    d.eta_m = d.eta_c = 1.0;
    return d;
}

// GEMV bandwidth for weights of type t whose rows are `width` wide: the measured width nearest to it
// (1024, 2048 or 4096, by ratio), else the 4096 figure, else the DRAM read figure.
static double part_gbps(const kvt_device *d, kvt_type t, int64_t width) {
    if ((int)t >= KVT_TYPE_COUNT) return d->mem_gbps * d->eta_m;
    double bw = d->gemv_gbps[t];
    if (width > 0 && width < 1448 && d->gemv_gbps_w[0][t] > 0) bw = d->gemv_gbps_w[0][t];
    else if (width >= 1448 && width < 2896 && d->gemv_gbps_w[1][t] > 0) bw = d->gemv_gbps_w[1][t];
    if (bw <= 0) bw = d->mem_gbps;
    return bw * d->eta_m;
}

// GEMM rate for weights of type t in a model `width` wide, chosen as part_gbps chooses.
static double part_gflops(const kvt_device *d, kvt_type t, int64_t width) {
    double f = (int)t < KVT_TYPE_COUNT && d->prefill_gflops[t] > 0 ? d->prefill_gflops[t] : d->prefill_gflops_any;
    if ((int)t < KVT_TYPE_COUNT) {
        if (width > 0 && width < 1448 && d->prefill_gflops_w[0][t] > 0) f = d->prefill_gflops_w[0][t];
        else if (width >= 1448 && width < 2896 && d->prefill_gflops_w[1][t] > 0) f = d->prefill_gflops_w[1][t];
    }
    return f * d->eta_c;
}

static double max2(double a, double b) { return a > b ? a : b; }

double kvt_stage_decode_ms(const kvt_costs *c, int u0, int u1, const kvt_device *d, int64_t B, int64_t ctx) {
    double t = 0, w_kv = 0, f_attn = 0;
    for (int i = u0; i < u1; i++) {
        const kvt_unit *u = &c->units[i];
        double mem = 0, comp = 0;
        for (int k = 0; k < u->n_parts; k++) {
            const kvt_unit_part *p = &u->parts[k];
            // Eq. 4.10: weights are read once per step for all B sequences (the embedding reads B rows)
            mem += (double)p->bytes * (u->kind == KVT_UNIT_EMBED ? (double)B : 1.0) / part_gbps(d, p->type, c->hp.n_embd);
            double pf = part_gflops(d, p->type, c->hp.n_embd);
            if (pf > 0) comp += 2.0 * (double)p->macs * (double)B / pf;
        }
        t += max2(mem, comp) / 1e6; // bytes / (GB/s) = ns -> ms
        const int64_t seen = u->window > 0 && u->window < ctx ? u->window : ctx; // positions attention reads
        w_kv += (double)u->kv_bytes_per_tok * (double)seen * (double)B;    // Eq. 4.12
        f_attn += (double)u->attn_flops_per_tok * (double)seen * (double)B; // Eq. 4.11
    }
    if (w_kv > 0) {
        double alpha = d->l3_bytes > 0 ? (double)d->l3_bytes / w_kv : 0; // Eq. 4.14
        if (alpha > 1) alpha = 1;
        double m_hat = (alpha * d->l3_gbps + (1 - alpha) * d->mem_gbps) * d->eta_m;
        double comp = d->attn_gflops > 0 ? f_attn / (d->attn_gflops * d->eta_c) : 0;
        t += max2(w_kv / m_hat, comp) / 1e6; // Eq. 4.13
    }
    return t;
}

// Query-position pairs of a causal prompt's first n tokens under a window W (0: none): token i attends min(i + 1, W).
static double causal_pairs(double n, double W) {
    return W > 0 && W < n ? W * (W + 1) / 2.0 + (n - W) * W : n * (n + 1) / 2.0;
}

// Attention FLOP/s of a prompt chunk whose queries attend `mean` positions on average: the short prompt's rate up to
// its mean (KVT_PROFILE_ATTN_PROMPT tokens from 0), the deep chunk's from its mean on, log-linear in between (a query
// over few positions pays its per-row setup on little work; the measured rate grows with the row's length).
static double attn_prefill_rate(const kvt_device *d, double mean) {
    const double r1 = d->attn_prefill_gflops, r2 = d->attn_prefill_deep_gflops;
    const double a1 = (KVT_PROFILE_ATTN_PROMPT + 1) / 2.0, a2 = KVT_PROFILE_ATTN_DEEP_POS + (KVT_PROFILE_ATTN_DEEP_N + 1) / 2.0;
    if (r2 <= 0 || r1 <= 0 || mean <= a1) return r1;
    if (mean >= a2) return r2;
    return r1 * pow(r2 / r1, log(mean / a1) / log(a2 / a1));
}

// Time of a unit's causal attention over an n_tok-token prompt, in ms: chunk by chunk (d->prefill_chunk tokens, as the
// forward pass splits a prompt), each at the rate of its mean attended positions.
static double attn_prefill_ms(const kvt_unit *u, const kvt_device *d, int64_t n_tok) {
    if (u->attn_flops_per_tok <= 0 || d->attn_prefill_gflops <= 0) return 0;
    const int64_t chunk = d->prefill_chunk > 0 ? d->prefill_chunk : n_tok;
    double t = 0;
    for (int64_t p0 = 0; p0 < n_tok; p0 += chunk) {
        const int64_t m = n_tok - p0 < chunk ? n_tok - p0 : chunk;
        const double pairs = causal_pairs((double)(p0 + m), u->window) - causal_pairs((double)p0, u->window);
        t += (double)u->attn_flops_per_tok * pairs / (attn_prefill_rate(d, pairs / (double)m) * d->eta_c) / 1e6;
    }
    return t;
}

double kvt_stage_prefill_ms(const kvt_costs *c, int u0, int u1, const kvt_device *d, int64_t n_tok) {
    double t = 0;
    for (int i = u0; i < u1; i++) {
        const kvt_unit *u = &c->units[i];
        double mem = 0, comp = 0;
        for (int k = 0; k < u->n_parts; k++) {
            const kvt_unit_part *p = &u->parts[k];
            mem += (double)p->bytes * (u->kind == KVT_UNIT_EMBED ? (double)n_tok : 1.0) / part_gbps(d, p->type, c->hp.n_embd);
            double pf = part_gflops(d, p->type, c->hp.n_embd);
            // the output projection runs for the last prompt token only (its logits start decoding)
            const double toks = u->kind == KVT_UNIT_OUTPUT ? 1.0 : (double)n_tok;
            if (pf > 0) comp += 2.0 * (double)p->macs * toks / pf;
        }
        t += max2(mem, comp) / 1e6;
        // the FFN's element-wise SwiGLU (an expf per element) beside the GEMMs: n_ff elements per token
        if (u->kind == KVT_UNIT_BLOCK && d->swiglu_gelems > 0) {
            t += (double)c->hp.n_ff * (double)n_tok / d->swiglu_gelems / 1e6;
        }
        t += d->prefill_overhead_ms * (double)n_tok; // delta_pre: the calibrated rest, per unit per token
        // causal attention over the prompt: token i attends to i+1 positions (at most the layer's window)
        t += attn_prefill_ms(u, d, n_tok);
    }
    return t;
}

double kvt_comm_ms(const kvt_costs *c, int u, int64_t B, double link_gbps, double link_latency_us) {
    if (u < 0 || u >= c->n_units || link_gbps <= 0) return 0;
    return link_latency_us / 1e3 + (double)c->units[u].act_bytes * (double)B / link_gbps / 1e6; // Eq. 4.15
}

int64_t kvt_stage_param_bytes(const kvt_costs *c, int u0, int u1) {
    int64_t s = 0;
    for (int i = u0; i < u1; i++) s += c->units[i].param_bytes;
    if (c->tied_bytes > 0 && u0 == 0 && u1 == c->n_units) s -= c->tied_bytes;
    return s;
}

int64_t kvt_scratch_bytes(const kvt_hparams *hp, int64_t ub) {
    // same accounting as `kvtier info`: f32 activations of one micro-batch + one row of logits
    const int64_t Q = (int64_t)hp->n_head * hp->head_dim, K = (int64_t)hp->n_head_kv * hp->head_dim;
    return ub * 4 * (4 * (int64_t)hp->n_embd + 2 * Q + 2 * K + 3 * (int64_t)hp->n_ff) + (int64_t)hp->n_vocab * 4;
}
