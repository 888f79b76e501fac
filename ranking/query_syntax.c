/* Query text to clauses: the operators of README "Query syntax". Only ASCII bytes are syntax, so the
 * split needs no UTF-8 decoding; everything else is text for the index's analyzer. */
#include <string.h>

#include "ranking/ranking_internal.h"

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static bool is_field_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }

static bool is_field_char(char c) { return is_field_start(c) || (c >= '0' && c <= '9') || c == '.' || c == '-'; }

/* A word runs to whitespace or a quote; a backslash keeps the next byte in the word. */
static size_t word_end(const char *text, size_t len, size_t at) {
    while (at < len && !is_space(text[at]) && text[at] != '"') at += text[at] == '\\' && at + 1 < len ? 2 : 1;
    return at;
}

/* The length of a field prefix "name:" at `at` that qualifies what follows (a word or a quote right
 * after the colon), else 0: "Apache::Session", "note: x" and "a:" stay text. */
static size_t field_prefix(const char *text, size_t len, size_t at) {
    if (at >= len || !is_field_start(text[at])) return 0;
    size_t end = at + 1;
    while (end < len && is_field_char(text[end])) end++;
    if (end - at >= ISN_FIELD_NAME_MAX || end + 1 >= len || text[end] != ':') return 0;
    char next = text[end + 1];
    if (is_space(next) || next == ':') return 0;
    return end - at + 1;
}

int isn_query_syntax_split(const char *text, size_t len, isn_clause_spec *specs, uint32_t cap, uint32_t *num_specs,
                           char *err, size_t err_len) {
    *num_specs = 0;
    if (text == NULL && len > 0) {
        isn_error(err, err_len, "query text is NULL");
        return -1;
    }
    size_t at = 0;
    while (at < len) {
        while (at < len && is_space(text[at])) at++;
        if (at == len) break;
        isn_clause_spec spec = {.occur = ISN_OCCUR_SHOULD, .offset = at};
        size_t start = at;
        /* An operator binds only to what follows it directly: "a - b" and "--x" keep it as text. */
        if ((text[at] == '+' || text[at] == '-') && at + 1 < len && !is_space(text[at + 1]) && text[at + 1] != '+' &&
            text[at + 1] != '-') {
            spec.occur = text[at] == '+' ? ISN_OCCUR_MUST : ISN_OCCUR_MUST_NOT;
            at++;
        }
        size_t field_len = field_prefix(text, len, at);
        if (field_len) {
            spec.field = text + at;
            spec.field_len = field_len - 1;
            at += field_len;
            if (text[at] == '(') {
                isn_error(err, err_len,
                          "parentheses after field %.*s at byte %zu are not supported: write %.*s:word or "
                          "%.*s:\"a phrase\" for each",
                          (int)spec.field_len, spec.field, at, (int)spec.field_len, spec.field, (int)spec.field_len,
                          spec.field);
                return -1;
            }
        }
        if (text[at] == '"') {
            size_t close = at + 1;
            while (close < len && text[close] != '"') close += text[close] == '\\' && close + 1 < len ? 2 : 1;
            if (close >= len) {
                isn_error(err, err_len, "unterminated phrase: the quote at byte %zu has no closing quote", at);
                return -1;
            }
            spec.phrase = true;
            spec.text = text + at + 1;
            spec.text_len = close - at - 1;
            size_t blank = 0;
            while (blank < spec.text_len && is_space(spec.text[blank])) blank++;
            if (blank == spec.text_len) {
                isn_error(err, err_len, "empty phrase at byte %zu", at);
                return -1;
            }
            at = close + 1;
        } else {
            size_t end = word_end(text, len, at);
            if (end == at) {
                isn_error(err, err_len, "%s at byte %zu has nothing after it",
                          field_len ? "field" : "operator", start);
                return -1;
            }
            spec.text = text + at;
            spec.text_len = end - at;
            /* An operator or a field takes the word whole: "+real-time" requires the phrase "real time". */
            spec.phrase = spec.occur != ISN_OCCUR_SHOULD || field_len;
            at = end;
        }
        if (*num_specs == cap) {
            isn_error(err, err_len, "query has more than %u clauses (at byte %zu)", cap, start);
            return -1;
        }
        specs[(*num_specs)++] = spec;
    }
    return 0;
}

bool ranking_query_has_syntax(const char *text, size_t len) {
    for (size_t at = 0; at < len;) {
        while (at < len && is_space(text[at])) at++;
        if (at == len) break;
        if (text[at] == '"') return true;
        if ((text[at] == '+' || text[at] == '-') && at + 1 < len && !is_space(text[at + 1]) && text[at + 1] != '+' &&
            text[at + 1] != '-')
            return true;
        if (field_prefix(text, len, at)) return true;
        at = word_end(text, len, at);
        if (at < len && text[at] == '"') return true;
    }
    return false;
}
