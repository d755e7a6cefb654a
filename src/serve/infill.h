// infill.h - llama-server's POST /infill (fill in the middle): its fields and the prompt it builds.
//
// A /infill request is a /completion request (native.h: every field but `prompt` as there, the same answer) whose
// prompt is built from
//   input_prefix   required: the text before the hole: a string, or a list mixing strings and token ids
//   input_suffix   required: the text after it, the same kinds
//   input_extra    optional: a list of {"text": string, "filename": string (default "tmp")}, other files' text
//   prompt         optional string: text the middle starts with (special tokens parsed)
// into llama-server's repository-level layout (the same tokens, so the same answer on the same file):
//   [FIM_REP]myproject\n [FIM_SEP]filename_k\n text_k ... [FIM_SEP]filename\n   (the extra context; without a
//        FIM_SEP token each chunk is led by "\n\n--- snippet ---\n\n" instead, without FIM_REP by nothing)
//   [BOS] [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]
// (the extra context before BOS, and the prompt after the prefix, where llama-server puts them).
// Prefix, suffix, the chunks' text and file names are tokenized as plain text (no special tokens, no BOS). The
// budget is llama-server's: the last 3 (b / 4) prefix tokens, the first max(0, b / 4 - 2 - prompt tokens) suffix
// tokens (b: kvt_infill_limits.n_batch, llama-server's -b), and the last n_ctx - b - 2 n_predict tokens of the extra
// context (n_predict: the server's, -1 as llama-server's default). With --spm-infill the suffix part comes first:
// extra [BOS] [FIM_SUF] suffix [FIM_PRE] prefix prompt [FIM_MID].
#ifndef KVT_INFILL_H
#define KVT_INFILL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../model/tokenizer.h"
#include "native.h"

typedef struct {
    const char *text;     // points into the request's JSON
    const char *filename; // likewise, or "tmp"
} kvt_infill_chunk;

struct kvt_infill {
    kvt_native_piece *prefix, *suffix; // as kvt_native_piece lists (a string: one piece)
    size_t n_prefix, n_suffix;
    kvt_infill_chunk *extra;
    size_t n_extra;
    const char *prompt; // "" when absent
};

typedef struct {
    int64_t n_ctx;     // positions of a sequence
    int64_t n_batch;   // llama-server's -b (2048 there by default): sets the prefix and suffix budgets
    int64_t n_predict; // the server's -n (-1: llama-server's default)
    bool spm;          // --spm-infill: suffix, prefix, middle
} kvt_infill_limits;

// The /infill fields of root into *out (owned; kvt_infill_free). 400 naming the field: input_prefix or input_suffix
// missing or not a string / list of strings and token ids, input_extra not a list of {text: string, filename:
// string}, prompt not a string.
kvt_status kvt_infill_parse(json_t *root, struct kvt_infill **out, kvt_api_error *e);
void kvt_infill_free(struct kvt_infill *in);

// Whether the vocabulary has FIM_PRE, FIM_SUF and FIM_MID; if not, false with a 501 (not_supported_error) in *e
// naming the missing ones (llama-server's answer).
bool kvt_infill_supported(const kvt_tokenizer *tok, kvt_api_error *e);
// The prompt's token ids (malloc'd, *n of them and room for one more; the caller frees), as the header says. NULL with *e filled: 501
// (not_supported_error) when the vocabulary lacks FIM_PRE, FIM_SUF or FIM_MID, 400 for a token id out of the
// vocabulary (naming the field), 500 out of memory.
int32_t *kvt_infill_prompt_ids(const struct kvt_infill *in, const kvt_tokenizer *tok, const kvt_infill_limits *lim,
                               int64_t *n, kvt_api_error *e);

#endif
