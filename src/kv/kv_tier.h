// kv_tier.h - the storage of one memory tier of the paged KV store: a slot
// allocator with a hard byte budget over host memory (T0 fast arena, T1 host)
// or over a file opened with O_DIRECT (T2 disk, one CRC32C per block).
//
// A slot holds one KV block. Memory slots are carved from chunks of about
// 8 MiB (never more slots than the budget holds), allocated on first use and
// reused after release, so the bytes in use (n_used * slot_bytes) never exceed
// the budget. Not thread-safe: the store serialises alloc/release/ptr; disk
// reads and writes of distinct slots may run concurrently.
#ifndef KVT_KV_TIER_H
#define KVT_KV_TIER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "kv.h"
#include "kv_uring.h"

typedef struct {
    kvt_tier id;
    bool present;
    int64_t budget;      // bytes; -1 unlimited
    int64_t slot_bytes;  // bytes per slot (disk: block bytes rounded up to 4096 for O_DIRECT)
    int64_t data_bytes;  // bytes of block data in a slot
    int64_t max_slots;   // budget / slot_bytes (INT64_MAX when unlimited)
    int64_t n_used, peak_used;
    int64_t *free_ids;   // [n_free] slots released for reuse
    int64_t n_free, cap_free;
    int64_t n_made;      // slots created so far (slot ids are [0, n_made))
    uint8_t **mem;       // [cap_mem] slot -> its [slot_bytes] bytes inside a chunk, memory tiers
    int64_t cap_mem;
    // [n_chunk] arenas of chunk_slots slots each (owned), from kvt_kv_arena_alloc (huge-page aligned when
    // large enough, so attention streams them with few TLB misses)
    uint8_t **chunk;
    size_t n_chunk, cap_chunk;
    int64_t chunk_slots;
    int fd;              // disk tier file, -1 otherwise
    char *path;          // disk tier file path (owned); unlinked at creation unless keep
    bool direct;         // opened with O_DIRECT
    bool keep;           // leave the file in its directory (else it is unlinked as soon as it is open)
    _Atomic int64_t n_reads;   // disk reads so far
    int64_t fail_read_at;      // tests: the n-th disk read (1-based) fails with EIO; 0 never
    _Atomic int64_t n_writes;  // disk writes so far
    int64_t fail_write_at;     // tests: the n-th disk write (1-based) fails with EIO; 0 never
    kvt_uring *ring;           // disk I/O through io_uring, or NULL: pread/pwrite on the calling thread
    const char *io_why;        // why ring is NULL (static string), "" otherwise
} kvt_tier_store;

// Memory tier of `budget` bytes (-1: unlimited) with slots of slot_bytes.
kvt_status kvt_tier_mem_init(kvt_tier_store *t, kvt_tier id, int64_t budget, int64_t slot_bytes, kvt_err *err);
// Disk tier: a new file in dir (O_DIRECT where the file system allows it) of at most budget bytes (-1: unlimited).
// Unless keep, the file is unlinked right after it is created: only the descriptor holds it, so no file is
// left behind however the process ends (signals, SIGKILL, crashes included).
// Disk I/O goes through io_uring when available (kv_uring.h) unless no_uring.
kvt_status kvt_tier_disk_init(kvt_tier_store *t, const char *dir, int64_t budget, int64_t data_bytes, bool keep,
                              bool no_uring, kvt_err *err);
// "io_uring" or "threads" (pread/pwrite on the copy engine's threads).
const char *kvt_tier_disk_engine(const kvt_tier_store *t);
void kvt_tier_free(kvt_tier_store *t);

// A free slot, or -1 when the budget is used up (or memory is exhausted).
int64_t kvt_tier_alloc(kvt_tier_store *t);
void kvt_tier_release(kvt_tier_store *t, int64_t slot);
// Memory of a slot of a memory tier: [slot_bytes] bytes.
uint8_t *kvt_tier_ptr(const kvt_tier_store *t, int64_t slot);

