// beam_group.c - beam grouping (Algorithm 1, balanced sizes) and the bytes each
// schedule moves per step; see beam_group.h.
#include "beam_group.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const k_sched_names[KVT_BEAM_SCHED_COUNT] = {"layerwise", "beam", "prefix", "balanced"};

const char *kvt_beam_sched_name(kvt_beam_sched s) {
    return (unsigned)s < KVT_BEAM_SCHED_COUNT ? k_sched_names[s] : "?";
}

kvt_status kvt_beam_sched_parse(const char *name, kvt_beam_sched *out, kvt_err *err) {
    for (int i = 0; i < KVT_BEAM_SCHED_COUNT; i++) {
        if (name && strcasecmp(name, k_sched_names[i]) == 0) {
            *out = (kvt_beam_sched)i;
            return KVT_OK;
        }
    }
    return kvt_errorf(err, KVT_ERR_INVALID_ARG, "unknown schedule '%s' (layerwise, beam, prefix, balanced)", name ? name : "");
}

kvt_status kvt_beam_capacity(int64_t budget, int64_t beam_bytes, int32_t n_beam, int32_t *out, kvt_err *err) {
    if (n_beam < 1 || beam_bytes < 1 || budget < 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam capacity: need n_beam >= 1 (%d), beam bytes >= 1 (%lld), budget >= 0 (%lld)",
                          n_beam, (long long)beam_bytes, (long long)budget);
    }
    if (budget < beam_bytes) {
        return kvt_errorf(err, KVT_ERR_BUDGET,
                          "fast-tier KV budget of %lld bytes is smaller than one beam's KV (%lld bytes at the end of the step): "
                          "no group can run; raise the budget or shorten the step",
                          (long long)budget, (long long)beam_bytes);
    }
    int64_t c = budget / beam_bytes;
    *out = c < n_beam ? (int32_t)c : n_beam;
    return KVT_OK;
}

kvt_status kvt_beam_group_sizes(int32_t n_beam, int32_t capacity, bool balanced, int32_t *sizes, int32_t *n_groups,
                                kvt_err *err) {
    if (n_beam < 1 || capacity < 1) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam groups: need n_beam >= 1 (%d) and capacity >= 1 (%d)", n_beam, capacity);
    }
    if (capacity > n_beam) capacity = n_beam;
    const int32_t g = (n_beam + capacity - 1) / capacity;
    for (int32_t i = 0; i < g; i++) {
        if (balanced) {
            const int32_t base = n_beam / g, extra = n_beam % g; // the last `extra` groups get one more
            sizes[i] = base + (i >= g - extra);
        } else {
            sizes[i] = i < g - 1 ? capacity : n_beam - (g - 1) * capacity;
        }
    }
    *n_groups = g;
    return KVT_OK;
}

static kvt_status check_sizes(int32_t n_beam, const int32_t *sizes, int32_t n_groups, kvt_err *err) {
    if (n_beam < 1 || n_groups < 1 || n_groups > n_beam) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam groups: %d groups for %d beams", n_groups, n_beam);
    }
    int64_t sum = 0;
    for (int32_t g = 0; g < n_groups; g++) {
        if (sizes[g] < 1) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam groups: group %d has size %d", g, sizes[g]);
        sum += sizes[g];
    }
    if (sum != n_beam) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam groups: sizes sum to %lld, not %d beams", (long long)sum, n_beam);
    return KVT_OK;
}

static void set_starts(const int32_t *sizes, int32_t n_groups, kvt_beam_groups *out) {
    out->n_groups = n_groups;
    out->start[0] = 0;
    for (int32_t g = 0; g < n_groups; g++) out->start[g + 1] = out->start[g] + sizes[g];
}

kvt_status kvt_beam_group_in_order(int32_t n_beam, const int32_t *sizes, int32_t n_groups, kvt_beam_groups *out,
                                   kvt_err *err) {
    kvt_status st = check_sizes(n_beam, sizes, n_groups, err);
    if (st) return st;
    set_starts(sizes, n_groups, out);
    for (int32_t b = 0; b < n_beam; b++) out->order[b] = b;
    return KVT_OK;
}

