// beam_group.h - grouping the beams of one step of step-wise beam search into
// groups whose KV fits the fast tier (locality-aware-beam-scheduling.txt §4).
//
// Pure functions: no KV store, no allocation visible to the caller beyond the
// scratch they free themselves. A beam is described by the ids of the KV
// blocks it reads, oldest first; beams that share a prefix list the same ids
// for it. Block ids are dense: 0 <= id < n_ids. Sizes are bytes, lengths tokens.
//
// Schedules (the beam driver runs them; all give the same beams):
//   layerwise  every beam advances token by token; KV that does not fit is
//              offloaded per layer and reloaded for every token (Eqs. 1-3)
//   beam       groups of `capacity` beams in beam order run the whole step (Eqs. 4-5)
//   prefix     groups chosen by Algorithm 1 (greedy shared prefix), each filled until
//              its KV, shared blocks counted once, reaches the budget; a block shared
//              inside a group is loaded once
//   balanced   the same number of groups as `prefix`, sizes as equal as possible
//              ([5,5,6] not [7,7,2]), members by Algorithm 1; the headroom left
//              by a smaller group is used to prefetch the next one
#ifndef KVT_BEAM_GROUP_H
#define KVT_BEAM_GROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"

typedef enum { KVT_BEAM_SCHED_LAYERWISE, KVT_BEAM_SCHED_BEAM, KVT_BEAM_SCHED_PREFIX, KVT_BEAM_SCHED_BALANCED, KVT_BEAM_SCHED_COUNT } kvt_beam_sched;

// "layerwise", "beam", "prefix", "balanced".
const char *kvt_beam_sched_name(kvt_beam_sched s);
// Schedule by name; KVT_ERR_INVALID_ARG for an unknown one.
kvt_status kvt_beam_sched_parse(const char *name, kvt_beam_sched *out, kvt_err *err);

// The KV blocks one beam reads, oldest first.
typedef struct {
    const int32_t *ids;
    int32_t n;
} kvt_beam_blocks;

// A grouping of n_beam beams. The caller provides the arrays:
// order[n_beam] (beams in execution order) and start[n_beam + 1];
// group g is order[start[g] .. start[g+1]), start[0] = 0, start[n_groups] = n_beam.
typedef struct {
    int32_t n_groups;
    int32_t *order;
    int32_t *start;
} kvt_beam_groups;

// Beams per group (Algorithm 1, line 9): min(n_beam, floor(budget / beam_bytes)),
// where beam_bytes is one beam's KV at the end of the step (what it holds while
// its group runs) and budget the fast-tier bytes left for KV in this step.
// KVT_ERR_BUDGET (with both sizes in the message) when budget < beam_bytes.
kvt_status kvt_beam_capacity(int64_t budget, int64_t beam_bytes, int32_t n_beam, int32_t *out, kvt_err *err);

// Group sizes for n_beam beams and `capacity` beams per group into sizes[]
// (room for n_beam entries); *n_groups = ceil(n_beam / capacity).
// Greedy: [capacity, ..., capacity, rest]. Balanced: the same number of groups,
// sizes differing by at most one, the larger ones last (16 beams, capacity 7: [5, 5, 6]).
kvt_status kvt_beam_group_sizes(int32_t n_beam, int32_t capacity, bool balanced, int32_t *sizes, int32_t *n_groups,
                                kvt_err *err);

// Groups of the given sizes filled with beams 0, 1, 2, ... in order (the `beam` schedule).
kvt_status kvt_beam_group_in_order(int32_t n_beam, const int32_t *sizes, int32_t n_groups, kvt_beam_groups *out,
                                   kvt_err *err);

// Algorithm 1: greedy shared-prefix grouping. Group g receives sizes[g] beams;
// it starts with the lowest-numbered unassigned beam and repeatedly adds the
// unassigned beam with the most blocks in the union of the group's blocks
// (ties: lowest beam number). sizes must sum to n_beam.
kvt_status kvt_beam_group_prefix(const kvt_beam_blocks *beams, int32_t n_beam, int32_t n_ids, const int32_t *sizes,
                                 int32_t n_groups, kvt_beam_groups *out, kvt_err *err);

// Algorithm 1 bounded by the budget, as the paper states it ("add beams that maximize
// overlap with the group's current prefix until the memory budget is reached"): a group
// starts with the lowest-numbered unassigned beam and takes the unassigned beam with the
// most blocks in the group's union while the group's bytes stay within `budget`; a group's
// bytes are the union of its blocks (each shared block once) plus grow[b] for each member
// (the blocks beam b writes during the step). A group always holds at least one beam.
// out->order and out->start need room for n_beam and n_beam + 1 entries.
kvt_status kvt_beam_group_prefix_budget(const kvt_beam_blocks *beams, int32_t n_beam, int32_t n_ids,
                                        const int64_t *block_bytes, const int64_t *grow, int64_t budget,
                                        kvt_beam_groups *out, kvt_err *err);

