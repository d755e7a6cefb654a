// prefix_store_redis.c - the prefix-block store on a Redis/Valkey server (`--kv-remote URL`) through hiredis:
// a pool of blocking connections with connect and command timeouts, pipelined GETs (get_many) and SET NXs (the
// writer thread of prefix_entry.h), every value checked like a directory entry. hiredis connects (with its
// timeout); every exchange after that is RESP written and read here, within command_timeout_ms for the whole of it
// (a deadline, not a timeout per read), and the large values go between the socket and the caller's memory
// directly (RESP bulk strings), which saves hiredis's two or three copies of each 100 KB-1 MB block. Built without hiredis
// (HIREDIS=0 or libhiredis-dev absent), open says so and nothing else is compiled.
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prefix_entry.h"

kvt_prefix_store_redis_params kvt_prefix_store_redis_params_default(void) {
    return (kvt_prefix_store_redis_params){.pool_size = 4,
                                           .connect_timeout_ms = 500,
                                           .command_timeout_ms = 2000,
                                           .retry_ms = 1000,
                                           .pipeline = 8,
                                           .pipeline_bytes = 256 << 10,
                                           .inflight_bytes = 64ll << 20,
                                           .ttl_s = 0,
                                           .key_prefix = "kvt"};
}

#ifndef KVT_HAVE_HIREDIS

kvt_status kvt_prefix_store_redis_open(const char *url, const kvt_prefix_identity *id, int64_t payload_bytes,
                                       const kvt_prefix_store_redis_params *p, kvt_prefix_store **out, kvt_err *err) {
    (void)id, (void)payload_bytes, (void)p;
    *out = NULL;
    return kvt_errorf(err, KVT_ERR_UNSUPPORTED,
                      "Redis URL '%s': kvtier was built without hiredis (apt-get install libhiredis-dev, rebuild)",
                      url ? url : "");
}

#else

#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>

#include "../base/timer.h"

#define HDR KVT_PREFIX_ENTRY_HEADER_BYTES

typedef struct {
    redisContext *c; // NULL: not connected
    bool busy;
    // read-ahead of GET replies, which are read here instead of by hiredis (straight into the caller's buffer):
    // rb[rb_pos, rb_len) unread; empty between exchanges, as hiredis's own buffers are
    size_t rb_pos, rb_len;
    char rb[4096];
    int64_t deadline_ns; // the GET exchange under way ends by then (command_timeout_ms for the whole of it, not per
                         // read: a server that trickles its reply would hold the caller without end)
} conn;

typedef struct {
    kvt_prefix_store_common com; // base, counters, writer
    kvt_prefix_store_redis_params p;
    char *url, *host, *path; // path: unix socket (host NULL)
    int port;
    char *key_prefix; // "<prefix>:v1:...:" (everything but the block key)
    size_t key_prefix_len;
    // the writer thread's scratch: the start of a SET command (key_prefix_len + 128), the outcomes of a batch
    char *wpre;
    kvt_prefix_put_outcome *wout;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    conn *pool;
    int64_t down_until_ns; // no connection attempt before this (after a failed one)
} redis_store;

// ---- SIGPIPE: a write to a closed socket must not kill the process (hiredis writes with write(2)). Blocked in
// the calling thread around each exchange; one raised meanwhile is consumed, the mask then restored. ----
typedef struct {
    sigset_t old;
    bool was_pending;
} pipe_guard;

