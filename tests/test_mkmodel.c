// test_mkmodel.c - `kvtier mkmodel` writes random-weight GGUFs that the model
// loader accepts, with the requested hyperparameters and tensor types.
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/cli/commands.h"
#include "../src/exec/context.h"
#include "../src/gguf/gguf.h"
#include "../src/kernels/quant.h"
#include "../src/model/model.h"
#include "../src/model/shapes.h"
#include "../src/model/tokenizer.h"
#include "test.h"

// Unique empty file name in /tmp (the command overwrites it).
static bool tmp_path(char *path, size_t cap) {
    snprintf(path, cap, "/tmp/kvt_test_mkmodel_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) return false;
    close(fd);
    return true;
}

// Runs `mkmodel -q -o path <args...>` (args NULL-terminated); returns its exit status.
static int run_mk(const char *path, const char *const *args) {
    char *argv[48];
    int argc = 0;
    argv[argc++] = (char *)"-q";
    argv[argc++] = (char *)"-o";
    argv[argc++] = (char *)path;
    for (int i = 0; args[i] && argc < 47; i++) argv[argc++] = (char *)args[i];
    argv[argc] = NULL;
    return cmd_mkmodel(argc, argv);
}

// A file made by `mkmodel args` at a fresh temporary path (written to path) and loaded: the model, or NULL after
// reporting the failure as test `name` (the file removed).
static kvt_model *mk_load(const char *name, const char *const *args, char path[64]) {
    if (!tmp_path(path, 64)) {
        test_result(false, name, "mkstemp failed");
        return NULL;
    }
    const int rc = run_mk(path, args);
    kvt_model *m = NULL;
    kvt_err err = {0};
    if (rc != 0 || kvt_model_load(path, false, &m, &err)) {
        test_result(false, name, "rc %d, load: %s", rc, err.msg);
        remove(path);
        return NULL;
    }
    return m;
}

static kvt_type tensor_type(const kvt_model *m, const char *name) {
    const kvt_gguf_tensor *t = kvt_gguf_find_tensor(m->gguf, name);
    return t ? t->type : KVT_TYPE_COUNT;
}

static bool files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = false;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

static void test_llama_q4_k_m(void) {
    const char *name = "mkmodel llama q4_k_m mix";
    char path[64];
    static const char *const args[] = {"--arch", "llama", "--dim", "256", "--layers", "8", "--heads", "4",
                                       "--kv-heads", "2", "--ff", "512", "--vocab", "300", "--ctx", "512",
                                       "--type", "q4_k_m", NULL};
    kvt_model *m = mk_load(name, args, path);
    if (!m) return;
    kvt_err err = {0};
    const kvt_hparams *hp = &m->hp;
    bool ok = hp->arch == KVT_ARCH_LLAMA && hp->n_embd == 256 && hp->n_layer == 8 && hp->n_head == 4 &&
              hp->n_head_kv == 2 && hp->head_dim == 64 && hp->n_ff == 512 && hp->n_vocab == 300 &&
              hp->n_ctx_train == 512 && !m->tied_output;
    // llama.cpp's use_more_bits for 8 layers: layers 0, 3, 6, 7 get q6_K
    static const bool more[8] = {true, false, false, true, false, false, true, true};
    for (int il = 0; il < 8 && ok; il++) {
        kvt_type want = more[il] ? KVT_TYPE_Q6_K : KVT_TYPE_Q4_K;
        ok = m->layers[il].wv.file_type == want && m->layers[il].w_down.file_type == want &&
             m->layers[il].wq.file_type == KVT_TYPE_Q4_K && m->layers[il].w_gate.file_type == KVT_TYPE_Q4_K;
    }
    ok = ok && m->tok_embd.file_type == KVT_TYPE_Q4_K && m->output.file_type == KVT_TYPE_Q6_K &&
         tensor_type(m, "blk.0.attn_norm.weight") == KVT_TYPE_F32 && tensor_type(m, "output_norm.weight") == KVT_TYPE_F32;
    int64_t ft = -1;
    kvt_gguf_get_i64(m->gguf, "general.file_type", &ft, NULL);
    ok = ok && ft == 15;
    char desc[96];
    kvt_model_desc(m, desc, sizeof desc);
    test_result(!strcmp(desc, "llama ?B Q4_K - Medium"), "mkmodel q4_k_m: llama-bench's description", "'%s'", desc);
    // norms ~1, weights ~N(0, 0.02)
    double sum = 0;
    for (int i = 0; i < 256; i++) sum += m->layers[0].attn_norm[i];
    ok = ok && sum / 256 > 0.99 && sum / 256 < 1.01;
    test_result(ok, name, "hparams or tensor types differ (file_type %lld, tok_embd %s, output %s, v0 %s, v1 %s)",
                (long long)ft, kvt_type_name(m->tok_embd.file_type), kvt_type_name(m->output.file_type),
                kvt_type_name(m->layers[0].wv.file_type), kvt_type_name(m->layers[1].wv.file_type));

    // the synthetic SPM vocabulary loads and round-trips text
    kvt_tokenizer *tok = NULL;
    if (kvt_tokenizer_init(m->gguf, &tok, &err)) {
        test_result(false, "mkmodel synthetic vocab", "%s", err.msg);
    } else {
        const char *text = "hello world, 42!";
        int32_t ids[128];
        int64_t n = kvt_tokenize(tok, text, strlen(text), false, false, ids, 128, &err);
        char back[256];
        int64_t len = n > 0 && n <= 128 ? kvt_detokenize(tok, ids, n, back, sizeof back - 1) : -1;
        if (len >= 0 && len < (int64_t)sizeof back) back[len] = 0;
        bool tok_ok = len >= 0 && len < (int64_t)sizeof back && !strcmp(back, text) &&
                      kvt_tokenizer_type(tok) == KVT_VOCAB_SPM && kvt_token_bos(tok) == 1 && kvt_token_eos(tok) == 2;
        test_result(tok_ok, "mkmodel synthetic vocab", "%lld tokens, round trip '%s'", (long long)n,
                    len >= 0 ? back : "?");
        kvt_tokenizer_free(tok);
    }

    // loading repacks nothing (info, tokenize); the first kvt_model_repack (a context's init) repacks the q4_K
    // matrices (q4_K_x8), once, and leaves q6_K and token_embd as in the file
    const char *rname = "mkmodel q4_k_m repacked on first use only";
    const kvt_layer *l1 = &m->layers[1];
    const char *rp_env = getenv("KVT_REPACK");
    if (rp_env && !strcmp(rp_env, "0")) {
        test_skip(rname, "KVT_REPACK=0");
    } else {
        bool rok = !m->repack_buf && m->repack_bytes > 0 && l1->wq.type == KVT_TYPE_Q4_K && l1->wq.data == l1->wq.file_data;
        kvt_model_repack(m);
        const void *buf = m->repack_buf, *wq = l1->wq.data;
        rok = rok && buf && l1->wq.type == KVT_TYPE_Q4_K_X8 && l1->w_gate.type == KVT_TYPE_Q4_K_X8 &&
              m->layers[0].wv.type == kvt_type_repack(KVT_TYPE_Q6_K)->to && l1->wq.file_type == KVT_TYPE_Q4_K && m->tok_embd.type == KVT_TYPE_Q4_K;
        kvt_model_repack(m);
        rok = rok && m->repack_buf == buf && l1->wq.data == wq;
        test_result(rok, rname, "repack_bytes %lld, buf %p, wq %s", (long long)m->repack_bytes, m->repack_buf,
                    kvt_type_name(l1->wq.type));
    }
    kvt_model_free(m);
    remove(path);
}

// Logits of a 12-token prompt (one batch) then of 3 tokens one at a time ([15, V]) into out; false on an error.
static bool tied_logits(const char *path, float *out, kvt_model **keep, kvt_err *err) {
    kvt_model *m = NULL;
    kvt_context *ctx = NULL;
    if (kvt_model_load(path, false, &m, err)) return false;
    const kvt_context_params cp = kvt_context_params_default();
    const int32_t V = m->hp.n_vocab;
    int32_t prompt[12];
    for (int i = 0; i < 12; i++) prompt[i] = 1 + (i * 37 + 5) % (V - 1);
    kvt_status st = kvt_context_init(m, &cp, &ctx, err);
    if (!st) st = kvt_decode(ctx, prompt, 12, true, err);
    if (!st) memcpy(out, kvt_context_logits(ctx), (size_t)12 * V * sizeof(float));
    for (int i = 0; !st && i < 3; i++) {
        const int32_t tok = 1 + (i * 101 + 13) % (V - 1);
        st = kvt_decode(ctx, &tok, 1, false, err);
        if (!st) memcpy(out + (int64_t)(12 + i) * V, kvt_context_logits(ctx), (size_t)V * sizeof(float));
    }
    kvt_context_free(ctx);
    *keep = m;
    return st == KVT_OK;
}

// A tied q8_0 token_embd/output is repacked (q8_0_x8) on the first context, the embedding lookup reading the
// repacked copy (kvt_matrix_row_to_float): logits bit for bit those of the same file unrepacked (KVT_REPACK=0).
static void tied_q8_0_repacked(const char *path) {
    const char *name = "mkmodel qwen3 tied q8_0: token_embd/output repacked (q8_0_x8), logits = unrepacked";
    const char *env = getenv("KVT_REPACK");
    if (env && !strcmp(env, "0")) {
        test_skip(name, "KVT_REPACK=0");
        return;
    }
    float *lg[2] = {malloc(15 * 512 * sizeof(float)), malloc(15 * 512 * sizeof(float))};
    kvt_model *m[2] = {NULL, NULL};
    kvt_err err = {0};
    setenv("KVT_REPACK", "0", 1);
    bool ok = lg[0] && lg[1] && tied_logits(path, lg[0], &m[0], &err);
    unsetenv("KVT_REPACK");
    ok = ok && tied_logits(path, lg[1], &m[1], &err);
    const bool types = ok && m[0]->tok_embd.type == KVT_TYPE_Q8_0 && m[1]->tok_embd.type == KVT_TYPE_Q8_0_X8 &&
                       m[1]->output.type == KVT_TYPE_Q8_0_X8 && m[1]->output.data == m[1]->tok_embd.data &&
                       m[1]->tok_embd.data != m[1]->tok_embd.file_data && m[1]->layers[0].wq.type == KVT_TYPE_Q8_0_X8;
    const bool same = ok && m[0]->hp.n_vocab == 512 && !memcmp(lg[0], lg[1], 15 * 512 * sizeof(float));
    test_result(ok && types && same, name, "%s", !ok ? err.msg : !types ? "types not repacked as expected" : "logits differ");
    kvt_model_free(m[0]), kvt_model_free(m[1]);
    free(lg[0]), free(lg[1]);
}

// A tied f16 (bf16) token_embd/output is repacked (f16_x16, bf16_x16) on the first context, the embedding lookup
// reading the repacked copy; the unrepacked file (KVT_REPACK=0) runs the same order (matmul.c packs the rows into
// panels per call, f16x16.h / bf16x16.h): the same logits bit for bit.
static void tied_half_repacked(bool bf) {
    const char *name = bf ? "mkmodel qwen3 tied bf16: token_embd/output repacked (bf16_x16), the unrepacked logits bit for bit"
                          : "mkmodel qwen3 tied f16: token_embd/output repacked (f16_x16), the unrepacked logits bit for bit";
    const kvt_type plain = bf ? KVT_TYPE_BF16 : KVT_TYPE_F16, packed = bf ? KVT_TYPE_BF16_X16 : KVT_TYPE_F16_X16;
    const char *env = getenv("KVT_REPACK"), *fx = getenv(bf ? "KVT_BF16X16" : "KVT_F16X16");
    if ((env && !strcmp(env, "0")) || (fx && !strcmp(fx, "0"))) {
        test_skip(name, bf ? "KVT_REPACK=0 or KVT_BF16X16=0" : "KVT_REPACK=0 or KVT_F16X16=0");
        return;
    }
    char path[64];
    if (!tmp_path(path, sizeof path)) {
        test_result(false, name, "mkstemp failed");
        return;
    }
    const char *const args[] = {"--arch", "qwen3", "--dim", "128", "--layers", "2", "--heads", "4",
                                "--kv-heads", "2", "--head-dim", "64", "--ff", "320", "--vocab", "512",
                                "--tied", "--type", bf ? "bf16" : "f16", NULL};
    const int rc = run_mk(path, args);
    float *lg[2] = {malloc(15 * 512 * sizeof(float)), malloc(15 * 512 * sizeof(float))};
    kvt_model *m[2] = {NULL, NULL};
    kvt_err err = {0};
    setenv("KVT_REPACK", "0", 1);
    bool ok = rc == 0 && lg[0] && lg[1] && tied_logits(path, lg[0], &m[0], &err);
    unsetenv("KVT_REPACK");
    ok = ok && tied_logits(path, lg[1], &m[1], &err);
    const bool types = ok && m[0]->tok_embd.type == plain && m[1]->tok_embd.type == packed && m[1]->output.type == packed &&
                       m[1]->output.data == m[1]->tok_embd.data && m[1]->tok_embd.data != m[1]->tok_embd.file_data &&
                       m[1]->layers[0].wq.type == packed;
    double mx = 0, md = 0;
    for (int i = 0; ok && i < 15 * 512; i++) {
        mx = fmax(mx, fabs(lg[0][i]));
        md = fmax(md, fabs((double)lg[0][i] - lg[1][i]));
    }
    const bool near = ok && mx > 0 && !memcmp(lg[0], lg[1], 15 * 512 * sizeof(float));
    test_result(ok && types && near, name, "%s (largest logit %g, largest difference %g)",
                !ok ? err.msg : !types ? "types not repacked as expected" : "logits differ", mx, md);
    kvt_model_free(m[0]), kvt_model_free(m[1]);
    free(lg[0]), free(lg[1]);
    remove(path);
}

static void test_qwen3_tied(void) {
    const char *name = "mkmodel qwen3 tied q8_0";
    char path[64];
    static const char *const args[] = {"--arch", "qwen3", "--dim", "128", "--layers", "2", "--heads", "4",
                                       "--kv-heads", "2", "--head-dim", "64", "--ff", "320", "--vocab", "512",
                                       "--tied", "--type", "q8_0", NULL};
    kvt_model *m = mk_load(name, args, path);
    if (!m) return;
    const kvt_hparams *hp = &m->hp;
    bool ok = hp->arch == KVT_ARCH_QWEN3 && hp->head_dim == 64 && hp->n_rot == 64 && hp->rope_type == KVT_ROPE_NEOX &&
              hp->n_vocab == 512 && m->tied_output && m->layers[1].q_norm && m->layers[1].k_norm &&
              m->layers[1].wq.file_type == KVT_TYPE_Q8_0 && m->layers[1].wq.rows == 256 && m->layers[1].wo.cols == 256 &&
              m->tok_embd.file_type == KVT_TYPE_Q8_0 && !kvt_gguf_find_tensor(m->gguf, "output.weight") &&
              hp->rope_freq_base == 1e6f && hp->rms_eps == 1e-6f;
    test_result(ok, name, "hparams or tensors differ (head_dim %d, tied %d, wq %s)", hp->head_dim, m->tied_output,
                kvt_type_name(m->layers[1].wq.file_type));
    kvt_model_free(m);
    tied_q8_0_repacked(path);
    remove(path);
    tied_half_repacked(false);
    tied_half_repacked(true);
}

static void test_qwen2_fallback(void) {
    const char *name = "mkmodel qwen2 biases + k-quant fallback";
    char path[64];
    // width 96 is not a multiple of 256: q4_K falls back to q4_1; the default
    // ff (8/3 * 96 rounded up to 256) = 256 keeps ffn_down (256 wide) q4_K
    static const char *const args[] = {"--arch", "qwen2", "--dim", "96", "--layers", "1", "--heads", "3",
                                       "--kv-heads", "1", "--vocab", "400", "--type", "q4_k", NULL};
    kvt_model *m = mk_load(name, args, path);
    if (!m) return;
    const kvt_layer *l = &m->layers[0];
    bool ok = m->hp.arch == KVT_ARCH_QWEN2 && m->hp.n_ff == 256 && m->hp.head_dim == 32 && l->bq && l->bk && l->bv &&
              l->wq.file_type == KVT_TYPE_Q4_1 && l->w_down.file_type == KVT_TYPE_Q4_K && !l->q_norm;
    test_result(ok, name, "ff %d, wq %s, w_down %s, biases %d", m->hp.n_ff, kvt_type_name(l->wq.file_type),
                kvt_type_name(l->w_down.file_type), l->bq != NULL);
    kvt_model_free(m);
    remove(path);
}

static void test_shape_and_seed(void) {
    const char *name = "mkmodel --shape with --layers, seeds";
    char p1[64], p2[64], p3[64];
    if (!tmp_path(p1, sizeof p1) || !tmp_path(p2, sizeof p2) || !tmp_path(p3, sizeof p3)) {
        test_result(false, name, "mkstemp failed");
        return;
    }
    const kvt_shape *s = kvt_shape_find("smollm2-135m");
    static const char *const a1[] = {"--shape", "smollm2-135m", "--layers", "1", "--vocab", "1000", "--type", "f16",
                                     "--seed", "7", NULL};
    static const char *const a3[] = {"--shape", "smollm2-135m", "--layers", "1", "--vocab", "1000", "--type", "f16",
                                     "--seed", "8", "-t", "1", NULL};
    int r1 = run_mk(p1, a1), r2 = run_mk(p2, a1), r3 = run_mk(p3, a3);
    kvt_model *m = NULL;
    kvt_err err = {0};
    bool ok = s && r1 == 0 && r2 == 0 && r3 == 0 && kvt_model_load(p1, false, &m, &err) == KVT_OK;
    if (ok) {
        const kvt_hparams *hp = &m->hp;
        ok = hp->n_embd == s->n_embd && hp->n_layer == 1 && hp->n_head == s->n_head && hp->n_head_kv == s->n_head_kv &&
             hp->n_ff == s->n_ff && hp->rope_freq_base == s->rope_freq_base && hp->n_ctx_train == s->n_ctx_train &&
             hp->n_vocab == 1000 && m->tied_output == s->tied_output && m->layers[0].wk.file_type == KVT_TYPE_F16;
    }
    bool same = files_equal(p1, p2), differ = !files_equal(p1, p3);
    test_result(ok && same && differ, name, "rc %d/%d/%d, load %s, same seed equal %d, other seed differs %d", r1, r2,
                r3, err.msg, same, differ);
    kvt_model_free(m);
    remove(p1);
    remove(p2);
    remove(p3);
}

static void test_vocab_from(const test_env *env) {
    const char *name = "mkmodel --vocab-from";
    char vocab[512];
    if (!test_data(env, "ggml-vocab-llama-spm.gguf", vocab, sizeof vocab)) {
        test_skip(name, test_data_missing(env, "ggml-vocab-llama-spm.gguf"));
        return;
    }
    char path[64];
    if (!tmp_path(path, sizeof path)) {
        test_result(false, name, "mkstemp failed");
        return;
    }
    static const char *args[] = {"--arch", "llama", "--dim", "64", "--layers", "1", "--heads", "2", "--ff", "128",
                                 "--type", "q8_0", "--vocab-from", NULL, NULL};
    args[13] = vocab;
    int rc = run_mk(path, args);
    kvt_model *m = NULL;
    kvt_err err = {0};
    kvt_tokenizer *tok = NULL;
    bool ok = rc == 0 && kvt_model_load(path, false, &m, &err) == KVT_OK && m->hp.n_vocab == 32000 &&
              m->tok_embd.rows == 32000 && kvt_tokenizer_init(m->gguf, &tok, &err) == KVT_OK &&
              kvt_tokenizer_n_vocab(tok) == 32000;
    test_result(ok, name, "rc %d: %s", rc, err.msg);
    kvt_tokenizer_free(tok);
    kvt_model_free(m);
    remove(path);
}

static void test_usage_errors(void) {
    char path[64];
    if (!tmp_path(path, sizeof path)) {
        test_result(false, "mkmodel usage errors", "mkstemp failed");
        return;
    }
    static const char *const bad_type[] = {"--shape", "tinyllama-1.1b", "--type", "q3_x", NULL};
    static const char *const bad_shape[] = {"--shape", "nope-7b", "--type", "f16", NULL};
    static const char *const no_dims[] = {"--arch", "llama", "--type", "f16", NULL};
    static const char *const bad_gqa[] = {"--arch", "llama", "--dim", "64", "--layers", "1", "--heads", "4",
                                          "--kv-heads", "3", "--type", "f16", NULL};
    static const char *const arch_clash[] = {"--shape", "qwen3-0.6b", "--arch", "llama", "--type", "f16", NULL};
    // the expected error lines are not shown
    fflush(stderr);
    int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
    if (saved >= 0 && devnull >= 0) dup2(devnull, 2);
    int r[5] = {run_mk(path, bad_type), run_mk(path, bad_shape), run_mk(path, no_dims), run_mk(path, bad_gqa),
                run_mk(path, arch_clash)};
    fflush(stderr);
    if (saved >= 0) {
        dup2(saved, 2);
        close(saved);
    }
    if (devnull >= 0) close(devnull);
    bool ok = r[0] == 2 && r[1] == 2 && r[2] == 2 && r[3] == 2 && r[4] == 2;
    test_result(ok, "mkmodel usage errors", "exit codes %d %d %d %d %d, want 2", r[0], r[1], r[2], r[3], r[4]);
    remove(path);
}

static void test_shape_table(void) {
    const kvt_shape *t = kvt_shape_find("TinyLlama-1.1B"), *q = kvt_shape_find("qwen3-0.6b"),
                    *l3 = kvt_shape_find("llama3-8b");
    bool ok = t && t->n_embd == 2048 && t->n_layer == 22 && t->n_head_kv == 4 && t->n_ff == 5632 && q &&
              q->head_dim == 128 && q->n_embd == 1024 && q->tied_output && q->qk_norm && l3 && l3->n_vocab == 128256 &&
              l3->rope_freq_base == 500000.0f && !kvt_shape_find("nope");
    for (int i = 0; ok && i < kvt_shape_count(); i++) {
        const kvt_shape *s = kvt_shape_at(i);
        ok = s && s->n_head % s->n_head_kv == 0 && s->head_dim % 2 == 0 && kvt_shape_find(s->name) == s;
    }
    test_result(ok && !kvt_shape_at(kvt_shape_count()), "mkmodel shape table", "lookup or consistency failed");
}

// The low-bit types (kernels/quant_lowbit.h) as every matrix's type: the file loads with those types (a matrix whose
// width the super-block does not divide falls back: q2_K / q3_K to q4_1, iq4_xs to iq4_nl) and decodes to finite
// logits, the same with the scalar kernels within 1e-3 of the largest logit.
static void test_lowbit_types(void) {
    static const char *const types[] = {"q5_1", "q2_k", "q3_k", "iq4_nl", "iq4_xs"};
    static const kvt_type want[] = {KVT_TYPE_Q5_1, KVT_TYPE_Q2_K, KVT_TYPE_Q3_K, KVT_TYPE_IQ4_NL, KVT_TYPE_IQ4_XS};
    for (int i = 0; i < 5; i++) {
        char name[96], path[64];
        snprintf(name, sizeof name, "mkmodel --type %s: loads with %s matrices, decodes alike on every ISA", types[i], types[i]);
        const char *args[] = {"--arch", "llama", "--dim", "256", "--layers", "2", "--heads", "4", "--ff", "512",
                              "--vocab", "300", "--ctx", "128", "--type", types[i], NULL};
        kvt_model *m = mk_load(name, args, path);
        if (!m) continue;
        kvt_err err = {0};
        bool ok = tensor_type(m, "blk.0.attn_q.weight") == want[i] && tensor_type(m, "blk.1.ffn_up.weight") == want[i];
        float first[300], worst = 0, top = 0;
        const int32_t toks[3] = {1, 17, 42};
        const kvt_isa saved = kvt_kernels_isa();
        for (int pass = 0; pass < 2 && ok; pass++) {
            if (pass == 1) kvt_kernels_set_isa(KVT_ISA_SCALAR);
            kvt_context_params cp = kvt_context_params_default();
            cp.n_ctx = 16;
            kvt_context *ctx = NULL;
            ok = !kvt_context_init(m, &cp, &ctx, &err) && !kvt_decode(ctx, toks, 3, false, &err);
            const float *l = ok ? kvt_context_logits(ctx) : NULL;
            for (int v = 0; ok && v < 300; v++) {
                ok = isfinite(l[v]);
                if (pass == 0) first[v] = l[v], top = fmaxf(top, fabsf(l[v]));
                else worst = fmaxf(worst, fabsf(l[v] - first[v]));
            }
            kvt_context_free(ctx);
        }
        kvt_kernels_set_isa(saved);
        test_result(ok && worst <= 1e-3f * top, name, "types %s / %s, %s, scalar - SIMD %.3g of max %.3g",
                    kvt_type_name(tensor_type(m, "blk.0.attn_q.weight")), kvt_type_name(tensor_type(m, "blk.1.ffn_up.weight")),
                    err.msg, (double)worst, (double)top);
        kvt_model_free(m);
        remove(path);
    }
}

void test_mkmodel(const test_env *env) {
    test_lowbit_types();
    test_shape_table();
    test_llama_q4_k_m();
    test_qwen3_tied();
    test_qwen2_fallback();
    test_shape_and_seed();
    test_vocab_from(env);
    test_usage_errors();
}