static kvt_status check_blocks(const kvt_beam_blocks *beams, int32_t n_beam, int32_t n_ids, kvt_err *err) {
    if (n_ids < 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam blocks: n_ids %d < 0", n_ids);
    for (int32_t b = 0; b < n_beam; b++) {
        if (beams[b].n < 0 || (beams[b].n > 0 && !beams[b].ids)) {
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam %d: bad block list (%d blocks)", b, beams[b].n);
        }
        for (int32_t k = 0; k < beams[b].n; k++) {
            if (beams[b].ids[k] < 0 || beams[b].ids[k] >= n_ids) {
                return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam %d: block id %d outside 0..%d", b, beams[b].ids[k], n_ids - 1);
            }
        }
    }
    return KVT_OK;
}

kvt_status kvt_beam_group_prefix(const kvt_beam_blocks *beams, int32_t n_beam, int32_t n_ids, const int32_t *sizes,
                                 int32_t n_groups, kvt_beam_groups *out, kvt_err *err) {
    kvt_status st = check_sizes(n_beam, sizes, n_groups, err);
    if (st || (st = check_blocks(beams, n_beam, n_ids, err))) return st;
    unsigned char *in_union = calloc((size_t)n_ids + 1, 1); // block in U, the union of the current group's blocks
    unsigned char *used = calloc((size_t)n_beam, 1);
    if (!in_union || !used) {
        free(in_union);
        free(used);
        return kvt_errorf(err, KVT_ERR_NOMEM, "beam groups: out of memory for %d blocks", n_ids);
    }
    set_starts(sizes, n_groups, out);
    int32_t pos = 0;
    for (int32_t g = 0; g < n_groups; g++) {
        for (int32_t k = 0; k < sizes[g]; k++) {
            int32_t best = -1, best_overlap = -1;
            for (int32_t b = 0; b < n_beam; b++) {
                if (used[b]) continue;
                int32_t overlap = 0;
                for (int32_t j = 0; j < beams[b].n; j++) overlap += in_union[beams[b].ids[j]];
                if (overlap > best_overlap) best = b, best_overlap = overlap;
            }
            used[best] = 1;
            out->order[pos++] = best;
            for (int32_t j = 0; j < beams[best].n; j++) in_union[beams[best].ids[j]] = 1;
        }
        // U starts empty for the next group
        for (int32_t i = out->start[g]; i < out->start[g + 1]; i++) {
            const kvt_beam_blocks *bb = &beams[out->order[i]];
            for (int32_t j = 0; j < bb->n; j++) in_union[bb->ids[j]] = 0;
        }
    }
    free(in_union);
    free(used);
    return KVT_OK;
}

// Bytes of the beams order[a..b): their blocks' union plus each one's growth. in_union is
// all-zero on entry and on return.
static int64_t group_bytes(const kvt_beam_blocks *beams, const int32_t *order, int32_t a, int32_t b,
                           const int64_t *block_bytes, const int64_t *grow, unsigned char *in_union) {
    int64_t total = 0;
    for (int32_t i = a; i < b; i++) {
        const kvt_beam_blocks *bb = &beams[order[i]];
        total += grow ? grow[order[i]] : 0;
        for (int32_t j = 0; j < bb->n; j++) {
            if (!in_union[bb->ids[j]]) total += block_bytes[bb->ids[j]];
            in_union[bb->ids[j]] = 1;
        }
    }
    for (int32_t i = a; i < b; i++) {
        const kvt_beam_blocks *bb = &beams[order[i]];
        for (int32_t j = 0; j < bb->n; j++) in_union[bb->ids[j]] = 0;
    }
    return total;
}

int64_t kvt_beam_group_bytes(const kvt_beam_blocks *beams, int32_t n_ids, const int32_t *members, int32_t n,
                             const int64_t *block_bytes, const int64_t *grow) {
    unsigned char *in_union = calloc((size_t)n_ids + 1, 1);
    if (!in_union) return -1;
    const int64_t bytes = group_bytes(beams, members, 0, n, block_bytes, grow, in_union);
    free(in_union);
    return bytes;
}

static kvt_status check_sizes_grow(const int64_t *block_bytes, int32_t n_ids, const int64_t *grow, int32_t n_beam,
                                   kvt_err *err) {
    for (int32_t i = 0; i < n_ids; i++) {
        if (block_bytes[i] < 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam groups: block %d has %lld bytes", i, (long long)block_bytes[i]);
    }
    for (int32_t b = 0; b < n_beam; b++) {
        if (grow[b] < 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam groups: beam %d grows by %lld bytes", b, (long long)grow[b]);
    }
    return KVT_OK;
}

kvt_status kvt_beam_group_prefix_budget(const kvt_beam_blocks *beams, int32_t n_beam, int32_t n_ids,
                                        const int64_t *block_bytes, const int64_t *grow, int64_t budget,
                                        kvt_beam_groups *out, kvt_err *err) {
    if (n_beam < 1 || budget < 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam groups: need n_beam >= 1 (%d) and budget >= 0 (%lld)", n_beam, (long long)budget);
    }
    kvt_status st = check_blocks(beams, n_beam, n_ids, err);
    if (st || (st = check_sizes_grow(block_bytes, n_ids, grow, n_beam, err))) return st;
    unsigned char *in_union = calloc((size_t)n_ids + 1, 1);
    unsigned char *used = calloc((size_t)n_beam, 1);
    if (!in_union || !used) {
        free(in_union);
        free(used);
        return kvt_errorf(err, KVT_ERR_NOMEM, "beam groups: out of memory for %d blocks", n_ids);
    }
    int32_t pos = 0, g = 0;
    out->start[0] = 0;
    while (pos < n_beam) {
        const int32_t first = pos;
        int64_t bytes = 0;
        for (;;) {
            int32_t best = -1, best_overlap = -1;
            int64_t best_add = 0;
            for (int32_t b = 0; b < n_beam; b++) {
                if (used[b]) continue;
                int32_t overlap = 0;
                int64_t add = grow[b];
                for (int32_t j = 0; j < beams[b].n; j++) {
                    overlap += in_union[beams[b].ids[j]];
                    if (!in_union[beams[b].ids[j]]) add += block_bytes[beams[b].ids[j]];
                }
                if (pos == first) { // a group starts with the lowest-numbered unassigned beam
                    best = b, best_add = add;
                    break;
                }
                if (overlap > best_overlap) best = b, best_overlap = overlap, best_add = add;
            }
            if (best < 0 || (pos > first && bytes + best_add > budget)) break;
            used[best] = 1;
            out->order[pos++] = best;
            bytes += best_add;
            for (int32_t j = 0; j < beams[best].n; j++) in_union[beams[best].ids[j]] = 1;
        }
        for (int32_t i = first; i < pos; i++) {
            const kvt_beam_blocks *bb = &beams[out->order[i]];
            for (int32_t j = 0; j < bb->n; j++) in_union[bb->ids[j]] = 0;
        }
        out->start[++g] = pos;
    }
    out->n_groups = g;
    free(in_union);
    free(used);
    return KVT_OK;
}

kvt_status kvt_beam_plan_groups(kvt_beam_sched s, const kvt_beam_blocks *beams, int32_t n_beam, int32_t n_ids,
                                const int64_t *block_bytes, const int64_t *grow, int64_t budget,
                                kvt_beam_groups *out, kvt_err *err) {
    if ((unsigned)s >= KVT_BEAM_SCHED_COUNT || n_beam < 1) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam groups: bad schedule %d or %d beams", (int)s, n_beam);
    }
    kvt_status st = check_blocks(beams, n_beam, n_ids, err);
    if (st || (st = check_sizes_grow(block_bytes, n_ids, grow, n_beam, err))) return st;
    int32_t *sizes = calloc((size_t)n_beam, sizeof(int32_t));
    unsigned char *in_union = calloc((size_t)n_ids + 1, 1);
    if (!sizes || !in_union) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "beam groups: out of memory for %d beams", n_beam);
        goto done;
    }
    if (s == KVT_BEAM_SCHED_LAYERWISE) { // one group: every beam advances together
        sizes[0] = n_beam;
        st = kvt_beam_group_in_order(n_beam, sizes, 1, out, err);
    } else if (s == KVT_BEAM_SCHED_BEAM) {
        int64_t most = 0;
        for (int32_t b = 0; b < n_beam; b++) {
            int64_t bytes = grow[b];
            for (int32_t j = 0; j < beams[b].n; j++) bytes += block_bytes[beams[b].ids[j]];
            most = bytes > most ? bytes : most;
        }
        int32_t cap, ng;
        if (!(st = kvt_beam_capacity(budget, most > 0 ? most : 1, n_beam, &cap, err)) &&
            !(st = kvt_beam_group_sizes(n_beam, cap, false, sizes, &ng, err))) {
            st = kvt_beam_group_in_order(n_beam, sizes, ng, out, err);
        }
    } else {
        st = kvt_beam_group_prefix_budget(beams, n_beam, n_ids, block_bytes, grow, budget, out, err);
        for (int32_t ng = out->n_groups; !st && s == KVT_BEAM_SCHED_BALANCED && ng <= n_beam; ng++) {
            for (int32_t i = 0; i < ng; i++) sizes[i] = n_beam / ng + (i >= ng - n_beam % ng); // larger ones last
            if ((st = kvt_beam_group_prefix(beams, n_beam, n_ids, sizes, ng, out, err))) break;
            bool fits = true;
            for (int32_t gi = 0; gi < ng && fits; gi++) {
                const int32_t a = out->start[gi], b = out->start[gi + 1];
                fits = b - a == 1 || group_bytes(beams, out->order, a, b, block_bytes, grow, in_union) <= budget;
            }
            if (fits) break;
        }
    }
done:
    free(sizes);
    free(in_union);
    return st;
}

