/* Index builder, reader, cursors, verify, and refusal of damaged files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "index/analyzer_internal.h" /* the emitted-term test reads the stem cache's memo word */
#include "index/format.h"            /* the damage tests rewrite checksums, so they need the layout */
#include "index/index.h"
#include "tests/support/files.h"
#include "tests/support/index_builder.h"

static char tmp_root[] = "/tmp/isn-test-index-XXXXXX";
static int dir_counter;

static void make_dir(char *out, size_t len) {
    snprintf(out, len, "%s/%d", tmp_root, dir_counter++);
}

static isn_build_options plain_options(void) {
    isn_build_options o;
    isn_build_options_default(&o);
    o.num_fields = 2;
    o.analyzer.stem = false;
    o.analyzer.stopwords = false;
    return o;
}

static void add_doc(isn_builder *b, const char *id, const char *title, const char *body, float score) {
    const char *fields[2] = {title, body};
    size_t lens[2] = {title ? strlen(title) : 0, body ? strlen(body) : 0};
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_builder_add(b, id, fields, lens, score, err, sizeof err), 0);
}

/* A collection with one long list (300 postings, 3 blocks) and short ones. */
static isn_index *build_sample(char *dir, size_t dir_len, isn_doc_order order, bool positions) {
    isn_build_options o = plain_options();
    o.order = order;
    o.positions = positions;
    if (order == ISN_ORDER_STATIC) strcpy(o.static_score_field, "prior");
    isn_builder *b = isn_builder_new(&o);
    assert_non_null(b);
    char id[32], body[256];
    for (int d = 0; d < 300; d++) {
        snprintf(id, sizeof id, "doc%03d", 299 - d);
        int n = snprintf(body, sizeof body, "common");
        for (int r = 0; r < d % 4; r++) n += snprintf(body + n, sizeof body - (size_t)n, " common");
        if (d % 7 == 0) n += snprintf(body + n, sizeof body - (size_t)n, " seven");
        if (d == 150) snprintf(body + n, sizeof body - (size_t)n, " unique");
        add_doc(b, id, d % 2 ? "odd title" : NULL, body, (float)d);
    }
    char err[ISN_ERR_LEN];
    make_dir(dir, dir_len);
    isn_build_summary s;
    assert_int_equal(isn_builder_write(b, dir, &s, err, sizeof err), 0);
    assert_int_equal(s.docs, 300);
    isn_builder_free(b);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) fail_msg("open: %s", err);
    return ix;
}

static uint32_t term(const isn_index *ix, const char *t) {
    uint32_t id;
    if (!isn_index_find_term(ix, t, strlen(t), &id)) fail_msg("term %s not found", t);
    return id;
}

/* Document d's text: the d-th of `user`, an array of texts. */
static size_t text_of(void *user, uint32_t d, char *text, size_t cap) {
    return (size_t)snprintf(text, cap, "%s", ((const char *const *)user)[d]);
}

/* An index of n such documents, stemmed and without stopwords as an index built by default. */
static void build_stemmed(support_index *ix, const char *const *texts, uint32_t n) {
    isn_build_options o;
    support_plain_build_options(&o);
    o.analyzer.stem = true;
    o.analyzer.stopwords = true;
    assert_int_equal(support_index_build(ix, "emitted", &o, n, text_of, (void *)texts), 0);
}

typedef struct {
    const isn_index *index;
    isn_analyzer *analyzer;
    uint32_t looked_up, memoized;
} emitted_lookups;

/* Each emitted term: the emitted-term lookup agrees with the lexicon's, and says whether it left the
 * answer in the analyzer's memo word. */
static void look_up_emitted(void *ctx, const char *text, size_t len, uint32_t position) {
    (void)position;
    emitted_lookups *e = ctx;
    uint32_t id = UINT32_MAX, plain = UINT32_MAX;
    bool found = isn_index_find_emitted_term(e->index, e->analyzer, text, len, &id);
    assert_int_equal(found, isn_index_find_term(e->index, text, len, &plain));
    if (found) assert_int_equal(id, plain);
    e->looked_up++;
    uint32_t *memo = analyzer_emitted_memo(e->analyzer);
    if (memo && *memo == (found ? id + 1 : UINT32_MAX)) e->memoized++;
}

