// fuzz_prefix_entry.c - fuzz target for the entry parser of the prefix-block stores (src/kv/prefix_entry.c):
// each input is a whole entry (96-byte header, then payload). It is checked by itself (any identity), then
// against a fixed identity and key, then written as that key's file into a directory store opened with a
// 64-byte payload and read back through kvt_prefix_store_get: a hit must return the input's payload. Inputs
// of even length get their CRC32C recomputed first, so that mutations reach the checks past the checksum.
// At start a valid entry is written to $KVT_FUZZ_SEED_DIR/seed.kvb (when set) to seed the corpus.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/base/crc32c.h"
#include "../src/kv/prefix_entry.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PAYLOAD 64
static kvt_prefix_identity g_id;
static const kvt_block_key g_key = {0x0123456789abcdefull, 0xfedcba9876543210ull};
static kvt_prefix_store *g_store;
static char g_dir[64], g_path[160];

static void cleanup(void) { // the store's directory holds no other file
    unlink(g_path);
    kvt_prefix_store_free(g_store);
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    memset(&g_id, 0, sizeof g_id);
    g_id.model_fingerprint = 0xC0FFEE;
    strcpy(g_id.arch, "llama");
    g_id.n_layer = 1, g_id.n_head_kv = 1, g_id.head_dim = 8, g_id.head_dim_v = 8;
    g_id.kv_type = 1, g_id.block_tokens = 2, g_id.layout = 1;
    snprintf(g_dir, sizeof g_dir, "/tmp/kvt_fuzz_prefix_%d", (int)getpid());
    kvt_prefix_store_dir_params p = kvt_prefix_store_dir_params_default();
    p.inflight_bytes = 0;
    kvt_err err;
    if (kvt_prefix_store_dir_open_params(g_dir, &g_id, PAYLOAD, &p, &g_store, &err)) {
        fprintf(stderr, "fuzz_prefix_entry: %s\n", err.msg);
        exit(2);
    }
    snprintf(g_path, sizeof g_path, "%s/%08x-%016llx%016llx.kvb", g_dir, kvt_prefix_identity_hash(&g_id),
             (unsigned long long)g_key.hi, (unsigned long long)g_key.lo);
    atexit(cleanup);
    const char *seed_dir = getenv("KVT_FUZZ_SEED_DIR");
    if (seed_dir) {
        uint8_t e[KVT_PREFIX_ENTRY_HEADER_BYTES + PAYLOAD];
        for (int i = 0; i < PAYLOAD; i++) e[KVT_PREFIX_ENTRY_HEADER_BYTES + i] = (uint8_t)(i * 37);
        kvt_prefix_entry_header(e, &g_id, &g_key, kvt_crc32c(0, e + KVT_PREFIX_ENTRY_HEADER_BYTES, PAYLOAD), PAYLOAD);
        char seed[4096];
        snprintf(seed, sizeof seed, "%s/seed.kvb", seed_dir);
        FILE *f = fopen(seed, "wb");
        if (f) fwrite(e, 1, sizeof e, f), fclose(f);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const size_t H = KVT_PREFIX_ENTRY_HEADER_BYTES;
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    if (size % 2 == 0 && size >= H) {
        memset(buf + 88, 0, 4);
        const uint32_t crc = kvt_crc32c(kvt_crc32c(0, buf, H), buf + H, size - H);
        for (int i = 0; i < 4; i++) buf[88 + i] = (uint8_t)(crc >> (8 * i));
    }
    const size_t hl = size < H ? size : H;
    kvt_prefix_identity id;
    kvt_block_key key;
    kvt_err err;
    kvt_prefix_entry_check(buf, hl, buf + hl, size - hl, NULL, NULL, &id, &key, &err);
    const bool ok = kvt_prefix_entry_check(buf, hl, buf + hl, size - hl, &g_id, &g_key, NULL, NULL, &err) == KVT_OK;
    FILE *f = fopen(g_path, "wb");
    if (f) {
        fwrite(buf, 1, size, f);
        fclose(f);
        uint8_t out[PAYLOAD];
        bool hit = false;
        kvt_prefix_store_get(g_store, &g_key, out, &hit);
        if (hit && (!ok || size != H + PAYLOAD || memcmp(out, buf + H, PAYLOAD) != 0)) {
            fprintf(stderr, "fuzz_prefix_entry: a hit on an entry that fails its checks\n");
            abort();
        }
        unlink(g_path);
    }
    free(buf);
    return 0;
}
