// fuzz_infill.c - fuzz target for POST /infill (src/serve/infill.c, native_prompt.c): the first input byte picks the
// vocabulary (bit 0: with FIM_REP / FIM_SEP and no BOS, else neither and BOS added), --spm-infill (bit 1) and the
// budgets (bits 2-7: -b = 4 + 4 * those bits, -c = -b + 64 (bit 7) or -b / 2); the rest is the request body, parsed as
// kvt_request_parse(KVT_REQ_INFILL) and, when valid, turned into the prompt's token ids. Checked: the ids are in the
// vocabulary, the prompt ends with FIM_MID and holds at most the budgets' tokens (extra context, BOS, FIM_PRE, prefix,
// prompt, FIM_SUF, suffix, FIM_MID); a refusal is a 400 naming a field (or a 500). The vocabularies are written at start
// (byte-level BPE, one token per character, the FIM tokens as control tokens). A request with the infill sampler
// (editor plugins), typical_p, top_n_sigma, XTC, a dynamic temperature, mirostat, DRY or adaptive-p also draws three tokens through
// the sampler (sched/sampler.c) with its settings over logits made from the input's bytes: each id in the
// vocabulary (DRY: its breakers made from the request's strings, the prompt's ids in its window). Seeds go to $KVT_FUZZ_SEED_DIR.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/gguf/gguf.h"
#include "../src/model/tokenizer.h"
#include "../src/sched/sampler.h"
#include "../src/serve/infill.h"
#include "../src/serve/request.h"
#include "fuzz_model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kvt_tokenizer *g_tok[2]; // [0] FIM_PRE / SUF / MID only, BOS added; [1] with FIM_REP and FIM_SEP

