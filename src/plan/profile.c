// profile.c - measuring a machine for the planner, and profile JSON I/O.
#include "profile.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../base/file.h"
#include "../base/json.h"
#include "../base/membw.h"
#include "../base/threadpool.h"
#include "../base/timer.h"
#include "../exec/matmul_par.h"
#include "../kernels/matmul.h"
#include "../kernels/quant.h"

void kvt_profile_init(kvt_profile *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "unknown");
}

// ---------------------------------------------------------------- system facts

int64_t kvt_profile_l3_bytes(void) {
    for (int i = 0; i < 8; i++) {
        char path[128], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int level = 0;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        if (level != 3) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(path, "r"))) continue;
        int64_t v = 0;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            v = strtoll(buf, &end, 10);
            if (*end == 'K') v *= 1024;
            else if (*end == 'M') v *= 1024 * 1024;
        }
        fclose(f);
        return v;
    }
    return 0;
}

int64_t kvt_profile_ram_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (int64_t)pages * psz : 0;
}

double kvt_profile_cpu_gemv(const kvt_profile *p, kvt_type t) {
    if ((int)t >= 0 && t < KVT_TYPE_COUNT && p->cpu_gemv_gbps[t] > 0) return p->cpu_gemv_gbps[t];
    return p->cpu_read_gbps;
}

double kvt_profile_l3_gbps(const kvt_profile *p) { return p->l3_read_gbps > 0 ? p->l3_read_gbps : 3.0 * p->cpu_read_gbps; }

// ---------------------------------------------------------------- GEMV / GEMM

// W: `rows` copies of one quantized row of n pseudo-random values, laid out as the model lays out a matrix of type t
// at load (model.c model_repack): repacked where kvt_type_repack(t) has a repacking (f16 and bf16 into 16-row
// panels, q4_K_x8, q8_0_x8, q4_0_x8, q4_1_x8, q5_K_x8, q6_K_r where the AVX2 kernels run; rows rounded up to its row
// multiple), on huge pages where the kernel gives them. *type_out: the type the kernels then read; *rows_io: the rows
// made; *bytes_out: the mapping's size (free with munmap).
static void *make_rows(kvt_type t, int64_t n, int64_t *rows_io, size_t *bytes_out, kvt_type *type_out) {
    const kvt_type_ops *ops = kvt_type_ops_get(t);
    const kvt_repack_ops *rp = kvt_type_repack(t);
    if (rp && rp->col_align > 1 && n % rp->col_align) rp = NULL;
    const int64_t align = rp && rp->row_align > 1 ? rp->row_align : 1;
    const int64_t rows = (*rows_io + align - 1) / align * align;
    const int64_t rs = kvt_row_size(t, n);
    if (!ops || !ops->from_float || rs <= 0) return NULL;
    const size_t bytes = (size_t)(rs * rows);
    float *src = malloc((size_t)n * sizeof(float));
    void *one = malloc((size_t)(rs * align)); // the first `align` rows, of type t
    void *W = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (W == MAP_FAILED) W = NULL;
    if (src && one && W) {
        madvise(W, bytes, MADV_HUGEPAGE);
        uint32_t s = 12345;
        for (int64_t i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            src[i] = (float)((s >> 8) & 0xFFFF) / 65536.0f - 0.5f;
        }
        ops->from_float(src, one, n);
        for (int64_t r = 1; r < align; r++) memcpy((char *)one + r * rs, one, (size_t)rs);
        if (rp) rp->pack(one, W, align, n); // one panel; every panel the same (all rows are)
        else memcpy(W, one, (size_t)rs);
        for (int64_t r = align; r < rows; r += align) memcpy((char *)W + r * rs, W, (size_t)(rs * align));
        *rows_io = rows;
        *bytes_out = bytes;
        *type_out = rp ? rp->to : t;
    } else if (W) {
        munmap(W, bytes);
        W = NULL;
    }
    free(src);
    free(one);
    return W;
}

