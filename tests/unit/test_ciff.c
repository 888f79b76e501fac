/* CIFF import and export (index/ciff_*.c): an exported index imports back with bit-identical top-k for
 * every algorithm; a CIFF of pretokenized terms serves the brute-force oracle's answers; every kind of
 * malformed file is refused naming the message and what is wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "index/index.h"
#include "proto/ciff.pb-c.h"
#include "ranking/ranking.h"
#include "tests/support/files.h"
#include "tests/support/index_builder.h"
#include "tests/support/oracle.h"
#include "tests/support/random.h"

static const char *const words[] = {
    "the", "and", "of", "a", "to", "in", "is", "for", "with", "on", "library", "libraries", "image", "images",
    "editor", "editing", "network", "networks", "monitor", "monitoring", "tool", "tools", "python", "xml",
    "parser", "parsing", "server", "servers", "client", "fast", "faster", "simple", "graphical", "terminal",
    "file", "files", "manager", "system", "systems", "data", "database", "driver", "drivers", "kernel",
    "module", "modules", "font", "fonts", "audio", "video", "player", "plays", "game", "games", "documentation",
    "development", "headers", "runtime", "shared", "static", "utility", "utilities", "compression", "archive",
    "mail", "web", "browser", "browsers", "text", "texts", "search", "searching", "engine", "engines", "index",
    "indexes", "query", "queries", "perl", "ruby", "java", "haskell", "rust", "go", "lisp", "scheme", "emacs",
    "vim", "plugin", "plugins", "theme", "themes", "icon", "icons", "desktop", "window", "windows", "printer",
};
#define NUM_WORDS (sizeof words / sizeof *words)

/* ------------------------------------------------------------------ round trip of a built index */

static size_t english_doc(void *user, uint32_t doc, char *text, size_t cap) {
    (void)user;
    support_rng_seed(1000 + doc);
    uint32_t n = 3 + support_rng_below(40);
    size_t len = 0;
    for (uint32_t i = 0; i < n && len + 32 < cap; i++) {
        /* skewed towards the first words, so that some lists span several blocks */
        uint32_t w = support_rng_below(support_rng_below(NUM_WORDS) + 1);
        len += (size_t)snprintf(text + len, cap - len, i % 7 == 3 ? "%s, " : "%s ", words[w]);
        if (i % 11 == 5) len += (size_t)snprintf(text + len, cap - len, "%c%s ", 'A' + (int)(w % 26), words[w] + 1);
    }
    return len;
}

static void make_query(uint32_t q, char *text, size_t cap) {
    support_rng_seed(77 + q);
    uint32_t n = 1 + support_rng_below(5);
    size_t len = 0;
    for (uint32_t i = 0; i < n; i++) len += (size_t)snprintf(text + len, cap - len, "%s ", words[support_rng_below(NUM_WORDS)]);
}

static void search_text(isn_searcher *searcher, const char *text, isn_mode mode, isn_algo algo, isn_hit *hits,
                        uint32_t *num_hits) {
    char err[ISN_ERR_LEN];
    if (support_search_text(searcher, text, mode, algo, 10, hits, num_hits, err) != 0)
        fail_msg("search \"%s\" (%s): %s", text, isn_algo_name(algo), err);
}