static void pipe_block(pipe_guard *g) {
    sigset_t s, pend;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    sigpending(&pend);
    g->was_pending = sigismember(&pend, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &s, &g->old);
}
static void pipe_restore(pipe_guard *g) {
    sigset_t s, pend;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    sigpending(&pend);
    if (!g->was_pending && sigismember(&pend, SIGPIPE)) {
        const struct timespec zero = {0, 0};
        while (sigtimedwait(&s, NULL, &zero) < 0 && errno == EINTR) {}
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

static struct timeval tv_ms(int ms) { return (struct timeval){ms / 1000, (ms % 1000) * 1000}; }

static redisContext *connect_server(redis_store *s) {
    const struct timeval tv = tv_ms(s->p.connect_timeout_ms);
    redisContext *c =
        s->path ? redisConnectUnixWithTimeout(s->path, tv) : redisConnectWithTimeout(s->host, s->port, tv);
    if (!c) return NULL;
    if (c->err || redisSetTimeout(c, tv_ms(s->p.command_timeout_ms)) != REDIS_OK) {
        redisFree(c);
        return NULL;
    }
    return c;
}

// Takes a connection of the pool (waits while all are busy), connecting it when needed: its index, or -1 when
// the server cannot be reached now.
static int conn_acquire(redis_store *s) {
    pthread_mutex_lock(&s->mu);
    int i;
    for (;;) {
        for (i = 0; i < s->p.pool_size && s->pool[i].busy; i++) {}
        if (i < s->p.pool_size) break;
        pthread_cond_wait(&s->cv, &s->mu);
    }
    if (kvt_time_ns() < s->down_until_ns) { // (a connection of before the pause too: the server did not answer it)
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    s->pool[i].busy = true;
    pthread_mutex_unlock(&s->mu);
    if (!s->pool[i].c) {
        s->pool[i].c = connect_server(s);
        if (!s->pool[i].c) {
            pthread_mutex_lock(&s->mu);
            s->down_until_ns = kvt_time_ns() + (int64_t)s->p.retry_ms * 1000000;
            s->pool[i].busy = false;
            pthread_cond_signal(&s->cv);
            pthread_mutex_unlock(&s->mu);
            return -1;
        }
    }
    return i;
}

// Gives connection i back; a broken one (an I/O error, a timeout: its stream is out of step) is closed, and the
// server is left alone for retry_ms as after a failed connect (a server that accepts connections but does not answer,
// stopped or hung, would otherwise cost each lookup a whole timeout).
static void conn_release(redis_store *s, int i, bool broken) {
    const bool close = broken || s->pool[i].c->err || s->pool[i].rb_pos != s->pool[i].rb_len;
    if (close) {
        s->pool[i].rb_pos = s->pool[i].rb_len = 0;
        redisFree(s->pool[i].c);
        s->pool[i].c = NULL;
    }
    pthread_mutex_lock(&s->mu);
    if (close) s->down_until_ns = kvt_time_ns() + (int64_t)s->p.retry_ms * 1000000;
    s->pool[i].busy = false;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static size_t key_string(const redis_store *s, const kvt_block_key *k, char *buf) {
    memcpy(buf, s->key_prefix, s->key_prefix_len);
    return s->key_prefix_len +
           (size_t)sprintf(buf + s->key_prefix_len, "%016" PRIx64 "%016" PRIx64, k->hi, k->lo);
}

// ---- GET replies, read without hiredis's copies: the bulk string goes straight into the caller's buffer ----
// Waits until fd is ready for `events` (POLLIN, POLLOUT) before the deadline; false when it passed.
static bool wait_ready(int fd, short events, int64_t deadline_ns) {
    for (;;) {
        const int64_t left = deadline_ns - kvt_time_ns();
        if (left <= 0) return false;
        struct pollfd pf = {fd, events, 0};
        const int r = poll(&pf, 1, (int)((left + 999999) / 1000000));
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) return false;
    }
}

// Reads more of k's socket into its read-ahead; false on an error, the end of the stream or the timeout
// (SO_RCVTIMEO, set by redisSetTimeout), or a line longer than the read-ahead.
static bool rb_fill(conn *k) {
    if (k->rb_pos == k->rb_len) {
        k->rb_pos = k->rb_len = 0;
    } else if (k->rb_pos > 0) {
        memmove(k->rb, k->rb + k->rb_pos, k->rb_len - k->rb_pos);
        k->rb_len -= k->rb_pos;
        k->rb_pos = 0;
    }
    if (k->rb_len == sizeof k->rb) return false;
    for (;;) {
        if (!wait_ready(k->c->fd, POLLIN, k->deadline_ns)) return false;
        const ssize_t r = recv(k->c->fd, k->rb + k->rb_len, sizeof k->rb - k->rb_len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        k->rb_len += (size_t)r;
        return true;
    }
}

// One line of a reply, without its CRLF, into line (cap bytes, NUL-terminated; a longer one is cut and ends with
// '~', which no length or status parses as).
static bool rb_line(conn *k, char *line, size_t cap) {
    for (;;) {
        const char *b = k->rb + k->rb_pos, *e = memmem(b, k->rb_len - k->rb_pos, "\r\n", 2);
        if (e) {
            const size_t n = (size_t)(e - b), m = n < cap - 1 ? n : cap - 1;
            memcpy(line, b, m);
            line[m] = 0;
            if (n > m) line[m - 1] = '~';
            k->rb_pos += n + 2;
            return true;
        }
        if (!rb_fill(k)) return false;
    }
}

// Exactly n bytes into dst (NULL: skipped), from the read-ahead first, then straight from the socket.
static bool rb_read(conn *k, void *dst, size_t n) {
    for (size_t done = 0; done < n;) {
        const size_t have = k->rb_len - k->rb_pos, t = have < n - done ? have : n - done;
        if (t > 0) {
            if (dst) memcpy((char *)dst + done, k->rb + k->rb_pos, t);
            k->rb_pos += t;
            done += t;
        } else if (!dst) {
            if (!rb_fill(k)) return false;
        } else {
            if (!wait_ready(k->c->fd, POLLIN, k->deadline_ns)) return false;
            const ssize_t r = recv(k->c->fd, (char *)dst + done, n - done, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return false;
            done += (size_t)r;
        }
    }
    return true;
}

// Reads the reply of GET key on connection k: payload into dst, checked. *broken when the stream failed or is
// out of step (then the outcome is UNAVAILABLE).
static kvt_prefix_get_outcome read_get(redis_store *s, conn *k, const kvt_block_key *key, void *dst, bool *broken) {
    char line[128];
    if (!rb_line(k, line, sizeof line)) return *broken = true, KVT_PGET_UNAVAILABLE;
    if (line[0] == '-') { // an error: a value of another type under the key is a bad entry, anything else an outage
        return strncmp(line, "-WRONGTYPE", 10) == 0 ? KVT_PGET_CORRUPT : KVT_PGET_UNAVAILABLE;
    }
    char *e;
    const long long len = line[0] == '$' ? strtoll(line + 1, &e, 10) : -2;
    if (len < -1 || *e) return *broken = true, KVT_PGET_UNAVAILABLE;
    if (len == -1) return KVT_PGET_MISS;
    const size_t pb = (size_t)s->com.base.payload_bytes;
    if ((size_t)len != HDR + pb) { // another size: skipped
        if (!rb_read(k, NULL, (size_t)len + 2)) return *broken = true, KVT_PGET_UNAVAILABLE;
        return KVT_PGET_CORRUPT;
    }
    uint8_t hdr[HDR];
    char crlf[2];
    if (!rb_read(k, hdr, HDR) || !rb_read(k, dst, pb) || !rb_read(k, crlf, 2) || memcmp(crlf, "\r\n", 2) != 0) {
        return *broken = true, KVT_PGET_UNAVAILABLE;
    }
    const kvt_status st = kvt_prefix_entry_check(hdr, HDR, dst, pb, &s->com.base.id, key, NULL, NULL, NULL);
    return st == KVT_OK ? KVT_PGET_HIT : KVT_PGET_CORRUPT;
}

// Sends the iovecs in full on fd (MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE); false on an error, the
// send timeout (SO_SNDTIMEO, set by redisSetTimeout) or the deadline (0: none).
static bool send_all(int fd, struct iovec *v, int nv, int64_t deadline_ns) {
    while (nv > 0) {
        if (deadline_ns && !wait_ready(fd, POLLOUT, deadline_ns)) return false;
        struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)nv};
        const ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        size_t k = (size_t)w;
        for (; nv > 0 && k >= v->iov_len; v++, nv--) k -= v->iov_len;
        if (nv > 0) {
            v->iov_base = (char *)v->iov_base + k;
            v->iov_len -= k;
        }
    }
    return true;
}

// Sends one command (len bytes of RESP) on k and reads its one-line reply (a status, an error, an integer or a nil)
// into line, all within command_timeout_ms; false when the stream failed, timed out or is out of step.
static bool simple_exchange(redis_store *s, conn *k, const char *cmd, size_t len, char *line, size_t cap) {
    k->deadline_ns = kvt_time_ns() + (int64_t)s->p.command_timeout_ms * 1000000;
    struct iovec v = {(void *)cmd, len};
    if (!send_all(k->c->fd, &v, 1, k->deadline_ns) || !rb_line(k, line, cap)) return false;
    return (line[0] && strchr("+-:", line[0])) || !strcmp(line, "$-1"); // (strchr finds the NUL of an empty line)
}

static void redis_get_many(kvt_prefix_store *base, const kvt_block_key *keys, int n, void *const *dsts, bool *hits) {
    redis_store *s = (redis_store *)base;
    const double t0 = kvt_time_ms();
    kvt_prefix_get_outcome *o = malloc((size_t)(n > 0 ? n : 1) * sizeof *o);
    const int group = n < s->p.pipeline ? n : s->p.pipeline;
    char *cmd = malloc((size_t)(group > 0 ? group : 1) * (s->key_prefix_len + 64)); // a group's GETs
    const int ci = o && cmd ? conn_acquire(s) : -1;
    for (int i = 0; i < n; i++) {
        hits[i] = false;
        if (o) o[i] = KVT_PGET_UNAVAILABLE;
    }
    bool broken = false;
    if (ci >= 0) {
        conn *k = &s->pool[ci];
        redisContext *c = k->c;
        pipe_guard g;
        pipe_block(&g);
        // groups of GETs (at most `pipeline` of them and pipeline_bytes of values, at least one) sent, then
        // their replies read
        const int64_t vl = HDR + s->com.base.payload_bytes;
        for (int first = 0, sent = 0; first < n && !broken; first = sent) {
            size_t cl = 0;
            for (int64_t bytes = vl; sent < n && (sent == first || (sent - first < s->p.pipeline &&
                                                                    bytes <= s->p.pipeline_bytes));
                 sent++, bytes += vl) {
                cl += (size_t)sprintf(cmd + cl, "*2\r\n$3\r\nGET\r\n$%zu\r\n", s->key_prefix_len + 32);
                cl += key_string(s, &keys[sent], cmd + cl);
                cl += (size_t)sprintf(cmd + cl, "\r\n");
            }
            struct iovec v = {cmd, cl};
            k->deadline_ns = kvt_time_ns() + (int64_t)s->p.command_timeout_ms * 1000000; // the group's exchange
            broken = !send_all(c->fd, &v, 1, k->deadline_ns);
            for (int i = first; i < sent; i++) {
                o[i] = broken ? KVT_PGET_UNAVAILABLE : read_get(s, k, &keys[i], dsts[i], &broken);
                hits[i] = o[i] == KVT_PGET_HIT;
            }
        }
        for (int i = 0; i < n && !broken; i++) { // a value that failed its checks goes, so a put can replace it
            if (o[i] != KVT_PGET_CORRUPT) continue;
            size_t cl = (size_t)sprintf(cmd, "*2\r\n$3\r\nDEL\r\n$%zu\r\n", s->key_prefix_len + 32);
            cl += key_string(s, &keys[i], cmd + cl);
            cl += (size_t)sprintf(cmd + cl, "\r\n");
            char line[128];
            broken = !simple_exchange(s, k, cmd, cl, line, sizeof line);
        }
        pipe_restore(&g);
        conn_release(s, ci, broken);
    }
    const double ms = (kvt_time_ms() - t0) / (n > 0 ? n : 1);
    for (int i = 0; i < n; i++) {
        kvt_prefix_count_get(&s->com.cnt, o && ci >= 0 ? o[i] : KVT_PGET_UNAVAILABLE,
                             hits[i] ? s->com.base.payload_bytes : 0, ms);
    }
    free(cmd);
    free(o);
}

static void redis_get(kvt_prefix_store *base, const kvt_block_key *key, void *dst, bool *hit) {
    void *const d[1] = {dst};
    redis_get_many(base, key, 1, d, hit);
}

// Sends SET key entry NX [EX ttl] for one job on c, straight from the job's payload (RESP as hiredis would
// format it, without its three copies of a large value; hiredis's output buffer is empty between exchanges).
static bool send_set(redis_store *s, conn *k, const kvt_prefix_put_job *job) {
    const size_t vl = HDR + (size_t)s->com.base.payload_bytes;
    uint8_t hdr[HDR];
    kvt_prefix_entry_header(hdr, &s->com.base.id, &job->key, job->crc, s->com.base.payload_bytes);
    const bool ttl = s->p.ttl_s > 0;
    size_t prel = (size_t)sprintf(s->wpre, "*%d\r\n$3\r\nSET\r\n$%zu\r\n", ttl ? 6 : 4, s->key_prefix_len + 32);
    prel += key_string(s, &job->key, s->wpre + prel);
    prel += (size_t)sprintf(s->wpre + prel, "\r\n$%zu\r\n", vl);
    char post[96];
    const int ttl_len = snprintf(NULL, 0, "%" PRId64, s->p.ttl_s);
    const int postl = ttl ? snprintf(post, sizeof post, "\r\n$2\r\nNX\r\n$2\r\nEX\r\n$%d\r\n%" PRId64 "\r\n", ttl_len,
                                     s->p.ttl_s)
                          : snprintf(post, sizeof post, "\r\n$2\r\nNX\r\n");
    struct iovec v[4] = {{s->wpre, prel}, {hdr, HDR}, {job->payload, vl - HDR}, {post, (size_t)postl}};
    return send_all(k->c->fd, v, 4, k->deadline_ns);
}

// The writer thread: n SET NX on one connection, in groups (at most `pipeline` of them and pipeline_bytes of
// values, at least one) sent before their replies are read; a group's exchange ends within command_timeout_ms
// (a server trickling its replies would otherwise hold the writer, and the store's flush and free, without end).
static void redis_write_jobs(void *ctx, kvt_prefix_put_job *jobs, int n) {
    redis_store *s = ctx;
    const double t0 = kvt_time_ms();
    const int ci = conn_acquire(s);
    kvt_prefix_put_outcome *o = s->wout;
    for (int i = 0; i < n; i++) o[i] = KVT_PPUT_FAILED;
    if (ci >= 0) {
        conn *k = &s->pool[ci];
        const int64_t vl = HDR + s->com.base.payload_bytes;
        bool broken = false;
        pipe_guard g;
        pipe_block(&g);
        for (int first = 0, sent = 0; first < n && !broken; first = sent) {
            k->deadline_ns = kvt_time_ns() + (int64_t)s->p.command_timeout_ms * 1000000; // the group's exchange
            for (int64_t bytes = vl; sent < n && (sent == first || (sent - first < s->p.pipeline &&
                                                                    bytes <= s->p.pipeline_bytes));
                 sent++, bytes += vl) {
                if (!send_set(s, k, &jobs[sent])) {
                    broken = true;
                    break;
                }
            }
            for (int i = first; i < sent && !broken; i++) {
                char line[128];
                broken = !rb_line(k, line, sizeof line);
                if (broken) break;
                if (line[0] == '+') o[i] = KVT_PPUT_DONE;
                else if (!strcmp(line, "$-1")) o[i] = KVT_PPUT_SKIPPED; // present already (NX)
                else if (line[0] == '-') o[i] = KVT_PPUT_FAILED;        // an error reply (out of memory, read-only)
                else broken = true;                                     // not a SET reply: out of step
            }
        }
        pipe_restore(&g);
        conn_release(s, ci, broken);
    }
    const double ms = (kvt_time_ms() - t0) / (n > 0 ? n : 1);
    for (int i = 0; i < n; i++) kvt_prefix_count_put(&s->com.cnt, 0, o[i], s->com.base.payload_bytes, ms);
}

static void redis_free(kvt_prefix_store *base) {
    redis_store *s = (redis_store *)base;
    kvt_prefix_putq_stop(s->com.q);
    for (int i = 0; s->pool && i < s->p.pool_size; i++) {
        if (s->pool[i].c) redisFree(s->pool[i].c);
    }
    free(s->pool);
    kvt_prefix_counters_destroy(&s->com.cnt);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->wpre);
    free(s->wout);
    free(s->key_prefix);
    free(s->url);
    free(s->host);
    free(s->path);
    free(s);
}

static const kvt_prefix_store_ops redis_ops = {"redis",
                                               redis_get,
                                               kvt_prefix_common_put,
                                               kvt_prefix_common_flush,
                                               kvt_prefix_common_stats,
                                               redis_free,
                                               redis_get_many, NULL};

// Splits url into s->host/port or s->path.
static kvt_status parse_url(redis_store *s, const char *url, kvt_err *err) {
    if (strncmp(url, "unix://", 7) == 0) {
        if (url[7] != '/') return kvt_errorf(err, KVT_ERR_INVALID_ARG, "Redis URL '%s': expected unix:///PATH", url);
        s->path = strdup(url + 7);
        return s->path ? KVT_OK : kvt_errorf(err, KVT_ERR_NOMEM, "Redis URL '%s': out of memory", url);
    }
    if (strncmp(url, "redis://", 8) != 0) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "Redis URL '%s': expected redis://HOST[:PORT] or unix:///PATH",
                          url);
    }
    const char *h = url + 8, *end;
    size_t hl;
    if (*h == '[') { // [IPv6]
        const char *rb = strchr(h, ']');
        if (!rb) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "Redis URL '%s': unclosed [", url);
        hl = (size_t)(rb - h - 1), h++, end = rb + 1;
    } else {
        end = h + strcspn(h, ":/");
        hl = (size_t)(end - h);
    }
    s->port = 6379;
    if (*end == ':') {
        char *e;
        const long port = strtol(end + 1, &e, 10);
        if (end[1] < '0' || end[1] > '9' || port < 1 || port > 65535) { // (digits only: strtol takes a sign, blanks)
            return kvt_errorf(err, KVT_ERR_INVALID_ARG, "Redis URL '%s': bad port", url);
        }
        s->port = (int)port;
        end = e;
    }
    if (!hl || memchr(h, '@', hl) || (*end && strcmp(end, "/") != 0)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG,
                          "Redis URL '%s': expected redis://HOST[:PORT] (no credentials, database or path)", url);
    }
    s->host = strndup(h, hl);
    return s->host ? KVT_OK : kvt_errorf(err, KVT_ERR_NOMEM, "Redis URL '%s': out of memory", url);
}

