/* The bounded-memory build (--threads N --memory SIZE): on a corpus with bad records, duplicate ids far
 * apart and near, integer ids and static scores, it writes the bytes of the in-memory build for every
 * document order (global too, with and without a prior) and option, on 1, 2, 3 and 16 threads, with a budget small enough for ten runs or more;
 * and when it fails it leaves no index and no temporary file behind. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "index/index.h"
#include "tests/support/files.h"
#include "tests/support/random.h"

#define CORPUS_DOCS 12000

static char tmp_root[] = "/tmp/isn-test-index-runs-XXXXXX";
static char corpus_path[300];

static const char *const words[] = {
    "search", "searching", "searched", "Searches", "connection", "connections", "the",      "of",
    "and",    "running",   "runs",     "package",  "packages",   "library",     "x86_64",   "2026",
    "café",   "naïve",     "Straße",   "日本語",   "kernel",     "kernels",     "GPU",      "gpus",
    "internationalization", "counterrevolutionaries", "a",       "zzz",         "editor",   "image",
};

/* Records of every kind the reader meets: flat ones, ones jansson reads (integer ids, numbers, escapes),
 * malformed ones, empty text, missing ids, duplicate ids (the next record's and one thousands of lines
 * back, so in another batch), blank lines. */
static void write_corpus(void) {
    FILE *f = fopen(corpus_path, "w");
    assert_non_null(f);
    support_rng_seed(39);
    const uint32_t nwords = (uint32_t)(sizeof words / sizeof words[0]);
    for (int d = 0; d < CORPUS_DOCS; d++) {
        if (d % 997 == 13) fputs("{\"id\": \"broken\", \"title\": \n", f);
        if (d % 1201 == 7) fputs("\n", f);
        if (d % 1303 == 5) fputs("{\"title\": \"no id here\", \"body\": \"none\"}\n", f);
        if (d % 1409 == 3) fprintf(f, "{\"id\": \"empty-%d\", \"title\": \"  \", \"body\": \"\"}\n", d);
        char id[64];
        if (d % 7 == 0) snprintf(id, sizeof id, "%d", 500000 + d); /* written as a JSON integer */
        else if (d % 1511 == 9 && d > 3000) snprintf(id, sizeof id, "\"doc-%05d\"", d - 2999); /* a duplicate */
        else snprintf(id, sizeof id, "\"doc-%05d\"", d);
        fprintf(f, "{\"id\": %s, \"title\": \"", id);
        for (uint32_t w = 0, n = 1 + support_rng_below(5); w < n; w++)
            fprintf(f, "%s%s", w ? " " : "", words[support_rng_below(nwords)]);
        fputs("\", \"body\": \"", f);
        for (uint32_t w = 0, n = support_rng_below(90); w < n; w++) {
            uint32_t r = support_rng_below(nwords);
            fprintf(f, "%s%s", w ? (w % 11 ? " " : "\\n") : "", words[support_rng_below(r + 1)]);
            if (w % 9 == 4) fprintf(f, " term%u", support_rng_below(20000));
        }
        fputs("\"", f);
        if (d % 3 == 0) fprintf(f, ", \"rank\": %u", support_rng_below(50)); /* ties in the static order */
        fputs("}\n", f);
        if (d % 2003 == 11) fprintf(f, "{\"id\": %s, \"title\": \"the same id again\", \"body\": \"next line\"}\n", id);
    }
    assert_int_equal(fclose(f), 0);
}

static uint8_t *read_index(const char *dir, uint32_t part, uint32_t parts, size_t *len) {
    char file[600];
    if (parts > 1) snprintf(file, sizeof file, "%s/part-%04u/index.isn", dir, part);
    else snprintf(file, sizeof file, "%s/index.isn", dir);
    uint8_t *bytes = support_read_file(file, len);
    if (!bytes) fail_msg("no index file %s", file);
    return bytes;
}

/* Nothing in dir but the index files (no temporary folder left). */
static void assert_only_index(const char *dir, uint32_t parts) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    uint32_t entries = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        entries++;
        if (parts > 1 ? strncmp(e->d_name, "part-", 5) != 0 : strcmp(e->d_name, "index.isn") != 0)
            fail_msg("%s holds %s", dir, e->d_name);
    }
    closedir(d);
    assert_int_equal(entries, parts);
}

