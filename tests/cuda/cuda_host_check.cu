// cuda_host_check.cu - runs the CUDA backend's host-and-device code on the CPU against this repo's
// references, so that what is most likely to be wrong is checked on machines without a GPU:
//   - the block decoders (src/cuda/cuda_blocks.cuh) against quant.c's to_float, every weight type;
//   - the kernels' per-item bodies (src/cuda/cuda_items.cuh): matvec lanes, dequantize, get rows,
//     RoPE, SwiGLU, GeGLU against src/kernels; rmsnorm and argmax with their thread blocks'
//     reductions emulated against kvt_rmsnorm_f32 and kvt_argmax;
//   - the q8_1 matvec (src/cuda/cuda_mmvq_items.cuh): q8_1_block against its definition, mmvq_lane over 32 emulated
//     lanes and warps of kMmvqRows rows (dp4a, vsub4, funnel shifts emulated) against the double product, the CPU
//     reference (vec_dot over activations quantized to vec_dot_type) and the product with f32 activations;
//   - mul_mat_gemm's cublasGemmEx arguments, applied with BLAS's column-major semantics;
//   - the attention kernels' pieces (src/cuda/cuda_attn_items.cuh) assembled serially against
//     kvt_attention.
// Launches, warp shuffles, shared memory and barriers are not covered (they need a device).
// Built and run by `make cuda-check` (nvcc, no device); exit status 0 = all pass.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "../../src/attn/attention.h"
#include "../../src/base/threadpool.h"
#include "../../src/kernels/dtype.h"
#include "../../src/kernels/f16.h"
#include "../../src/kernels/quant.h"
#include "../../src/kernels/vec.h"
#include "../../src/kv/kv.h"
#include "../../src/sched/sampler.h"
}
#include "../../src/cuda/cuda_attn_items.cuh"
#include "../../src/cuda/cuda_items.cuh"
#include "../../src/cuda/cuda_mmvq_items.cuh"

namespace {

constexpr int64_t kN = 4096; // elements per row (16 super-blocks)
int g_failed = 0;

void report(bool ok, const char *what, const char *detail) {
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, ok ? "" : ": ", ok ? "" : detail);
    g_failed += !ok;
}

// max |got - ref| / max |ref|
double max_rel_err(const std::vector<float> &got, const std::vector<float> &ref) {
    double e = 0.0, m = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        e = fmax(e, fabs((double)got[i] - ref[i]));
        m = fmax(m, fabs((double)ref[i]));
    }
    return m > 0.0 ? e / m : e;
}