// Measured through kvt_matmul_par, the dispatch the forward pass uses (activation conversion, task split,
// GEMV or GEMM kernels of the running CPU), so that the figures are what decode and prefill achieve.
double kvt_profile_gemv_gbps(kvt_type t, int64_t width, int64_t bytes, int n_threads, int reps, double *gemm_gflops,
                             int gemm_tok) {
    if (gemm_gflops) *gemm_gflops = 0;
    const kvt_type_ops *ops = kvt_type_ops_get(t);
    if (!ops || !ops->vec_dot || width < 256 || width % 256) return 0;
    const int64_t n = width; // input width (a multiple of every block size)
    const int64_t rs = kvt_row_size(t, n);
    int64_t rows = bytes / rs;
    if (rows < 64) rows = 64;
    const int64_t tok = gemm_tok > 1 ? gemm_tok : 1;
    size_t w_bytes = 0;
    kvt_type wt = t;
    void *W = make_rows(t, n, &rows, &w_bytes, &wt);             // [rows, n] type t (as the model lays it out: wt)
    float *Y = malloc((size_t)(rows > 4096 * tok ? rows : 4096 * tok) * sizeof(float)); // [tok, rows]
    float *xf = malloc((size_t)(n * tok) * sizeof(float));      // [tok, n] f32 activations
    void *scratch = NULL;                                        // converted activations
    kvt_threadpool *pool = NULL;
    double best = 0;
    if (!W || !Y || !xf || posix_memalign(&scratch, 64, (size_t)kvt_matmul_scratch_bytes(n, tok)) ||
        kvt_threadpool_init(n_threads, &pool, NULL))
        goto done;
    for (int64_t i = 0; i < n * tok; i++) xf[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    kvt_weight w = {.data = W, .type = wt, .cols = n, .rows = rows};
    const kvt_weight *wp = &w;
    float *yp = Y;
    kvt_matmul_par(pool, &wp, &yp, 1, xf, 1, scratch); // warm-up (page faults)
    // At least `reps` runs and at least MIN_SEC seconds of runs. GEMV (bandwidth): the median, what
    // decode sustains while the machine is as it is now (a best-of picks bursts of a shared memory
    // bus); GEMM (compute): the best, so that a short disturbance on a core does not set the figure.
    enum { MAX_RUNS = 1000 };
    const double MIN_SEC = 0.25;
    double bws[MAX_RUNS];
    int n_bw = 0;
    int64_t t_start = kvt_time_ns();
    for (int r = 0; r < MAX_RUNS && (r < reps || (double)(kvt_time_ns() - t_start) / 1e9 < MIN_SEC); r++) {
        int64_t t0 = kvt_time_ns();
        kvt_matmul_par(pool, &wp, &yp, 1, xf, 1, scratch);
        double sec = (double)(kvt_time_ns() - t0) / 1e9;
        bws[n_bw++] = (double)(rows * rs) / sec / 1e9;
    }
    kvt_sort_f64(bws, n_bw);
    best = n_bw ? bws[n_bw / 2] : 0;
    if (gemm_gflops && tok > 1) {
        // GEMM: a (tok, n) x (n, m) product with m = min(rows, max(4096, 2n)) output rows (narrower models
        // have smaller matrices, about 2n rows on average over attention and FFN projections)
        const int64_t m_out = n >= 2048 ? 4096 : 2 * n;
        w.rows = rows < m_out ? rows : m_out;
        kvt_matmul_par(pool, &wp, &yp, 1, xf, tok, scratch); // warm-up (panels, scratch)
        double gbest = 0;
        t_start = kvt_time_ns();
        for (int r = 0; r < MAX_RUNS && (r < (reps > 2 ? reps : 2) || (double)(kvt_time_ns() - t_start) / 1e9 < MIN_SEC); r++) {
            int64_t t0 = kvt_time_ns();
            kvt_matmul_par(pool, &wp, &yp, 1, xf, tok, scratch);
            double sec = (double)(kvt_time_ns() - t0) / 1e9;
            double gf = 2.0 * (double)w.rows * (double)n * (double)tok / sec / 1e9;
            if (gf > gbest) gbest = gf;
        }
        *gemm_gflops = gbest;
    }
done:
    kvt_threadpool_free(pool);
    if (W) munmap(W, w_bytes);
    free(scratch);
    free(Y);
    free(xf);
    return best;
}

// ---------------------------------------------------------------- disk

kvt_status kvt_profile_disk(const char *dir, int64_t bytes, kvt_profile *p, kvt_err *err) {
    const size_t req = 1 << 20, small = 4096;
    char path[300];
    snprintf(p->disk_dir, sizeof p->disk_dir, "%s", dir);
    snprintf(path, sizeof path, "%s/kvtier-profile-%ld.tmp", dir, (long)getpid());
    struct statvfs sv;
    if (statvfs(dir, &sv) == 0) p->disk_free_bytes = (int64_t)sv.f_bavail * (int64_t)sv.f_frsize;
    p->disk_o_direct = true;
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) { // tmpfs and some file systems refuse O_DIRECT
        p->disk_o_direct = false;
        fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    }
    if (fd < 0) return kvt_errorf(err, KVT_ERR_IO, "profile: cannot create %s: %s", path, strerror(errno));
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, req)) {
        close(fd);
        unlink(path);
        return kvt_errorf(err, KVT_ERR_NOMEM, "profile: no memory for the disk buffer");
    }
    memset(buf, 0x5a, req);
    int64_t n_req = bytes / (int64_t)req;
    if (n_req < 4) n_req = 4;
    kvt_status st = KVT_OK;
    int64_t t0 = kvt_time_ns();
    for (int64_t i = 0; i < n_req && !st; i++) {
        if (pwrite(fd, buf, req, (off_t)(i * (int64_t)req)) != (ssize_t)req) st = KVT_ERR_IO;
    }
    if (!st && fsync(fd)) st = KVT_ERR_IO;
    double s = (double)(kvt_time_ns() - t0) / 1e9;
    if (!st) p->disk_write_gbps = (double)(n_req * (int64_t)req) / s / 1e9;
    if (!p->disk_o_direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    t0 = kvt_time_ns();
    for (int64_t i = 0; i < n_req && !st; i++) {
        if (pread(fd, buf, req, (off_t)(i * (int64_t)req)) != (ssize_t)req) st = KVT_ERR_IO;
    }
    s = (double)(kvt_time_ns() - t0) / 1e9;
    if (!st) p->disk_read_gbps = (double)(n_req * (int64_t)req) / s / 1e9;
    // latency: 64 single 4 KiB reads at scattered offsets, then 32 synchronous 4 KiB writes
    const int n_lat = 64;
    t0 = kvt_time_ns();
    for (int i = 0; i < n_lat && !st; i++) {
        off_t off = (off_t)(((int64_t)i * 7919 % (n_req * (int64_t)(req / small))) * (int64_t)small);
        if (pread(fd, buf, small, off) != (ssize_t)small) st = KVT_ERR_IO;
    }
    if (!st) p->disk_read_latency_us = (double)(kvt_time_ns() - t0) / 1e3 / n_lat;
    t0 = kvt_time_ns();
    for (int i = 0; i < n_lat / 2 && !st; i++) {
        if (pwrite(fd, buf, small, (off_t)((int64_t)i * (int64_t)small)) != (ssize_t)small || fdatasync(fd)) st = KVT_ERR_IO;
    }
    if (!st) p->disk_write_latency_us = (double)(kvt_time_ns() - t0) / 1e3 / (n_lat / 2);
    int e = errno;
    close(fd);
    unlink(path);
    free(buf);
    if (st) return kvt_errorf(err, st, "profile: disk I/O in %s failed: %s", dir, strerror(e));
    return KVT_OK;
}

