// test_sampler.c - sampling chain properties.
#include <math.h>
#include <stdlib.h>

#include "../src/sched/sampler.h"
#include "test.h"

void test_sampler(const test_env *env) {
    (void)env;
    enum { N = 100 };
    float logits[N];
    for (int i = 0; i < N; i++) logits[i] = (float)(i % 17) * 0.1f;
    logits[42] = 5.0f;
    kvt_sampler_params p = kvt_sampler_params_default();
    p.temp = 0;
    kvt_sampler *s;
    kvt_sampler_init(&p, N, &s, NULL);
    test_result(kvt_sampler_sample(s, logits) == 42, "sampler: greedy picks argmax", "");
    kvt_sampler_free(s);
    // top-k 1 at any temperature is greedy
    p.temp = 1.5f;
    p.top_k = 1;
    kvt_sampler_init(&p, N, &s, NULL);
    bool ok = true;
    for (int i = 0; i < 50; i++) ok &= kvt_sampler_sample(s, logits) == 42;
    test_result(ok, "sampler: top-k 1 is greedy", "");
    kvt_sampler_free(s);
    // same seed, same draws; the draws follow the distribution roughly
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temp = 1.0f;
    float two[2] = {0.0f, logf(3.0f)}; // p = 0.25 / 0.75
    kvt_sampler *a, *b;
    kvt_sampler_init(&p, 2, &a, NULL);
    kvt_sampler_init(&p, 2, &b, NULL);
    int same = 1, ones = 0;
    for (int i = 0; i < 4000; i++) {
        int x = kvt_sampler_sample(a, two), y = kvt_sampler_sample(b, two);
        same &= x == y;
        ones += x;
    }
    test_result(same, "sampler: deterministic for a seed", "");
    test_result(fabs(ones / 4000.0 - 0.75) < 0.03, "sampler: draws follow softmax", "P(1) = %.3f, want 0.75", ones / 4000.0);
    kvt_sampler_free(a);
    kvt_sampler_free(b);
    // min-p removes the unlikely token entirely
    p.min_p = 0.5f;
    kvt_sampler_init(&p, 2, &a, NULL);
    ok = true;
    for (int i = 0; i < 500; i++) ok &= kvt_sampler_sample(a, two) == 1;
    test_result(ok, "sampler: min-p filters", "");
    kvt_sampler_free(a);
    // repetition penalty turns the winner around
    p = kvt_sampler_params_default();
    p.temp = 0;
    p.repeat_penalty = 4.0f;
    float pen[2] = {1.0f, 2.0f};
    kvt_sampler_init(&p, 2, &a, NULL);
    kvt_sampler_accept(a, 1);
    test_result(kvt_sampler_sample(a, pen) == 0, "sampler: repetition penalty", "");
    kvt_sampler_free(a);
}