// Warming ahead of use (kvt_kv_paged_warm). A memory tier's arena grows one chunk at a time as slots are first handed
// out, and a new chunk's pages are faulted in by the first writes of its slots, on the path of whatever request needs
// them. These let a caller make the next chunk and fault it in first, outside the store's lock.
// Bytes of memory already faulted in and not in use: slots released for reuse and the made chunks' slots not yet
// handed out. 0 for a disk tier.
int64_t kvt_tier_warm_bytes(const kvt_tier_store *t);
// Bytes of the chunk the tier would make next: 0 when its budget holds no more (or it is a disk tier).
int64_t kvt_tier_chunk_next_bytes(const kvt_tier_store *t);
// Adopts a chunk of `bytes` (from kvt_kv_arena_alloc, owned by the tier from here) as the next chunk. false when
// `bytes` is no longer kvt_tier_chunk_next_bytes (another chunk was made meanwhile) or its list cannot grow: the
// caller keeps the buffer then.
bool kvt_tier_chunk_add(kvt_tier_store *t, uint8_t *chunk, int64_t bytes);

// Disk I/O of data_bytes, straight from / into the memory block when it is 4096-aligned and the disk slot
// has no padding, else through `bounce` (4096-aligned, slot_bytes). write returns the CRC32C of the data
// in *crc; read checks it against `crc` (a failed read leaves `dst` undefined: the caller drops it).
// `what` names the block in error messages (with file and offset; NULL: its disk slot).
kvt_status kvt_tier_disk_write(kvt_tier_store *t, int64_t slot, const void *src, void *bounce, uint32_t *crc,
                               const char *what, kvt_err *err);
kvt_status kvt_tier_disk_read(kvt_tier_store *t, int64_t slot, void *dst, void *bounce, uint32_t crc, const char *what,
                              kvt_err *err);

// n block reads at once, as kvt_tier_disk_read for each i in [0, n): slot[i] into dst[i] through bounce[i] (used
// only where the block cannot be the O_DIRECT buffer; may be NULL otherwise), checked against crc[i]; st[i] and
// err[i] the outcome of each (messages name the disk slot). With a ring, the reads go to it together
// (kvt_uring_rw_many: one submission, one wait), KVT_TIER_READ_MANY at a time; a request the ring fails or reads
// short is finished (or redone) by the one-at-a-time path, which reports its error. Without a ring, one pread each.
#define KVT_TIER_READ_MANY 64
void kvt_tier_disk_read_many(kvt_tier_store *t, int n, const int64_t *slot, void *const *dst, void *const *bounce,
                             const uint32_t *crc, kvt_status *st, kvt_err *err);
// kvt_tier_disk_read_many in two calls for n <= KVT_TIER_READ_MANY, for a caller that computes while the reads are in
// flight: _start starts them (with a ring, one submission) and returns; _finish waits for them and does the rest (the
// CRC checks, the copies out of bounce buffers, a request the ring failed), giving st[i] and err[i]. The arrays and *p
// stay where they are between the two calls; every _start needs its _finish.
typedef struct {
    int n, k; // blocks; of them the ring's requests, block idx[x] for request x
    bool write;
    uint8_t *buf[KVT_TIER_READ_MANY]; // what block i moves through: itself or its bounce buffer
    int idx[KVT_TIER_READ_MANY];
    kvt_uring_pending ring;
} kvt_tier_pending;
void kvt_tier_disk_read_start(kvt_tier_store *t, int n, const int64_t *slot, void *const *dst, void *const *bounce,
                              const uint32_t *crc, kvt_status *st, kvt_err *err, kvt_tier_pending *p);
void kvt_tier_disk_read_finish(kvt_tier_store *t, const int64_t *slot, void *const *dst, const uint32_t *crc,
                               kvt_status *st, kvt_err *err, kvt_tier_pending *p);
// n block writes at once, as kvt_tier_disk_write for each i in [0, n): src[i] to slot[i] through bounce[i] (as for
// reads), crc[i] its CRC32C; st[i] and err[i] the outcome of each (messages name the disk slot). With a ring, one
// submission and one wait per KVT_TIER_READ_MANY; a request the ring fails or writes short is finished (or redone)
// by the one-at-a-time path, which reports its error. Without a ring, one pwrite each.
void kvt_tier_disk_write_many(kvt_tier_store *t, int n, const int64_t *slot, const void *const *src, void *const *bounce,
                              uint32_t *crc, kvt_status *st, kvt_err *err);

#endif
