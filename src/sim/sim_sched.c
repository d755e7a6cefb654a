// sim_sched.c - the simulator's batch schedulers (see sim.h): plain FCFS, and the serving scheduler's own
// decisions (src/sched/sched_policy.c, the functions src/sched/scheduler.c runs) over the simulated requests.
#include <stdlib.h>

#include "sim.h"

int64_t kvt_sim_sched_fcfs(const kvt_sim_sched_view *v, kvt_sim_batch *b, void *ud) {
    (void)ud;
    int64_t n = 0;
    for (int64_t i = 0; i < v->n_running && n < v->max_batch; i++) {
        b->ids[n] = v->running[i];
        b->tokens[n++] = 1;
    }
    for (int64_t i = 0; i < v->n_waiting && n < v->max_batch; i++) {
        b->ids[n] = v->waiting[i];
        b->tokens[n++] = v->reqs[v->waiting[i]].prompt;
    }
    b->n_swap_out = b->n_swap_in = b->n_admit = 0;
    return n;
}

void kvt_sim_kvtier_sched_init(kvt_sim_kvtier_sched *k) {
    *k = (kvt_sim_kvtier_sched){0};
    k->token_budget = 512; // kvtier serve's default: the context's micro-batch (kvt_sched_params_default too)
    k->preempt = true;
}

void kvt_sim_kvtier_sched_free(kvt_sim_kvtier_sched *k) {
    free(k->view);
    free(k->split);
    free(k->ids);
    free(k->pick);
    *k = (kvt_sim_kvtier_sched){.token_budget = k->token_budget, .preempt = k->preempt};
}

static bool grow(kvt_sim_kvtier_sched *k, int64_t n) {
    if (n <= k->cap) return true;
    const int64_t cap = n * 2;
    kvt_sched_policy_req *v = realloc(k->view, (size_t)cap * sizeof *v);
    if (v) k->view = v;
    kvt_sched_policy_run *sp = realloc(k->split, (size_t)cap * sizeof *sp);
    if (sp) k->split = sp;
    int64_t *ids = realloc(k->ids, (size_t)cap * sizeof *ids);
    if (ids) k->ids = ids;
    int64_t *pk = realloc(k->pick, (size_t)cap * sizeof *pk);
    if (pk) k->pick = pk;
    if (!v || !sp || !ids || !pk) return false;
    k->cap = cap;
    return true;
}

// The same calls in the same order as scheduler.c's kvt_sched_step: balance (preempt, then resume), admit,
// split. A simulated request is one sequence (n = 1); its demand is the blocks it holds plus its next one, in
// block units (block_bytes 1); fast + host is the resident limit (none when the host tier is unlimited).
int64_t kvt_sim_sched_kvtier(const kvt_sim_sched_view *v, kvt_sim_batch *b, void *ud) {
    kvt_sim_kvtier_sched *k = ud;
    const int64_t n = v->n_running + v->n_waiting;
    if (!grow(k, n)) return -1;
    kvt_sched_policy_params pp = {(int32_t)v->max_batch, k->token_budget, -1, v->block_tokens, 1};
    if (pp.token_budget < pp.n_parallel + 1) pp.token_budget = pp.n_parallel + 1;
    if (k->preempt && v->host_blocks > 0) pp.resident = v->fast_blocks + v->host_blocks;
    for (int64_t i = 0; i < n; i++) {
        const bool run = i < v->n_running;
        const int64_t id = run ? v->running[i] : v->waiting[i - v->n_running];
        const kvt_sim_req *r = &v->reqs[id];
        const int32_t state = !run ? KVT_SP_WAITING : r->prefilled < r->prompt ? KVT_SP_PREFILL : KVT_SP_DECODE;
        k->view[i] = (kvt_sched_policy_req){state, run && r->swapped, 1, run ? 1 : 0, r->prompt, r->prefilled,
                                            run ? r->n_blocks + 1 : 0, 0};
        k->ids[i] = id;
    }
    b->n_swap_out = b->n_swap_in = b->n_admit = 0;
    if (pp.resident >= 0) {
        kvt_sched_policy_load load = kvt_sched_policy_running(k->view, n);
        for (int64_t i; (i = kvt_sched_policy_victim(&pp, k->view, n, &load)) >= 0;) { // a swap does not change demand here
            k->view[i].swapped = true;
            b->swap_out[b->n_swap_out++] = k->ids[i];
            load.demand -= k->view[i].demand;
            load.n_running--;
        }
        const int64_t nr = kvt_sched_policy_resume(&pp, k->view, n, &load, k->pick);
        for (int64_t j = 0; j < nr; j++) {
            k->view[k->pick[j]].swapped = false;
            b->swap_in[b->n_swap_in++] = k->ids[k->pick[j]];
        }
    }
    const int64_t na = kvt_sched_policy_admit(&pp, k->view, n, k->pick);
    for (int64_t j = 0; j < na; j++) {
        kvt_sched_policy_req *r = &k->view[k->pick[j]];
        r->demand = kvt_sched_policy_need(&pp, r);
        r->state = KVT_SP_PREFILL;
        b->admit[b->n_admit++] = k->ids[k->pick[j]];
    }
    const int64_t ns = kvt_sched_policy_split(&pp, k->view, n, k->split);
    int64_t nb = 0;
    for (int64_t j = 0; j < ns && nb < v->max_batch; j++) {
        b->ids[nb] = k->ids[k->split[j].req];
        b->tokens[nb++] = k->split[j].prefill ? k->split[j].tokens : 1;
    }
    return nb;
}
