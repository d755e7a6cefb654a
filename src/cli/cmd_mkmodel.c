// cmd_mkmodel.c - `kvtier mkmodel`: write a random-weight GGUF of a named or
// given shape, loadable by kvtier and by llama.cpp (for benchmarks and tests
// at real model sizes without downloading weights).
//
// The file is produced tensor by tensor: each weight is generated (normal
// with sigma 0.02 from a counter-based PRNG, so the result does not depend on
// the thread count) and quantized in parallel into one reused buffer, then
// appended to the file. Peak memory is about one tensor.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../base/threadpool.h"
#include "../base/timer.h"
#include "../gguf/gguf.h"
#include "../kernels/quant.h"
#include "../model/model.h"
#include "../model/shapes.h"
#include "args.h"
#include "commands.h"

#define CMD "mkmodel"

// ---- weight formats ---------------------------------------------------------

typedef enum { MIX_NONE, MIX_Q4_K_M } mix_kind;

typedef struct {
    const char *name;
    kvt_type type;     // type of the big matrices
    mix_kind mix;
    uint32_t ftype;    // llama.cpp's LLAMA_FTYPE_* number for general.file_type
} format;

// LLAMA_FTYPE numbers (llama.h): ALL_F32 0, MOSTLY_F16 1, Q4_0 2, Q4_1 3,
// Q8_0 7, Q5_0 8, Q5_1 9, Q2_K 10, Q3_K_S 11, Q4_K_S 14, Q4_K_M 15, Q5_K_S 16, Q6_K 18, IQ4_NL 25, IQ4_XS 30,
// BF16 32. A uniform K-quant is recorded as its _S variant, the closest llama.cpp names. (kvtier's own
// quantizers: files to test and measure with; llama-quantize's choices of values differ.)
static const format k_formats[] = {
    {"f32", KVT_TYPE_F32, MIX_NONE, 0},      {"f16", KVT_TYPE_F16, MIX_NONE, 1},
    {"bf16", KVT_TYPE_BF16, MIX_NONE, 32},   {"q8_0", KVT_TYPE_Q8_0, MIX_NONE, 7},
    {"q4_0", KVT_TYPE_Q4_0, MIX_NONE, 2},    {"q4_1", KVT_TYPE_Q4_1, MIX_NONE, 3},
    {"q4_k", KVT_TYPE_Q4_K, MIX_NONE, 14},   {"q5_k", KVT_TYPE_Q5_K, MIX_NONE, 16},
    {"q6_k", KVT_TYPE_Q6_K, MIX_NONE, 18},   {"q4_k_m", KVT_TYPE_Q4_K, MIX_Q4_K_M, 15},
    {"q5_0", KVT_TYPE_Q5_0, MIX_NONE, 8},    {"q5_1", KVT_TYPE_Q5_1, MIX_NONE, 9},
    {"q2_k", KVT_TYPE_Q2_K, MIX_NONE, 10},   {"q3_k", KVT_TYPE_Q3_K, MIX_NONE, 11},
    {"iq4_nl", KVT_TYPE_IQ4_NL, MIX_NONE, 25}, {"iq4_xs", KVT_TYPE_IQ4_XS, MIX_NONE, 30},
};

static const format *find_format(const char *name) {
    for (size_t i = 0; i < sizeof k_formats / sizeof k_formats[0]; i++) {
        if (strcasecmp(k_formats[i].name, name) == 0) return &k_formats[i];
    }
    return NULL;
}

