// file.h - reading a whole file into memory; opening a file that must be a regular one; writing one atomically.
#ifndef KVT_FILE_H
#define KVT_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "status.h"

// Reads the file at path into *out (malloc'ed, NUL-terminated; the caller frees it); *len gets its size
// in bytes when len is non-NULL. KVT_ERR_IO (open or read failed) or KVT_ERR_NOMEM, naming the path.
kvt_status kvt_read_text(const char *path, char **out, size_t *len, kvt_err *err);
// The same for an open stream (standard input, say) read to its end; name is the stream's name in messages.
// The stream is left open.
kvt_status kvt_read_stream(FILE *f, const char *name, char **out, size_t *len, kvt_err *err);

// Opens path read-only (close-on-exec) and checks that it is a regular file before anything can block: the
// open is non-blocking, so a FIFO or a device is refused at once instead of waiting for a writer. *fd gets
// the descriptor (blocking again; the caller closes it), *size the file's bytes. KVT_ERR_IO naming
// `what` and the path otherwise ("<what> <path>: cannot open: ..." / "...: not a regular file").
kvt_status kvt_file_open_regular(const char *path, const char *what, int *fd, int64_t *size, kvt_err *err);

// Writes a text file through write(ctx, f) into PATH.tmp, then renames it to path, so that path is either
// the whole new file or what it was before: on any failure (cannot create, disk full, a file size limit)
// the temporary file is removed and KVT_ERR_IO names the path and the reason.
kvt_status kvt_file_write_atomic(const char *path, void (*write)(void *ctx, FILE *f), void *ctx, kvt_err *err);

#endif
