// test_beam_group.c - the data-movement model (Figure 7 of the locality-aware
// beam scheduling paper), beam grouping (Algorithm 1 on hand-made prefix trees,
// balanced sizes) and the per-step byte predictions of each schedule.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../src/sched/beam_group.h"
#include "../src/sched/dm_model.h"
#include "test.h"

static const double GiB = 1073741824.0;

static bool near(double got, double want, double rel) { return fabs(got - want) <= rel * fabs(want); }

// OPT-6.7B as in Figure 7: 32 layers, 32 KV heads of 128, F16; 64 beams, prompt 128, gen 1920, 7 GiB.
static kvt_dm_params opt_fig7(int64_t step) {
    kvt_dm_params p = {32, 2 * 32 * 128 * 2, 64, step, 128, 1920, (int64_t)7 << 30};
    return p;
}

static void test_figure7(void) {
    const int64_t steps[3] = {32, 64, 128};
    const double paper[3] = {2052, 1044, 540}, eq5[3] = {2010, 990, 480};
    for (int i = 0; i < 3; i++) {
        kvt_dm_params p = opt_fig7(steps[i]);
        kvt_dm_result r;
        kvt_err err = {0};
        kvt_status st = kvt_dm_model_eval(&p, &r, &err);
        char name[128];
        snprintf(name, sizeof name, "beam_group: Figure 7 OPT-6.7B 64 beams step %lld", (long long)steps[i]);
        test_result(st == KVT_OK && near(r.token_by_token_bytes / GiB, 53012, 0.01) && near(r.beam_bytes / GiB, paper[i], 0.01) &&
                        r.beam_eq5_bytes / GiB == eq5[i],
                    name, "st %d (%s): token-by-token %.2f GiB (paper 53012), beam %.2f GiB (paper %.0f), eq5 %.2f", st, err.msg,
                    r.token_by_token_bytes / GiB, r.beam_bytes / GiB, paper[i], r.beam_eq5_bytes / GiB);
    }
    // The paper's GB are GiB: a 7e9-byte budget misses the baseline by 1.6%.
    kvt_dm_params p = opt_fig7(32);
    p.mem = 7000000000;
    kvt_dm_result r;
    kvt_dm_model_eval(&p, &r, NULL);
    test_result(!near(r.token_by_token_bytes / GiB, 53012, 0.01), "beam_group: Figure 7 budget is 7 GiB, not 7e9 bytes",
                "7e9 budget gives %.2f GiB", r.token_by_token_bytes / GiB);
    // Groups in the last step: a beam holds 2048 tokens = 1 GiB, so 7 per group, 10 groups.
    p = opt_fig7(32);
    kvt_dm_model_eval(&p, &r, NULL);
    test_result(r.beams_per_group_last == 7 && r.groups_last == 10 && r.offload_from == 225 && r.steps_offloaded == 57,
                "beam_group: Figure 7 groups and offload onset", "%lld/group, %lld groups, offload from %lld, %lld steps",
                (long long)r.beams_per_group_last, (long long)r.groups_last, (long long)r.offload_from, (long long)r.steps_offloaded);
    // Everything fits: nothing moves.
    p.mem = (int64_t)1 << 40;
    kvt_status st = kvt_dm_model_eval(&p, &r, NULL);
    test_result(st == KVT_OK && r.token_by_token_bytes == 0 && r.beam_bytes == 0 && r.offload_from == -1 && r.groups_last == 1,
                "beam_group: a budget that holds all KV moves nothing", "st %d, %lld / %lld bytes", st,
                (long long)r.token_by_token_bytes, (long long)r.beam_bytes);
}

