#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool buffer_reserve(byte_buffer *buffer, size_t extra) {
    if (buffer->cap - buffer->len >= extra) return true;
    size_t cap = buffer->cap ? buffer->cap : 256;
    while (cap - buffer->len < extra) cap *= 2;
    uint8_t *data = realloc(buffer->data, cap);
    if (!data) return false;
    buffer->data = data;
    buffer->cap = cap;
    return true;
}

bool buffer_append(byte_buffer *buffer, const void *data, size_t len) {
    if (!buffer_reserve(buffer, len)) return false;
    memcpy(buffer->data + buffer->len, data, len);
    buffer->len += len;
    return true;
}

bool buffer_printf(byte_buffer *buffer, const char *fmt, ...) {
    for (int attempt = 0; attempt < 2; attempt++) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = buffer->cap - buffer->len;
        int n = vsnprintf(room ? (char *)buffer->data + buffer->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) return false;
        if ((size_t)n < room) {
            buffer->len += (size_t)n;
            return true;
        }
        if (!buffer_reserve(buffer, (size_t)n + 1)) return false;
    }
    return false;
}

void buffer_clear(byte_buffer *buffer, size_t keep) {
    buffer->len = 0;
    if (buffer->cap > keep) {
        free(buffer->data);
        buffer->data = NULL;
        buffer->cap = 0;
    }
}

void buffer_free(byte_buffer *buffer) {
    free(buffer->data);
    buffer->data = NULL;
    buffer->len = buffer->cap = 0;
}
