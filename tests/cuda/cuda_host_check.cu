// cuda_host_check.cu - runs the CUDA backend's block decoders (src/cuda/cuda_blocks.cuh, host and device
// functions) on the CPU against the reference dequantizers of src/kernels/quant.c, for every weight
// type, so that the part of the kernels most likely to be wrong (bit layouts) is checked on machines
// without a GPU. Built and run by `make cuda-check` (nvcc, no device needed); exit status 0 = all equal.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "../../src/kernels/dtype.h"
#include "../../src/kernels/quant.h"
}
#include "../../src/cuda/cuda_blocks.cuh"

namespace {

constexpr int64_t kN = 4096; // elements per row (16 super-blocks)

// Decodes a row of kN elements of type T with the backend's decoder and compares it bit for bit with
// the reference's to_float. Returns 0 on success.
template <int T> struct check_op {
    static int run(const char *name, uint64_t seed) {
        const kvt_type t = (kvt_type)T;
        std::vector<float> src(kN), ref(kN), got(kN);
        for (int64_t i = 0; i < kN; i++) { // uniform in [-2, 2), never 0
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const float v = (float)((seed >> 40) & 0xffffff) / 4194304.0f - 2.0f;
            src[i] = v == 0.0f ? 0.25f : v;
        }
        const kvt_type_ops *ops = kvt_type_ops_ref(t);
        if (!ops || kvt_row_size(t, kN) != row_bytes<T>(kN)) {
            printf("FAIL %s: row size %lld, backend says %lld\n", name, (long long)kvt_row_size(t, kN),
                   (long long)row_bytes<T>(kN));
            return 1;
        }
        std::vector<uint8_t> row((size_t)kvt_row_size(t, kN));
        ops->from_float(src.data(), row.data(), kN);
        ops->to_float(row.data(), ref.data(), kN);
        for (int64_t g = 0; g < kN / 8; g++) row_get8<T>(row.data(), g, &got[(size_t)(8 * g)]);
        for (int64_t i = 0; i < kN; i++) {
            if (memcmp(&got[(size_t)i], &ref[(size_t)i], sizeof(float)) != 0) {
                printf("FAIL %s: element %lld decodes to %.9g, reference %.9g\n", name, (long long)i, got[(size_t)i], ref[(size_t)i]);
                return 1;
            }
        }
        printf("ok   %s: %lld elements decode bit for bit as quant.c's to_float\n", name, (long long)kN);
        return 0;
    }
};

} // namespace

int main() {
    static const int types[] = {KVT_CUDA_F32, KVT_CUDA_F16, KVT_CUDA_BF16, KVT_CUDA_Q4_0, KVT_CUDA_Q4_1,
                                KVT_CUDA_Q8_0, KVT_CUDA_Q4_K, KVT_CUDA_Q5_K, KVT_CUDA_Q6_K};
    int failed = 0;
    for (int t : types) {
        const int rc = dispatch_type<check_op>(t, true, kvt_type_name((kvt_type)t), (uint64_t)(1000 + t));
        failed += rc != 0;
    }
    printf("cuda host check: %d of %d types failed\n", failed, (int)(sizeof types / sizeof types[0]));
    return failed ? 1 : 0;
}