static void test_budget_errors(void) {
    kvt_err err = {0};
    kvt_dm_params p = opt_fig7(32);
    p.mem = (int64_t)512 << 20; // one beam reaches 1 GiB
    kvt_dm_result r;
    kvt_status st = kvt_dm_model_eval(&p, &r, &err);
    test_result(st == KVT_ERR_BUDGET && strstr(err.msg, "exceeds the KV budget"), "beam_group: dm-model budget below one beam",
                "st %d: %s", st, err.msg);
    int32_t cap = -1;
    st = kvt_beam_capacity(100, 101, 4, &cap, &err);
    test_result(st == KVT_ERR_BUDGET && strstr(err.msg, "smaller than one beam") && strstr(err.msg, "100") && strstr(err.msg, "101"),
                "beam_group: capacity below one beam is a clear error", "st %d: %s", st, err.msg);
    st = kvt_beam_capacity(100, 0, 4, &cap, &err);
    test_result(st == KVT_ERR_INVALID_ARG, "beam_group: zero beam size rejected", "st %d", st);
    p = opt_fig7(0);
    test_result(kvt_dm_model_eval(&p, &r, &err) == KVT_ERR_INVALID_ARG, "beam_group: step 0 rejected", "%s", err.msg);
    p = opt_fig7(32);
    p.beams = (int64_t)1 << 20;
    p.kv_token_layer = (int64_t)1 << 40;
    test_result(kvt_dm_model_eval(&p, &r, &err) == KVT_ERR_INVALID_ARG, "beam_group: 64-bit overflow rejected", "%s", err.msg);
}

static bool sizes_eq(const int32_t *got, int32_t n, const int32_t *want, int32_t wn) {
    if (n != wn) return false;
    for (int32_t i = 0; i < n; i++) {
        if (got[i] != want[i]) return false;
    }
    return true;
}

static void test_sizes(void) {
    int32_t cap = 0, s[64], n = 0;
    // §4.1: 4 GB for KV, 0.6 GB per beam: 6 beams per group, 12 beams in two groups of 6.
    kvt_beam_capacity(4000, 600, 12, &cap, NULL);
    kvt_beam_group_sizes(12, cap, false, s, &n, NULL);
    test_result(cap == 6 && sizes_eq(s, n, (int32_t[]){6, 6}, 2), "beam_group: paper's 4 GB / 0.6 GB example", "cap %d, %d groups", cap, n);
    kvt_beam_group_sizes(16, 7, true, s, &n, NULL);
    test_result(sizes_eq(s, n, (int32_t[]){5, 5, 6}, 3), "beam_group: balanced 16 beams, capacity 7 -> [5,5,6]", "%d groups: %d %d %d", n,
                s[0], s[1], s[2]);
    kvt_beam_group_sizes(16, 7, false, s, &n, NULL);
    test_result(sizes_eq(s, n, (int32_t[]){7, 7, 2}, 3), "beam_group: greedy 16 beams, capacity 7 -> [7,7,2]", "%d groups", n);
    kvt_beam_group_sizes(64, 7, true, s, &n, NULL);
    test_result(sizes_eq(s, n, (int32_t[]){6, 6, 6, 6, 6, 6, 7, 7, 7, 7}, 10), "beam_group: balanced 64 beams, capacity 7",
                "%d groups", n);
    kvt_beam_group_sizes(5, 9, true, s, &n, NULL);
    bool one = sizes_eq(s, n, (int32_t[]){5}, 1);
    kvt_beam_group_sizes(3, 1, true, s, &n, NULL);
    test_result(one && sizes_eq(s, n, (int32_t[]){1, 1, 1}, 3), "beam_group: capacity above / at one beam", "%d groups", n);
    kvt_err err = {0};
    int32_t order[4], start[5];
    kvt_beam_groups g = {0, order, start};
    test_result(kvt_beam_group_in_order(4, (int32_t[]){3, 2}, 2, &g, &err) == KVT_ERR_INVALID_ARG,
                "beam_group: sizes that do not sum to the beams rejected", "%s", err.msg);
}

// Figure 8-like tree: beams 0,2,4 share blocks 0-1-3, beams 1,3,5 share 0-2-4; one leaf each.
static const int32_t k_parent6[11] = {-1, 0, 0, 1, 2, 3, 3, 3, 4, 4, 4};
static const int32_t k_leaf6[6] = {5, 8, 6, 9, 7, 10};