// ---------------------------------------------------------------- measure all

kvt_status kvt_profile_measure(const kvt_profile_opts *o, kvt_profile *p, kvt_err *err) {
    kvt_profile_init(p);
    int nt = o->n_threads > 0 ? o->n_threads : kvt_physical_cores();
    char host[64] = "localhost";
    gethostname(host, sizeof host - 1);
    snprintf(p->name, sizeof p->name, "%s (measured by kvtier profile)", host);
    p->cpu_threads = nt;
    p->l3_bytes = kvt_profile_l3_bytes();
    p->ram_bytes = kvt_profile_ram_bytes();
    p->ram_reserved_bytes = p->ram_bytes / 16 > ((int64_t)1 << 30) ? ((int64_t)1 << 30) : p->ram_bytes / 16;
    // Buffers > L3 so that figures are DRAM figures: 8 x L3 (at least 256 MiB; quick: 4 x L3, >= 64 MiB).
    int64_t big = (o->quick ? 4 : 8) * (p->l3_bytes > 0 ? p->l3_bytes : ((int64_t)32 << 20));
    int64_t floor_b = o->quick ? ((int64_t)64 << 20) : ((int64_t)256 << 20);
    if (big < floor_b) big = floor_b;
    int reps = o->quick ? 3 : 6;
    kvt_threadpool *pool;
    kvt_status st = kvt_threadpool_init(nt, &pool, err);
    if (st) return st;
    p->cpu_read_gbps = kvt_measure_read_bw(pool, big, reps) / 1e9;
    kvt_threadpool_free(pool);
    if (o->log) fprintf(o->log, "cpu: %d threads, DRAM read %.1f GB/s, L3 %lld bytes\n", nt, p->cpu_read_gbps, (long long)p->l3_bytes);
    if (p->cpu_read_gbps <= 0) return kvt_errorf(err, KVT_ERR_NOMEM, "profile: cannot allocate %lld bytes for the bandwidth test", (long long)big);
    // (the row-kernel types of kernels/quant_lowbit.h too: their batches are far slower than the GEMM-tiled types',
    // which the planner would otherwise assume for them)
    static const kvt_type all[] = {KVT_TYPE_F32,  KVT_TYPE_F16,  KVT_TYPE_BF16, KVT_TYPE_Q8_0,   KVT_TYPE_Q4_0,
                                   KVT_TYPE_Q4_1, KVT_TYPE_Q4_K, KVT_TYPE_Q5_K, KVT_TYPE_Q6_K,   KVT_TYPE_Q5_0,
                                   KVT_TYPE_Q5_1, KVT_TYPE_Q2_K, KVT_TYPE_Q3_K, KVT_TYPE_IQ4_NL, KVT_TYPE_IQ4_XS};
    static const kvt_type few[] = {KVT_TYPE_F16, KVT_TYPE_Q8_0, KVT_TYPE_Q4_K, KVT_TYPE_Q6_K};
    const kvt_type *types = o->quick ? few : all;
    int n_types = o->quick ? (int)(sizeof few / sizeof few[0]) : (int)(sizeof all / sizeof all[0]);
    for (int i = 0; i < n_types; i++) {
        kvt_type t = types[i];
        double gf = 0;
        p->cpu_gemv_gbps[t] = kvt_profile_gemv_gbps(t, 4096, big, nt, reps, &gf, 128);
        p->cpu_gemm_gflops[t] = gf;
        if (!o->quick) { // narrower rows, as in small models: the kernels reach other rates there
            p->cpu_gemv_gbps_1024[t] = kvt_profile_gemv_gbps(t, 1024, big, nt, reps, &p->cpu_gemm_gflops_1024[t], 128);
            p->cpu_gemv_gbps_2048[t] = kvt_profile_gemv_gbps(t, 2048, big, nt, reps, &p->cpu_gemm_gflops_2048[t], 128);
        }
        if (o->log) {
            fprintf(o->log, "cpu: %-5s GEMV %.1f GB/s (rows of 1024 / 2048: %.1f / %.1f), GEMM(n_tok=128) %.1f GFLOP/s (%.1f / %.1f)\n",
                    kvt_type_name(t), p->cpu_gemv_gbps[t], p->cpu_gemv_gbps_1024[t], p->cpu_gemv_gbps_2048[t], gf,
                    p->cpu_gemm_gflops_1024[t], p->cpu_gemm_gflops_2048[t]);
        }
    }
    if ((st = kvt_profile_attn(nt, reps, p, err))) return st;
    if ((st = kvt_profile_swiglu(nt, reps, p, err))) return st;
    if (o->log) {
        fprintf(o->log, "cpu: attention (f16 KV) decode %.1f GFLOP/s, prefill %.1f GFLOP/s (%d-token prompt), %.1f GFLOP/s "
                "(%d queries at %d); SwiGLU %.2f G elements/s\n", p->cpu_attn_gflops, p->cpu_attn_prefill_gflops,
                KVT_PROFILE_ATTN_PROMPT, p->cpu_attn_prefill_deep_gflops, KVT_PROFILE_ATTN_DEEP_N, KVT_PROFILE_ATTN_DEEP_POS,
                p->cpu_swiglu_gelems);
    }
    const char *dir = o->dir ? o->dir : "/tmp";
    st = kvt_profile_disk(dir, o->quick ? ((int64_t)64 << 20) : ((int64_t)512 << 20), p, err);
    if (st) return st;
    if (o->log) {
        fprintf(o->log, "disk %s%s: read %.2f GB/s, write %.2f GB/s, 4 KiB latency read %.0f us, write %.0f us\n", dir,
                p->disk_o_direct ? " (O_DIRECT)" : " (no O_DIRECT: page cache)", p->disk_read_gbps, p->disk_write_gbps,
                p->disk_read_latency_us, p->disk_write_latency_us);
    }
    kvt_err gerr = {0};
    if (kvt_profile_gpu(0, o->quick, p, &gerr)) {
        if (o->log) fprintf(o->log, "gpu: none measured (%s)\n", gerr.msg);
    } else if (o->log) {
        fprintf(o->log,
                "gpu: %s, %.2f GB VRAM, memory %.0f GB/s, GEMM %.0f GFLOP/s, H2D %.1f GB/s (%.1f us), D2H %.1f GB/s "
                "(%.1f us)\n",
                p->gpu_name, (double)p->vram_bytes / 1e9, p->gpu_mem_gbps, p->gpu_gemm_gflops, p->h2d_gbps,
                p->h2d_latency_us, p->d2h_gbps, p->d2h_latency_us);
    }
    // kvtier's own device path (the backend table: matvec, the device KV's batched copies), for the planner's GPU
    // decode figures; over the table's CPU emulation (tests) only logged, labelled, and never saved (no GPU)
    char dev[96];
    gerr = (kvt_err){0};
    if (kvt_profile_gpu_kernels(o->quick, p, dev, sizeof dev, &gerr)) {
        if (o->log) fprintf(o->log, "gpu kernels: none measured (%s)\n", gerr.msg);
    } else if (o->log) {
        fprintf(o->log, "gpu kernels%s: %s, matvec Q4_K %.1f GB/s, F16 %.1f GB/s, KV batched copies %.1f GB/s\n",
                strstr(dev, "emulation") ? " (EMULATION: not a GPU measurement, not saved)" : "", dev,
                p->gpu_gemv_gbps[KVT_TYPE_Q4_K], p->gpu_gemv_gbps[KVT_TYPE_F16], p->gpu_kv_copy_gbps);
    }
    if (!p->has_gpu) { // (figures of a device the probe did not measure: not part of the profile)
        memset(p->gpu_gemv_gbps, 0, sizeof p->gpu_gemv_gbps);
        p->gpu_kv_copy_gbps = 0;
    }
    return KVT_OK;
}

