// test_prefix_store_redis.c - the Redis half of the prefix_store suite: a redis-server started here (no
// persistence, a free TCP port and a unix socket under /tmp), round trips over both, corrupted and foreign
// values as counted misses, the server killed mid-run (misses within the timeouts, then recovery after a
// restart), threads. Skipped with the reason when hiredis is not compiled in or redis-server is absent; the
// server is killed at the end and its socket removed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_prefix_store.h"

#ifndef KVT_HAVE_HIREDIS

void tps_redis_tests(const test_env *env) {
    (void)env;
    kvt_prefix_identity id = tps_identity(1, 16);
    kvt_prefix_store *s = NULL;
    kvt_err err = {0};
    const kvt_status st = kvt_prefix_store_redis_open("redis://127.0.0.1:6379", &id, 4096, NULL, &s, &err);
    test_result(st == KVT_ERR_UNSUPPORTED && !s && strstr(err.msg, "hiredis"),
                "prefix_store redis: built without hiredis, open says so", "status %d: %s", st, err.msg);
    test_skip("prefix_store redis: server tests", "built without hiredis (apt-get install libhiredis-dev)");
}

#else

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/base/timer.h"

#define P 4096

typedef struct {
    pid_t pid;
    int port;
    char sock[64];
} server;

static bool in_path(const char *exe) {
    const char *path = getenv("PATH");
    char buf[1024];
    for (const char *p = path; p && *p;) {
        const size_t n = strcspn(p, ":");
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, exe);
        if (access(buf, X_OK) == 0) return true;
        p += n + (p[n] == ':');
    }
    return false;
}

static int free_port(void) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) close(fd);
    return port;
}

static void sleep_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&t, NULL);
}

// Starts redis-server on srv->port and srv->sock; waits (at most 5 s) until it answers PING.
static bool server_start(server *srv) {
    char port[16];
    snprintf(port, sizeof port, "%d", srv->port);
    srv->pid = fork();
    if (srv->pid == 0) {
        const int dn = open("/dev/null", O_RDWR);
        if (dn >= 0) dup2(dn, 0), dup2(dn, 1), dup2(dn, 2);
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--unixsocket", srv->sock,
               "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", "/tmp", (char *)NULL);
        _exit(127);
    }
    if (srv->pid < 0) return false;
    for (int i = 0; i < 250; i++) {
        int stw;
        if (waitpid(srv->pid, &stw, WNOHANG) == srv->pid) {
            srv->pid = -1;
            return false;
        }
        redisContext *c = redisConnectUnixWithTimeout(srv->sock, (struct timeval){0, 200000});
        redisReply *r = c && !c->err ? redisCommand(c, "PING") : NULL;
        const bool up = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        if (c) redisFree(c);
        if (up) return true;
        sleep_ms(20);
    }
    return false;
}

static void server_kill(server *srv) {
    if (srv->pid > 0) {
        kill(srv->pid, SIGKILL);
        waitpid(srv->pid, NULL, 0);
    }
    srv->pid = -1;
    unlink(srv->sock);
}

// ttl_s and pipeline_bytes as the params (-1: the default).
static kvt_prefix_store *open_redis_ex(const char *url, uint32_t fp, uint32_t bt, int64_t ttl_s, int64_t pipeline_bytes,
                                       kvt_err *err) {
    kvt_prefix_identity id = tps_identity(fp, bt);
    kvt_prefix_store_redis_params p = kvt_prefix_store_redis_params_default();
    if (ttl_s >= 0) p.ttl_s = ttl_s;
    if (pipeline_bytes >= 0) p.pipeline_bytes = pipeline_bytes;
    p.connect_timeout_ms = 300;
    p.command_timeout_ms = 300;
    p.retry_ms = 100;
    p.key_prefix = "kvttest";
    kvt_prefix_store *s = NULL;
    kvt_err e;
    if (!err) err = &e;
    if (kvt_prefix_store_redis_open(url, &id, P, &p, &s, err)) return NULL;
    return s;
}
static kvt_prefix_store *open_redis(const char *url, uint32_t fp, uint32_t bt, kvt_err *err) {
    return open_redis_ex(url, fp, bt, -1, -1, err);
}