// uniform in [-2, 2), never 0
std::vector<float> random_floats(int64_t n, uint64_t seed) {
    std::vector<float> v((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const float f = (float)((seed >> 40) & 0xffffff) / 4194304.0f - 2.0f;
        v[(size_t)i] = f == 0.0f ? 0.25f : f;
    }
    return v;
}

// Per weight type: the decoder against to_float (bit for bit), dequant_item against to_float rounded to
// f16 (bit for bit), get_rows_item (with an id out of range: NaN), and mmv_lane over 32 emulated lanes
// against the product of to_float's rows in double, for 1 .. 8 activation rows.
template <int T> struct check_op {
    static int run(const char *name, uint64_t seed) {
        const kvt_type t = (kvt_type)T;
        const int64_t n_rows = 8, n = n_rows * kN;
        std::vector<float> src = random_floats(n, seed), ref((size_t)n), got((size_t)n);
        const kvt_type_ops *ops = kvt_type_ops_ref(t);
        char what[96], msg[160] = "";
        snprintf(what, sizeof what, "%s: decoders, dequant_item, get_rows_item, mmv_lane (1..8 rows)", name);
        if (!ops || kvt_row_size(t, kN) != row_bytes<T>(kN)) {
            snprintf(msg, sizeof msg, "row size %lld, backend says %lld", (long long)kvt_row_size(t, kN), (long long)row_bytes<T>(kN));
            report(false, what, msg);
            return 1;
        }
        const int64_t rb = kvt_row_size(t, kN);
        std::vector<uint8_t> W((size_t)(rb * n_rows));
        for (int64_t r = 0; r < n_rows; r++) {
            ops->from_float(&src[(size_t)(r * kN)], &W[(size_t)(r * rb)], kN);
            ops->to_float(&W[(size_t)(r * rb)], &ref[(size_t)(r * kN)], kN);
        }
        // the decoders, one row at a time
        for (int64_t r = 0; r < n_rows; r++)
            for (int64_t g = 0; g < kN / 8; g++) row_get8<T>(&W[(size_t)(r * rb)], g, &got[(size_t)(r * kN + 8 * g)]);
        for (int64_t i = 0; i < n && !msg[0]; i++)
            if (memcmp(&got[(size_t)i], &ref[(size_t)i], sizeof(float)))
                snprintf(msg, sizeof msg, "element %lld decodes to %.9g, to_float %.9g", (long long)i, got[(size_t)i], ref[(size_t)i]);
        // dequant_item over the whole matrix as one array
        std::vector<__half> h((size_t)n);
        for (int64_t g = 0; g < n / 8; g++) dequant_item<T>(W.data(), g, h.data());
        for (int64_t i = 0; i < n && !msg[0]; i++) {
            uint16_t bits;
            memcpy(&bits, &h[(size_t)i], 2);
            if (bits != kvt_f32_to_f16(ref[(size_t)i])) snprintf(msg, sizeof msg, "dequant_item: element %lld", (long long)i);
        }
        // the same with 16-byte stores (a 16-byte aligned destination): the same bits
        std::vector<uint4> h16((size_t)(n / 8));
        for (int64_t g = 0; g < n / 8; g++) dequant_item<T, true>(W.data(), g, (__half *)h16.data());
        if (!msg[0] && memcmp(h16.data(), h.data(), (size_t)n * 2)) snprintf(msg, sizeof msg, "dequant_item with 16-byte stores");
        // get_rows_item: ids 5, 0, 7, 5 and one out of range
        const int32_t ids[5] = {5, 0, 7, 5, (int32_t)n_rows};
        std::vector<float> rows((size_t)(5 * kN));
        for (int64_t k = 0; k < 5 * kN / 8; k++) get_rows_item<T>(k, W.data(), n_rows, kN, ids, rows.data());
        for (int i = 0; i < 5 && !msg[0]; i++)
            for (int64_t j = 0; j < kN && !msg[0]; j++) {
                const float v = rows[(size_t)(i * kN + j)];
                if (i == 4 ? !std::isnan(v) : memcmp(&v, &ref[(size_t)(ids[i] * kN + j)], sizeof v))
                    snprintf(msg, sizeof msg, "get_rows_item: id %d element %lld", ids[i], (long long)j);
            }
        // mmv_lane: 32 lanes summed in lane order (the kernel sums by shuffles: another f32 order)
        std::vector<float> x = random_floats(KVT_CUDA_MMV_MAX_ROWS * kN, seed + 7);
        double num = 0, den = 0;
        for (int nt = 1; nt <= KVT_CUDA_MMV_MAX_ROWS; nt++)
            for (int64_t r = 0; r < n_rows; r++) {
                float sum[KVT_CUDA_MMV_MAX_ROWS] = {0};
                for (int lane = 0; lane < 32; lane++) {
                    float acc[KVT_CUDA_MMV_MAX_ROWS] = {0};
                    mmv_lane<T>(&W[(size_t)(r * rb)], kN, x.data(), nt, lane, acc);
                    for (int k = 0; k < nt; k++) sum[k] += acc[k];
                }
                for (int k = 0; k < nt; k++) {
                    double e = 0;
                    for (int64_t j = 0; j < kN; j++) e += (double)ref[(size_t)(r * kN + j)] * x[(size_t)(k * kN + j)];
                    num += (sum[k] - e) * (sum[k] - e), den += e * e;
                }
            }
        if (!msg[0] && !(num / den <= 1e-10)) snprintf(msg, sizeof msg, "mmv_lane: nmse %.3g against the double product", num / den);
        report(!msg[0], what, msg);
        return msg[0] != 0;
    }
};

// q8_1 activations of n_tok rows of n_cols as the quantize kernel writes them (one q8_1_block per block of 32)
void quantize_rows(const float *x, int64_t n_tok, int64_t n_cols, std::vector<int8_t> &xq, std::vector<float2> &xd) {
    xq.assign((size_t)(n_tok * n_cols), 0);
    xd.assign((size_t)(n_tok * n_cols / 32), make_float2(0, 0));
    for (int64_t b = 0; b < n_tok * n_cols / 32; b++) q8_1_block(x + 32 * b, &xq[(size_t)(32 * b)], &xd[(size_t)b]);
}

// The warps of mmvq_kernel<T, NT, R> (R rows each) run lane by lane, each warp's lanes summed in lane order: y
// [n_tok, n_rows] as the kernel stores it (the rows past n_rows that the last warp repeats are dropped).
template <int T, int NT, int R = kMmvqRows, int ILP = 1>
void mmvq_warps(const uint8_t *W, int64_t n_rows, int64_t n_cols, const int8_t *xq, const float2 *xd, int n_tok, float *y) {
    for (int64_t r0 = 0; r0 < n_rows; r0 += R) {
        float sum[R][NT] = {};
        for (int lane = 0; lane < 32; lane++) {
            float acc[R][NT] = {};
            mmvq_lane<T, NT, R, ILP>(W, n_rows, n_cols, r0, xq, xd, n_tok, lane, acc);
            for (int r = 0; r < R; r++)
                for (int t = 0; t < NT; t++) sum[r][t] += acc[r][t];
        }
        for (int r = 0; r < R; r++)
            for (int t = 0; t < n_tok; t++)
                if (r0 + r < n_rows) y[t * n_rows + r0 + r] = sum[r][t];
    }
}

double nmse_d(const std::vector<float> &got, const std::vector<double> &ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(got[i])) return INFINITY;
        num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
    }
    return num / den;
}

