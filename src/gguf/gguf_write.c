// gguf_write.c - GGUF v3 writer: metadata and tensor infos are collected in a
// growable byte buffer, tensor data is streamed from caller memory at write time.
#include "gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} bytebuf;

typedef struct {
    char *name;
    kvt_type type;
    uint32_t n_dims;
    int64_t ne[KVT_MAX_DIMS];
    const void *data;
    uint64_t size;
} wtensor;

struct kvt_gguf_writer {
    bytebuf kv; // serialized metadata entries
    uint64_t n_kv;
    wtensor *tensors;
    int64_t n_tensors, cap_tensors;
    bool oom;
};

static void bb_put(bytebuf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bb_u32(bytebuf *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bytebuf *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(bytebuf *b, const char *s, uint64_t len) {
    bb_u64(b, len);
    bb_put(b, s, len);
}

kvt_gguf_writer *kvt_gguf_writer_init(void) { return calloc(1, sizeof(kvt_gguf_writer)); }

void kvt_gguf_writer_free(kvt_gguf_writer *w) {
    if (!w) return;
    free(w->kv.p);
    for (int64_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    free(w);
}

static void kv_head(kvt_gguf_writer *w, const char *key, kvt_gguf_type t) {
    bb_str(&w->kv, key, strlen(key));
    bb_u32(&w->kv, (uint32_t)t);
    w->n_kv++;
}

void kvt_gguf_writer_set_u32(kvt_gguf_writer *w, const char *key, uint32_t v) {
    kv_head(w, key, KVT_GGUF_U32);
    bb_u32(&w->kv, v);
}
void kvt_gguf_writer_set_i32(kvt_gguf_writer *w, const char *key, int32_t v) {
    kv_head(w, key, KVT_GGUF_I32);
    bb_put(&w->kv, &v, 4);
}
void kvt_gguf_writer_set_f32(kvt_gguf_writer *w, const char *key, float v) {
    kv_head(w, key, KVT_GGUF_F32);
    bb_put(&w->kv, &v, 4);
}
void kvt_gguf_writer_set_bool(kvt_gguf_writer *w, const char *key, bool v) {
    kv_head(w, key, KVT_GGUF_BOOL);
    uint8_t b = v;
    bb_put(&w->kv, &b, 1);
}
void kvt_gguf_writer_set_str(kvt_gguf_writer *w, const char *key, const char *v) {
    kv_head(w, key, KVT_GGUF_STRING);
    bb_str(&w->kv, v, strlen(v));
}

static size_t elem_size(kvt_gguf_type t) {
    switch (t) {
    case KVT_GGUF_U8: case KVT_GGUF_I8: case KVT_GGUF_BOOL: return 1;
    case KVT_GGUF_U16: case KVT_GGUF_I16: return 2;
    case KVT_GGUF_U32: case KVT_GGUF_I32: case KVT_GGUF_F32: return 4;
    default: return 8;
    }
}

void kvt_gguf_writer_set_arr(kvt_gguf_writer *w, const char *key, kvt_gguf_type type, const void *data, uint64_t n) {
    kv_head(w, key, KVT_GGUF_ARRAY);
    bb_u32(&w->kv, (uint32_t)type);
    bb_u64(&w->kv, n);
    bb_put(&w->kv, data, n * elem_size(type));
}

void kvt_gguf_writer_set_arr_str(kvt_gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    kv_head(w, key, KVT_GGUF_ARRAY);
    bb_u32(&w->kv, KVT_GGUF_STRING);
    bb_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++) bb_str(&w->kv, v[i], strlen(v[i]));
}

void kvt_gguf_writer_copy_kv(kvt_gguf_writer *w, const kvt_gguf *src, int64_t i) {
    kvt_str key = kvt_gguf_key(src, i);
    char name[512];
    snprintf(name, sizeof name, "%.*s", (int)(key.len < 511 ? key.len : 511), key.ptr);
    kvt_gguf_type t = kvt_gguf_kv_type(src, i);
    if (t == KVT_GGUF_STRING) {
        kvt_str s;
        kvt_gguf_get_str(src, name, &s, NULL);
        kv_head(w, name, t);
        bb_str(&w->kv, s.ptr, s.len);
    } else if (t == KVT_GGUF_ARRAY) {
        kvt_gguf_arr a;
        kvt_gguf_get_arr(src, name, &a, NULL);
        kv_head(w, name, t);
        bb_u32(&w->kv, (uint32_t)a.type);
        bb_u64(&w->kv, a.n);
        if (a.type == KVT_GGUF_STRING) {
            for (uint64_t j = 0; j < a.n; j++) {
                kvt_str s = kvt_gguf_arr_str(src, &a, j);
                bb_str(&w->kv, s.ptr, s.len);
            }
        } else {
            bb_put(&w->kv, a.data, a.n * elem_size(a.type));
        }
    } else {
        // scalars: re-read through the typed getters
        kv_head(w, name, t);
        if (t == KVT_GGUF_F32 || t == KVT_GGUF_F64) {
            float f = 0;
            kvt_gguf_get_f32(src, name, &f, NULL);
            if (t == KVT_GGUF_F64) {
                double d = f;
                bb_put(&w->kv, &d, 8);
            } else {
                bb_put(&w->kv, &f, 4);
            }
        } else if (t == KVT_GGUF_BOOL) {
            bool b = false;
            kvt_gguf_get_bool(src, name, &b, NULL);
            uint8_t u = b;
            bb_put(&w->kv, &u, 1);
        } else {
            int64_t v = 0;
            kvt_gguf_get_i64(src, name, &v, NULL);
            bb_put(&w->kv, &v, elem_size(t)); // little-endian truncation keeps the value
        }
    }
}

void kvt_gguf_writer_add_tensor(kvt_gguf_writer *w, const char *name, kvt_type type, uint32_t n_dims, const int64_t *ne,
                                const void *data) {
    if (w->n_tensors == w->cap_tensors) {
        int64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        wtensor *t = realloc(w->tensors, (size_t)cap * sizeof *t);
        if (!t) {
            w->oom = true;
            return;
        }
        w->tensors = t;
        w->cap_tensors = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors++];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->type = type;
    t->n_dims = n_dims;
    uint64_t rows = 1;
    for (int d = 0; d < KVT_MAX_DIMS; d++) t->ne[d] = d < (int)n_dims ? ne[d] : 1;
    for (uint32_t d = 1; d < n_dims; d++) rows *= (uint64_t)ne[d];
    t->size = (uint64_t)kvt_row_size(type, ne[0]) * rows;
    t->data = data;
}

#define WRITE_ALIGN 32

kvt_status kvt_gguf_writer_write(kvt_gguf_writer *w, const char *path, kvt_err *err) {
    bytebuf hdr = {0};
    bb_put(&hdr, "GGUF", 4);
    bb_u32(&hdr, 3);
    bb_u64(&hdr, (uint64_t)w->n_tensors);
    bb_u64(&hdr, w->n_kv);
    bb_put(&hdr, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        bb_str(&hdr, t->name, strlen(t->name));
        bb_u32(&hdr, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) bb_u64(&hdr, (uint64_t)t->ne[d]);
        bb_u32(&hdr, (uint32_t)t->type);
        bb_u64(&hdr, off);
        off += (t->size + WRITE_ALIGN - 1) / WRITE_ALIGN * WRITE_ALIGN;
    }
    static const uint8_t zeros[WRITE_ALIGN] = {0};
    size_t pad = (WRITE_ALIGN - hdr.n % WRITE_ALIGN) % WRITE_ALIGN;
    bb_put(&hdr, zeros, pad);
    if (hdr.oom || w->kv.oom || w->oom) {
        free(hdr.p);
        return kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory building GGUF header", path);
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(hdr.p);
        return kvt_errorf(err, KVT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    bool ok = fwrite(hdr.p, 1, hdr.n, f) == hdr.n;
    free(hdr.p);
    for (int64_t i = 0; ok && i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        ok = fwrite(t->data, 1, t->size, f) == t->size;
        size_t tp = (WRITE_ALIGN - t->size % WRITE_ALIGN) % WRITE_ALIGN;
        if (ok && tp) ok = fwrite(zeros, 1, tp, f) == tp;
    }
    if (fclose(f) != 0) ok = false;
    if (!ok) {
        remove(path);
        return kvt_errorf(err, KVT_ERR_IO, "%s: write failed (disk full?): %s", path, strerror(errno));
    }
    return KVT_OK;
}

// Header (magic, counts, kv section, tensor infos, padding) of the writer's
// current contents, as kvt_gguf_writer_write lays it out.
static void stream_header(const kvt_gguf_writer *w, bytebuf *hdr) {
    bb_put(hdr, "GGUF", 4);
    bb_u32(hdr, 3);
    bb_u64(hdr, (uint64_t)w->n_tensors);
    bb_u64(hdr, w->n_kv);
    bb_put(hdr, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        bb_str(hdr, t->name, strlen(t->name));
        bb_u32(hdr, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) bb_u64(hdr, (uint64_t)t->ne[d]);
        bb_u32(hdr, (uint32_t)t->type);
        bb_u64(hdr, off);
        off += (t->size + WRITE_ALIGN - 1) / WRITE_ALIGN * WRITE_ALIGN;
    }
    static const uint8_t zeros[WRITE_ALIGN] = {0};
    bb_put(hdr, zeros, (WRITE_ALIGN - hdr->n % WRITE_ALIGN) % WRITE_ALIGN);
}

kvt_status kvt_gguf_writer_write_stream(kvt_gguf_writer *w, const char *path, kvt_gguf_fill_fn fill, void *user,
                                        kvt_err *err) {
    bytebuf hdr = {0};
    stream_header(w, &hdr);
    uint64_t max_size = 0;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        if (w->tensors[i].size > max_size) max_size = w->tensors[i].size;
    }
    void *buf = malloc(max_size ? (size_t)max_size : 1);
    if (hdr.oom || w->kv.oom || w->oom || !buf) {
        free(hdr.p);
        free(buf);
        return kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory (largest tensor %llu bytes)", path,
                          (unsigned long long)max_size);
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(hdr.p);
        free(buf);
        return kvt_errorf(err, KVT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    struct stat sb;
    bool regular = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode); // never remove /dev/null and the like
    kvt_status st = KVT_OK;
    if (fwrite(hdr.p, 1, hdr.n, f) != hdr.n) st = kvt_errorf(err, KVT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    free(hdr.p);
    static const uint8_t zeros[WRITE_ALIGN] = {0};
    for (int64_t i = 0; !st && i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        const void *src = t->data ? t->data : buf;
        if (!t->data && (st = fill(user, i, buf, t->size, err))) break;
        size_t tp = (WRITE_ALIGN - t->size % WRITE_ALIGN) % WRITE_ALIGN;
        if (fwrite(src, 1, (size_t)t->size, f) != t->size || (tp && fwrite(zeros, 1, tp, f) != tp)) {
            st = kvt_errorf(err, KVT_ERR_IO, "%s: write failed (disk full?): %s", path, strerror(errno));
        }
    }
    if (fclose(f) != 0 && !st) st = kvt_errorf(err, KVT_ERR_IO, "%s: write failed (disk full?): %s", path, strerror(errno));
    free(buf);
    if (st && regular) remove(path);
    return st;
}
