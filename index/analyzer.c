/* The analyzer: UTF-8 text -> tokens (runs of letters, digits and marks) -> NFKC + case folding ->
 * length cut -> stopwords -> Snowball English stems. Index build and query time must go through
 * exactly this code so that their terms agree. */
#include <libstemmer.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "index/analyzer_internal.h"
#include "index/index.h"

#ifndef ISN_STEM_CACHE_SLOTS
#define ISN_STEM_CACHE_SLOTS 65536 /* 2 MiB; building with 0 disables the cache, for measurements */
#endif

#define DEFAULT_MAX_TOKEN_BYTES 64
/* The longest UTF-8 character: a smaller limit could not hold any non-ASCII character, so it is raised. */
#define MIN_MAX_TOKEN_BYTES 4

/* NFKC_Casefold as utf8proc spells it. IGNORE drops default-ignorable marks such as variation selectors. */
#define NORMALIZE_OPTIONS \
    (UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_COMPOSE | UTF8PROC_CASEFOLD | UTF8PROC_IGNORE)

#define RIGHT_SINGLE_QUOTATION_MARK 0x2019

/* ASCII tokens are finished in groups of this many, their stem cache slots fetched from memory
 * together first: one token at a time, every lookup waited for its own cache miss. */
#define PENDING_TOKENS 16

typedef struct {
    uint64_t hash; /* of the folded text, for the stem cache; 0 when it is not stemmed */
    uint32_t position;
    uint32_t len;
    bool may_stem;
} pending_token;

struct isn_analyzer {
    isn_analyzer_config config;
    struct sb_stemmer *stemmer; /* NULL when stemming is off */
    stopword_set stopwords;
    stem_cache cache;
    uint32_t *emitted_memo; /* see analyzer_emitted_memo */
    const void *memo_owner; /* see analyzer_memo_owner */
    /* ASCII tokens waiting to be finished (see queue_ascii_token): their folded text, one stride of
     * max_token_bytes + 1 bytes each, and what finish_term needs. */
    char *pending_text;
    pending_token pending[PENDING_TOKENS];
    uint32_t num_pending;
    /* A non-ASCII token is normalized from at most this many leading bytes: it bounds the work
     * and memory one pathological token can cost. The window is wide enough that, short of runs of
     * ignorable or heavily composing characters, the cut output is the same as if it were whole. */
    size_t normalize_window;
    char *term;     /* normalized term, max_token_bytes + 1 */
    char *stemmed;  /* stem, max_token_bytes + 1 */
    int32_t *codepoints;
    size_t codepoints_capacity; /* entries, one more than utf8proc may fill (reencode needs it) */
};

void isn_analyzer_config_default(isn_analyzer_config *config) {
    config->stem = true;
    config->stopwords = true;
    config->max_token_bytes = DEFAULT_MAX_TOKEN_BYTES;
    config->pretokenized = false;
}

isn_analyzer *isn_analyzer_new(const isn_analyzer_config *config) {
    isn_analyzer *analyzer = calloc(1, sizeof *analyzer);
    if (analyzer == NULL)
        return NULL;
    if (config != NULL)
        analyzer->config = *config;
    else
        isn_analyzer_config_default(&analyzer->config);
    if (analyzer->config.pretokenized)
        analyzer->config.stem = analyzer->config.stopwords = false;
    if (analyzer->config.max_token_bytes < MIN_MAX_TOKEN_BYTES)
        analyzer->config.max_token_bytes = MIN_MAX_TOKEN_BYTES;
    size_t max = analyzer->config.max_token_bytes;
    analyzer->normalize_window = 4 * max + 64;
    analyzer->term = malloc(max + 1);
    analyzer->stemmed = malloc(max + 1);
    analyzer->pending_text = malloc(PENDING_TOKENS * (max + 1));
    if (analyzer->term == NULL || analyzer->stemmed == NULL || analyzer->pending_text == NULL)
        goto fail;
    stopword_set_init(&analyzer->stopwords);
    stem_cache_init(&analyzer->cache, ISN_STEM_CACHE_SLOTS);
    if (analyzer->config.stem) {
        analyzer->stemmer = sb_stemmer_new("english", "UTF_8");
        if (analyzer->stemmer == NULL)
            goto fail;
    }
    return analyzer;
fail:
    isn_analyzer_free(analyzer);
    return NULL;
}