static kvt_status make_key_prefix(redis_store *s, const char *url, kvt_err *err) {
    const kvt_prefix_identity *id = &s->com.base.id;
    char arch[sizeof id->arch + 1];
    size_t n = 0;
    for (; n < sizeof id->arch && id->arch[n]; n++) { // printable key: anything but [A-Za-z0-9_.-] becomes _
        const char ch = id->arch[n];
        const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                        ch == '_' || ch == '-' || ch == '.';
        arch[n] = ok ? ch : '_';
    }
    arch[n] = 0;
    const char *fmt = "%s:v%u:%s:%08" PRIx32 ":t%" PRIu32 ":L%" PRIu32 ":b%" PRIu32 ":%" PRIu32 "x%" PRIu32 "x%" PRIu32
                      "x%" PRIu32 ":";
    const unsigned v = KVT_PREFIX_ENTRY_VERSION;
    const int len = snprintf(NULL, 0, fmt, s->p.key_prefix, v, arch, id->model_fingerprint, id->kv_type, id->layout,
                             id->block_tokens, id->n_layer, id->n_head_kv, id->head_dim, id->head_dim_v);
    s->key_prefix = malloc((size_t)len + 1);
    if (!s->key_prefix) return kvt_errorf(err, KVT_ERR_NOMEM, "Redis URL '%s': out of memory", url);
    snprintf(s->key_prefix, (size_t)len + 1, fmt, s->p.key_prefix, v, arch, id->model_fingerprint, id->kv_type,
             id->layout, id->block_tokens, id->n_layer, id->n_head_kv, id->head_dim, id->head_dim_v);
    s->key_prefix_len = (size_t)len;
    return KVT_OK;
}