static void test_export_import_same_top_k(void **state) {
    (void)state;
    isn_build_options options;
    support_plain_build_options(&options);
    isn_analyzer_config_default(&options.analyzer); /* the English analyzer: stemming and stopwords */
    support_index built;
    assert_int_equal(support_index_build(&built, "ciff-src", &options, 1500, english_doc, NULL), 0);

    char ciff[128], imported_dir[128], err[ISN_ERR_LEN];
    snprintf(ciff, sizeof ciff, "%s/export.ciff", built.dir);
    snprintf(imported_dir, sizeof imported_dir, "%s/imported", built.dir);
    isn_ciff_summary exported, read;
    if (isn_ciff_export(built.dir, ciff, &exported, err, sizeof err) != 0) fail_msg("export: %s", err);
    const isn_index_info *src = isn_index_get_info(built.index);
    assert_int_equal(exported.docs, src->num_docs);
    assert_int_equal(exported.postings_lists, src->num_terms);
    assert_int_equal(exported.postings, src->num_postings);

    isn_ciff_import_options import;
    isn_ciff_import_options_default(&import);
    import.analyzer.pretokenized = false; /* declared: the exporter's analyzer is ISN's English one */
    import.analyzer.stem = import.analyzer.stopwords = true;
    if (isn_ciff_import(ciff, imported_dir, &import, &read, err, sizeof err) != 0) fail_msg("import: %s", err);
    assert_int_equal(read.postings, src->num_postings);
    assert_non_null(strstr(read.description, "Snowball English stemming"));

    isn_index *ix = isn_index_open(imported_dir, err, sizeof err);
    if (!ix) fail_msg("open: %s", err);
    if (isn_index_verify(ix, err, sizeof err) != 0) fail_msg("verify: %s", err);
    const isn_index_info *in = isn_index_get_info(ix);
    assert_true(in->external_terms);
    assert_false(in->analyzer.pretokenized);
    assert_int_equal(in->num_docs, src->num_docs);
    assert_int_equal(in->num_terms, src->num_terms);
    assert_int_equal(in->total_doc_len, src->total_doc_len);
    assert_true(in->avg_doc_len == src->avg_doc_len);
    /* an imported index is a generation of its own: built now, not at the epoch */
    assert_false(in->built_from_mtime);
    assert_true(in->built_unix_seconds >= src->built_unix_seconds);
    for (uint32_t d = 0; d < in->num_docs; d += 97) {
        size_t a, b;
        const char *x = isn_index_doc_id(ix, d, &a), *y = isn_index_doc_id(built.index, d, &b);
        assert_true(a == b && memcmp(x, y, a) == 0);
    }

    isn_searcher *searcher = isn_searcher_new(ix);
    assert_non_null(searcher);
    static const isn_algo or_algos[] = {ISN_ALGO_OR, ISN_ALGO_MAXSCORE, ISN_ALGO_WAND, ISN_ALGO_BMW, ISN_ALGO_BMM, ISN_ALGO_AUTO};
    static const isn_algo and_algos[] = {ISN_ALGO_AND, ISN_ALGO_BMAND};
    isn_hit want[10], got[10];
    uint32_t compared = 0;
    for (uint32_t q = 0; q < 200; q++) {
        char text[256];
        make_query(q, text, sizeof text);
        for (int and_mode = 0; and_mode < 2; and_mode++) {
            const isn_algo *algos = and_mode ? and_algos : or_algos;
            size_t n = and_mode ? 2 : 6;
            for (size_t a = 0; a < n; a++) {
                uint32_t nw, ng;
                isn_mode mode = and_mode ? ISN_MODE_AND : ISN_MODE_OR;
                search_text(built.searcher, text, mode, algos[a], want, &nw);
                search_text(searcher, text, mode, algos[a], got, &ng);
                if (nw != ng || memcmp(want, got, nw * sizeof *want) != 0)
                    fail_msg("query \"%s\" %s: %u hits from the source, %u from the import, or different docs/scores", text,
                             isn_algo_name(algos[a]), nw, ng);
                compared += nw;
            }
        }
    }
    assert_true(compared > 1000);
    isn_searcher_free(searcher);
    isn_index_close(ix);
    support_index_close(&built);
}

/* ------------------------------------------------------------------ CIFF written here, pretokenized terms */

typedef struct {
    uint8_t *data;
    size_t len, cap;
} bytes;

