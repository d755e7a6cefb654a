// sim_core.c - event heap and processor-sharing links (see sim_core.h).
#include "sim_core.h"

#include <math.h>
#include <stdlib.h>


void kvt_sim_queue_init(kvt_sim_queue *q) { *q = (kvt_sim_queue){0}; }

void kvt_sim_queue_free(kvt_sim_queue *q) {
    free(q->ev);
    *q = (kvt_sim_queue){0};
}

static bool ev_less(const kvt_sim_event *x, const kvt_sim_event *y) {
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

kvt_status kvt_sim_queue_push(kvt_sim_queue *q, double t, int32_t kind, int32_t aux, int64_t a, int64_t b,
                              kvt_err *err) {
    if (q->n == q->cap) {
        int64_t cap = q->cap ? q->cap * 2 : 256;
        kvt_sim_event *ne = realloc(q->ev, (size_t)cap * sizeof *ne);
        if (!ne) return kvt_errorf(err, KVT_ERR_NOMEM, "sim: out of memory for the event queue (%lld events)", (long long)cap);
        q->ev = ne;
        q->cap = cap;
    }
    kvt_sim_event e = {t < q->now ? q->now : t, q->next_seq++, kind, aux, a, b};
    int64_t i = q->n++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!ev_less(&e, &q->ev[p])) break;
        q->ev[i] = q->ev[p];
        i = p;
    }
    q->ev[i] = e;
    return KVT_OK;
}

bool kvt_sim_queue_pop(kvt_sim_queue *q, kvt_sim_event *out) {
    if (q->n == 0) return false;
    *out = q->ev[0];
    q->now = out->t;
    kvt_sim_event last = q->ev[--q->n];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= q->n) break;
        if (c + 1 < q->n && ev_less(&q->ev[c + 1], &q->ev[c])) c++;
        if (!ev_less(&q->ev[c], &last)) break;
        q->ev[i] = q->ev[c];
        i = c;
    }
    if (q->n > 0) q->ev[i] = last;
    return true;
}

double kvt_sim_queue_peek(const kvt_sim_queue *q) { return q->n ? q->ev[0].t : INFINITY; }

// ---------------------------------------------------------------- links

void kvt_sim_link_init(kvt_sim_link *l, const char *name, double bw, double latency) {
    *l = (kvt_sim_link){0};
    l->name = name;
    l->bw = bw > 0 ? bw : 1.0;
    l->latency = latency > 0 ? latency : 0.0;
}

void kvt_sim_link_free(kvt_sim_link *l) {
    free(l->act);
    l->act = NULL;
    l->n_act = l->cap_act = 0;
}

void kvt_sim_link_advance(kvt_sim_link *l, double t) {
    if (t <= l->t_v) return;
    if (l->n_act > 0) {
        l->v += (t - l->t_v) * l->bw / (double)l->n_act;
        l->busy_s += t - l->t_v;
    }
    l->t_v = t;
}

static bool x_less(const kvt_sim_xfer *x, const kvt_sim_xfer *y) {
    return x->v_end < y->v_end || (x->v_end == y->v_end && x->id < y->id);
}

kvt_status kvt_sim_link_start(kvt_sim_link *l, double t, int64_t id, double bytes, kvt_err *err) {
    kvt_sim_link_advance(l, t);
    if (l->n_act == l->cap_act) {
        int64_t cap = l->cap_act ? l->cap_act * 2 : 16;
        kvt_sim_xfer *na = realloc(l->act, (size_t)cap * sizeof *na);
        if (!na) return kvt_errorf(err, KVT_ERR_NOMEM, "sim: out of memory for transfers on link %s", l->name);
        l->act = na;
        l->cap_act = cap;
    }
    kvt_sim_xfer x = {id, bytes, l->v + bytes};
    int64_t i = l->n_act++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!x_less(&x, &l->act[p])) break;
        l->act[i] = l->act[p];
        i = p;
    }
    l->act[i] = x;
    l->version++;
    return KVT_OK;
}

double kvt_sim_link_next_time(const kvt_sim_link *l) {
    if (l->n_act == 0) return INFINITY;
    double dv = l->act[0].v_end - l->v;
    return l->t_v + (dv > 0 ? dv : 0) * (double)l->n_act / l->bw;
}

int64_t kvt_sim_link_finish(kvt_sim_link *l, double t) {
    if (l->n_act == 0) return -1;
    kvt_sim_link_advance(l, t);
    kvt_sim_xfer done = l->act[0];
    // snap: the finishing transfer has received all its bytes (rounding)
    if (l->v < done.v_end) l->v = done.v_end;
    kvt_sim_xfer last = l->act[--l->n_act];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= l->n_act) break;
        if (c + 1 < l->n_act && x_less(&l->act[c + 1], &l->act[c])) c++;
        if (!x_less(&l->act[c], &last)) break;
        l->act[i] = l->act[c];
        i = c;
    }
    if (l->n_act > 0) l->act[i] = last;
    l->bytes_total += done.bytes;
    l->n_done++;
    l->version++;
    return done.id;
}
