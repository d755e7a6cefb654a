// common.h - what several subcommands share: loading a model with its
// tokenizer, and the engine flags (-t, -c, --kv-type, --ubatch).
#ifndef KVT_CLI_COMMON_H
#define KVT_CLI_COMMON_H

#include <stdbool.h>

#include "../exec/context.h"
#include "../model/model.h"
#include "../model/tokenizer.h"
#include "../sched/generate.h"
#include "../base/json.h"
#include "args.h"

// Loads model (and its tokenizer when tok != NULL); prints one error line on failure.
bool cli_load_model(const char *cmd, const char *path, bool vocab_only, kvt_model **model, kvt_tokenizer **tok);

// Parses an engine flag into p if `flag` is one (-t, -c, --ctx-size, --kv-type, --ubatch, --kv-block);
// returns 1 if consumed, 0 if not an engine flag, -1 on a bad value (message printed).
int cli_engine_flag(kvt_args *a, const char *flag, kvt_context_params *p);
// Model and prompt of the commands that run a prompt (generate, beam) plus the engine flags.
typedef struct {
    const char *model_path;  // -m, --model
    const char *prompt;      // -p, --prompt
    const char *prompt_file; // -f, --file
    bool ctx_given;          // -c / --ctx-size was given
    bool no_progress;        // --no-progress
    bool no_escape;          // --no-escape (-e / --escape, the default: escapes of -p processed, as llama.cpp's -e)
} cli_input;
// Processes llama.cpp's escapes (common string_process_escapes) in s[0..len) in place: \n \r \t \' \" \\ and \xHH
// (two hex digits); any other backslash pair, and a backslash that ends the text, stay. Returns the new length.
size_t cli_process_escapes(char *s, size_t len);
// Consumes -m, -p, -f, -e / --escape / --no-escape and the engine flags (cli_engine_flag); returns 1 if consumed, 0
// if not one of them, -1 on a bad value or on -p together with -f (message printed).
int cli_input_flag(kvt_args *a, const char *flag, cli_input *in, kvt_context_params *p);
// The prompt text (-p with its escapes processed unless --no-escape, or the contents of -f as they are): *text and
// *len; *owned is malloc'ed when a file was read or escapes processed (free it). false with a message when no prompt was given or the file cannot be read.
bool cli_input_prompt(const char *cmd, const cli_input *in, const char **text, size_t *len, char **owned);
// The chat template of a model file (kvt_chat_template_from_gguf; name: --chat-template's, may be NULL): *t, and
// with g non-NULL the opened file in *g (the caller frees both). A file without tokenizer.chat_template gets chatml,
// said on stderr when note_fallback. false with "kvtier CMD: ..." printed (nothing to free).
typedef struct kvt_chat_template kvt_chat_template;
bool cli_chat_template(const char *cmd, const char *model_path, const char *name, bool note_fallback, kvt_gguf **g,
                       kvt_chat_template **t);
// What the sampling flags gather beside gp: the logit biases of -l / --logit-bias (at most CLI_MAX_LOGIT_BIAS; gp's
// sampling points into v) and the DRY breakers of --dry-sequence-breaker (argv's strings; dry_given: the flag was
// seen, so llama.cpp's default set is replaced; "none" empties it), whose table cli_dry_build makes. Free with
// cli_sampling_args_free.
#define CLI_MAX_LOGIT_BIAS 256
typedef struct {
    kvt_logit_bias v[CLI_MAX_LOGIT_BIAS];
    int32_t n;
    const char **dry;   // [n_dry] malloc'd
    int32_t n_dry;
    bool dry_given;
    kvt_dry_breakers *dry_table;
    // --grammar TEXT, --grammar-file FILE, -j / --json-schema TEXT, -jf / --json-schema-file FILE (argv's strings; the
    // last given of the four wins, as llama.cpp's), compiled by cli_grammar_build
    const char *grammar, *grammar_file, *schema, *schema_file;
    kvt_grammar *gram;
    kvt_grammar_vocab *gvocab;
} cli_sampling_args;
void cli_sampling_args_free(cli_sampling_args *sa);
// Parses a sampling flag into gp if `flag` is one (--temp, --seed or -s, --top-k, --top-p, --min-p, --top-nsigma,
// --min-keep, --typical, --xtc-probability, --xtc-threshold, --dynatemp-range, --dynatemp-exp, --mirostat, --mirostat-ent,
// --mirostat-lr, --repeat-penalty, --frequency-penalty, --presence-penalty, --repeat-last-n, --dry-multiplier,
// --dry-base, --dry-allowed-length, --dry-penalty-last-n, --dry-sequence-breaker, --adaptive-target, --adaptive-decay,
// --ignore-eos, -l / --logit-bias, --grammar, --grammar-file, -j / --json-schema, -jf / --json-schema-file into
// sa, which must outlive gp's use); returns 1 if consumed, 0 if not one of them, -1 on a bad value (message printed).
int cli_sampling_flag(kvt_args *a, const char *flag, kvt_generate_params *gp, cli_sampling_args *sa);
// When gp's DRY acts: its breakers' table over tok into sa (llama.cpp's default "\n", ":", "\"", "*" unless
// --dry-sequence-breaker was given; escapes processed as -p's unless no_escape), gp->sampling pointing at it, and its
// window bounded by n_ctx. false with a message printed.
bool cli_dry_build(const char *cmd, const kvt_tokenizer *tok, int64_t n_ctx, bool no_escape, kvt_generate_params *gp,
                   cli_sampling_args *sa);
