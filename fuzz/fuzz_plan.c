// fuzz_plan.c - fuzz target for the planner's JSON readers: the profile (`--profile FILE`,
// kvt_profile_parse) and the plan file (`--plan FILE`, kvt_plan_parse). Each input, NUL-terminated,
// goes to both. A plan that loads is then applied (kvt_plan_apply, what --plan does with it) and
// written back as JSON, which must parse again to the same KV settings; a profile that loads is
// written back and must parse again too (a file the program writes is one it reads).
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/plan/plan.h"
#include "../src/plan/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *text, const kvt_err *err) {
    fprintf(stderr, "fuzz_plan: %s: %s\n--- written:\n%s\n", what, err ? err->msg : "", text ? text : "");
    abort();
}

// text written by fn(obj, f), NUL-terminated (caller frees)
static char *written(void (*fn)(const void *, FILE *), const void *obj) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return NULL;
    fn(obj, f);
    fclose(f);
    return buf;
}

static void plan_write(const void *p, FILE *f) { kvt_plan_write_json(p, f); }
static void profile_write(const void *p, FILE *f) { kvt_profile_write(p, f); }

static void check_plan(const char *text) {
    static kvt_plan pl, back; // ~150 KiB each (candidates): not on the stack
    kvt_err err = {0};
    if (kvt_plan_parse(text, &pl, &err)) return;
    kvt_kv_settings kv = {0}, kv2 = {0};
    kvt_plan_apply(&pl, &kv);
    char gran[32];
    kvt_plan_granularity_str(pl.kv_group_heads, 8, gran, sizeof gran);
    int32_t g;
    if (!kvt_plan_granularity_parse(gran, &g)) fail("plan: granularity string not read back", gran, NULL);
    char *out = written(plan_write, &pl);
    if (!out) return;
    if (kvt_plan_parse(out, &back, &err)) fail("plan written back does not parse", out, &err);
    kvt_plan_apply(&back, &kv2);
    if (kv.fast_bytes != kv2.fast_bytes || kv.host_bytes != kv2.host_bytes || kv.disk_bytes != kv2.disk_bytes ||
        kv.block_tokens != kv2.block_tokens || kv.group_heads != kv2.group_heads || kv.vram_bytes != kv2.vram_bytes ||
        strcmp(pl.model_shape, back.model_shape))
        fail("plan written back reads differently", out, NULL);
    free(out);
}

static void check_profile(const char *text) {
    static kvt_profile p, back;
    kvt_err err = {0};
    if (kvt_profile_parse(text, &p, &err)) return;
    char *out = written(profile_write, &p);
    if (!out) return;
    if (kvt_profile_parse(out, &back, &err)) fail("profile written back does not parse", out, &err);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    check_profile(text);
    check_plan(text);
    free(text);
    return 0;
}