kvt_status kvt_beam_blocks_from_tree(const int32_t *parent, int32_t n_nodes, const int32_t *leaf, int32_t n_beam,
                                     int32_t *ids_buf, int64_t ids_cap, kvt_beam_blocks *beams, kvt_err *err) {
    int64_t used = 0;
    for (int32_t b = 0; b < n_beam; b++) {
        if (leaf[b] < 0 || leaf[b] >= n_nodes) {
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "prefix tree: beam %d's leaf %d outside 0..%d", b, leaf[b], n_nodes - 1);
        }
        int32_t depth = 0;
        for (int32_t v = leaf[b]; v != -1; v = parent[v]) {
            if (v < -1 || v >= n_nodes) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "prefix tree: parent index %d out of range", v);
            if (++depth > n_nodes) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "prefix tree: cycle above node %d", leaf[b]);
        }
        if (used + depth > ids_cap) {
            return kvt_errorf(err, KVT_ERR_BUDGET, "prefix tree: id buffer of %lld entries too small", (long long)ids_cap);
        }
        int32_t *path = ids_buf + used, k = depth;
        for (int32_t v = leaf[b]; v != -1; v = parent[v]) path[--k] = v; // root first
        beams[b].ids = path;
        beams[b].n = depth;
        used += depth;
    }
    return KVT_OK;
}

