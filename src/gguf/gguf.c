// gguf.c - GGUF reader: parse a memory-mapped (or caller-owned) buffer with
// every read bounds-checked.
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/file.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
// Sanity caps against hostile counts (each entry needs >= 8 bytes, so the
// file size bounds them too; these keep allocations reasonable before that check).
#define GGUF_MAX_NAME 65535

typedef struct {
    kvt_str key;
    kvt_gguf_type type;
    // scalar: value points at the bytes; string: str; array: arr_type/arr_n/value
    const uint8_t *value;
    kvt_str str;
    kvt_gguf_type arr_type;
    uint64_t arr_n;
    uint64_t *str_offsets; // string arrays: offset of each string's length field
} gguf_kv;

struct kvt_gguf {
    char *path;
    const uint8_t *base;
    size_t size;
    bool mapped;
    uint32_t version;
    uint64_t alignment;
    int64_t n_kv;
    gguf_kv *kv;
    int64_t n_tensors;
    kvt_gguf_tensor *tensors;
    uint64_t data_offset;
};

typedef struct {
    const uint8_t *base;
    size_t size;
    size_t pos;
    const char *name;
    kvt_err *err;
} reader;

static kvt_status rd_fail(reader *r, const char *what) {
    return kvt_errorf(r->err, KVT_ERR_FORMAT, "%s: truncated or corrupt GGUF: cannot read %s at offset %zu (file size %zu)",
                      r->name, what, r->pos, r->size);
}

static kvt_status rd_bytes(reader *r, void *dst, size_t n, const char *what) {
    if (n > r->size - r->pos) return rd_fail(r, what);
    memcpy(dst, r->base + r->pos, n);
    r->pos += n;
    return KVT_OK;
}

static kvt_status rd_u32(reader *r, uint32_t *v, const char *what) { return rd_bytes(r, v, 4, what); }
static kvt_status rd_u64(reader *r, uint64_t *v, const char *what) { return rd_bytes(r, v, 8, what); }

static kvt_status rd_str(reader *r, kvt_str *s, const char *what) {
    uint64_t len = 0;
    kvt_status st = rd_u64(r, &len, what);
    if (st) return st;
    if (len > r->size - r->pos) {
        return kvt_errorf(r->err, KVT_ERR_FORMAT, "%s: %s at offset %zu has length %llu beyond end of file (size %zu)",
                          r->name, what, r->pos, (unsigned long long)len, r->size);
    }
    s->ptr = (const char *)(r->base + r->pos);
    s->len = len;
    r->pos += len;
    return KVT_OK;
}

static size_t scalar_size(kvt_gguf_type t) {
    switch (t) {
    case KVT_GGUF_U8: case KVT_GGUF_I8: case KVT_GGUF_BOOL: return 1;
    case KVT_GGUF_U16: case KVT_GGUF_I16: return 2;
    case KVT_GGUF_U32: case KVT_GGUF_I32: case KVT_GGUF_F32: return 4;
    case KVT_GGUF_U64: case KVT_GGUF_I64: case KVT_GGUF_F64: return 8;
    default: return 0;
    }
}

