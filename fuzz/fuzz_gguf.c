// fuzz_gguf.c - fuzz target for the GGUF reader.
//
// With clang: libFuzzer entry point (make fuzz). Without: KVT_FUZZ_STANDALONE
// builds a small mutation driver: `fuzz_gguf SECONDS seed.gguf...` flips,
// truncates and splices bytes of the seeds for the given time.
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

#ifdef KVT_FUZZ_STANDALONE
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SECONDS seed.gguf...\n", argv[0]);
        return 2;
    }
    double secs = atof(argv[1]);
    int ns = argc - 2;
    uint8_t **seeds = calloc((size_t)ns, sizeof *seeds);
    size_t *lens = calloc((size_t)ns, sizeof *lens);
    for (int i = 0; i < ns; i++) {
        FILE *f = fopen(argv[i + 2], "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        if (n > (1 << 20)) n = 1 << 20; // headers are what matter
        seeds[i] = malloc((size_t)n);
        lens[i] = fread(seeds[i], 1, (size_t)n, f);
        fclose(f);
    }
    uint64_t r = 0x1234567;
    long iters = 0;
    clock_t end = clock() + (clock_t)(secs * CLOCKS_PER_SEC);
    while (clock() < end) {
        int s = (int)(iters % ns);
        if (!seeds[s] || !lens[s]) {
            iters++;
            continue;
        }
        size_t n = lens[s];
        uint8_t *buf = malloc(n);
        memcpy(buf, seeds[s], n);
        int k = 1 + (int)((r >> 7) % 8);
        for (int j = 0; j < k; j++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)((r >> 17) % (n < 4096 ? n : 4096)); // mostly the header
            buf[pos] = (uint8_t)(r >> 40);
        }
        size_t len = (r >> 50) % 4 == 0 ? (size_t)((r >> 20) % n) : n;
        LLVMFuzzerTestOneInput(buf, len);
        free(buf);
        iters++;
    }
    printf("fuzz_gguf: %ld inputs, no crash\n", iters);
    for (int i = 0; i < ns; i++) free(seeds[i]);
    free(seeds);
    free(lens);
    return 0;
}
#endif
