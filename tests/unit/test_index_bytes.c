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

/* XXH64 of the index file in dir. */
static uint64_t hash_index(const char *dir) {
    char file[420];
    snprintf(file, sizeof file, "%s/index.isn", dir);
    size_t len;
    uint8_t *bytes = support_read_file(file, &len);
    assert_non_null(bytes);
    uint64_t hash = isn_hash64(bytes, len);
    free(bytes);
    return hash;
}

/* XXH64 of the built index file. */
static uint64_t build_and_hash(const isn_build_options *o, const char *name) {
    char dir[400], err[ISN_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, name);
    isn_build_summary s;
    if (isn_build_from_file(corpus_path, dir, o, &s, err, sizeof err) != 0) fail_msg("build: %s", err);
    assert_int_equal(s.docs, 3000);
    return hash_index(dir);
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

/* ------------------------------------------------------------------ two corpora, one process */

/* Document d of corpus c (0 or 1): the corpora draw from the word list in opposite orders, so they
 * meet their common words in different orders and give them different term ids. */
static void corpus_doc(int c, int d, char *id, size_t id_cap, char *title, char *body, size_t cap) {
    support_rng_seed(1000003u * (uint64_t)(c + 1) + (uint64_t)d);
    const uint32_t nwords = (uint32_t)(sizeof words / sizeof words[0]);
    snprintf(id, id_cap, "c%d-doc-%04d", c, d);
    size_t t = 0, b = 0;
    title[0] = body[0] = '\0';
    for (uint32_t w = 0, n = 1 + support_rng_below(4); w < n; w++) {
        uint32_t r = support_rng_below(nwords);
        t += (size_t)snprintf(title + t, cap - t, "%s%s", w ? " " : "", words[c ? nwords - 1 - r : r]);
    }
    for (uint32_t w = 0, n = 1 + support_rng_below(40); w < n; w++) {
        uint32_t r = support_rng_below(support_rng_below(nwords) + 1);
        b += (size_t)snprintf(body + b, cap - b, "%s%s", w ? " " : "", words[c ? nwords - 1 - r : r]);
        if (w % 11 == 5) b += (size_t)snprintf(body + b, cap - b, " c%dterm%u", c, support_rng_below(300));
    }
}

#define CORPUS_DOCS 1500

static void write_corpus_file(int c, const char *path) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    char id[32], title[512], body[4096];
    for (int d = 0; d < CORPUS_DOCS; d++) {
        corpus_doc(c, d, id, sizeof id, title, body, sizeof title < sizeof body ? sizeof title : sizeof body);
        fprintf(f, "{\"id\": \"%s\", \"title\": \"%s\", \"body\": \"%s\"}\n", id, title, body);
    }
    assert_int_equal(fclose(f), 0);
}

/* Builders in one process share nothing: the stem cache's memo of term ids belongs to one builder's
 * analyzer. Two corpora built one after the other, then by two builders alive at once taking their
 * documents in turns, give the bytes recorded from main's builder (which had no memo), each alone. */
static void test_two_corpora_in_one_process(void **state) {
    (void)state;
    static const uint64_t recorded[2] = {0xab28b7d205013c3dull, 0x78db4f6c108ad32eull};
    isn_build_options o;
    isn_build_options_default(&o);
    char path[2][400], dir[400], err[ISN_ERR_LEN];
    uint64_t alone[2];
    for (int c = 0; c < 2; c++) {
        snprintf(path[c], sizeof path[c], "%s/corpus-%d.jsonl", tmp_root, c);
        write_corpus_file(c, path[c]);
        snprintf(dir, sizeof dir, "%s/alone-%d", tmp_root, c);
        isn_build_summary s;
        if (isn_build_from_file(path[c], dir, &o, &s, err, sizeof err) != 0) fail_msg("build: %s", err);
        assert_int_equal(s.docs, CORPUS_DOCS);
        alone[c] = hash_index(dir);
        if (alone[c] != recorded[c])
            fail_msg("corpus %d built alone: XXH64 %016llx, recorded %016llx", c, (unsigned long long)alone[c],
                     (unsigned long long)recorded[c]);
    }
    isn_builder *b[2] = {isn_builder_new(&o), isn_builder_new(&o)};
    assert_non_null(b[0]);
    assert_non_null(b[1]);
    char id[32], title[512], body[4096];
    for (int d = 0; d < CORPUS_DOCS; d++)
        for (int c = 0; c < 2; c++) {
            corpus_doc(c, d, id, sizeof id, title, body, sizeof title);
            const char *fields[2] = {title, body};
            size_t lens[2] = {strlen(title), strlen(body)};
            if (isn_builder_add(b[c], id, fields, lens, 0.0f, err, sizeof err) != 0) fail_msg("add: %s", err);
        }
    for (int c = 0; c < 2; c++) {
        snprintf(dir, sizeof dir, "%s/in-turns-%d", tmp_root, c);
        isn_build_summary s;
        if (isn_builder_write(b[c], dir, &s, err, sizeof err) != 0) fail_msg("write: %s", err);
        isn_builder_free(b[c]);
        uint64_t hash = hash_index(dir);
        if (hash != alone[c])
            fail_msg("corpus %d built beside the other: XXH64 %016llx, alone %016llx", c, (unsigned long long)hash,
                     (unsigned long long)alone[c]);
    }
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
        cmocka_unit_test(test_two_corpora_in_one_process),
    };
    return cmocka_run_group_tests(tests, setup, cleanup);
}
