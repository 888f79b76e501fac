/* Private pieces of the analyzer: strict UTF-8 decoding, the stopword set and the stem cache. */
#ifndef ISN_ANALYZER_INTERNAL_H
#define ISN_ANALYZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* ------------------------------------------------------------------ UTF-8 */

#define ANALYZER_INVALID_CODEPOINT (-1)

/* Decodes one character of s[0..avail) (avail >= 1) into *codepoint and returns the bytes it takes.
 * An ill-formed sequence (stray continuation byte, overlong form, surrogate, value past U+10FFFF,
 * truncated sequence) yields ANALYZER_INVALID_CODEPOINT and consumes only its maximal ill-formed
 * subpart, as Unicode recommends for U+FFFD substitution, so that a valid character right after a
 * broken one is never swallowed. Never reads s[avail] or beyond. */
static inline size_t analyzer_utf8_decode(const uint8_t *s, size_t avail, int32_t *codepoint) {
    uint8_t lead = s[0];
    if (lead < 0x80) {
        *codepoint = lead;
        return 1;
    }
    *codepoint = ANALYZER_INVALID_CODEPOINT;
    size_t need; /* continuation bytes */
    if (lead >= 0xC2 && lead <= 0xDF)
        need = 1;
    else if (lead >= 0xE0 && lead <= 0xEF)
        need = 2;
    else if (lead >= 0xF0 && lead <= 0xF4)
        need = 3;
    else
        return 1; /* continuation byte, C0/C1 (always overlong) or F5..FF */
    int32_t value = lead & (0x3F >> need);
    /* The second byte's range is narrower where the full one would allow a form that is not allowed. */
    uint8_t second_lo = 0x80, second_hi = 0xBF;
    switch (lead) {
    case 0xE0: second_lo = 0xA0; break; /* overlong below U+0800 */
    case 0xF0: second_lo = 0x90; break; /* overlong below U+10000 */
    case 0xED: second_hi = 0x9F; break; /* UTF-16 surrogates */
    case 0xF4: second_hi = 0x8F; break; /* past U+10FFFF */
    default: break;
    }
    if (avail < 2 || s[1] < second_lo || s[1] > second_hi)
        return 1;
    value = (value << 6) | (s[1] & 0x3F);
    for (size_t k = 2; k <= need; k++) {
        if (avail <= k || (s[k] & 0xC0) != 0x80)
            return k;
        value = (value << 6) | (s[k] & 0x3F);
    }
    *codepoint = value;
    return need + 1;
}

/* ------------------------------------------------------------------ stopwords */

/* Open-addressing set of the stopwords packed into 64-bit keys; every stopword is 1..5 bytes. */
#define STOPWORD_MAX_BYTES 5
#define STOPWORD_SLOTS 128

typedef struct {
    uint64_t keys[STOPWORD_SLOTS]; /* 0 = empty slot; terms never hold a NUL byte, so keys are nonzero */
} stopword_set;

void stopword_set_init(stopword_set *set);

/* Byte by byte rather than memcpy: a copy of a variable length is a libc call on every token. */
static inline uint64_t stopword_key(const char *term, size_t len) {
    uint64_t key = 0;
    for (size_t i = 0; i < len; i++)
        key |= (uint64_t)(uint8_t)term[i] << (8 * i);
    return key;
}

static inline uint32_t stopword_slot(uint64_t key) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 57);
}

static inline bool stopword_set_contains(const stopword_set *set, const char *term, size_t len) {
    if (len > STOPWORD_MAX_BYTES || len == 0)
        return false;
    uint64_t key = stopword_key(term, len);
    for (uint32_t slot = stopword_slot(key);; slot = (slot + 1) & (STOPWORD_SLOTS - 1)) {
        if (set->keys[slot] == key)
            return true;
        if (set->keys[slot] == 0)
            return false;
    }
}

/* ------------------------------------------------------------------ stem cache */

