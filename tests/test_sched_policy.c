// test_sched_policy.c - the scheduler's decisions (src/sched/sched_policy.c) on hand-made request sets with
// known answers: admission (FCFS, n_parallel, memory), the token budget's split into decode rows and prompt
// chunks, preemption by swap and resumption.
#include <stdio.h>
#include <string.h>

#include "../src/sched/sched_policy.h"
#include "test.h"

enum { W = KVT_SP_WAITING, P = KVT_SP_PREFILL, D = KVT_SP_DECODE };

// state, swapped, n, n_live, prompt, prefilled, demand
static kvt_sched_policy_req rq(int32_t state, bool swapped, int32_t n, int32_t n_live, int64_t prompt, int64_t prefilled,
                               int64_t demand) {
    return (kvt_sched_policy_req){state, swapped, n, n_live, prompt, prefilled, demand, 0};
}

static bool same_ids(const int64_t *got, int64_t n_got, const int64_t *want, int64_t n_want, char *msg, size_t cap,
                     const char *what) {
    bool ok = n_got == n_want;
    for (int64_t i = 0; ok && i < n_got; i++) ok = got[i] == want[i];
    if (!ok) {
        int k = snprintf(msg, cap, "%s: got [", what);
        for (int64_t i = 0; i < n_got && k > 0 && (size_t)k < cap; i++) k += snprintf(msg + k, cap - (size_t)k, " %lld", (long long)got[i]);
        if (k > 0 && (size_t)k < cap) snprintf(msg + k, cap - (size_t)k, " ], want %lld entries", (long long)n_want);
    }
    return ok;
}

static void test_admit(void) {
    kvt_sched_policy_params p = {4, 64, -1, 16, 100};
    int64_t out[8];
    char msg[256] = "";
    bool ok = true;
    // 3 slots used (a request decoding 2 choices, one prefilling); the next waiting one (n 1) fills the 4th slot;
    // the one after (n 2) does not fit and the last (n 1) does not overtake it
    kvt_sched_policy_req a[] = {rq(D, false, 2, 2, 8, 8, 0), rq(P, false, 1, 1, 8, 0, 0), rq(W, false, 1, 0, 8, 0, 0),
                                rq(W, false, 2, 0, 8, 0, 0), rq(W, false, 1, 0, 8, 0, 0)};
    ok = ok && same_ids(out, kvt_sched_policy_admit(&p, a, 5, out), (int64_t[]){2}, 1, msg, sizeof msg, "slots");
    // nothing runs: the oldest is admitted even if it asks for more than n_parallel
    kvt_sched_policy_req b[] = {rq(W, false, 8, 0, 8, 0, 0), rq(W, false, 1, 0, 8, 0, 0)};
    ok = ok && same_ids(out, kvt_sched_policy_admit(&p, b, 2, out), (int64_t[]){0}, 1, msg, sizeof msg, "empty");
    // a swapped request resumes before anything is admitted
    kvt_sched_policy_req c[] = {rq(D, true, 1, 1, 8, 8, 100), rq(W, false, 1, 0, 8, 0, 0)};
    ok = ok && kvt_sched_policy_admit(&p, c, 2, out) == 0;
    // memory: 700 held, a 40-token prompt needs 3 blocks (300) and fits exactly in 1000; a 1-token one (100) then not
    kvt_sched_policy_req d[] = {rq(D, false, 1, 1, 8, 8, 700), rq(W, false, 1, 0, 40, 0, 0), rq(W, false, 1, 0, 1, 0, 0)};
    ok = ok && kvt_sched_policy_need(&p, &d[1]) == 300 && kvt_sched_policy_need(&p, &d[2]) == 100;
    ok = ok && same_ids(out, kvt_sched_policy_admit(&p, d, 3, out), (int64_t[]){1, 2}, 2, msg, sizeof msg, "no limit");
    p.resident = 1000;
    ok = ok && same_ids(out, kvt_sched_policy_admit(&p, d, 3, out), (int64_t[]){1}, 1, msg, sizeof msg, "memory");
    // with no slot used, a prompt larger than the limit is admitted all the same
    kvt_sched_policy_req e[] = {rq(W, false, 1, 0, 4000, 0, 0), rq(W, false, 1, 0, 1, 0, 0)};
    ok = ok && same_ids(out, kvt_sched_policy_admit(&p, e, 2, out), (int64_t[]){0}, 1, msg, sizeof msg, "large");
    // a caller-given need (a sparse request's working set, scheduler.c) replaces the prompt's blocks: 700 held, a
    // 400-token prompt (2500) fits in 1000 when it needs 250, and the next one (need 100) then not
    kvt_sched_policy_req f[] = {rq(D, false, 1, 1, 8, 8, 700), rq(W, false, 1, 0, 400, 0, 0), rq(W, false, 1, 0, 1, 0, 0)};
    ok = ok && kvt_sched_policy_need(&p, &f[1]) == 2500 && kvt_sched_policy_admit(&p, f, 3, out) == 0;
    f[1].need = 250;
    ok = ok && kvt_sched_policy_need(&p, &f[1]) == 250;
    ok = ok && same_ids(out, kvt_sched_policy_admit(&p, f, 3, out), (int64_t[]){1}, 1, msg, sizeof msg, "need");
    const kvt_sched_policy_req pre = rq(P, false, 3, 1, 8, 0, 0);
    ok = ok && kvt_sched_policy_slots(&a[0]) == 2 && kvt_sched_policy_slots(&pre) == 3;
    test_result(ok, "sched_policy: admission is FCFS within n_parallel slots and the resident limit; nothing overtakes, "
                    "nothing is admitted while a request is swapped out", "%s", msg);
}

