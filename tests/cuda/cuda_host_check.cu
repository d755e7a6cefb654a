// cuda_host_check.cu - runs the CUDA backend's host-and-device code on the CPU against this repo's
// references, so that what is most likely to be wrong is checked on machines without a GPU: the block
// decoders (src/cuda/cuda_blocks.cuh) against quant.c's to_float for every weight type, and the
// per-item bodies of the kernels (src/cuda/cuda_items.cuh: matvec lanes, dequantize, get rows, RoPE,
// SwiGLU, GeGLU) against src/kernels. Launches, shuffles, shared memory and block reductions are not
// covered (they need a device). Built and run by `make cuda-check` (nvcc, no device); exit 0 = all pass.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "../../src/kernels/dtype.h"
#include "../../src/kernels/f16.h"
#include "../../src/kernels/quant.h"
#include "../../src/kernels/vec.h"
}
#include "../../src/cuda/cuda_items.cuh"

namespace {

constexpr int64_t kN = 4096; // elements per row (16 super-blocks)
int g_failed = 0;

void report(bool ok, const char *what, const char *detail) {
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, ok ? "" : ": ", ok ? "" : detail);
    g_failed += !ok;
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
        char what[96];
        snprintf(what, sizeof what, "rope_item neox %d, n_rot %d, scale %g%s: bit for bit as vec.c", c.neox, c.n_rot, c.scale,
                 c.factors ? ", freq factors" : "");
        report(!memcmp(x.data(), ref.data(), x.size() * sizeof(float)), what, "differs");
    }
    std::vector<float> g = random_floats(4096, 5), u = random_floats(4096, 6), a = g, b = g;
    for (auto &e : g) e *= 6.0f;
    a = g, b = g;
    kvt_swiglu_f32(a.data(), u.data(), 4096);
    kvt_geglu_f32(b.data(), u.data(), 4096);
    bool ok_s = true, ok_g = true;
    for (size_t i = 0; i < g.size(); i++) {
        const float s = silu_op::f(g[i]) * u[i], e = gelu_tanh_op::f(g[i]) * u[i];
        ok_s = ok_s && !memcmp(&s, &a[i], 4);
        ok_g = ok_g && !memcmp(&e, &b[i], 4);
    }
    report(ok_s, "silu_op: bit for bit as kvt_swiglu_f32", "differs");
    report(ok_g, "gelu_tanh_op: bit for bit as kvt_geglu_f32", "differs");
}

} // namespace

int main() {
    static const int types[] = {KVT_CUDA_F32, KVT_CUDA_F16, KVT_CUDA_BF16, KVT_CUDA_Q4_0, KVT_CUDA_Q4_1,
                                KVT_CUDA_Q8_0, KVT_CUDA_Q4_K, KVT_CUDA_Q5_K, KVT_CUDA_Q6_K};
    for (int t : types) dispatch_type<check_op>(t, true, kvt_type_name((kvt_type)t), (uint64_t)(1000 + t));
    check_elementwise();
    printf("cuda host check: %d failed\n", g_failed);
    return g_failed ? 1 : 0;
}
