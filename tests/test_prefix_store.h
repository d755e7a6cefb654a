// test_prefix_store.h - helpers shared by the two halves of the prefix_store suite (synthetic blocks).
#ifndef KVT_TEST_PREFIX_STORE_H
#define KVT_TEST_PREFIX_STORE_H

#include <stdint.h>

#include "../src/kv/prefix_store.h"
#include "test.h"

// A small identity (2 layers, 2 KV heads of 8 dims, F16) with the given fingerprint and block size.
kvt_prefix_identity tps_identity(uint32_t fingerprint, uint32_t block_tokens);
// The key and the payload bytes (n) of synthetic block i.
kvt_block_key tps_key(int i);
void tps_payload(int i, uint8_t *p, int64_t n);
// Gets block i into buf (payload_bytes) and compares with its payload (want: scratch of the same size):
// 1 hit with the right bytes, 0 miss, -1 hit with wrong bytes.
int tps_get_check(kvt_prefix_store *s, int i, uint8_t *buf, uint8_t *want);
// Puts block i.
void tps_put(kvt_prefix_store *s, int i);
// Hits with the right bytes among blocks [a, b); -1000 if any hit had wrong bytes.
int tps_hits(kvt_prefix_store *s, int a, int b);
// 4 threads putting and getting blocks 0..39 at once, then a flush: hits with wrong bytes (*hits: all hits).
int tps_threads(kvt_prefix_store *s, int *hits);
// The Redis half (test_prefix_store_redis.c).
void tps_redis_tests(const test_env *env);

#endif
