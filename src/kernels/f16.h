// f16.h - IEEE binary16 and bfloat16 <-> binary32 conversions.
//
// The scalar converters are pure software (bit manipulation only), usable in
// any translation unit regardless of its SIMD flags. Rounding is IEEE
// round-to-nearest-even in both narrowing directions; NaNs stay NaNs (quiet),
// infinities stay infinities, f16 subnormals are produced and consumed exactly.
// The row converters pick the fastest implementation for the running CPU.
#ifndef KVT_F16_H
#define KVT_F16_H

#include <stdint.h>
#include <string.h>

static inline float kvt_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t kvt_f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// binary16 bits -> float (exact).
static inline float kvt_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        // zero or subnormal: mant * 2^-24, exact in binary32
        const float v = (float)mant * 0x1p-24f;
        return kvt_bits_to_f32(kvt_f32_to_bits(v) | sign);
    }
    if (exp == 31) return kvt_bits_to_f32(sign | 0x7f800000u | (mant << 13));
    return kvt_bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float -> binary16 bits, round to nearest even; overflow gives +-inf.
static inline uint16_t kvt_f32_to_f16(float f) {
    const uint32_t x = kvt_f32_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) // NaN: keep the top payload bits, force quiet
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // >= 65520 (incl. inf)
    if (ax >= 0x38800000u) { // normal f16 range: rebias exponent, round 13 bits
        const uint32_t v = ax - (112u << 23);
        return (uint16_t)(sign | ((v + 0xfffu + ((v >> 13) & 1u)) >> 13));
    }
    if (ax <= 0x33000000u) return (uint16_t)sign; // <= 2^-25 rounds to (signed) zero
    // subnormal f16: value in units of 2^-24 is m >> (126 - e), rounded
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e; // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

// bfloat16 bits -> float (exact).
static inline float kvt_bf16_to_f32(uint16_t h) { return kvt_bits_to_f32((uint32_t)h << 16); }

// float -> bfloat16 bits, round to nearest even; NaNs are made quiet.
static inline uint16_t kvt_f32_to_bf16(float f) {
    const uint32_t x = kvt_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Row converters, n elements each (any n >= 0), SIMD-dispatched.
void kvt_f16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void kvt_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n);
void kvt_bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void kvt_f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n);

#endif
