// gpu_kv_disk.h - the device KV's disk thread (T2, gpu_kv.h): one thread that reads and writes whole blocks between
// pinned host slots and kv_tier.h's disk tier, in the order they were submitted, while the host goes on queuing
// kernels. It never calls CUDA (a context is used by one host thread): the device KV orders a job against the streams
// itself, submitting a write only once the events recorded after the slot's last use have passed, and queuing the load
// of a block read from disk (or letting attention read it) only after its read job is done.
//
// Jobs are numbered (tickets 0, 1, ...) and run one at a time in that order; the caller waits for a ticket and takes
// its result once. Buffers are borrowed: a job's host memory must stay untouched by anyone else until it is waited for.
#ifndef KVT_GPU_KV_DISK_H
#define KVT_GPU_KV_DISK_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../kv/kv_tier.h"

typedef struct kvt_disk_worker kvt_disk_worker;

// disk: borrowed, outlives the worker (its reads and writes of distinct slots may run concurrently, kv_tier.h; the
// caller keeps alloc/release on its own thread). delay_us: each job first sleeps this long (tests: a slow disk, so that
// a job waited for too late shows as wrong bytes; 0 normally).
kvt_status kvt_disk_worker_start(kvt_disk_worker **out, kvt_tier_store *disk, int64_t delay_us, kvt_err *err);
// Waits for every job, then ends the thread. NULL: no-op.
void kvt_disk_worker_stop(kvt_disk_worker *w);

// Queues a write of disk.data_bytes from buf into disk slot `slot` (write) or a read of that slot into buf, checked
// against crc (read). what: names the block in errors (copied). Returns the ticket, or -1 when out of memory.
int64_t kvt_disk_worker_submit(kvt_disk_worker *w, bool write, int64_t slot, uint8_t *buf, uint32_t crc, const char *what);
// Waits for job `ticket` (each ticket waited for once); *crc: a write's CRC32C. The job's status, with its message.
kvt_status kvt_disk_worker_wait(kvt_disk_worker *w, int64_t ticket, uint32_t *crc, kvt_err *err);

#endif