// Layers that llama.cpp's Q4_K_M gives more bits (attn_v, ffn_down): the first
// and last eighth, and every third layer in between.
static bool use_more_bits(int i_layer, int n_layer) {
    return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

// A type whose block divides ncols: K-quants that do not fit fall back to a
// 32-block type kvtier computes with (llama.cpp would pick q5_0 / q5_1 for
// q4_K / q5_K, which kvtier does not run), then to f16.
static kvt_type fit_type(kvt_type t, int64_t ncols) {
    if (kvt_row_size(t, ncols) >= 0) return t;
    if (t == KVT_TYPE_Q4_K || t == KVT_TYPE_Q2_K || t == KVT_TYPE_Q3_K) t = KVT_TYPE_Q4_1;
    else if (t == KVT_TYPE_IQ4_XS) t = KVT_TYPE_IQ4_NL;
    else if (t == KVT_TYPE_Q5_K || t == KVT_TYPE_Q6_K) t = KVT_TYPE_Q8_0;
    if (kvt_row_size(t, ncols) >= 0) return t;
    return KVT_TYPE_F16;
}

// ---- tensor plan -------------------------------------------------------------

typedef enum { ROLE_TOK_EMBD, ROLE_OUTPUT, ROLE_ATTN_V, ROLE_FFN_DOWN, ROLE_MATRIX, ROLE_NORM, ROLE_BIAS } role;

typedef struct {
    char name[64];
    role role;
    kvt_type type;
    uint32_t n_dims;
    int64_t ne[2];
    uint64_t seed;
} plan_tensor;

typedef struct {
    plan_tensor *t;
    int64_t n, cap;
} plan;

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static bool plan_add(plan *p, const char *name, role r, kvt_type type, int64_t ne0, int64_t ne1, uint64_t seed) {
    if (p->n == p->cap) {
        int64_t cap = p->cap ? p->cap * 2 : 256;
        plan_tensor *t = realloc(p->t, (size_t)cap * sizeof *t);
        if (!t) return false;
        p->t = t;
        p->cap = cap;
    }
    plan_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->role = r;
    t->type = type;
    t->n_dims = ne1 > 0 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 > 0 ? ne1 : 1;
    uint64_t s = seed ^ hash_str(name);
    t->seed = splitmix64(&s);
    return true;
}

// Type of a 2-D weight of the given role under the format (before fitting).
static kvt_type matrix_type(const format *f, role r, int il, int n_layer, bool tied) {
    if (f->mix != MIX_Q4_K_M) return f->type;
    switch (r) {
    case ROLE_OUTPUT: return KVT_TYPE_Q6_K;
    case ROLE_TOK_EMBD: return tied ? KVT_TYPE_Q6_K : KVT_TYPE_Q4_K; // tied: quantized as the output
    case ROLE_ATTN_V:
    case ROLE_FFN_DOWN: return use_more_bits(il, n_layer) ? KVT_TYPE_Q6_K : KVT_TYPE_Q4_K;
    default: return KVT_TYPE_Q4_K;
    }
}

typedef struct {
    kvt_arch arch;
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx;
    float rope_base, rms_eps;
    bool tied, qk_norm, qkv_bias;
} mk_shape;

static bool build_plan(const mk_shape *s, const format *f, uint64_t seed, plan *p) {
    const int64_t E = s->n_embd, Q = (int64_t)s->n_head * s->head_dim, K = (int64_t)s->n_head_kv * s->head_dim;
    bool ok = true;
#define MAT(nm, r, il, c, rows) \
    ok = ok && plan_add(p, nm, r, fit_type(matrix_type(f, r, il, s->n_layer, s->tied), c), c, rows, seed)
#define VEC(nm, r, n) ok = ok && plan_add(p, nm, r, KVT_TYPE_F32, n, 0, seed)
    MAT("token_embd.weight", ROLE_TOK_EMBD, 0, E, s->n_vocab);
    VEC("output_norm.weight", ROLE_NORM, E);
    if (!s->tied) MAT("output.weight", ROLE_OUTPUT, 0, E, s->n_vocab);
    char n[64];
    for (int il = 0; il < s->n_layer; il++) {
#define NM(x) (snprintf(n, sizeof n, "blk.%d.%s", il, x), n)
        VEC(NM("attn_norm.weight"), ROLE_NORM, E);
        MAT(NM("attn_q.weight"), ROLE_MATRIX, il, E, Q);
        MAT(NM("attn_k.weight"), ROLE_MATRIX, il, E, K);
        MAT(NM("attn_v.weight"), ROLE_ATTN_V, il, E, K);
        MAT(NM("attn_output.weight"), ROLE_MATRIX, il, Q, E);
        if (s->qkv_bias) {
            VEC(NM("attn_q.bias"), ROLE_BIAS, Q);
            VEC(NM("attn_k.bias"), ROLE_BIAS, K);
            VEC(NM("attn_v.bias"), ROLE_BIAS, K);
        }
        if (s->qk_norm) {
            VEC(NM("attn_q_norm.weight"), ROLE_NORM, s->head_dim);
            VEC(NM("attn_k_norm.weight"), ROLE_NORM, s->head_dim);
        }
        VEC(NM("ffn_norm.weight"), ROLE_NORM, E);
        MAT(NM("ffn_gate.weight"), ROLE_MATRIX, il, E, s->n_ff);
        MAT(NM("ffn_up.weight"), ROLE_MATRIX, il, E, s->n_ff);
        MAT(NM("ffn_down.weight"), ROLE_FFN_DOWN, il, s->n_ff, E);
#undef NM
    }
#undef MAT
#undef VEC
    return ok;
}

// ---- parallel generation -------------------------------------------------------

typedef struct {
    const plan *p;
    kvt_threadpool *pool;
    float *scratch;      // n_threads * max_cols floats
    int64_t max_cols;
    // current tensor
    const plan_tensor *t;
    const kvt_type_ops *ops;
    uint8_t *dst;
    int64_t row_bytes, rows_per_task;
    int64_t bytes_done, bytes_total;
    double t0;
    bool progress;
} gen_ctx;

// n normal(0, sigma) values + mean, deterministic in (seed, row).
static void gen_row(uint64_t seed, int64_t row, float mean, float sigma, float *x, int64_t n) {
    uint64_t s = seed ^ ((uint64_t)row * 0xD1B54A32D192ED03ull);
    splitmix64(&s);
    const float two_pi = 6.28318530717958647692f;
    for (int64_t i = 0; i < n; i += 2) {
        uint64_t r = splitmix64(&s);
        float u1 = ((float)(r >> 40) + 0.5f) * (1.0f / 16777216.0f); // (0, 1)
        float u2 = (float)((r >> 8) & 0xFFFFFF) * (1.0f / 16777216.0f);
        float rad = sigma * sqrtf(-2.0f * logf(u1)), sn, cs;
        sincosf(two_pi * u2, &sn, &cs);
        x[i] = mean + rad * cs;
        if (i + 1 < n) x[i + 1] = mean + rad * sn;
    }
}

static void gen_task(void *ctx, int64_t task, int thread) {
    gen_ctx *g = ctx;
    const plan_tensor *t = g->t;
    float *x = g->scratch + (int64_t)thread * g->max_cols;
    int64_t r0 = task * g->rows_per_task, r1 = r0 + g->rows_per_task;
    if (r1 > t->ne[1]) r1 = t->ne[1];
    float mean = t->role == ROLE_NORM ? 1.0f : 0.0f;
    float sigma = t->role == ROLE_NORM ? 0.01f : 0.02f;
    for (int64_t r = r0; r < r1; r++) {
        gen_row(t->seed, r, mean, sigma, x, t->ne[0]);
        g->ops->from_float(x, g->dst + r * g->row_bytes, t->ne[0]);
    }
}

static kvt_status fill_tensor(void *user, int64_t index, void *buf, uint64_t size, kvt_err *err) {
    gen_ctx *g = user;
    const plan_tensor *t = &g->p->t[index];
    g->t = t;
    g->dst = buf;
    g->row_bytes = kvt_row_size(t->type, t->ne[0]);
    if (g->row_bytes < 0 || (uint64_t)(g->row_bytes * t->ne[1]) != size) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "tensor %s: size mismatch", t->name);
    }
    if (t->type == KVT_TYPE_F32) {
        g->ops = NULL;
    } else {
        g->ops = kvt_type_ops_get(t->type);
        if (!g->ops || !g->ops->from_float) {
            return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "tensor %s: cannot quantize to %s", t->name,
                              kvt_type_name(t->type));
        }
    }
    int n_thr = kvt_threadpool_n_threads(g->pool);
    int64_t rows = t->ne[1];
    // f32 rows need no conversion: generate straight into the buffer
    if (!g->ops) {
        for (int64_t r = 0; r < rows; r++) {
            gen_row(t->seed, r, t->role == ROLE_NORM ? 1.0f : 0.0f, t->role == ROLE_NORM ? 0.01f : 0.02f,
                    (float *)buf + r * t->ne[0], t->ne[0]);
        }
    } else {
        int64_t per = rows / ((int64_t)n_thr * 16);
        g->rows_per_task = per < 1 ? 1 : per;
        kvt_threadpool_run(g->pool, gen_task, g, (rows + g->rows_per_task - 1) / g->rows_per_task);
    }
    g->bytes_done += (int64_t)size;
    if (g->progress) {
        fprintf(stderr, "\rkvtier mkmodel: %5.1f%%  %.1f s  %-32s", 100.0 * (double)g->bytes_done / (double)g->bytes_total,
                (kvt_time_ms() - g->t0) / 1000.0, t->name);
        fflush(stderr);
    }
    return KVT_OK;
}

