// stop.h - stop strings over streamed text.
//
// OpenAI semantics: generation ends at the first occurrence of any stop string, and the answer's
// text excludes it. "First" is the first stop string completed (the earliest end; on a tie the
// earliest start), so a stop string inside another ("m" in "me") ends the text where it completes.
// Streamed, text that might be the start of a stop string is held back until the next piece
// decides; so the concatenation of what kvt_stop_feed/kvt_stop_flush emit is the text up to that
// match, whatever the pieces. Feed complete UTF-8 characters (the output of
// kvt_utf8_stream): a held suffix always begins with a stop string's first byte, so no emitted
// piece ends inside a character.
#ifndef KVT_STOP_H
#define KVT_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "../base/status.h"

typedef struct kvt_stop kvt_stop; // opaque

// Copies n non-empty stop strings (n may be 0: nothing stops, nothing is held).
// Errors: KVT_ERR_INVALID_ARG naming stop[i] when it is empty or NULL; KVT_ERR_NOMEM.
kvt_status kvt_stop_create(const char *const *stops, size_t n, kvt_stop **out, kvt_err *err);
void kvt_stop_free(kvt_stop *s);

// Appends text[0..n). Sets *emit/*emit_len to the bytes that can be sent now (pointing into s,
// valid until the next call). Returns true when a stop string matched: *emit is then the text
// before it, *which (may be NULL) its index, and every later feed emits nothing.
// Errors (KVT_ERR_NOMEM) are reported through *err with a false return and *emit_len 0.
bool kvt_stop_feed(kvt_stop *s, const char *text, size_t n, const char **emit, size_t *emit_len, size_t *which,
                   kvt_err *err);

// End of generation without a match: the held-back bytes (none after a match).
void kvt_stop_flush(kvt_stop *s, const char **emit, size_t *emit_len);

#endif
