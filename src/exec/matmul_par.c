#include "matmul_par.h"

#include "../kernels/matmul.h"
#include "../kernels/quant.h"

// Activations are converted to at most two dot types per call (e.g. Q8_K for
// q4_K and q6_K weights share one); two buffers of the widest (f32) size.
// (256 KiB: SmolLM2's gate/up and down in 2 tasks each, not 4; 13 of 16 alternating rounds faster than 128 KiB,
// TinyLlama's level: docs/log/BENCHMARKS-kernels-2.md, dec11e)
#define MIN_TASK_BYTES (256 * 1024)

int64_t kvt_matmul_scratch_bytes(int64_t max_cols, int64_t n_tok) { return 2 * (max_cols * 4 + 64) * n_tok + 128; }

typedef struct {
    const kvt_weight *w;
    float *y;
    const void *xq;   // [n_tok, cols] in w's dot type
    int64_t chunk;    // rows per task
    int64_t first;    // first task index of this weight
} mm_part;

typedef struct {
    mm_part part[KVT_MM_MAX_OUT];
    int n_part;
    const float *x;
    int64_t n_tok, cols;
    // conversion tasks (when run on the pool)
    const kvt_type_ops *cvt_ops[2];
    void *cvt_buf[2];
    int64_t cvt_row[2];
    int n_cvt;
    const kvt_mm_opts *o; // epilogue (kvt_matmul_par_ex), or NULL
} mm_job;

static void cvt_task(void *vj, int64_t t, int thread) {
    (void)thread;
    mm_job *J = vj;
    int k = (int)(t / J->n_tok);
    int64_t row = t % J->n_tok;
    J->cvt_ops[k]->from_float(J->x + row * J->cols, (uint8_t *)J->cvt_buf[k] + row * J->cvt_row[k], J->cols);
}

static void mm_task(void *vj, int64_t t, int thread) {
    (void)thread;
    mm_job *J = vj;
    int i = J->n_part - 1;
    while (i > 0 && t < J->part[i].first) i--;
    const mm_part *P = &J->part[i];
    int64_t r0 = (t - P->first) * P->chunk, r1 = r0 + P->chunk;
    if (r1 > P->w->rows) r1 = P->w->rows;
    kvt_matmul_rows(P->w->type, J->cols, P->w->data, r0, r1, P->xq, J->n_tok, P->y, P->w->rows);
    if (J->o && J->o->epilogue) J->o->epilogue(J->o->ctx, i, t - P->first, r0, r1);
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        const int64_t r = a % b;
        a = b, b = r;
    }
    return a;
}

// Rows per task of weight w in a job of n_tok tokens (row_align as kvt_mm_opts'):
// enough tasks to balance the threads; for batches, fewer and larger tasks
// (each task re-lays the activations for the GEMM tiles, panels are 32 rows);
// in decode a task reads at least MIN_TASK_BYTES of weights (small models: each task
// costs a dispatch and the activation's prep, more than its rows would take)
static int64_t part_chunk(const kvt_threadpool *pool, const kvt_weight *w, int64_t n_tok, int64_t row_align) {
    const int nt = kvt_threadpool_n_threads(pool);
    const int64_t per_thread = n_tok >= 16 ? 4 : 8;
    const int64_t align0 = n_tok >= 16 ? 2 * KVT_MATMUL_MIN_CHUNK_ROWS : KVT_MATMUL_MIN_CHUNK_ROWS;
    const int64_t ra = row_align > 1 ? row_align : 1, align = align0 / gcd64(align0, ra) * ra; // lcm
    int64_t chunk = w->rows / ((int64_t)nt * per_thread);
    const int64_t wrs = kvt_row_size(w->type, w->cols), min_rows = MIN_TASK_BYTES / (wrs > 0 ? wrs : 1);
    if (n_tok <= 4 && chunk < min_rows) {
        // as few tasks as MIN_TASK_BYTES allows, but a multiple of the threads, of equal size (SmolLM2's wo, 576 rows:
        // 2 x 288, not 368 + 208 with one thread waiting on the other)
        int64_t k = w->rows / (min_rows > 0 ? min_rows : 1);
        k = k < 1 ? nt : (k + nt - 1) / nt * nt;
        chunk = (w->rows + k - 1) / k;
    }
    return chunk < align ? align : (chunk + align - 1) / align * align;
}

int kvt_matmul_par_ranges(const kvt_threadpool *pool, const kvt_weight *const *w, int n_out, int64_t n_tok,
                          int64_t row_align, kvt_wpf_range *r, int max) {
    int n = 0;
    for (int i = 0; i < n_out; i++) {
        const int64_t chunk = part_chunk(pool, w[i], n_tok, row_align), wrs = kvt_row_size(w[i]->type, w[i]->cols);
        for (int64_t r0 = 0; r0 < w[i]->rows && n < max; r0 += chunk, n++) {
            const int64_t r1 = r0 + chunk < w[i]->rows ? r0 + chunk : w[i]->rows;
            r[n] = (kvt_wpf_range){(const char *)w[i]->data + r0 * wrs, (r1 - r0) * wrs};
        }
    }
    return n;
}

void kvt_matmul_par(kvt_threadpool *pool, const kvt_weight *const *w, float *const *y, int n_out, const float *x,
                    int64_t n_tok, void *scratch) {
    kvt_matmul_par_ex(pool, w, y, n_out, x, n_tok, scratch, NULL);
}

void kvt_matmul_par_ex(kvt_threadpool *pool, const kvt_weight *const *w, float *const *y, int n_out, const float *x,
                       int64_t n_tok, void *scratch, const kvt_mm_opts *opts) {
    mm_job J = {.n_part = n_out, .x = x, .n_tok = n_tok, .cols = w[0]->cols, .o = opts};
    const bool given = opts && opts->xq; // the input comes converted
    uint8_t *buf = scratch;
    kvt_type dot_types[2];
    for (int i = 0; i < n_out; i++) {
        J.part[i].w = w[i];
        J.part[i].y = y[i];
        J.part[i].xq = given ? opts->xq : NULL;
        if (given) continue;
        kvt_type dt = kvt_type_ops_get(w[i]->type)->vec_dot_type;
        int k = 0;
        while (k < J.n_cvt && dot_types[k] != dt) k++;
        if (k == J.n_cvt) { // a new dot type: convert the input once into the next buffer
            dot_types[k] = dt;
            J.cvt_ops[k] = kvt_type_ops_get(dt);
            J.cvt_row[k] = kvt_row_size(dt, J.cols);
            J.cvt_buf[k] = buf + (size_t)k * (size_t)((J.cols * 4 + 64) * n_tok);
            J.n_cvt++;
        }
        J.part[i].xq = J.cvt_buf[k];
    }
    // a few rows of decode input are converted faster here than a dispatch costs
    if (given) {
        // nothing to convert
    } else if (n_tok <= 4) {
        for (int64_t t = 0; t < (int64_t)J.n_cvt * n_tok; t++) cvt_task(&J, t, 0);
    } else {
        kvt_threadpool_run(pool, cvt_task, &J, (int64_t)J.n_cvt * n_tok);
    }
    int64_t n_tasks = 0;
    for (int i = 0; i < n_out; i++) {
        J.part[i].chunk = part_chunk(pool, w[i], n_tok, opts ? opts->row_align : 0);
        J.part[i].first = n_tasks;
        n_tasks += (w[i]->rows + J.part[i].chunk - 1) / J.part[i].chunk;
    }
    kvt_threadpool_run(pool, mm_task, &J, n_tasks);
}