// ---- vocabulary ------------------------------------------------------------------

// Appends the bijective base-26 spelling of k ("a".."z", "aa", ...) to out.
static int b26(uint64_t k, char *out) {
    char tmp[16];
    int n = 0;
    k += 1;
    while (k > 0 && n < 15) {
        k -= 1;
        tmp[n++] = (char)('a' + k % 26);
        k /= 26;
    }
    for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    out[n] = 0;
    return n;
}

#define SYNTH_SPECIAL 3
#define SYNTH_MIN_VOCAB (SYNTH_SPECIAL + 256 + 1)

// SentencePiece-style vocabulary ("llama"): <unk> <s> </s>, the 256 byte
// tokens <0x00>..<0xFF>, "▁", then distinct pieces "▁a", "a", "▁b", "b", ...
// with decreasing scores. Loads in kvtier and llama.cpp (byte fallback makes
// any text tokenizable).
static bool synth_vocab(kvt_gguf_writer *w, int32_t n_vocab) {
    const char **toks = malloc((size_t)n_vocab * sizeof *toks);
    char *pool = malloc((size_t)n_vocab * 24);
    float *scores = malloc((size_t)n_vocab * sizeof *scores);
    int32_t *types = malloc((size_t)n_vocab * sizeof *types);
    if (!toks || !pool || !scores || !types) {
        free(toks), free(pool), free(scores), free(types);
        return false;
    }
    char *q = pool;
    for (int32_t i = 0; i < n_vocab; i++) {
        toks[i] = q;
        if (i == 0) {
            strcpy(q, "<unk>");
            types[i] = 2; // unknown
            scores[i] = 0.0f;
        } else if (i < SYNTH_SPECIAL) {
            strcpy(q, i == 1 ? "<s>" : "</s>");
            types[i] = 3; // control
            scores[i] = 0.0f;
        } else if (i < SYNTH_SPECIAL + 256) {
            sprintf(q, "<0x%02X>", (unsigned)(i - SYNTH_SPECIAL));
            types[i] = 6; // byte
            scores[i] = 0.0f;
        } else {
            int64_t j = i - (SYNTH_SPECIAL + 256);
            char *c = q;
            if (j == 0 || j % 2 == 1) {
                memcpy(c, "\xE2\x96\x81", 3); // U+2581
                c += 3;
            }
            if (j > 0) b26((uint64_t)(j - 1) / 2, c);
            else *c = 0;
            types[i] = 1; // normal
            scores[i] = -(float)j;
        }
        q += strlen(q) + 1;
    }
    kvt_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    kvt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n_vocab);
    kvt_gguf_writer_set_arr(w, "tokenizer.ggml.scores", KVT_GGUF_F32, scores, (uint64_t)n_vocab);
    kvt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", KVT_GGUF_I32, types, (uint64_t)n_vocab);
    kvt_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    kvt_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    kvt_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    kvt_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    kvt_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    free(toks), free(pool), free(scores), free(types);
    return true;
}