// The q8_1 matvec of one quantized type, as its kernels compute it (the launcher's NT for 1 .. 8 tokens): 7 weight rows
// (the last warp repeats a row) of 4096 and of 256 columns (fewer items than lanes) against
//   - the product in double of to_float's weights with the q8_1 activations dequantized (d q): nmse <= 1e-10 (what
//     the kernel computes, up to f32 rounding);
//   - the CPU reference: vec_dot over the activations quantized to the type's vec_dot_type: nmse <= 5e-4 (the suite's
//     limit: two quantizations of the activations);
//   - the product in double with the f32 activations: nmse <= 5e-4.
// And q8_1_block itself: |x - d q| <= d / 2, s = d sum(q), |q| <= 127; a NaN or an infinity in a block gives d = NaN.
template <int T> struct check_mmvq_op {
    static int run(const char *name, uint64_t seed) {
        if constexpr (T == KVT_CUDA_F32 || T == KVT_CUDA_F16 || T == KVT_CUDA_BF16) {
            return 0;
        } else {
            const kvt_type t = (kvt_type)T;
            const kvt_type_ops *ops = kvt_type_ops_ref(t), *xops = kvt_type_ops_ref(ops->vec_dot_type);
            char what[128], msg[200] = "";
            snprintf(what, sizeof what, "%s: q8_1 matvec (q8_1_block, mmvq_lane, 1..8 tokens, 7 rows of 4096 and 256)", name);
            double worst[3] = {0, 0, 0};
            for (int64_t n_cols : {kN, (int64_t)256}) {
                const int64_t n_rows = 7, rb = kvt_row_size(t, n_cols);
                const std::vector<float> src = random_floats(n_rows * n_cols, seed);
                std::vector<float> wf((size_t)(n_rows * n_cols));
                std::vector<uint8_t> W((size_t)(rb * n_rows));
                for (int64_t r = 0; r < n_rows; r++) {
                    ops->from_float(&src[(size_t)(r * n_cols)], &W[(size_t)(r * rb)], n_cols);
                    ops->to_float(&W[(size_t)(r * rb)], &wf[(size_t)(r * n_cols)], n_cols);
                }
                std::vector<float> x = random_floats(KVT_CUDA_MMV_MAX_ROWS * n_cols, seed + 3);
                for (int64_t i = 0; i < n_cols; i += 3) x[(size_t)i] *= 0.01f; // a spread of magnitudes within blocks
                std::vector<int8_t> xq;
                std::vector<float2> xd;
                quantize_rows(x.data(), KVT_CUDA_MMV_MAX_ROWS, n_cols, xq, xd);
                for (int64_t b = 0; b < (int64_t)xd.size() && !msg[0]; b++) {
                    int sum = 0;
                    for (int i = 0; i < 32 && !msg[0]; i++) {
                        const int q = xq[(size_t)(32 * b + i)];
                        sum += q;
                        if (fabs((double)x[(size_t)(32 * b + i)] - (double)xd[(size_t)b].x * q) > 0.5000001 * xd[(size_t)b].x || q < -127)
                            snprintf(msg, sizeof msg, "q8_1_block: block %lld element %d: x %.9g, d %.9g, q %d", (long long)b, i,
                                     x[(size_t)(32 * b + i)], xd[(size_t)b].x, q);
                    }
                    if (!msg[0] && xd[(size_t)b].y != xd[(size_t)b].x * (float)sum)
                        snprintf(msg, sizeof msg, "q8_1_block: block %lld: s %.9g, d sum(q) %.9g", (long long)b, xd[(size_t)b].y,
                                 xd[(size_t)b].x * (float)sum);
                }
                std::vector<uint8_t> xv((size_t)kvt_row_size(ops->vec_dot_type, n_cols));
                for (int nt = 1; nt <= KVT_CUDA_MMV_MAX_ROWS && !msg[0]; nt++) {
                    std::vector<float> y((size_t)(nt * n_rows), quiet_nan()), cpu((size_t)(nt * n_rows));
                    if (nt == 1) {
                        mmvq_warps<T, 1>(W.data(), n_rows, n_cols, xq.data(), xd.data(), nt, y.data());
                        // decode's other rows per warp and items in flight (KVT_CUDA_MMVQ_ROWS 1, 4; KVT_CUDA_MMVQ_ILP 2):
                        // every row bit for bit the same
                        std::vector<float> v[5];
                        for (auto &e : v) e.assign(y.size(), quiet_nan());
                        mmvq_warps<T, 1, 1>(W.data(), n_rows, n_cols, xq.data(), xd.data(), nt, v[0].data());
                        mmvq_warps<T, 1, 4>(W.data(), n_rows, n_cols, xq.data(), xd.data(), nt, v[1].data());
                        mmvq_warps<T, 1, kMmvqRows, 2>(W.data(), n_rows, n_cols, xq.data(), xd.data(), nt, v[2].data());
                        mmvq_warps<T, 1, 1, 2>(W.data(), n_rows, n_cols, xq.data(), xd.data(), nt, v[3].data());
                        mmvq_warps<T, 1, 4, 2>(W.data(), n_rows, n_cols, xq.data(), xd.data(), nt, v[4].data());
                        static const char *const vname[5] = {"1 row a warp", "4 rows a warp", "2 items a lane",
                                                             "1 row a warp, 2 items a lane", "4 rows a warp, 2 items a lane"};
                        for (int k = 0; k < 5 && !msg[0]; k++)
                            if (memcmp(v[k].data(), y.data(), y.size() * sizeof(float)))
                                snprintf(msg, sizeof msg, "%lld columns: %s: other bits than %d rows a warp, 1 item a lane",
                                         (long long)n_cols, vname[k], kMmvqRows);
                    }
                    else if (nt == 2) mmvq_warps<T, 2>(W.data(), n_rows, n_cols, xq.data(), xd.data(), nt, y.data());
                    else if (nt <= 4) mmvq_warps<T, 4>(W.data(), n_rows, n_cols, xq.data(), xd.data(), nt, y.data());
                    else mmvq_warps<T, 8>(W.data(), n_rows, n_cols, xq.data(), xd.data(), nt, y.data());
                    std::vector<double> exact((size_t)(nt * n_rows)), dense((size_t)(nt * n_rows)), cpud((size_t)(nt * n_rows));
                    for (int k = 0; k < nt; k++) {
                        xops->from_float(&x[(size_t)(k * n_cols)], xv.data(), n_cols);
                        for (int64_t r = 0; r < n_rows; r++) {
                            double e = 0, f = 0;
                            for (int64_t j = 0; j < n_cols; j++) {
                                const double w = wf[(size_t)(r * n_cols + j)];
                                e += w * ((double)xd[(size_t)((k * n_cols + j) / 32)].x * xq[(size_t)(k * n_cols + j)]);
                                f += w * x[(size_t)(k * n_cols + j)];
                            }
                            exact[(size_t)(k * n_rows + r)] = e, dense[(size_t)(k * n_rows + r)] = f;
                            ops->vec_dot(n_cols, &cpu[(size_t)(k * n_rows + r)], &W[(size_t)(r * rb)], xv.data());
                            cpud[(size_t)(k * n_rows + r)] = cpu[(size_t)(k * n_rows + r)];
                        }
                    }
                    // the CPU reference as the reference (the suite's nmse: sum (gpu - cpu)^2 / sum cpu^2)
                    double num = 0, den = 0;
                    for (size_t i = 0; i < y.size(); i++) num += (y[i] - cpud[i]) * (y[i] - cpud[i]), den += cpud[i] * cpud[i];
                    const double e[3] = {nmse_d(y, exact), std::isfinite(num) ? num / den : INFINITY, nmse_d(y, dense)};
                    for (int i = 0; i < 3; i++) worst[i] = fmax(worst[i], e[i]);
                    if (!(e[0] <= 1e-10) || !(e[1] <= 5e-4) || !(e[2] <= 5e-4))
                        snprintf(msg, sizeof msg, "%lld columns, %d tokens: nmse %.3g against the double product, %.3g against the "
                                 "CPU reference, %.3g against f32 activations", (long long)n_cols, nt, e[0], e[1], e[2]);
                }
            }
            // non-finite activations reach the result
            std::vector<float> xb = random_floats(64, seed + 5);
            std::vector<int8_t> bq;
            std::vector<float2> bd;
            xb[5] = quiet_nan(), xb[40] = INFINITY;
            quantize_rows(xb.data(), 1, 64, bq, bd);
            if (!msg[0] && !(std::isnan(bd[0].x) && std::isnan(bd[1].x)))
                snprintf(msg, sizeof msg, "q8_1_block: a NaN or an infinity gives d %.3g, %.3g (NaN wanted)", bd[0].x, bd[1].x);
            printf("     %s: nmse at worst %.3g (double product), %.3g (CPU reference), %.3g (f32 activations)\n", name, worst[0],
                   worst[1], worst[2]);
            report(!msg[0], what, msg);
            return msg[0] != 0;
        }
    }
};

