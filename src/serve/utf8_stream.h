// utf8_stream.h - incremental UTF-8 boundary buffer for streamed text.
//
// Generated tokens are byte strings; a token can end inside a multi-byte character (byte-level
// BPE splits emoji and CJK characters across tokens). Streamed chunks must carry whole characters
// only, and JSON strings must be valid UTF-8. kvt_utf8_stream_push passes through every complete,
// valid character, holds an incomplete tail (at most 3 bytes) until the next push, and replaces
// invalid bytes by U+FFFD (one per maximal invalid subpart, as Python's "replace" does).
// Validity is RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
#ifndef KVT_UTF8_STREAM_H
#define KVT_UTF8_STREAM_H

#include <stdbool.h>
#include <stddef.h>

// Value type; zero-initialize it ({0}) before the first push. Fields are private.
typedef struct {
    unsigned char pend[4]; // held bytes of an incomplete character
    size_t n_pend;
} kvt_utf8_stream;

// Worst-case output bytes of a push of n input bytes (every byte may become a 3-byte U+FFFD).
#define KVT_UTF8_OUT_MAX(n) (3 * ((n) + 4))

// Appends to out (room for KVT_UTF8_OUT_MAX(n) bytes) the complete characters of the held bytes
// followed by in[0..n); returns the number of bytes written. Never writes a partial character.
size_t kvt_utf8_stream_push(kvt_utf8_stream *s, const char *in, size_t n, char *out);

// End of stream: writes the held incomplete bytes as one U+FFFD (at most 3 bytes into out) and
// resets the state; returns the number of bytes written (0 when nothing was held).
size_t kvt_utf8_stream_flush(kvt_utf8_stream *s, char *out);

// Number of bytes currently held back.
size_t kvt_utf8_stream_pending(const kvt_utf8_stream *s);

// Length of the valid UTF-8 character starting at s[0..n): 1-4, 0 when s[0..n) is a proper prefix
// of a valid character (more bytes needed), -k when the first k bytes are a maximal invalid subpart.
int kvt_utf8_char_len(const unsigned char *s, size_t n);

// True when s[0..n) is entirely valid UTF-8.
bool kvt_utf8_valid(const char *s, size_t n);

#endif
