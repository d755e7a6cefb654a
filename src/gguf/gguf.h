// gguf.h - bounds-checked GGUF (v2, v3) reader over a memory map, and a writer.
//
// Every header field, string length, array count, tensor shape, offset, size
// and alignment is validated before use: a truncated or hostile file gives
// KVT_ERR_FORMAT with a message naming the file, the field and the offset.
// Strings returned point into the mapping (not NUL-terminated); they live as
// long as the kvt_gguf handle.
#ifndef KVT_GGUF_H
#define KVT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../kernels/dtype.h"

typedef enum {
    KVT_GGUF_U8 = 0,
    KVT_GGUF_I8 = 1,
    KVT_GGUF_U16 = 2,
    KVT_GGUF_I16 = 3,
    KVT_GGUF_U32 = 4,
    KVT_GGUF_I32 = 5,
    KVT_GGUF_F32 = 6,
    KVT_GGUF_BOOL = 7,
    KVT_GGUF_STRING = 8,
    KVT_GGUF_ARRAY = 9,
    KVT_GGUF_U64 = 10,
    KVT_GGUF_I64 = 11,
    KVT_GGUF_F64 = 12,
    KVT_GGUF_TYPE_COUNT
} kvt_gguf_type;

typedef struct {
    const char *ptr; // into the mapping, not NUL-terminated
    uint64_t len;    // bytes
} kvt_str;

#define KVT_MAX_DIMS 4

typedef struct {
    kvt_str name;
    kvt_type type;
    uint32_t n_dims;
    int64_t ne[KVT_MAX_DIMS]; // elements per dim, ne[0] fastest; unused dims are 1
    uint64_t offset;          // bytes from the start of the data section
    uint64_t size;            // bytes
    const void *data;         // into the mapping
} kvt_gguf_tensor;

typedef struct kvt_gguf kvt_gguf;

// Maps and parses `path`. On success *out owns the mapping; free with kvt_gguf_free.
kvt_status kvt_gguf_open(const char *path, kvt_gguf **out, kvt_err *err);
// Parses a caller-owned buffer (not copied; must outlive the handle). `name`
// is used in messages. Used by the fuzzer and tests.
kvt_status kvt_gguf_open_buffer(const void *buf, size_t size, const char *name,
                                kvt_gguf **out, kvt_err *err);
void kvt_gguf_free(kvt_gguf *g);

const char *kvt_gguf_path(const kvt_gguf *g);
// True when the tensor data is a read-only mapping of the file (kvt_gguf_open), false for a buffer.
bool kvt_gguf_is_mapped(const kvt_gguf *g);
uint32_t kvt_gguf_version(const kvt_gguf *g);
size_t kvt_gguf_file_size(const kvt_gguf *g);
uint64_t kvt_gguf_alignment(const kvt_gguf *g);

// --- metadata ---------------------------------------------------------------
int64_t kvt_gguf_n_kv(const kvt_gguf *g);
// Index of a key, or -1.
int64_t kvt_gguf_find_key(const kvt_gguf *g, const char *key);
kvt_str kvt_gguf_key(const kvt_gguf *g, int64_t i);
kvt_gguf_type kvt_gguf_kv_type(const kvt_gguf *g, int64_t i);
// llama.cpp's short name of a kv type ("u32", "str", "arr", "f32", ...); "unknown" out of range. A static string.
const char *kvt_gguf_type_name(kvt_gguf_type t);
// True for the integer kv types (u8 .. i32, u64, i64): what kvt_gguf_get_i64 reads.
bool kvt_gguf_type_is_int(kvt_gguf_type t);

// Typed getters by key name. Integers accept any integer kv type whose value
// fits; floats accept F32/F64. They return KVT_ERR_NOT_FOUND if the key is
// missing (message left empty: callers decide if that is an error) and
// KVT_ERR_FORMAT if it has another type (the message names the key, the type
// found and the type expected).
kvt_status kvt_gguf_get_i64(const kvt_gguf *g, const char *key, int64_t *out, kvt_err *err);
kvt_status kvt_gguf_get_u32(const kvt_gguf *g, const char *key, uint32_t *out, kvt_err *err);
kvt_status kvt_gguf_get_f32(const kvt_gguf *g, const char *key, float *out, kvt_err *err);
kvt_status kvt_gguf_get_bool(const kvt_gguf *g, const char *key, bool *out, kvt_err *err);
kvt_status kvt_gguf_get_str(const kvt_gguf *g, const char *key, kvt_str *out, kvt_err *err);

