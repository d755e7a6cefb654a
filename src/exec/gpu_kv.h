// gpu_kv.h - the KV cache of the device layers (gpu_layers.c) in two tiers: T0 = VRAM within a budget, T1 = pinned
// host memory below it (HeadInfer's split: the KV that does not fit the GPU stays in host memory and crosses PCIe).
// Plain C over the CUDA backend's table (src/cuda/kvt_cuda.h), so it runs unchanged over the table's CPU emulation.
//
// T2 (disk, with pinned_bytes and disk_dir): pinned host memory holds at most pinned_bytes of slots; a block that must
// leave it goes to a disk slot (written unless its disk copy is still current; a block also in VRAM just drops its host
// copy, to be written back whole when it leaves VRAM) and comes back through a host slot when a fetch needs it (read
// on the host, then loaded or read in place like any host block). A block lives in VRAM, host, disk or several of them.
// Host slots are rewritten from the host only after both streams have finished with them. The disk I/O runs on a disk
// thread (gpu_kv_disk.h) while the kernels run: under pressure (a slot was needed with none free in the last 4 x nl
// calls), as many pinned slots as the last fetch took (at least 8; at most the staging, a quarter of the budget more
// pinned memory) are kept free ahead of need by evicting victims early as one generation, after an event on each
// stream; one call of kvt_gpu_kv_layer later the host waits for those events (the layer queued since keeps the device
// busy) and submits the slots' writes; one more call later the slots are free. A disk read goes into a free slot at once on the thread;
// the block is held, its load (if it gets a VRAM slot) waits, and the host waits for the read only before the kernels of
// the layer that reads it (the kernels of the layer before run meanwhile), then issues the load before that layer's
// fetch event. A block needed again while leaving is taken back from its slot. A slot needed with none free or leaving
// makes the host wait in line (`disk_stalls`). With disk_sync, the first version: the host issues the pending copies,
// synchronizes both streams (`syncs`) and does the I/O itself. Placement never changes a byte read.
//
// Blocks. Per (sequence, device layer, KV head group) a table of blocks of block_len positions; a block is one slot of
// 2 * block_len * row_bytes bytes, K [block_len, heads of the group, head_dim] f16 then V alike (attn_paged's
// layout; one group, the default, holds every KV head; head-wise and group granularity, as the CPU store's
// --kv-granularity, let a budget keep some heads of a layer in VRAM and fetch, evict and read each group apart). A slot
// is in VRAM (T0: at most vram_bytes / slot bytes of them) or in pinned host memory (T1, mapped into the device's
// address space, unlimited). A block lives in a VRAM slot, in a host slot, or in both (a loaded block keeps its host
// copy: it is clean until the layer writes a row into it, and evicting a clean block costs no copy). Slots are cut
// from allocations of at least 8 MiB (or the budget), so that consecutive blocks' copies merge into one transfer.
//
// Sliding windows (as the CPU store, kv_paged.h): a row at position p of a layer with window W attends [p - W + 1, p]
// (the last W positions, its own included: Gemma's sliding_window), so kvt_gpu_kv_begin frees, per sequence of the
// micro-batch, every block wholly before its first row's p - W + 1 (VRAM, pinned host and disk slots, with the last
// reference; counted in window_freed) and never allocates it again: a window layer holds at most
// kvt_kv_paged_shard_blocks(positions, W, block_len, rows per micro-batch) blocks. A block with a host or disk slot
// waits for both streams first (as truncate). A row whose window reaches a freed block (after a truncate far back) is
// refused, as the CPU store refuses the append. KVT_GPU_KV_KEEP_WINDOW=1 in the environment at init (tests): every
// block kept (the first version, to compare).
//
// Schedule. A micro-batch runs the device layers in order; kvt_gpu_kv_layer(i) (called before layer i's kernels):
//   1. COPY waits for an event recorded on COMPUTE after layer i - 1's kernels (so nothing still reads a victim);
//   2. the fetch of layer i + 1 is queued on COPY (layer 0's first, at i = 0): its blocks to read (every sequence
//      of the micro-batch, the positions its rows attend: all, or a sliding window's) that are not in VRAM get a VRAM
//      slot where one is free or a victim can go (kvt_victim_pick, kv_victim.h: the CPU store's search and
//      policies, --kv-evict; the blocks of layers i and i + 1 are held), dirty victims are first written back to
//      their host slots (D2H), then the blocks are loaded (H2D); an event is recorded after them;
//   3. COMPUTE waits for layer i's fetch event (queued one layer earlier: it overlapped layer i - 1's kernels), and
//      the block-table rows that changed since layer i last ran are uploaded (on COMPUTE);
// so attention of layer i finds in VRAM every block the budget could hold, and reads the others where they are, in
// pinned host memory (zero-copy over PCIe: the same kernel on the same bytes, so the logits do not depend on the
// budget). New blocks are placed the same way (a VRAM slot where possible, else a host slot the layer writes into).
// After the last layer, kvt_gpu_kv_end queues the next micro-batch's layer-0 fetch (a guess: the same sequences), so
// COPY may still work after kvt_gpu_layers_run synchronized COMPUTE; whatever frees or rewrites a slot from the host
// (truncate, fork, free) synchronizes both streams first.
#ifndef KVT_GPU_KV_H
#define KVT_GPU_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../cuda/kvt_cuda.h"