// Vocabulary k: the printable ASCII bytes as GPT-2's byte-to-unicode pieces (space U+0120, newline U+010A), then
// "<bos>" and the control tokens.
static kvt_tokenizer *vocab(int k) {
    static const char *const ctl[] = {"<bos>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>",
                                      "<|repo_name|>", "<|file_sep|>"};
    const int n_ctl = k ? 7 : 5;
    static char bytes[95][3];
    const char *toks[128];
    int32_t ty[128];
    int n = 0;
    for (int c = 33; c < 127; c++, n++) bytes[n][0] = (char)c, toks[n] = bytes[n], ty[n] = 1;
    toks[n] = "\xc4\xa0", ty[n++] = 1;
    toks[n] = "\xc4\x8a", ty[n++] = 1;
    const int bos = n;
    for (int i = 0; i < n_ctl; i++) toks[n] = ctl[i], ty[n++] = 3;
    kvt_gguf_writer *w = kvt_gguf_writer_init();
    kvt_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    kvt_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    kvt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    kvt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KVT_GGUF_I32, ty, (uint64_t)n);
    static const char *const merges[] = {"a b"};
    kvt_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    kvt_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", k == 0);
    kvt_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    char path[] = "/tmp/kvt-fuzz-infill-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) fuzz_fail("fuzz_infill", "temporary vocabulary file", NULL);
    close(fd);
    kvt_err err = {0};
    kvt_gguf *g = NULL;
    kvt_tokenizer *t = NULL;
    if (kvt_gguf_writer_write(w, path, &err) || kvt_gguf_open(path, &g, &err) || kvt_tokenizer_init(g, &t, &err))
        fuzz_fail("fuzz_infill", "vocabulary", &err);
    kvt_gguf_writer_free(w);
    kvt_gguf_free(g);
    unlink(path);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    g_tok[0] = vocab(0);
    g_tok[1] = vocab(1);
    static const char *const seeds[] = {
        "\x41{\"input_prefix\":\"def f(x):\\n  \",\"input_suffix\":\"\\nprint(f(2))\\n\",\"prompt\":\"return\"}",
        "\x02{\"input_prefix\":[\"a\",12,\"b\"],\"input_suffix\":\"c\",\"input_extra\":[{\"filename\":\"u.py\","
        "\"text\":\"x = 1\\n\"},{\"text\":\"y\"}]}",
        "\x81{\"input_prefix\":\"abcdefghijklmnopqrstuvwxyz\",\"input_suffix\":\"0123456789\",\"prompt\":"
        "\"<|fim_pad|>z\",\"input_extra\":[{\"text\":\"qqqqqqqqqqqqqqqqqqqq\"}],\"n_predict\":4}",
        "\x41{\"input_prefix\":\"if x:\\n    \",\"input_suffix\":\"\\n\",\"n_indent\":4,\"top_k\":40,\"top_p\":0.99,"
        "\"samplers\":[\"top_k\",\"top_p\",\"infill\"],\"t_max_predict_ms\":500,\"response_fields\":[\"content\"]}",
        "\x01{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"samplers\":\"ki\",\"top_k\":0,\"temperature\":0}",
        "\x01{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"typical_p\":0.4,\"top_n_sigma\":1.5,\"top_k\":0}",
        "\x01{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"xtc_probability\":1,\"xtc_threshold\":0.01,"
        "\"dynatemp_range\":2,\"dynatemp_exponent\":0.5,\"temperature\":0}",
        "\x01{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"mirostat\":1,\"mirostat_tau\":0.5,\"mirostat_eta\":2}",
        "\x41{\"input_prefix\":\"abab:ab\\nab\",\"input_suffix\":\"ab\",\"prompt\":\"abab\",\"dry_multiplier\":0.8,"
        "\"dry_allowed_length\":1,\"temperature\":0}",
        "\x41{\"input_prefix\":\"xyxyxy\",\"input_suffix\":\"\",\"dry_multiplier\":2,\"dry_base\":1e30,"
        "\"dry_allowed_length\":0,\"dry_penalty_last_n\":3,\"dry_sequence_breakers\":[\"yx\",\"\\u0000a\",\"\"]}",
        "\x01{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"samplers\":\"kta\",\"adaptive_target\":0.2,"
        "\"adaptive_decay\":0.99}",
    };
    fuzz_write_seeds("fuzz_infill", seeds, sizeof seeds / sizeof seeds[0]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int sel = data[0];
    const kvt_tokenizer *t = g_tok[sel & 1];
    const int64_t b = 4 + 4 * ((sel >> 2) & 31);
    const kvt_infill_limits lim = {(sel & 0x80) ? b + 64 : b / 2, b, -1, (sel & 2) != 0};
    kvt_request *r = NULL;
    kvt_api_error e = {0};
    if (kvt_request_parse((const char *)data + 1, size - 1, KVT_REQ_INFILL, &r, &e) != KVT_OK) {
        if (e.http_status != 400 && e.http_status != 500) __builtin_trap();
        return 0;
    }
    const kvt_request_params *p = kvt_request_get(r);
    if (p->kind != KVT_REQ_NATIVE || !p->native || !p->native->infill) __builtin_trap();
    int64_t n = -1;
    int32_t *ids = kvt_infill_prompt_ids(p->native->infill, t, &lim, &n, &e);
    if (!ids) {
        if (e.http_status != 400 && e.http_status != 500) __builtin_trap();
    } else {
        const int32_t nv = kvt_tokenizer_n_vocab(t);
        for (int64_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= nv) __builtin_trap();
        // the prompt's own tokens come on top of the budgets
        kvt_err err = {0};
        const char *pr = p->native->infill->prompt;
        const int64_t n_prompt = kvt_tokenize(t, pr, strlen(pr), false, true, NULL, 0, &err);
        const int64_t room = lim.n_ctx - lim.n_batch + 2, most = (room > 0 ? room : 0) + 1 + 1 + 3 * (b / 4) +
                                                             n_prompt + 1 + (b / 4 > 2 ? b / 4 - 2 : 0) + 1;
        if (n < 3 || ids[n - 1] != kvt_token_fim(t, KVT_FIM_MID) || n > most) __builtin_trap();
    }
    const bool dry = p->dry_multiplier != 0 && p->dry_penalty_last_n > 0;
    if (p->infill_sampler || p->typical_p < 1 || p->top_n_sigma > 0 || p->xtc_probability > 0 ||
        p->dynatemp_range > 0 || p->mirostat || dry || p->adaptive_p) { // the sampler over logits from the input's bytes
        const int32_t nv = kvt_tokenizer_n_vocab(t);
        float *l = malloc((size_t)nv * sizeof *l);
        kvt_sampler_params sp = kvt_sampler_params_default();
        sp.top_k = p->top_k, sp.top_p = (float)p->top_p, sp.min_p = (float)p->min_p, sp.temp = (float)p->temperature;
        sp.infill = p->infill_sampler ? t : NULL;
        sp.typical_p = (float)p->typical_p, sp.top_n_sigma = (float)p->top_n_sigma;
        sp.xtc_probability = (float)p->xtc_probability, sp.xtc_threshold = (float)p->xtc_threshold;
        sp.dynatemp_range = (float)p->dynatemp_range, sp.dynatemp_exponent = (float)p->dynatemp_exponent;
        sp.mirostat = p->mirostat, sp.mirostat_tau = (float)p->mirostat_tau, sp.mirostat_eta = (float)p->mirostat_eta;
        sp.adaptive_target = p->adaptive_p ? (float)p->adaptive_target : -1.0f;
        sp.adaptive_decay = (float)p->adaptive_decay;
        // DRY: its breakers (the request's strings, or llama.cpp's default set) over the vocabulary, a window bounded
        // as the server bounds it, the prompt's ids and the draws accepted into it
        kvt_dry_breakers *brk = NULL;
        if (dry) {
            static const char *const dflt[] = {"\n", ":", "\"", "*"};
            static const size_t dflt_len[] = {1, 1, 1, 1};
            const size_t nb = p->dry_breakers ? p->n_dry_breakers : 4;
            const char **strs = malloc((nb + 1) * sizeof *strs);
            size_t *lens = malloc((nb + 1) * sizeof *lens);
            if (!strs || !lens) __builtin_trap();
            for (size_t i = 0; i < nb; i++) {
                strs[i] = p->dry_breakers ? p->dry_breakers[i].s : dflt[i];
                lens[i] = p->dry_breakers ? p->dry_breakers[i].len : dflt_len[i];
            }
            if (kvt_dry_breakers_init(t, strs, lens, (int32_t)nb, &brk, NULL) != KVT_OK) __builtin_trap();
            free(strs);
            free(lens);
            sp.dry = (kvt_dry_params){(float)p->dry_multiplier, (float)p->dry_base, p->dry_allowed_length,
                                      p->dry_penalty_last_n < 4096 ? p->dry_penalty_last_n : 4096};
            sp.dry_breakers = brk;
        }
        kvt_sampler *smp = NULL;
        if (!l || kvt_sampler_init(&sp, nv, &smp, NULL) != KVT_OK) __builtin_trap();
        kvt_dry_breakers_free(brk); // (the sampler holds its own reference)
        for (int64_t i = 0; ids && i < n; i++) kvt_sampler_accept(smp, ids[i]);
        for (int32_t i = 0; i < nv; i++) l[i] = (float)((data[(size_t)i * 7 % size] ^ (uint32_t)i) & 63) / 8.0f - 4.0f;
        for (int k = 0; k < 3; k++) {
            const int32_t id = kvt_sampler_sample(smp, l);
            if (id < 0 || id >= nv) __builtin_trap();
            kvt_sampler_accept(smp, id);
        }
        kvt_sampler_free(smp);
        free(l);
    }
    free(ids);
    kvt_request_free(r);
    return 0;
}
