// fuzz_model.h - what the fuzz targets that run a model share: a fatal start-up error, the model KVT_FUZZ_MODEL
// loaded once (fuzz/run.sh sets it to stories260K.gguf), and the seeds a target writes into its corpus. Header-only:
// each target is one translation unit.
#ifndef KVT_FUZZ_MODEL_H
#define KVT_FUZZ_MODEL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/model/model.h"

// Start-up failures (not findings): "<target>: <what>: <message>" on stderr, exit status 2.
static inline void fuzz_fail(const char *target, const char *what, const kvt_err *err) {
    fprintf(stderr, "%s: %s: %s\n", target, what, err ? err->msg : "");
    exit(2);
}

// The model of KVT_FUZZ_MODEL (owned by the caller for the process's life), or fuzz_fail.
static inline kvt_model *fuzz_load_model(const char *target) {
    const char *path = getenv("KVT_FUZZ_MODEL");
    kvt_model *m = NULL;
    kvt_err err;
    if (!path) fuzz_fail(target, "set KVT_FUZZ_MODEL to a model GGUF", NULL);
    if (kvt_model_load(path, false, &m, &err)) fuzz_fail(target, "model", &err);
    return m;
}

// seeds[0..n) written to $KVT_FUZZ_SEED_DIR/seed<i>.json when it is set (fuzz/run.sh's `seeded`); each seed is its
// first byte (the target's selector, may be 0) and a NUL-terminated body after it.
static inline void fuzz_write_seeds(const char *target, const char *const *seeds, size_t n) {
    const char *dir = getenv("KVT_FUZZ_SEED_DIR");
    for (size_t i = 0; dir && i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/seed%zu.json", dir, i);
        FILE *f = fopen(path, "wb");
        if (!f) fuzz_fail(target, "seed file", NULL);
        fwrite(seeds[i], 1, 1 + strlen(seeds[i] + 1), f);
        fclose(f);
    }
}

#endif
