// sched_policy.h - the continuous-batching scheduler's decisions as pure functions (issue 14).
//
// The serving scheduler (scheduler.c) and the simulator's kvtier back end (src/sim/sim_sched.c) both call
// these: which waiting requests to admit, which running request to preempt by swap and which swapped one
// to resume, and how one iteration's token budget is split into decode rows and prompt chunks. They see a
// plain-data view of the requests and move nothing: no context, no KV store, no clock, no I/O, no
// allocation. The caller applies the decisions (forks sequences, demotes blocks, builds the batch).
//
// The view is an array in the scheduler's list order: admitted requests (prefilling or decoding, in
// admission order, swapped ones included) first, then the waiting ones in arrival order. Admission is
// first come, first served, so the admitted requests are a prefix of the arrival order and the
// latest-admitted running request is the last admitted one not swapped out. Walks over the admitted
// requests stop at the first waiting one.
//
// Units: tokens for prompt and budget; bytes for demand, need and the resident limit (any unit works as
// long as demand, resident and block_bytes share it: the simulator counts blocks with block_bytes 1).
#ifndef KVT_SCHED_POLICY_H
#define KVT_SCHED_POLICY_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    KVT_SP_WAITING,  // arrived, not admitted: holds no KV
    KVT_SP_PREFILL,  // admitted, its prompt not yet all computed
    KVT_SP_DECODE,   // prompt done: each live sequence decodes one token per iteration
} kvt_sched_policy_state;

// One request as the decisions see it.
typedef struct {
    int32_t state;        // kvt_sched_policy_state
    bool swapped;         // preempted by swap: its KV went down to disk; it does not run until resumed
    int32_t n;            // sequences it asks for (choices): the slots it takes while waiting or prefilling, >= 1
    int32_t n_live;       // sequences still running (KVT_SP_DECODE): its slots and decode rows
    int64_t n_prompt;     // prompt tokens
    int64_t n_prefilled;  // prompt tokens already in its KV (KVT_SP_PREFILL)
    int64_t demand;       // admitted requests: KV its running sequences hold plus one more block each, in any tier
                          // (the caller may count less: what each iteration reads of it, e.g. a sparse decode step's
                          // selected blocks, kvt_context_decode_bytes)
    int64_t need;         // waiting requests: KV it is counted at when admitted (0: its prompt's blocks)
} kvt_sched_policy_req;

typedef struct {
    int32_t n_parallel;   // sequences running at most, >= 1
    int64_t token_budget; // rows of one iteration: decode rows + prompt chunks
    int64_t resident;     // KV fast + host hold: admission by memory and preemption; < 0: no limit (both off)
    int64_t block_tokens; // tokens per KV block, >= 1
    int64_t block_bytes;  // KV of one block (in the unit of demand and resident)
} kvt_sched_policy_params;

// One entry of an iteration's split: request `req` (index into the view) decodes one token per live
// sequence (prefill false: tokens = n_live rows) or computes `tokens` prompt tokens from n_prefilled
// (prefill true; last: the chunk ends the prompt, so its logits give the first token).
typedef struct {
    int64_t req;
    int64_t tokens;
    bool prefill;
    bool last;
} kvt_sched_policy_run;

// Slots an admitted request holds: n while its prompt runs (its choices will fork from it), else n_live.
int32_t kvt_sched_policy_slots(const kvt_sched_policy_req *r);
// KV a waiting request is counted at when admitted: r->need if > 0, else its prompt's blocks,
// ceil(n_prompt / block_tokens) x block_bytes.
int64_t kvt_sched_policy_need(const kvt_sched_policy_params *p, const kvt_sched_policy_req *r);

// (a) Admission: the waiting requests to admit now, in arrival order, as view indices into admit[] (room for
// n); returns how many. The oldest waiting request goes first and nothing overtakes it: the walk stops at
// the first that does not fit. A request fits if no slot is used yet, or if the slots of the admitted
// (non-swapped) requests plus its n stay within n_parallel and, with a resident limit, the admitted
// demand plus its need stays within it. Nothing is admitted while a swapped request waits to resume.
// An admitted request counts as KVT_SP_PREFILL with demand = need from then on: a caller whose admission of
// admit[k] fails removes that request from the view, marks admit[0..k-1] so, and asks again.
int64_t kvt_sched_policy_admit(const kvt_sched_policy_params *p, const kvt_sched_policy_req *reqs, int64_t n,
                               int64_t *admit);

// Totals over the running requests (admitted, not swapped).
typedef struct {
    int64_t demand;
    int64_t n_running;
} kvt_sched_policy_load;
kvt_sched_policy_load kvt_sched_policy_running(const kvt_sched_policy_req *reqs, int64_t n);

// (c) Preemption by swap, one victim at a time: with a resident limit (resident >= 0), while the running
// requests' demand (load) exceeds it and more than one runs, the latest-admitted running request is preempted.
// Returns its view index, -1 when none is to go. The caller swaps it out, marks it swapped in the view, takes
// its demand off load->demand (as it reads it then: the serving scheduler reads each victim's just before
// moving it) and one off load->n_running, and asks again; if it cannot swap the victim it stops asking.
int64_t kvt_sched_policy_victim(const kvt_sched_policy_params *p, const kvt_sched_policy_req *reqs, int64_t n,
                                const kvt_sched_policy_load *load);
// (c) Resumption: the earliest-admitted swapped requests whose demand fits beside the running ones (load: the
// running totals after preemption; NULL: kvt_sched_policy_running of the view), the first always when nothing
// runs, in admission order, stopping at the first that does not fit; out[] has room for n; returns how many.
// Without a resident limit every swapped request resumes.
int64_t kvt_sched_policy_resume(const kvt_sched_policy_params *p, const kvt_sched_policy_req *reqs, int64_t n,
                                const kvt_sched_policy_load *load, int64_t *out);

// (b) One iteration's split of the token budget: first a decode entry for every running decoding request (one
// row per live sequence, each taking one token of the budget), then prompt chunks of the running prefilling
// requests in admission order, each min(rest of its prompt, rest of the budget), while budget remains.
// Swapped requests do not run. Writes the entries in run order to out[] (room for n); returns how many.
int64_t kvt_sched_policy_split(const kvt_sched_policy_params *p, const kvt_sched_policy_req *reqs, int64_t n,
                               kvt_sched_policy_run *out);

// (d) The plan the scheduler publishes to the paged store before an iteration (kvt_kv_paged_set_plan, which ranks
// victims and prefetches by it): the sequences of the next `iters` iterations in run order, this iteration's runs,
// then from the second iteration on the swapped sequences, which may resume from then. plan[0 .. n_runs) holds
// the runs' sequences and plan[n_runs .. n_runs + n_swapped) the swapped ones on entry; the plan is written over
// them, in place (room: (n_runs + n_swapped) x iters entries). Returns its length (0 if iters < 1 or n_runs < 1:
// nothing runs, no plan).
int64_t kvt_sched_policy_plan(int32_t *plan, int64_t n_runs, int64_t n_swapped, int32_t iters);

#endif
