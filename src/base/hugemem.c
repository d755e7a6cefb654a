#include "hugemem.h"

#include <stdlib.h>
#include <sys/mman.h>

void *kvt_alloc_huge(size_t bytes, bool huge) {
    void *p = NULL;
    if (posix_memalign(&p, huge ? KVT_HUGE_PAGE : 64, bytes ? bytes : 1)) return NULL;
#ifdef MADV_HUGEPAGE
    if (huge) (void)madvise(p, bytes ? bytes : 1, MADV_HUGEPAGE);
#endif
    return p;
}