bool kvt_str_eq(kvt_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

static kvt_status parse_kv(reader *r, gguf_kv *kv, int64_t idx) {
    kvt_status st;
    char what[64];
    snprintf(what, sizeof what, "key of metadata entry %lld", (long long)idx);
    if ((st = rd_str(r, &kv->key, what))) return st;
    uint32_t type;
    if ((st = rd_u32(r, &type, "metadata value type"))) return st;
    if (type >= KVT_GGUF_TYPE_COUNT) {
        return kvt_errorf(r->err, KVT_ERR_FORMAT, "%s: metadata key '%.*s' has unknown value type %u (offset %zu)", r->name,
                          (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr, type, r->pos - 4);
    }
    kv->type = (kvt_gguf_type)type;
    if (kv->type == KVT_GGUF_STRING) return rd_str(r, &kv->str, "string value");
    if (kv->type != KVT_GGUF_ARRAY) {
        size_t n = scalar_size(kv->type);
        if (n > r->size - r->pos) return rd_fail(r, "metadata value");
        kv->value = r->base + r->pos;
        r->pos += n;
        return KVT_OK;
    }
    uint32_t at;
    if ((st = rd_u32(r, &at, "array element type"))) return st;
    if (at >= KVT_GGUF_TYPE_COUNT || at == KVT_GGUF_ARRAY) {
        return kvt_errorf(r->err, KVT_ERR_FORMAT, "%s: array '%.*s' has unsupported element type %u", r->name,
                          (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr, at);
    }
    kv->arr_type = (kvt_gguf_type)at;
    if ((st = rd_u64(r, &kv->arr_n, "array length"))) return st;
    kv->value = r->base + r->pos;
    if (kv->arr_type == KVT_GGUF_STRING) {
        // each string needs at least its 8-byte length: bound n before allocating
        if (kv->arr_n > (r->size - r->pos) / 8) { // each string needs its 8-byte length
            return kvt_errorf(r->err, KVT_ERR_FORMAT, "%s: string array '%.*s' claims %llu elements, more than the file holds",
                              r->name, (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr,
                              (unsigned long long)kv->arr_n);
        }
        kv->str_offsets = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof(uint64_t));
        if (!kv->str_offsets) return kvt_errorf(r->err, KVT_ERR_NOMEM, "%s: out of memory for string array", r->name);
        for (uint64_t i = 0; i < kv->arr_n; i++) {
            kv->str_offsets[i] = r->pos;
            kvt_str tmp;
            if ((st = rd_str(r, &tmp, "string array element"))) return st;
        }
        return KVT_OK;
    }
    size_t es = scalar_size(kv->arr_type);
    if (kv->arr_n > (r->size - r->pos) / es) {
        return kvt_errorf(r->err, KVT_ERR_FORMAT, "%s: array '%.*s' of %llu elements runs past end of file", r->name,
                          (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr, (unsigned long long)kv->arr_n);
    }
    r->pos += kv->arr_n * es;
    return KVT_OK;
}

static kvt_status parse_tensor_info(reader *r, kvt_gguf_tensor *t, int64_t idx) {
    kvt_status st;
    char what[64];
    snprintf(what, sizeof what, "name of tensor %lld", (long long)idx);
    if ((st = rd_str(r, &t->name, what))) return st;
    int nl = (int)(t->name.len > 200 ? 200 : t->name.len);
    if (t->name.len > GGUF_MAX_NAME) {
        return kvt_errorf(r->err, KVT_ERR_FORMAT, "%s: tensor %lld name length %llu is too long", r->name, (long long)idx,
                          (unsigned long long)t->name.len);
    }
    if ((st = rd_u32(r, &t->n_dims, "tensor n_dims"))) return st;
    if (t->n_dims == 0 || t->n_dims > KVT_MAX_DIMS) {
        return kvt_errorf(r->err, KVT_ERR_FORMAT, "%s: tensor '%.*s' has %u dimensions (1..%d allowed)", r->name, nl,
                          t->name.ptr, t->n_dims, KVT_MAX_DIMS);
    }
    uint64_t nel = 1;
    for (int d = 0; d < KVT_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if ((st = rd_u64(r, &ne, "tensor dimension"))) return st;
        if (ne == 0 || ne > (uint64_t)INT64_MAX / 8 || nel > (uint64_t)INT64_MAX / 8 / ne) {
            return kvt_errorf(r->err, KVT_ERR_FORMAT, "%s: tensor '%.*s' dimension %u has absurd size %llu", r->name, nl,
                              t->name.ptr, d, (unsigned long long)ne);
        }
        t->ne[d] = (int64_t)ne;
        nel *= ne;
    }
    uint32_t type;
    if ((st = rd_u32(r, &type, "tensor type"))) return st;
    int64_t blck, bsize;
    if (!kvt_type_layout(type, &blck, &bsize)) {
        return kvt_errorf(r->err, KVT_ERR_UNSUPPORTED, "%s: unsupported type %u of tensor %.*s", r->name, type, nl,
                          t->name.ptr);
    }
    t->type = (kvt_type)type;
    if (t->ne[0] % blck) {
        return kvt_errorf(r->err, KVT_ERR_FORMAT, "%s: tensor '%.*s' row of %lld elements is not a multiple of the %s block (%lld)",
                          r->name, nl, t->name.ptr, (long long)t->ne[0], kvt_type_name(t->type), (long long)blck);
    }
    t->size = nel / (uint64_t)blck * (uint64_t)bsize;
    if ((st = rd_u64(r, &t->offset, "tensor offset"))) return st;
    return KVT_OK;
}

static int by_offset(const void *a, const void *b) {
    const kvt_gguf_tensor *x = *(const kvt_gguf_tensor *const *)a, *y = *(const kvt_gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

// Refuses tensors whose data ranges overlap (a write to one would change the other; llama.cpp
// refuses them too). Sorts pointers by offset: O(n log n).
static kvt_status check_overlaps(const kvt_gguf *g, kvt_err *err) {
    if (g->n_tensors < 2) return KVT_OK;
    const kvt_gguf_tensor **s = malloc((size_t)g->n_tensors * sizeof *s);
    if (!s) return kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory for the tensor table", g->path);
    for (int64_t i = 0; i < g->n_tensors; i++) s[i] = &g->tensors[i];
    qsort(s, (size_t)g->n_tensors, sizeof *s, by_offset);
    kvt_status st = KVT_OK;
    for (int64_t i = 1; i < g->n_tensors && !st; i++) {
        const kvt_gguf_tensor *a = s[i - 1], *b = s[i];
        if (b->offset < a->offset + a->size) { // both end inside the file: no overflow
            st = kvt_errorf(err, KVT_ERR_FORMAT,
                            "%s: tensors '%.*s' (data offset %llu, %llu bytes) and '%.*s' (data offset %llu) overlap", g->path,
                            (int)(a->name.len > 200 ? 200 : a->name.len), a->name.ptr, (unsigned long long)a->offset,
                            (unsigned long long)a->size, (int)(b->name.len > 200 ? 200 : b->name.len), b->name.ptr,
                            (unsigned long long)b->offset);
        }
    }
    free(s);
    return st;
}

// A set of names (metadata keys, tensor names) by open addressing: duplicates found in O(1) each, so a hostile
// header of 10^5..10^6 entries is refused in milliseconds (a pairwise scan took minutes for a 4 MB file).
typedef struct {
    int64_t *slot; // index into the caller's names, -1 empty
    uint64_t mask;
} name_set;

static bool name_set_init(name_set *ns, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    ns->mask = cap - 1;
    ns->slot = malloc(cap * sizeof *ns->slot);
    if (!ns->slot) return false;
    for (uint64_t i = 0; i < cap; i++) ns->slot[i] = -1;
    return true;
}

// Inserts names[i] (names[] has i+1 entries or more); returns the index of an earlier equal name, or -1.
static int64_t name_set_add(name_set *ns, const kvt_str *name, const kvt_str *(*at)(const void *, int64_t), const void *arr,
                            int64_t i) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t k = 0; k < name->len; k++) h = (h ^ (uint8_t)name->ptr[k]) * 1099511628211ull;
    for (uint64_t j = h & ns->mask;; j = (j + 1) & ns->mask) {
        if (ns->slot[j] < 0) {
            ns->slot[j] = i;
            return -1;
        }
        const kvt_str *o = at(arr, ns->slot[j]);
        if (o->len == name->len && memcmp(o->ptr, name->ptr, name->len) == 0) return ns->slot[j];
    }
}

static const kvt_str *kv_key_at(const void *arr, int64_t i) { return &((const gguf_kv *)arr)[i].key; }
static const kvt_str *tensor_name_at(const void *arr, int64_t i) { return &((const kvt_gguf_tensor *)arr)[i].name; }

static kvt_status parse_tensors(kvt_gguf *g, reader *rd, uint64_t n_tensors, name_set *ns, kvt_err *err);

static kvt_status parse(kvt_gguf *g, kvt_err *err) {
    reader r = {g->base, g->size, 0, g->path, err};
    kvt_status st;
    char magic[4];
    if ((st = rd_bytes(&r, magic, 4, "magic"))) return st;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: not a GGUF file (bad magic)", g->path);
    }
    if ((st = rd_u32(&r, &g->version, "version"))) return st;
    if (g->version < 2 || g->version > 3) {
        return kvt_errorf(err, KVT_ERR_UNSUPPORTED, "%s: GGUF version %u not supported (2 and 3 are)", g->path, g->version);
    }
    uint64_t n_tensors, n_kv;
    if ((st = rd_u64(&r, &n_tensors, "tensor count")) || (st = rd_u64(&r, &n_kv, "metadata count"))) return st;
    // every kv needs >= 12 bytes and every tensor info >= 24: bound counts by the file size
    if (n_kv > g->size / 12 || n_tensors > g->size / 24) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: header claims %llu metadata entries and %llu tensors, more than the %zu-byte file can hold",
                          g->path, (unsigned long long)n_kv, (unsigned long long)n_tensors, g->size);
    }
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) return kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory for header", g->path);
    g->n_kv = (int64_t)n_kv;
    name_set ns;
    if (!name_set_init(&ns, n_kv > n_tensors ? n_kv : n_tensors)) {
        return kvt_errorf(err, KVT_ERR_NOMEM, "%s: out of memory for header", g->path);
    }
    for (int64_t i = 0; i < g->n_kv; i++) {
        if ((st = parse_kv(&r, &g->kv[i], i))) break;
        const kvt_str k = g->kv[i].key;
        const int64_t j = name_set_add(&ns, &k, kv_key_at, g->kv, i);
        if (j >= 0) { // a second value for a key: which one counts is undefined
            st = kvt_errorf(err, KVT_ERR_FORMAT, "%s: duplicate metadata key '%.*s' (entries %lld and %lld)", g->path,
                            (int)(k.len > 200 ? 200 : k.len), k.ptr, (long long)j, (long long)i);
            break;
        }
    }
    if (st) {
        free(ns.slot);
        return st;
    }
    for (uint64_t j = 0; j <= ns.mask; j++) ns.slot[j] = -1; // reused for the tensor names
    st = parse_tensors(g, &r, n_tensors, &ns, err);
    free(ns.slot);
    return st;
}

