// json.h - a minimal streaming JSON writer to a FILE*.
//
// Usage: kvt_json j; kvt_json_init(&j, stdout); kvt_json_obj_begin(&j);
// kvt_json_key(&j, "n"); kvt_json_int(&j, 3); kvt_json_obj_end(&j);
// Commas are inserted automatically; strings are escaped (UTF-8 passes through,
// invalid bytes and control characters are escaped as \u00XX).
#ifndef KVT_JSON_H
#define KVT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define KVT_JSON_MAX_DEPTH 32

typedef struct {
    FILE *f;
    int depth;
    bool first[KVT_JSON_MAX_DEPTH]; // no element written yet at this depth
    bool after_key;
} kvt_json;

void kvt_json_init(kvt_json *j, FILE *f);
void kvt_json_obj_begin(kvt_json *j);
void kvt_json_obj_end(kvt_json *j);
void kvt_json_arr_begin(kvt_json *j);
void kvt_json_arr_end(kvt_json *j);
void kvt_json_key(kvt_json *j, const char *key);
void kvt_json_str(kvt_json *j, const char *s);
void kvt_json_strn(kvt_json *j, const char *s, size_t n);
void kvt_json_int(kvt_json *j, int64_t v);
void kvt_json_num(kvt_json *j, double v); // non-finite values are written as null
void kvt_json_bool(kvt_json *j, bool v);
void kvt_json_null(kvt_json *j);
// Convenience: "key": value
void kvt_json_kv_int(kvt_json *j, const char *key, int64_t v);
void kvt_json_kv_num(kvt_json *j, const char *key, double v);
void kvt_json_kv_str(kvt_json *j, const char *key, const char *s);
void kvt_json_kv_bool(kvt_json *j, const char *key, bool v);

#endif
