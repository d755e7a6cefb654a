// test_rng.h - the kernel suites' random numbers: xorshift64 from a fixed seed, its state per includer (g_rng), uniform
// in (0, 1) and normal (Box-Muller) floats.
#ifndef KVT_TEST_RNG_H
#define KVT_TEST_RNG_H
#include <math.h>
#include <stdint.h>

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static inline uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}
static inline float rnd_uniform(void) { return ((float)(rnd_u32() >> 8) + 0.5f) * (1.0f / 16777216.0f); }
static inline float rnd_normal(void) {
    const float u = rnd_uniform(), v = rnd_uniform();
    return sqrtf(-2.f * logf(u)) * cosf(6.2831853f * v);
}

#endif