// The tensor infos after the metadata (rd: the reader past it).
static kvt_status parse_tensors(kvt_gguf *g, reader *rd, uint64_t n_tensors, name_set *ns, kvt_err *err) {
    reader r = *rd;
    kvt_status st;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = kvt_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        int64_t a;
        if ((st = kvt_gguf_get_i64(g, "general.alignment", &a, err))) return st;
        if (a <= 0 || (a & (a - 1)) || a > (1 << 24)) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: general.alignment %lld is not a power of two", g->path, (long long)a);
        }
        g->alignment = (uint64_t)a;
    }
    g->n_tensors = (int64_t)n_tensors;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        if ((st = parse_tensor_info(&r, &g->tensors[i], i))) return st;
    }
    uint64_t data = (r.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors > 0 && data > g->size) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: tensor data section starts at %llu, past end of file (%zu bytes)", g->path,
                          (unsigned long long)data, g->size);
    }
    g->data_offset = data;
    uint64_t avail = g->size > data ? g->size - data : 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        kvt_gguf_tensor *t = &g->tensors[i];
        int nl = (int)(t->name.len > 200 ? 200 : t->name.len);
        if (t->offset % g->alignment) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: tensor '%.*s' offset %llu is not aligned to %llu", g->path, nl,
                              t->name.ptr, (unsigned long long)t->offset, (unsigned long long)g->alignment);
        }
        if (t->offset > avail || t->size > avail - t->offset) {
            return kvt_errorf(err, KVT_ERR_FORMAT,
                              "%s: tensor '%.*s' (%llu bytes at data offset %llu) runs past end of file (data section %llu bytes); file truncated?",
                              g->path, nl, t->name.ptr, (unsigned long long)t->size, (unsigned long long)t->offset,
                              (unsigned long long)avail);
        }
        t->data = g->base + data + t->offset;
        if (name_set_add(ns, &t->name, tensor_name_at, g->tensors, i) >= 0) {
            return kvt_errorf(err, KVT_ERR_FORMAT, "%s: duplicate tensor name '%.*s'", g->path, nl, t->name.ptr);
        }
    }
    return check_overlaps(g, err);
}

