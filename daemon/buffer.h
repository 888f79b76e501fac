/* A growable byte buffer kept across uses, so steady-state traffic allocates nothing. */
#ifndef ISN_DAEMON_BUFFER_H
#define ISN_DAEMON_BUFFER_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *data;
    size_t len;
    size_t cap;
} byte_buffer;

/* Makes room for `extra` more bytes; false when out of memory. */
bool buffer_reserve(byte_buffer *buffer, size_t extra);
bool buffer_append(byte_buffer *buffer, const void *data, size_t len);
bool buffer_printf(byte_buffer *buffer, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the storage when it grew beyond `keep` bytes (one huge reply must not pin memory). */
void buffer_clear(byte_buffer *buffer, size_t keep);
void buffer_free(byte_buffer *buffer);

#endif