// The one key of the server whose name ends with block i's key (a direct connection c); NULL if none.
static char *find_key(redisContext *c, const char *pattern_prefix, int i) {
    const kvt_block_key k = tps_key(i);
    redisReply *r = redisCommand(c, "KEYS %s*%016llx%016llx", pattern_prefix, (unsigned long long)k.hi,
                                 (unsigned long long)k.lo);
    char *name = NULL;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1) name = strdup(r->element[0]->str);
    if (r) freeReplyObject(r);
    return name;
}

static void set_raw(redisContext *c, const char *key, const void *v, size_t n) {
    redisReply *r = redisCommand(c, "SET %s %b", key, v, n);
    if (r) freeReplyObject(r);
}

// Round trip over url: 8 puts, a pipelined get of 9 keys (8 hits, 1 miss), a single get. With ttl_s > 0 the
// keys expire (checked on block 0 through c); pipeline_bytes as the param.
static void round_trip(const char *url, redisContext *c, int64_t ttl_s, int64_t pipeline_bytes, const char *what) {
    kvt_err err = {0};
    kvt_prefix_store *s = open_redis_ex(url, 0x1234, 16, ttl_s, pipeline_bytes, &err);
    if (!s) {
        test_result(false, what, "open: %s", err.msg);
        return;
    }
    for (int i = 0; i < 8; i++) tps_put(s, i);
    tps_put(s, 2); // present already: left as it is
    kvt_prefix_store_flush(s);
    uint8_t *buf = malloc(9 * P), *want = malloc(P);
    kvt_block_key keys[9];
    void *dsts[9];
    bool hits[9];
    for (int i = 0; i < 9; i++) keys[i] = tps_key(i), dsts[i] = buf + (size_t)i * P;
    kvt_prefix_store_get_many(s, keys, 9, dsts, hits);
    int good = 0;
    for (int i = 0; i < 9; i++) {
        tps_payload(i, want, P);
        good += hits[i] && memcmp(dsts[i], want, P) == 0;
    }
    const int single = tps_hits(s, 5, 6);
    kvt_prefix_store_stats st;
    kvt_prefix_store_stats_get(s, &st);
    long long ttl = -3;
    char *k0 = find_key(c, "kvttest:", 0);
    redisReply *r = k0 ? redisCommand(c, "TTL %s", k0) : NULL;
    if (r && r->type == REDIS_REPLY_INTEGER) ttl = r->integer;
    if (r) freeReplyObject(r);
    free(k0);
    test_result(good == 8 && !hits[8] && single == 1 && st.hits == 9 && st.misses == 1 && st.puts == 9 &&
                    st.bytes_written == 8 * P && st.put_failed == 0 &&
                    (ttl_s > 0 ? ttl > 0 && ttl <= ttl_s : ttl == -1),
                what, "pipelined hits %d of 8 (miss key hit %d), single %d, stats hits %lld misses %lld puts %lld "
                "written %lld failed %lld, TTL %lld", good, hits[8], single, (long long)st.hits, (long long)st.misses,
                (long long)st.puts, (long long)st.bytes_written, (long long)st.put_failed, ttl);
    free(buf);
    free(want);
    kvt_prefix_store_free(s);
}

static void flush_all(redisContext *c) {
    redisReply *r = redisCommand(c, "FLUSHALL");
    if (r) freeReplyObject(r);
}

// Deletes the keys matching pattern.
static void del_matching(redisContext *c, const char *pattern) {
    redisReply *r = c ? redisCommand(c, "KEYS %s", pattern) : NULL;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        redisReply *d = redisCommand(c, "DEL %s", r->element[i]->str);
        if (d) freeReplyObject(d);
    }
    if (r) freeReplyObject(r);
}

