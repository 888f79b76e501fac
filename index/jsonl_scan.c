/* The build's JSON Lines fast path. jansson reads a record a character at a time through a stream
 * callback, copies every string twice and builds a hash table per object: on the Debian corpus that
 * was a third of the build. Records are nearly always a flat object of strings, so those are read
 * here in one pass; whatever this does not fully check goes to jansson (jsonl_scan.h). */
#include <string.h>

#include "index/jsonl_scan.h"

typedef struct {
    const uint8_t *at, *end;
    char *out; /* next free byte of the scratch */
} scan;

static void skip_space(scan *s) {
    while (s->at < s->end && (*s->at == ' ' || *s->at == '\t' || *s->at == '\n' || *s->at == '\r')) s->at++;
}

static int next_is(scan *s, uint8_t c) {
    if (s->at < s->end && *s->at == c) {
        s->at++;
        return 1;
    }
    return 0;
}

/* After the opening quote: a key's raw bytes, which must hold no escape. 0 when unsure. */
static int raw_key(scan *s, const uint8_t **key, size_t *len) {
    const uint8_t *start = s->at;
    while (s->at < s->end && *s->at != '"') {
        if (*s->at == '\\' || *s->at < 0x20) return 0;
        s->at++;
    }
    if (s->at == s->end) return 0;
    *key = start;
    *len = (size_t)(s->at - start);
    s->at++;
    return 1;
}

#define BYTES_OF(b) (0x0101010101010101ull * (b))

/* Whether one of the 8 bytes of w ends or escapes a string's plain run: a quote, a backslash or a
 * control character (the classic has-zero-byte test, on w itself and on w with '"' and '\\' xored out). */
static inline int run_ends_in(uint64_t w) {
    uint64_t quote = w ^ BYTES_OF('"'), backslash = w ^ BYTES_OF('\\');
    uint64_t hits = ((quote - BYTES_OF(1)) & ~quote) | ((backslash - BYTES_OF(1)) & ~backslash) |
                    ((w - BYTES_OF(0x20)) & ~w);
    return (hits & BYTES_OF(0x80)) != 0;
}

/* After the opening quote: the string decoded into the scratch, NUL-terminated. 0 when unsure. */
static int string_value(scan *s, jsonl_value *v) {
    char *out = s->out;
    v->text = out;
    for (;;) {
        /* Eight bytes at a time while none of them is special; the output never passes the input. */
        while (s->end - s->at >= 8) {
            uint64_t w;
            memcpy(&w, s->at, 8);
            if (run_ends_in(w)) break;
            memcpy(out, &w, 8);
            out += 8;
            s->at += 8;
        }
        if (s->at == s->end) return 0;
        uint8_t c = *s->at++;
        if (c == '"') break;
        if (c < 0x20) return 0; /* jansson refuses raw control characters, in its own words */
        if (c != '\\') {
            *out++ = (char)c;
            continue;
        }
        if (s->at == s->end) return 0;
        switch (*s->at++) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '/': *out++ = '/'; break;
        case 'b': *out++ = '\b'; break;
        case 'f': *out++ = '\f'; break;
        case 'n': *out++ = '\n'; break;
        case 'r': *out++ = '\r'; break;
        case 't': *out++ = '\t'; break;
        default: return 0; /* \u (surrogates, NUL) and invalid escapes: jansson's */
        }
    }
    v->kind = JSONL_STRING;
    v->len = (size_t)(out - v->text);
    *out++ = '\0';
    s->out = out;
    return 1;
}

static int literal(scan *s, const char *word, size_t len) {
    if ((size_t)(s->end - s->at) < len || memcmp(s->at, word, len) != 0) return 0;
    s->at += len;
    return 1;
}

/* One value into v (string, true, false or null). 0 when unsure. */
static int value(scan *s, jsonl_value *v) {
    if (s->at == s->end) return 0;
    switch (*s->at) {
    case '"': s->at++; return string_value(s, v);
    case 't': v->kind = JSONL_BOOL; return literal(s, "true", 4);
    case 'f': v->kind = JSONL_BOOL; return literal(s, "false", 5);
    case 'n': v->kind = JSONL_NULL; return literal(s, "null", 4);
    default: return 0; /* numbers, arrays, objects, anything malformed */
    }
}

int jsonl_scan_flat_object(const char *line, size_t len, const char *const *keys, uint32_t num_keys,
                           jsonl_value *values, char *scratch) {
    scan s = {.at = (const uint8_t *)line, .end = (const uint8_t *)line + len, .out = scratch};
    for (uint32_t k = 0; k < num_keys; k++) values[k] = (jsonl_value){.kind = JSONL_ABSENT};
    skip_space(&s);
    if (!next_is(&s, '{')) return 0;
    skip_space(&s);
    if (!next_is(&s, '}')) {
        for (;;) {
            const uint8_t *key;
            size_t key_len;
            if (!next_is(&s, '"') || !raw_key(&s, &key, &key_len)) return 0;
            skip_space(&s);
            if (!next_is(&s, ':')) return 0;
            skip_space(&s);
            jsonl_value v = {0};
            if (!value(&s, &v)) return 0;
            /* A key may serve several roles (the id and a field): each gets the value. */
            for (uint32_t k = 0; k < num_keys; k++)
                if (strncmp(keys[k], (const char *)key, key_len) == 0 && keys[k][key_len] == '\0') values[k] = v;
            skip_space(&s);
            if (next_is(&s, '}')) break;
            if (!next_is(&s, ',')) return 0;
            skip_space(&s);
        }
    }
    skip_space(&s);
    return s.at == s.end;
}
