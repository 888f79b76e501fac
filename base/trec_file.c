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

int isn_trec_read_records(isn_trec_file *file, size_t num_fields, const char *format, size_t record_size,
                          isn_trec_parse_fn parse, void **records, size_t *count, char *err, size_t err_len) {
    char *fields[ISN_TREC_MAX_FIELDS];
    size_t found, capacity = 0;
    int more;
    *records = NULL;
    *count = 0;
    if (num_fields < 3 || num_fields > ISN_TREC_MAX_FIELDS) return isn_error(err, err_len, "bad field count");
    while ((more = isn_trec_file_next_line(file, fields, num_fields, &found, err, err_len)) > 0) {
        if (found == 0) continue;
        if (found != num_fields)
            return isn_error(err, err_len, "%s:%zu: expected %zu fields '%s', found %zu", file->path, file->line,
                             num_fields, format, found);
        if (*count == capacity) {
            capacity = capacity ? capacity * 2 : 1024;
            void *grown = capacity <= SIZE_MAX / record_size ? realloc(*records, capacity * record_size) : NULL;
            if (!grown) return isn_error(err, err_len, "out of memory");
            *records = grown;
        }
        /* A record starts with its key: a pointer to it is a pointer to the key. */
        isn_trec_key *record = (isn_trec_key *)((char *)*records + *count * record_size);
        *record = (isn_trec_key){.query_id = fields[0], .doc_id = fields[2], .line = file->line};
        if (parse(fields, record, file, err, err_len) != 0) return -1;
        (*count)++;
    }
    return more;
}

static int compare_keys(const void *left, const void *right) {
    const isn_trec_key *a = left, *b = right;
    int order = strcmp(a->query_id, b->query_id);
    if (order == 0) order = strcmp(a->doc_id, b->doc_id);
    if (order == 0) order = (a->line > b->line) - (a->line < b->line);
    return order;
}

static bool same_pair(const isn_trec_key *a, const isn_trec_key *b) {
    return !strcmp(a->query_id, b->query_id) && !strcmp(a->doc_id, b->doc_id);
}

const isn_trec_key *isn_trec_sort_find_repeat(void *records, size_t count, size_t record_size,
                                              const isn_trec_key **first) {
    const isn_trec_key *repeat = NULL;
    *first = NULL;
    if (count == 0) return NULL; /* records may be NULL: qsort must not see it */
    qsort(records, count, record_size, compare_keys);
    for (size_t i = 1; i < count; i++) {
        const isn_trec_key *before = (const isn_trec_key *)((const char *)records + (i - 1) * record_size);
        const isn_trec_key *key = (const isn_trec_key *)((const char *)records + i * record_size);
        /* Within a pair's records the lines ascend: its first two are the earliest occurrences. */
        bool before_starts_pair =
            i == 1 || !same_pair((const isn_trec_key *)((const char *)records + (i - 2) * record_size), before);
        if (before_starts_pair && same_pair(before, key) && (!repeat || key->line < repeat->line)) {
            *first = before;
            repeat = key;
        }
    }
    return repeat;
}
