// test_gguf.c - the GGUF reader on valid, truncated, corrupted and hostile
// files, and a write/read round trip.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/gguf/gguf.h"
#include "../src/base/timer.h"
#include "../src/kernels/dtype.h"
#include "test.h"
#include "test_util.h"

// Writes a small valid file with a few kv pairs and two tensors; returns its bytes.
static uint8_t *make_small(size_t *len) {
    char path[] = "/tmp/kvt_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    close(fd);
    kvt_gguf_writer *w = kvt_gguf_writer_init();
    static const float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const uint16_t b[32] = {0x3c00};
    const char *strs[] = {"alpha", "beta", ""};
    int32_t ints[3] = {-1, 0, 7};
    kvt_gguf_writer_set_str(w, "general.architecture", "llama");
    kvt_gguf_writer_set_u32(w, "test.u32", 42);
    kvt_gguf_writer_set_f32(w, "test.f32", 0.5f);
    kvt_gguf_writer_set_bool(w, "test.bool", true);
    kvt_gguf_writer_set_arr_str(w, "test.strs", strs, 3);
    kvt_gguf_writer_set_arr(w, "test.ints", KVT_GGUF_I32, ints, 3);
    int64_t ne_a[2] = {4, 2}, ne_b[1] = {32};
    kvt_gguf_writer_add_tensor(w, "a", KVT_TYPE_F32, 2, ne_a, a);
    kvt_gguf_writer_add_tensor(w, "b", KVT_TYPE_F16, 1, ne_b, b);
    kvt_status st = kvt_gguf_writer_write(w, path, NULL);
    kvt_gguf_writer_free(w);
    uint8_t *buf = st ? NULL : (uint8_t *)test_read_file(path, len);
    unlink(path);
    return buf;
}

static kvt_status open_buf(const uint8_t *p, size_t n, kvt_err *err) {
    kvt_gguf *g;
    kvt_status st = kvt_gguf_open_buffer(p, n, "mem.gguf", &g, err);
    if (!st) kvt_gguf_free(g);
    return st;
}

