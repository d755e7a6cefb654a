// cmd_profile.c - `kvtier profile`: measure this machine for the planner.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../plan/profile.h"
#include "commands.h"
#include "common.h"

int cmd_profile(int argc, char **argv) {
    kvt_args a = {"profile", argc, argv, 0};
    const char *out = NULL;
    kvt_profile_opts o = {"/tmp", 0, false, stderr};
    const char *flag;
    while (kvt_args_next(&a, &flag)) {
        if (!strcmp(flag, "-h") || !strcmp(flag, "--help")) {
            printf("usage: kvtier profile [-o FILE] [--dir DIR] [-t N] [--quick]\n"
                   "  measures DRAM read bandwidth, L3 size, GEMV GB/s and GEMM GFLOP/s per weight type,\n"
                   "  disk sequential read/write GB/s and 4 KiB latency with O_DIRECT in DIR (default /tmp);\n"
                   "  writes a JSON profile (units in the key names) to FILE or stdout. GPU figures (memory\n"
                   "  bandwidth, GEMM GFLOP/s, pinned H2D/D2H GB/s and latency) when a CUDA device and\n"
                   "  build/libkvtier-cuda.so (built when nvcc exists; $KVT_CUDA_LIB overrides) are present.\n"
                   "  Profiles of other machines can be written by hand (profiles/).\n"
                   "  --quick   smaller buffers and four weight types (a few seconds)\n");
            return 0;
        } else if (!strcmp(flag, "-o")) {
            if (!(out = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "--dir")) {
            if (!(o.dir = kvt_args_value(&a, flag))) return 2;
        } else if (!strcmp(flag, "-t") || !strcmp(flag, "--threads")) {
            int64_t t;
            if (!kvt_args_int(&a, flag, 1, 1024, &t)) return 2;
            o.n_threads = (int)t;
        } else if (!strcmp(flag, "--quick")) {
            o.quick = true;
        } else {
            kvt_args_unknown(&a, flag);
            return 2;
        }
    }
    // refuse a bad -o or --dir before the measurement (seconds to minutes), not after it
    if (out && !cli_check_out_path("profile", "-o", out)) return 1;
    struct stat st;
    if (stat(o.dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "kvtier profile: --dir %s: %s\n", o.dir, stat(o.dir, &st) != 0 ? strerror(errno) : "not a directory");
        return 1;
    }
    kvt_profile p;
    kvt_err err = {0};
    if (kvt_profile_measure(&o, &p, &err)) {
        fprintf(stderr, "kvtier profile: %s\n", err.msg);
        return 1;
    }
    if (out) {
        if (kvt_profile_save(&p, out, &err)) {
            fprintf(stderr, "kvtier profile: %s\n", err.msg);
            return 1;
        }
        fprintf(stderr, "wrote %s\n", out);
    } else {
        kvt_profile_write(&p, stdout);
    }
    return 0;
}