static void build(const isn_build_options *o, const char *dir, isn_build_summary *s) {
    char err[ISN_ERR_LEN];
    support_remove_tree(dir);
    if (isn_build_from_file(corpus_path, dir, o, s, err, sizeof err) != 0) fail_msg("build %s: %s", dir, err);
}

/* The in-memory build of o, then bounded builds on 1, 2, 3 and 16 threads: the same bytes, 10+ runs. */
static void check_same_bytes(isn_build_options o, const char *name) {
    uint32_t parts = o.partitions ? o.partitions : 1;
    char ref_dir[400], dir[400];
    snprintf(ref_dir, sizeof ref_dir, "%s/%s-memory", tmp_root, name);
    isn_build_summary ref;
    o.threads = 1;
    o.memory_bytes = 0;
    build(&o, ref_dir, &ref);
    assert_int_equal(ref.runs, 0);
    assert_true(ref.docs > CORPUS_DOCS * 9 / 10 && ref.docs < CORPUS_DOCS);
    static const uint32_t threads[] = {1, 2, 3, 16};
    for (size_t i = 0; i < sizeof threads / sizeof threads[0]; i++) {
        o.threads = threads[i];
        o.memory_bytes = 0;
        /* The least budget the build takes: each thread's runs get the minimum. */
        o.memory_bytes = isn_build_memory_floor(&o);
        snprintf(dir, sizeof dir, "%s/%s-threads-%u", tmp_root, name, threads[i]);
        isn_build_summary s;
        build(&o, dir, &s);
        if (s.runs < 10) fail_msg("%s, %u threads: %llu runs, not 10 or more", name, threads[i], (unsigned long long)s.runs);
        assert_int_equal(s.docs, ref.docs);
        assert_int_equal(s.records_read, ref.records_read);
        assert_int_equal(s.records_skipped, ref.records_skipped);
        assert_int_equal(s.postings, ref.postings);
        assert_int_equal(s.tokens, ref.tokens);
        for (uint32_t p = 0; p < parts; p++) {
            size_t want_len, got_len;
            uint8_t *want = read_index(ref_dir, p, parts, &want_len), *got = read_index(dir, p, parts, &got_len);
            if (want_len != got_len || memcmp(want, got, want_len) != 0) {
                size_t at = 0;
                while (at < want_len && at < got_len && want[at] == got[at]) at++;
                fail_msg("%s, %u threads, partition %u: the index differs from the in-memory build's at byte %zu "
                         "(%zu and %zu bytes)", name, threads[i], p, at, got_len, want_len);
            }
            free(want);
            free(got);
        }
        assert_only_index(dir, parts);
        support_remove_tree(dir);
    }
    support_remove_tree(ref_dir);
}

static isn_build_options options(void) {
    isn_build_options o;
    isn_build_options_default(&o);
    o.progress = false;
    return o;
}

static void test_input_order(void **state) {
    (void)state;
    check_same_bytes(options(), "input");
}

static void test_no_positions_stored(void **state) {
    (void)state;
    isn_build_options o = options();
    o.positions = false;
    o.num_stored = 2;
    snprintf(o.stored[0], ISN_FIELD_NAME_MAX, "body");
    snprintf(o.stored[1], ISN_FIELD_NAME_MAX, "title");
    check_same_bytes(o, "no-positions-stored");
}

static void test_static_order(void **state) {
    (void)state;
    isn_build_options o = options();
    o.order = ISN_ORDER_STATIC;
    snprintf(o.static_score_field, ISN_FIELD_NAME_MAX, "rank");
    check_same_bytes(o, "static");
}

static void test_id_order_stored(void **state) {
    (void)state;
    isn_build_options o = options();
    o.order = ISN_ORDER_ID;
    o.num_stored = 1;
    snprintf(o.stored[0], ISN_FIELD_NAME_MAX, "title");
    check_same_bytes(o, "id");
}