// ---- command -----------------------------------------------------------------------

static void print_help(void) {
    printf(
        "usage: kvtier mkmodel (--shape NAME | --arch A --dim N --layers N --heads N [...]) --type T -o OUT.gguf\n"
        "\n"
        "Writes a GGUF with random weights (normal, sigma 0.02; norm weights ~1) of a\n"
        "known or given shape. The file loads in kvtier and in llama.cpp.\n"
        "\n"
        "shape:\n"
        "  --shape NAME       a known model shape (--list-shapes); the flags below override it\n"
        "  --arch A           llama | qwen2 (q/k/v biases) | qwen3 (q/k norms); required without --shape\n"
        "  --dim N            embedding width\n"
        "  --layers N         number of blocks (with --shape: a shorter or longer model)\n"
        "  --heads N          query heads\n"
        "  --kv-heads N       key/value heads (default: --heads)\n"
        "  --head-dim N       per-head width (default: dim / heads)\n"
        "  --ff N             feed-forward width (default: 8/3 dim rounded up to 256)\n"
        "  --vocab N          vocabulary size (default 32000; >= %d)\n"
        "  --ctx N            training context length (default 2048)\n"
        "  --tied             no output.weight: the output shares token_embd\n"
        "  --list-shapes      print the known shapes and exit\n"
        "\n"
        "weights:\n"
        "  --type T           f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs:\n"
        "                     every matrix of that type;\n"
        "                     q4_k_m: llama.cpp's Q4_K_M mix (q4_K; q6_K for the output, for a tied\n"
        "                     token_embd, and for attn_v / ffn_down of the first and last eighth of\n"
        "                     the layers and every third layer between). Norms and biases are f32.\n"
        "                     K-quant matrices whose width is not a multiple of 256 use q4_1 (for\n"
        "                     q4_K) or q8_0 (for q5_K, q6_K); other widths not a multiple of 32 use f16.\n"
        "  --seed S           PRNG seed (default 1); same seed, same file\n"
        "  -t N               threads (default: online CPUs)\n"
        "\n"
        "vocabulary:\n"
        "  --vocab-from GGUF  copy every tokenizer.* key of GGUF (e.g. a real Llama or Qwen vocab);\n"
        "                     the vocabulary size becomes that file's token count\n"
        "  (default)          a synthetic SentencePiece vocabulary of --vocab tokens: <unk> <s> </s>,\n"
        "                     256 byte tokens, then made-up pieces (text round-trips via byte fallback)\n"
        "\n"
        "  -o OUT.gguf        output file (required)\n"
        "  -q, --quiet        no progress or summary line\n",
        SYNTH_MIN_VOCAB);
}

