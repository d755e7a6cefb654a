// native_prompt.c - the token ids of a /completion prompt that mixes strings and token ids (native.h) and of a
// /infill prompt (infill.h). Apart from native.c, which the request fuzz target links without the tokenizer.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/grow.h"
#include "infill.h"
#include "native.h"

int32_t *kvt_native_prompt_ids(const struct kvt_native_ext *x, const kvt_tokenizer *tok, int64_t *n, kvt_api_error *e) {
    const int32_t n_vocab = kvt_tokenizer_n_vocab(tok);
    int64_t total = 0, cap = 0;
    int32_t *ids = NULL;
    for (size_t i = 0; i < x->n_pieces; i++) {
        const kvt_native_piece *pc = &x->pieces[i];
        if (!pc->text && pc->id >= n_vocab) {
            free(ids);
            kvt_api_errorf(e, 400, NULL, "prompt", "prompt[%zu] = %d is not a token id (0..%d)", i, pc->id, n_vocab - 1);
            return NULL;
        }
        kvt_err err = {0};
        const size_t len = pc->text ? strlen(pc->text) : 0;
        const bool add_special = i == 0; // BOS as the model asks only before a first string (as llama-server)
        int64_t k = pc->text ? kvt_tokenize(tok, pc->text, len, add_special, true, NULL, 0, &err) : 1;
        if (k < 0) {
            free(ids);
            kvt_api_errorf(e, 400, NULL, "prompt", "cannot tokenize prompt[%zu]: %s", i, err.msg);
            return NULL;
        }
        if (total + k + 1 > cap) {
            cap = 2 * (total + k + 1);
            int32_t *g = realloc(ids, (size_t)cap * sizeof *ids);
            if (!g) {
                free(ids);
                kvt_api_errorf(e, 500, "server_error", NULL, "out of memory for the prompt");
                return NULL;
            }
            ids = g;
        }
        if (pc->text) kvt_tokenize(tok, pc->text, len, add_special, true, ids + total, k, &err);
        else ids[total] = pc->id;
        total += k;
    }
    *n = total;
    return ids;
}

// ---- POST /infill's prompt (infill.h) ----

typedef struct {
    int32_t *v;
    int64_t n;
    size_t cap;
} ivec; // token ids

static bool iv_room(ivec *a, int64_t more, kvt_api_error *e) {
    if (kvt_grow((void **)&a->v, &a->cap, (size_t)(a->n + more), sizeof *a->v)) return true;
    kvt_api_errorf(e, 500, "server_error", NULL, "out of memory for the prompt");
    return false;
}
static bool iv_push(ivec *a, int32_t id, kvt_api_error *e) {
    if (!iv_room(a, 1, e)) return false;
    a->v[a->n++] = id;
    return true;
}
// s[0..len) tokenized without BOS, special tokens parsed only when special, appended.
static bool iv_text(ivec *a, const kvt_tokenizer *tok, const char *s, size_t len, bool special, const char *param,
                    kvt_api_error *e) {
    kvt_err err = {0};
    const int64_t k = kvt_tokenize(tok, s, len, false, special, NULL, 0, &err);
    if (k < 0) {
        kvt_api_errorf(e, 400, NULL, param, "cannot tokenize %s: %s", param, err.msg);
        return false;
    }
    if (k == 0) return true; // (an empty text: no room made, a->v may be NULL)
    if (!iv_room(a, k, e)) return false;
    kvt_tokenize(tok, s, len, false, special, a->v + a->n, k, &err);
    a->n += k;
    return true;
}
// A list of strings (plain text) and token ids (checked against the vocabulary), appended.
static bool iv_pieces(ivec *a, const kvt_tokenizer *tok, const kvt_native_piece *p, size_t n, const char *param,
                      kvt_api_error *e) {
    const int32_t n_vocab = kvt_tokenizer_n_vocab(tok);
    for (size_t i = 0; i < n; i++) {
        if (p[i].text && !iv_text(a, tok, p[i].text, strlen(p[i].text), false, param, e)) return false;
        if (p[i].text) continue;
        if (p[i].id >= n_vocab) {
            kvt_api_errorf(e, 400, NULL, param, "%s[%zu] = %d is not a token id (0..%d)", param, i, p[i].id, n_vocab - 1);
            return false;
        }
        if (!iv_push(a, p[i].id, e)) return false;
    }
    return true;
}
// b->v[from .. from + n) appended
static bool iv_append(ivec *a, const ivec *b, int64_t from, int64_t n, kvt_api_error *e) {
    if (!iv_room(a, n, e)) return false;
    if (n > 0) memcpy(a->v + a->n, b->v + from, (size_t)n * sizeof *b->v);
    a->n += n;
    return true;
}

