/* A JSON Lines record's wanted keys read straight from its bytes, for the records jansson would read
 * the same way. Private to index/. */
#ifndef ISN_INDEX_JSONL_SCAN_H
#define ISN_INDEX_JSONL_SCAN_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    JSONL_ABSENT = 0, /* the record has no such key */
    JSONL_NULL,
    JSONL_BOOL,
    JSONL_STRING, /* text, len: the decoded string, NUL-terminated */
} jsonl_kind;

typedef struct {
    jsonl_kind kind;
    const char *text;
    size_t len;
} jsonl_value;

/* Reads `line` (len bytes of valid UTF-8) when it is one JSON object whose values are all strings
 * without \u escapes, true, false or null: sets values[k] to the value of key keys[k] (the last one
 * when a key repeats, as jansson keeps it) and returns 1. Decoded strings go to scratch, which needs
 * room for len + 1 bytes. Returns 0, having decided nothing, for anything else: numbers, arrays,
 * nested objects, \u escapes, keys with escapes, and every malformed record. The caller then hands
 * the record to jansson, which reads those and words the errors; so a record accepted here is one
 * that jansson accepts with these same values. */
int jsonl_scan_flat_object(const char *line, size_t len, const char *const *keys, uint32_t num_keys,
                           jsonl_value *values, char *scratch);

#endif
