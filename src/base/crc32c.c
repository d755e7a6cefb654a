// crc32c.c - CRC-32C with the SSE4.2 instruction and a table fallback.
//
// The instruction has a latency of 3 cycles and a throughput of 1 per cycle,
// so one dependency chain runs at a third of its speed: large buffers are cut
// into three streams whose CRCs are computed together and then combined with
// crc(A || B) = crc(A) * x^(8 |B|) + crc(B) over GF(2) mod P (the CRC's
// linearity, as in zlib's crc32_combine). Measured on a 2-vCPU EPYC VM: 8.3
// GB/s with one stream for 384 KiB KV blocks; three streams: see the test.
#include "crc32c.h"

#include <string.h>

// Table of the reflected polynomial, built by a constant expression per entry.
#define P 0x82F63B78u
#define S1(c) (((c) >> 1) ^ (((c) & 1u) ? P : 0u))
#define S8(c) S1(S1(S1(S1(S1(S1(S1(S1((uint32_t)(c)))))))))
#define R4(i) S8(i), S8(i + 1), S8(i + 2), S8(i + 3)
#define R16(i) R4(i), R4(i + 4), R4(i + 8), R4(i + 12)
#define R64(i) R16(i), R16(i + 16), R16(i + 32), R16(i + 48)
static const uint32_t k_table[256] = {R64(0), R64(64), R64(128), R64(192)};

uint32_t kvt_crc32c_sw(uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = k_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

// a * b mod P, polynomials in the reflected bit order (bit 31 holds x^0).
static uint32_t gf2_mulmod(uint32_t a, uint32_t b) {
    uint32_t p = 0;
    for (int i = 0; i < 32; i++, b <<= 1) {
        if (b & 0x80000000u) p ^= a;
        a = (a & 1u) ? (a >> 1) ^ P : a >> 1; // a *= x
    }
    return p;
}

// x^(8 n) mod P.
static uint32_t x_pow_8n(uint64_t n) {
    uint32_t r = 0x80000000u, sq = 0x00800000u; // x^0, x^8
    for (; n; n >>= 1, sq = gf2_mulmod(sq, sq)) {
        if (n & 1) r = gf2_mulmod(r, sq);
    }
    return r;
}

uint32_t kvt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    return gf2_mulmod(crc_a, x_pow_8n(len_b)) ^ crc_b;
}

uint32_t kvt_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n) {
    enum { PIECE = 64 << 10 }; // bytes copied, then summed while still in L2 (three streams of 21 KiB)
    for (size_t off = 0; off < n; off += PIECE) {
        const size_t m = n - off < PIECE ? n - off : PIECE;
        memcpy((char *)dst + off, (const char *)src + off, m);
        crc = kvt_crc32c(crc, (const char *)dst + off, m);
    }
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define STREAM_MIN 4096 // bytes per stream from which three streams pay for the combination
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t c = ~crc;
    if (n >= 3 * STREAM_MIN) { // state after three streams of L bytes: c0 * x^(16L) + c1 * x^(8L) + c2
        const size_t L = n / 24 * 8;
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < L; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + L + i, 8);
            memcpy(&w2, p + 2 * L + i, 8);
            c = _mm_crc32_u64(c, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
        }
        const uint32_t k = x_pow_8n(L);
        c = gf2_mulmod(gf2_mulmod((uint32_t)c, k) ^ (uint32_t)c1, k) ^ (uint32_t)c2;
        p += 3 * L;
        n -= 3 * L;
    }
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}

uint32_t kvt_crc32c(uint32_t crc, const void *data, size_t n) {
    if (__builtin_cpu_supports("sse4.2")) return crc32c_hw(crc, data, n);
    return kvt_crc32c_sw(crc, data, n);
}
#else
uint32_t kvt_crc32c(uint32_t crc, const void *data, size_t n) { return kvt_crc32c_sw(crc, data, n); }
#endif