static kvt_status open_common(kvt_gguf *g, kvt_gguf **out, kvt_err *err) {
    kvt_status st = parse(g, err);
    if (st) {
        kvt_gguf_free(g);
        *out = NULL;
        return st;
    }
    *out = g;
    return KVT_OK;
}

kvt_status kvt_gguf_open_buffer(const void *buf, size_t size, const char *name, kvt_gguf **out, kvt_err *err) {
    kvt_gguf *g = calloc(1, sizeof *g);
    if (!g) return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    g->path = strdup(name ? name : "<buffer>");
    g->base = buf;
    g->size = size;
    return open_common(g, out, err);
}

kvt_status kvt_gguf_open(const char *path, kvt_gguf **out, kvt_err *err) {
    *out = NULL;
    int fd;
    int64_t fsize;
    kvt_status ost = kvt_file_open_regular(path, "", &fd, &fsize, err); // never blocks on a FIFO
    if (ost) return ost;
    if (fsize < 8) {
        close(fd);
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: file too small to be GGUF (%lld bytes)", path, (long long)fsize);
    }
    void *m = mmap(NULL, (size_t)fsize, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return kvt_errorf(err, KVT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    kvt_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        munmap(m, (size_t)fsize);
        return kvt_errorf(err, KVT_ERR_NOMEM, "out of memory");
    }
    g->path = strdup(path);
    g->base = m;
    g->size = (size_t)fsize;
    g->mapped = true;
    return open_common(g, out, err);
}

void kvt_gguf_free(kvt_gguf *g) {
    if (!g) return;
    if (g->kv) {
        for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].str_offsets);
    }
    free(g->kv);
    free(g->tensors);
    if (g->mapped) munmap((void *)g->base, g->size);
    free(g->path);
    free(g);
}