typedef struct {
    int32_t nl;            // device layers
    int64_t block_len;     // positions per block
    int64_t n_ctx;         // most positions of a sequence
    int64_t row_bytes;     // bytes of K (or V) of one position: n_head_kv * head_dim * 2 (f16)
    const int32_t *window; // [nl] each device layer's sliding window (0: none), copied; NULL: none
    int64_t vram_bytes;    // T0 budget in bytes (0: unlimited; below one slot: no VRAM, every block in pinned host)
    const char *evict;     // eviction policy (kv_policy.h names; NULL: lru)
    int32_t n_group;       // KV head groups per layer, each with its own blocks (HeadInfer's head-wise and group
                           // granularity: row_bytes is then one group's; 0 or 1: a block holds every KV head)
    int64_t pinned_bytes;  // T1 budget in bytes (0: unlimited; needs disk_dir: the blocks past it go to disk, T2)
    const char *disk_dir;  // T2: a file in this directory (kv_tier.h's disk tier: O_DIRECT, CRC32C per block, unlinked
                           // at once); NULL: no disk tier. Borrowed for the call only.
    int64_t disk_bytes;    // T2 budget in bytes (0: unlimited)
    int64_t copy_min;      // the copies of a fetch shorter than this (after merging neighbours) cross in batched copy
                           // kernels (copy_batch: up to KVT_CUDA_COPY_BATCH_MAX blocks per transfer), the others as
                           // one DMA each (0: KVT_GPU_KV_COPY_MIN; < 0: every copy a DMA of its own)
    bool disk_sync;        // T2's I/O on the host between layers after synchronizing both streams (the first version,
                           // kept to compare); false: on the disk thread (gpu_kv_disk.h), ordered by events
} kvt_gpu_kv_params;

#define KVT_GPU_KV_COPY_MIN ((int64_t)1 << 20) // the "transfers of at least 1 MiB"

typedef struct kvt_gpu_kv kvt_gpu_kv;

// api, ctx: borrowed (must outlive the result). KVT_ERR_INVALID_ARG for an unknown policy or bad sizes.
kvt_status kvt_gpu_kv_init(const kvt_cuda_api *api, kvt_cuda_ctx *ctx, const kvt_gpu_kv_params *p, kvt_gpu_kv **out,
                           kvt_err *err);
void kvt_gpu_kv_free(kvt_gpu_kv *kv);

// A micro-batch of n rows: row t appends position pos[t] to sequence seqs[t] (a new sequence starts at 0; each
// position at most the sequence's length; rows of a sequence consecutive, positions increasing). Checks the rows
// (KVT_ERR_INVALID_ARG, naming the row; also a row whose sliding window reaches a block freed) and notes what each
// layer reads, after freeing the blocks the sliding windows left (above). *max_len: the longest row's positions.
kvt_status kvt_gpu_kv_begin(kvt_gpu_kv *kv, int64_t n, const int32_t *seqs, const int64_t *pos, int32_t *max_len,
                            kvt_err *err);