static void list_shapes(void) {
    printf("%-16s %-6s %7s %6s %6s %5s %4s %4s %6s %6s %9s %5s\n", "name", "arch", "vocab", "embd", "layers", "heads",
           "kv", "hd", "ff", "ctx", "rope_base", "tied");
    for (int i = 0; i < kvt_shape_count(); i++) {
        const kvt_shape *s = kvt_shape_at(i);
        printf("%-16s %-6s %7d %6d %6d %5d %4d %4d %6d %6d %9.0f %5s\n", s->name, kvt_arch_name(s->arch), s->n_vocab,
               s->n_embd, s->n_layer, s->n_head, s->n_head_kv, s->head_dim, s->n_ff, s->n_ctx_train,
               (double)s->rope_freq_base, s->tied_output ? "yes" : "no");
    }
}

// mkmodel writes llama, qwen2 and qwen3 models (not gemma3: its extra norms and sliding window are not generated).
static bool parse_arch(const char *v, kvt_arch *out) {
    for (int a = 0; a < KVT_ARCH_COUNT; a++) {
        if (a == KVT_ARCH_GEMMA3) continue;
        if (!strcmp(v, kvt_arch_name((kvt_arch)a))) {
            *out = (kvt_arch)a;
            return true;
        }
    }
    return false;
}

