// json_schema.h - a JSON schema turned into a GBNF grammar (grammar.h) that accepts exactly the JSON texts
// llama.cpp's json_schema_to_grammar accepts for the same schema: the same whitespace between tokens, the same
// string characters and escapes, the same number forms, properties in the schema's order (the required ones first
// as llama.cpp orders them, then the optional ones), so that llama-server's `json_schema` and
// `response_format` constrain kvtier's sampling to the same strings.
//
// A keyword kvtier does not implement is refused with its path (e.g. "json_schema.properties.name.pattern: ...
// not supported"), never ignored: an answer never silently escapes its schema.
#ifndef KVT_JSON_SCHEMA_H
#define KVT_JSON_SCHEMA_H

#include <jansson.h>

#include "../base/status.h"

// schema: a JSON object (or true: any JSON value). `where` names the field in messages ("json_schema",
// "response_format.json_schema.schema"). *out: the grammar's text, root rule "root", NUL-terminated, malloc'd (the
// caller frees it). KVT_ERR_INVALID_ARG naming the path and the keyword; KVT_ERR_NOMEM.
kvt_status kvt_json_schema_to_grammar(const json_t *schema, const char *where, char **out, kvt_err *err);

#endif