/* The emitted-term lookup answers as the lexicon does, from the analyzer's stem cache once a word was
 * met, and never trusts the memo of an analyzer made for another index, whose ids differ. */
static void test_emitted_term_lookup(void **state) {
    (void)state;
    const char *texts_a[] = {"running tunnels", "wind tunnel"};
    const char *texts_b[] = {"airships running", "zeppelin"};
    support_index ia, ib;
    build_stemmed(&ia, texts_a, 2);
    build_stemmed(&ib, texts_b, 2);
    const isn_index *a = ia.index, *b = ib.index;
    uint32_t run_a, run_b;
    assert_true(isn_index_find_term(a, "run", 3, &run_a) && isn_index_find_term(b, "run", 3, &run_b));
    assert_int_not_equal(run_a, run_b); /* "airship" sorts before "run" in b */
    const char *query = "running tunnels absentwords running";
    emitted_lookups e = {.index = a, .analyzer = isn_index_new_analyzer(a)};
    assert_non_null(e.analyzer);
    for (int pass = 0; pass < 2; pass++) isn_analyze(e.analyzer, query, strlen(query), look_up_emitted, &e);
    assert_int_equal(e.looked_up, 8);
    assert_int_equal(e.memoized, 8); /* found and absent words alike */

    /* b's analyzer memoizes b's ids; asked about a, it looks them up in a's lexicon. */
    emitted_lookups other = {.index = b, .analyzer = isn_index_new_analyzer(b)};
    assert_non_null(other.analyzer);
    isn_analyze(other.analyzer, query, strlen(query), look_up_emitted, &other);
    assert_int_equal(other.memoized, 4);
    other.index = a;
    other.looked_up = other.memoized = 0;
    isn_analyze(other.analyzer, query, strlen(query), look_up_emitted, &other);
    assert_int_equal(other.looked_up, 4);
    isn_analyzer_free(e.analyzer);
    isn_analyzer_free(other.analyzer);
    support_index_close(&ia);
    support_index_close(&ib);
}

static void test_round_trip(void **state) {
    (void)state;
    char dir[256], err[ISN_ERR_LEN];
    isn_index *ix = build_sample(dir, sizeof dir, ISN_ORDER_INPUT, true);
    const isn_index_info *in = isn_index_get_info(ix);
    assert_int_equal(in->num_docs, 300);
    assert_int_equal(in->num_terms, 5); /* common odd seven title unique */
    assert_string_equal(in->fields[1], "body");
    assert_true(in->has_positions);
    assert_int_equal(isn_index_verify(ix, err, sizeof err), 0);

    size_t len;
    const char *id = isn_index_doc_id(ix, 0, &len);
    assert_int_equal(len, 6);
    assert_memory_equal(id, "doc299", 6);
    assert_int_equal(isn_index_field_len(ix, 3, 0), 2);
    assert_int_equal(isn_index_field_len(ix, 3, 1), 4);
    assert_int_equal(isn_index_doc_len(ix, 7), 1 + 3 + 1 + 2);

    uint32_t t;
    assert_false(isn_index_find_term(ix, "absent", 6, &t));
    assert_false(isn_index_find_term(ix, "", 0, &t));
    char text[16];
    assert_int_equal(isn_index_term_text(ix, term(ix, "seven"), text, sizeof text), 5);
    assert_string_equal(text, "seven");

    isn_term_stats st;
    isn_index_term_stats(ix, term(ix, "common"), &st);
    assert_int_equal(st.df, 300);
    assert_int_equal(st.num_blocks, 3);
    assert_int_equal(st.cf, 300 + 75 * (0 + 1 + 2 + 3));

    isn_cursor c;
    isn_cursor_open(&c, ix, term(ix, "common"));
    for (uint32_t d = 0; d < 300; d++) {
        assert_int_equal(c.doc, d);
        assert_int_equal(isn_cursor_freq(&c), 1 + d % 4);
        isn_cursor_next(&c);
    }
    assert_int_equal(c.doc, ISN_DOC_END);
    assert_int_equal(isn_cursor_next(&c), ISN_DOC_END);

    isn_cursor_open(&c, ix, term(ix, "seven"));
    assert_int_equal(isn_cursor_next_geq(&c, 8), 14);
    assert_int_equal(isn_cursor_next_geq(&c, 14), 14);
    assert_int_equal(isn_cursor_next_geq(&c, 3), 14); /* never backwards */
    assert_int_equal(isn_cursor_freq(&c), 1);
    assert_int_equal(isn_cursor_next_geq(&c, 295), ISN_DOC_END);

    isn_cursor_open(&c, ix, term(ix, "common"));
    assert_int_equal(isn_cursor_next_geq(&c, 200), 200); /* skips into the second block */
    assert_int_equal(isn_cursor_freq(&c), 1);
    assert_int_equal(isn_cursor_shallow_next_geq(&c, 260), 299);
    assert_true(isn_cursor_shallow_max(&c) > 0.0f);
    assert_int_equal(isn_cursor_shallow_next_geq(&c, 100), 255); /* back to the cursor's own block */
    assert_int_equal(isn_cursor_shallow_next_geq(&c, 300), ISN_DOC_END);
    assert_true(isn_cursor_shallow_max(&c) == 0.0f);

    uint32_t pos[8];
    assert_int_equal(isn_index_positions(ix, term(ix, "common"), 3, 1, pos, 8), 4);
    assert_int_equal(pos[0], 0);
    assert_int_equal(pos[3], 3);
    assert_int_equal(isn_index_positions(ix, term(ix, "odd"), 3, 0, pos, 8), 1);
    assert_int_equal(pos[0], 0);
    assert_int_equal(isn_index_positions(ix, term(ix, "odd"), 3, 1, pos, 8), 0);
    assert_int_equal(isn_index_positions(ix, term(ix, "unique"), 150, 1, pos, 8), 1);
    assert_int_equal(pos[0], 3);
    assert_int_equal(isn_index_positions(ix, term(ix, "unique"), 151, 1, pos, 8), 0);
    isn_index_close(ix);
}