static void put_bytes(bytes *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->data = realloc(b->data, b->cap);
        assert_non_null(b->data);
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void put_varint(bytes *b, uint64_t v) {
    uint8_t x[10];
    size_t n = 0;
    while (v >= 0x80) {
        x[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    x[n++] = (uint8_t)v;
    put_bytes(b, x, n);
}

static void put_message(bytes *b, const ProtobufCMessage *m) {
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *p = malloc(n + 1);
    assert_non_null(p);
    protobuf_c_message_pack(m, p);
    put_varint(b, n);
    put_bytes(b, p, n);
    free(p);
}

static void put_header(bytes *b, int32_t lists, int32_t docs) {
    Ciff__Header h = CIFF__HEADER__INIT;
    h.version = 1;
    h.num_postings_lists = h.total_postings_lists = lists;
    h.num_docs = h.total_docs = docs;
    h.description = (char *)"test";
    put_message(b, &h.base);
}

/* One list of n postings given as absolute doc ids (written as d-gaps). */
static void put_list(bytes *b, const char *term, int64_t df, int64_t cf, const int32_t *docs, const int32_t *tfs, size_t n) {
    Ciff__PostingsList l = CIFF__POSTINGS_LIST__INIT;
    Ciff__Posting *storage = calloc(n ? n : 1, sizeof *storage);
    Ciff__Posting **postings = calloc(n ? n : 1, sizeof *postings);
    assert_true(storage && postings);
    for (size_t i = 0; i < n; i++) {
        ciff__posting__init(&storage[i]);
        storage[i].docid = i ? docs[i] - docs[i - 1] : docs[0];
        storage[i].tf = tfs[i];
        postings[i] = &storage[i];
    }
    l.term = (char *)term;
    l.df = df;
    l.cf = cf;
    l.n_postings = n;
    l.postings = postings;
    put_message(b, &l.base);
    free(storage);
    free(postings);
}

static void put_doc(bytes *b, int32_t docid, const char *id, int32_t len) {
    Ciff__DocRecord r = CIFF__DOC_RECORD__INIT;
    r.docid = docid;
    r.collection_docid = (char *)id;
    r.doclength = len;
    put_message(b, &r.base);
}

#define ORACLE_DOCS 700
#define ORACLE_VOCAB 60

static const char *oracle_term(uint32_t t, char *buf) {
    /* case, punctuation and non-ASCII stay as written: the pretokenized analyzer matches bytes */
    static const char *const shapes[] = {"t%02u", "T%02u", "c++%02u", "naïve-%02u"};
    sprintf(buf, shapes[t % 4], t);
    return buf;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_pretokenized_import_matches_oracle(void **state) {
    (void)state;
    char dir[] = "/tmp/isn-test-ciff-oracle-XXXXXX";
    assert_non_null(mkdtemp(dir));
    support_rng_seed(42);
    /* documents as term lists; lengths = their token counts */
    char *vocab[ORACLE_VOCAB], buf[32];
    for (uint32_t t = 0; t < ORACLE_VOCAB; t++) vocab[t] = strdup(oracle_term(t, buf));
    qsort(vocab, ORACLE_VOCAB, sizeof *vocab, cmp_str); /* CIFF lists in byte order */
    const char **doc_terms[ORACLE_DOCS];
    uint32_t doc_lens[ORACLE_DOCS];
    static int32_t tf[ORACLE_VOCAB][ORACLE_DOCS];
    memset(tf, 0, sizeof tf);
    for (uint32_t d = 0; d < ORACLE_DOCS; d++) {
        doc_lens[d] = 1 + support_rng_below(30);
        doc_terms[d] = malloc(doc_lens[d] * sizeof *doc_terms[d]);
        for (uint32_t i = 0; i < doc_lens[d]; i++) {
            uint32_t t = support_rng_below(support_rng_below(ORACLE_VOCAB) + 1);
            doc_terms[d][i] = vocab[t];
            tf[t][d]++;
        }
    }
    bytes b = {0};
    put_header(&b, ORACLE_VOCAB, ORACLE_DOCS);
    int32_t docs[ORACLE_DOCS], tfs[ORACLE_DOCS];
    for (uint32_t t = 0; t < ORACLE_VOCAB; t++) {
        size_t n = 0;
        int64_t cf = 0;
        for (uint32_t d = 0; d < ORACLE_DOCS; d++)
            if (tf[t][d]) {
                docs[n] = (int32_t)d;
                tfs[n++] = tf[t][d];
                cf += tf[t][d];
            }
        assert_true(n > 0);
        put_list(&b, vocab[t], (int64_t)n, cf, docs, tfs, n);
    }
    for (uint32_t d = 0; d < ORACLE_DOCS; d++) {
        char id[16];
        snprintf(id, sizeof id, "doc-%u", d);
        put_doc(&b, (int32_t)d, id, (int32_t)doc_lens[d]);
    }
    char ciff[96], out[96], err[ISN_ERR_LEN];
    snprintf(ciff, sizeof ciff, "%s/in.ciff", dir);
    snprintf(out, sizeof out, "%s/index", dir);
    assert_int_equal(support_write_file(ciff, b.data, b.len), 0);
    if (isn_ciff_import(ciff, out, NULL, NULL, err, sizeof err) != 0) fail_msg("import: %s", err);
    isn_index *ix = isn_index_open(out, err, sizeof err);
    if (!ix) fail_msg("open: %s", err);
    if (isn_index_verify(ix, err, sizeof err) != 0) fail_msg("verify: %s", err);
    assert_true(isn_index_get_info(ix)->analyzer.pretokenized);
    isn_searcher *searcher = isn_searcher_new(ix);
    oracle_collection *oracle = oracle_new(ORACLE_DOCS, (const char *const *const *)doc_terms, doc_lens, 1.2, 0.75);
    assert_true(searcher && oracle);

    isn_hit hits[10];
    oracle_hit expected[10];
    for (uint32_t q = 0; q < 300; q++) {
        const char *terms[4];
        char text[256] = "";
        uint32_t n = 1 + support_rng_below(4);
        for (uint32_t i = 0; i < n; i++) {
            terms[i] = vocab[support_rng_below(ORACLE_VOCAB)];
            strcat(text, i ? "  " : "");
            strcat(text, terms[i]);
        }
        bool and_mode = q % 3 == 0;
        uint32_t num_hits, num_expected = oracle_top_k(oracle, terms, n, and_mode, 0, 10, expected);
        search_text(searcher, text, and_mode ? ISN_MODE_AND : ISN_MODE_OR, ISN_ALGO_AUTO, hits, &num_hits);
        assert_int_equal(num_hits, num_expected);
        for (uint32_t i = 0; i < num_hits; i++) {
            double diff = hits[i].score - expected[i].score;
            if (diff > 1e-4 || diff < -1e-4) fail_msg("query \"%s\" rank %u: score %.7g, oracle %.7g", text, i, hits[i].score, expected[i].score);
            if (hits[i].doc != expected[i].doc && (i + 1 >= num_hits || hits[i].score - hits[i + 1].score > 1e-4) &&
                (i == 0 || hits[i - 1].score - hits[i].score > 1e-4))
                fail_msg("query \"%s\" rank %u: doc %u, oracle doc %u", text, i, hits[i].doc, expected[i].doc);
        }
    }
    /* exact bytes: another case, or the text analyzer's view of a term, matches nothing */
    uint32_t term_id;
    assert_true(isn_index_find_term(ix, vocab[0], strlen(vocab[0]), &term_id));
    char lower[32];
    snprintf(lower, sizeof lower, "%s", "T00");
    uint32_t num_hits;
    search_text(searcher, "t00", ISN_MODE_OR, ISN_ALGO_AUTO, hits, &num_hits);
    uint32_t lower_hits = num_hits;
    search_text(searcher, lower, ISN_MODE_OR, ISN_ALGO_AUTO, hits, &num_hits);
    assert_true(lower_hits > 0 && num_hits == 0); /* T00 is not a term: "T%02u" is used only for t % 4 == 1 */
    search_text(searcher, "c++01", ISN_MODE_OR, ISN_ALGO_AUTO, hits, &num_hits);
    assert_int_equal(num_hits, 0);
    search_text(searcher, "c++02", ISN_MODE_OR, ISN_ALGO_AUTO, hits, &num_hits);
    assert_true(num_hits > 0);

    oracle_free(oracle);
    isn_searcher_free(searcher);
    isn_index_close(ix);
    for (uint32_t d = 0; d < ORACLE_DOCS; d++) free(doc_terms[d]);
    for (uint32_t t = 0; t < ORACLE_VOCAB; t++) free(vocab[t]);
    free(b.data);
    support_remove_tree(dir);
}

/* ------------------------------------------------------------------ malformed files */

typedef enum {
    GOOD,
    TRUNCATED,
    MORE_LISTS_IN_HEADER,
    MORE_DOCS_IN_HEADER,
    GAP_ZERO,
    DF_MISMATCH,
    CF_MISMATCH,
    HUGE_LENGTH,
    UNSORTED_TERMS,
    DOC_PAST_END,
    DOCS_OUT_OF_ORDER,
    TRAILING_BYTES,
    NOT_PROTOBUF,
    TF_ZERO,
    OVERSIZE_TERM,
    OVERSIZE_POSTING,
} damage;

static bytes small_ciff(damage what) {
    bytes b = {0};
    put_header(&b, what == MORE_LISTS_IN_HEADER ? 3 : 2, what == MORE_DOCS_IN_HEADER ? 4 : 3);
    int32_t apple_docs[] = {0, what == GAP_ZERO ? 0 : (what == DOC_PAST_END ? 3 : 2)}, apple_tfs[] = {1, what == TF_ZERO ? 0 : 2};
    int32_t banana_docs[] = {1}, banana_tfs[] = {3};
    const char *first = what == UNSORTED_TERMS ? "banana" : "apple", *second = what == UNSORTED_TERMS ? "apple" : "banana";
    char long_term[301];
    memset(long_term, 'x', 300);
    long_term[300] = '\0';
    if (what == OVERSIZE_TERM) first = long_term;
    if (what == OVERSIZE_POSTING) {
        /* term "apple", df 2, cf 3, then a 100-byte posting */
        static const uint8_t head[] = {0x0a, 5, 'a', 'p', 'p', 'l', 'e', 0x10, 2, 0x18, 3, 0x22, 100};
        uint8_t zeros[100] = {0};
        put_varint(&b, sizeof head + sizeof zeros);
        put_bytes(&b, head, sizeof head);
        put_bytes(&b, zeros, sizeof zeros);
    } else {
        put_list(&b, first, what == DF_MISMATCH ? 3 : 2, what == CF_MISMATCH ? 4 : 3, apple_docs, apple_tfs, 2);
    }
    if (what == HUGE_LENGTH) {
        put_varint(&b, 1ull << 40);
        return b;
    }
    if (what == NOT_PROTOBUF) {
        put_varint(&b, 3);
        put_bytes(&b, "\xff\xff\xff", 3);
    } else {
        put_list(&b, second, 1, 3, banana_docs, banana_tfs, 1);
    }
    put_doc(&b, 0, "A", 3);
    put_doc(&b, what == DOCS_OUT_OF_ORDER ? 2 : 1, "B", 3);
    put_doc(&b, what == DOCS_OUT_OF_ORDER ? 1 : 2, "C", 2);
    if (what == TRAILING_BYTES) put_bytes(&b, "\x00\x01", 2);
    if (what == TRUNCATED) b.len -= 3;
    return b;
}

static void test_malformed_files_are_refused(void **state) {
    (void)state;
    static const struct {
        damage what;
        const char *says;
    } cases[] = {
        {TRUNCATED, "message 6 (doc record"},
        {MORE_LISTS_IN_HEADER, "doc record"},
        {MORE_DOCS_IN_HEADER, "and 4 doc records"},
        {GAP_ZERO, "message 2 (postings list \"apple\", byte"},
        {GAP_ZERO, "doc id gap 0"},
        {DF_MISMATCH, "df 3, but the list holds 2 postings"},
        {CF_MISMATCH, "cf 4, but the postings' tf sum to 3"},
        {HUGE_LENGTH, "message 3 (postings list, byte"},
        {HUGE_LENGTH, "only 0 remain"},
        {UNSORTED_TERMS, "does not come after \"banana\""},
        {DOC_PAST_END, "doc 3, but the file has 3 documents"},
        {DOCS_OUT_OF_ORDER, "docid 2 where 1 comes next"},
        {TRAILING_BYTES, "2 bytes after the last doc record"},
        {NOT_PROTOBUF, "message 3 (postings list, byte 39): a field tag is malformed"},
        {MORE_DOCS_IN_HEADER, "message 7 (doc record, byte"},
        {TF_ZERO, "tf 0"},
        {OVERSIZE_TERM, "message 2 (postings list, byte 17): a term of 300 bytes (1 to 255 allowed)"},
        {OVERSIZE_POSTING, "message 2 (postings list \"apple\", byte 17): posting 1 is 100 bytes"},
    };
    char dir[] = "/tmp/isn-test-ciff-bad-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[96], out[96], err[ISN_ERR_LEN];
    snprintf(path, sizeof path, "%s/bad.ciff", dir);
    snprintf(out, sizeof out, "%s/index", dir);
    bytes good = small_ciff(GOOD);
    assert_int_equal(support_write_file(path, good.data, good.len), 0);
    if (isn_ciff_import(path, out, NULL, NULL, err, sizeof err) != 0) fail_msg("the good file: %s", err);
    isn_index *ix = isn_index_open(out, err, sizeof err);
    assert_non_null(ix);
    assert_int_equal(isn_index_get_info(ix)->num_postings, 3);
    isn_index_close(ix);
    free(good.data);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bytes b = small_ciff(cases[i].what);
        assert_int_equal(support_write_file(path, b.data, b.len), 0);
        err[0] = '\0';
        int rc = isn_ciff_import(path, out, NULL, NULL, err, sizeof err);
        if (rc == 0 || !strstr(err, cases[i].says) || !strstr(err, path))
            fail_msg("case %zu: rc %d, error \"%s\", expected it to say \"%s\"", i, rc, err, cases[i].says);
        free(b.data);
    }
    /* every prefix of a good file is refused, and none crashes */
    good = small_ciff(GOOD);
    for (size_t cut = 0; cut < good.len; cut++) {
        assert_int_equal(support_write_file(path, good.data, cut), 0);
        assert_int_not_equal(isn_ciff_import(path, out, NULL, NULL, err, sizeof err), 0);
        assert_non_null(strstr(err, path));
    }
    free(good.data);
    support_remove_tree(dir);
}

/* ------------------------------------------------------------------ the pretokenized analyzer */

static char seen[8][64];
static uint32_t num_seen;

static void collect(void *ctx, const char *term, size_t len, uint32_t position) {
    (void)ctx;
    (void)position;
    if (num_seen < 8) snprintf(seen[num_seen++], sizeof seen[0], "%.*s", (int)len, term);
}

static void test_pretokenized_analyzer_splits_at_whitespace_only(void **state) {
    (void)state;
    isn_analyzer_config config;
    isn_analyzer_config_default(&config);
    config.pretokenized = true;
    isn_analyzer *an = isn_analyzer_new(&config);
    assert_non_null(an);
    const char *text = "  Running\tC++  naïve\nthe dogs' ";
    num_seen = 0;
    uint32_t positions = isn_analyze(an, text, strlen(text), collect, NULL);
    assert_int_equal(positions, 5);
    assert_int_equal(num_seen, 5);
    assert_string_equal(seen[0], "Running");
    assert_string_equal(seen[1], "C++");
    assert_string_equal(seen[2], "naïve");
    assert_string_equal(seen[3], "the"); /* no stopwords */
    assert_string_equal(seen[4], "dogs'");
    isn_analyzer_free(an);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pretokenized_analyzer_splits_at_whitespace_only),
        cmocka_unit_test(test_malformed_files_are_refused),
        cmocka_unit_test(test_pretokenized_import_matches_oracle),
        cmocka_unit_test(test_export_import_same_top_k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