kvt_status kvt_prefix_store_redis_open(const char *url, const kvt_prefix_identity *id, int64_t payload_bytes,
                                       const kvt_prefix_store_redis_params *p, kvt_prefix_store **out, kvt_err *err) {
    *out = NULL;
    const kvt_prefix_store_redis_params d = kvt_prefix_store_redis_params_default();
    if (!p) p = &d;
    if (!url || !id || payload_bytes <= 0 || p->pool_size < 1 || p->connect_timeout_ms < 1 ||
        p->command_timeout_ms < 1 || p->retry_ms < 0 || p->pipeline < 1 || p->pipeline_bytes < 0 ||
        p->inflight_bytes < 0 || p->ttl_s < 0 || !p->key_prefix) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG,
                          "Redis URL '%s': bad arguments (payload %" PRId64 " bytes, pool %d, timeouts %d/%d ms, "
                          "pipeline %d)",
                          url ? url : "", payload_bytes, p->pool_size, p->connect_timeout_ms, p->command_timeout_ms,
                          p->pipeline);
    }
    redis_store *s = calloc(1, sizeof *s);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "Redis URL '%s': out of memory", url);
    s->com.base = (kvt_prefix_store){&redis_ops, *id, payload_bytes};
    s->p = *p;
    kvt_prefix_counters_init(&s->com.cnt);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->url = strdup(url);
    s->pool = calloc((size_t)p->pool_size, sizeof *s->pool);
    s->wout = malloc((size_t)p->pipeline * sizeof *s->wout);
    kvt_status st = KVT_OK;
    if (!s->url || !s->pool || !s->wout) st = kvt_errorf(err, KVT_ERR_NOMEM, "Redis URL '%s': out of memory", url);
    if (!st) st = parse_url(s, url, err);
    if (!st) st = make_key_prefix(s, url, err);
    s->p.key_prefix = NULL; // the caller's string is not kept: s->key_prefix has it
    if (!st && !(s->wpre = malloc(s->key_prefix_len + 128))) {
        st = kvt_errorf(err, KVT_ERR_NOMEM, "Redis URL '%s': out of memory", url);
    }
    if (!st) { // reachable now? (a later outage is a miss, not an error)
        const int ci = conn_acquire(s);
        if (ci < 0) {
            st = kvt_errorf(err, KVT_ERR_IO, "Redis URL '%s': cannot connect (within %d ms)", url,
                            p->connect_timeout_ms);
        } else {
            pipe_guard g;
            pipe_block(&g);
            static const char ping[] = "*1\r\n$4\r\nPING\r\n";
            char line[128];
            const bool ok = simple_exchange(s, &s->pool[ci], ping, sizeof ping - 1, line, sizeof line);
            pipe_restore(&g);
            if (!ok || strcmp(line, "+PONG") != 0) {
                st = kvt_errorf(err, KVT_ERR_IO, "Redis URL '%s': PING failed: %s", url,
                                ok ? line : "no answer within the command timeout");
            }
            conn_release(s, ci, st != KVT_OK);
            s->down_until_ns = 0;
        }
    }
    if (!st) {
        st = kvt_prefix_putq_start(payload_bytes, p->inflight_bytes, p->pipeline, redis_write_jobs, s, &s->com.q, err);
    }
    if (st) {
        redis_free(&s->com.base);
        return st;
    }
    *out = &s->com.base;
    return KVT_OK;
}

#endif
