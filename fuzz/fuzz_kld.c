// fuzz_kld.c - fuzz target for the reader of llama-perplexity's base log-probability files (src/sched/kld.c,
// `perplexity --kl-divergence`): each input is a base file, opened (no vocabulary expected, so that any header
// the size checks pass gets to the rows), every row of its first chunks read and fed to the statistics against
// made-up logits. At start a valid file of 2 chunks of 8 tokens over 13 entries is written to
// $KVT_FUZZ_SEED_DIR/seed.kld (when set) to seed the corpus.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/sched/kld.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    snprintf(g_path, sizeof g_path, "/tmp/kvt_fuzz_kld_%d.kld", (int)getpid());
    const char *dir = getenv("KVT_FUZZ_SEED_DIR");
    if (dir) {
        enum { CTX = 8, VOCAB = 13, CHUNKS = 2 };
        int32_t toks[CTX * CHUNKS];
        for (int i = 0; i < CTX * CHUNKS; i++) toks[i] = (5 * i + 1) % VOCAB;
        char seed[4096];
        snprintf(seed, sizeof seed, "%s/seed.kld", dir);
        kvt_kld_writer *w;
        kvt_err err;
        kvt_status st = kvt_kld_writer_open(seed, CTX, VOCAB, CHUNKS, toks, &w, &err);
        float logits[VOCAB];
        for (int r = 0; !st && r < CHUNKS * (CTX - 1 - CTX / 2); r++) {
            for (int i = 0; i < VOCAB; i++) logits[i] = (float)((i * 7 + r * 3) % 11) - (r == 2 ? 30.0f : 4.0f) * (i == 3);
            st = kvt_kld_writer_row(w, logits, &err);
        }
        if (!st) st = kvt_kld_writer_finish(w, true, &err);
        if (st) {
            fprintf(stderr, "fuzz_kld: seed: %s\n", err.msg);
            exit(2);
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(g_path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    kvt_kld_base *b = NULL;
    kvt_err err;
    if (!kvt_kld_base_open(g_path, 0, &b, &err)) {
        const int32_t n_vocab = kvt_kld_base_n_vocab(b), n_ctx = kvt_kld_base_n_ctx(b);
        const int32_t n_chunk = kvt_kld_base_n_chunk(b) < 3 ? kvt_kld_base_n_chunk(b) : 3;
        const int64_t rows = n_ctx - 1 - n_ctx / 2 < 64 ? n_ctx - 1 - n_ctx / 2 : 64;
        uint16_t *words = malloc((size_t)kvt_kld_row_words(n_vocab) * sizeof *words);
        float *logits = malloc((size_t)n_vocab * sizeof *logits);
        kvt_kld_stats s;
        if (words && logits && !kvt_kld_stats_init(&s, n_chunk * rows, &err)) {
            for (int32_t i = 0; i < n_vocab; i++) logits[i] = (float)(i % 17) * 0.5f - 3.0f;
            const int32_t *toks = kvt_kld_base_tokens(b);
            for (int32_t c = 0; c < n_chunk; c++) {
                for (int64_t r = 0; r < rows; r++) {
                    if (kvt_kld_base_row(b, c, r, words, &err)) continue;
                    kvt_kld_stats_add(&s, logits, words, n_vocab, toks[(int64_t)c * n_ctx + n_ctx / 2 + r + 1]);
                }
            }
            kvt_kld_summary sum;
            kvt_kld_summarize(&s, &sum);
            kvt_kld_stats_free(&s);
        }
        free(words);
        free(logits);
        kvt_kld_base_close(b);
    }
    unlink(g_path);
    return 0;
}