// Layer i of the micro-batch (0, 1, ... in order; the schedule above). After it, *tk and *tv are layer i's device
// block tables for attn_paged ([sequences, *max_blocks] device addresses) of head group 0; kvt_gpu_kv_tables gives
// group j's (j < n_group), whose blocks hold KV heads [j * G, (j + 1) * G), G = n_head_kv / n_group.
kvt_status kvt_gpu_kv_layer(kvt_gpu_kv *kv, int32_t i, const void *const **tk, const void *const **tv,
                            int32_t *max_blocks, kvt_err *err);
// After the last layer's kernels of a micro-batch: queues on COPY the fetch of layer 0 for a next micro-batch of the
// same sequences and lengths (decode steps), so that it overlaps what follows (the output, the host's sampling, the
// CPU layers of a split) instead of stalling the next micro-batch's first layer. Only a guess: the next micro-batch
// fetches its own layer 0 again (finding these blocks in VRAM); a wrong guess costs transfers, never bytes read.
// The streams are no longer idle between micro-batches: truncate, fork and free synchronize both first.
kvt_status kvt_gpu_kv_end(kvt_gpu_kv *kv, kvt_err *err);
// The serving scheduler's plan (as kvt_kv_paged_set_plan: the sequences of the next iterations in order, a new
// iteration where a sequence repeats; n 0 clears it; copied): eviction counts a block of a planned sequence as needed
// when its iteration comes (outside the micro-batch and the plan: never), and kvt_gpu_kv_end fetches ahead layer 0 of
// the plan's sequences that have not run in its first iteration yet, else of its second iteration's, instead of
// guessing the same sequences. Only the order of copies changes, never a byte read.
kvt_status kvt_gpu_kv_set_plan(kvt_gpu_kv *kv, const int32_t *seqs, int64_t n, kvt_err *err);
void kvt_gpu_kv_tables(const kvt_gpu_kv *kv, int32_t i, int32_t j, const void *const **tk, const void *const **tv);
// The device address of position pos's K row of (seq, layer i, head group j), a row of the micro-batch, after
// kvt_gpu_kv_layer(i); its V row is kvt_gpu_kv_v_offset(kv) bytes further. Marks the block written (its host copy,
// if any, is stale).
uint8_t *kvt_gpu_kv_row(kvt_gpu_kv *kv, int32_t i, int32_t j, int32_t seq, int64_t pos);
int64_t kvt_gpu_kv_v_offset(const kvt_gpu_kv *kv);
// True when every block is in VRAM whatever happens (no VRAM or pinned budget): fetches copy nothing, so a micro-batch's
// layers may be captured as a CUDA graph (no host waits, no allocation once kvt_gpu_kv_begin has run).
bool kvt_gpu_kv_resident(const kvt_gpu_kv *kv);
// After kvt_gpu_kv_begin: makes sure the VRAM slots that the micro-batch's new blocks may take exist (allocating them
// now rather than during a capture); the slots stay free. KVT_ERR_IO with the backend's message.
kvt_status kvt_gpu_kv_reserve(kvt_gpu_kv *kv, kvt_err *err);
// Marks every table row to be uploaded again (after a capture that failed: its table copies never ran).
void kvt_gpu_kv_tables_dirty(kvt_gpu_kv *kv);

// dst gets src's KV (positions [0, n_pos(src))): src's full blocks are shared (a block in several sequences' tables,
// one slot wherever it is: VRAM, pinned host, disk; freed with its last reference), its partly filled last block is
// copied into a free VRAM slot, else a host slot (no eviction). A micro-batch row writing into a shared block (after
// a truncate into it, or a rewrite) copies it first (kvt_gpu_kv_begin: copy on write). truncate keeps positions
// [0, n_keep) (n_keep 0: the sequence goes), dropping its references. Unknown sequences: no-ops. Both wait for the
// streams first. Blocks a sliding window freed stay freed: dst starts with src's (none shared, never read: its rows
// come after src's), and a truncate keeps them (kvt_gpu_kv_begin refuses a row whose window reaches one).
kvt_status kvt_gpu_kv_fork(kvt_gpu_kv *kv, int32_t src, int32_t dst, kvt_err *err);
void kvt_gpu_kv_truncate(kvt_gpu_kv *kv, int32_t seq, int64_t n_keep);