static bool same_runs(const kvt_sched_policy_run *got, int64_t n_got, const kvt_sched_policy_run *want, int64_t n_want) {
    bool ok = n_got == n_want;
    for (int64_t i = 0; ok && i < n_got; i++) {
        ok = got[i].req == want[i].req && got[i].tokens == want[i].tokens && got[i].prefill == want[i].prefill &&
             got[i].last == want[i].last;
    }
    return ok;
}

static void test_split(void) {
    kvt_sched_policy_params p = {8, 10, -1, 16, 100};
    kvt_sched_policy_run out[8];
    // decoding: 3 live rows, 1 row (the swapped one does not run); prefilling: 15 prompt tokens left, 4 left
    kvt_sched_policy_req a[] = {rq(D, false, 3, 3, 8, 8, 0), rq(P, false, 1, 1, 20, 5, 0), rq(D, true, 2, 2, 8, 8, 0),
                                rq(P, false, 1, 1, 4, 0, 0), rq(D, false, 1, 1, 8, 8, 0), rq(W, false, 1, 0, 9, 0, 0)};
    // budget 10: 4 decode rows, then 6 tokens of the first prompt (not its last chunk); the second gets nothing
    const kvt_sched_policy_run w10[] = {{0, 3, false, false}, {4, 1, false, false}, {1, 6, true, false}};
    int64_t n = kvt_sched_policy_split(&p, a, 6, out);
    bool ok = same_runs(out, n, w10, 3);
    // budget 30: both prompts end (15 + 4 tokens, each its last chunk)
    p.token_budget = 30;
    const kvt_sched_policy_run w30[] = {{0, 3, false, false}, {4, 1, false, false}, {1, 15, true, true}, {3, 4, true, true}};
    n = ok ? kvt_sched_policy_split(&p, a, 6, out) : 0;
    ok = ok && same_runs(out, n, w30, 4);
    // budget 4: the decode rows take it all
    p.token_budget = 4;
    n = ok ? kvt_sched_policy_split(&p, a, 6, out) : 0;
    ok = ok && same_runs(out, n, w10, 2);
    test_result(ok, "sched_policy: the token budget goes to one decode row per live sequence, then prompt chunks in "
                    "admission order (the last chunk marked); swapped and waiting requests do not run", "%lld entries",
                (long long)n);
}