// ---------------------------------------------------------------- JSON out

static void kv_pos(kvt_json *j, const char *k, double v) {
    if (v != 0) kvt_json_kv_num(j, k, v);
}

static void type_map(kvt_json *j, const char *key, const double *v) {
    kvt_json_key(j, key);
    kvt_json_obj_begin(j);
    for (int t = 0; t < KVT_TYPE_COUNT; t++) {
        if (v[t] > 0) kvt_json_kv_num(j, kvt_type_name((kvt_type)t), v[t]);
    }
    kvt_json_obj_end(j);
}

void kvt_profile_write(const kvt_profile *p, FILE *f) {
    kvt_json j;
    kvt_json_init(&j, f);
    kvt_json_obj_begin(&j);
    kvt_json_kv_str(&j, "name", p->name);
    kvt_json_kv_int(&j, "cpu_threads", p->cpu_threads);
    kvt_json_kv_num(&j, "cpu_read_gbps", p->cpu_read_gbps);
    kvt_json_kv_int(&j, "l3_bytes", p->l3_bytes);
    kv_pos(&j, "l3_read_gbps", p->l3_read_gbps);
    type_map(&j, "cpu_gemv_gbps", p->cpu_gemv_gbps);
    type_map(&j, "cpu_gemv_gbps_1024", p->cpu_gemv_gbps_1024);
    type_map(&j, "cpu_gemv_gbps_2048", p->cpu_gemv_gbps_2048);
    type_map(&j, "cpu_gemm_gflops", p->cpu_gemm_gflops);
    type_map(&j, "cpu_gemm_gflops_1024", p->cpu_gemm_gflops_1024);
    type_map(&j, "cpu_gemm_gflops_2048", p->cpu_gemm_gflops_2048);
    kv_pos(&j, "cpu_attn_gflops", p->cpu_attn_gflops);
    kv_pos(&j, "cpu_attn_prefill_gflops", p->cpu_attn_prefill_gflops);
    kv_pos(&j, "cpu_attn_prefill_deep_gflops", p->cpu_attn_prefill_deep_gflops);
    kv_pos(&j, "cpu_swiglu_gelems", p->cpu_swiglu_gelems);
    kvt_json_kv_num(&j, "cpu_block_overhead_ms", p->cpu_block_overhead_ms);
    kvt_json_kv_num(&j, "cpu_prefill_overhead_ms", p->cpu_prefill_overhead_ms);
    kvt_json_kv_int(&j, "ram_bytes", p->ram_bytes);
    kvt_json_kv_int(&j, "ram_reserved_bytes", p->ram_reserved_bytes);
    if (p->disk_dir[0]) kvt_json_kv_str(&j, "disk_dir", p->disk_dir);
    kv_pos(&j, "disk_read_gbps", p->disk_read_gbps);
    kv_pos(&j, "disk_write_gbps", p->disk_write_gbps);
    kv_pos(&j, "disk_read_latency_us", p->disk_read_latency_us);
    kv_pos(&j, "disk_write_latency_us", p->disk_write_latency_us);
    if (p->disk_free_bytes) kvt_json_kv_int(&j, "disk_free_bytes", p->disk_free_bytes);
    if (p->disk_dir[0]) kvt_json_kv_bool(&j, "disk_o_direct", p->disk_o_direct);
    if (p->has_gpu) {
        kvt_json_kv_str(&j, "gpu_name", p->gpu_name);
        kvt_json_kv_int(&j, "vram_bytes", p->vram_bytes);
        kvt_json_kv_int(&j, "vram_reserved_bytes", p->vram_reserved_bytes);
        kvt_json_kv_num(&j, "gpu_mem_gbps", p->gpu_mem_gbps);
        kv_pos(&j, "gpu_gemm_gflops", p->gpu_gemm_gflops);
        kvt_json_kv_num(&j, "h2d_gbps", p->h2d_gbps);
        kvt_json_kv_num(&j, "d2h_gbps", p->d2h_gbps);
        kvt_json_kv_num(&j, "h2d_latency_us", p->h2d_latency_us);
        kvt_json_kv_num(&j, "d2h_latency_us", p->d2h_latency_us);
        kvt_json_kv_num(&j, "gpu_block_overhead_ms", p->gpu_block_overhead_ms);
        type_map(&j, "gpu_gemv_gbps", p->gpu_gemv_gbps);
        kv_pos(&j, "gpu_kv_copy_gbps", p->gpu_kv_copy_gbps);
    }
    kvt_json_obj_end(&j);
    fputc('\n', f);
}

