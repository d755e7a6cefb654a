// file.h - reading a whole file into memory.
#ifndef KVT_FILE_H
#define KVT_FILE_H

#include <stddef.h>

#include "status.h"

// Reads the file at path into *out (malloc'ed, NUL-terminated; the caller frees it); *len gets its size
// in bytes when len is non-NULL. KVT_ERR_IO (open or read failed) or KVT_ERR_NOMEM, naming the path.
kvt_status kvt_read_text(const char *path, char **out, size_t *len, kvt_err *err);

#endif
