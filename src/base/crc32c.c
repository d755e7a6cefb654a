// crc32c.c - CRC-32C with the SSE4.2 instruction and a table fallback.
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

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t c = ~crc;
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
