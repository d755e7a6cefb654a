#include "generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/timer.h"
#include "../exec/numerics.h"

kvt_generate_params kvt_generate_params_default(void) {
    kvt_generate_params p;
    p.n_predict = 128;
    p.sampling = kvt_sampler_params_default();
    p.stop_at_eog = true;
    return p;
}

kvt_status kvt_logit_bias_ban_eog(const kvt_tokenizer *tok, const kvt_logit_bias *in, int32_t n_in, kvt_logit_bias **out,
                                  int32_t *n_out, kvt_err *err) {
    *out = NULL;
    *n_out = 0;
    if (!tok) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "banning end-of-generation tokens needs the tokenizer");
    if (n_in < 0 || (n_in > 0 && !in)) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "%d logit biases given", (int)n_in);
    const int32_t n_vocab = kvt_tokenizer_n_vocab(tok);
    int64_t n_eog = 0;
    for (int32_t id = 0; id < n_vocab; id++) n_eog += kvt_token_is_eog(tok, id);
    if ((int64_t)n_in + n_eog > INT32_MAX)
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "%d logit biases and %lld end-of-generation bans are too many",
                          (int)n_in, (long long)n_eog);
    const int32_t n = n_in + (int32_t)n_eog;
    if (n == 0) return KVT_OK;
    kvt_logit_bias *v = malloc((size_t)n * sizeof *v);
    if (!v) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for %d logit biases", (int)n);
    if (n_in) memcpy(v, in, (size_t)n_in * sizeof *v);
    int32_t k = n_in;
    for (int32_t id = 0; id < n_vocab; id++) {
        if (kvt_token_is_eog(tok, id)) v[k++] = (kvt_logit_bias){id, -INFINITY};
    }
    *out = v;
    *n_out = n;
    return KVT_OK;
}

kvt_status kvt_generate(kvt_context *ctx, const kvt_tokenizer *tok, const int32_t *prompt, int64_t n_prompt,
                        const kvt_generate_params *p, int32_t *out_ids, float *prompt_logits, kvt_token_cb cb,
                        void *user, kvt_generate_stats *stats, kvt_err *err) {
    return kvt_generate_cached(ctx, tok, prompt, n_prompt, 0, 0, p, out_ids, prompt_logits, cb, user, stats, err);
}

kvt_status kvt_generate_cached(kvt_context *ctx, const kvt_tokenizer *tok, const int32_t *prompt, int64_t n_prompt,
                               int64_t n_cached, int64_t n_align, const kvt_generate_params *p, int32_t *out_ids, float *prompt_logits,
                               kvt_token_cb cb, void *user, kvt_generate_stats *stats, kvt_err *err) {
    memset(stats, 0, sizeof *stats);
    stats->n_prompt = n_prompt;
    const int32_t n_vocab = kvt_context_model(ctx)->hp.n_vocab;
    if (n_prompt <= 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "empty prompt: nothing to condition on");
    if (n_cached < 0 || n_cached >= n_prompt || kvt_context_n_past(ctx) < n_cached) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "%lld cached prompt tokens: need 0 <= n < %lld and held by the context (%lld)",
                          (long long)n_cached, (long long)n_prompt, (long long)kvt_context_n_past(ctx));
    }
    if (kvt_context_n_past(ctx) - n_cached + n_prompt + p->n_predict > kvt_context_n_ctx(ctx)) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "prompt (%lld tokens) + %lld to generate exceed the context of %lld tokens",
                          (long long)n_prompt, (long long)p->n_predict, (long long)kvt_context_n_ctx(ctx));
    }
    kvt_sampler *smp;
    kvt_status st = kvt_sampler_init(&p->sampling, n_vocab, &smp, err);
    if (st) return st;
    for (int64_t i = 0; i < n_prompt; i++) kvt_sampler_accept(smp, prompt[i]);
    double t0 = kvt_time_ms();
    // the first micro-batch ends at a multiple of n_align, so that the later ones start where a run decoding
    // the whole prompt starts them
    int64_t first = n_prompt - n_cached;
    if (n_align > 0 && n_cached % n_align && n_align - n_cached % n_align < first) first = n_align - n_cached % n_align;
    st = kvt_decode_prompt(ctx, 0, prompt + n_cached, first, false, err); // a prompt however split (sparse: dense)
    if (!st && n_cached + first < n_prompt) st = kvt_decode_prompt(ctx, 0, prompt + n_cached + first, n_prompt - n_cached - first, false, err);
    stats->prefill_ms = kvt_time_ms() - t0;
    if (!st) st = kvt_check_logits(kvt_context_model(ctx), kvt_context_logits(ctx), n_vocab, "the prompt's last token", err);
    if (st) goto done;
    if (prompt_logits) memcpy(prompt_logits, kvt_context_logits(ctx), (size_t)n_vocab * sizeof(float));
    // greedy without a penalty needs only the id (kvt_context_argmax: where the device holds the logits, only the id
    // comes back), taken after each decode with the logits' finiteness; with bans only (ignore_eos) too, the logits
    // read only when the argmax is a banned token (the draw is then the sampler's argmax over the tokens left)
    const kvt_sampler_params *sp = &p->sampling;
    const bool ids_only = sp->temp <= 0.0f && kvt_sampler_params_bans_only(sp);
    const bool bans = ids_only && sp->n_logit_bias > 0;
    int32_t next = 0;
    bool finite = true;
    if (ids_only && (st = kvt_context_argmax(ctx, &next, &finite, err))) goto done;
    double t1 = kvt_time_ms();
    for (int64_t i = 0; i < p->n_predict; i++) {
        int32_t id = next;
        if (!ids_only && (st = kvt_sampler_draw(smp, kvt_context_logits(ctx), &id, err))) break;
        if (bans && kvt_sampler_params_banned(sp, id)) id = kvt_sampler_sample(smp, kvt_context_logits(ctx));
        kvt_sampler_accept(smp, id);
        out_ids[stats->n_gen++] = id;
        bool go = cb ? cb(user, id) : true;
        if (p->stop_at_eog && tok && kvt_token_is_eog(tok, id)) {
            stats->hit_eog = true;
            break;
        }
        if (!go || i + 1 == p->n_predict) break;
        st = kvt_decode(ctx, &id, 1, false, err);
        if (!st && ids_only) st = kvt_context_argmax(ctx, &next, &finite, err);
        else if (!st) finite = kvt_all_finite(kvt_context_logits(ctx), n_vocab);
        if (!st && !finite) {
            char what[64];
            snprintf(what, sizeof what, "generated token %lld", (long long)i + 1);
            st = kvt_check_logits(kvt_context_model(ctx), kvt_context_logits(ctx), n_vocab, what, err);
        }
        if (st) break;
    }
    stats->decode_ms = kvt_time_ms() - t1;
done:
    kvt_sampler_free(smp);
    return st;
}