/* Reads every third posting's positions in both fields through a positions cursor; each equals what
 * isn_index_positions finds by searching. */
static void check_positions_cursor(const isn_index *ix, uint32_t term_id, bool jumps) {
    isn_cursor c;
    isn_positions_cursor pc;
    isn_cursor_open(&c, ix, term_id);
    isn_positions_cursor_open(&pc, ix, term_id);
    assert_true((pc.postings != NULL) == jumps);
    static uint32_t got[4096], want[4096];
    for (uint32_t i = 0; c.doc != ISN_DOC_END; i++, isn_cursor_next(&c)) {
        if (i % 3) continue;
        uint32_t mask = 0;
        for (uint32_t f = 0; f < 2; f++) {
            uint32_t n = isn_positions_cursor_read(&pc, &c, f, got, 4096);
            assert_int_equal(n, isn_index_positions(ix, term_id, c.doc, f, want, 4096));
            assert_memory_equal(got, want, (n < 4096 ? n : 4096) * sizeof *got);
            for (uint32_t j = 0; j < n; j++) mask |= 1u << (want[j] % 16);
        }
        /* the positions mod 16, once derived; every one before */
        assert_int_equal(isn_positions_cursor_mask(&pc, &c), jumps ? mask : 0xffffu);
    }
}

/* Once the per-field counts are derived, a positions cursor jumps to a posting's positions by its
 * offset in the block instead of skipping those before, except where the offset does not fit in 16
 * bits (a block of more than 64 KiB of positions): the same positions either way; and it knows each
 * posting's positions mod 16. */
