/* Features of the external id read as a short text stream, as learning-to-rank sets score a URL: a web
 * page's URL, a package's name. The id splits into tokens at every ASCII byte that is neither a letter
 * nor a digit, case folded; a token matches a query term when one is a prefix of the other and the
 * shorter has at least L2_ID_MATCH_MIN bytes ("dev" and the stem "develop", "doc" and "document"), or
 * when they are equal. The terms are the index's analyzed (stemmed) texts. */
#include <string.h>

#include "ranking/l2_internal.h"

static bool is_token_byte(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

static unsigned char fold(unsigned char c) { return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c; }

static bool token_matches(const char *token, size_t len, const l2_id_term *term) {
    size_t shorter = len < term->len ? len : term->len;
    if (shorter == 0 || (shorter < L2_ID_MATCH_MIN && len != term->len))
        return false;
    for (size_t i = 0; i < shorter; i++)
        if (fold((unsigned char)token[i]) != (unsigned char)term->text[i])
            return false;
    return true;
}

void l2_id_match(const char *id, size_t id_len, const l2_id_term *terms, uint32_t num_terms, l2_id_hits *out) {
    uint32_t matched_terms = 0; /* bit t: term t matched some token (num_terms <= 32) */
    out->tokens = out->unmatched_tokens = 0;
    size_t at = 0;
    while (at < id_len) {
        while (at < id_len && !is_token_byte((unsigned char)id[at])) at++;
        size_t start = at;
        while (at < id_len && is_token_byte((unsigned char)id[at])) at++;
        if (at == start)
            break;
        bool matched = false;
        for (uint32_t t = 0; t < num_terms; t++) {
            if (token_matches(id + start, at - start, &terms[t])) {
                matched = true;
                matched_terms |= 1u << t;
            }
        }
        out->tokens++;
        out->unmatched_tokens += !matched;
    }
    out->matched_terms = (uint32_t)__builtin_popcount(matched_terms);
}
