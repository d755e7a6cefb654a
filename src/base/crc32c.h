// crc32c.h - CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the
// checksum of KV blocks on disk and of persistent KV files.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at the
// first call, no other state), else a byte table computed at compile time.
#ifndef KVT_CRC32C_H
#define KVT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

// Continues a CRC: crc = kvt_crc32c(0, a, n) then kvt_crc32c(crc, b, m) equals
// the CRC of a followed by b. kvt_crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t kvt_crc32c(uint32_t crc, const void *data, size_t n);
// The portable table implementation (for tests comparing both paths).
uint32_t kvt_crc32c_sw(uint32_t crc, const void *data, size_t n);
// The CRC of A followed by B from crc_a = CRC(A), crc_b = CRC(B) and B's length in bytes (no pass over the data).
uint32_t kvt_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
// Copies n bytes from src to dst (not overlapping) and returns kvt_crc32c(crc, src, n): one pass over memory (the
// CRC reads each piece just copied, from cache).
uint32_t kvt_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n);

#endif
