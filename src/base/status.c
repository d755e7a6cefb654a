#include "status.h"

#include <stdio.h>
#include <string.h>

const char *kvt_status_str(kvt_status st) {
    switch (st) {
    case KVT_OK: return "ok";
    case KVT_ERR_INVALID_ARG: return "invalid argument";
    case KVT_ERR_IO: return "i/o error";
    case KVT_ERR_FORMAT: return "format error";
    case KVT_ERR_UNSUPPORTED: return "unsupported";
    case KVT_ERR_NOMEM: return "out of memory";
    case KVT_ERR_BUDGET: return "over budget";
    case KVT_ERR_CHECKSUM: return "checksum mismatch";
    case KVT_ERR_NOT_FOUND: return "not found";
    case KVT_ERR_CANCELLED: return "cancelled";
    case KVT_STATUS_COUNT: break;
    }
    return "unknown status";
}

kvt_status kvt_errorf(kvt_err *err, kvt_status st, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = st;
    }
    return st;
}

void kvt_err_prefix(kvt_err *err, const char *prefix) {
    if (!err) return;
    char tmp[KVT_ERR_MSG_MAX];
    memcpy(tmp, err->msg, sizeof tmp);
    tmp[sizeof tmp - 1] = 0;
    // the combined message is cut at KVT_ERR_MSG_MAX - 1 bytes
    size_t n = (size_t)snprintf(err->msg, sizeof err->msg, "%s: ", prefix);
    if (n < sizeof err->msg) snprintf(err->msg + n, sizeof err->msg - n, "%.*s", (int)(sizeof err->msg - n - 1), tmp);
}