// dp4a, vsub4, funnel_rc (the host's emulation of the device intrinsics) on chosen values, and ld_words at both
// alignments against memcpy
void check_intrinsics() {
    bool ok = dp4a((int)0x80FF7F01u, (int)0x7F80FF02u, 5) == 5 + (-128 * 127) + (-1 * -128) + (127 * -1) + (1 * 2);
    ok = ok && vsub4(0x00FF1020u, 0x01012020u) == 0xFFFEF000u;
    ok = ok && funnel_rc(0x11223344u, 0xAABBCCDDu, 16) == 0xCCDD1122u && funnel_rc(1u, 2u, 0) == 1u && funnel_rc(1u, 2u, 40) == 2u;
    alignas(16) uint8_t buf[64];
    for (int i = 0; i < 64; i++) buf[i] = (uint8_t)(i * 37 + 11);
    for (int off = 2; off <= 6 && ok; off += 2) {
        uint32_t w[8], want[8];
        ld_words<8>(buf + off, w);
        memcpy(want, buf + off, sizeof want);
        ok = !memcmp(w, want, sizeof w);
    }
    report(ok, "dp4a, vsub4, funnel_rc emulations; ld_words at 4-byte and 2-byte alignment", "differs");
}

// rope_item against kvt_rope_cache + kvt_rope_apply, and the gated activations against vec.c, bit for bit.
void check_elementwise() {
    const int n_tok = 9, n_head = 4, dim = 64;
    int32_t pos[n_tok];
    for (int t = 0; t < n_tok; t++) pos[t] = t * 977 % 5000;
    float ff[dim / 2], cs[dim];
    for (int i = 0; i < dim / 2; i++) ff[i] = 1.0f + (float)i / 8.0f;
    static const struct { int neox, n_rot; float base, scale; bool factors; } v[] = {
        {0, 64, 10000.0f, 1.0f, false}, {1, 64, 10000.0f, 1.0f, false}, {1, 32, 1000000.0f, 0.25f, false}, {0, 48, 500000.0f, 1.0f, true}};
    for (const auto &c : v) {
        std::vector<float> x = random_floats(n_tok * n_head * dim, 99), ref = x;
        const kvt_rope_params p = {c.n_rot, c.neox, c.base, c.scale, c.factors ? ff : nullptr};
        for (int t = 0; t < n_tok; t++) {
            kvt_rope_cache(&p, pos[t], cs);
            for (int h = 0; h < n_head; h++) kvt_rope_apply(&p, cs, &ref[(size_t)((t * n_head + h) * dim)]);
        }
        const kvt_cuda_rope_args a = {n_tok, n_head, dim, c.n_rot, c.neox, c.base, c.scale, c.factors ? ff : nullptr, pos};
        const float theta_scale = powf(c.base, -2.0f / (float)c.n_rot);
        for (int64_t k = 0; k < (int64_t)n_tok * n_head * (c.n_rot / 2); k++) rope_item(k, x.data(), a, theta_scale);
        char what[96], why[64];
        // the CPU rotation follows ggml's fused multiply-adds (vec.c); the device's its own: within rounding
        const double e = max_rel_err(x, ref);
        snprintf(what, sizeof what, "rope_item neox %d, n_rot %d, scale %g%s: as vec.c within 1e-6", c.neox, c.n_rot, c.scale,
                 c.factors ? ", freq factors" : "");
        snprintf(why, sizeof why, "max error %.3g of the largest value", e);
        report(e <= 1e-6, what, why);
    }
    std::vector<float> g = random_floats(4096, 5), u = random_floats(4096, 6), a = g, b = g;
    for (auto &e : g) e *= 6.0f;
    a = g, b = g;
    kvt_swiglu_f32(a.data(), u.data(), 4096);
    kvt_geglu_f32(b.data(), u.data(), 4096);
    std::vector<float> ds(g.size()), dg(g.size());
    for (size_t i = 0; i < g.size(); i++) ds[i] = silu_op::f(g[i]) * u[i], dg[i] = gelu_tanh_op::f(g[i]) * u[i];
    // the CPU follows ggml: SiLU with its vector exp, GELU from its f16 table (the input rounded to f16); the device
    // computes the functions directly
    const double es = max_rel_err(ds, a), eg = max_rel_err(dg, b);
    char why_s[64], why_g[64];
    snprintf(why_s, sizeof why_s, "max error %.3g of the largest value", es);
    snprintf(why_g, sizeof why_g, "max error %.3g of the largest value", eg);
    report(es <= 1e-6, "silu_op: as kvt_swiglu_f32 within 1e-6", why_s);
    report(eg <= 2e-3, "gelu_tanh_op: as kvt_geglu_f32 (ggml's f16 table) within 2e-3", why_g);
}

