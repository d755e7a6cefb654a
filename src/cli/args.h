// args.h - strict command-line value parsing shared by the subcommands.
//
// Every parser rejects trailing garbage and out-of-range values, printing
// "kvtier <cmd>: <flag>: <problem>" to stderr and returning false.
#ifndef KVT_ARGS_H
#define KVT_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *cmd; // subcommand name for messages
    int argc;
    char **argv;
    int i;           // index of the current flag
} kvt_args;

// True while flags remain; sets *flag to the current one and advances.
bool kvt_args_next(kvt_args *a, const char **flag);
// Value of the current flag (the next argv entry); NULL (and a message) if missing.
const char *kvt_args_value(kvt_args *a, const char *flag);
bool kvt_args_int(kvt_args *a, const char *flag, int64_t lo, int64_t hi, int64_t *out);
bool kvt_args_float(kvt_args *a, const char *flag, double lo, double hi, double *out);
// Byte sizes, one rule for every flag of every command (engine flags, plan, dm-model): a number (a fraction
// allowed) with an optional suffix, case-insensitive: K M G T and KiB MiB GiB TiB are powers of 1024,
// KB MB GB TB powers of 1000, B bytes; e.g. "512M" = 536870912, "7G" = 7 GiB, "7GB" = 7000000000.
#define KVT_BYTES_HELP                                                                                              \
    "  BYTES: 4096, 512K, 1.5M, 7G: K/M/G/T (or KiB/MiB/GiB/TiB) are powers of 1024;\n"                                \
    "         KB/MB/GB/TB are powers of 1000 (7GB = 7000000000)\n"
bool kvt_args_bytes(kvt_args *a, const char *flag, int64_t *out);
// The rule above; false on anything else (negative, garbage, past 2^63).
bool kvt_parse_bytes(const char *s, int64_t *out);
// A byte-size flag that must be positive ("--kv-fast 0" is refused).
bool kvt_args_bytes_pos(kvt_args *a, const char *flag, int64_t *out);
// Prints "kvtier <cmd>: unknown flag <flag> (see kvtier <cmd> --help)" and returns false.
bool kvt_args_unknown(kvt_args *a, const char *flag);
// Reads a whole file into a malloc'ed NUL-terminated buffer; NULL on error (message printed).
char *kvt_read_file(const char *cmd, const char *path, size_t *len);

#endif