static void profile_write_cb(void *ctx, FILE *f) { kvt_profile_write(ctx, f); }

kvt_status kvt_profile_save(const kvt_profile *p, const char *path, kvt_err *err) {
    return kvt_file_write_atomic(path, profile_write_cb, (void *)p, err); // a partial profile is never left
}

// ---------------------------------------------------------------- JSON in

static void type_map_read(const kvt_jv *root, const char *key, double *v) {
    const kvt_jv *m = kvt_jv_get(root, key);
    if (!m || m->kind != KVT_JV_OBJ) return;
    for (int i = 0; i < m->n_kids; i++) {
        kvt_type t;
        if (m->kids[i].kind == KVT_JV_NUM && kvt_type_from_name(m->kids[i].key, &t) && t < KVT_TYPE_COUNT) v[t] = m->kids[i].num;
    }
}

kvt_status kvt_profile_parse(const char *text, kvt_profile *p, kvt_err *err) {
    kvt_jv root;
    kvt_status st = kvt_jv_parse(text, &root, err);
    if (st) return st;
    if (root.kind != KVT_JV_OBJ) {
        kvt_jv_free(&root);
        return kvt_errorf(err, KVT_ERR_FORMAT, "profile: not a JSON object");
    }
    kvt_profile_init(p);
    snprintf(p->name, sizeof p->name, "%s", kvt_jv_str(&root, "name", "unnamed"));
    const double threads = kvt_jv_num(&root, "cpu_threads", 0); // range-checked before the int32_t conversion
    if (!(threads >= 0 && threads <= 1 << 20)) {
        kvt_jv_free(&root);
        return kvt_errorf(err, KVT_ERR_FORMAT, "profile: cpu_threads must be 0..%d", 1 << 20);
    }
    p->cpu_threads = (int32_t)threads;
    p->cpu_read_gbps = kvt_jv_num(&root, "cpu_read_gbps", 0);
    p->l3_bytes = (int64_t)kvt_jv_num(&root, "l3_bytes", 0);
    p->l3_read_gbps = kvt_jv_num(&root, "l3_read_gbps", 0);
    type_map_read(&root, "cpu_gemv_gbps", p->cpu_gemv_gbps);
    type_map_read(&root, "cpu_gemv_gbps_1024", p->cpu_gemv_gbps_1024);
    type_map_read(&root, "cpu_gemv_gbps_2048", p->cpu_gemv_gbps_2048);
    type_map_read(&root, "cpu_gemm_gflops", p->cpu_gemm_gflops);
    type_map_read(&root, "cpu_gemm_gflops_1024", p->cpu_gemm_gflops_1024);
    type_map_read(&root, "cpu_gemm_gflops_2048", p->cpu_gemm_gflops_2048);
    p->cpu_attn_gflops = kvt_jv_num(&root, "cpu_attn_gflops", 0);
    p->cpu_attn_prefill_gflops = kvt_jv_num(&root, "cpu_attn_prefill_gflops", 0);
    p->cpu_attn_prefill_deep_gflops = kvt_jv_num(&root, "cpu_attn_prefill_deep_gflops", 0);
    p->cpu_swiglu_gelems = kvt_jv_num(&root, "cpu_swiglu_gelems", 0);
    p->cpu_block_overhead_ms = kvt_jv_num(&root, "cpu_block_overhead_ms", 0);
    p->cpu_prefill_overhead_ms = kvt_jv_num(&root, "cpu_prefill_overhead_ms", 0);
    p->ram_bytes = (int64_t)kvt_jv_num(&root, "ram_bytes", 0);
    p->ram_reserved_bytes = (int64_t)kvt_jv_num(&root, "ram_reserved_bytes", 0);
    snprintf(p->disk_dir, sizeof p->disk_dir, "%s", kvt_jv_str(&root, "disk_dir", ""));
    p->disk_read_gbps = kvt_jv_num(&root, "disk_read_gbps", 0);
    p->disk_write_gbps = kvt_jv_num(&root, "disk_write_gbps", 0);
    p->disk_read_latency_us = kvt_jv_num(&root, "disk_read_latency_us", 0);
    p->disk_write_latency_us = kvt_jv_num(&root, "disk_write_latency_us", 0);
    p->disk_free_bytes = (int64_t)kvt_jv_num(&root, "disk_free_bytes", 0);
    p->disk_o_direct = kvt_jv_num(&root, "disk_o_direct", 0) != 0;
    p->vram_bytes = (int64_t)kvt_jv_num(&root, "vram_bytes", 0);
    p->has_gpu = p->vram_bytes > 0;
    snprintf(p->gpu_name, sizeof p->gpu_name, "%s", kvt_jv_str(&root, "gpu_name", ""));
    p->vram_reserved_bytes = (int64_t)kvt_jv_num(&root, "vram_reserved_bytes", 0);
    p->gpu_mem_gbps = kvt_jv_num(&root, "gpu_mem_gbps", 0);
    p->gpu_gemm_gflops = kvt_jv_num(&root, "gpu_gemm_gflops", 0);
    p->h2d_gbps = kvt_jv_num(&root, "h2d_gbps", 0);
    p->d2h_gbps = kvt_jv_num(&root, "d2h_gbps", 0);
    p->h2d_latency_us = kvt_jv_num(&root, "h2d_latency_us", 0);
    p->d2h_latency_us = kvt_jv_num(&root, "d2h_latency_us", 0);
    p->gpu_block_overhead_ms = kvt_jv_num(&root, "gpu_block_overhead_ms", 0);
    type_map_read(&root, "gpu_gemv_gbps", p->gpu_gemv_gbps);
    p->gpu_kv_copy_gbps = kvt_jv_num(&root, "gpu_kv_copy_gbps", 0);
    kvt_jv_free(&root);
    if (!(p->cpu_read_gbps > 0)) return kvt_errorf(err, KVT_ERR_FORMAT, "profile: cpu_read_gbps missing or not positive");
    if (p->has_gpu && !(p->gpu_mem_gbps > 0 && p->h2d_gbps > 0))
        return kvt_errorf(err, KVT_ERR_FORMAT, "profile: vram_bytes given but gpu_mem_gbps or h2d_gbps missing");
    return KVT_OK;
}