int cmd_mkmodel(int argc, char **argv) {
    kvt_args a = {CMD, argc, argv, 0};
    const char *flag, *shape_name = NULL, *arch_name = NULL, *type_name = NULL, *out = NULL, *vocab_from = NULL;
    int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ff = 0, vocab = 0, ctx = 0, seed = 1,
            threads = 0;
    bool tied = false, quiet = false;
    while (kvt_args_next(&a, &flag)) {
        bool ok = true;
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            print_help();
            return 0;
        } else if (!strcmp(flag, "--list-shapes")) {
            list_shapes();
            return 0;
        } else if (!strcmp(flag, "--shape")) ok = (shape_name = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--arch")) ok = (arch_name = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--type")) ok = (type_name = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "-o") || !strcmp(flag, "--output")) ok = (out = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--vocab-from")) ok = (vocab_from = kvt_args_value(&a, flag)) != NULL;
        else if (!strcmp(flag, "--dim")) ok = kvt_args_int(&a, flag, 1, 1 << 20, &dim);
        else if (!strcmp(flag, "--layers")) ok = kvt_args_int(&a, flag, 1, 4096, &layers);
        else if (!strcmp(flag, "--heads")) ok = kvt_args_int(&a, flag, 1, 4096, &heads);
        else if (!strcmp(flag, "--kv-heads")) ok = kvt_args_int(&a, flag, 1, 4096, &kv_heads);
        else if (!strcmp(flag, "--head-dim")) ok = kvt_args_int(&a, flag, 2, 4096, &head_dim);
        else if (!strcmp(flag, "--ff")) ok = kvt_args_int(&a, flag, 1, 1 << 22, &ff);
        else if (!strcmp(flag, "--vocab")) ok = kvt_args_int(&a, flag, SYNTH_MIN_VOCAB, 1 << 24, &vocab);
        else if (!strcmp(flag, "--ctx")) ok = kvt_args_int(&a, flag, 1, 1 << 30, &ctx);
        else if (!strcmp(flag, "--seed")) ok = kvt_args_int(&a, flag, 0, INT64_MAX, &seed);
        else if (!strcmp(flag, "-t") || !strcmp(flag, "--threads")) ok = kvt_args_int(&a, flag, 1, 1024, &threads);
        else if (!strcmp(flag, "--tied")) tied = true;
        else if (!strcmp(flag, "-q") || !strcmp(flag, "--quiet")) quiet = true;
        else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
        if (!ok) return 2;
    }

    // --- resolve the shape
    mk_shape s;
    memset(&s, 0, sizeof s);
    const kvt_shape *ks = NULL;
    if (shape_name) {
        ks = kvt_shape_find(shape_name);
        if (!ks) {
            fprintf(stderr, "kvtier " CMD ": unknown shape '%s' (see kvtier " CMD " --list-shapes)\n", shape_name);
            return 2;
        }
        s = (mk_shape){ks->arch, ks->n_vocab, ks->n_embd, ks->n_layer, ks->n_head, ks->n_head_kv, ks->head_dim,
                       ks->n_ff, ks->n_ctx_train, ks->rope_freq_base, ks->rms_eps, ks->tied_output, ks->qk_norm,
                       ks->qkv_bias};
    }
    if (arch_name) {
        kvt_arch arch;
        if (!parse_arch(arch_name, &arch)) {
            fprintf(stderr, "kvtier " CMD ": --arch: unknown architecture '%s' (llama, qwen2, qwen3)\n", arch_name);
            return 2;
        }
        if (ks && arch != ks->arch) {
            fprintf(stderr, "kvtier " CMD ": --arch %s contradicts shape %s (arch %s)\n", arch_name, ks->name,
                    kvt_arch_name(ks->arch));
            return 2;
        }
        if (!ks) {
            s.arch = arch;
            s.qk_norm = arch == KVT_ARCH_QWEN3;
            s.qkv_bias = arch == KVT_ARCH_QWEN2;
            s.rope_base = arch == KVT_ARCH_LLAMA ? 10000.0f : 1000000.0f;
            s.rms_eps = arch == KVT_ARCH_LLAMA ? 1e-5f : 1e-6f;
            s.n_vocab = 32000;
            s.n_ctx = 2048;
        }
    } else if (!ks) {
        fprintf(stderr, "kvtier " CMD ": give --shape NAME or --arch with --dim, --layers, --heads (see --help)\n");
        return 2;
    }
    if (!ks && (!dim || !layers || !heads)) {
        fprintf(stderr, "kvtier " CMD ": without --shape, --dim, --layers and --heads are required\n");
        return 2;
    }
    if (dim) s.n_embd = (int32_t)dim;
    if (layers) s.n_layer = (int32_t)layers;
    if (heads) s.n_head = (int32_t)heads;
    if (kv_heads) s.n_head_kv = (int32_t)kv_heads;
    else if (heads) s.n_head_kv = s.n_head;
    if (head_dim) s.head_dim = (int32_t)head_dim;
    else if (dim || heads) s.head_dim = s.n_embd / s.n_head;
    if (ff) s.n_ff = (int32_t)ff;
    else if (!ks || dim) s.n_ff = (int32_t)(((int64_t)s.n_embd * 8 / 3 + 255) / 256 * 256);
    if (vocab) s.n_vocab = (int32_t)vocab;
    if (ctx) s.n_ctx = (int32_t)ctx;
    if (tied) s.tied = true;
    if (s.n_head % s.n_head_kv) {
        fprintf(stderr, "kvtier " CMD ": heads %d is not a multiple of kv-heads %d\n", s.n_head, s.n_head_kv);
        return 2;
    }
    if (s.head_dim < 2 || s.head_dim % 2) {
        fprintf(stderr, "kvtier " CMD ": head dim %d must be even and >= 2 (give --head-dim)\n", s.head_dim);
        return 2;
    }
    if (!type_name) {
        fprintf(stderr, "kvtier " CMD ": --type is required (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs q4_k_m)\n");
        return 2;
    }
    const format *fmt = find_format(type_name);
    if (!fmt) {
        fprintf(stderr, "kvtier " CMD ": --type: unknown type '%s' (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs q4_k_m)\n",
                type_name);
        return 2;
    }
    if (!out) {
        fprintf(stderr, "kvtier " CMD ": -o OUT.gguf is required\n");
        return 2;
    }

    // --- metadata
    kvt_gguf_writer *w = kvt_gguf_writer_init();
    kvt_gguf *vsrc = NULL;
    kvt_threadpool *pool = NULL;
    plan p = {0};
    gen_ctx g;
    memset(&g, 0, sizeof g);
    int rc = 1;
    kvt_err err = {0};
    if (!w) {
        fprintf(stderr, "kvtier " CMD ": out of memory\n");
        return 1;
    }
    if (vocab_from) {
        if (kvt_gguf_open(vocab_from, &vsrc, &err)) {
            fprintf(stderr, "kvtier " CMD ": --vocab-from: %s\n", err.msg);
            goto done;
        }
        kvt_gguf_arr toks;
        if (kvt_gguf_get_arr(vsrc, "tokenizer.ggml.tokens", &toks, NULL) != KVT_OK || toks.type != KVT_GGUF_STRING ||
            toks.n == 0 || toks.n > (1u << 24)) {
            fprintf(stderr, "kvtier " CMD ": --vocab-from %s: no usable tokenizer.ggml.tokens array\n", vocab_from);
            rc = 2;
            goto done;
        }
        if ((ks || vocab) && (int64_t)toks.n != s.n_vocab) {
            fprintf(stderr, "kvtier " CMD ": warning: vocabulary of %s has %llu tokens, not %d: using %llu\n", vocab_from,
                    (unsigned long long)toks.n, s.n_vocab, (unsigned long long)toks.n);
        }
        s.n_vocab = (int32_t)toks.n;
    }
    const char *an = kvt_arch_name(s.arch);
    char key[128], name[160];