// Arrays: element type and count; for numeric element types `data` points at
// n packed little-endian values in the mapping (may be unaligned: memcpy).
typedef struct {
    kvt_gguf_type type;
    uint64_t n;
    const void *data;  // numeric arrays only, else NULL
    int64_t kv_index;  // for kvt_gguf_arr_str
} kvt_gguf_arr;
kvt_status kvt_gguf_get_arr(const kvt_gguf *g, const char *key, kvt_gguf_arr *out, kvt_err *err);
// i-th string of a string array (index table built at open, O(1)).
kvt_str kvt_gguf_arr_str(const kvt_gguf *g, const kvt_gguf_arr *arr, uint64_t i);

// Compares a kvt_str with a C string.
bool kvt_str_eq(kvt_str s, const char *c);

// llama.cpp's name of a `general.file_type` value (its LLAMA_FTYPE_* numbers: 15 -> "Q4_K - Medium", 1 -> "F16"),
// as llama-bench prints it; NULL for a number it does not define. A static string.
const char *kvt_gguf_ftype_name(uint32_t ftype);
// The `general.file_type` a file whose metadata lacks it would be guessed to have from its most common tensor
// type (llama.cpp's rule: q4_K -> Q4_K_M, q3_K -> Q3_K_M, ...); UINT32_MAX when that type has no file type.
uint32_t kvt_gguf_ftype_guess(uint32_t tensor_type);

// --- tensors ----------------------------------------------------------------
int64_t kvt_gguf_n_tensors(const kvt_gguf *g);
const kvt_gguf_tensor *kvt_gguf_tensor_at(const kvt_gguf *g, int64_t i);
// Tensor by name, or NULL.
const kvt_gguf_tensor *kvt_gguf_find_tensor(const kvt_gguf *g, const char *name);

// --- writer -----------------------------------------------------------------
// Builds a GGUF v3 file in memory-light streaming fashion: add all kv pairs
// and tensor infos, then write; tensor data is supplied by pointer and copied
// at write time.
typedef struct kvt_gguf_writer kvt_gguf_writer;
kvt_gguf_writer *kvt_gguf_writer_init(void);
void kvt_gguf_writer_free(kvt_gguf_writer *w);
void kvt_gguf_writer_set_u32(kvt_gguf_writer *w, const char *key, uint32_t v);
void kvt_gguf_writer_set_i32(kvt_gguf_writer *w, const char *key, int32_t v);
void kvt_gguf_writer_set_f32(kvt_gguf_writer *w, const char *key, float v);
void kvt_gguf_writer_set_bool(kvt_gguf_writer *w, const char *key, bool v);
void kvt_gguf_writer_set_str(kvt_gguf_writer *w, const char *key, const char *v);
// Copies a raw kv pair (any type, arrays included) from a reader.
void kvt_gguf_writer_copy_kv(kvt_gguf_writer *w, const kvt_gguf *src, int64_t kv_index);
// Numeric array of n elements of `type`, copied.
void kvt_gguf_writer_set_arr(kvt_gguf_writer *w, const char *key, kvt_gguf_type type,
                             const void *data, uint64_t n);
// String array, copied.
void kvt_gguf_writer_set_arr_str(kvt_gguf_writer *w, const char *key, const char *const *v,
                                 uint64_t n);
// Adds a tensor; `data` (kvt_row_size(type, ne[0]) * rows bytes) must stay
// valid until kvt_gguf_writer_write returns.
void kvt_gguf_writer_add_tensor(kvt_gguf_writer *w, const char *name, kvt_type type,
                                uint32_t n_dims, const int64_t *ne, const void *data);
kvt_status kvt_gguf_writer_write(kvt_gguf_writer *w, const char *path, kvt_err *err);

// Streaming write: tensors may be added with data == NULL. For each tensor i
// in order, fill(user, i, buf, size, err) must store its `size` bytes (rows of
// kvt_row_size(type, ne[0]) bytes) into buf, a buffer reused for every tensor
// and sized for the largest, so peak memory is one tensor. A non-OK status from
// fill aborts the write and removes the partial file.
typedef kvt_status (*kvt_gguf_fill_fn)(void *user, int64_t index, void *buf, uint64_t size, kvt_err *err);
kvt_status kvt_gguf_writer_write_stream(kvt_gguf_writer *w, const char *path, kvt_gguf_fill_fn fill, void *user,
                                        kvt_err *err);

#endif