kvt_status kvt_beam_groups_load_bytes(const kvt_beam_blocks *beams, int32_t n_ids, const int64_t *block_bytes,
                                      const kvt_beam_groups *g, bool share, int64_t *out, kvt_err *err) {
    *out = 0;
    const int32_t n_beam = g->start[g->n_groups];
    kvt_status st = check_blocks(beams, n_beam, n_ids, err);
    if (st) return st;
    unsigned char *seen = calloc((size_t)n_ids + 1, 1);
    if (!seen) return kvt_errorf(err, KVT_ERR_NOMEM, "beam groups: out of memory for %d blocks", n_ids);
    int64_t total = 0;
    for (int32_t gi = 0; gi < g->n_groups && !st; gi++) {
        for (int32_t i = g->start[gi]; i < g->start[gi + 1] && !st; i++) {
            const kvt_beam_blocks *bb = &beams[g->order[i]];
            for (int32_t j = 0; j < bb->n; j++) {
                const int32_t id = bb->ids[j];
                if (share && seen[id]) continue;
                seen[id] = 1;
                if (block_bytes[id] < 0 || __builtin_add_overflow(total, block_bytes[id], &total)) {
                    st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam groups: block %d: bad size or total beyond int64", id);
                    break;
                }
            }
        }
        for (int32_t i = g->start[gi]; i < g->start[gi + 1]; i++) { // each group loads its own copy
            const kvt_beam_blocks *bb = &beams[g->order[i]];
            for (int32_t j = 0; j < bb->n; j++) seen[bb->ids[j]] = 0;
        }
    }
    free(seen);
    if (!st) *out = total;
    return st;
}

