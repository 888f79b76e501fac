/* The bytes of a built index: the same input and options give the same file, and the file of a fixed
 * corpus hashes to a recorded value. Builder speed-ups (term table, stem cache, JSON parsing) must
 * leave the bytes as they were; a change of format must update the recorded hashes on purpose. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/index.h"
#include "tests/support/files.h"
#include "tests/support/random.h"

static char tmp_root[] = "/tmp/isn-test-index-bytes-XXXXXX";
static char corpus_path[300];

/* Words that take every analyzer path: stems and stopwords, digits, possessives, non-ASCII letters
 * and compatibility forms, terms longer than the term table's inline bytes and than the stem
 * cache's slots, and the same term spelled in several cases. */
static const char *const words[] = {
    "search",     "searching",  "searched",   "Searches",   "connection", "connections", "connected",
    "the",        "of",         "and",        "is",         "running",    "runs",        "ran",
    "package",    "packages",   "packaging",  "library",    "libraries",  "x86_64",      "2026",
    "v1.2.3",     "Debian's",   "users'",     "café",       "naïve",      "Straße",      "½",
    "ﬁle",        "Ωmega",      "日本語",     "Привет",     "internationalization",       "counterrevolutionaries",
    "antidisestablishmentarianism",           "pneumonoultramicroscopicsilicovolcanoconiosis",
    "GPU",        "gpus",       "kernel",     "kernels",    "a",          "I",           "zzz",
};

static void write_corpus(void) {
    FILE *f = fopen(corpus_path, "w");
    assert_non_null(f);
    support_rng_seed(14);
    const size_t nwords = sizeof words / sizeof words[0];
    for (int d = 0; d < 3000; d++) {
        /* Long ids take the term table's path for strings past its inline bytes; some are integers. */
        if (d % 5 == 0) fprintf(f, "{\"id\": %d, \"title\": \"", 100000 + d);
        else fprintf(f, "{\"id\": \"debpkg:package-number-%05d\", \"title\": \"", d);
        for (uint32_t w = 0, n = 1 + support_rng_below(5); w < n; w++)
            fprintf(f, "%s%s", w ? " " : "", words[support_rng_below((uint32_t)nwords)]);
        fputs("\", \"body\": \"", f);
        for (uint32_t w = 0, n = support_rng_below(60); w < n; w++) {
            /* Zipf-like: the first words are the common ones. */
            uint32_t r = support_rng_below((uint32_t)nwords);
            fprintf(f, "%s%s", w ? (w % 9 ? " " : ", ") : "", words[support_rng_below(r + 1)]);
            if (w % 13 == 7) fprintf(f, " term%u", support_rng_below(4000));
        }
        fputs("\"}\n", f);
    }
    assert_int_equal(fclose(f), 0);
}

/* XXH64 of the built index file. */
static uint64_t build_and_hash(const isn_build_options *o, const char *name) {
    char dir[400], file[420], err[ISN_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, name);
    isn_build_summary s;
    if (isn_build_from_file(corpus_path, dir, o, &s, err, sizeof err) != 0) fail_msg("build: %s", err);
    assert_int_equal(s.docs, 3000);
    snprintf(file, sizeof file, "%s/index.isn", dir);
    size_t len;
    uint8_t *bytes = support_read_file(file, &len);
    assert_non_null(bytes);
    uint64_t hash = isn_hash64(bytes, len);
    free(bytes);
    return hash;
}

static void check_bytes(const isn_build_options *o, const char *name, uint64_t recorded) {
    char again[64];
    snprintf(again, sizeof again, "%s-again", name);
    uint64_t first = build_and_hash(o, name), second = build_and_hash(o, again);
    if (first != second) fail_msg("%s: two builds of the same input differ (%016llx, %016llx)", name,
                                  (unsigned long long)first, (unsigned long long)second);
    if (first != recorded)
        fail_msg("%s: index bytes changed: XXH64 %016llx, recorded %016llx", name, (unsigned long long)first,
                 (unsigned long long)recorded);
}

static void test_default_build_bytes(void **state) {
    (void)state;
    isn_build_options o;
    isn_build_options_default(&o);
    check_bytes(&o, "default", 0x622505db3f697662ull);
}

static void test_no_positions_stored_build_bytes(void **state) {
    (void)state;
    isn_build_options o;
    isn_build_options_default(&o);
    o.positions = false;
    o.num_stored = 1;
    snprintf(o.stored[0], ISN_FIELD_NAME_MAX, "title");
    check_bytes(&o, "no-positions", 0x2a0e5d189cda3f10ull);
}

static int setup(void **state) {
    (void)state;
    /* The build time in the meta section comes from here; everything else must not vary. */
    if (setenv("SOURCE_DATE_EPOCH", "0", 1) != 0) return -1;
    snprintf(corpus_path, sizeof corpus_path, "%s/corpus.jsonl", tmp_root);
    write_corpus();
    return 0;
}

static int cleanup(void **state) {
    (void)state;
    return support_remove_tree(tmp_root);
}

int main(void) {
    if (!mkdtemp(tmp_root)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_build_bytes),
        cmocka_unit_test(test_no_positions_stored_build_bytes),
    };
    return cmocka_run_group_tests(tests, setup, cleanup);
}