static void test_positions_cursor_jumps(void **state) {
    (void)state;
    char dir[256], err[ISN_ERR_LEN];
    isn_build_options o = plain_options();
    o.positions = true;
    isn_builder *b = isn_builder_new(&o);
    assert_non_null(b);
    static char body[8192];
    for (int d = 0; d < 300; d++) {
        char id[32];
        snprintf(id, sizeof id, "doc%03d", d);
        /* "big" 700 times in each of the first 130 documents: its first block holds ~90 KB of positions */
        int n = snprintf(body, sizeof body, "common%s", d % 5 ? " five" : "");
        for (int r = 0; d < 130 && r < 700; r++) n += snprintf(body + n, sizeof body - (size_t)n, " big");
        for (int r = 0; r < d % 9; r++) n += snprintf(body + n, sizeof body - (size_t)n, " common");
        add_doc(b, id, d % 2 ? "common title" : "five", body, 0.0f);
    }
    make_dir(dir, sizeof dir);
    isn_build_summary s;
    assert_int_equal(isn_builder_write(b, dir, &s, err, sizeof err), 0);
    isn_builder_free(b);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) fail_msg("open: %s", err);
    const char *terms[] = {"common", "five", "big", "title"};
    for (uint32_t t = 0; t < 4; t++) check_positions_cursor(ix, term(ix, terms[t]), false);
    assert_non_null(isn_index_field_tfs(ix));
    for (uint32_t t = 0; t < 4; t++) check_positions_cursor(ix, term(ix, terms[t]), true);
    isn_index_close(ix);
}

static void test_document_orders(void **state) {
    (void)state;
    char dir[256], err[ISN_ERR_LEN];
    size_t len;
    isn_index *ix = build_sample(dir, sizeof dir, ISN_ORDER_ID, false);
    assert_memory_equal(isn_index_doc_id(ix, 0, &len), "doc000", 6);
    assert_memory_equal(isn_index_doc_id(ix, 299, &len), "doc299", 6);
    assert_int_equal(isn_index_verify(ix, err, sizeof err), 0);
    assert_false(isn_index_get_info(ix)->has_positions);
    /* input doc 150 (id doc149) has "unique" */
    isn_cursor c;
    isn_cursor_open(&c, ix, term(ix, "unique"));
    assert_memory_equal(isn_index_doc_id(ix, c.doc, &len), "doc149", 6);
    isn_index_close(ix);

    ix = build_sample(dir, sizeof dir, ISN_ORDER_STATIC, false);
    assert_memory_equal(isn_index_doc_id(ix, 0, &len), "doc000", 6); /* highest prior: input doc 299 */
    assert_true(isn_index_static_score(ix, 0) == 299.0f);
    assert_int_equal(isn_index_verify(ix, err, sizeof err), 0);
    isn_index_close(ix);
}

/* (external id, tf) of every posting of a term, sorted: what a document order must not change. */
static size_t list_as_text(const isn_index *ix, const char *t, char (*out)[16], size_t cap) {
    isn_cursor c;
    size_t n = 0, len;
    isn_cursor_open(&c, ix, term(ix, t));
    for (uint32_t doc = c.doc; doc != ISN_DOC_END && n < cap; doc = isn_cursor_next(&c)) {
        const char *id = isn_index_doc_id(ix, doc, &len);
        snprintf(out[n++], 16, "%.*s:%u", (int)len, id, isn_cursor_freq(&c));
    }
    qsort(out, n, 16, (int (*)(const void *, const void *))strcmp);
    return n;
}

static void test_bp_order(void **state) {
    (void)state;
    char dir[256], err[ISN_ERR_LEN];
    isn_index *input = build_sample(dir, sizeof dir, ISN_ORDER_INPUT, true);
    isn_index *bp = build_sample(dir, sizeof dir, ISN_ORDER_BP, true);
    assert_int_equal(isn_index_verify(bp, err, sizeof err), 0);
    /* A permutation: every external id once. */
    uint8_t seen[300] = {0};
    bool moved = false;
    for (uint32_t d = 0; d < 300; d++) {
        size_t len;
        const char *id = isn_index_doc_id(bp, d, &len);
        long n = support_doc_id_number(bp, d, "doc");
        assert_true(n >= 0 && n < 300 && !seen[n]);
        seen[n] = 1;
        moved |= memcmp(id, isn_index_doc_id(input, d, &len), 6) != 0;
    }
    assert_true(moved);
    static const char *const terms[] = {"common", "seven", "unique", "odd", "title"};
    static char a[300][16], b[300][16];
    for (size_t t = 0; t < sizeof terms / sizeof *terms; t++) {
        size_t na = list_as_text(input, terms[t], a, 300), nb = list_as_text(bp, terms[t], b, 300);
        assert_int_equal(na, nb);
        for (size_t i = 0; i < na; i++) assert_string_equal(a[i], b[i]);
    }
    isn_index_close(input);
    isn_index_close(bp);
}