const char *kvt_gguf_path(const kvt_gguf *g) { return g->path; }
bool kvt_gguf_is_mapped(const kvt_gguf *g) { return g->mapped; }
uint32_t kvt_gguf_version(const kvt_gguf *g) { return g->version; }
size_t kvt_gguf_file_size(const kvt_gguf *g) { return g->size; }
uint64_t kvt_gguf_alignment(const kvt_gguf *g) { return g->alignment; }
int64_t kvt_gguf_n_kv(const kvt_gguf *g) { return g->n_kv; }
kvt_str kvt_gguf_key(const kvt_gguf *g, int64_t i) { return g->kv[i].key; }
kvt_gguf_type kvt_gguf_kv_type(const kvt_gguf *g, int64_t i) { return g->kv[i].type; }

int64_t kvt_gguf_find_key(const kvt_gguf *g, const char *key) {
    for (int64_t i = 0; i < g->n_kv; i++) {
        if (g->kv[i].key.ptr && kvt_str_eq(g->kv[i].key, key)) return i;
    }
    return -1;
}

static kvt_status find_typed(const kvt_gguf *g, const char *key, int64_t *idx) {
    *idx = kvt_gguf_find_key(g, key);
    return *idx < 0 ? KVT_ERR_NOT_FOUND : KVT_OK;
}

const char *kvt_gguf_type_name(kvt_gguf_type t) {
    static const char *const names[KVT_GGUF_TYPE_COUNT] = {"u8",  "i8",  "u16", "i16", "u32", "i32", "f32",
                                                           "bool", "str", "arr", "u64", "i64", "f64"};
    return (unsigned)t < KVT_GGUF_TYPE_COUNT ? names[t] : "unknown";
}

bool kvt_gguf_type_is_int(kvt_gguf_type t) {
    return t <= KVT_GGUF_I32 || t == KVT_GGUF_U64 || t == KVT_GGUF_I64;
}