// A directory in front of the server (kvt_prefix_store_chain_open, `--kv-cache-dir` with `--kv-remote`): blocks the
// server alone holds are found there and copied into the directory; with the server emptied they still hit (from the
// directory); a put reaches both; the levels are listed nearest first; mismatched stores are refused.
static void chain_tests(const char *url, redisContext *c) {
    const char *name = "prefix_store chain: dir in front of redis: far hits copied near, near hits without the server, "
                       "puts reach both";
    char dir[] = "/tmp/kvt_chain_XXXXXX";
    if (!mkdtemp(dir)) {
        test_result(false, name, "mkdtemp failed");
        return;
    }
    const kvt_prefix_identity id = tps_identity(0x5151, 16);
    kvt_prefix_store *r0 = open_redis(url, 0x5151, 16, NULL), *d = NULL, *r = open_redis(url, 0x5151, 16, NULL), *ch = NULL;
    kvt_err err = {0};
    kvt_prefix_store_dir_open(dir, &id, P, 0, &d, &err);
    if (r0) { // blocks 0..3 on the server only
        for (int i = 0; i < 4; i++) tps_put(r0, i);
        kvt_prefix_store_flush(r0);
    }
    const kvt_status st = r0 && d && r ? kvt_prefix_store_chain_open(d, r, &ch, &err) : KVT_ERR_IO;
    if (st != KVT_OK) d = r = NULL; // freed by the failed open
    int h_far = -1, h_near = -1, n_lv = 0, h_put = -1;
    kvt_prefix_store *lv[4] = {NULL};
    kvt_prefix_store_stats sd = {0}, sr = {0};
    if (ch) {
        h_far = tps_hits(ch, 0, 5); // 4 hits from the server, block 4 a miss at both levels
        kvt_prefix_store_flush(ch); // the write-backs reach the directory
        del_matching(c, "kvttest:*:00005151:*"); // the server forgets this identity's blocks
        h_near = tps_hits(ch, 0, 4);
        tps_put(ch, 9);
        kvt_prefix_store_flush(ch);
        h_put = tps_hits(r0, 9, 10);
        n_lv = kvt_prefix_store_levels(ch, lv, 4);
        kvt_prefix_store_stats_get(lv[0], &sd);
        kvt_prefix_store_stats_get(lv[1], &sr);
    }
    test_result(st == KVT_OK && h_far == 4 && h_near == 4 && h_put == 1 && n_lv == 2 && !strcmp(lv[0]->ops->name, "dir") &&
                    !strcmp(lv[1]->ops->name, "redis") && sd.hits == 4 && sd.bytes_written == 5 * P && sr.hits == 4,
                name, "open %d: %s; hits from the server %d of 4, from the dir %d of 4, put seen by the server %d, "
                "levels %d, dir hits %lld written %lld, redis hits %lld", st, err.msg, h_far, h_near, h_put, n_lv,
                (long long)sd.hits, (long long)sd.bytes_written, (long long)sr.hits);
    kvt_prefix_store_free(ch);
    kvt_prefix_store_free(r0);
    // stores opened for different identities cannot be chained (both freed: ASan checks)
    kvt_prefix_store *d2 = NULL, *r2 = open_redis(url, 0x6262, 16, NULL), *ch2 = NULL;
    kvt_prefix_store_dir_open(dir, &id, P, 0, &d2, &err);
    const kvt_status st2 = kvt_prefix_store_chain_open(d2, r2, &ch2, &err);
    test_result(st2 == KVT_ERR_INVALID_ARG && !ch2 && strstr(err.msg, "identity"),
                "prefix_store chain: stores of different identities are refused", "status %d: %s", st2, err.msg);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
}

// A listening loopback socket for a fake server: its fd (-1 on error, errno set) and its redis:// URL in url.
static int fake_listen(char *url, size_t cap) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4) || getsockname(fd, (struct sockaddr *)&a, &l)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    snprintf(url, cap, "redis://127.0.0.1:%d", ntohs(a.sin_port));
    return fd;
}

// A server that answers PING, then trickles its reply to the command named `slow` (GET: a value of 1 MiB; SET: a
// status line; PING: the answer to the PING itself) one byte every 50 ms: a hostile or broken peer. Each byte came
// within the 300 ms command timeout, which applied to each read, so the exchange took as long as the server liked
// (found by reviews: the GET first, then the writer's SET replies and the PING at open). Every exchange must end
// within about the timeout.
typedef struct {
    int lfd;
    const char *slow; // "GET", "SET" or "PING"
    atomic_bool stop;
} trickle_srv;