// Bytes of all beams' blocks: shared blocks once (share) or once per reader.
static int64_t all_blocks_bytes(const kvt_beam_step_in *in, bool share, unsigned char *seen) {
    int64_t total = 0;
    for (int32_t b = 0; b < in->n_beam; b++) {
        for (int32_t j = 0; j < in->beams[b].n; j++) {
            const int32_t id = in->beams[b].ids[j];
            if (share && seen[id]) continue;
            seen[id] = 1;
            if (__builtin_add_overflow(total, in->block_bytes[id], &total)) return -1;
        }
    }
    return total;
}

// Eqs. 1-2 summed over the step's tokens, on the total KV of all layers:
// layers resident = floor(mem / (kv / L)) = floor(mem * L / kv).
static int64_t layerwise_step(const kvt_beam_step_in *in, int64_t kv0) {
    const int64_t L = in->n_layer, grow = (int64_t)in->n_beam * in->token_bytes;
    int64_t total = 0, memL;
    if (__builtin_mul_overflow(in->budget, L, &memL)) return 0; // a budget that large holds everything
    for (int32_t t = 0; t < in->step; t++) {
        const int64_t kv = kv0 + t * grow;
        if (kv <= 0) continue;
        const int64_t fit = memL / kv;
        if (fit >= L) continue;
        int64_t moved;
        if (__builtin_mul_overflow(L - fit, kv / L, &moved) || __builtin_add_overflow(total, moved, &total)) return -1;
    }
    return total;
}

kvt_status kvt_beam_step_predict(kvt_beam_sched s, const kvt_beam_step_in *in, kvt_beam_step_bytes *out, kvt_err *err) {
    memset(out, 0, sizeof *out);
    out->n_groups = 1;
    if ((unsigned)s >= KVT_BEAM_SCHED_COUNT) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam step: bad schedule %d", (int)s);
    if (in->n_beam < 1 || in->n_layer < 1 || in->step < 1 || in->token_bytes < 0 || in->budget < 0 || !in->block_bytes) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam step: need beams, layers and step >= 1 and sizes >= 0");
    }
    kvt_status st = check_blocks(in->beams, in->n_beam, in->n_ids, err);
    if (st) return st;
    const bool share = in->share || s == KVT_BEAM_SCHED_PREFIX || s == KVT_BEAM_SCHED_BALANCED;
    const int64_t grow = (int64_t)in->step * in->token_bytes; // one beam's new KV this step
    unsigned char *seen = calloc((size_t)in->n_ids + 1, 1);
    int32_t *scratch = malloc(sizeof(int32_t) * (3 * (size_t)in->n_beam + 1));
    if (!seen || !scratch) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "beam step: out of memory");
        goto done;
    }
    // the total at the end of the step
    const int64_t kv0 = all_blocks_bytes(in, share, seen), end_total = kv0 + (int64_t)in->n_beam * grow;
    if (kv0 < 0) {
        st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam step: KV bytes beyond int64");
        goto done;
    }
    if (end_total <= in->budget) goto done; // all resident: nothing moves
    out->store_bytes = (int64_t)in->n_beam * grow;
    if (s == KVT_BEAM_SCHED_LAYERWISE) {
        out->load_bytes = layerwise_step(in, kv0);
        if (out->load_bytes < 0) st = kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam step: layerwise bytes beyond int64");
        goto done;
    }
    int32_t *order = scratch, *start = scratch + in->n_beam;
    int64_t *grow_b = malloc(sizeof(int64_t) * (size_t)in->n_beam);
    if (!grow_b) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "beam step: out of memory");
        goto done;
    }
    for (int32_t b = 0; b < in->n_beam; b++) grow_b[b] = grow;
    kvt_beam_groups g = {0, order, start};
    st = kvt_beam_plan_groups(s, in->beams, in->n_beam, in->n_ids, in->block_bytes, grow_b, in->budget, &g, err);
    free(grow_b);
    if (!st) st = kvt_beam_groups_load_bytes(in->beams, in->n_ids, in->block_bytes, &g, share, &out->load_bytes, err);
    out->n_groups = g.n_groups;
done:
    free(seen);
    free(scratch);
    if (st) memset(out, 0, sizeof *out);
    return st;
}
