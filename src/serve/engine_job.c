// engine_job.c - what every kvt_engine checks of a job before it queues it (engine.h).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

kvt_status kvt_engine_job_accept(const kvt_engine_job *job, int64_t n_ctx, int32_t **prompt, kvt_err *err) {
    *prompt = NULL;
    if (job->n_prompt < 1 || job->n_prompt >= n_ctx) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "the prompt has %lld tokens; the context holds %lld (-c), so at most %lld",
                          (long long)job->n_prompt, (long long)n_ctx, (long long)(n_ctx - 1));
    }
    if (job->n < 1 || job->top_logprobs < 0 || job->top_logprobs > KVT_ENGINE_MAX_TOP) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "n %d, top_logprobs %d: need n >= 1 and 0..%d alternatives", job->n,
                          job->top_logprobs, KVT_ENGINE_MAX_TOP);
    }
    if (job->post_sampling && job->n != 1)
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "post-sampling probabilities: one choice per job (n %d)", job->n);
    if (!(*prompt = malloc((size_t)job->n_prompt * sizeof **prompt))) {
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory for a job of %lld prompt tokens", (long long)job->n_prompt);
    }
    memcpy(*prompt, job->prompt, (size_t)job->n_prompt * sizeof **prompt);
    return KVT_OK;
}

kvt_status kvt_engine_job_admit(bool stopping, int64_t n_waiting, int64_t max_queue, kvt_err *err) {
    if (stopping) return kvt_errorf(err, KVT_ERR_BUDGET, "the server is shutting down");
    if (n_waiting >= max_queue) {
        return kvt_errorf(err, KVT_ERR_BUDGET, "the queue is full (%lld requests waiting)", (long long)n_waiting);
    }
    return KVT_OK;
}

void kvt_engine_token_report(const kvt_sampler_report *r, kvt_engine_token *t) {
    t->logprob = logf(r->chosen);
    t->n_top = r->n < KVT_ENGINE_MAX_TOP ? r->n : KVT_ENGINE_MAX_TOP;
    for (int32_t i = 0; i < t->n_top; i++) {
        t->top_ids[i] = r->ids[i];
        t->top_logprobs[i] = logf(r->probs[i]);
    }
}