static void test_algorithm1(void) {
    int32_t ids[64], order[8], start[9], s[8], n;
    kvt_beam_blocks beams[8];
    int64_t bytes1[16];
    for (int i = 0; i < 16; i++) bytes1[i] = 1;
    kvt_err err = {0};
    kvt_status st = kvt_beam_blocks_from_tree(k_parent6, 11, k_leaf6, 6, ids, 64, beams, &err);
    test_result(st == KVT_OK && beams[1].n == 4 && beams[1].ids[0] == 0 && beams[1].ids[1] == 2 && beams[1].ids[2] == 4 &&
                    beams[1].ids[3] == 8,
                "beam_group: block lists from parent pointers (root first)", "st %d %s", st, err.msg);
    kvt_beam_groups g = {0, order, start};
    kvt_beam_group_sizes(6, 3, false, s, &n, NULL);
    st = kvt_beam_group_prefix(beams, 6, 11, s, n, &g, &err);
    test_result(st == KVT_OK && g.n_groups == 2 && sizes_eq(order, 6, (int32_t[]){0, 2, 4, 1, 3, 5}, 6) && start[1] == 3,
                "beam_group: Algorithm 1 groups beams by shared prefix", "st %d, order %d %d %d %d %d %d", st, order[0], order[1],
                order[2], order[3], order[4], order[5]);
    int64_t prefix = 0, prefix_noshare = 0, inorder = 0;
    kvt_beam_groups_load_bytes(beams, 11, bytes1, &g, true, &prefix, NULL);
    kvt_beam_groups_load_bytes(beams, 11, bytes1, &g, false, &prefix_noshare, NULL);
    int32_t order2[8], start2[9];
    kvt_beam_groups g2 = {0, order2, start2};
    kvt_beam_group_in_order(6, s, n, &g2, NULL);
    kvt_beam_groups_load_bytes(beams, 11, bytes1, &g2, true, &inorder, NULL);
    test_result(prefix == 12 && inorder == 16 && prefix_noshare == 24, "beam_group: shared prefix loaded once per group",
                "prefix %lld (want 12), in order %lld (16), per beam %lld (24)", (long long)prefix, (long long)inorder,
                (long long)prefix_noshare);
    // Capacity 4: greedy [4,2] splits a prefix family, balanced [3,3] does not.
    int64_t greedy_b = 0, balanced_b = 0;
    kvt_beam_group_sizes(6, 4, false, s, &n, NULL);
    kvt_beam_group_prefix(beams, 6, 11, s, n, &g, NULL);
    kvt_beam_groups_load_bytes(beams, 11, bytes1, &g, true, &greedy_b, NULL);
    bool greedy_ok = sizes_eq(order, 6, (int32_t[]){0, 2, 4, 1, 3, 5}, 6) && start[1] == 4;
    kvt_beam_group_sizes(6, 4, true, s, &n, NULL);
    kvt_beam_group_prefix(beams, 6, 11, s, n, &g, NULL);
    kvt_beam_groups_load_bytes(beams, 11, bytes1, &g, true, &balanced_b, NULL);
    test_result(greedy_ok && greedy_b == 14 && balanced_b == 12 && start[1] == 3, "beam_group: balanced [3,3] vs greedy [4,2] on a tree",
                "greedy %lld (want 14), balanced %lld (want 12)", (long long)greedy_b, (long long)balanced_b);

    // Uneven tree, capacity 2: a beam ending at an inner node, ties to the lowest beam.
    //   0 ─┬─ 1 ─┬─ 2 (b1)      b0: 0-6     b2: 0-4-5
    //      │     └─ 3 (b3)      b4: 0-4 (inner node)
    //      ├─ 4 (b4) ── 5 (b2)
    //      └─ 6 (b0)
    static const int32_t parent[7] = {-1, 0, 1, 1, 0, 4, 0}, leaf[5] = {6, 2, 5, 3, 4};
    kvt_beam_blocks_from_tree(parent, 7, leaf, 5, ids, 64, beams, NULL);
    kvt_beam_group_sizes(5, 2, false, s, &n, NULL);
    st = kvt_beam_group_prefix(beams, 5, 7, s, n, &g, &err);
    test_result(st == KVT_OK && g.n_groups == 3 && sizes_eq(order, 5, (int32_t[]){0, 1, 2, 4, 3}, 5),
                "beam_group: Algorithm 1 on an uneven tree (max overlap, ties lowest)", "order %d %d %d %d %d", order[0], order[1],
                order[2], order[3], order[4]);

    // Malformed trees and ids.
    static const int32_t cyc[3] = {1, 2, 0};
    st = kvt_beam_blocks_from_tree(cyc, 3, (int32_t[]){0}, 1, ids, 64, beams, &err);
    bool cyc_ok = st == KVT_ERR_INVALID_ARG && strstr(err.msg, "cycle");
    st = kvt_beam_blocks_from_tree(k_parent6, 11, k_leaf6, 6, ids, 10, beams, &err);
    bool cap_ok = st == KVT_ERR_BUDGET;
    kvt_beam_blocks bad = {(int32_t[]){0, 99}, 2};
    st = kvt_beam_group_prefix(&bad, 1, 11, (int32_t[]){1}, 1, &g, &err);
    test_result(cyc_ok && cap_ok && st == KVT_ERR_INVALID_ARG && strstr(err.msg, "99"), "beam_group: cycles, small buffers, bad ids rejected",
                "%s", err.msg);
}

