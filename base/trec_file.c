/* Whole-file reading and field splitting for TREC text files (qrels, runs): see base.h. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int isn_trec_file_read(const char *path, isn_trec_file *file, char *err, size_t err_len) {
    memset(file, 0, sizeof *file);
    FILE *stream = fopen(path, "rb");
    if (!stream) return isn_error(err, err_len, "cannot open %s: %s", path, strerror(errno));
    size_t capacity = 1 << 16, size = 0;
    char *data = malloc(capacity);
    for (;;) {
        if (data && size == capacity) {
            char *grown = capacity <= SIZE_MAX / 2 ? realloc(data, capacity * 2) : NULL;
            if (!grown) free(data);
            data = grown;
            capacity *= 2;
        }
        if (!data) {
            fclose(stream);
            return isn_error(err, err_len, "out of memory");
        }
        size_t got = fread(data + size, 1, capacity - size, stream);
        size += got;
        if (got == 0) break;
    }
    if (ferror(stream)) {
        int read_errno = errno;
        free(data);
        fclose(stream);
        return isn_error(err, err_len, "cannot read %s: %s", path, strerror(read_errno));
    }
    fclose(stream);
    /* The loop leaves size < capacity: the last field's terminator fits after the data. */
    *file = (isn_trec_file){.path = path, .data = data, .size = size};
    return 0;
}

static bool is_field_separator(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

int isn_trec_file_next_line(isn_trec_file *file, char **fields, size_t max_fields, size_t *num_fields, char *err,
                            size_t err_len) {
    if (file->offset >= file->size) return 0;
    char *start = file->data + file->offset;
    char *newline = memchr(start, '\n', file->size - file->offset);
    char *end = newline ? newline : file->data + file->size;
    file->offset = (size_t)(end - file->data) + 1;
    file->line++;
    if (memchr(start, '\0', (size_t)(end - start)))
        return isn_error(err, err_len, "%s:%zu: line contains a NUL byte", file->path, file->line);

    size_t count = 0;
    char *cursor = start;
    while (cursor < end) {
        while (cursor < end && is_field_separator(*cursor)) cursor++;
        if (cursor == end) break;
        char *field = cursor;
        while (cursor < end && !is_field_separator(*cursor)) cursor++;
        /* end points at '\n' or one past the data: the buffer has room for that NUL. */
        *cursor++ = '\0';
        if (count < max_fields) fields[count] = field;
        count++;
    }
    *num_fields = count;
    return 1;
}

void isn_trec_file_free(isn_trec_file *file) {
    free(file->data);
    memset(file, 0, sizeof *file);
}
