// sched_policy.c - the scheduler's decisions over a plain-data view of the requests (see sched_policy.h).
#include "sched_policy.h"

#include <string.h>

int32_t kvt_sched_policy_slots(const kvt_sched_policy_req *r) { return r->state == KVT_SP_PREFILL ? r->n : r->n_live; }

int64_t kvt_sched_policy_need(const kvt_sched_policy_params *p, const kvt_sched_policy_req *r) {
    return r->need > 0 ? r->need : (r->n_prompt + p->block_tokens - 1) / p->block_tokens * p->block_bytes;
}

int64_t kvt_sched_policy_admit(const kvt_sched_policy_params *p, const kvt_sched_policy_req *reqs, int64_t n,
                               int64_t *admit) {
    int64_t k = 0, used = 0, demand = 0;
    for (int64_t i = 0; i < n; i++) {
        const kvt_sched_policy_req *r = &reqs[i];
        if (r->state != KVT_SP_WAITING) {
            if (r->swapped) return k; // swapped requests resume first
            used += kvt_sched_policy_slots(r);
            if (p->resident >= 0) demand += r->demand;
            continue;
        }
        if (used > 0 && used + r->n > p->n_parallel) return k;
        const int64_t need = kvt_sched_policy_need(p, r);
        if (p->resident >= 0 && used > 0 && demand + need > p->resident) return k;
        admit[k++] = i;
        used += r->n;
        demand += need;
    }
    return k;
}

kvt_sched_policy_load kvt_sched_policy_running(const kvt_sched_policy_req *reqs, int64_t n) {
    kvt_sched_policy_load l = {0, 0};
    for (int64_t i = 0; i < n && reqs[i].state != KVT_SP_WAITING; i++) {
        if (!reqs[i].swapped) l.demand += reqs[i].demand, l.n_running++;
    }
    return l;
}

int64_t kvt_sched_policy_victim(const kvt_sched_policy_params *p, const kvt_sched_policy_req *reqs, int64_t n,
                                const kvt_sched_policy_load *load) {
    if (p->resident < 0 || load->demand <= p->resident || load->n_running <= 1) return -1;
    int64_t victim = -1; // the latest admitted running request
    for (int64_t i = 0; i < n && reqs[i].state != KVT_SP_WAITING; i++) {
        if (!reqs[i].swapped) victim = i;
    }
    return victim;
}

int64_t kvt_sched_policy_resume(const kvt_sched_policy_params *p, const kvt_sched_policy_req *reqs, int64_t n,
                                const kvt_sched_policy_load *load, int64_t *out) {
    const kvt_sched_policy_load l = load ? *load : kvt_sched_policy_running(reqs, n);
    int64_t demand = l.demand, n_running = l.n_running, k = 0;
    for (int64_t i = 0; i < n && reqs[i].state != KVT_SP_WAITING; i++) { // the earliest swapped ones that fit
        if (!reqs[i].swapped) continue;
        if (p->resident >= 0 && n_running > 0 && demand + reqs[i].demand > p->resident) break;
        out[k++] = i;
        demand += reqs[i].demand;
        n_running++;
    }
    return k;
}

int64_t kvt_sched_policy_split(const kvt_sched_policy_params *p, const kvt_sched_policy_req *reqs, int64_t n,
                               kvt_sched_policy_run *out) {
    int64_t k = 0, budget = p->token_budget;
    for (int64_t i = 0; i < n && reqs[i].state != KVT_SP_WAITING; i++) {
        const kvt_sched_policy_req *r = &reqs[i];
        if (r->swapped || r->state != KVT_SP_DECODE || r->n_live <= 0) continue;
        out[k++] = (kvt_sched_policy_run){i, r->n_live, false, false};
        budget -= r->n_live;
    }
    for (int64_t i = 0; i < n && reqs[i].state != KVT_SP_WAITING && budget > 0; i++) {
        const kvt_sched_policy_req *r = &reqs[i];
        if (r->swapped || r->state != KVT_SP_PREFILL) continue;
        int64_t chunk = r->n_prompt - r->n_prefilled;
        if (chunk > budget) chunk = budget;
        out[k++] = (kvt_sched_policy_run){i, chunk, true, r->n_prefilled + chunk == r->n_prompt};
        budget -= chunk;
    }
    return k;
}

int64_t kvt_sched_policy_plan(int32_t *plan, int64_t n_runs, int64_t n_swapped, int32_t iters) {
    if (iters < 1 || n_runs < 1) return 0;
    if (iters == 1) return n_runs;
    // iteration 1 is runs then swapped, right after iteration 0's runs: the swapped ones move up first
    const int64_t per = n_runs + n_swapped;
    memmove(plan + 2 * n_runs, plan + n_runs, (size_t)n_swapped * sizeof *plan);
    memcpy(plan + n_runs, plan, (size_t)n_runs * sizeof *plan);
    for (int32_t it = 2; it < iters; it++) memcpy(plan + n_runs + (int64_t)(it - 1) * per, plan + n_runs, (size_t)per * sizeof *plan);
    return n_runs + (int64_t)(iters - 1) * per;
}