// Groups bounded by the budget on the union of their blocks (prefix), balanced sizes that
// still fit (balanced), and the beam schedule's per-beam capacity.
static void test_budget_groups(void) {
    int32_t ids[64], order[8], start[9];
    kvt_beam_blocks beams[8];
    int64_t bytes1[16], grow0[8] = {0};
    for (int i = 0; i < 16; i++) bytes1[i] = 1;
    kvt_beam_groups g = {0, order, start};
    kvt_err err = {0};
    // Figure 8-like tree: each beam reads 4 blocks, a family of three reads 6 together.
    kvt_beam_blocks_from_tree(k_parent6, 11, k_leaf6, 6, ids, 64, beams, NULL);
    kvt_status st = kvt_beam_plan_groups(KVT_BEAM_SCHED_PREFIX, beams, 6, 11, bytes1, grow0, 6, &g, &err);
    bool prefix_ok = st == KVT_OK && g.n_groups == 2 && sizes_eq(order, 6, (int32_t[]){0, 2, 4, 1, 3, 5}, 6) && start[1] == 3;
    int32_t order_b[8], start_b[9];
    kvt_beam_groups gb = {0, order_b, start_b};
    st = kvt_beam_plan_groups(KVT_BEAM_SCHED_BEAM, beams, 6, 11, bytes1, grow0, 6, &gb, &err);
    test_result(prefix_ok && st == KVT_OK && gb.n_groups == 6 &&
                    kvt_beam_group_bytes(beams, 11, order, 3, bytes1, NULL) == 6,
                "beam_group: prefix groups fill the budget with shared blocks counted once",
                "prefix %d groups (want 2 of 3), beam %d groups (want 6), st %d %s", g.n_groups, gb.n_groups, st, err.msg);
    // Six private beams of 1 block + 1 block of growth, budget 8: prefix [4,2], balanced [3,3].
    int32_t pid[6] = {0, 1, 2, 3, 4, 5};
    int64_t grow1[8];
    for (int b = 0; b < 6; b++) beams[b] = (kvt_beam_blocks){pid + b, 1}, grow1[b] = 1;
    st = kvt_beam_plan_groups(KVT_BEAM_SCHED_PREFIX, beams, 6, 6, bytes1, grow1, 8, &g, &err);
    bool greedy = st == KVT_OK && g.n_groups == 2 && start[1] == 4;
    st = kvt_beam_plan_groups(KVT_BEAM_SCHED_BALANCED, beams, 6, 6, bytes1, grow1, 8, &g, &err);
    test_result(greedy && st == KVT_OK && g.n_groups == 2 && start[1] == 3, "beam_group: balanced [3,3] where the budget packs [4,2]",
                "st %d, %d groups, first %d", st, g.n_groups, start[1]);
    // Beam 0 is large (4 bytes), the others 1, budget 5: prefix packs [2,4]; balanced [3,3] would put
    // 6 bytes in the first group, so balanced takes three groups [2,2,2].
    int64_t sizes6[6] = {4, 1, 1, 1, 1, 1};
    st = kvt_beam_plan_groups(KVT_BEAM_SCHED_PREFIX, beams, 6, 6, sizes6, grow0, 5, &g, &err);
    bool p2 = st == KVT_OK && g.n_groups == 2 && start[1] == 2;
    st = kvt_beam_plan_groups(KVT_BEAM_SCHED_BALANCED, beams, 6, 6, sizes6, grow0, 5, &g, &err);
    test_result(p2 && st == KVT_OK && g.n_groups == 3 && start[1] == 2 && start[2] == 4,
                "beam_group: balanced adds a group while an equal split exceeds the budget", "st %d, %d groups", st, g.n_groups);
    // A beam larger than the budget runs alone (prefix) or is an error naming both sizes (beam).
    st = kvt_beam_plan_groups(KVT_BEAM_SCHED_PREFIX, beams, 6, 6, sizes6, grow0, 3, &g, &err);
    bool alone = st == KVT_OK && start[1] == 1;
    st = kvt_beam_plan_groups(KVT_BEAM_SCHED_BEAM, beams, 6, 6, sizes6, grow0, 3, &g, &err);
    test_result(alone && st == KVT_ERR_BUDGET && strstr(err.msg, "3 bytes"), "beam_group: a beam over the budget",
                "st %d %s", st, err.msg);
}