void test_gguf(const test_env *env) {
    (void)env;
    size_t n = 0;
    uint8_t *buf = make_small(&n);
    test_result(buf != NULL, "gguf: writer produces a file", "write failed");
    if (!buf) return;
    kvt_gguf *g;
    kvt_err err = {0};
    kvt_status st = kvt_gguf_open_buffer(buf, n, "mem.gguf", &g, &err);
    test_result(st == KVT_OK, "gguf: round trip parses", "%s", err.msg);
    if (st == KVT_OK) {
        uint32_t u = 0;
        float f = 0;
        bool b = false;
        kvt_gguf_arr arr;
        kvt_gguf_get_u32(g, "test.u32", &u, NULL);
        kvt_gguf_get_f32(g, "test.f32", &f, NULL);
        kvt_gguf_get_bool(g, "test.bool", &b, NULL);
        bool ok = u == 42 && f == 0.5f && b;
        ok = ok && kvt_gguf_get_arr(g, "test.strs", &arr, NULL) == KVT_OK && arr.n == 3 &&
             kvt_str_eq(kvt_gguf_arr_str(g, &arr, 1), "beta") && kvt_gguf_arr_str(g, &arr, 2).len == 0;
        int32_t i2 = 0;
        ok = ok && kvt_gguf_get_arr(g, "test.ints", &arr, NULL) == KVT_OK && arr.n == 3;
        if (ok) memcpy(&i2, (const uint8_t *)arr.data + 8, 4);
        ok = ok && i2 == 7;
        const kvt_gguf_tensor *t = kvt_gguf_find_tensor(g, "a");
        ok = ok && t && t->ne[0] == 4 && t->ne[1] == 2 && t->size == 32 && ((const float *)t->data)[7] == 8.0f;
        ok = ok && kvt_gguf_get_u32(g, "missing", &u, NULL) == KVT_ERR_NOT_FOUND;
        ok = ok && kvt_gguf_get_u32(g, "test.f32", &u, NULL) == KVT_ERR_FORMAT;
        test_result(ok, "gguf: values read back", "mismatch");
        kvt_gguf_free(g);
    }
    // llama.cpp's file type names and its guess from the most common tensor type
    const char *f15 = kvt_gguf_ftype_name(15), *f0 = kvt_gguf_ftype_name(0);
    test_result(f15 && !strcmp(f15, "Q4_K - Medium") && f0 && !strcmp(f0, "all F32") && !kvt_gguf_ftype_name(4) &&
                    !kvt_gguf_ftype_name(UINT32_MAX) && kvt_gguf_ftype_guess(KVT_TYPE_Q4_K) == 15 &&
                    kvt_gguf_ftype_guess(KVT_TYPE_Q8_0) == 7 && kvt_gguf_ftype_guess(KVT_TYPE_BF16) == 32 &&
                    kvt_gguf_ftype_guess(KVT_TYPE_Q8_K) == UINT32_MAX && kvt_gguf_ftype_guess(1000) == UINT32_MAX,
                "gguf: file type names and guesses", "Q4_K_M -> %s", f15 ? f15 : "NULL");
    // every truncation must fail cleanly with a format error, never crash
    bool all = true;
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *p = malloc(cut ? cut : 1);
        memcpy(p, buf, cut);
        st = open_buf(p, cut, &err);
        if (st != KVT_ERR_FORMAT && st != KVT_ERR_UNSUPPORTED) all = false;
        free(p);
    }
    test_result(all, "gguf: every truncation is rejected with a message", "a truncated file was accepted");
    st = open_buf(buf, n - 1, &err);
    test_result(st == KVT_ERR_FORMAT && strstr(err.msg, "mem.gguf") != NULL, "gguf: truncation message names the file",
                "%s", err.msg);
    // single-byte corruptions: any status, no crash (sanitizers watch)
    uint8_t *p = malloc(n);
    int accepted = 0;
    for (size_t i = 0; i < n; i += 1) {
        memcpy(p, buf, n);
        p[i] ^= 0xA5;
        if (open_buf(p, n, &err) == KVT_OK) accepted++;
    }
    test_result(true, "gguf: byte-flip corruptions handled", "");
    // hostile counts and sizes
    memcpy(p, buf, n);
    uint64_t huge = 0x7fffffffffffffffull;
    memcpy(p + 8, &huge, 8); // tensor count
    st = open_buf(p, n, &err);
    test_result(st == KVT_ERR_FORMAT, "gguf: absurd tensor count rejected", "status %s", kvt_status_str(st));
    memcpy(p, buf, n);
    p[0] = 'X';
    st = open_buf(p, n, &err);
    test_result(st == KVT_ERR_FORMAT && strstr(err.msg, "magic"), "gguf: bad magic rejected", "%s", err.msg);
    memcpy(p, buf, n);
    uint32_t v9 = 9;
    memcpy(p + 4, &v9, 4);
    st = open_buf(p, n, &err);
    test_result(st == KVT_ERR_UNSUPPORTED, "gguf: unknown version rejected", "%s", err.msg);
    free(p);
    free(buf);
    // 200000 distinct keys, then the same number of tensor names (4-8 MB headers): the duplicate checks were
    // pairwise, so such a file took 85 s to open (llama.cpp keeps a set); now milliseconds. The last entry of
    // each repeats the first: still refused, both named.
    enum { NK = 200000 };
    for (int tensors = 0; tensors < 2; tensors++) {
        const size_t rec = tensors ? 8 + 8 + 4 + 8 + 4 + 8 : 8 + 8 + 4 + 1;
        const size_t hn = 24 + (size_t)NK * rec, len = hn + (tensors ? 32 + (size_t)NK * 32 : 0);
        uint8_t *h = calloc(1, len);
        if (!h) break;
        memcpy(h, "GGUF", 4);
        const uint32_t ver = 3;
        const uint64_t nt = tensors ? NK : 0, nk = tensors ? 0 : NK;
        memcpy(h + 4, &ver, 4), memcpy(h + 8, &nt, 8), memcpy(h + 16, &nk, 8);
        for (uint64_t i = 0; i < NK; i++) {
            uint8_t *q = h + 24 + i * rec;
            const uint64_t klen = 8;
            char name[16];
            snprintf(name, sizeof name, "k%07llu", (unsigned long long)(i == NK - 1 ? 0 : i));
            memcpy(q, &klen, 8), memcpy(q + 8, name, 8);
            if (tensors) { // 1 dim of 8 F32, at offset 32 i
                const uint32_t nd = 1, ty = 0;
                const uint64_t ne = 8, off = 32 * i;
                memcpy(q + 16, &nd, 4), memcpy(q + 20, &ne, 8), memcpy(q + 28, &ty, 4), memcpy(q + 32, &off, 8);
            } // else type 0 (u8) and its byte: zeros
        }
        const double t0 = kvt_time_ms();
        st = kvt_gguf_open_buffer(h, len, "many.gguf", &g, &err);
        const double ms = kvt_time_ms() - t0;
        const char *want = tensors ? "duplicate tensor name 'k0000000'" : "duplicate metadata key 'k0000000' (entries 0 and 199999)";
        test_result(st == KVT_ERR_FORMAT && strstr(err.msg, want) && ms < 2000,
                    tensors ? "gguf: 200000 tensor names checked for duplicates in O(n)" : "gguf: 200000 metadata keys checked for duplicates in O(n)",
                    "status %d '%s' in %.0f ms", (int)st, err.msg, ms);
        free(h);
    }
    st = kvt_gguf_open("/nonexistent/x.gguf", &g, &err);
    test_result(st == KVT_ERR_IO && strstr(err.msg, "/nonexistent/x.gguf"), "gguf: missing file names the path", "%s",
                err.msg);
    (void)accepted;
}