static void *trickle_main(void *arg) {
    trickle_srv *t = arg;
    const int fd = accept(t->lfd, NULL, NULL);
    char buf[4096];
    for (int sent = 0; fd >= 0 && !atomic_load(&t->stop);) {
        const ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r == 0) break;
        if (r > 0 && !sent && memmem(buf, (size_t)r, t->slow, strlen(t->slow))) {
            const char *hdr = !strcmp(t->slow, "GET") ? "$1048576\r\n" : "+";
            if (send(fd, hdr, strlen(hdr), MSG_NOSIGNAL) != (ssize_t)strlen(hdr)) break;
            sent = 1;
        } else if (r > 0 && !sent && memmem(buf, (size_t)r, "PING", 4)) {
            if (send(fd, "+PONG\r\n", 7, MSG_NOSIGNAL) != 7) break;
        } else if (sent && send(fd, "x", 1, MSG_NOSIGNAL) != 1) {
            break;
        }
        sleep_ms(50);
    }
    if (fd >= 0) close(fd);
    return NULL;
}

static void tps_redis_trickle(const char *slow) {
    const bool get = !strcmp(slow, "GET"), set = !strcmp(slow, "SET");
    char name[160];
    snprintf(name, sizeof name, "prefix_store redis: a server trickling its reply to %s: %s within the command timeout",
             slow, get ? "the lookup ends, a miss," : set ? "the write fails, flush returns" : "open fails, named,");
    trickle_srv t = {-1, slow, false};
    char url[64];
    pthread_t th;
    if ((t.lfd = fake_listen(url, sizeof url)) < 0 || pthread_create(&th, NULL, trickle_main, &t)) {
        test_result(false, name, "fake server: %s", strerror(errno));
        if (t.lfd >= 0) close(t.lfd);
        return;
    }
    kvt_err err = {0};
    const double t0 = kvt_time_ms();
    kvt_prefix_store *s = open_redis(url, 0x77, 16, &err);
    int h = -1;
    if (s && get) h = tps_hits(s, 0, 1);
    if (s && set) tps_put(s, 0), kvt_prefix_store_flush(s);
    const double ms = kvt_time_ms() - t0;
    kvt_prefix_store_stats st = {0};
    if (s) kvt_prefix_store_stats_get(s, &st);
    kvt_prefix_store_free(s);
    atomic_store(&t.stop, true);
    shutdown(t.lfd, SHUT_RDWR);
    pthread_join(th, NULL);
    close(t.lfd);
    bool ok = ms < 1000;
    if (get) ok = ok && s && h == 0 && st.miss_unavailable == 1;
    else if (set) ok = ok && s && st.puts == 1 && st.put_failed == 1;
    else ok = ok && !s && strstr(err.msg, "PING failed");
    test_result(ok, name, "%s (hits %d, unavailable %lld, puts %lld, failed %lld, %.0f ms)", s ? "" : err.msg, h,
                (long long)st.miss_unavailable, (long long)st.puts, (long long)st.put_failed, ms);
}

// A server whose first GET reply is a value of another size (a bad entry: the lookup DELs it) and whose DEL reply is an
// empty line, the integer following 100 ms later. An empty line is no reply: the stream is out of step, the
// connection must go (it was taken for a reply, and the late ":1" then answered the next lookup's GET: a miss counted
// unavailable, and with a real value a lost hit).
typedef struct {
    int lfd;
    atomic_bool stop;
} empty_del_srv;

static void *empty_del_main(void *arg) {
    empty_del_srv *t = arg;
    bool got_first = false;
    while (!atomic_load(&t->stop)) {
        const int fd = accept(t->lfd, NULL, NULL);
        if (fd < 0) break;
        char buf[4096];
        for (;;) {
            const ssize_t r = recv(fd, buf, sizeof buf - 1, 0);
            if (r <= 0) break;
            buf[r] = 0;
            const char *rep = memmem(buf, (size_t)r, "PING", 4) ? "+PONG\r\n"
                              : memmem(buf, (size_t)r, "GET", 3) ? (got_first ? "$-1\r\n" : "$5\r\nhello\r\n")
                              : memmem(buf, (size_t)r, "DEL", 3) ? "\r\n"
                                                                  : "-ERR unknown\r\n";
            if (memmem(buf, (size_t)r, "GET", 3)) got_first = true;
            if (send(fd, rep, strlen(rep), MSG_NOSIGNAL) < 0) break;
            if (!strcmp(rep, "\r\n")) {
                sleep_ms(100);
                if (send(fd, ":1\r\n", 4, MSG_NOSIGNAL) < 0) break;
            }
        }
        close(fd);
    }
    return NULL;
}