void isn_analyzer_free(isn_analyzer *analyzer) {
    if (analyzer == NULL)
        return;
    if (analyzer->stemmer != NULL)
        sb_stemmer_delete(analyzer->stemmer);
    stem_cache_release(&analyzer->cache);
    free(analyzer->term);
    free(analyzer->stemmed);
    free(analyzer->pending_text);
    free(analyzer->codepoints);
    free(analyzer);
}

/* ------------------------------------------------------------------ character classes */

static inline bool is_ascii_alnum(uint8_t c) {
    return (unsigned)((c | 0x20) - 'a') < 26u || (unsigned)(c - '0') < 10u;
}

static inline bool is_ascii_letter(uint8_t c) {
    return (unsigned)((c | 0x20) - 'a') < 26u;
}

static inline bool is_letter_or_number(utf8proc_category_t category) {
    return (category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO) ||
           (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO);
}

static inline bool is_mark(utf8proc_category_t category) {
    return category >= UTF8PROC_CATEGORY_MN && category <= UTF8PROC_CATEGORY_ME;
}

/* Whether the character at text[i] (i < len) continues a token that is already open. */
static bool continues_token(const uint8_t *text, size_t len, size_t i) {
    if (text[i] < 0x80)
        return is_ascii_alnum(text[i]);
    int32_t codepoint;
    analyzer_utf8_decode(text + i, len - i, &codepoint);
    if (codepoint == ANALYZER_INVALID_CODEPOINT)
        return false;
    utf8proc_category_t category = utf8proc_category(codepoint);
    return is_letter_or_number(category) || is_mark(category);
}

/* ------------------------------------------------------------------ one term */

/* Cuts len to at most max bytes without splitting a UTF-8 character of the valid string s. */
static size_t cut_at_char_boundary(const char *s, size_t len, size_t max) {
    if (len <= max)
        return len;
    while (max > 0 && ((uint8_t)s[max] & 0xC0) == 0x80)
        max--;
    return max;
}

/* term has room for len + 1 bytes; a cached stem replaces it there, a new one goes to
 * analyzer->stemmed. hash is stem_cache_hash of the term. */
static const char *stem_term(isn_analyzer *analyzer, char *term, size_t len, uint64_t hash, size_t *stem_len) {
    int cached = stem_cache_lookup(&analyzer->cache, hash, term, len, &analyzer->emitted_memo);
    if (cached >= 0) {
        *stem_len = (size_t)cached;
        return term;
    }
    const sb_symbol *stem = sb_stemmer_stem(analyzer->stemmer, (const sb_symbol *)term, (int)len);
    if (stem == NULL) { /* Snowball out of memory: the unstemmed term is the best we can do */
        *stem_len = len;
        return term;
    }
    size_t out_len = cut_at_char_boundary((const char *)stem, (size_t)sb_stemmer_length(analyzer->stemmer),
                                          analyzer->config.max_token_bytes);
    memcpy(analyzer->stemmed, stem, out_len);
    analyzer->stemmed[out_len] = '\0';
    analyzer->emitted_memo = stem_cache_insert(&analyzer->cache, hash, term, len, analyzer->stemmed, out_len);
    *stem_len = out_len;
    return analyzer->stemmed;
}

static inline bool is_stopword(const isn_analyzer *analyzer, const char *term, size_t len) {
    return analyzer->config.stopwords && stopword_set_contains(&analyzer->stopwords, term, len);
}

