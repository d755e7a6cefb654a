// status.h - status codes and error messages shared by every layer of kvtier.
//
// Fallible library functions return a kvt_status and, when given a non-NULL
// kvt_err*, write a one-line message naming the problem (file, tensor, offset,
// byte budget ...). Library code never exits or aborts on an expected condition.
#ifndef KVT_STATUS_H
#define KVT_STATUS_H

#include <stdarg.h>

typedef enum {
    KVT_OK = 0,
    KVT_ERR_INVALID_ARG,  // caller passed a bad value (flag, shape, id)
    KVT_ERR_IO,           // open/read/write/mmap failed
    KVT_ERR_FORMAT,       // corrupt or truncated file, bad magic, out-of-bounds offset
    KVT_ERR_UNSUPPORTED,  // valid but not handled here (tensor type, architecture)
    KVT_ERR_NOMEM,        // allocation failed
    KVT_ERR_BUDGET,       // a byte budget or context limit would be exceeded
    KVT_ERR_CHECKSUM,     // stored checksum does not match data
    KVT_ERR_NOT_FOUND,    // missing key / tensor
    KVT_ERR_CANCELLED,    // the caller's cancel check asked to stop (e.g. the client went away)
    KVT_STATUS_COUNT
} kvt_status;

// Short constant name of a status, e.g. "format error".
const char *kvt_status_str(kvt_status st);

// Error sink: callers keep one on the stack; functions fill msg on failure.
#define KVT_ERR_MSG_MAX 512
typedef struct {
    kvt_status status;
    char msg[KVT_ERR_MSG_MAX];
} kvt_err;

// Formats msg into err (if non-NULL) and returns st, so that code can write
// `return kvt_errorf(err, KVT_ERR_FORMAT, "%s: bad magic", path);`.
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
kvt_status kvt_errorf(kvt_err *err, kvt_status st, const char *fmt, ...);

// Prepends "prefix: " to err's message (err may be NULL), e.g. the file a parse error came from.
void kvt_err_prefix(kvt_err *err, const char *prefix);

#endif