/* The synthetic generator writes version 1 (fixed-size entries, metadata for every block): still read. */
static void test_version1_still_read(void **state) {
    (void)state;
    char dir[256], err[ISN_ERR_LEN];
    make_dir(dir, sizeof dir);
    isn_synth_options o;
    isn_synth_options_default(&o);
    o.docs = 2000;
    o.queries = 5;
    o.threads = 1;
    assert_int_equal(isn_synth_build(dir, &o, NULL, err, sizeof err), 0);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) fail_msg("open: %s", err);
    assert_int_equal(isn_index_get_info(ix)->version, 1);
    assert_int_equal(isn_index_verify(ix, err, sizeof err), 0);
    assert_int_equal(isn_index_verify_threads(ix, 4, err, sizeof err), 0);
    isn_index_close(ix);
}

static void test_builder_rejects(void **state) {
    (void)state;
    isn_build_options o = plain_options();
    isn_builder *b = isn_builder_new(&o);
    char err[ISN_ERR_LEN];
    const char *fields[2] = {"a", "b"};
    size_t lens[2] = {1, 1};
    assert_int_equal(isn_builder_add(b, "x", fields, lens, 0, err, sizeof err), 0);
    assert_int_equal(isn_builder_add(b, "x", fields, lens, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "duplicate id"));
    assert_int_equal(isn_builder_add(b, "", fields, lens, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "id"));
    const char *blank[2] = {"  ", NULL};
    size_t blank_lens[2] = {2, 0};
    assert_int_equal(isn_builder_add(b, "y", blank, blank_lens, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "empty"));
    isn_builder_free(b);
}

