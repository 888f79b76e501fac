/* The build's JSON Lines fast path against jansson: whatever record jsonl_scan_flat_object accepts,
 * jansson must accept too, as an object holding the same value for every key asked (absent, null, a
 * boolean, or a string of the same bytes). Inputs that are not valid UTF-8 are skipped: the build
 * replaces invalid sequences before either reader sees the line. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "index/jsonl_scan.h"

static int valid_utf8(const uint8_t *data, size_t size) {
    for (size_t i = 0; i < size;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate(data + i, (utf8proc_ssize_t)(size - i), &cp);
        if (n <= 0) return 0;
        i += (size_t)n;
    }
    return 1;
}

static void agree(const jsonl_value *v, json_t *j) {
    switch (v->kind) {
    case JSONL_ABSENT: if (j) abort(); break;
    case JSONL_NULL: if (!json_is_null(j)) abort(); break;
    case JSONL_BOOL: if (!json_is_boolean(j)) abort(); break;
    case JSONL_STRING:
        if (!json_is_string(j) || json_string_length(j) != v->len || memcmp(json_string_value(j), v->text, v->len) != 0 ||
            v->text[v->len] != '\0')
            abort();
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!valid_utf8(data, size)) return 0;
    static const char *const keys[] = {"id", "title", "body", "", "id"};
    enum { NUM_KEYS = sizeof keys / sizeof keys[0] };
    char *scratch = malloc(size + 1);
    if (!scratch) return 0;
    jsonl_value values[NUM_KEYS];
    if (jsonl_scan_flat_object((const char *)data, size, keys, NUM_KEYS, values, scratch)) {
        json_error_t err;
        json_t *doc = json_loadb((const char *)data, size, JSON_ALLOW_NUL, &err);
        if (!json_is_object(doc)) abort();
        for (int k = 0; k < NUM_KEYS; k++) agree(&values[k], json_object_get(doc, keys[k]));
        json_decref(doc);
    }
    free(scratch);
    return 0;
}