/* A fixed-size cache from folded term to stem. A stem is stored as the length of the prefix it
 * shares with the term plus its remaining suffix (Snowball mostly trims or rewrites a short ending),
 * so one 32-byte slot holds term and stem together. Terms that do not fit bypass the cache.
 * Each slot also keeps a memo word for the analyzer's caller: the index builder keeps there the id
 * of the slot's stem in its term table, so that a cached word costs one lookup, not two. */
#define STEM_CACHE_SLOT_BYTES 23
#define STEM_CACHE_PROBES 4

typedef struct {
    uint32_t memo;       /* the caller's; 0 when the slot is filled */
    uint16_t tag;        /* high bits of the term's hash */
    uint8_t term_len;    /* 0 = empty slot */
    uint8_t stem_prefix; /* bytes of the stem equal to the term's first bytes */
    uint8_t suffix_len;  /* bytes of the stem after that prefix */
    char bytes[STEM_CACHE_SLOT_BYTES]; /* term, then the stem's suffix */
} stem_cache_slot;

typedef struct {
    stem_cache_slot *slots; /* allocated on the first insertion; NULL = not yet (or disabled) */
    uint32_t capacity;      /* power of two; 0 disables the cache */
    bool huge_pages;        /* slots on a huge page (huge_pages.c): for the index builder, whose
                               analyzer probes it millions of times; a searcher's stays sparse */
    uint64_t hits;
    uint64_t misses;
} stem_cache;

void stem_cache_init(stem_cache *cache, uint32_t capacity);
void stem_cache_release(stem_cache *cache);
/* XXH3 inlined rather than base's isn_hash64 (XXH64): this runs once per token, and on short words
 * XXH3 is several times faster; the value never leaves memory. */
static inline uint64_t stem_cache_hash(const char *term, size_t len) {
    return XXH3_64bits(term, len);
}
/* Turns `term` (room for len + 1 bytes) into its cached stem in place, NUL-terminated, sets *memo to
 * the slot's memo word and returns the stem's length, or -1 (term untouched). In place because a stem
 * mostly keeps the term's first bytes: only the changed ending is copied. */
int stem_cache_lookup(stem_cache *cache, uint64_t hash, char *term, size_t len, uint32_t **memo);
/* Starts fetching the first slot a lookup of hash reads. */
static inline void stem_cache_prefetch(const stem_cache *cache, uint64_t hash) {
    if (cache->slots != NULL)
        __builtin_prefetch(&cache->slots[(uint32_t)hash & (cache->capacity - 1)]);
}
/* The memo word of the slot now holding term (0), or NULL when the term is not cached. */
uint32_t *stem_cache_insert(stem_cache *cache, uint64_t hash, const char *term, size_t len, const char *stem,
                            size_t stem_len);

/* ------------------------------------------------------------------ memo for the index builder */

struct isn_analyzer;
/* Inside an isn_term_fn: the memo word kept with the emitted term's stem cache slot, or NULL when the
 * term has none (not stemmed, or too long to cache). A slot maps one folded word to one stem, so what
 * the caller memoizes there is a function of the emitted term; it stays the caller's until the slot is
 * refilled with another word, which zeroes it. */
uint32_t *analyzer_emitted_memo(struct isn_analyzer *analyzer);
/* Whose memo words these are: an analyzer made by isn_index_new_analyzer keeps its index's term ids
 * there (isn_index_find_emitted_term), owner that index; the index builder's, owner NULL, its own. */
void analyzer_set_memo_owner(struct isn_analyzer *analyzer, const void *owner);
const void *analyzer_memo_owner(const struct isn_analyzer *analyzer);
/* Forgets every memo word (the index builder's term ids, when it starts a new run's term table). */
void analyzer_clear_memos(struct isn_analyzer *analyzer);
/* The index builder's analyzer keeps its stem cache on a huge page. */
void analyzer_cache_on_huge_pages(struct isn_analyzer *analyzer);

#endif
