// dm_model.c - the paper's data-movement model (Eqs. 1-5); see dm_model.h.
#include "dm_model.h"

#include <stdbool.h>
#include <string.h>

// a*b and a+b on int64 with overflow detection (non-negative operands).
static bool mul_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r); }
static bool add_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_add_overflow(a, b, r); }

int64_t kvt_dm_token_bytes(int32_t n_layer, int64_t kv_layer, int64_t mem) {
    if (kv_layer <= 0 || n_layer <= 0) return 0;
    int64_t fit = mem / kv_layer; // Eq. 1
    if (fit >= n_layer) return 0;
    int64_t moved;
    return mul_ok(n_layer - fit, kv_layer, &moved) ? moved : -1; // Eq. 2
}

int64_t kvt_dm_layerwise_bytes(int32_t n_layer, int64_t kv_layer0, int64_t kv_layer_growth, int64_t n_tokens, int64_t mem) {
    int64_t total = 0;
    for (int64_t t = 0; t < n_tokens; t++) {
        int64_t kv, g, moved;
        if (!mul_ok(t, kv_layer_growth, &g) || !add_ok(kv_layer0, g, &kv)) return -1;
        if ((moved = kvt_dm_token_bytes(n_layer, kv, mem)) < 0 || !add_ok(total, moved, &total)) return -1;
    }
    return total;
}

kvt_status kvt_dm_model_eval(const kvt_dm_params *p, kvt_dm_result *out, kvt_err *err) {
    memset(out, 0, sizeof *out);
    if (p->n_layer < 1 || p->n_layer > 100000) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "n_layer %d out of range", p->n_layer);
    if (p->kv_token_layer < 1) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV bytes per token and layer must be >= 1");
    if (p->beams < 1 || p->beams > (1 << 20)) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beams %lld out of range 1..%d", (long long)p->beams, 1 << 20);
    if (p->step < 1) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "step must be >= 1 token");
    if (p->gen < 1 || p->gen > (1 << 26) || p->prompt < 0 || p->prompt > (1 << 26)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "prompt (%lld) and gen (%lld) must be in 0..2^26 and 1..2^26 tokens",
                          (long long)p->prompt, (long long)p->gen);
    }
    if (p->mem < 1) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "KV memory budget must be >= 1 byte");
    const int64_t L = p->n_layer, end = p->prompt + p->gen;
    int64_t kv_beam_tok, kv_all_tok, kv_layer_tok, top;
    // The largest product formed below is beams * end * kv_token_layer * n_layer.
    if (!mul_ok(p->kv_token_layer, L, &kv_beam_tok) || !mul_ok(kv_beam_tok, p->beams, &kv_all_tok) ||
        !mul_ok(kv_all_tok, end, &top) || !mul_ok(p->kv_token_layer, p->beams, &kv_layer_tok)) {
        return kvt_errorf(err, KVT_ERR_INVALID_ARG, "sizes overflow 64-bit bytes");
    }
    // Baseline, Eqs. 1-3.
    out->token_by_token_bytes =
        kvt_dm_layerwise_bytes(p->n_layer, p->prompt * kv_layer_tok, kv_layer_tok, p->gen, p->mem);
    if (out->token_by_token_bytes < 0) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "baseline bytes overflow 64 bits");
    out->offload_from = -1;
    for (int64_t s = p->prompt; s < end; s++) {
        if (kvt_dm_token_bytes(p->n_layer, s * kv_layer_tok, p->mem) > 0) {
            out->offload_from = s;
            break;
        }
    }
    // Beam scheduling, Eqs. 4-5 (Figure 7 convention and as printed).
    out->n_steps = (p->gen + p->step - 1) / p->step;
    for (int64_t i = 0; i < out->n_steps; i++) {
        int64_t done = (i + 1) * p->step < p->gen ? (i + 1) * p->step : p->gen;
        int64_t s_end = p->prompt + done;
        int64_t beam = s_end * kv_beam_tok, all = beam * p->beams; // bounded by top
        if (beam > p->mem) {
            return kvt_errorf(err, KVT_ERR_BUDGET,
                              "one beam's KV at the end of step %lld (%lld tokens, %lld bytes) exceeds the KV budget "
                              "of %lld bytes; beam scheduling needs at least one beam per group",
                              (long long)i, (long long)s_end, (long long)beam, (long long)p->mem);
        }
        if (all > p->mem) {
            if (!add_ok(out->beam_bytes, all, &out->beam_bytes)) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam scheduling bytes beyond 64 bits");
            out->steps_offloaded++;
        }
        if (i < p->gen / p->step) {
            int64_t eq5 = (i * p->step + p->prompt) * kv_beam_tok * p->beams;
            if (!add_ok(out->beam_eq5_bytes, eq5, &out->beam_eq5_bytes)) return kvt_errorf(err, KVT_ERR_INVALID_ARG, "beam scheduling bytes beyond 64 bits");
        }
    }
    int64_t beam_last = end * kv_beam_tok;
    out->beams_per_group_last = p->mem / beam_last < p->beams ? p->mem / beam_last : p->beams;
    out->groups_last = (p->beams + out->beams_per_group_last - 1) / out->beams_per_group_last;
    return KVT_OK;
}