// rmsnorm_kernel and argmax_kernel with their 256 threads run in turn: the warps' xor-shuffle trees
// done on arrays, then the warps in order, as the kernels do. Rows: 1, 9, 64 and 576 wide (fewer
// elements than threads too); argmax rows with planted ties and NaNs.
void check_reductions() {
    const int nthreads = 256, W = nthreads / 32;
    bool ok_norm = true, ok_arg = true;
    char msg[160] = "";
    for (int64_t n : {1, 9, 64, 576, 49152}) {
        std::vector<float> x = random_floats(n, (uint64_t)n), w = random_floats(n, (uint64_t)n + 1), y((size_t)n), ref((size_t)n);
        for (int weighted = 0; weighted < 2; weighted++) {
            double part[nthreads], warp_sum[W];
            for (int t = 0; t < nthreads; t++) part[t] = rmsnorm_part(x.data(), n, t, nthreads);
            for (int k = 0; k < W; k++) {
                double v[32], nv[32];
                for (int l = 0; l < 32; l++) v[l] = part[32 * k + l];
                for (int off = 16; off > 0; off /= 2) {
                    for (int l = 0; l < 32; l++) nv[l] = v[l] + v[l ^ off];
                    memcpy(v, nv, sizeof v);
                }
                warp_sum[k] = v[0];
            }
            double total = 0.0;
            for (int k = 0; k < W; k++) total += warp_sum[k];
            const float *wp = weighted ? w.data() : nullptr;
            for (int t = 0; t < nthreads; t++) rmsnorm_write(x.data(), wp, y.data(), n, rmsnorm_scale(total, n, 1e-6f), t, nthreads);
            kvt_rmsnorm_f32(ref.data(), x.data(), wp, n, 1e-6f);
            for (int64_t i = 0; i < n && ok_norm; i++)
                if (fabsf(y[(size_t)i] - ref[(size_t)i]) > 1e-6f * fabsf(ref[(size_t)i]))
                    ok_norm = false, snprintf(msg, sizeof msg, "rmsnorm n %lld element %lld: %.9g, vec.c %.9g", (long long)n, (long long)i,
                                              y[(size_t)i], ref[(size_t)i]);
        }
        // plain, a tie planted before the max, NaNs (not at 0), a NaN at index 0 too, an infinity
        for (int variant = 0; variant < 5 && ok_arg; variant++) {
            std::vector<float> v = x;
            const int32_t m = kvt_argmax(v.data(), n);
            if (variant == 1 && m > 0) v[(size_t)(m / 2)] = v[(size_t)m];
            if (variant >= 2 && variant <= 3)
                for (int64_t i = variant == 3 ? 0 : 1; i < n; i += 3) v[(size_t)i] = quiet_nan();
            if (variant == 4) v[(size_t)(n / 3)] = n % 2 ? -INFINITY : INFINITY; // +inf wins, -inf never
            float bv[nthreads];
            int64_t bi[nthreads];
            bool bad[nthreads], any_bad = false;
            for (int t = 0; t < nthreads; t++) argmax_part(v.data(), n, t, nthreads, &bv[t], &bi[t], &bad[t]);
            for (int t = 0; t < nthreads; t++) any_bad |= bad[t]; // the warps' __any_sync, then the block's OR
            for (int k = 0; k < W; k++)
                for (int off = 16; off > 0; off /= 2) {
                    float nv[32];
                    int64_t ni[32];
                    for (int l = 0; l < 32; l++) {
                        const int me = 32 * k + l, other = 32 * k + (l ^ off);
                        nv[l] = bv[me], ni[l] = bi[me];
                        if (bi[other] >= 0 && argmax_better(bv[other], bi[other], bv[me], bi[me])) nv[l] = bv[other], ni[l] = bi[other];
                    }
                    for (int l = 0; l < 32; l++) bv[32 * k + l] = nv[l], bi[32 * k + l] = ni[l];
                }
            float best = bv[0];
            int64_t besti = bi[0];
            for (int k = 1; k < W; k++)
                if (bi[32 * k] >= 0 && argmax_better(bv[32 * k], bi[32 * k], best, besti)) best = bv[32 * k], besti = bi[32 * k];
            bool finite = true;
            for (int64_t i = 0; i < n; i++) finite &= std::isfinite(v[(size_t)i]);
            for (int flag = 0; flag < 2 && ok_arg; flag++) {
                const int32_t want = flag && !finite ? -1 : kvt_argmax(v.data(), n);
                const int32_t got = argmax_result(v[0], besti, any_bad, flag);
                if (got != want)
                    ok_arg = false, snprintf(msg, sizeof msg, "argmax n %lld variant %d flag %d: %d, want %d", (long long)n, variant,
                                             flag, got, want);
            }
        }
    }
    report(ok_norm, "rmsnorm pieces (256 threads, shuffle trees emulated): within 1e-6 of kvt_rmsnorm_f32 per element", msg);
    report(ok_arg, "argmax pieces (256 threads, shuffle trees emulated): equal to kvt_argmax (ties, NaNs, NaN at 0), -1 for non-finite rows when flagged", msg);
}

// mul_mat_gemm's cublasGemmEx arguments (gemm_args_for) applied with the column-major semantics of
// BLAS (C = op(A) op(B), op(A)[i, l] = A[l + i lda] when transposed, A[i + l lda] when not) on the CPU,
// against the row-major product Y[t, r] = sum_k W[r, k] X[t, k].
void check_gemm_layout() {
    const int64_t n_rows = 24, n_cols = 40, n_tok = 9;
    const std::vector<float> W = random_floats(n_rows * n_cols, 11), X = random_floats(n_tok * n_cols, 12);
    std::vector<float> Y((size_t)(n_tok * n_rows), quiet_nan());
    const gemm_args g = gemm_args_for(n_rows, n_cols, n_tok);
    auto at = [](const float *M, cublasOperation_t op, int ld, int i, int l) { return op == CUBLAS_OP_N ? M[i + (int64_t)l * ld] : M[l + (int64_t)i * ld]; };
    for (int i = 0; i < g.m; i++)
        for (int j = 0; j < g.n; j++) {
            double c = 0;
            for (int l = 0; l < g.k; l++) c += (double)at(W.data(), g.ta, g.lda, i, l) * at(X.data(), g.tb, g.ldb, l, j);
            Y[(size_t)(i + (int64_t)j * g.ldc)] = (float)c;
        }
    bool ok = true;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < n_rows; r++) {
            double e = 0;
            for (int64_t k = 0; k < n_cols; k++) e += (double)W[(size_t)(r * n_cols + k)] * X[(size_t)(t * n_cols + k)];
            ok = ok && Y[(size_t)(t * n_rows + r)] == (float)e;
        }
    report(ok, "mul_mat_gemm's cublasGemmEx arguments, applied as BLAS defines them: Y = X W^T row-major", "differs");
}

