// fuzz_gguf.c - fuzz target for the GGUF reader.
//
// With clang: libFuzzer entry point (make fuzz). Without: linked with
// fuzz/fuzz_main.c, a small mutation driver (`fuzz_gguf SECONDS seed.gguf...`).
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvt_gguf *g;
    kvt_err err;
    if (kvt_gguf_open_buffer(data, size, "fuzz", &g, &err) == KVT_OK) {
        // touch everything the reader hands out
        volatile uint64_t acc = 0;
        for (int64_t i = 0; i < kvt_gguf_n_kv(g); i++) {
            kvt_str k = kvt_gguf_key(g, i);
            if (k.len) acc += (uint8_t)k.ptr[k.len - 1];
        }
        for (int64_t i = 0; i < kvt_gguf_n_tensors(g); i++) {
            const kvt_gguf_tensor *t = kvt_gguf_tensor_at(g, i);
            if (t->size) acc += ((const uint8_t *)t->data)[t->size - 1];
        }
        kvt_gguf_arr arr;
        if (kvt_gguf_get_arr(g, "tokenizer.ggml.tokens", &arr, NULL) == KVT_OK && arr.type == KVT_GGUF_STRING) {
            for (uint64_t i = 0; i < arr.n; i++) acc += kvt_gguf_arr_str(g, &arr, i).len;
        }
        (void)acc;
        kvt_gguf_free(g);
    }
    return 0;
}
