// switch.h - an on/off switch of the library read once from the environment (NAME=0: off; unset or anything else:
// on) and settable by tests (kvt_switch_set). One static kvt_switch per switch, KVT_SWITCH_INIT("NAME"); thread-safe
// (a relaxed atomic: every reader sees the environment's value or a later set).
#ifndef KVT_SWITCH_H
#define KVT_SWITCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    atomic_int v;    // -1: not read yet; 0 off; 1 on
    const char *env; // the environment variable
} kvt_switch;
#define KVT_SWITCH_INIT(name) {-1, name}

static inline bool kvt_switch_on(kvt_switch *s) {
    int v = atomic_load_explicit(&s->v, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv(s->env);
        v = !(e && !strcmp(e, "0"));
        atomic_store_explicit(&s->v, v, memory_order_relaxed);
    }
    return v == 1;
}

// Sets the switch; returns its state before.
static inline bool kvt_switch_set(kvt_switch *s, bool on) {
    const bool old = kvt_switch_on(s);
    atomic_store_explicit(&s->v, on ? 1 : 0, memory_order_relaxed);
    return old;
}

#endif