// As llama.cpp words it ("key %s has wrong type %s but expected type %s"), an array with its element type.
static kvt_status wrong_type(const kvt_gguf *g, int64_t i, const char *key, const char *want, kvt_err *err) {
    const gguf_kv *kv = &g->kv[i];
    char found[32];
    if (kv->type == KVT_GGUF_ARRAY) snprintf(found, sizeof found, "arr[%s]", kvt_gguf_type_name(kv->arr_type));
    else snprintf(found, sizeof found, "%s", kvt_gguf_type_name(kv->type));
    return kvt_errorf(err, KVT_ERR_FORMAT, "%s: metadata '%s' has type %s, expected %s", g->path, key, found, want);
}

kvt_status kvt_gguf_get_i64(const kvt_gguf *g, const char *key, int64_t *out, kvt_err *err) {
    int64_t i;
    if (find_typed(g, key, &i)) return KVT_ERR_NOT_FOUND;
    const uint8_t *p = g->kv[i].value;
    switch (g->kv[i].type) {
    case KVT_GGUF_U8: *out = p[0]; return KVT_OK;
    case KVT_GGUF_I8: *out = (int8_t)p[0]; return KVT_OK;
    case KVT_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); *out = v; return KVT_OK; }
    case KVT_GGUF_I16: { int16_t v; memcpy(&v, p, 2); *out = v; return KVT_OK; }
    case KVT_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); *out = v; return KVT_OK; }
    case KVT_GGUF_I32: { int32_t v; memcpy(&v, p, 4); *out = v; return KVT_OK; }
    case KVT_GGUF_I64: { int64_t v; memcpy(&v, p, 8); *out = v; return KVT_OK; }
    case KVT_GGUF_U64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX) return kvt_errorf(err, KVT_ERR_FORMAT, "%s: metadata '%s' value too large", g->path, key);
        *out = (int64_t)v;
        return KVT_OK;
    }
    default: return wrong_type(g, i, key, "an integer", err);
    }
}

kvt_status kvt_gguf_get_u32(const kvt_gguf *g, const char *key, uint32_t *out, kvt_err *err) {
    int64_t v;
    kvt_status st = kvt_gguf_get_i64(g, key, &v, err);
    if (st) return st;
    if (v < 0 || v > (int64_t)UINT32_MAX) {
        return kvt_errorf(err, KVT_ERR_FORMAT, "%s: metadata '%s' value %lld out of range", g->path, key, (long long)v);
    }
    *out = (uint32_t)v;
    return KVT_OK;
}

kvt_status kvt_gguf_get_f32(const kvt_gguf *g, const char *key, float *out, kvt_err *err) {
    int64_t i;
    if (find_typed(g, key, &i)) return KVT_ERR_NOT_FOUND;
    if (g->kv[i].type == KVT_GGUF_F32) {
        memcpy(out, g->kv[i].value, 4);
        return KVT_OK;
    }
    if (g->kv[i].type == KVT_GGUF_F64) {
        double d;
        memcpy(&d, g->kv[i].value, 8);
        *out = (float)d;
        return KVT_OK;
    }
    return wrong_type(g, i, key, "a float", err);
}

kvt_status kvt_gguf_get_bool(const kvt_gguf *g, const char *key, bool *out, kvt_err *err) {
    int64_t i;
    if (find_typed(g, key, &i)) return KVT_ERR_NOT_FOUND;
    if (g->kv[i].type != KVT_GGUF_BOOL) return wrong_type(g, i, key, "a bool", err);
    *out = g->kv[i].value[0] != 0;
    return KVT_OK;
}

kvt_status kvt_gguf_get_str(const kvt_gguf *g, const char *key, kvt_str *out, kvt_err *err) {
    int64_t i;
    if (find_typed(g, key, &i)) return KVT_ERR_NOT_FOUND;
    if (g->kv[i].type != KVT_GGUF_STRING) return wrong_type(g, i, key, "a string", err);
    *out = g->kv[i].str;
    return KVT_OK;
}

