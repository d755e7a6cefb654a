#include "matmul_par.h"

#include "../kernels/matmul.h"
#include "../kernels/quant.h"

#include <string.h>

// Activations are converted to at most two dot types per call (e.g. Q8_K for
// q4_K and q6_K weights share one); two buffers of the widest (f32) size.
// (256 KiB: SmolLM2's gate/up and down in 2 tasks each, not 4; 13 of 16 alternating rounds faster than 128 KiB,
// TinyLlama's level: docs/log/BENCHMARKS-kernels-2.md, dec11e)
#define MIN_TASK_BYTES (256 * 1024)
// Batches of at least this many tokens are cut as prefill (part_chunk: larger tasks, mm_rows: the tail)
#define KVT_MM_PREFILL_TOKENS 16

int64_t kvt_matmul_scratch_bytes(int64_t max_cols, int64_t n_tok) { return 2 * (max_cols * 4 + 64) * n_tok + 128; }

// A group: consecutive parts whose matrices lie back to back (kvt_mm_opts' fused_y), run as one matrix; else one part.
typedef struct {
    kvt_weight w;     // the group's matrix: its first part's, rows = the parts' total
    float *y;         // where its tasks write: the part's y (one part), or its region of fused_y ([n_tok, w.rows])
    const void *xq;   // [n_tok, cols] in w's dot type
    int64_t chunk;    // rows per task of the equal cut (with a tail: mm_rows, as many tasks)
    int64_t unit;     // rows of a unit: the tasks' alignment (chunk and every task's first row are multiples)
    int tail;         // tasks of each of the tail's two sizes (mm_rows; 0: every task chunk rows)
    int64_t first;    // first task index of this group
    int p0, p1;       // its parts [p0, p1)
} mm_group;

typedef struct {
    float *y;
    int64_t off; // first row in its group
} mm_part;

typedef struct {
    mm_group grp[KVT_MM_MAX_OUT];
    mm_part part[KVT_MM_MAX_OUT];
    int n_grp;
    const float *x;
    int64_t n_tok, cols;
    // conversion tasks (when run on the pool)
    const kvt_type_ops *cvt_ops[2];
    void *cvt_buf[2];
    int64_t cvt_row[2];
    int n_cvt;
    const kvt_mm_opts *o; // epilogue (kvt_matmul_par_ex), or NULL
} mm_job;

static int64_t part_chunk(const kvt_threadpool *pool, const kvt_weight *w, int64_t n_tok, int64_t row_align,
                          int64_t *unit);

// Prefill's tail (mm_group's tail > 0): the tasks are claimed in index order, and on a loaded machine the threads'
// rates differ, so with equal tasks one thread waited at a job's end for most of a task (2 threads, TinyLlama F16
// pp512: ~0.9 ms of CPU a token, docs/log/BENCHMARKS-kernels-5.md, ptask). So the same number of tasks is cut
// unequally: the last `tail` tasks a quarter chunk each, the `tail` before them half a chunk, the first ones share
// the rest (larger than a chunk), and the threads end within a small task of each other. The count stays that of
// equal chunks because each task packs the activations once (the kernels' GEMM): more tasks would cost more packs.
// A row's bits do not depend on its task (matmul.h). Task i of G: writes its rows [*r0, *r1); false if it has none.
static int64_t mm_units(const mm_group *G) { return (G->w.rows + G->unit - 1) / G->unit; }
static int64_t mm_count(const mm_group *G) { return (G->w.rows + G->chunk - 1) / G->chunk; }

static bool mm_rows(const mm_group *G, int64_t i, int64_t *r0, int64_t *r1) {
    const int64_t R = G->w.rows, U = mm_units(G), c = G->chunk / G->unit, N = mm_count(G);
    if (i < 0 || i >= N) return false;
    int64_t a = i * c, b = a + c;
    if (G->tail > 0) {
        const int64_t t = G->tail, h = (c + 1) / 2, q = (c + 3) / 4, nh = N - 2 * t, uh = U - t * (h + q);
        const int64_t base = uh / nh, ex = uh % nh;
        if (i < nh) {
            a = i * base + (i < ex ? i : ex);
            b = a + base + (i < ex);
        } else if (i < nh + t) {
            a = uh + (i - nh) * h;
            b = a + h;
        } else {
            a = uh + t * h + (i - nh - t) * q;
            b = a + q;
        }
    }
    *r0 = a * G->unit;
    *r1 = b * G->unit < R ? b * G->unit : R;
    return true;
}