static void tps_redis_empty_del_reply(void) {
    const char *name = "prefix_store redis: an empty line for a DEL reply breaks the connection (the next lookup a plain miss)";
    empty_del_srv t = {-1, false};
    char url[64];
    pthread_t th;
    if ((t.lfd = fake_listen(url, sizeof url)) < 0 || pthread_create(&th, NULL, empty_del_main, &t)) {
        test_result(false, name, "fake server: %s", strerror(errno));
        if (t.lfd >= 0) close(t.lfd);
        return;
    }
    kvt_err err = {0};
    kvt_prefix_store *s = open_redis(url, 0x78, 16, &err);
    int h1 = -1, h2 = -1;
    if (s) {
        h1 = tps_hits(s, 0, 1); // a bad value: DEL, answered by the empty line
        sleep_ms(300);          // the late ":1" has come; the retry pause is over
        h2 = tps_hits(s, 1, 2); // a miss
    }
    kvt_prefix_store_stats st = {0};
    if (s) kvt_prefix_store_stats_get(s, &st);
    kvt_prefix_store_free(s);
    atomic_store(&t.stop, true);
    shutdown(t.lfd, SHUT_RDWR);
    pthread_join(th, NULL);
    close(t.lfd);
    test_result(s && h1 == 0 && h2 == 0 && st.miss_corrupt == 1 && st.miss_unavailable == 0, name,
                "%s (hits %d %d, corrupt %lld, unavailable %lld)", s ? "" : err.msg, h1, h2, (long long)st.miss_corrupt,
                (long long)st.miss_unavailable);
}

