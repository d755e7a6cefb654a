// kv_victim.c - the allocated part of the victim search (its trace); the search itself is inline in kv_victim.h.
#include "kv_victim.h"

#include <stdlib.h>


bool kvt_victim_trace_init(kvt_victim_trace *tr, int64_t cap) {
    tr->n = 0;
    tr->chosen = -1;
    tr->cap = cap > 0 ? cap : 1;
    tr->info = malloc((size_t)tr->cap * sizeof *tr->info);
    if (tr->info) return true;
    tr->cap = 0;
    return false;
}

void kvt_victim_trace_free(kvt_victim_trace *tr) {
    free(tr->info);
    tr->info = NULL;
    tr->cap = tr->n = 0;
    tr->chosen = -1;
}