#define AKEY(sfx) (snprintf(key, sizeof key, "%s.%s", an, sfx), key)
    snprintf(name, sizeof name, "%s random %s", ks ? ks->name : "custom", fmt->name);
    kvt_gguf_writer_set_str(w, "general.architecture", an);
    kvt_gguf_writer_set_str(w, "general.name", name);
    snprintf(name, sizeof name, "random weights from kvtier mkmodel, seed %lld", (long long)seed);
    kvt_gguf_writer_set_str(w, "general.description", name);
    kvt_gguf_writer_set_u32(w, "general.file_type", fmt->ftype);
    kvt_gguf_writer_set_u32(w, "general.quantization_version", 2);
    kvt_gguf_writer_set_u32(w, AKEY("vocab_size"), (uint32_t)s.n_vocab);
    kvt_gguf_writer_set_u32(w, AKEY("context_length"), (uint32_t)s.n_ctx);
    kvt_gguf_writer_set_u32(w, AKEY("embedding_length"), (uint32_t)s.n_embd);
    kvt_gguf_writer_set_u32(w, AKEY("block_count"), (uint32_t)s.n_layer);
    kvt_gguf_writer_set_u32(w, AKEY("feed_forward_length"), (uint32_t)s.n_ff);
    kvt_gguf_writer_set_u32(w, AKEY("attention.head_count"), (uint32_t)s.n_head);
    kvt_gguf_writer_set_u32(w, AKEY("attention.head_count_kv"), (uint32_t)s.n_head_kv);
    if (s.arch == KVT_ARCH_QWEN3 || s.head_dim * s.n_head != s.n_embd) {
        kvt_gguf_writer_set_u32(w, AKEY("attention.key_length"), (uint32_t)s.head_dim);
        kvt_gguf_writer_set_u32(w, AKEY("attention.value_length"), (uint32_t)s.head_dim);
    }
    kvt_gguf_writer_set_u32(w, AKEY("rope.dimension_count"), (uint32_t)s.head_dim);
    kvt_gguf_writer_set_f32(w, AKEY("rope.freq_base"), s.rope_base);
    kvt_gguf_writer_set_f32(w, AKEY("attention.layer_norm_rms_epsilon"), s.rms_eps);