void tps_redis_tests(const test_env *env) {
    (void)env;
    tps_redis_trickle("GET"); // (fake servers: no redis-server needed)
    tps_redis_trickle("SET");
    tps_redis_trickle("PING");
    tps_redis_empty_del_reply();
    if (!in_path("redis-server")) {
        test_skip("prefix_store redis: server tests", "redis-server not installed (apt-get install redis-server)");
        return;
    }
    server srv = {-1, free_port(), ""};
    snprintf(srv.sock, sizeof srv.sock, "/tmp/kvt_redis_%d.sock", (int)getpid());
    if (srv.port < 0 || !server_start(&srv)) {
        server_kill(&srv);
        test_skip("prefix_store redis: server tests", "redis-server did not start");
        return;
    }
    char tcp[64], unx[96];
    snprintf(tcp, sizeof tcp, "redis://127.0.0.1:%d", srv.port);
    snprintf(unx, sizeof unx, "unix://%s", srv.sock);
    redisContext *c = redisConnectUnixWithTimeout(srv.sock, (struct timeval){1, 0});
    if (c) redisSetTimeout(c, (struct timeval){2, 0});

    round_trip(tcp, c, 0, -1, "prefix_store redis: round trip over TCP (pipelined get of 9 keys, 8 hits)");
    flush_all(c);
    round_trip(unx, c, 3600, P, "prefix_store redis: round trip over a unix socket, keys expiring, one SET at a time");

    // corrupted values: a flipped payload byte, a short value, a value of another key; all counted misses
    kvt_prefix_store *s = open_redis(unx, 0x1234, 16, NULL);
    char *k0 = find_key(c, "kvttest:", 0), *k1 = find_key(c, "kvttest:", 1), *k2 = find_key(c, "kvttest:", 2),
         *k3 = find_key(c, "kvttest:", 3);
    if (s && c && k0 && k1 && k2 && k3) {
        redisReply *r = redisCommand(c, "GET %s", k0);
        if (r && r->type == REDIS_REPLY_STRING) {
            r->str[96 + 100] ^= 0x20;
            set_raw(c, k0, r->str, (size_t)r->len);
            set_raw(c, k1, r->str, 50);
            set_raw(c, k2, r->str, (size_t)r->len); // block 0's entry under block 2's key
            r->str[96 + 100] ^= 0x20;
            r->str[96 + 101] ^= 0x20;
        }
        if (r) freeReplyObject(r);
        set_raw(c, k3, "", 0);
    }
    char *k7 = c ? find_key(c, "kvttest:", 7) : NULL; // a list under block 7's key
    if (k7) {
        redisReply *r = redisCommand(c, "DEL %s", k7);
        if (r) freeReplyObject(r);
        r = redisCommand(c, "RPUSH %s x", k7);
        if (r) freeReplyObject(r);
    }
    int h = s ? tps_hits(s, 0, 5) + tps_hits(s, 7, 8) : -1;
    kvt_prefix_store_stats st = {0};
    if (s) kvt_prefix_store_stats_get(s, &st);
    int h_again = -1; // the bad values were deleted: put again, they hit
    if (s) tps_put(s, 0), tps_put(s, 3), kvt_prefix_store_flush(s), h_again = tps_hits(s, 0, 1) + tps_hits(s, 3, 4);
    test_result(h == 1 && st.miss_corrupt == 5 && h_again == 2 && k7,
                "prefix_store redis: a flipped byte, a short value, another key's entry, an empty value, a list: "
                "misses; put again, hits",
                "hits %d (block 4 only), miss_corrupt %lld, hits after new puts %d of 2", h,
                (long long)st.miss_corrupt, h_again);
    kvt_prefix_store_free(s);

    // another model / block size: other keys (plain misses); an entry of ours under their key fails the checks
    const uint32_t other[2][2] = {{0x9999, 16}, {0x1234, 32}};
    for (int o = 0; o < 2; o++) {
        kvt_prefix_store *b = open_redis(tcp, other[o][0], other[o][1], NULL);
        const int h1 = b ? tps_hits(b, 4, 8) : -1;
        char *ours = find_key(c, "kvttest:", 5 + o), *theirs = NULL;
        if (b) {
            tps_put(b, 5 + o); // then overwritten with our entry
            kvt_prefix_store_flush(b);
            char pat[64];
            snprintf(pat, sizeof pat, "kvttest:*%s*", o ? ":b32:" : "00009999");
            theirs = find_key(c, pat, 5 + o);
        }
        if (ours && theirs) {
            redisReply *r = redisCommand(c, "GET %s", ours);
            if (r && r->type == REDIS_REPLY_STRING) set_raw(c, theirs, r->str, (size_t)r->len);
            if (r) freeReplyObject(r);
        }
        const int h2 = b ? tps_hits(b, 5 + o, 6 + o) : -1;
        kvt_prefix_store_stats sb = {0};
        if (b) kvt_prefix_store_stats_get(b, &sb);
        test_result(h1 == 0 && h2 == 0 && sb.miss_corrupt == 1 && theirs,
                    o ? "prefix_store redis: entries of another block size are never used"
                      : "prefix_store redis: entries of another model are never used",
                    "hits %d/%d, miss_corrupt %lld, their key %s", h1, h2, (long long)sb.miss_corrupt,
                    theirs ? theirs : "(none)");
        free(ours);
        free(theirs);
        kvt_prefix_store_free(b);
    }
    free(k0), free(k1), free(k2), free(k3), free(k7);

    // threads on one store (a pool of 4 connections)
    flush_all(c);
    s = open_redis(tcp, 0x1234, 16, NULL);
    int th_hits = 0;
    const int wrong = s ? tps_threads(s, &th_hits) : -1;
    if (s) kvt_prefix_store_stats_get(s, &st);
    const int after = s ? tps_hits(s, 0, 40) : -1;
    test_result(s && wrong == 0 && after == 39 && st.put_failed == 0,
                "prefix_store redis: 4 threads putting and getting at once: no wrong bytes, the 39 blocks put stored",
                "wrong %d, hits afterwards %d (during: %d), failed %lld", wrong, after, th_hits,
                (long long)st.put_failed);

    chain_tests(unx, c);

    // the server stopped (SIGSTOP): lookups and puts time out (command timeout 300 ms) as misses / failures, the
    // first one a timeout, the others refused at once for retry_ms (a stopped server accepts connections: each would
    // cost a whole timeout); once it runs again, past retry_ms, hits again
    kill(srv.pid, SIGSTOP);
    double t1 = kvt_time_ms();
    const int h_stop = s ? tps_hits(s, 0, 2) : -1;
    if (s) tps_put(s, 70), kvt_prefix_store_flush(s);
    const double stop_ms = kvt_time_ms() - t1;
    kill(srv.pid, SIGCONT);
    sleep_ms(150); // past retry_ms
    kvt_prefix_store_stats ss = {0};
    if (s) kvt_prefix_store_stats_get(s, &ss);
    const int h_cont = s ? tps_hits(s, 0, 4) : -1;
    test_result(h_stop == 0 && ss.miss_unavailable == 2 && ss.put_failed == 1 && stop_ms < 500 && h_cont == 4,
                "prefix_store redis: server stopped: lookups and puts time out (misses, failures), then hits again",
                "hits %d, unavailable %lld, put_failed %lld, %.0f ms; after SIGCONT %d of 4 hits", h_stop,
                (long long)ss.miss_unavailable, (long long)ss.put_failed, stop_ms, h_cont);

    // the server killed mid-run: misses (bounded by the timeouts), failed puts; after a restart, hits again
    redisFree(c);
    c = NULL;
    server_kill(&srv);
    const double t0 = kvt_time_ms();
    const int h_dead = s ? tps_hits(s, 0, 40) : -1;
    if (s) tps_put(s, 50), tps_put(s, 51), kvt_prefix_store_flush(s);
    const double dead_ms = kvt_time_ms() - t0;
    kvt_prefix_store_stats sd = {0};
    if (s) kvt_prefix_store_stats_get(s, &sd);
    sd.miss_unavailable -= ss.miss_unavailable, sd.put_failed -= ss.put_failed; // this step's
    test_result(h_dead == 0 && sd.miss_unavailable == 40 && sd.put_failed == 2 && dead_ms < 10000,
                "prefix_store redis: server killed: every lookup a miss, every put failed, no hang",
                "hits %d, unavailable %lld, put_failed %lld, %.0f ms", h_dead, (long long)sd.miss_unavailable,
                (long long)sd.put_failed, dead_ms);
    const bool up = server_start(&srv);
    sleep_ms(150); // past retry_ms
    int h_back = -1;
    if (up && s) {
        tps_hits(s, 0, 4); // stale connections are found broken here (misses), then replaced
        tps_put(s, 60);
        kvt_prefix_store_flush(s);
        h_back = tps_hits(s, 60, 61);
    }
    test_result(up && h_back == 1, "prefix_store redis: after the server restarts, puts and hits again",
                "restarted %d, hit %d", up, h_back);
    kvt_prefix_store_free(s);

    // open: nothing listening -> KVT_ERR_IO quickly; malformed URLs -> KVT_ERR_INVALID_ARG
    kvt_err err = {0};
    char dead[64];
    snprintf(dead, sizeof dead, "redis://127.0.0.1:%d", free_port());
    kvt_prefix_store *n = open_redis(dead, 1, 16, &err);
    const kvt_status st_dead = err.status;
    const char *bad[] = {"http://x", "redis://", "redis://h:0", "redis://u:p@h:1", "redis://h:1/2", "unix://rel",
                         "redis://h: 1", "redis://h:+1"};
    const int n_bad = (int)(sizeof bad / sizeof *bad);
    int bad_ok = 0;
    for (int i = 0; i < n_bad; i++) {
        kvt_err e2 = {0};
        kvt_prefix_store *b = open_redis(bad[i], 1, 16, &e2);
        bad_ok += !b && e2.status == KVT_ERR_INVALID_ARG;
        kvt_prefix_store_free(b);
    }
    test_result(!n && st_dead == KVT_ERR_IO && strstr(err.msg, dead) && bad_ok == n_bad,
                "prefix_store redis: an unreachable server is KVT_ERR_IO naming it, malformed URLs are refused",
                "dead: %s; %d of %d malformed refused", err.msg, bad_ok, n_bad);
    kvt_prefix_store_free(n);
    server_kill(&srv);
}

#endif