// When a grammar flag was given: the grammar (a JSON schema converted: needs libjansson) compiled over tok's vocabulary
// into sa, gp->sampling pointing at it. false with a message printed (the flag, and the grammar's line and column).
bool cli_grammar_build(const char *cmd, const kvt_tokenizer *tok, kvt_generate_params *gp, cli_sampling_args *sa);
// --ignore-eos (gp->stop_at_eog false): gp's logit biases followed by a ban of every end-of-generation token
// (kvt_logit_bias_ban_eog, as llama-cli's --ignore-eos) in *owned (the caller frees it; NULL when nothing was added);
// gp->sampling points into it. false with a message printed.
bool cli_ban_eog(const char *cmd, const kvt_tokenizer *tok, kvt_generate_params *gp, kvt_logit_bias **owned);
// false (message printed) when a logit bias names a token outside the model's n_vocab.
bool cli_check_logit_bias(const char *cmd, const cli_sampling_args *lb, int32_t n_vocab);
// Help line of the prompt flags' escapes.
#define CLI_ESCAPE_HELP                                                                                                \
    "  -e, --no-escape      -p's \\n \\t \\\\ \\xHH ... are processed (-e, the default, as llama.cpp's) or taken as\n" \
    "                       they are; -f's file is read as it is\n"
// Help text of the sampling flags.
#define CLI_SAMPLING_HELP                                                                                              \
    "  --temp T             temperature, 0 = greedy (default 0.8)\n"                                                  \
    "  --seed S, -s S       sampling seed (default 1)\n"                                                              \
    "  --top-k K            keep the K likeliest tokens (default 40, 0 = all)\n"                                       \
    "  --top-p P, --min-p P nucleus (default 0.95) and min-p (default 0.05) cut-offs\n"                               \
    "  --min-keep N         top-p, min-p, typical-p and XTC keep at least N candidates (default 0)\n"                 \
    "  --top-nsigma N       keep the logits within N standard deviations of the largest (llama.cpp's top-n-sigma,\n" \
    "                       before top-k; default -1 = off; also --top-n-sigma)\n"                                     \
    "  --typical P          llama.cpp's locally typical sampling after top-k (default 1 = off; also --typical-p)\n"     \
    "  --xtc-probability P, --xtc-threshold T   llama.cpp's XTC after min-p (defaults 0 = off, 0.1)\n"                  \
    "  --dynatemp-range R, --dynatemp-exp E     llama.cpp's dynamic temperature (defaults 0 = off, 1)\n"                 \
    "  --mirostat N         llama.cpp's mirostat 1 or 2 (0 = off), in place of the penalties and cuts; its target\n"  \
    "                       --mirostat-ent TAU (default 5) and rate --mirostat-lr ETA (default 0.1)\n"                \
    "  --repeat-penalty R, --frequency-penalty F, --presence-penalty P\n"                                            \
    "                       llama.cpp's penalties over the last --repeat-last-n N tokens (defaults 1, 0, 0; N 64)\n" \
    "  --dry-multiplier M   llama.cpp's DRY: a token that would extend a repetition of the last --dry-penalty-last-n\n"\
    "                       N tokens (default 64) beyond --dry-allowed-length L (default 2) loses M x B ^ (length -\n" \
    "                       L) from its logit, B --dry-base (default 1.75, at least 1); default M 0 = off\n"          \
    "  --dry-sequence-breaker S  a string that ends a repetition (repeatable; replaces llama.cpp's default \\n : \" *;\n"\
    "                       \"none\": no breaker; escapes as -p's)\n"                                                 \
    "  --adaptive-target P  llama.cpp's adaptive-p in place of the draw: tokens near probability P (0..1; default -1\n"\
    "                       = off), P moving with the chosen tokens' average, decaying by --adaptive-decay D (0.9)\n" \
    "  -l, --logit-bias TOKEN_ID(+/-)BIAS   add BIAS to a token's logit first (llama.cpp's form: 15043+1, 15043-inf\n"   \
    "                       bans it); repeatable, at most 256\n"                                                        \
    "  --ignore-eos         ban end-of-generation tokens (llama.cpp's -inf logit bias): exactly -n tokens\n"         \
    "  --grammar GBNF, --grammar-file FILE   the answer follows this grammar (llama.cpp's GBNF format)\n"            \
    "  -j, --json-schema SCHEMA, -jf, --json-schema-file FILE   the answer is JSON following this schema ({}: any\n"  \
    "                       object; converted to a grammar as llama.cpp's json_schema_to_grammar)\n"
