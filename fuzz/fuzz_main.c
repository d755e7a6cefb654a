// fuzz_main.c - standalone driver for the fuzz targets when clang's libFuzzer is absent:
// `TARGET SECONDS seed...` flips bytes (mostly in the first 4 KiB: headers) and truncates
// copies of the seeds, calling LLVMFuzzerTestOneInput on each, for the given time. A target's
// LLVMFuzzerInitialize, when it has one, runs first (as libFuzzer runs it).
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SECONDS [seed...]\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    const double secs = atof(argv[1]);
    int ns = argc - 2;
    uint8_t **seeds = calloc((size_t)(ns > 0 ? ns : 1), sizeof *seeds);
    size_t *lens = calloc((size_t)(ns > 0 ? ns : 1), sizeof *lens);
    for (int i = 0; i < ns; i++) { // whole files: tensor data past the header is part of what is checked
        FILE *f = fopen(argv[i + 2], "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        seeds[i] = malloc(n > 0 ? (size_t)n : 1);
        lens[i] = n > 0 ? fread(seeds[i], 1, (size_t)n, f) : 0;
        fclose(f);
    }
    if (ns == 0) { // no seed: random short inputs
        ns = 1;
        seeds[0] = calloc(256, 1);
        lens[0] = 256;
    }
    uint64_t r = 0x1234567;
    long iters = 0;
    const clock_t end = clock() + (clock_t)(secs * CLOCKS_PER_SEC);
    while (clock() < end) {
        const int s = (int)(iters % ns);
        if (!seeds[s] || !lens[s]) {
            iters++;
            continue;
        }
        const size_t n = lens[s];
        uint8_t *buf = malloc(n);
        memcpy(buf, seeds[s], n);
        const int k = 1 + (int)((r >> 7) % 8);
        for (int j = 0; j < k; j++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            const size_t pos = (size_t)((r >> 17) % (n < 4096 || (r & 15) == 0 ? n : 4096)); // mostly the header
            buf[pos] = (uint8_t)(r >> 40);
        }
        const size_t len = (r >> 50) % 4 == 0 ? (size_t)((r >> 20) % n) : n;
        LLVMFuzzerTestOneInput(buf, len);
        free(buf);
        iters++;
    }
    printf("%s: %ld inputs, no crash\n", argv[0], iters);
    for (int i = 0; i < ns; i++) free(seeds[i]);
    free(seeds);
    free(lens);
    return 0;
}