// The extra context: [FIM_REP]myproject\n, per chunk [FIM_SEP]filename\n (or the snippet line) and its text, then
// [FIM_SEP]filename\n.
static bool infill_extra(ivec *ex, const struct kvt_infill *in, const kvt_tokenizer *tok, kvt_api_error *e) {
    const int32_t rep = kvt_token_fim(tok, KVT_FIM_REP), sep = kvt_token_fim(tok, KVT_FIM_SEP);
    static const char k_repo[] = "myproject\n", k_snippet[] = "\n\n--- snippet ---\n\n", k_file[] = "filename\n";
    if (rep >= 0 && !(iv_push(ex, rep, e) && iv_text(ex, tok, k_repo, strlen(k_repo), false, "input_extra", e)))
        return false;
    for (size_t i = 0; i < in->n_extra; i++) {
        const kvt_infill_chunk *c = &in->extra[i];
        char pp[64];
        snprintf(pp, sizeof pp, "input_extra[%zu]", i);
        if (sep >= 0) {
            const size_t fl = strlen(c->filename);
            char *f = malloc(fl + 2);
            if (!f) {
                kvt_api_errorf(e, 500, "server_error", NULL, "out of memory for the prompt");
                return false;
            }
            memcpy(f, c->filename, fl);
            f[fl] = '\n', f[fl + 1] = 0;
            const bool ok = iv_push(ex, sep, e) && iv_text(ex, tok, f, fl + 1, false, pp, e);
            free(f);
            if (!ok) return false;
        } else if (!iv_text(ex, tok, k_snippet, strlen(k_snippet), false, pp, e)) {
            return false;
        }
        if (!iv_text(ex, tok, c->text, strlen(c->text), false, pp, e)) return false;
    }
    return sep < 0 || (iv_push(ex, sep, e) && iv_text(ex, tok, k_file, strlen(k_file), false, "input_extra", e));
}

bool kvt_infill_supported(const kvt_tokenizer *tok, kvt_api_error *e) {
    const int32_t pre = kvt_token_fim(tok, KVT_FIM_PRE), suf = kvt_token_fim(tok, KVT_FIM_SUF),
                  mid = kvt_token_fim(tok, KVT_FIM_MID);
    if (pre >= 0 && suf >= 0 && mid >= 0) return true;
    kvt_api_errorf(e, 501, "not_supported_error", NULL, "Infill is not supported by this model:%s%s%s",
                   pre < 0 ? " prefix token is missing." : "", suf < 0 ? " suffix token is missing." : "",
                   mid < 0 ? " middle token is missing." : "");
    return false;
}

int32_t *kvt_infill_prompt_ids(const struct kvt_infill *in, const kvt_tokenizer *tok, const kvt_infill_limits *lim,
                               int64_t *n, kvt_api_error *e) {
    const int32_t pre = kvt_token_fim(tok, KVT_FIM_PRE), suf = kvt_token_fim(tok, KVT_FIM_SUF),
                  mid = kvt_token_fim(tok, KVT_FIM_MID);
    if (!kvt_infill_supported(tok, e)) return NULL;
    ivec ex = {0}, px = {0}, sx = {0}, pr = {0}, out = {0};
    bool ok = infill_extra(&ex, in, tok, e) && iv_pieces(&px, tok, in->prefix, in->n_prefix, "input_prefix", e) &&
              iv_pieces(&sx, tok, in->suffix, in->n_suffix, "input_suffix", e) &&
              iv_text(&pr, tok, in->prompt, strlen(in->prompt), true, "prompt", e);
    if (ok) {
        // llama-server's budget: the prefix and suffix within a batch (3:1), the extra context in the rest
        const int64_t b4 = lim->n_batch / 4, sufmax = b4 - (2 + pr.n);
        const int64_t n_pre = px.n < 3 * b4 ? px.n : 3 * b4;
        const int64_t n_suf = sx.n < (sufmax > 0 ? sufmax : 0) ? sx.n : (sufmax > 0 ? sufmax : 0);
        const int64_t room = lim->n_ctx - lim->n_batch - 2 * lim->n_predict;
        const int64_t n_ex = ex.n < (room > 0 ? room : 0) ? ex.n : (room > 0 ? room : 0);
        ok = iv_append(&out, &ex, ex.n - n_ex, n_ex, e) &&
             (!kvt_tokenizer_add_bos(tok) || kvt_token_bos(tok) < 0 || iv_push(&out, kvt_token_bos(tok), e));
        for (int part = 0; ok && part < 2; part++) {
            if ((part == 0) != lim->spm) // the prefix part: [FIM_PRE] the prefix's last tokens, the prompt
                ok = iv_push(&out, pre, e) && iv_append(&out, &px, px.n - n_pre, n_pre, e) &&
                     iv_append(&out, &pr, 0, pr.n, e);
            else // the suffix part: [FIM_SUF] the suffix's first tokens
                ok = iv_push(&out, suf, e) && iv_append(&out, &sx, 0, n_suf, e);
        }
        ok = ok && iv_push(&out, mid, e) && iv_room(&out, 1, e); // n + 1 entries, as kvt_native_prompt_ids
    }
    free(ex.v), free(px.v), free(sx.v), free(pr.v);
    if (!ok) {
        free(out.v);
        return NULL;
    }
    *n = out.n;
    return out.v;
}