// kvt_attention over a contiguous f16 cache of len positions (k, v: [len, n_kv * dim]) for n query
// tokens at positions pos0 ..; q, out: [n, n_head * dim].
kvt_status attn_ref(int n_head, int n_kv, int dim, int block_len, int64_t len, const float *k, const float *v, const float *q,
                    int64_t pos0, int64_t n, int window, float *out, kvt_err *err) {
    const kvt_kv_params kp = {KVT_TYPE_F16, 1, n_kv, dim, dim, len, block_len, 0};
    const kvt_attn_params ap = {n_head, 1.0f / sqrtf((float)dim), 0, window};
    kvt_kv *kv = nullptr;
    kvt_threadpool *pool = nullptr;
    kvt_status st = kvt_kv_contig_init(&kp, &kv, err);
    if (!st) st = kvt_threadpool_init(1, &pool, err);
    if (!st) st = kv->ops->append(kv, 0, 0, 0, len, k, v, err);
    std::vector<char> scratch, ws;
    if (!st) {
        scratch.resize((size_t)kvt_attn_scratch_bytes(kv, n_head, 0) + 64);
        ws.resize((size_t)kvt_attn_workspace_bytes(kv, n_head, 1) + 64);
        void *sp = scratch.data();
        st = kvt_attention(kv, 0, 0, &ap, q, pos0, n, out, pool, &sp, ws.data(), err);
    }
    kvt_threadpool_free(pool);
    kvt_kv_free(kv);
    return st;
}

// attn_tiled_kernel run serially: per (tile of KVT_ATTN_TQ rows, head), its shared arrays, its 4 warps' rows and their
// lanes in turn (every lane of a warp computes the same max, sum and rescale: done once), from the same pieces.
void attn_tiled_host(const kvt_cuda_attn_args &a, float *out) {
    const int D = a.head_dim, warps = 4, rpw = KVT_ATTN_TQ / warps;
    const int64_t stride = a.row_stride > 0 ? a.row_stride : (int64_t)a.n_head * D;
    std::vector<__half2> ks((size_t)KVT_ATTN_TK * attn_tile_kstride(D)), vs((size_t)KVT_ATTN_TK * D / 2);
    for (int r0 = 0; r0 < a.n_q; r0 += KVT_ATTN_TQ)
        for (int h = 0; h < a.n_head; h++) {
            const int nr = std::min(KVT_ATTN_TQ, a.n_q - r0), kvh = h / (a.n_head / a.n_kv_head);
            int rseq[KVT_ATTN_TQ];
            int64_t rlen[KVT_ATTN_TQ], rlo[KVT_ATTN_TQ];
            for (int r = 0; r < nr; r++) {
                rseq[r] = a.row_seq ? a.row_seq[r0 + r] : r0 + r;
                rlen[r] = a.seq_len[r0 + r];
                rlo[r] = attn_row_lo(rlen[r], a.window);
            }
            std::vector<float> m((size_t)nr, -INFINITY), s((size_t)nr, 0.0f), o((size_t)nr * D, 0.0f);
            for (int i = 0; i < nr; i++) {
                int64_t lo, hi;
                if (!attn_tile_seq_span(rseq, rlo, rlen, nr, i, &lo, &hi)) continue;
                const int S = rseq[i];
                for (int64_t t0 = lo; t0 < hi; t0 += KVT_ATTN_TK) {
                    const int n = (int)std::min((int64_t)KVT_ATTN_TK, hi - t0);
                    const __half *tkr[KVT_ATTN_TK], *tvr[KVT_ATTN_TK];
                    for (int j = 0; j < n; j++) attn_kv_rows(a, S, t0 + j, kvh, &tkr[j], &tvr[j]);
                    for (int e = 0; e < KVT_ATTN_TK * (D / 2); e++) attn_tile_fill_item(a, tkr, tvr, n, e, ks.data(), vs.data());
                    for (int warp = 0; warp < warps; warp++)
                        for (int rr = 0; rr < rpw; rr++) {
                            const int r = warp * rpw + rr;
                            if (r >= nr || rseq[r] != S) continue;
                            const float *q = a.q + (r0 + r) * stride + (int64_t)h * D;
                            float sc[KVT_ATTN_TK], w[KVT_ATTN_TK];
                            for (int lane = 0; lane < KVT_ATTN_TK; lane++)
                                sc[lane] = w[lane] = attn_tile_score(a, q, ks.data(), t0, n, rlo[r], rlen[r], lane);
                            const float mt = attn_tile_max(w);
                            if (mt == -INFINITY) continue;
                            const float alpha = attn_tile_rescale(&m[(size_t)r], mt);
                            for (int lane = 0; lane < KVT_ATTN_TK; lane++) w[lane] = attn_tile_weight(sc[lane], m[(size_t)r]);
                            s[(size_t)r] = s[(size_t)r] * alpha + attn_tile_sum(w);
                            for (int d = 0; d < D; d++)
                                o[(size_t)(r * D + d)] = o[(size_t)(r * D + d)] * alpha + attn_tile_pv(w, vs.data(), D, d);
                        }
                }
            }
            for (int r = 0; r < nr; r++)
                for (int d = 0; d < D; d++) out[(r0 + r) * stride + (int64_t)h * D + d] = o[(size_t)(r * D + d)] / s[(size_t)r];
        }
}

