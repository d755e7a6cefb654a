// sim_sweep.c - runs over seeds and grids of policies x oversubscription (see sim.h).
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

kvt_status kvt_sim_run_seeds(const kvt_sim_config *c, int n_seeds, kvt_sim_summary *out, kvt_err *err) {
    *out = (kvt_sim_summary){0};
    if (n_seeds <= 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sim: seeds must be positive (got %d)", n_seeds);
    out->runs = calloc((size_t)n_seeds, sizeof *out->runs);
    if (!out->runs) return kvt_errorf(err, KVT_ERR_NOMEM, "sim: out of memory for %d seeds", n_seeds);
    double *all = NULL;
    int64_t n_all = 0;
    double hits = 0;
    int64_t reads = 0, counts[4] = {0}; // sums over the runs: transfers, iterations, preemptions, resumes
    kvt_status st = KVT_OK;
    for (int k = 0; k < n_seeds && !st; k++) {
        kvt_sim_config ck = *c;
        ck.seed = c->seed + (uint64_t)k;
        kvt_sim_result r;
        st = kvt_sim_run(&ck, &r, err);
        if (st) break;
        double *na = realloc(all, (size_t)(n_all + r.n_done + 1) * sizeof *na);
        if (!na) {
            kvt_sim_result_free(&r);
            st = kvt_errorf(err, KVT_ERR_NOMEM, "sim: out of memory for per-request TPOTs");
            break;
        }
        all = na;
        memcpy(all + n_all, r.tpot_ms, (size_t)r.n_done * sizeof *all);
        n_all += r.n_done;
        out->tpot_ms_mean += r.tpot_ms_mean / n_seeds;
        out->throughput_tok_s += r.throughput_tok_s / n_seeds;
        out->moved_bytes += r.moved_bytes / n_seeds;
        out->stall_s += r.stall_s / n_seeds;
        hits += r.hit_rate * (double)r.reads;
        reads += r.reads;
        counts[0] += r.transfers;
        counts[1] += r.iterations;
        counts[2] += r.preemptions;
        counts[3] += r.resumes;
        out->fast_blocks = r.fast_blocks;
        out->wall_s += r.wall_s / n_seeds;
        kvt_sim_result_free(&r); // the per-request TPOTs are in `all`; the figures stay
        out->runs[out->n_seeds++] = r;
    }
    if (!st && n_all > 0) {
        qsort(all, (size_t)n_all, sizeof *all, cmp_double);
        out->tpot_ms_p95 = all[(size_t)((95 * n_all + 99) / 100) - 1];
    }
    out->hit_rate = reads ? hits / (double)reads : 1.0;
    out->reads = (double)reads / n_seeds;
    out->transfers = (double)counts[0] / n_seeds;
    out->iterations = (double)counts[1] / n_seeds;
    out->preemptions = (double)counts[2] / n_seeds;
    out->resumes = (double)counts[3] / n_seeds;
    free(all);
    if (st) kvt_sim_summary_free(out);
    return st;
}

void kvt_sim_summary_free(kvt_sim_summary *s) {
    free(s->runs);
    s->runs = NULL;
}

double kvt_sim_summary_rate(const kvt_sim_summary *s) { return s->wall_s > 0 ? (double)s->transfers / s->wall_s : 0; }

kvt_status kvt_sim_sweep(const kvt_sim_config *base, const char *const *policies, int n_policies, const double *rhos,
                         int n_rhos, int n_seeds, FILE *table, FILE *progress, kvt_err *err) {
    fprintf(table, "| rho | policy | TPOT mean ms | TPOT p95 ms | tok/s | hit rate | GB moved/run | transfers/run | wall s/run |\n");
    fprintf(table, "|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n_rhos; i++) {
        for (int j = 0; j < n_policies; j++) {
            kvt_sim_config c = *base;
            c.rho = rhos[i];
            c.policy = policies[j];
            kvt_sim_summary s;
            kvt_status st = kvt_sim_run_seeds(&c, n_seeds, &s, err);
            if (st) return st;
            kvt_sim_summary_free(&s);
            fprintf(table, "| %.1f | %s | %.2f | %.2f | %.0f | %.3f | %.1f | %.0f | %.2f |\n", rhos[i], policies[j],
                    s.tpot_ms_mean, s.tpot_ms_p95, s.throughput_tok_s, s.hit_rate, s.moved_bytes / 1e9, s.transfers,
                    s.wall_s);
            fflush(table);
            if (progress)
                fprintf(progress, "sim: rho %.1f %-9s TPOT %.2f ms (%.0f transfers, %.2f s per run, %.2fM transfers/s)\n",
                        rhos[i], policies[j], s.tpot_ms_mean, s.transfers, s.wall_s, kvt_sim_summary_rate(&s) / 1e6);
        }
    }
    return KVT_OK;
}
