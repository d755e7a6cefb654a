// hugemem.h - buffers that the kernel may back with 2 MiB pages.
//
// Long streams (the KV arenas, the sparse key copies, the DRAM probe) miss the TLB 512 times less on 2 MiB
// pages; the repacked weights live on them too, so the probe must read the same kind of pages to measure the
// ceiling that decode can reach.
#ifndef KVT_HUGEMEM_H
#define KVT_HUGEMEM_H

#include <stdbool.h>
#include <stddef.h>

#define KVT_HUGE_PAGE ((size_t)2 << 20) // bytes

// Returns `bytes` (at least 1) of uninitialized memory, or NULL when it cannot be allocated. With `huge` the
// buffer starts on a 2 MiB boundary and is marked for transparent huge pages (a hint: where the kernel has them
// off, 4 KiB pages as before); callers round `bytes` to whole 2 MiB pages when they count what they hold.
// Without `huge`, 64-byte aligned. Ownership: the caller frees it with free().
void *kvt_alloc_huge(size_t bytes, bool huge);

#endif