kvt_status kvt_profile_load(const char *path, kvt_profile *p, kvt_err *err) {
    char *text;
    kvt_status st = kvt_read_text(path, &text, NULL, err);
    if (st) return st;
    st = kvt_profile_parse(text, p, err);
    free(text);
    if (st) kvt_err_prefix(err, path);
    return st;
}

// ---------------------------------------------------------------- JSON reader

typedef struct {
    const char *s;
    size_t i;
    kvt_err *err;
} jp;

static void jp_ws(jp *p) {
    while (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r') p->i++;
}

static kvt_status jp_fail(jp *p, const char *what) {
    return kvt_errorf(p->err, KVT_ERR_FORMAT, "JSON: %s at byte %zu", what, p->i);
}

static kvt_status jp_string(jp *p, char **out) {
    if (p->s[p->i] != '"') return jp_fail(p, "expected a string");
    p->i++;
    size_t cap = 32, n = 0;
    char *b = malloc(cap);
    if (!b) return kvt_errorf(p->err, KVT_ERR_NOMEM, "JSON: out of memory");
    for (;;) {
        char c = p->s[p->i];
        if (c == 0) {
            free(b);
            return jp_fail(p, "unterminated string");
        }
        p->i++;
        if (c == '"') break;
        if (c == '\\') {
            char e = p->s[p->i++];
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': { // only \u00XX (what kvt_json writes) is decoded; others become '?'
                unsigned v = 0;
                for (int k = 0; k < 4; k++) {
                    char h = p->s[p->i];
                    if (!h) break;
                    p->i++;
                    v = v * 16 + (unsigned)(h >= 'a' ? h - 'a' + 10 : h >= 'A' ? h - 'A' + 10 : h - '0');
                }
                c = v < 0x100 ? (char)v : '?';
                break;
            }
            case 0: free(b); return jp_fail(p, "bad escape");
            default: c = e; break;
            }
        }
        if (n + 2 > cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return kvt_errorf(p->err, KVT_ERR_NOMEM, "JSON: out of memory");
            }
            b = nb;
        }
        b[n++] = c;
    }
    b[n] = 0;
    *out = b;
    return KVT_OK;
}

