// fuzz_session.c - fuzz target for the KV session loader (src/exec/session.c): each input is a
// session file, loaded into a context of the model KVT_FUZZ_MODEL. Inputs of even length get their
// two CRC32Cs (token ids, whole file) recomputed first, so that mutations reach the checks and the
// restore past the checksums; odd lengths exercise the checksum path itself. At start a valid
// session of 12 tokens is written to $KVT_FUZZ_SEED_DIR/seed.kvsess (when set) to seed the corpus.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/base/crc32c.h"
#include "../src/exec/context.h"
#include "../src/exec/session.h"
#include "../src/model/model.h"
#include "fuzz_model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kvt_model *g_model;
static kvt_context *g_ctx;
static char g_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    kvt_err err;
    g_model = fuzz_load_model("fuzz_session");
    kvt_context_params cp = kvt_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    if (kvt_context_init(g_model, &cp, &g_ctx, &err)) fuzz_fail("fuzz_session", "context", &err);
    snprintf(g_path, sizeof g_path, "/tmp/kvt_fuzz_session_%d.kvsess", (int)getpid());
    const char *dir = getenv("KVT_FUZZ_SEED_DIR");
    if (dir) {
        int32_t toks[12];
        for (int i = 0; i < 12; i++) toks[i] = (int32_t)((1 + 7 * i) % g_model->hp.n_vocab);
        char seed[4096];
        snprintf(seed, sizeof seed, "%s/seed.kvsess", dir);
        if (kvt_decode(g_ctx, toks, 12, false, &err) || kvt_context_kv_save(g_ctx, 0, toks, 12, seed, &err)) {
            fuzz_fail("fuzz_session", "seed session", &err);
        }
        kvt_context_truncate(g_ctx, 0);
    }
    return 0;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    if (size % 2 == 0 && size >= KVT_SESSION_HEADER_BYTES + 4) {
        uint64_t n_tok = 0;
        for (int i = 0; i < 8; i++) n_tok |= (uint64_t)buf[64 + i] << (8 * i);
        if (n_tok <= (size - KVT_SESSION_HEADER_BYTES - 4) / 4) {
            put_u32(buf + 72, kvt_crc32c(0, buf + KVT_SESSION_HEADER_BYTES, (size_t)n_tok * 4));
        }
        put_u32(buf + size - 4, kvt_crc32c(0, buf, size - 4));
    }
    FILE *f = fopen(g_path, "wb");
    if (f) {
        fwrite(buf, 1, size, f);
        fclose(f);
        const int32_t prompt[4] = {1, 8, 15, 22};
        kvt_err err;
        kvt_session_info info;
        kvt_context_kv_load(g_ctx, 0, g_path, (size & 4) ? prompt : NULL, 4, -1, &info, &err);
        kvt_context_truncate(g_ctx, 0);
        unlink(g_path);
    }
    free(buf);
    return 0;
}