// The attention kernels' pieces run serially: three sequences (1, 100 and 600 positions) in shuffled
// blocks of one pool with NaN in unused rows; query rows: one decode row per sequence and the last 9
// tokens of the third as causal prefill rows (row_seq); head_dim 64 / block 16 and 128 / block 48; every row
// attending all its positions, then a sliding window of 37 positions (gemma3's local layers).
void check_attention() {
    enum { NH = 8, NKV = 2, NSEQ = 3, T = 9 };
    static const int lens[NSEQ] = {1, 100, 600};
    static const int cfg[4][3] = {{64, 16, 0}, {128, 48, 0}, {64, 16, 37}, {128, 48, 37}};
    for (const auto &cf : cfg) {
        const int D = cf[0], BL = cf[1], W = cf[2];
        const size_t blk = (size_t)BL * NKV * D;
        int n_blocks = 0, max_blocks = 0;
        for (int len : lens) n_blocks += (len + BL - 1) / BL, max_blocks = std::max(max_blocks, (len + BL - 1) / BL);
        std::vector<uint16_t> pool(2 * (size_t)n_blocks * blk, 0x7e00);
        std::vector<const void *> ktab((size_t)NSEQ * max_blocks), vtab((size_t)NSEQ * max_blocks);
        std::vector<int> slot((size_t)n_blocks);
        for (int b = 0; b < n_blocks; b++) slot[(size_t)b] = (b * 7 + 3) % n_blocks; // 7 is prime to both counts
        std::vector<std::vector<float>> K, V;
        for (int s = 0, next = 0; s < NSEQ; s++) {
            K.push_back(random_floats((int64_t)lens[s] * NKV * D, 100 + s));
            V.push_back(random_floats((int64_t)lens[s] * NKV * D, 200 + s));
            for (int b = 0; b < (lens[s] + BL - 1) / BL; b++, next++) {
                uint16_t *kb = &pool[(size_t)slot[(size_t)next] * blk], *vb = &pool[((size_t)n_blocks + slot[(size_t)next]) * blk];
                for (size_t i = 0; i < blk && b * blk + i < (size_t)lens[s] * NKV * D; i++) {
                    kb[i] = kvt_f32_to_f16(K[(size_t)s][b * blk + i]);
                    vb[i] = kvt_f32_to_f16(V[(size_t)s][b * blk + i]);
                }
                ktab[(size_t)(s * max_blocks + b)] = kb, vtab[(size_t)(s * max_blocks + b)] = vb;
            }
        }
        // rows 0..2: decode of each sequence; rows 3..3+T: prefill of sequence 2's last T tokens
        const int n_q = NSEQ + T;
        std::vector<int32_t> row_seq((size_t)n_q), seq_len((size_t)n_q);
        for (int r = 0; r < n_q; r++) {
            row_seq[(size_t)r] = r < NSEQ ? r : 2;
            seq_len[(size_t)r] = r < NSEQ ? lens[r] : lens[2] - T + (r - NSEQ) + 1;
        }
        std::vector<float> q = random_floats((int64_t)n_q * NH * D, 300), out((size_t)n_q * NH * D), ref(out.size());
        const kvt_cuda_attn_args a = {n_q, NH, NKV, D, BL, max_blocks, lens[2], 1.0f / sqrtf((float)D), q.data(), ktab.data(),
                                      vtab.data(), row_seq.data(), seq_len.data(), out.data(), W, 0};
        const int n_chunks = (a.max_seq_len + KVT_CUDA_ATTN_CHUNK - 1) / KVT_CUDA_ATTN_CHUNK;
        std::vector<float> states((size_t)n_q * NH * n_chunks * (D + 2));
        float sc[KVT_CUDA_ATTN_CHUNK];
        for (int row = 0; row < n_q; row++)
            for (int h = 0; h < NH; h++) {
                const int seq = a.row_seq[row], kvh = h / (NH / NKV);
                for (int c = 0; c < n_chunks; c++) { // attn_chunk_kernel, its threads in turn
                    int64_t p0;
                    const int n = attn_chunk_span(a.seq_len[row], a.window, c, &p0);
                    float *st = &states[(size_t)attn_state_offset(a, row, h, n_chunks, c)];
                    const float *qh = a.q + ((int64_t)row * NH + h) * D;
                    const __half *kr[KVT_CUDA_ATTN_CHUNK], *vr[KVT_CUDA_ATTN_CHUNK];
                    for (int i = 0; i < n; i++) attn_kv_rows(a, seq, p0 + i, kvh, &kr[i], &vr[i]);
                    for (int i = 0; i < n; i++) {
                        float dot = 0.0f;
                        for (int lane = 0; lane < 32; lane++) dot += attn_score_lane(a, qh, kr[i], lane);
                        sc[i] = dot * a.scale;
                    }
                    float m, s;
                    attn_max_sum(sc, n, &m, &s);
                    for (int i = 0; i < n; i++) sc[i] = expf(sc[i] - m);
                    for (int d = 0; d < D; d++) st[2 + d] = attn_pv_item(sc, vr, n, d);
                    st[0] = m, st[1] = s;
                }
                for (int d = 0; d < D; d++) // attn_merge_kernel
                    out[(size_t)((row * NH + h) * D + d)] = attn_merge_item(&states[(size_t)attn_state_offset(a, row, h, n_chunks, 0)], n_chunks, D, d);
            }
        kvt_err err = {};
        bool ok = true;
        for (int s = 0; s < NSEQ && ok; s++)
            ok = !attn_ref(NH, NKV, D, BL, lens[s], K[(size_t)s].data(), V[(size_t)s].data(), &q[(size_t)(s * NH * D)], lens[s] - 1, 1,
                           W, &ref[(size_t)(s * NH * D)], &err);
        ok = ok && !attn_ref(NH, NKV, D, BL, lens[2], K[2].data(), V[2].data(), &q[(size_t)(NSEQ * NH * D)], lens[2] - T, T, W,
                             &ref[(size_t)(NSEQ * NH * D)], &err);
        double num = 0, den = 0;
        for (size_t i = 0; i < out.size(); i++) num += ((double)out[i] - ref[i]) * ((double)out[i] - ref[i]), den += (double)ref[i] * ref[i];
        char what[256], msg[KVT_ERR_MSG_MAX + 64];
        snprintf(what, sizeof what, "attention pieces, head_dim %d, block %d, window %d: 3 decode rows + 9 prefill rows against kvt_attention",
                 D, BL, W);
        snprintf(msg, sizeof msg, "%s%snmse %.3g", ok ? "" : err.msg, ok ? "" : "; ", num / den);
        report(ok && num / den <= 1e-6, what, msg);
        // the GQA decode kernel's pieces (KVT_CUDA_ATTN_DECODE=gqa): per (row, KV head, chunk), its NH / NKV heads at
        // once, the lanes summed in the same serial order: every state bit for bit the per-head pieces'
        {
            const int G = NH / NKV;
            std::vector<float> gstates(states.size(), quiet_nan());
            float gsc[kAttnGqaMax * KVT_CUDA_ATTN_CHUNK];
            for (int row = 0; row < n_q; row++)
                for (int kvh = 0; kvh < NKV; kvh++)
                    for (int c = 0; c < n_chunks; c++) {
                        int64_t p0;
                        const int n = attn_chunk_span(a.seq_len[row], a.window, c, &p0), seq = a.row_seq[row];
                        const float *qg = a.q + ((int64_t)row * NH + kvh * G) * D;
                        const __half *kr[KVT_CUDA_ATTN_CHUNK], *vr[KVT_CUDA_ATTN_CHUNK];
                        for (int i = 0; i < n; i++) attn_kv_rows(a, seq, p0 + i, kvh, &kr[i], &vr[i]);
                        for (int i = 0; i < n; i++) {
                            float sum[kAttnGqaMax] = {0};
                            for (int lane = 0; lane < 32; lane++) {
                                float dot[kAttnGqaMax];
                                attn_score_lanes_g(a, qg, G, kr[i], lane, dot);
                                for (int g = 0; g < G; g++) sum[g] += dot[g];
                            }
                            for (int g = 0; g < G; g++) gsc[g * KVT_CUDA_ATTN_CHUNK + i] = sum[g] * a.scale;
                        }
                        float m[kAttnGqaMax], s[kAttnGqaMax];
                        for (int g = 0; g < G; g++) {
                            attn_max_sum(gsc + g * KVT_CUDA_ATTN_CHUNK, n, &m[g], &s[g]);
                            for (int i = 0; i < n; i++) gsc[g * KVT_CUDA_ATTN_CHUNK + i] = expf(gsc[g * KVT_CUDA_ATTN_CHUNK + i] - m[g]);
                        }
                        for (int d = 0; d < D; d++) {
                            float o[kAttnGqaMax];
                            attn_pv_items_g(gsc, G, vr, n, d, o);
                            for (int g = 0; g < G; g++) gstates[(size_t)attn_state_offset(a, row, kvh * G + g, n_chunks, c) + 2 + d] = o[g];
                        }
                        for (int g = 0; g < G; g++) {
                            float *st = &gstates[(size_t)attn_state_offset(a, row, kvh * G + g, n_chunks, c)];
                            st[0] = m[g], st[1] = s[g];
                        }
                    }
            size_t differ = 0;
            for (size_t i = 0; i < states.size(); i++) differ += memcmp(&states[i], &gstates[i], sizeof(float)) != 0;
            snprintf(what, sizeof what, "GQA decode attention pieces (%d heads per KV head), head_dim %d, block %d, window %d: every "
                     "chunk state bit for bit the per-head pieces'", G, D, BL, W);
            snprintf(msg, sizeof msg, "%zu of %zu floats differ", differ, states.size());
            report(differ == 0, what, msg);
        }
        // the tiled kernel over the same rows: tiles of 8 rows mixing sequences (rows 0-7: the 3 decode rows and 5
        // prefill rows), and the last 9 prefill rows alone as one call (one sequence, a partial tile of rows)
        std::vector<float> tiled(out.size(), quiet_nan());
        attn_tiled_host(a, tiled.data());
        kvt_cuda_attn_args a9 = a;
        a9.n_q = T, a9.q = &q[(size_t)(NSEQ * NH * D)], a9.row_seq = &row_seq[NSEQ], a9.seq_len = &seq_len[NSEQ];
        std::vector<float> tiled9((size_t)T * NH * D, quiet_nan());
        attn_tiled_host(a9, tiled9.data());
        // (nmse of the 12 rows against kvt_attention as above; the 9 rows alone against the chunked pieces' same rows: the
        // CPU reference itself differs from both by 1.4e-6 on those long rows alone, e.g. its f16 rounding)
        double tnum = 0, t9num = 0, t9den = 0;
        for (size_t i = 0; i < out.size(); i++) tnum += ((double)tiled[i] - ref[i]) * ((double)tiled[i] - ref[i]);
        for (size_t i = 0; i < tiled9.size(); i++) {
            const double rv = out[(size_t)NSEQ * NH * D + i];
            t9num += (tiled9[i] - rv) * (tiled9[i] - rv), t9den += rv * rv;
        }
        const double te = std::isfinite(tnum) ? tnum / den : INFINITY, t9e = std::isfinite(t9num) ? t9num / t9den : INFINITY;
        snprintf(what, sizeof what, "tiled prefill attention pieces, head_dim %d, block %d, window %d: 12 rows in tiles of %d against "
                 "kvt_attention (1e-6), the 9 prefill rows alone against the chunked pieces (1e-10)", D, BL, W, KVT_ATTN_TQ);
        snprintf(msg, sizeof msg, "%s%snmse %.3g (12 rows), %.3g (9 rows)", ok ? "" : err.msg, ok ? "" : "; ", te, t9e);
        printf("     tiled, head_dim %d, window %d: nmse %.3g (12 rows against kvt_attention), %.3g (9 rows against the chunked pieces)\n", D,
               W, te, t9e);
        report(ok && te <= 1e-6 && t9e <= 1e-10, what, msg);
    }
}

} // namespace

int main() {
    static const int types[] = {KVT_CUDA_F32, KVT_CUDA_F16, KVT_CUDA_BF16, KVT_CUDA_Q4_0, KVT_CUDA_Q4_1,
                                KVT_CUDA_Q8_0, KVT_CUDA_Q4_K, KVT_CUDA_Q5_K, KVT_CUDA_Q6_K};
    for (int t : types) dispatch_type<check_op>(t, true, kvt_type_name((kvt_type)t), (uint64_t)(1000 + t));
    check_intrinsics();
    for (int t : types)
        if (mmvq_type(t)) dispatch_type<check_mmvq_op>(t, true, kvt_type_name((kvt_type)t), (uint64_t)(2000 + t));
    check_elementwise();
    check_reductions();
    check_gemm_layout();
    check_attention();
    printf("cuda host check: %d failed\n", g_failed);
    return g_failed ? 1 : 0;
}