/* Snowball leaves words of one or two characters as they are. */
static inline bool stems(const isn_analyzer *analyzer, size_t len, bool may_stem) {
    return analyzer->stemmer != NULL && may_stem && len > 2;
}

/* term is NUL-terminated, normalized, cut and not a stopword; position is its token index; hash is
 * stem_cache_hash of the term when it stems. */
static void emit_term(isn_analyzer *analyzer, char *term, size_t len, bool may_stem, uint64_t hash,
                      uint32_t position, isn_term_fn emit, void *ctx) {
    const char *out = term;
    analyzer->emitted_memo = NULL;
    if (stems(analyzer, len, may_stem))
        out = stem_term(analyzer, term, len, hash, &len);
    if (emit != NULL)
        emit(ctx, out, len, position);
}

/* term is NUL-terminated, normalized and cut; position is its token index. */
static void finish_term(isn_analyzer *analyzer, char *term, size_t len, bool may_stem, uint32_t position,
                        isn_term_fn emit, void *ctx) {
    if (is_stopword(analyzer, term, len))
        return;
    uint64_t hash = stems(analyzer, len, may_stem) ? stem_cache_hash(term, len) : 0;
    emit_term(analyzer, term, len, may_stem, hash, position, emit, ctx);
}

/* Finishes the pending ASCII tokens, in their order. */
static void flush_pending(isn_analyzer *analyzer, isn_term_fn emit, void *ctx) {
    size_t stride = analyzer->config.max_token_bytes + 1;
    for (uint32_t i = 0; i < analyzer->num_pending; i++) {
        const pending_token *p = &analyzer->pending[i];
        emit_term(analyzer, analyzer->pending_text + i * stride, p->len, p->may_stem, p->hash, p->position, emit, ctx);
    }
    analyzer->num_pending = 0;
}

uint32_t *analyzer_emitted_memo(isn_analyzer *analyzer) {
    return analyzer->emitted_memo;
}

void analyzer_cache_on_huge_pages(isn_analyzer *analyzer) {
    if (analyzer->cache.slots == NULL)
        analyzer->cache.huge_pages = true;
}

void analyzer_set_memo_owner(isn_analyzer *analyzer, const void *owner) {
    analyzer->memo_owner = owner;
}

const void *analyzer_memo_owner(const isn_analyzer *analyzer) {
    return analyzer->memo_owner;
}

void analyzer_clear_memos(isn_analyzer *analyzer) {
    if (analyzer->cache.slots == NULL)
        return;
    for (uint32_t i = 0; i < analyzer->cache.capacity; i++)
        analyzer->cache.slots[i].memo = 0;
}

/* ------------------------------------------------------------------ one token */

/* The common case: ASCII letters and digits need no Unicode tables, and NFKC_Casefold of them is
 * plain lowercasing, so the result is the same as the general path's. */
static void queue_ascii_token(isn_analyzer *analyzer, const uint8_t *token, size_t len, uint32_t position,
                              isn_term_fn emit, void *ctx) {
    if (len > analyzer->config.max_token_bytes)
        len = analyzer->config.max_token_bytes;
    char *term = analyzer->pending_text + analyzer->num_pending * (analyzer->config.max_token_bytes + 1);
    uint8_t letter_bits = 0;
    for (size_t i = 0; i < len; i++) {
        /* Digits already have bit 0x20 set; letters have bit 0x40 set and digits do not. */
        term[i] = (char)(token[i] | 0x20);
        letter_bits |= token[i] & 0x40;
    }
    term[len] = '\0';
    if (is_stopword(analyzer, term, len))
        return;
    pending_token *p = &analyzer->pending[analyzer->num_pending++];
    *p = (pending_token){.position = position, .len = (uint32_t)len, .may_stem = letter_bits != 0};
    if (stems(analyzer, len, p->may_stem)) {
        p->hash = stem_cache_hash(term, len);
        stem_cache_prefetch(&analyzer->cache, p->hash);
    }
    if (analyzer->num_pending == PENDING_TOKENS)
        flush_pending(analyzer, emit, ctx);
}