// Per-step predictions summed over a request equal the model (private blocks,
// no sharing), and the prefix schedules move less once beams share the prompt.
static void test_predict(void) {
    enum { L = 4, KVTL = 8, B = 8, P = 16, G = 64, S = 16, BT = 16, MAXB = (P + G) / BT };
    const int64_t tok = (int64_t)L * KVTL, mem = 6000;
    kvt_dm_params p = {L, KVTL, B, S, P, G, mem};
    kvt_dm_result r;
    kvt_status st = kvt_dm_model_eval(&p, &r, NULL);
    static int32_t ids[B * MAXB], ids_shared[B * MAXB];
    int64_t block_bytes[B * MAXB + 1];
    for (int i = 0; i < B * MAXB + 1; i++) block_bytes[i] = BT * tok;
    int64_t sums[KVT_BEAM_SCHED_COUNT] = {0}, shared_sums[KVT_BEAM_SCHED_COUNT] = {0}, store = 0;
    int32_t groups_last = 0;
    kvt_err err = {0};
    for (int32_t i = 0; i < G / S && !st; i++) {
        const int32_t nb = (P + i * S) / BT; // blocks per beam at the step start
        kvt_beam_blocks beams[B], shared[B];
        for (int32_t b = 0; b < B; b++) {
            for (int32_t k = 0; k < nb; k++) {
                ids[b * MAXB + k] = b * MAXB + k;
                // shared: the prompt block (k = 0) is one block for all beams; beams 2j, 2j+1 share the rest
                ids_shared[b * MAXB + k] = k == 0 ? 0 : (b / 2) * MAXB + k;
            }
            beams[b] = (kvt_beam_blocks){ids + b * MAXB, nb};
            shared[b] = (kvt_beam_blocks){ids_shared + b * MAXB, nb};
        }
        for (int s = 0; s < KVT_BEAM_SCHED_COUNT && !st; s++) {
            kvt_beam_step_in in = {beams, B, B * MAXB, block_bytes, L, tok, S, mem, false};
            kvt_beam_step_bytes out;
            st = kvt_beam_step_predict((kvt_beam_sched)s, &in, &out, &err);
            sums[s] += out.load_bytes;
            if (s == KVT_BEAM_SCHED_BEAM) store += out.store_bytes, groups_last = out.n_groups;
            in.beams = shared;
            if (!st) st = kvt_beam_step_predict((kvt_beam_sched)s, &in, &out, &err);
            shared_sums[s] += out.load_bytes;
        }
    }
    test_result(st == KVT_OK && sums[KVT_BEAM_SCHED_LAYERWISE] == r.token_by_token_bytes &&
                    sums[KVT_BEAM_SCHED_BEAM] + store == r.beam_bytes && groups_last == 4 && r.beam_bytes > 0,
                "beam_group: per-step predictions sum to the model (Eqs. 3, 5)",
                "st %d %s: layerwise %lld vs %lld, beam %lld+%lld vs %lld, %d groups", st, err.msg,
                (long long)sums[KVT_BEAM_SCHED_LAYERWISE], (long long)r.token_by_token_bytes, (long long)sums[KVT_BEAM_SCHED_BEAM],
                (long long)store, (long long)r.beam_bytes, groups_last);
    test_result(shared_sums[KVT_BEAM_SCHED_PREFIX] < shared_sums[KVT_BEAM_SCHED_BEAM] &&
                    shared_sums[KVT_BEAM_SCHED_BALANCED] < shared_sums[KVT_BEAM_SCHED_BEAM] &&
                    shared_sums[KVT_BEAM_SCHED_BEAM] == sums[KVT_BEAM_SCHED_BEAM] &&
                    sums[KVT_BEAM_SCHED_PREFIX] == sums[KVT_BEAM_SCHED_BEAM] &&
                    sums[KVT_BEAM_SCHED_BEAM] < sums[KVT_BEAM_SCHED_LAYERWISE],
                "beam_group: prefix < beam < layerwise with shared prefixes", "prefix %lld, beam %lld (private %lld), layerwise %lld",
                (long long)shared_sums[KVT_BEAM_SCHED_PREFIX], (long long)shared_sums[KVT_BEAM_SCHED_BEAM],
                (long long)sums[KVT_BEAM_SCHED_BEAM], (long long)sums[KVT_BEAM_SCHED_LAYERWISE]);
    kvt_beam_sched sc;
    test_result(kvt_beam_sched_parse("balanced", &sc, NULL) == KVT_OK && sc == KVT_BEAM_SCHED_BALANCED &&
                    kvt_beam_sched_parse("nope", &sc, &err) == KVT_ERR_INVALID_ARG && !strcmp(kvt_beam_sched_name(KVT_BEAM_SCHED_PREFIX), "prefix"),
                "beam_group: schedule names", "%s", err.msg);
}

