// dtype.h - element types of tensors and KV caches, numbered as in GGUF files.
//
// Quantized types store blocks of `blck` elements in `size` bytes; a row of n
// elements (n a multiple of blck) takes n / blck * size bytes.
#ifndef KVT_DTYPE_H
#define KVT_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KVT_TYPE_F32 = 0,
    KVT_TYPE_F16 = 1,
    KVT_TYPE_Q4_0 = 2,
    KVT_TYPE_Q4_1 = 3,
    KVT_TYPE_Q5_0 = 6,
    KVT_TYPE_Q5_1 = 7,
    KVT_TYPE_Q8_0 = 8,
    KVT_TYPE_Q8_1 = 9,
    KVT_TYPE_Q2_K = 10,
    KVT_TYPE_Q3_K = 11,
    KVT_TYPE_Q4_K = 12,
    KVT_TYPE_Q5_K = 13,
    KVT_TYPE_Q6_K = 14,
    KVT_TYPE_Q8_K = 15,
    KVT_TYPE_IQ4_NL = 20,
    KVT_TYPE_IQ4_XS = 23,
    KVT_TYPE_BF16 = 30,
    KVT_TYPE_GGUF_END = 40, // ids below are GGUF's; from here kvtier's own in-memory layouts (never in a file)
    KVT_TYPE_Q4_K_X8 = 40,  // q4_K repacked at load, 8 rows interleaved (quant.h: kvt_type_repack)
    KVT_TYPE_Q4_1_X8 = 41,  // q4_1 repacked at load, 8 rows interleaved (quant.h)
    KVT_TYPE_Q8_0_X8 = 42,  // q8_0 repacked at load, 8 rows interleaved (quant.h)
    KVT_TYPE_F16_X16 = 43,  // f16 repacked at load, 16 rows interleaved per element (f16x16.h)
    KVT_TYPE_Q6_K_R = 44,   // q6_K rearranged at load within each block for the AVX2 decode (quant.h)
    KVT_TYPE_Q5_K_X8 = 45,  // q5_K repacked at load, 8 rows interleaved (quant.h)
    KVT_TYPE_Q4_0_X8 = 46,  // q4_0 repacked at load, 8 rows interleaved (quant.h)
    KVT_TYPE_Q5_0_X8 = 47,  // q5_0 repacked at load, 8 rows interleaved (quant.h)
    KVT_TYPE_BF16_X16 = 48, // bf16 repacked at load, 16 rows interleaved per element pair (bf16x16.h)
    KVT_TYPE_COUNT = 49
} kvt_type;

#define KVT_QK 32   // elements per block of Q4_0, Q4_1, Q8_0, Q8_1
#define KVT_QK_K 256 // elements per super-block of the K-quants

// Name as llama.cpp prints it ("f16", "q4_K"); "?" for ids we do not know.
const char *kvt_type_name(kvt_type t);
// Parses a name (case-insensitive, "q4_k" == "Q4_K"); returns false if unknown.
bool kvt_type_from_name(const char *name, kvt_type *out);
// Layout of any id GGUF defines (so that files with other types can still be
// parsed and their sizes validated); false for ids outside the GGUF list (kvtier's own layouts too).
bool kvt_type_layout(uint32_t id, int64_t *blck, int64_t *size);
// True if kvtier can compute with weights of this type.
bool kvt_type_supported(kvt_type t);
// Bytes of a row of n elements; -1 if n is not a multiple of the block size. (A repacked layout such as
// q4_K_x8 keeps its source type's size: a group of 8 rows takes 8 row sizes.)
int64_t kvt_row_size(kvt_type t, int64_t n);

#endif