static void test_build_from_jsonl(void **state) {
    (void)state;
    char dir[256], input[300], err[ISN_ERR_LEN];
    make_dir(dir, sizeof dir);
    snprintf(input, sizeof input, "%s.jsonl", dir);
    const char *jsonl = "{\"id\":\"a\",\"title\":\"Hello\",\"body\":\"world of search\"}\n"
                        "{\"id\":\"b\",\"title\":\"broken\"\n"          /* malformed JSON */
                        "{\"title\":\"no id\"}\n"                       /* missing id */
                        "{\"id\":\"a\",\"body\":\"again\"}\n"          /* duplicate id */
                        "{\"id\":\"c\",\"body\":\"\"}\n"               /* empty text */
                        "{\"id\":\"d\",\"body\":42}\n"                 /* wrong type */
                        "[1,2]\n"                                      /* not an object */
                        "\n"                                           /* blank lines are skipped */
                        "{\"id\":7,\"body\":\"caf\xff\xfe latte\"}\n"  /* integer id, invalid UTF-8 */
                        "{\"id\":\"e\",\"body\":\"searching worlds\"}";
    assert_int_equal(support_write_text(input, jsonl), 0);
    isn_build_options o;
    isn_build_options_default(&o);
    isn_build_summary s;
    assert_int_equal(isn_build_from_file(input, dir, &o, &s, err, sizeof err), 0);
    assert_int_equal(s.records_read, 9);
    assert_int_equal(s.records_skipped, 6);
    assert_int_equal(s.docs, 3);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    assert_non_null(ix);
    size_t len;
    assert_memory_equal(isn_index_doc_id(ix, 1, &len), "7", 1);
    assert_int_equal(term(ix, "search"), term(ix, "search")); /* "searching" stems to "search" */
    uint32_t t;
    assert_false(isn_index_find_term(ix, "of", 2, &t)); /* stopword */
    assert_true(isn_index_find_term(ix, "latt", 4, &t) || isn_index_find_term(ix, "latte", 5, &t));
    assert_int_equal(isn_index_verify(ix, err, sizeof err), 0);
    isn_index_close(ix);

    o.strict = true;
    make_dir(dir, sizeof dir);
    assert_int_equal(isn_build_from_file(input, dir, &o, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, ":2"));

    assert_int_equal(isn_build_from_file("/nonexistent/input.jsonl", dir, &o, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/input.jsonl"));
}

static void test_build_tsv_partitions(void **state) {
    (void)state;
    char dir[256], input[300], err[ISN_ERR_LEN], part[400];
    make_dir(dir, sizeof dir);
    snprintf(input, sizeof input, "%s.tsv", dir);
    FILE *f = fopen(input, "w");
    for (int i = 0; i < 1000; i++) fprintf(f, "q%d\tterm%d shared words %d\n", i, i % 13, i);
    fputs("no tab here\n", f);
    fclose(f);
    for (int split = 0; split < 2; split++) {
        isn_build_options o;
        isn_build_options_default(&o);
        o.format = ISN_FORMAT_TSV;
        o.partitions = 3;
        o.split = split ? ISN_SPLIT_CONTIGUOUS : ISN_SPLIT_HASH;
        isn_build_summary s;
        make_dir(dir, sizeof dir);
        assert_int_equal(isn_build_from_file(input, dir, &o, &s, err, sizeof err), 0);
        assert_int_equal(s.docs, 1000);
        assert_int_equal(s.records_skipped, 1);
        uint32_t total = 0;
        for (int p = 0; p < 3; p++) {
            snprintf(part, sizeof part, "%s/part-%04d", dir, p);
            isn_index *ix = isn_index_open(part, err, sizeof err);
            if (!ix) fail_msg("%s", err);
            uint32_t n = isn_index_get_info(ix)->num_docs;
            assert_true(n > 200 && n < 450);
            if (split) {
                size_t len;
                char expect[16];
                snprintf(expect, sizeof expect, "q%d", p * 334);
                const char *id = isn_index_doc_id(ix, 0, &len);
                assert_int_equal(len, strlen(expect));
                assert_memory_equal(id, expect, len);
            }
            assert_int_equal(isn_index_verify(ix, err, sizeof err), 0);
            total += n;
            isn_index_close(ix);
        }
        assert_int_equal(total, 1000);
    }
}

/* ------------------------------------------------------------------ damaged files */


static void expect_refused(const char *dir, const char *needle) {
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (ix) fail_msg("damaged index opened; expected an error naming '%s'", needle);
    if (!strstr(err, needle)) fail_msg("error '%s' does not name '%s'", err, needle);
}

static void test_damaged_files(void **state) {
    (void)state;
    char dir[256], path[300];
    isn_index *ix = build_sample(dir, sizeof dir, ISN_ORDER_INPUT, true);
    isn_index_close(ix);
    snprintf(path, sizeof path, "%s/%s", dir, ISN_INDEX_FILE);
    size_t len;
    uint8_t *good = support_read_file(path, &len);
    assert_non_null(good);
    uint8_t *bad = malloc(len);
    const isn_section_entry *table = (const isn_section_entry *)(good + sizeof(isn_file_header));

    for (uint32_t s = 0; s < ((const isn_file_header *)good)->num_sections; s++) {
        if (table[s].bytes == 0) continue;
        memcpy(bad, good, len);
        bad[table[s].offset + table[s].bytes / 2] ^= 0x10;
        assert_int_equal(support_write_file(path, bad, len), 0);
        expect_refused(dir, isn_section_names[s]);
    }
    memcpy(bad, good, len);
    bad[20] ^= 1; /* inside the header */
    assert_int_equal(support_write_file(path, bad, len), 0);
    expect_refused(dir, "header");
    memcpy(bad, good, len);
    ((isn_file_header *)bad)->version = 99;
    assert_int_equal(support_write_file(path, bad, len), 0);
    expect_refused(dir, "version 99");
    memcpy(bad, good, len);
    memcpy(bad, "NOTINDEX", 8);
    assert_int_equal(support_write_file(path, bad, len), 0);
    expect_refused(dir, "magic");
    assert_int_equal(support_write_file(path, good, len - 100), 0);
    expect_refused(dir, "truncated");
    assert_int_equal(support_write_file(path, good, 10), 0);
    expect_refused(dir, "truncated");
    unlink(path);
    expect_refused(dir, "cannot open");

    /* Checksums intact but structure wrong: a block maximum that is not the maximum. */
    memcpy(bad, good, len);
    isn_block_meta *blocks = (isn_block_meta *)(bad + table[SEC_BLOCK_META].offset);
    blocks[0].max_tf_part *= 0.5f;
    support_reseal_index(bad, SEC_BLOCK_META);
    assert_int_equal(support_write_file(path, bad, len), 0);
    char err[ISN_ERR_LEN];
    ix = isn_index_open(dir, err, sizeof err);
    assert_non_null(ix);
    assert_int_equal(isn_index_verify(ix, err, sizeof err), -1);
    assert_non_null(strstr(err, "block_meta"));
    char threaded_err[ISN_ERR_LEN]; /* the lists checked on several threads: the same error */
    for (uint32_t threads = 2; threads <= 8; threads *= 2) {
        assert_int_equal(isn_index_verify_threads(ix, threads, threaded_err, sizeof threaded_err), -1);
        assert_string_equal(threaded_err, err);
    }
    isn_index_close(ix);

    /* A block out of order is caught at open. */
    memcpy(bad, good, len);
    blocks = (isn_block_meta *)(bad + table[SEC_BLOCK_META].offset);
    blocks[1].last_doc = blocks[0].last_doc;
    support_reseal_index(bad, SEC_BLOCK_META);
    assert_int_equal(support_write_file(path, bad, len), 0);
    expect_refused(dir, "block_meta");

    /* Version 2 rebuilds single-block metadata from the term entries and the payload: an entry that
     * disagrees with the payload is refused at open. The last term, "unique", is 6 bytes: df 1, cf - df 0
     * and its maximum. */
    memcpy(bad, good, len);
    uint8_t *unique_df = bad + table[SEC_TERMS].offset + table[SEC_TERMS].bytes - 6;
    assert_int_equal(unique_df[0], 1);
    unique_df[0] = 2;
    support_reseal_index(bad, SEC_TERMS);
    assert_int_equal(support_write_file(path, bad, len), 0);
    expect_refused(dir, "postings");

    /* Document lengths that disagree with the meta section are refused at open; lengths that keep the
     * total but disagree with the postings are caught by verify. */
    memcpy(bad, good, len);
    bad[table[SEC_DOC_LENS].offset + 5] += 1;
    support_reseal_index(bad, SEC_DOC_LENS);
    assert_int_equal(support_write_file(path, bad, len), 0);
    expect_refused(dir, "doc_lens");
    memcpy(bad, good, len);
    bad[table[SEC_DOC_LENS].offset + 3] += 1; /* doc 1 body; every length is one varint byte here */
    bad[table[SEC_DOC_LENS].offset + 5] -= 1; /* doc 2 body */
    support_reseal_index(bad, SEC_DOC_LENS);
    assert_int_equal(support_write_file(path, bad, len), 0);
    ix = isn_index_open(dir, err, sizeof err);
    assert_non_null(ix);
    assert_int_equal(isn_index_verify(ix, err, sizeof err), -1);
    /* the changed norms break the stored block maxima first, else the per-document check fires */
    if (!strstr(err, "doc_lens") && !strstr(err, "block_meta")) fail_msg("unexpected verify error: %s", err);
    assert_int_equal(isn_index_verify_threads(ix, 4, threaded_err, sizeof threaded_err), -1);
    assert_string_equal(threaded_err, err);
    isn_index_close(ix);

    assert_int_equal(support_write_file(path, good, len), 0);
    ix = isn_index_open(dir, err, sizeof err);
    assert_non_null(ix);
    isn_index_close(ix);
    free(good);
    free(bad);
}

static int cleanup(void **state) {
    (void)state;
    return support_remove_tree(tmp_root);
}

int main(void) {
    if (!mkdtemp(tmp_root)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_positions_cursor_jumps),
        cmocka_unit_test(test_emitted_term_lookup),
        cmocka_unit_test(test_document_orders),
        cmocka_unit_test(test_bp_order),         cmocka_unit_test(test_version1_still_read),
        cmocka_unit_test(test_builder_rejects),  cmocka_unit_test(test_build_from_jsonl),
        cmocka_unit_test(test_build_tsv_partitions), cmocka_unit_test(test_damaged_files),
    };
    return cmocka_run_group_tests(tests, NULL, cleanup);
}