// The victims in order, as a caller that reads each one's demand from the view asks for them (marks a copy).
static int64_t victims(const kvt_sched_policy_params *p, const kvt_sched_policy_req *reqs, int64_t n, int64_t *out,
                       kvt_sched_policy_load *load) {
    kvt_sched_policy_req v[8];
    memcpy(v, reqs, (size_t)n * sizeof *v);
    *load = kvt_sched_policy_running(v, n);
    int64_t k = 0;
    for (int64_t i; (i = kvt_sched_policy_victim(p, v, n, load)) >= 0;) {
        out[k++] = i;
        v[i].swapped = true;
        load->demand -= v[i].demand;
        load->n_running--;
    }
    return k;
}

static void test_preempt_resume(void) {
    kvt_sched_policy_params p = {8, 64, 1000, 16, 100};
    int64_t out[8];
    char msg[256] = "";
    // running demand 400 + 400 + 300 = 1100 (the swapped one's 300 does not count)
    kvt_sched_policy_req a[] = {rq(D, false, 1, 1, 8, 8, 400), rq(D, true, 1, 1, 8, 8, 300), rq(P, false, 1, 1, 8, 0, 400),
                                rq(D, false, 1, 1, 8, 8, 300), rq(W, false, 1, 0, 8, 0, 0)};
    kvt_sched_policy_load l = kvt_sched_policy_running(a, 5);
    bool ok = l.demand == 1100 && l.n_running == 3;
    ok = ok && same_ids(out, victims(&p, a, 5, out, &l), (int64_t[]){3}, 1, msg, sizeof msg, "1000") && l.demand == 800;
    p.resident = 500; // 1100 -> 800 -> 400
    ok = ok && same_ids(out, victims(&p, a, 5, out, &l), (int64_t[]){3, 2}, 2, msg, sizeof msg, "500") && l.n_running == 1;
    p.resident = 100; // the last running request is never preempted
    ok = ok && same_ids(out, victims(&p, a, 5, out, &l), (int64_t[]){3, 2}, 2, msg, sizeof msg, "100");
    p.resident = -1;
    ok = ok && victims(&p, a, 5, out, &l) == 0;
    // resume: 600 running; 300 then 100 fit in 1000; in 800 the first does not, and the second does not overtake it
    kvt_sched_policy_req b[] = {rq(D, false, 1, 1, 8, 8, 400), rq(D, true, 1, 1, 8, 8, 300), rq(D, true, 1, 1, 8, 8, 100),
                                rq(D, false, 1, 1, 8, 8, 200)};
    p.resident = 1000;
    ok = ok && same_ids(out, kvt_sched_policy_resume(&p, b, 4, NULL, out), (int64_t[]){1, 2}, 2, msg, sizeof msg, "resume 1000");
    p.resident = 800;
    ok = ok && kvt_sched_policy_resume(&p, b, 4, NULL, out) == 0;
    // the running totals the caller carries count, not the view's: 300 running leaves room for both in 800
    const kvt_sched_policy_load carried = {300, 1};
    ok = ok && same_ids(out, kvt_sched_policy_resume(&p, b, 4, &carried, out), (int64_t[]){1, 2}, 2, msg, sizeof msg, "carried");
    // nothing runs: the earliest swapped one resumes whatever its demand
    kvt_sched_policy_req c[] = {rq(D, true, 1, 1, 8, 8, 5000), rq(D, true, 1, 1, 8, 8, 10)};
    p.resident = 100;
    ok = ok && same_ids(out, kvt_sched_policy_resume(&p, c, 2, NULL, out), (int64_t[]){0}, 1, msg, sizeof msg, "nothing runs");
    p.resident = -1; // no limit: every swapped one
    ok = ok && same_ids(out, kvt_sched_policy_resume(&p, b, 4, NULL, out), (int64_t[]){1, 2}, 2, msg, sizeof msg, "no limit");
    test_result(ok, "sched_policy: preemption swaps the latest-admitted running requests until the rest fit (never the "
                    "last one); resumption takes the earliest swapped ones that fit, the first whenever nothing runs",
                "%s", msg);
}

void test_sched_policy(const test_env *env) {
    (void)env;
    test_admit();
    test_split();
    test_preempt_resume();
}