static kvt_status jp_value(jp *p, kvt_jv *v, int depth);

static kvt_status jp_push(jp *p, kvt_jv *parent, kvt_jv **slot) {
    if ((parent->n_kids & (parent->n_kids - 1)) == 0) { // grow at powers of two
        int cap = parent->n_kids ? parent->n_kids * 2 : 4;
        kvt_jv *nk = realloc(parent->kids, (size_t)cap * sizeof(kvt_jv));
        if (!nk) return kvt_errorf(p->err, KVT_ERR_NOMEM, "JSON: out of memory");
        parent->kids = nk;
    }
    *slot = &parent->kids[parent->n_kids++];
    memset(*slot, 0, sizeof **slot);
    return KVT_OK;
}

static kvt_status jp_value(jp *p, kvt_jv *v, int depth) {
    memset(v, 0, sizeof *v);
    if (depth > 32) return jp_fail(p, "nesting too deep");
    jp_ws(p);
    char c = p->s[p->i];
    kvt_status st;
    if (c == '{' || c == '[') {
        const bool obj = c == '{';
        v->kind = obj ? KVT_JV_OBJ : KVT_JV_ARR;
        p->i++;
        jp_ws(p);
        if (p->s[p->i] == (obj ? '}' : ']')) {
            p->i++;
            return KVT_OK;
        }
        for (;;) {
            jp_ws(p);
            char *key = NULL;
            if (obj) {
                if ((st = jp_string(p, &key))) return st;
                jp_ws(p);
                if (p->s[p->i] != ':') {
                    free(key);
                    return jp_fail(p, "expected ':'");
                }
                p->i++;
            }
            kvt_jv *kid = NULL;
            if ((st = jp_push(p, v, &kid))) {
                free(key);
                return st;
            }
            st = jp_value(p, kid, depth + 1);
            kid->key = key;
            if (st) return st;
            jp_ws(p);
            if (p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->s[p->i] == (obj ? '}' : ']')) {
                p->i++;
                return KVT_OK;
            }
            return jp_fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    if (c == '"') {
        v->kind = KVT_JV_STR;
        return jp_string(p, &v->str);
    }
    if (!strncmp(p->s + p->i, "true", 4) || !strncmp(p->s + p->i, "false", 5)) {
        v->kind = KVT_JV_BOOL;
        v->num = c == 't';
        p->i += c == 't' ? 4 : 5;
        return KVT_OK;
    }
    if (!strncmp(p->s + p->i, "null", 4)) {
        v->kind = KVT_JV_NULL;
        p->i += 4;
        return KVT_OK;
    }
    // a JSON number only (strtod alone also takes inf, nan, hex); finite and within int64_t, so that the
    // readers' integer conversions are defined
    if (c != '-' && !(c >= '0' && c <= '9')) return jp_fail(p, "unexpected character");
    char *end;
    v->num = strtod(p->s + p->i, &end);
    if (end == p->s + p->i) return jp_fail(p, "unexpected character");
    for (const char *q = p->s + p->i; q < end; q++)
        if (!strchr("0123456789+-.eE", *q)) return jp_fail(p, "not a JSON number");
    if (!(fabs(v->num) <= 9.2e18)) return jp_fail(p, "number out of range (at most 9.2e18)");
    v->kind = KVT_JV_NUM;
    p->i = (size_t)(end - p->s);
    return KVT_OK;
}

kvt_status kvt_jv_parse(const char *text, kvt_jv *out, kvt_err *err) {
    jp p = {text, 0, err};
    kvt_status st = jp_value(&p, out, 0);
    if (!st) {
        jp_ws(&p);
        if (p.s[p.i]) st = jp_fail(&p, "trailing characters");
    }
    if (st) kvt_jv_free(out);
    return st;
}

void kvt_jv_free(kvt_jv *v) {
    for (int i = 0; i < v->n_kids; i++) kvt_jv_free(&v->kids[i]);
    free(v->kids);
    free(v->key);
    free(v->str);
    memset(v, 0, sizeof *v);
}

const kvt_jv *kvt_jv_get(const kvt_jv *obj, const char *key) {
    if (!obj || obj->kind != KVT_JV_OBJ) return NULL;
    for (int i = 0; i < obj->n_kids; i++) {
        if (obj->kids[i].key && !strcmp(obj->kids[i].key, key)) return &obj->kids[i];
    }
    return NULL;
}

double kvt_jv_num(const kvt_jv *obj, const char *key, double dflt) {
    const kvt_jv *v = kvt_jv_get(obj, key);
    return v && (v->kind == KVT_JV_NUM || v->kind == KVT_JV_BOOL) ? v->num : dflt;
}

const char *kvt_jv_str(const kvt_jv *obj, const char *key, const char *dflt) {
    const kvt_jv *v = kvt_jv_get(obj, key);
    return v && v->kind == KVT_JV_STR ? v->str : dflt;
}