#undef AKEY
    if (vsrc) {
        for (int64_t i = 0; i < kvt_gguf_n_kv(vsrc); i++) {
            kvt_str k = kvt_gguf_key(vsrc, i);
            if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10)) kvt_gguf_writer_copy_kv(w, vsrc, i);
        }
    } else if (s.n_vocab < SYNTH_MIN_VOCAB) {
        fprintf(stderr, "kvtier " CMD ": the synthetic vocabulary needs --vocab >= %d\n", SYNTH_MIN_VOCAB);
        rc = 2;
        goto done;
    } else if (!synth_vocab(w, s.n_vocab)) {
        fprintf(stderr, "kvtier " CMD ": out of memory building the vocabulary\n");
        goto done;
    }

    // --- tensors
    if (!build_plan(&s, fmt, (uint64_t)seed, &p)) {
        fprintf(stderr, "kvtier " CMD ": out of memory\n");
        goto done;
    }
    int64_t total = 0, n_params = 0;
    for (int64_t i = 0; i < p.n; i++) {
        const plan_tensor *t = &p.t[i];
        kvt_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL);
        total += kvt_row_size(t->type, t->ne[0]) * t->ne[1];
        n_params += t->ne[0] * t->ne[1];
        if (t->ne[0] > g.max_cols) g.max_cols = t->ne[0];
    }
    if (!threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? n : 1;
    }
    if (kvt_threadpool_init((int)threads, &pool, &err)) {
        fprintf(stderr, "kvtier " CMD ": %s\n", err.msg);
        goto done;
    }
    g.p = &p;
    g.pool = pool;
    g.scratch = malloc((size_t)(threads * g.max_cols) * sizeof(float));
    if (!g.scratch) {
        fprintf(stderr, "kvtier " CMD ": out of memory\n");
        goto done;
    }
    g.bytes_total = total;
    g.t0 = kvt_time_ms();
    g.progress = !quiet && isatty(2);
    kvt_status st = kvt_gguf_writer_write_stream(w, out, fill_tensor, &g, &err);
    if (g.progress) fprintf(stderr, "\n");
    if (st) {
        fprintf(stderr, "kvtier " CMD ": %s\n", err.msg);
        goto done;
    }
    if (!quiet) printf("wrote %s: %s %s, %d layers, %lld tensors, %.2fM params, %.1f MiB of weights, %.1f s\n", out,
           ks ? ks->name : "custom", fmt->name, s.n_layer, (long long)p.n, (double)n_params / 1e6,
           (double)total / 1048576.0, (kvt_time_ms() - g.t0) / 1000.0);
    rc = 0;
done:
    free(g.scratch);
    kvt_threadpool_free(pool);
    free(p.t);
    kvt_gguf_free(vsrc);
    kvt_gguf_writer_free(w);
    return rc;
}