static bool ensure_codepoints(isn_analyzer *analyzer, size_t needed) {
    if (needed + 1 <= analyzer->codepoints_capacity)
        return true;
    size_t capacity = analyzer->codepoints_capacity * 2;
    if (capacity < needed + 1)
        capacity = needed + 1;
    if (capacity < 256)
        capacity = 256;
    int32_t *grown = realloc(analyzer->codepoints, capacity * sizeof *grown);
    if (grown == NULL)
        return false;
    analyzer->codepoints = grown;
    analyzer->codepoints_capacity = capacity;
    return true;
}

/* Normalizes a token that holds non-ASCII characters. Normalization can turn one token into
 * characters that are not letters or digits (U+00BD "½" becomes "1⁄2", U+FDFA expands to words
 * and spaces), so the result is split again by the same rule: every emitted term is made only of
 * letters, digits and marks. Returns the next free position. */
static uint32_t analyze_unicode_token(isn_analyzer *analyzer, const uint8_t *token, size_t len, uint32_t position,
                                      isn_term_fn emit, void *ctx) {
    if (len > analyzer->normalize_window)
        len = cut_at_char_boundary((const char *)token, len, analyzer->normalize_window);
    if (!ensure_codepoints(analyzer, len))
        return position;
    utf8proc_ssize_t count;
    for (;;) {
        count = utf8proc_decompose(token, (utf8proc_ssize_t)len, analyzer->codepoints,
                                   (utf8proc_ssize_t)analyzer->codepoints_capacity - 1, NORMALIZE_OPTIONS);
        if (count < 0)
            return position; /* cannot happen for the valid UTF-8 the tokenizer passes */
        if ((size_t)count + 1 <= analyzer->codepoints_capacity)
            break;
        if (!ensure_codepoints(analyzer, (size_t)count))
            return position;
    }
    count = utf8proc_normalize_utf32(analyzer->codepoints, count, NORMALIZE_OPTIONS);
    if (count < 0)
        return position;

    size_t max = analyzer->config.max_token_bytes;
    char *term = analyzer->term;
    size_t term_len = 0;
    bool in_term = false, term_full = false;
    for (utf8proc_ssize_t i = 0; i <= count; i++) {
        bool part_of_term = false;
        int32_t codepoint = 0;
        if (i < count) {
            codepoint = analyzer->codepoints[i];
            utf8proc_category_t category = utf8proc_category(codepoint);
            part_of_term = is_letter_or_number(category) || (in_term && is_mark(category));
        }
        if (part_of_term) {
            if (!in_term) {
                in_term = true;
                term_full = false;
                term_len = 0;
            }
            if (!term_full) {
                uint8_t encoded[4];
                size_t bytes = (size_t)utf8proc_encode_char(codepoint, encoded);
                if (term_len + bytes > max) {
                    term_full = true; /* cut here, at a character boundary */
                } else {
                    memcpy(term + term_len, encoded, bytes);
                    term_len += bytes;
                }
            }
        } else if (in_term) {
            term[term_len] = '\0';
            finish_term(analyzer, term, term_len, true, position, emit, ctx);
            in_term = false;
            if (position == UINT32_MAX)
                return position;
            position++;
        }
    }
    return position;
}

/* ------------------------------------------------------------------ pretokenized text */

