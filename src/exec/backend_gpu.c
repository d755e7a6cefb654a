// backend_gpu.c - the CUDA backend (backend.h) over the device layers of gpu_layers.h: it owns the loaded library
// (backend_cuda.h) and the device layers, runs its layer range and the output there, and keeps the logits in VRAM
// until the host asks for them or only for their greedy ids.
#include <math.h>
#include <stdlib.h>

#include "backend.h"
#include "gpu_layers.h"

typedef struct {
    kvt_backend base;      // first: a kvt_backend * is a cuda_backend *
    kvt_cuda_backend lib;  // owned: the library and its table
    kvt_gpu_layers *g;     // owned
    const kvt_model *m;    // borrowed
    int32_t il0;           // its layers: [il0, n_layer)
    bool output;           // the output norm and the logits there too
} cuda_backend;

static cuda_backend *cb(kvt_backend *b) { return (cuda_backend *)b; }

static void softcap(const kvt_model *m, float *logits, int64_t rows) {
    const float cap = m->hp.logit_softcap;
    if (cap <= 0.0f) return;
    for (int64_t i = 0; i < rows * m->hp.n_vocab; i++) logits[i] = cap * tanhf(logits[i] / cap);
}

static kvt_status cuda_eval(kvt_backend *b, const kvt_ubatch *u, int32_t il0, int32_t il1, float *x, const kvt_head *head,
                            kvt_err *err) {
    cuda_backend *c = cb(b);
    if (il0 != c->il0 || il1 != c->m->hp.n_layer || (head != NULL) != c->output) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "cuda backend: asked for layers [%d, %d)%s, holds [%d, %d)%s", il0, il1,
                          head ? " and the output" : "", c->il0, c->m->hp.n_layer, c->output ? " and the output" : "");
    }
    const int64_t n_out = head ? head->n_out : 0;
    float *logits = head ? head->logits : NULL;
    kvt_status st = kvt_gpu_layers_run(c->g, u->n, u->row_seq, u->row_pos, x, head ? head->out : NULL, n_out, logits, err);
    if (!st && logits) softcap(c->m, logits, n_out);
    return st;
}

static kvt_status cuda_logits(kvt_backend *b, int64_t n_out, float *dst, kvt_err *err) {
    kvt_status st = kvt_gpu_layers_logits(cb(b)->g, n_out, dst, err);
    if (!st) softcap(cb(b)->m, dst, n_out);
    return st;
}

static kvt_status cuda_argmax(kvt_backend *b, int64_t n_out, int32_t *ids, kvt_err *err) {
    if (cb(b)->m->hp.logit_softcap > 0.0f) { // the host applies the softcap, which may merge close values into ties
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "cuda backend: greedy ids under a final logit softcap");
    }
    return kvt_gpu_layers_argmax(cb(b)->g, n_out, ids, err);
}

static kvt_status cuda_seq_fork(kvt_backend *b, int32_t src, int32_t dst, kvt_err *err) {
    return kvt_gpu_layers_seq_fork(cb(b)->g, src, dst, err);
}
static void cuda_seq_truncate(kvt_backend *b, int32_t seq, int64_t n_keep) { kvt_gpu_layers_seq_truncate(cb(b)->g, seq, n_keep); }
static void cuda_set_plan(kvt_backend *b, const int32_t *seqs, int64_t n) {
    kvt_err e;
    (void)kvt_gpu_layers_set_plan(cb(b)->g, seqs, n, &e); // (out of memory: no plan, a hint only)
}

static void cuda_free(kvt_backend *b) {
    if (!b) return;
    kvt_gpu_layers_free(cb(b)->g); // before the library that runs it
    kvt_cuda_backend_close(&cb(b)->lib);
    free(b);
}

static const kvt_backend_ops cuda_ops = {"cuda",        cuda_eval,         cuda_logits,   cuda_argmax,
                                         cuda_seq_fork, cuda_seq_truncate, cuda_set_plan, cuda_free};

kvt_status kvt_backend_cuda_init(kvt_cuda_backend *lib, const kvt_model *m, const kvt_gpu_layers_params *p, kvt_backend **out,
                                 kvt_err *err) {
    *out = NULL;
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) {
        kvt_cuda_backend_close(lib);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    }
    c->base.ops = &cuda_ops;
    c->lib = *lib;
    c->m = m;
    c->il0 = p->il0;
    c->output = p->output;
    kvt_status st = kvt_gpu_layers_init(&c->lib, m, p, &c->g, err);
    if (st) {
        cuda_free(&c->base);
        return st;
    }
    *out = &c->base;
    return KVT_OK;
}

kvt_gpu_layers *kvt_backend_cuda_layers(kvt_backend *b) { return cb(b)->g; }
