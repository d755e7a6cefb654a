// grow.h - capacity doubling for growable arrays.
#ifndef KVT_GROW_H
#define KVT_GROW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

// Ensures *buf (an array of *cap elements of `elem` bytes) can hold `need`
// elements, doubling the capacity (at least 64). Returns false, leaving *buf
// and *cap unchanged, when memory runs out or the size would overflow.
static inline bool kvt_grow(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) {
        if (nc > ((size_t)-1) / 2 / elem) return false;
        nc *= 2;
    }
    void *nv = realloc(*buf, nc * elem);
    if (!nv) return false;
    *buf = nv;
    *cap = nc;
    return true;
}

#endif