static void test_bp_order(void **state) {
    (void)state;
    isn_build_options o = options();
    o.order = ISN_ORDER_BP;
    check_same_bytes(o, "bp");
}

static void test_global_order(void **state) {
    (void)state;
    isn_build_options o = options();
    o.order = ISN_ORDER_GLOBAL;
    check_same_bytes(o, "global");
}

/* Global order with a static prior (documents without one score 0), stored fields, no positions, and
 * three partitions, each ordered and bounded on its own. */
static void test_global_order_prior_partitions(void **state) {
    (void)state;
    isn_build_options o = options();
    o.order = ISN_ORDER_GLOBAL;
    snprintf(o.static_score_field, ISN_FIELD_NAME_MAX, "rank");
    o.prior_weight = 0.03f;
    o.positions = false;
    o.partitions = 3;
    o.num_stored = 1;
    snprintf(o.stored[0], ISN_FIELD_NAME_MAX, "title");
    check_same_bytes(o, "global-prior-partitions");
}

static void test_partitions(void **state) {
    (void)state;
    isn_build_options o = options();
    o.partitions = 3;
    o.num_stored = 1;
    snprintf(o.stored[0], ISN_FIELD_NAME_MAX, "title");
    check_same_bytes(o, "partitions");
    o = options();
    o.partitions = 3;
    o.split = ISN_SPLIT_CONTIGUOUS;
    o.order = ISN_ORDER_BP;
    o.positions = false;
    check_same_bytes(o, "partitions-contiguous-bp");
}

/* A strict build stops at the first bad record in input order, whichever thread read it, and leaves
 * nothing behind. */
static void test_strict_stops_at_first_bad_record(void **state) {
    (void)state;
    isn_build_options o = options();
    o.strict = true;
    o.threads = 3;
    o.memory_bytes = isn_build_memory_floor(&o);
    char dir[400], err[ISN_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/strict", tmp_root);
    isn_build_summary s;
    assert_int_equal(isn_build_from_file(corpus_path, dir, &o, &s, err, sizeof err), -1);
    /* the first bad record: line 4, document 3's empty one */
    if (!strstr(err, ":4: stopped at this record")) fail_msg("error: %s", err);
    assert_only_index(dir, 0);
}

/* A build whose files cannot grow (RLIMIT_FSIZE, as a full disk would) fails saying so, and leaves no
 * index and no temporary file; run in a child, the limit being the process's. */
static void test_full_disk(void **state) {
    (void)state;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/full", tmp_root);
    assert_int_equal(mkdir(dir, 0755), 0);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pipefd[0]);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit limit = {256u << 10, 256u << 10}; /* the index and its runs pass it */
        setrlimit(RLIMIT_FSIZE, &limit);
        isn_build_options o = options();
        o.threads = 2;
        o.memory_bytes = isn_build_memory_floor(&o);
        char err[ISN_ERR_LEN];
        isn_build_summary s;
        int rc = isn_build_from_file(corpus_path, dir, &o, &s, err, sizeof err);
        if (write(pipefd[1], err, strlen(err) + 1) < 0) _exit(3);
        _exit(rc == -1 ? 0 : 1);
    }
    close(pipefd[1]);
    char err[ISN_ERR_LEN] = "";
    ssize_t got = read(pipefd[0], err, sizeof err - 1);
    close(pipefd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0) fail_msg("the build did not fail under the file size limit");
    assert_true(got > 0);
    if (!strstr(err, "cannot write") || !strstr(err, "File too large")) fail_msg("error: %s", err);
    assert_only_index(dir, 0);
}

static int setup(void **state) {
    (void)state;
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
        cmocka_unit_test(test_input_order),
        cmocka_unit_test(test_no_positions_stored),
        cmocka_unit_test(test_static_order),
        cmocka_unit_test(test_id_order_stored),
        cmocka_unit_test(test_bp_order),
        cmocka_unit_test(test_global_order),
        cmocka_unit_test(test_global_order_prior_partitions),
        cmocka_unit_test(test_partitions),
        cmocka_unit_test(test_strict_stops_at_first_bad_record),
        cmocka_unit_test(test_full_disk),
    };
    return cmocka_run_group_tests(tests, setup, cleanup);
}