static int run_cmd(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static double json_num(const char *s, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(s, k);
    return p ? strtod(p + strlen(k), NULL) : NAN;
}

static void test_cli_dm_model(const test_env *env) {
    if (!test_file_exists(env->cli)) {
        test_skip("beam_group: kvtier dm-model", "kvtier binary not built");
        return;
    }
    const int steps[3] = {32, 64, 128};
    const double paper[3] = {2052, 1044, 540};
    char cmd[2048], out[4096];
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s dm-model --shape opt-6.7b --beams 64 --step %d --prompt 128 --gen 1920 --kv-mem 7G --json 2>&1",
                 env->cli, steps[i]);
        int rc = run_cmd(cmd, out, sizeof out);
        char name[96];
        snprintf(name, sizeof name, "beam_group: kvtier dm-model --json step %d matches Figure 7", steps[i]);
        test_result(rc == 0 && near(json_num(out, "token_by_token_gib"), 53012, 0.01) && near(json_num(out, "beam_scheduling_gib"), paper[i], 0.01),
                    name, "exit %d: %.400s", rc, out);
    }
    snprintf(cmd, sizeof cmd, "%s dm-model --shape opt-6.7b --kv-mem 512M 2>&1 >/dev/null", env->cli);
    int rc = run_cmd(cmd, out, sizeof out);
    test_result(rc == 1 && strstr(out, "exceeds the KV budget") && strchr(out, '\n') == out + strlen(out) - 1,
                "beam_group: kvtier dm-model budget below one beam: one error line", "exit %d: %s", rc, out);
    char model[1024];
    if (!test_data(env, "stories260K.gguf", model, sizeof model)) {
        test_skip("beam_group: kvtier dm-model -m", test_data_missing(env, "stories260K.gguf"));
        return;
    }
    snprintf(cmd, sizeof cmd, "%s dm-model -m %s --beams 4 --step 8 --prompt 16 --gen 64 --kv-mem 64K --json 2>&1", env->cli, model);
    rc = run_cmd(cmd, out, sizeof out);
    // stories260K: 5 layers, 4 KV heads of 8 -> F16 K+V 128 B per token and layer
    test_result(rc == 0 && json_num(out, "n_layer") == 5 && json_num(out, "kv_bytes_per_token_layer") == 128,
                "beam_group: kvtier dm-model -m reads the GGUF's shape", "exit %d: %.400s", rc, out);
}

void test_beam_group(const test_env *env) {
    test_figure7();
    test_budget_errors();
    test_sizes();
    test_algorithm1();
    test_budget_groups();
    test_predict();
    test_cli_dm_model(env);
}
