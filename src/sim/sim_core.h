// sim_core.h - the discrete-event core of `kvtier sim`: a virtual clock with an
// event queue, and links shared fairly by the transfers on them.
//
// Time is in seconds of simulated time (double), never wall-clock. The event
// queue is a binary min-heap ordered by (time, sequence number): events at the
// same time come out in the order they were pushed, so a run is deterministic.
//
// A link is one direction of one channel (PCIe host->device, NVMe read, ...):
// a transfer of S bytes issued at t first spends the link's latency (not
// shared), then S bytes at the link's bandwidth shared equally by every
// transfer in its byte phase (processor sharing: with n such transfers each
// gets bw/n). Completion times are recomputed whenever a transfer starts or
// ends: the link keeps a virtual time V (bytes each transfer has received
// since V = 0, growing at bw/n per second), a transfer entering its byte phase
// at V0 ends when V reaches V0 + S, and the earliest such end is one event in
// the queue (stale ones are recognised by a version number and skipped).
#ifndef KVT_SIM_CORE_H
#define KVT_SIM_CORE_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"

typedef struct {
    double t;     // simulated time, s
    uint64_t seq; // push order (tie-break)
    int32_t kind; // caller's event kind
    int32_t aux;  // caller's small payload (a link index, a version)
    int64_t a, b; // caller's payload
} kvt_sim_event;

typedef struct {
    kvt_sim_event *ev; // heap [n] (owned)
    int64_t n, cap;
    uint64_t next_seq;
    double now;        // time of the last event popped
} kvt_sim_queue;

void kvt_sim_queue_init(kvt_sim_queue *q);
void kvt_sim_queue_free(kvt_sim_queue *q);
// Pushes an event at time t (>= q->now). KVT_ERR_NOMEM if the heap cannot grow.
kvt_status kvt_sim_queue_push(kvt_sim_queue *q, double t, int32_t kind, int32_t aux, int64_t a, int64_t b,
                              kvt_err *err);
// Pops the earliest event into *e and advances q->now to its time; false if the queue is empty.
bool kvt_sim_queue_pop(kvt_sim_queue *q, kvt_sim_event *e);
// Time of the earliest event, or INFINITY when empty.
double kvt_sim_queue_peek(const kvt_sim_queue *q);

// One transfer on a link.
typedef struct {
    int64_t id;      // caller's id (returned on completion)
    double bytes;
    double v_end;    // virtual time at which it ends (byte phase)
} kvt_sim_xfer;

typedef struct {
    const char *name;  // for messages ("h2d", "ssd-read"), not owned
    double bw;         // bytes per second (> 0)
    double latency;    // seconds before the byte phase
    // byte phase: min-heap by v_end
    kvt_sim_xfer *act;
    int64_t n_act, cap_act;
    double v;          // virtual time (bytes per active transfer so far)
    double t_v;        // simulated time at which v was last advanced
    uint32_t version;  // bumped whenever the next completion changes
    // totals
    double bytes_total;
    int64_t n_done;
    double busy_s;     // time with at least one transfer in its byte phase
} kvt_sim_link;

void kvt_sim_link_init(kvt_sim_link *l, const char *name, double bw, double latency);
void kvt_sim_link_free(kvt_sim_link *l);
// Moves the link's virtual time to simulated time t (>= its last update).
void kvt_sim_link_advance(kvt_sim_link *l, double t);
// Puts a transfer into its byte phase at time t (call at issue time + latency). Returns the link's new
// version; the caller schedules the next completion at kvt_sim_link_next_time().
kvt_status kvt_sim_link_start(kvt_sim_link *l, double t, int64_t id, double bytes, kvt_err *err);
// Time of the next completion (INFINITY if idle), valid after the last start/finish.
double kvt_sim_link_next_time(const kvt_sim_link *l);
// Removes the transfer that completes at time t (the earliest) and returns its id; -1 if none.
int64_t kvt_sim_link_finish(kvt_sim_link *l, double t);

#endif
