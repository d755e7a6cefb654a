// sched_policy.c - the scheduler's decisions over a plain-data view of the requests (see sched_policy.h).
#include "sched_policy.h"

int32_t kvt_sched_policy_slots(const kvt_sched_policy_req *r) { return r->state == KVT_SP_PREFILL ? r->n : r->n_live; }

int64_t kvt_sched_policy_need(const kvt_sched_policy_params *p, const kvt_sched_policy_req *r) {
    return (r->n_prompt + p->block_tokens - 1) / p->block_tokens * p->block_bytes;
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

int64_t kvt_sched_policy_preempt(const kvt_sched_policy_params *p, const kvt_sched_policy_req *reqs, int64_t n,
                                 int64_t *out) {
    if (p->resident < 0) return 0;
    int64_t demand = 0, n_running = 0, end = 0; // end: one past the last admitted request
    for (; end < n && reqs[end].state != KVT_SP_WAITING; end++) {
        if (!reqs[end].swapped) demand += reqs[end].demand, n_running++;
    }
    int64_t k = 0;
    for (int64_t i = end - 1; i >= 0 && demand > p->resident && n_running > 1; i--) { // latest admitted first
        if (reqs[i].swapped) continue;
        out[k++] = i;
        demand -= reqs[i].demand;
        n_running--;
    }
    return k;
}

int64_t kvt_sched_policy_resume(const kvt_sched_policy_params *p, const kvt_sched_policy_req *reqs, int64_t n,
                                int64_t *out) {
    int64_t demand = 0, n_running = 0, k = 0;
    for (int64_t i = 0; i < n && reqs[i].state != KVT_SP_WAITING; i++) {
        if (!reqs[i].swapped) demand += reqs[i].demand, n_running++;
    }
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
