// fuzz_model.h - what the fuzz targets that run a model share: a fatal start-up error, and the model KVT_FUZZ_MODEL
// loaded once (fuzz/run.sh sets it to stories260K.gguf). Header-only: each target is one translation unit.
#ifndef KVT_FUZZ_MODEL_H
#define KVT_FUZZ_MODEL_H

#include <stdio.h>
#include <stdlib.h>

#include "../src/model/model.h"

// Start-up failures (not findings): "<target>: <what>: <message>" on stderr, exit status 2.
static void fuzz_fail(const char *target, const char *what, const kvt_err *err) {
    fprintf(stderr, "%s: %s: %s\n", target, what, err ? err->msg : "");
    exit(2);
}

// The model of KVT_FUZZ_MODEL (owned by the caller for the process's life), or fuzz_fail.
static kvt_model *fuzz_load_model(const char *target) {
    const char *path = getenv("KVT_FUZZ_MODEL");
    kvt_model *m = NULL;
    kvt_err err;
    if (!path) fuzz_fail(target, "set KVT_FUZZ_MODEL to a model GGUF", NULL);
    if (kvt_model_load(path, false, &m, &err)) fuzz_fail(target, "model", &err);
    return m;
}

#endif
