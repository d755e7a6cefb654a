// numerics.h - detection of non-finite values (NaN, inf) in logits, and the diagnosis that names
// where they come from. The check is one pass over the values (no cost worth measuring next to
// the forward pass that made them); the diagnosis runs only when the check failed.
#ifndef KVT_NUMERICS_H
#define KVT_NUMERICS_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../model/model.h"

// True when every one of x[0, n) is finite.
bool kvt_all_finite(const float *x, int64_t n);

// KVT_OK when x[0, n) (logits of `what`, e.g. "the prompt's last token") are all finite. Otherwise
// KVT_ERR_FORMAT with a message naming the first non-finite value and the first tensor of the model
// that holds a NaN or an infinity (its layer, element row and column), found by dequantizing every
// weight row; if no weight does, the message says the activations overflowed.
kvt_status kvt_check_logits(const kvt_model *m, const float *x, int64_t n, const char *what, kvt_err *err);

#endif