// Prefill progress on stderr ("kvtier: prefill DONE/TOTAL tokens, X tok/s", one line rewritten in place,
// erased when done): the first micro-batch, then at most every 0.25 s. cli_progress_on sets cp->progress
// when stderr is a terminal and on is true (callers pass false for --no-progress and --json).
typedef struct {
    double t0_ms, last_ms; // start of the prefill (set by the caller, kvt_time_ms); last print (0: none yet)
    bool shown;            // a line is on the terminal
} cli_progress;
void cli_progress_on(cli_progress *pr, kvt_context_params *cp, bool on);
// Help line of --no-progress.
#define CLI_PROGRESS_HELP "  --no-progress        no prefill progress line on stderr (shown only when stderr is a terminal)\n"

// kvt_context_init with the CLI's messages: the error on stderr ("kvtier CMD: ..."), and a warning when the
// context exceeds the model's training context (as llama.cpp warns). false on error (*ctx NULL).
bool cli_context_init(const char *cmd, const kvt_model *m, const kvt_context_params *cp, kvt_context **ctx);
// Help text of the engine flags.
extern const char *const cli_engine_help;

// Writes "kv": {peak_bytes {fast, host, disk}, budget_bytes, moved_bytes {SRC_to_DST}, transfers {SRC_to_DST},
// transfers_total, stall_ms, hits, misses, prefetches, block_bytes} of the context's KV cache.
void cli_json_kv_stats(kvt_json *j, kvt_context *ctx);
// Writes "PREFIXmoved_bytes" and "PREFIXtransfers" {SRC_to_DST: bytes / transfers} of the KV statistics to, less
// those of from (NULL: none), the pairs that moved something; returns the transfers in all.
int64_t cli_json_moved(kvt_json *j, const char *prefix, const kvt_kv_stats *from, const kvt_kv_stats *to);

// Writes "sparse": {mode, settings, summary_bytes, the aggregates of kvt_sparse_summarize and, with steps,
// "steps": [{pos, selected, context, kv_read_bytes, summary_read_bytes, oracle_overlap, mass_recall, stall_ms}]}
// of the context's sparse decoding; nothing when sparse mode is off.
void cli_json_sparse(kvt_json *j, kvt_context *ctx, bool steps);

// Text of ids (kvt_detokenize), whole whatever its length: malloc'ed, NUL-terminated, *len bytes; NULL when
// out of memory.
char *cli_detokenize(const kvt_tokenizer *tok, const int32_t *ids, int64_t n, int64_t *len);
// Bytes of one token (kvt_token_to_piece) into *buf (malloc'ed, grown to fit; *cap its size): the length, or
// -1 when out of memory. Pieces have no length limit (Qwen2 has tokens of hundreds of bytes).
int64_t cli_token_piece(const kvt_tokenizer *tok, int32_t id, char **buf, size_t *cap);

// Checks before any work that an output file can be created at path: not empty, not a directory, its
// folder an existing directory that this process may write. false with "kvtier CMD: FLAG: PATH: why" printed.
bool cli_check_out_path(const char *cmd, const char *flag, const char *path);

// Tokenizes text into a malloc'ed array; NULL on error (message printed).
int32_t *cli_tokenize(const char *cmd, const kvt_tokenizer *tok, const char *text, size_t len, bool add_special,
                      bool parse_special, int64_t *n);

#endif
