#include "dtype.h"

#include <strings.h>

typedef struct {
    const char *name;
    int64_t blck; // elements per block
    int64_t size; // bytes per block
    bool supported;
} type_layout;

// Indexed by GGUF type id. Layouts of types we do not compute with are kept so
// that a file using them is still parsed and refused with a precise message.
static const type_layout k_layouts[KVT_TYPE_COUNT] = {
    [0] = {"f32", 1, 4, true},
    [1] = {"f16", 1, 2, true},
    [2] = {"q4_0", 32, 18, true},
    [3] = {"q4_1", 32, 20, true},
    [6] = {"q5_0", 32, 22, true},
    [7] = {"q5_1", 32, 24, true},
    [8] = {"q8_0", 32, 34, true},
    [9] = {"q8_1", 32, 36, false},
    [10] = {"q2_K", 256, 84, true},
    [11] = {"q3_K", 256, 110, true},
    [12] = {"q4_K", 256, 144, true},
    [13] = {"q5_K", 256, 176, true},
    [14] = {"q6_K", 256, 210, true},
    [15] = {"q8_K", 256, 292, false},
    [16] = {"iq2_xxs", 256, 66, false},
    [17] = {"iq2_xs", 256, 74, false},
    [18] = {"iq3_xxs", 256, 98, false},
    [19] = {"iq1_s", 256, 50, false},
    [20] = {"iq4_nl", 32, 18, true},
    [21] = {"iq3_s", 256, 110, false},
    [22] = {"iq2_s", 256, 82, false},
    [23] = {"iq4_xs", 256, 136, true},
    [24] = {"i8", 1, 1, false},
    [25] = {"i16", 1, 2, false},
    [26] = {"i32", 1, 4, false},
    [27] = {"i64", 1, 8, false},
    [28] = {"f64", 1, 8, false},
    [29] = {"iq1_m", 256, 56, false},
    [30] = {"bf16", 1, 2, true},
    [34] = {"tq1_0", 256, 54, false},
    [35] = {"tq2_0", 256, 66, false},
    [39] = {"mxfp4", 32, 17, false},
    // kvtier's in-memory layouts: computed with, never accepted from a file
    [KVT_TYPE_Q4_K_X8] = {"q4_K_x8", 256, 144, false},
    [KVT_TYPE_Q4_1_X8] = {"q4_1_x8", 32, 20, false},
    [KVT_TYPE_Q8_0_X8] = {"q8_0_x8", 32, 34, false},
    [KVT_TYPE_F16_X16] = {"f16_x16", 1, 2, false},
    [KVT_TYPE_Q6_K_R] = {"q6_K_r", 256, 210, false},
    [KVT_TYPE_Q5_K_X8] = {"q5_K_x8", 256, 176, false},
    [KVT_TYPE_Q4_0_X8] = {"q4_0_x8", 32, 18, false},
    [KVT_TYPE_Q5_0_X8] = {"q5_0_x8", 32, 22, false},
    [KVT_TYPE_BF16_X16] = {"bf16_x16", 1, 2, false},
};

const char *kvt_type_name(kvt_type t) {
    if ((unsigned)t < KVT_TYPE_COUNT && k_layouts[t].name) return k_layouts[t].name;
    return "?";
}

bool kvt_type_from_name(const char *name, kvt_type *out) {
    for (int i = 0; i < KVT_TYPE_COUNT; i++) {
        if (k_layouts[i].name && strcasecmp(k_layouts[i].name, name) == 0) {
            *out = (kvt_type)i;
            return true;
        }
    }
    return false;
}

bool kvt_type_layout(uint32_t id, int64_t *blck, int64_t *size) {
    if (id >= KVT_TYPE_GGUF_END || !k_layouts[id].name) return false;
    *blck = k_layouts[id].blck;
    *size = k_layouts[id].size;
    return true;
}

bool kvt_type_supported(kvt_type t) {
    return (unsigned)t < KVT_TYPE_COUNT && k_layouts[t].supported;
}

int64_t kvt_row_size(kvt_type t, int64_t n) {
    if ((unsigned)t >= KVT_TYPE_COUNT || !k_layouts[t].name) return -1;
    const type_layout *l = &k_layouts[t];
    if (n < 0 || n % l->blck) return -1;
    return n / l->blck * l->size;
}