kvt_status kvt_gguf_get_arr(const kvt_gguf *g, const char *key, kvt_gguf_arr *out, kvt_err *err) {
    int64_t i;
    if (find_typed(g, key, &i)) return KVT_ERR_NOT_FOUND;
    if (g->kv[i].type != KVT_GGUF_ARRAY) return wrong_type(g, i, key, "an array", err);
    out->type = g->kv[i].arr_type;
    out->n = g->kv[i].arr_n;
    out->data = out->type == KVT_GGUF_STRING ? NULL : g->kv[i].value;
    out->kv_index = i;
    return KVT_OK;
}

kvt_str kvt_gguf_arr_str(const kvt_gguf *g, const kvt_gguf_arr *arr, uint64_t i) {
    kvt_str s = {"", 0};
    const gguf_kv *kv = &g->kv[arr->kv_index];
    if (!kv->str_offsets || i >= kv->arr_n) return s;
    const uint8_t *p = g->base + kv->str_offsets[i];
    uint64_t len;
    memcpy(&len, p, 8);
    s.ptr = (const char *)p + 8;
    s.len = len;
    return s;
}

int64_t kvt_gguf_n_tensors(const kvt_gguf *g) { return g->n_tensors; }
const kvt_gguf_tensor *kvt_gguf_tensor_at(const kvt_gguf *g, int64_t i) { return &g->tensors[i]; }

const kvt_gguf_tensor *kvt_gguf_find_tensor(const kvt_gguf *g, const char *name) {
    for (int64_t i = 0; i < g->n_tensors; i++) {
        if (kvt_str_eq(g->tensors[i].name, name)) return &g->tensors[i];
    }
    return NULL;
}

// LLAMA_FTYPE_* numbers and names (llama.h, llama-model-loader.cpp).
static const struct {
    uint32_t ftype;
    const char *name;
} k_ftype_names[] = {
    {0, "all F32"},       {1, "F16"},           {2, "Q4_0"},          {3, "Q4_1"},          {7, "Q8_0"},
    {8, "Q5_0"},          {9, "Q5_1"},          {10, "Q2_K - Medium"}, {11, "Q3_K - Small"}, {12, "Q3_K - Medium"},
    {13, "Q3_K - Large"}, {14, "Q4_K - Small"}, {15, "Q4_K - Medium"}, {16, "Q5_K - Small"}, {17, "Q5_K - Medium"},
    {18, "Q6_K"},         {19, "IQ2_XXS - 2.0625 bpw"}, {20, "IQ2_XS - 2.3125 bpw"}, {21, "Q2_K - Small"},
    {22, "IQ3_XS - 3.3 bpw"}, {23, "IQ3_XXS - 3.0625 bpw"}, {24, "IQ1_S - 1.5625 bpw"}, {25, "IQ4_NL - 4.5 bpw"},
    {26, "IQ3_S - 3.4375 bpw"}, {27, "IQ3_S mix - 3.66 bpw"}, {28, "IQ2_S - 2.5 bpw"}, {29, "IQ2_M - 2.7 bpw"},
    {30, "IQ4_XS - 4.25 bpw"}, {31, "IQ1_M - 1.75 bpw"}, {32, "BF16"}, {36, "TQ1_0 - 1.69 bpw ternary"},
    {37, "TQ2_0 - 2.06 bpw ternary"}, {38, "MXFP4 MoE"},
};

const char *kvt_gguf_ftype_name(uint32_t ftype) {
    for (size_t i = 0; i < sizeof k_ftype_names / sizeof k_ftype_names[0]; i++) {
        if (k_ftype_names[i].ftype == ftype) return k_ftype_names[i].name;
    }
    return NULL;
}

uint32_t kvt_gguf_ftype_guess(uint32_t tensor_type) {
    // GGUF tensor type ids -> file type: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K,
    // and BF16 (30)
    static const uint32_t k_guess[] = {0, 1, 2, 3, UINT32_MAX, UINT32_MAX, 8, 9, 7, UINT32_MAX, 10, 12, 15, 17, 18};
    if (tensor_type < sizeof k_guess / sizeof k_guess[0]) return k_guess[tensor_type];
    return tensor_type == 30 ? 32 : UINT32_MAX;
}