static bool is_ascii_space(uint8_t c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static uint32_t analyze_pretokenized(isn_analyzer *analyzer, const uint8_t *bytes, size_t len, isn_term_fn emit,
                                     void *ctx) {
    uint32_t position = 0;
    size_t i = 0;
    while (i < len && position != UINT32_MAX) {
        if (is_ascii_space(bytes[i])) {
            i++;
            continue;
        }
        size_t start = i;
        while (i < len && !is_ascii_space(bytes[i]))
            i++;
        size_t term_len = cut_at_char_boundary((const char *)bytes + start, i - start, analyzer->config.max_token_bytes);
        memcpy(analyzer->term, bytes + start, term_len);
        analyzer->term[term_len] = '\0';
        if (emit != NULL && term_len > 0)
            emit(ctx, analyzer->term, term_len, position);
        position++;
    }
    return position;
}

/* ------------------------------------------------------------------ text */

uint32_t isn_analyze(isn_analyzer *analyzer, const char *text, size_t len, isn_term_fn emit, void *ctx) {
    if (analyzer == NULL || text == NULL)
        return 0;
    analyzer->emitted_memo = NULL; /* pretokenized terms are never stemmed: no memo for them */
    if (analyzer->config.pretokenized)
        return analyze_pretokenized(analyzer, (const uint8_t *)text, len, emit, ctx);
    const uint8_t *bytes = (const uint8_t *)text;
    uint32_t position = 0;
    size_t i = 0;
    while (i < len && position != UINT32_MAX) {
        /* Between tokens: skip separators. */
        uint8_t c = bytes[i];
        if (c < 0x80) {
            if (!is_ascii_alnum(c)) {
                i++;
                continue;
            }
        } else {
            int32_t codepoint;
            size_t taken = analyzer_utf8_decode(bytes + i, len - i, &codepoint);
            /* Invalid bytes stand for U+FFFD, a symbol; a mark with nothing to attach to separates. */
            if (codepoint == ANALYZER_INVALID_CODEPOINT || !is_letter_or_number(utf8proc_category(codepoint))) {
                i += taken;
                continue;
            }
        }

        /* Inside a token: find its end, and whether it ends with a possessive 's. */
        size_t start = i;
        bool ascii = true;
        bool last_was_letter = false; /* valid when the last character was not ASCII */
        size_t skip_after = 0;        /* bytes of a dropped possessive 's */
        while (i < len) {
            c = bytes[i];
            size_t apostrophe_bytes = 0;
            if (c < 0x80) {
                if (is_ascii_alnum(c)) {
                    i++;
                    continue;
                }
                if (c == '\'')
                    apostrophe_bytes = 1;
            } else {
                int32_t codepoint;
                size_t taken = analyzer_utf8_decode(bytes + i, len - i, &codepoint);
                if (codepoint != ANALYZER_INVALID_CODEPOINT) {
                    utf8proc_category_t category = utf8proc_category(codepoint);
                    if (is_letter_or_number(category) || is_mark(category)) {
                        if (is_mark(category)) {
                            /* A mark belongs to the character before it (a token never starts with one). */
                            if (bytes[i - 1] < 0x80)
                                last_was_letter = is_ascii_letter(bytes[i - 1]);
                        } else {
                            last_was_letter = category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO;
                        }
                        ascii = false;
                        i += taken;
                        continue;
                    }
                    if (codepoint == RIGHT_SINGLE_QUOTATION_MARK)
                        apostrophe_bytes = taken;
                }
            }
            if (apostrophe_bytes != 0) {
                bool after_letter = bytes[i - 1] < 0x80 ? is_ascii_letter(bytes[i - 1]) : last_was_letter;
                size_t s_at = i + apostrophe_bytes;
                if (after_letter && s_at < len && (bytes[s_at] | 0x20) == 's' &&
                    (s_at + 1 == len || !continues_token(bytes, len, s_at + 1)))
                    skip_after = apostrophe_bytes + 1;
            }
            break;
        }

        if (ascii) {
            queue_ascii_token(analyzer, bytes + start, i - start, position++, emit, ctx);
        } else {
            flush_pending(analyzer, emit, ctx);
            position = analyze_unicode_token(analyzer, bytes + start, i - start, position, emit, ctx);
        }
        i += skip_after;
    }
    flush_pending(analyzer, emit, ctx);
    return position;
}
