/* Analyzer tests: tokenization, positions, folding, NFKC, invalid UTF-8, cuts, stopwords, stemming. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <libstemmer.h>
#include <utf8proc.h>

#include "index/index.h"

/* ------------------------------------------------------------------ helpers */

#define JOINED_MAX 8192

typedef struct {
    char joined[JOINED_MAX]; /* "term@position term@position ..." */
    size_t joined_len;
    uint32_t count;
    uint32_t last_position;
    uint32_t max_token_bytes;
} collected_terms;

/* Strict UTF-8 check, written independently of the analyzer's decoder. */
static bool is_valid_utf8(const char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t c = (uint8_t)s[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + n > len)
            return false;
        for (size_t k = 1; k < n; k++) {
            if (((uint8_t)s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | ((uint8_t)s[i + k] & 0x3F);
        }
        static const uint32_t min_for_length[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_for_length[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n;
    }
    return true;
}

/* Every code point of an emitted term is a letter, a digit or a mark, and it starts with no mark. */
static bool is_made_of_word_characters(const char *s, size_t len) {
    utf8proc_ssize_t i = 0;
    bool first = true;
    while ((size_t)i < len) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)len - i, &cp);
        if (n <= 0)
            return false;
        utf8proc_category_t cat = utf8proc_category(cp);
        bool letter_or_number = (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                                (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
        bool mark = cat >= UTF8PROC_CATEGORY_MN && cat <= UTF8PROC_CATEGORY_ME;
        if (!(letter_or_number || (mark && !first)))
            return false;
        first = false;
        i += n;
    }
    return true;
}

static void collect_term(void *ctx, const char *term, size_t len, uint32_t position) {
    collected_terms *out = ctx;
    assert_non_null(term);
    assert_true(len > 0);
    assert_int_equal(term[len], '\0');
    assert_int_equal(strlen(term), len); /* no NUL inside */
    assert_true(is_valid_utf8(term, len));
    assert_true(is_made_of_word_characters(term, len));
    if (out->max_token_bytes != 0)
        assert_true(len <= out->max_token_bytes);
    if (out->count > 0)
        assert_true(position > out->last_position);
    out->last_position = position;
    out->count++;
    int written = snprintf(out->joined + out->joined_len, JOINED_MAX - out->joined_len, "%s%s@%u",
                           out->joined_len ? " " : "", term, position);
    assert_true(written > 0 && (size_t)written < JOINED_MAX - out->joined_len);
    out->joined_len += (size_t)written;
}

static isn_analyzer *make_analyzer(bool stem, bool stopwords, uint32_t max_token_bytes) {
    isn_analyzer_config config = {.stem = stem, .stopwords = stopwords, .max_token_bytes = max_token_bytes};
    isn_analyzer *analyzer = isn_analyzer_new(&config);
    assert_non_null(analyzer);
    return analyzer;
}

/* Analyzes text[0..len) and returns the positions used; the terms land in *out. */
static uint32_t analyze_into(isn_analyzer *analyzer, const char *text, size_t len, collected_terms *out,
                             uint32_t max_token_bytes) {
    memset(out, 0, sizeof *out);
    out->max_token_bytes = max_token_bytes;
    return isn_analyze(analyzer, text, len, collect_term, out);
}

/* Analyzes text with the given analyzer and checks terms and the number of positions. */
static void check_bytes(isn_analyzer *analyzer, const char *text, size_t len, const char *expected_terms,
                        uint32_t expected_positions) {
    collected_terms out;
    uint32_t positions = analyze_into(analyzer, text, len, &out, 0);
    assert_string_equal(out.joined, expected_terms);
    assert_int_equal(positions, expected_positions);
}

static void check(isn_analyzer *analyzer, const char *text, const char *expected_terms, uint32_t expected_positions) {
    check_bytes(analyzer, text, strlen(text), expected_terms, expected_positions);
}

/* Stemming and stopwords off: the tokenizer and normalizer alone. */
static isn_analyzer *plain_analyzer(void) {
    return make_analyzer(false, false, 64);
}

/* ------------------------------------------------------------------ config */

static void test_config_default(void **state) {
    (void)state;
    isn_analyzer_config config;
    memset(&config, 0xAB, sizeof config);
    isn_analyzer_config_default(&config);
    assert_true(config.stem);
    assert_true(config.stopwords);
    assert_int_equal(config.max_token_bytes, 64);
    isn_analyzer *analyzer = isn_analyzer_new(&config);
    assert_non_null(analyzer);
    check(analyzer, "The Running Dogs", "run@1 dog@2", 3);
    isn_analyzer_free(analyzer);
    isn_analyzer_free(NULL);
}

/* ------------------------------------------------------------------ tokenization */

static void test_tokens_and_positions(void **state) {
    (void)state;
    isn_analyzer *a = plain_analyzer();
    check(a, "hello world", "hello@0 world@1", 2);
    check(a, "  Hello,   World!  ", "hello@0 world@1", 2);
    check(a, "foo-bar baz_qux a.b/c", "foo@0 bar@1 baz@2 qux@3 a@4 b@5 c@6", 7);
    check(a, "tab\tnew\nline\r\nend", "tab@0 new@1 line@2 end@3", 4);
    check(a, "email: john.doe@example.com", "email@0 john@1 doe@2 example@3 com@4", 5);
    check(a, "x", "x@0", 1);
    /* Unicode punctuation, symbols and spaces separate too. */
    check(a, "a\xe2\x80\x94" "b\xc2\xa0" "c\xe2\x82\xac" "d\xe3\x80\x80" "e", "a@0 b@1 c@2 d@3 e@4", 5);
    /* Letters of other scripts are tokens; CJK runs stay one token (no segmentation). */
    check(a, "\xd0\x9c\xd0\xbe\xd1\x81\xd0\xba\xd0\xb2\xd0\xb0 \xe6\x9d\xb1\xe4\xba\xac",
          "\xd0\xbc\xd0\xbe\xd1\x81\xd0\xba\xd0\xb2\xd0\xb0@0 \xe6\x9d\xb1\xe4\xba\xac@1", 2);
    isn_analyzer_free(a);
}

static void test_empty_and_blank_text(void **state) {
    (void)state;
    isn_analyzer *a = make_analyzer(true, true, 64);
    check(a, "", "", 0);
    check(a, "    \t\r\n  ", "", 0);
    check(a, "!!! ... --- ??? ()[]{}", "", 0);
    check_bytes(a, "\0\0\0", 3, "", 0);
    collected_terms out;
    assert_int_equal(analyze_into(a, NULL, 0, &out, 0), 0);
    assert_int_equal(out.count, 0);
    /* A NULL callback only counts positions. */
    assert_int_equal(isn_analyze(a, "one two three", 13, NULL, NULL), 3);
    isn_analyzer_free(a);
}

static void test_length_is_respected(void **state) {
    (void)state;
    isn_analyzer *a = plain_analyzer();
    /* Only the first len bytes are read: "hello wor" */
    check_bytes(a, "hello world", 9, "hello@0 wor@1", 2);
    /* A text ending inside a multi-byte character: the partial character separates. */
    check_bytes(a, "caf\xc3\xa9", 4, "caf@0", 1);
    isn_analyzer_free(a);
}

static void test_nul_inside_text(void **state) {
    (void)state;
    isn_analyzer *a = plain_analyzer();
    check_bytes(a, "abc\0def\0\0ghi", 12, "abc@0 def@1 ghi@2", 3);
    check_bytes(a, "\0start", 6, "start@0", 1);
    check_bytes(a, "end\0", 4, "end@0", 1);
    isn_analyzer_free(a);
}

static void test_combining_marks(void **state) {
    (void)state;
    isn_analyzer *a = plain_analyzer();
    /* A mark inside a token joins it (and NFC composes e + U+0301 into U+00E9). */
    check(a, "cafe\xcc\x81 ok", "caf\xc3\xa9@0 ok@1", 2);
    /* A mark with no token before it separates. */
    check(a, "\xcc\x81" "abc \xcc\x81\xcc\x81", "abc@0", 1);
    /* Devanagari: vowel signs are marks (Mc/Mn) and stay inside the word. */
    check(a, "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80",
          "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80@0", 1);
    isn_analyzer_free(a);
}

/* ------------------------------------------------------------------ folding and NFKC */

static void test_ascii_case_folding(void **state) {
    (void)state;
    isn_analyzer *a = plain_analyzer();
    check(a, "HELLO World hElLo 0AZaz9", "hello@0 world@1 hello@2 0azaz9@3", 4);
    isn_analyzer_free(a);
}

static void test_unicode_case_folding(void **state) {
    (void)state;
    isn_analyzer *a = plain_analyzer();
    check(a, "\xc3\x89" "COLE", "\xc3\xa9" "cole@0", 1);                     /* ÉCOLE -> école */
    check(a, "Stra\xc3\x9f" "e STRASSE", "strasse@0 strasse@1", 2);          /* Straße -> strasse */
    check(a, "\xce\xa3\xce\x9f\xce\xa6\xce\x99\xce\x91",                     /* ΣΟΦΙΑ -> σοφια */
          "\xcf\x83\xce\xbf\xcf\x86\xce\xb9\xce\xb1@0", 1);
    check(a, "\xe2\x84\xaa" "elvin", "kelvin@0", 1);                          /* U+212A Kelvin sign */
    check(a, "\xc3\x84pfel \xc3\xa4pfel", "\xc3\xa4pfel@0 \xc3\xa4pfel@1", 2); /* Äpfel */
    isn_analyzer_free(a);
}

static void test_nfkc(void **state) {
    (void)state;
    isn_analyzer *a = plain_analyzer();
    check(a, "\xef\xac\x81le", "file@0", 1);                                     /* U+FB01 ligature fi */
    check(a, "\xef\xbc\xa1\xef\xbc\xa2\xef\xbc\xa3\xef\xbc\x91\xef\xbc\x92\xef\xbc\x93", "abc123@0", 1); /* fullwidth */
    check(a, "\xef\xbc\x91\xef\xbc\x99\xef\xbc\x98\xef\xbc\x94", "1984@0", 1);   /* fullwidth digits */
    check(a, "\xe2\x85\xab", "xii@0", 1);                                        /* U+216B roman numeral twelve */
    check(a, "x\xc2\xb2", "x2@0", 1);                                            /* superscript two */
    check(a, "\xe2\x91\xa0", "1@0", 1);                                          /* circled digit one */
    /* U+00BD (a number) normalizes to "1", U+2044 fraction slash, "2": split again. */
    check(a, "\xc2\xbd cup", "1@0 2@1 cup@2", 3);
    /* Default-ignorable characters vanish: a variation selector inside a word, a Hangul filler
     * (a letter, so a token) that normalizes to nothing takes no position. */
    check(a, "ab\xef\xb8\x8f" "cd", "abcd@0", 1);
    check(a, "a \xe3\x85\xa4 b", "a@0 b@1", 2);
    /* Composed and decomposed forms give the same term. */
    check(a, "re\xcc\x81sume\xcc\x81 r\xc3\xa9sum\xc3\xa9", "r\xc3\xa9sum\xc3\xa9@0 r\xc3\xa9sum\xc3\xa9@1", 2);
    isn_analyzer_free(a);
}

/* The ASCII fast path must agree with utf8proc's NFKC_Casefold. */
static void test_ascii_fast_path_matches_utf8proc(void **state) {
    (void)state;
    isn_analyzer *a = plain_analyzer();
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t seed = 0x1234567;
    for (int round = 0; round < 500; round++) {
        char word[40];
        size_t len = 1 + (size_t)(round % 39);
        for (size_t i = 0; i < len; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            word[i] = alphabet[(seed >> 33) % (sizeof alphabet - 1)];
        }
        word[len] = '\0';
        utf8proc_uint8_t *expected = utf8proc_NFKC_Casefold((const utf8proc_uint8_t *)word);
        assert_non_null(expected);
        char expected_joined[64];
        snprintf(expected_joined, sizeof expected_joined, "%s@0", (const char *)expected);
        check(a, word, expected_joined, 1);
        free(expected);
    }
    isn_analyzer_free(a);
}

/* ------------------------------------------------------------------ invalid UTF-8 */

static void test_invalid_utf8(void **state) {
    (void)state;
    isn_analyzer *a = plain_analyzer();
    /* 0xff and 0xfe never occur in UTF-8. */
    check(a, "ab\xff" "cd", "ab@0 cd@1", 2);
    check(a, "\xff\xfe" "ab", "ab@0", 1);
    check(a, "ab\xff", "ab@0", 1);
    /* Lone continuation bytes. */
    check(a, "\x80" "ab\x80\xbf" "cd\xbf", "ab@0 cd@1", 2);
    /* Truncated sequences: a 3-byte lead with one continuation, then ASCII. */
    check(a, "ab\xe2\x82" "cd", "ab@0 cd@1", 2);
    check(a, "\xf0\x9f\x98" "ab", "ab@0", 1);
    check(a, "ab\xe2\x82", "ab@0", 1);
    check(a, "ab\xf0", "ab@0", 1);
    /* A truncated sequence must not swallow the valid character after it (U+00E9). */
    check(a, "x\xe2\xc3\xa9y", "x@0 \xc3\xa9y@1", 2);
    /* Overlong encodings: "/" as C0 AF, "A" as E0 81 81 and F0 80 81 81; C1 is never valid. */
    check(a, "ab\xc0\xaf" "cd", "ab@0 cd@1", 2);
    check(a, "ab\xe0\x81\x81" "cd", "ab@0 cd@1", 2);
    check(a, "ab\xf0\x80\x81\x81" "cd", "ab@0 cd@1", 2);
    check(a, "\xc1\x81", "", 0);
    /* Overlong forms of letters must not become letters. */
    check(a, "\xc1\x81\xc1\x82", "", 0);
    /* UTF-16 surrogates (U+D800) and values past U+10FFFF (F4 90 80 80, F5...). */
    check(a, "ab\xed\xa0\x80" "cd", "ab@0 cd@1", 2);
    check(a, "ab\xf4\x90\x80\x80" "cd\xf5\x80\x80\x80", "ab@0 cd@1", 2);
    /* Only invalid bytes. */
    check(a, "\xff\xfe\xfd\x80\xc0", "", 0);
    /* Invalid bytes between letters of another script still separate. */
    check(a, "\xd0\xb4\xff\xd0\xb0", "\xd0\xb4@0 \xd0\xb0@1", 2);
    /* An invalid byte right after an apostrophe-s: still a possessive. */
    check(a, "john's\xff" "book", "john@0 book@1", 2);
    isn_analyzer_free(a);
}

/* ------------------------------------------------------------------ length cut */

static void test_long_token_cut(void **state) {
    (void)state;
    isn_analyzer *a = plain_analyzer();
    char text[512], expected[512];
    collected_terms out;

    /* ASCII: 100 letters -> the first 64, lowercased. */
    memset(text, 'A', 100);
    text[100] = '\0';
    memset(expected, 'a', 64);
    strcpy(expected + 64, "@0");
    check(a, text, expected, 1);

    /* "a" + 40 x U+00E9 (2 bytes): 1 + 2*31 = 63 bytes fit, the 32nd would end at 65. */
    size_t n = 0;
    text[n++] = 'a';
    for (int i = 0; i < 40; i++) {
        text[n++] = (char)0xc3;
        text[n++] = (char)0xa9;
    }
    text[n] = '\0';
    assert_int_equal(analyze_into(a, text, n, &out, 64), 1);
    assert_int_equal(out.count, 1);
    char *at = strrchr(out.joined, '@');
    assert_non_null(at);
    size_t term_len = (size_t)(at - out.joined);
    assert_int_equal(term_len, 63);
    assert_true(is_valid_utf8(out.joined, term_len));

    /* 30 x U+4E2D (3 bytes) = 90 bytes -> 21 characters, 63 bytes. */
    n = 0;
    for (int i = 0; i < 30; i++) {
        memcpy(text + n, "\xe4\xb8\xad", 3);
        n += 3;
    }
    assert_int_equal(analyze_into(a, text, n, &out, 64), 1);
    at = strrchr(out.joined, '@');
    term_len = (size_t)(at - out.joined);
    assert_int_equal(term_len, 63);
    assert_true(is_valid_utf8(out.joined, term_len));
    isn_analyzer_free(a);

    /* A custom limit, and the cut applies to the normalized form: U+FB01 "fi" is 3 bytes raw, 2 folded. */
    a = make_analyzer(false, false, 5);
    check(a, "abcdefgh ij", "abcde@0 ij@1", 2);
    check(a, "\xef\xac\x81\xef\xac\x81\xef\xac\x81", "fifif@0", 1);
    check(a, "\xc3\xa9\xc3\xa9\xc3\xa9", "\xc3\xa9\xc3\xa9@0", 1); /* 6 bytes -> 4, not 5 */
    isn_analyzer_free(a);

    /* Limits below one character's worth are raised to 4 bytes. */
    a = make_analyzer(false, false, 1);
    check(a, "\xe4\xb8\xad\xe4\xb8\xad abcdef", "\xe4\xb8\xad@0 abcd@1", 2);
    isn_analyzer_free(a);
}

static void test_huge_tokens(void **state) {
    (void)state;
    /* Tokens far longer than the limit cost only their prefix and are cut the same way. */
    size_t len = 1u << 20;
    char *text = malloc(len);
    assert_non_null(text);
    for (size_t i = 0; i + 2 <= len; i += 2) {
        text[i] = (char)0xc3; /* U+00C9 É */
        text[i + 1] = (char)0x89;
    }
    isn_analyzer *a = make_analyzer(true, true, 64);
    collected_terms out;
    assert_int_equal(analyze_into(a, text, len, &out, 64), 1);
    char expected[200] = "";
    for (int i = 0; i < 32; i++)
        strcat(expected, "\xc3\xa9");
    strcat(expected, "@0");
    assert_string_equal(out.joined, expected);
    memset(text, 'Q', len);
    assert_int_equal(analyze_into(a, text, len, &out, 64), 1);
    isn_analyzer_free(a);
    free(text);
}

/* ------------------------------------------------------------------ stopwords */

static const char *const lucene_english_stopwords[] = {
    "a",     "an",    "and",  "are",  "as",   "at",   "be",   "but",  "by",   "for",  "if",
    "in",    "into",  "is",   "it",   "no",   "not",  "of",   "on",   "or",   "such", "that",
    "the",   "their", "then", "there", "these", "they", "this", "to",  "was",  "will", "with",
};

static void test_stopwords_removed_positions_advance(void **state) {
    (void)state;
    isn_analyzer *a = make_analyzer(false, true, 64);
    check(a, "the quick brown fox", "quick@1 brown@2 fox@3", 4);
    check(a, "To be or not to be", "", 6);
    check(a, "The Cat IN the Hat", "cat@1 hat@4", 5);
    check(a, "war and peace", "war@0 peace@2", 3);
    /* Words that only start or end like a stopword stay. */
    check(a, "these thesis theirs an anthem i", "thesis@1 theirs@2 anthem@4 i@5", 6);
    /* Every word of the list, alone and in upper case. */
    for (size_t i = 0; i < sizeof lucene_english_stopwords / sizeof lucene_english_stopwords[0]; i++) {
        char upper[16];
        const char *word = lucene_english_stopwords[i];
        size_t len = strlen(word);
        for (size_t k = 0; k <= len; k++)
            upper[k] = (char)(word[k] >= 'a' && word[k] <= 'z' ? word[k] - 32 : word[k]);
        check(a, word, "", 1);
        check(a, upper, "", 1);
    }
    assert_int_equal(sizeof lucene_english_stopwords / sizeof lucene_english_stopwords[0], 33);
    isn_analyzer_free(a);
}

static void test_stopwords_kept_when_disabled(void **state) {
    (void)state;
    isn_analyzer *a = make_analyzer(false, false, 64);
    check(a, "the quick brown fox", "the@0 quick@1 brown@2 fox@3", 4);
    for (size_t i = 0; i < sizeof lucene_english_stopwords / sizeof lucene_english_stopwords[0]; i++) {
        char expected[32];
        snprintf(expected, sizeof expected, "%s@0", lucene_english_stopwords[i]);
        check(a, lucene_english_stopwords[i], expected, 1);
    }
    isn_analyzer_free(a);
}

/* ------------------------------------------------------------------ stemming */

static void test_stemming(void **state) {
    (void)state;
    isn_analyzer *a = make_analyzer(true, false, 64);
    /* Snowball English (Porter2) outputs, as libstemmer gives them. */
    check(a, "running connections flies generously happiness", "run@0 connect@1 fli@2 generous@3 happi@4", 5);
    check(a, "caresses ponies cats relational", "caress@0 poni@1 cat@2 relat@3", 4);
    check(a, "dying skies news agreed", "die@0 sky@1 news@2 agre@3", 4);
    check(a, "Searching SEARCHED searches", "search@0 search@1 search@2", 3);
    check(a, "\xc3\xa9" "coles na\xc3\xafvety", "\xc3\xa9" "cole@0 na\xc3\xafveti@1", 2);
    /* Stemming runs after folding: "RUNNING" stems like "running". */
    check(a, "RUNNING", "run@0", 1);
    /* Stemming off. */
    isn_analyzer *plain = plain_analyzer();
    check(plain, "running connections", "running@0 connections@1", 2);
    isn_analyzer_free(plain);
    isn_analyzer_free(a);
}

/* Cached stems equal fresh Snowball stems, also once the cache has overflowed and evicted. */
/* ASCII tokens are finished in groups (stem cache slots prefetched together): a long text of ASCII
 * and non-ASCII words, stopwords and repeats gives each word's terms at each word's position, exactly
 * as the words analyzed one at a time, on a cold and then a warm cache. */
static void test_long_text_as_words_alone(void **state) {
    (void)state;
    static const char *const words[] = {
        "The",   "quick",   "brown",   "foxes",  "are",     "jumping", "over",   "the",      "lazy",
        "dogs",  "and",     "running", "café",   "through", "fields",  "of",     "Straße",   "flowers",
        "12",    "birds",   "sang",    "x86",    "songs",   "about",   "naïve",  "runners",  "in",
        "the",   "gardens", "ﬁle",     "2026",   "running", "runs",    "ran",    "Ωmega",    "dogs",
        "a",     "I",       "is",      "searching", "searched", "connections", "日本語", "packages",
    };
    enum { NUM_WORDS = sizeof words / sizeof words[0] };
    isn_analyzer *a = make_analyzer(true, true, 64);
    char text[1024] = "", expected[JOINED_MAX] = "";
    size_t expected_len = 0;
    collected_terms alone;
    for (uint32_t w = 0; w < NUM_WORDS; w++) {
        snprintf(text + strlen(text), sizeof text - strlen(text), "%s%s", w ? " " : "", words[w]);
        assert_int_equal(analyze_into(a, words[w], strlen(words[w]), &alone, 0), 1);
        if (alone.count == 0) continue; /* a stopword: its position stays taken */
        assert_int_equal(alone.count, 1);
        char *at = strrchr(alone.joined, '@');
        expected_len += (size_t)snprintf(expected + expected_len, sizeof expected - expected_len, "%s%.*s@%u",
                                         expected_len ? " " : "", (int)(at - alone.joined), alone.joined, w);
    }
    for (int pass = 0; pass < 2; pass++) {
        isn_analyzer *fresh = make_analyzer(true, true, 64);
        check(pass ? a : fresh, text, expected, NUM_WORDS);
        isn_analyzer_free(fresh);
    }
    isn_analyzer_free(a);
}

static void test_stem_cache_agrees_with_snowball(void **state) {
    (void)state;
    isn_analyzer *a = make_analyzer(true, false, 64);
    struct sb_stemmer *reference = sb_stemmer_new("english", "UTF_8");
    assert_non_null(reference);
    static const char *const suffixes[] = {"ing", "ed", "s", "ies", "ational", "ness", "ly", "", "ement", "izer"};
    uint64_t seed = 42;
    for (int pass = 0; pass < 2; pass++) {
        seed = 42;
        for (int i = 0; i < 150000; i++) {
            char word[48];
            size_t len = 0;
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t r = seed >> 11;
            size_t stem_len = 3 + r % 9;
            for (size_t k = 0; k < stem_len; k++) {
                word[len++] = "abcdefghijklmnopqrstuvwxyz"[r % 26];
                r = r / 26 + (uint64_t)k * 7919;
            }
            const char *suffix = suffixes[(seed >> 3) % 10];
            strcpy(word + len, suffix);
            len += strlen(suffix);
            const sb_symbol *stem = sb_stemmer_stem(reference, (const sb_symbol *)word, (int)len);
            char expected[64];
            snprintf(expected, sizeof expected, "%.*s@0", sb_stemmer_length(reference), (const char *)stem);
            check(a, word, expected, 1);
        }
    }
    sb_stemmer_delete(reference);
    isn_analyzer_free(a);
}

/* ------------------------------------------------------------------ possessives and apostrophes */

static void test_possessives(void **state) {
    (void)state;
    isn_analyzer *a = plain_analyzer();
    check(a, "john's book", "john@0 book@1", 2);
    check(a, "JOHN'S BOOK", "john@0 book@1", 2);
    check(a, "John\xe2\x80\x99s book", "john@0 book@1", 2); /* U+2019 */
    check(a, "the dog's", "the@0 dog@1", 2);
    check(a, "james's", "james@0", 1);
    check(a, "\xc3\xa9lise's car", "\xc3\xa9lise@0 car@1", 2);
    /* Other apostrophes separate. */
    check(a, "don't", "don@0 t@1", 2);
    check(a, "o'sullivan", "o@0 sullivan@1", 2);
    check(a, "rock'n'roll", "rock@0 n@1 roll@2", 3);
    check(a, "john'sbook", "john@0 sbook@1", 2);
    check(a, "'s 's", "s@0 s@1", 2);
    check(a, "it''s", "it@0 s@1", 2);
    /* After a letter with a combining mark it is a possessive; after a digit (with or without) not. */
    check(a, "jose\xcc\x81's", "jos\xc3\xa9@0", 1);
    check(a, "\xd0\xb1'S", "\xd0\xb1@0", 1);
    check(a, "90's", "90@0 s@1", 2);
    check(a, "9\xcc\x81's", "9\xcc\x81@0 s@1", 2);
    check(a, "\xd9\xa1's", "\xd9\xa1@0 s@1", 2);
    /* Other quotation marks separate and are no possessive. */
    check(a, "john\xe2\x80\x98s", "john@0 s@1", 2);
    /* Possessive at the very end of the text, and a trailing apostrophe alone. */
    check(a, "boss'", "boss@0", 1);
    check(a, "x's", "x@0", 1);
    isn_analyzer_free(a);
    /* With the default pipeline: possessive dropped before stemming. */
    a = make_analyzer(true, true, 64);
    check(a, "the runner's shoes", "runner@1 shoe@2", 3);
    isn_analyzer_free(a);
}

/* ------------------------------------------------------------------ digits */

static void test_digits_and_mixed_tokens(void **state) {
    (void)state;
    isn_analyzer *a = make_analyzer(true, true, 64);
    check(a, "x86 x86_64 1.5 3D 1990s 42", "x86@0 x86@1 64@2 1@3 5@4 3d@5 1990s@6 42@7", 8);
    check(a, "mp3s ipv6 utf8", "mp3s@0 ipv6@1 utf8@2", 3);
    check(a, "\xd9\xa1\xd9\xa2\xd9\xa3", "\xd9\xa1\xd9\xa2\xd9\xa3@0", 1); /* Arabic-Indic digits stay (NFKC keeps them) */
    isn_analyzer_free(a);
}

/* ------------------------------------------------------------------ fuzz */

static uint64_t fuzz_state = 0x9E3779B97F4A7C15ull;

static uint64_t fuzz_next(void) {
    fuzz_state ^= fuzz_state << 13;
    fuzz_state ^= fuzz_state >> 7;
    fuzz_state ^= fuzz_state << 17;
    return fuzz_state;
}

/* Random buffers mixing ASCII, valid UTF-8 of many scripts, apostrophes, marks and raw bytes. */
static size_t fuzz_buffer(uint8_t *buf, size_t cap) {
    static const char *const pieces[] = {
        "a",  "Z",  "7",  " ",  "'",  "s",  "\xe2\x80\x99", "\xcc\x81", "\xc3\xa9", "\xc3\x9f",
        "\xef\xac\x81", "\xef\xb7\xba", "\xc2\xbd", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xe2\x84\xaa",
        "\xea\xb0\x80", "\xe1\x84\x80", "\xe1\x85\xa1", "\xef\xb8\x8f", "\xe3\x85\xa4", "\xc4\xb0", "\0",
        "the", "running",
    };
    size_t len = fuzz_next() % cap;
    size_t n = 0;
    int mode = (int)(fuzz_next() % 3);
    while (n < len) {
        uint64_t r = fuzz_next();
        if (mode == 0 || (mode == 2 && r % 2 == 0)) {
            buf[n++] = (uint8_t)(r >> 8);
        } else {
            const char *piece = pieces[(r >> 8) % (sizeof pieces / sizeof pieces[0])];
            size_t piece_len = piece[0] == '\0' ? 1 : strlen(piece);
            if (n + piece_len > len)
                break;
            memcpy(buf + n, piece, piece_len);
            n += piece_len;
        }
    }
    return n;
}

static void test_fuzz_random_buffers(void **state) {
    (void)state;
    uint32_t limits[] = {64, 5, 16};
    for (size_t l = 0; l < 3; l++) {
        isn_analyzer *analyzers[2] = {make_analyzer(true, true, limits[l]), make_analyzer(false, false, limits[l])};
        for (int round = 0; round < 7000; round++) {
            uint8_t buf[300];
            size_t len = fuzz_buffer(buf, sizeof buf);
            /* Exact-size heap copy, so a read past len is caught by AddressSanitizer. */
            uint8_t *text = malloc(len ? len : 1);
            assert_non_null(text);
            memcpy(text, buf, len);
            for (int k = 0; k < 2; k++) {
                collected_terms out;
                uint32_t positions = analyze_into(analyzers[k], (const char *)text, len, &out, limits[l]);
                assert_true(positions <= 2 * len); /* U+FDFA: 3 bytes, 4 words */
                assert_true(out.count <= positions);
                if (out.count > 0)
                    assert_true(out.last_position < positions);
            }
            free(text);
        }
        isn_analyzer_free(analyzers[0]);
        isn_analyzer_free(analyzers[1]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_default),
        cmocka_unit_test(test_tokens_and_positions),
        cmocka_unit_test(test_empty_and_blank_text),
        cmocka_unit_test(test_length_is_respected),
        cmocka_unit_test(test_nul_inside_text),
        cmocka_unit_test(test_combining_marks),
        cmocka_unit_test(test_ascii_case_folding),
        cmocka_unit_test(test_unicode_case_folding),
        cmocka_unit_test(test_nfkc),
        cmocka_unit_test(test_ascii_fast_path_matches_utf8proc),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_long_token_cut),
        cmocka_unit_test(test_huge_tokens),
        cmocka_unit_test(test_stopwords_removed_positions_advance),
        cmocka_unit_test(test_stopwords_kept_when_disabled),
        cmocka_unit_test(test_stemming),
        cmocka_unit_test(test_stem_cache_agrees_with_snowball),
        cmocka_unit_test(test_possessives),
        cmocka_unit_test(test_digits_and_mixed_tokens),
        cmocka_unit_test(test_fuzz_random_buffers),
        cmocka_unit_test(test_long_text_as_words_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