// What the cache holds and moved since init (bytes; blocks).
typedef struct {
    int64_t vram_bytes;      // VRAM held by KV slots (used or free)
    int64_t vram_cap_bytes;  // the budget in whole slots (-1: unlimited)
    int64_t pinned_bytes;    // pinned host memory held by KV slots
    int64_t h2d_bytes;       // host -> device: blocks loaded into VRAM (fetches, forks)
    int64_t d2h_bytes;       // device -> host: blocks written back (evictions of written blocks, forks)
    int64_t d2d_bytes;       // device -> device (forks)
    int64_t h2h_bytes;       // pinned host -> pinned host (forks of blocks in host slots)
    int64_t table_bytes;     // block-table rows uploaded (host -> device)
    int64_t loads, writebacks, evictions, transfers; // blocks loaded, written back, evicted; copies issued (merged)
    int64_t loads_ahead;     // of the loads, those of kvt_gpu_kv_end (the next micro-batch's layer 0, overlapped)
    int64_t loads_first;     // of the loads, those a micro-batch's own first-layer fetch queued (not overlapped)
    int64_t zero_copy_bytes; // K and V bytes attention read from pinned host memory: per query row, the positions it
                             // attends in blocks not in VRAM, 2 x row_bytes each (GQA heads and caches aside)
    int64_t vram_read_bytes; // the same for positions in VRAM
    int64_t blocks_vram, blocks_host; // blocks now in VRAM, now only in pinned host memory
    // T2 (disk below pinned host)
    int64_t pinned_cap_bytes;  // the pinned budget in whole slots (-1: unlimited)
    int64_t pinned_over_bytes; // slots made past it because every host block was held (two layers' reads; 0 normally)
    int64_t disk_bytes;        // disk slots in use, bytes (now)
    int64_t disk_write_bytes, disk_read_bytes; // pinned host -> disk, disk -> pinned host (block data bytes)
    int64_t disk_writes, disk_reads;           // blocks written to disk, read from disk
    int64_t host_evictions;    // blocks that left pinned host memory (to disk, or dropped: still in VRAM or on disk)
    int64_t syncs;             // host waits for both streams before a host slot was rewritten (evictions from pinned)
    int64_t batches, batched_copies; // copy_batch kernels issued (each counted in transfers), the copies they held
    int64_t blocks_disk;       // blocks now only on disk
    int64_t disk_async_bytes;  // of disk_write_bytes + disk_read_bytes, those the disk thread moved (not disk_sync)
    int64_t disk_stalls;       // the disk thread: a pinned slot was needed with none free: the host waited in line for
                               // the streams to pass the leaving slots' events and for their writes
    int64_t disk_reclaims;     // the disk thread: blocks needed again while leaving pinned memory, taken back (no read)
    int64_t pinned_staging_bytes; // the disk thread: pinned slots past the budget (a quarter of it) kept free ahead of need
                               // while the tier is under pressure, so that evictions are written while kernels run
    int64_t fork_blocks, fork_bytes; // blocks forks copied (one per block layer: every device layer and head group; a
                               // fork copies only the partly filled last block), copies on write included, bytes
    int64_t fork_shared_blocks; // blocks forks shared (full blocks: a reference, no copy)
    int64_t cow_blocks;        // shared blocks copied before a write into them (copy on write; in fork_blocks too)
    int64_t window_freed;      // blocks a sliding window left, dropped from their sequence's table (kvt_gpu_kv_begin;
                               // the slots go with the last reference)
} kvt_gpu_kv_stats;
void kvt_gpu_kv_get_stats(const kvt_gpu_kv *kv, kvt_gpu_kv_stats *out);

#endif