// Bytes of the n beams members[0..n): the union of their blocks (each once) plus grow[b]
// for each member (grow may be NULL: no growth). -1 when out of memory.
int64_t kvt_beam_group_bytes(const kvt_beam_blocks *beams, int32_t n_ids, const int32_t *members, int32_t n,
                             const int64_t *block_bytes, const int64_t *grow);

// The groups of schedule s (beam, prefix or balanced) for one step under `budget`:
//   beam      kvt_beam_capacity on the largest beam at the end of the step (each beam in full,
//             the paper's Eq. 4), groups in beam order;
//   prefix    kvt_beam_group_prefix_budget (shared blocks counted once);
//   balanced  the number of groups prefix needs, sizes as equal as possible, members by
//             Algorithm 1; one more group while a balanced group would exceed the budget.
// grow[b] as above; beam schedule's per-beam size is its blocks' bytes + grow[b].
// KVT_ERR_BUDGET when one beam alone exceeds the budget (beam schedule), else as above.
kvt_status kvt_beam_plan_groups(kvt_beam_sched s, const kvt_beam_blocks *beams, int32_t n_beam, int32_t n_ids,
                                const int64_t *block_bytes, const int64_t *grow, int64_t budget,
                                kvt_beam_groups *out, kvt_err *err);

// Block lists from a prefix tree given by parent pointers: node i's parent is
// parent[i] (-1 for a root); every node is one block and its id is its index.
// Beam b reads the path root .. leaf[b] (root first); the ids are written to
// ids_buf (ids_cap entries; the sum of the path lengths are needed) and beams[b]
// points into it. KVT_ERR_INVALID_ARG on a cycle or an index out of range,
// KVT_ERR_BUDGET when ids_cap is too small.
kvt_status kvt_beam_blocks_from_tree(const int32_t *parent, int32_t n_nodes, const int32_t *leaf, int32_t n_beam,
                                     int32_t *ids_buf, int64_t ids_cap, kvt_beam_blocks *beams, kvt_err *err);

// Bytes loaded into the fast tier to run the groups: per group, the blocks its
// beams read, each shared block once per group when `share` (a refcounted store;
// the prefix schedules), once per beam reading it otherwise (the paper's Eq. 4,
// where each beam holds its own copy). block_bytes[id] is each block's size.
// KVT_ERR_INVALID_ARG on an id out of range or a total beyond int64.
kvt_status kvt_beam_groups_load_bytes(const kvt_beam_blocks *beams, int32_t n_ids, const int64_t *block_bytes,
                                      const kvt_beam_groups *g, bool share, int64_t *out, kvt_err *err);

// One step's situation, for the predicted bytes of a schedule.
typedef struct {
    const kvt_beam_blocks *beams; // [n_beam] blocks each beam reads at the step start
    int32_t n_beam;
    int32_t n_ids;
    const int64_t *block_bytes;   // [n_ids] bytes of each block (all layers)
    int32_t n_layer;              // layers (layer-wise offload unit)
    int64_t token_bytes;          // KV bytes one beam adds per token (all layers)
    int32_t step;                 // tokens each beam generates in this step
    int64_t budget;               // fast-tier bytes for KV in this step
    bool share;                   // layerwise/beam: a block shared by beams is stored and moved once
} kvt_beam_step_in;

// What one step of a schedule moves, predicted.
typedef struct {
    int64_t load_bytes;  // slow -> fast (the figure the paper plots)
    int64_t store_bytes; // fast -> slow: the step's new KV written back when the step offloads
    int32_t n_groups;    // groups run (1 for layerwise; 1 when everything fits)
} kvt_beam_step_bytes;

// Predicted bytes of one step under schedule s. Nothing moves when the beams'
// KV at the end of the step fits the budget (it stays resident). Otherwise:
// layerwise: sum over the step's tokens of Eq. 2, the one-layer KV being
// (blocks at the start + t new tokens per beam) / n_layer; beam/prefix/balanced:
// kvt_beam_groups_load_bytes of the schedule's groups, group capacity from the
// largest beam at the end of the step (kvt_beam_capacity: KVT_ERR_BUDGET when
// one beam does not fit). store_bytes = n_beam * step * token_bytes when KV moves.
// With share = false and private blocks, load+store of `beam` is the paper's
// DM_step (Eq. 4, Figure 7 convention) and layerwise's load is its Eqs. 2-3.
kvt_status kvt_beam_step_predict(kvt_beam_sched s, const kvt_beam_step_in *in, kvt_beam_step_bytes *out, kvt_err *err);

#endif