// The tail's threads for G (mm_rows), or 0 where the cut would not be smaller towards the end.
static int mm_tail(const mm_group *G, int nt) {
    const int64_t c = G->chunk / G->unit, N = mm_count(G), h = (c + 1) / 2, q = (c + 3) / 4;
    if (nt < 2 || c < 2 || N <= 2 * (int64_t)nt) return 0;
    return (mm_units(G) - nt * (h + q)) / (N - 2 * nt) >= c ? nt : 0;
}

// Parts i - 1 and i in one group: fusion asked for (fused_y), the same type and cols, i's rows right after i - 1's,
// and i's first row a multiple of row_align in the group (so every epilogue's first row is one too).
static bool mm_joins(const kvt_weight *const *w, int i, int64_t group_rows, const kvt_mm_opts *o) {
    if (!o || !o->fused_y) return false;
    const kvt_weight *a = w[i - 1], *b = w[i];
    const int64_t rs = kvt_row_size(a->type, a->cols), ra = o->row_align > 1 ? o->row_align : 1;
    return a->type == b->type && a->cols == b->cols && rs > 0 && group_rows % ra == 0 &&
           (const char *)a->data + a->rows * rs == (const char *)b->data;
}

// Fills J's groups (w, p0, p1, y, chunk, first) and parts' offsets; the parts' y and the groups' xq are the caller's.
// Returns the number of tasks.
static int64_t mm_plan(const kvt_threadpool *pool, mm_job *J, const kvt_weight *const *w, float *const *y, int n_out,
                       int64_t n_tok, const kvt_mm_opts *o) {
    J->n_grp = 0;
    int64_t fused_rows = 0, n_tasks = 0;
    for (int i = 0; i < n_out; i++) {
        mm_group *G = J->n_grp > 0 ? &J->grp[J->n_grp - 1] : NULL;
        if (G && mm_joins(w, i, G->w.rows, o)) {
            J->part[i].off = G->w.rows;
            G->w.rows += w[i]->rows;
            G->p1 = i + 1;
        } else {
            G = &J->grp[J->n_grp++];
            *G = (mm_group){.w = *w[i], .y = y ? y[i] : NULL, .p0 = i, .p1 = i + 1};
            J->part[i].off = 0;
        }
        J->part[i].y = y ? y[i] : NULL;
    }
    // prefill: the tail for the last group and those of its shape (parts of one shape keep the same chunks)
    const mm_group *last = J->n_grp > 0 ? &J->grp[J->n_grp - 1] : NULL; // (no product: no group, grp[-1] undefined)
    const int nt = kvt_threadpool_n_threads(pool);
    for (int g = 0; g < J->n_grp; g++) {
        mm_group *G = &J->grp[g];
        if (G->p1 - G->p0 > 1) {
            G->y = o->fused_y + fused_rows * n_tok;
            fused_rows += G->w.rows;
        }
        G->chunk = part_chunk(pool, &G->w, n_tok, o ? o->row_align : 0, &G->unit);
        const bool same = G->w.rows == last->w.rows && kvt_row_size(G->w.type, G->w.cols) ==
                                                            kvt_row_size(last->w.type, last->w.cols);
        G->tail = n_tok >= KVT_MM_PREFILL_TOKENS && same ? mm_tail(G, nt) : 0;
        G->first = n_tasks;
        n_tasks += mm_count(G);
    }
    return n_tasks;
}

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
    int g = J->n_grp - 1;
    while (g > 0 && t < J->grp[g].first) g--;
    const mm_group *G = &J->grp[g];
    const int64_t chunk = t - G->first;
    int64_t r0 = 0, r1 = 0;
    mm_rows(G, chunk, &r0, &r1);
    kvt_matmul_rows(G->w.type, J->cols, G->w.data, r0, r1, G->xq, J->n_tok, G->y, G->w.rows);
    if (G->p1 - G->p0 == 1) {
        if (J->o && J->o->epilogue) J->o->epilogue(J->o->ctx, G->p0, chunk, r0, r1);
        return;
    }
    for (int i = G->p0; i < G->p1; i++) { // a fused group: each part's rows of the task to its y, then its epilogue
        const mm_part *P = &J->part[i];
        const int64_t rows = (i + 1 < G->p1 ? J->part[i + 1].off : G->w.rows) - P->off;
        const int64_t a = r0 > P->off ? r0 : P->off, b = r1 < P->off + rows ? r1 : P->off + rows;
        if (a >= b) continue;
        for (int64_t k = 0; k < J->n_tok; k++) {
            memcpy(P->y + k * rows + (a - P->off), G->y + k * G->w.rows + a, (size_t)(b - a) * sizeof(float));
        }
        if (J->o->epilogue) J->o->epilogue(J->o->ctx, i, chunk, a - P->off, b - P->off);
    }
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
// (*unit: the alignment, a divisor of the result)
static int64_t part_chunk(const kvt_threadpool *pool, const kvt_weight *w, int64_t n_tok, int64_t row_align,
                          int64_t *unit) {
    const int nt = kvt_threadpool_n_threads(pool);
    const bool prefill = n_tok >= KVT_MM_PREFILL_TOKENS;
    const int64_t per_thread = prefill ? 4 : 8;
    const int64_t align0 = prefill ? 2 * KVT_MATMUL_MIN_CHUNK_ROWS : KVT_MATMUL_MIN_CHUNK_ROWS;
    const int64_t ra = row_align > 1 ? row_align : 1, align = align0 / gcd64(align0, ra) * ra; // lcm
    *unit = align;
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
                          const kvt_mm_opts *opts, kvt_wpf_range *r, int max) {
    mm_job J;
    mm_plan(pool, &J, w, NULL, n_out, n_tok, opts);
    int n = 0;
    for (int g = 0; g < J.n_grp; g++) {
        const mm_group *G = &J.grp[g];
        const int64_t wrs = kvt_row_size(G->w.type, G->w.cols);
        int64_t r0, r1;
        for (int64_t i = 0; n < max && mm_rows(G, i, &r0, &r1); i++, n++) {
            r[n] = (kvt_wpf_range){(const char *)G->w.data + r0 * wrs, (r1 - r0) * wrs};
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
    mm_job J = {.x = x, .n_tok = n_tok, .cols = w[0]->cols, .o = opts};
    const int64_t n_tasks = mm_plan(pool, &J, w, y, n_out, n_tok, opts);
    const bool given = opts && opts->xq; // the input comes converted
    uint8_t *buf = scratch;
    kvt_type dot_types[2];
    for (int g = 0; g < J.n_grp; g++) {
        J.grp[g].xq = given ? opts->xq : NULL;
        if (given) continue;
        kvt_type dt = kvt_type_ops_get(J.grp[g].w.type)->vec_dot_type;
        int k = 0;
        while (k < J.n_cvt && dot_types[k] != dt) k++;
        if (k == J.n_cvt) { // a new dot type: convert the input once into the next buffer
            dot_types[k] = dt;
            J.cvt_ops[k] = kvt_type_ops_get(dt);
            J.cvt_row[k] = kvt_row_size(dt, J.cols);
            J.cvt_buf[k] = buf + (size_t)k * (size_t)((J.cols * 4 + 64) * n_tok);
            J.n_cvt++;
        }
        J.grp[g].xq = J.cvt_buf[k];
    }
    // a few rows of decode input are converted faster here than a dispatch costs
    if (given) {
        // nothing to convert
    } else if (n_tok <= 4) {
        for (int64_t t = 0; t < (int64_t)J.n_cvt * n_tok; t++) cvt_task(&J, t, 0);
    } else {
        kvt_threadpool_run(pool, cvt_task, &J, (int64_t)J.n_cvt * n_tok);
    }
    kvt_threadpool_run(pool, mm_task, &J, n_tasks);
}
