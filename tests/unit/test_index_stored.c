/* Stored fields (isn-index build --store): the text read back for every document in any order and in
 * every document order, the options refused, indexes without them, and a damaged or crafted section
 * refused with the section named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "index/format.h" /* the damage tests rewrite the section and its checksum */
#include "index/index.h"
#include "tests/support/files.h"
#include "tests/support/index_builder.h"

#define NUM_DOCS 3000

static char tmp_root[] = "/tmp/isn-test-stored-XXXXXX";
static int dir_counter;

/* Document n's title and body: empty, short, UTF-8, and every 500th a body of ~40 KB (a block of
 * its own, past the block target). Returns the body's length. */
static void title_of(uint32_t n, char *out, size_t len) {
    if (n % 11 == 0) out[0] = 0;
    else snprintf(out, len, "Título %u — ünïcödé %x", n, n * 2654435761u);
}

static size_t body_of(uint32_t n, char *out, size_t len) {
    size_t used = (size_t)snprintf(out, len, "body %u words\nline two", n);
    uint32_t repeats = n % 500 == 7 ? 4000 : n % 13;
    for (uint32_t r = 0; r < repeats && used + 16 < len; r++) used += (size_t)snprintf(out + used, len - used, " w%u", (n + r) % 97);
    return used;
}

static char body_buf[64 << 10], title_buf[256];

/* NUM_DOCS documents stored as `stored` (comma-separated, or NULL for none), in `order`. */
static isn_index *build(char *dir, size_t dir_len, const char *stored, isn_doc_order order) {
    isn_build_options o;
    isn_build_options_default(&o);
    o.order = order;
    o.positions = false;
    char list[64];
    snprintf(list, sizeof list, "%s", stored ? stored : "");
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) snprintf(o.stored[o.num_stored++], ISN_FIELD_NAME_MAX, "%s", name);
    isn_builder *b = isn_builder_new(&o);
    assert_non_null(b);
    char id[32], err[ISN_ERR_LEN];
    for (uint32_t n = 0; n < NUM_DOCS; n++) {
        snprintf(id, sizeof id, "doc%05u", (n * 7919u) % 100000u); /* ids not in input order */
        title_of(n, title_buf, sizeof title_buf);
        size_t body_len = body_of(n, body_buf, sizeof body_buf);
        const char *fields[2] = {title_buf, body_buf};
        size_t lens[2] = {strlen(title_buf), body_len};
        assert_int_equal(isn_builder_add(b, id, fields, lens, 0.0f, err, sizeof err), 0);
    }
    snprintf(dir, dir_len, "%s/%d", tmp_root, dir_counter++);
    isn_build_summary summary;
    assert_int_equal(isn_builder_write(b, dir, &summary, err, sizeof err), 0);
    assert_true(stored ? summary.bytes_stored > 0 : summary.bytes_stored == 0);
    isn_builder_free(b);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) fail_msg("open: %s", err);
    return ix;
}

/* The input number of an internal document, from its external id. */
static uint32_t input_number(const isn_index *ix, uint32_t doc) {
    long key = support_doc_id_number(ix, doc, "doc");
    for (uint32_t n = 0; n < NUM_DOCS; n++)
        if ((n * 7919u) % 100000u == key) return n;
    size_t len;
    const char *id = isn_index_doc_id(ix, doc, &len);
    fail_msg("unknown id %.*s", (int)len, id);
    return 0;
}

static void expect_text(const isn_stored_text *t, const char *want, size_t want_len) {
    if (t->len != want_len || memcmp(t->text, want, want_len) != 0)
        fail_msg("stored %u bytes '%.60s', want %zu bytes '%.60s'", t->len, t->text, want_len, want);
}

static void check_every_document(const isn_index *ix) {
    const isn_index_info *info = isn_index_get_info(ix);
    assert_int_equal(info->num_stored_fields, 2);
    assert_string_equal(info->stored_fields[0], "title"); /* asked as body,title: kept in field order */
    assert_string_equal(info->stored_fields[1], "body");
    assert_int_equal(isn_index_stored_slot(ix, "title"), 0);
    assert_int_equal(isn_index_stored_slot(ix, "body"), 1);
    assert_int_equal(isn_index_stored_slot(ix, "url"), -1);
    void *scratch = malloc(isn_index_stored_scratch_bytes(ix));
    assert_non_null(scratch);
    char err[ISN_ERR_LEN];
    uint32_t doc = 0;
    /* every document once, in a scattered order: random access, not a scan */
    for (uint32_t i = 0; i < NUM_DOCS; i++) {
        doc = (doc + 1237) % NUM_DOCS;
        isn_stored_text texts[ISN_MAX_FIELDS];
        if (isn_index_stored_get(ix, doc, scratch, texts, err, sizeof err) != 0) fail_msg("doc %u: %s", doc, err);
        uint32_t n = input_number(ix, doc);
        title_of(n, title_buf, sizeof title_buf);
        expect_text(&texts[0], title_buf, strlen(title_buf));
        size_t body_len = body_of(n, body_buf, sizeof body_buf);
        expect_text(&texts[1], body_buf, body_len);
    }
    assert_int_equal(isn_index_stored_get(ix, NUM_DOCS, scratch, (isn_stored_text[ISN_MAX_FIELDS]){0}, err, sizeof err), -1);
    free(scratch);
    assert_int_equal(isn_index_verify(ix, err, sizeof err), 0);
}

static void test_read_back_in_every_order(void **state) {
    (void)state;
    static const isn_doc_order orders[] = {ISN_ORDER_INPUT, ISN_ORDER_ID, ISN_ORDER_BP, ISN_ORDER_GLOBAL};
    for (size_t i = 0; i < sizeof orders / sizeof orders[0]; i++) {
        char dir[256];
        isn_index *ix = build(dir, sizeof dir, "body,title", orders[i]);
        const isn_index_info *info = isn_index_get_info(ix);
        /* section 'stored' last, or before the score bounds of global order */
        assert_int_equal(info->num_sections, orders[i] == ISN_ORDER_GLOBAL ? SEC_SCORE_BOUNDS + 1 : SEC_STORED + 1);
        assert_string_equal(info->sections[SEC_STORED].name, "stored");
        check_every_document(ix);
        isn_index_close(ix);
    }
}

/* Without --store the file is as before (11 sections), and asking for text is an error, not a crash. */
static void test_absent(void **state) {
    (void)state;
    char dir[256], err[ISN_ERR_LEN];
    isn_index *ix = build(dir, sizeof dir, NULL, ISN_ORDER_INPUT);
    const isn_index_info *info = isn_index_get_info(ix);
    assert_int_equal(info->num_sections, SEC_STORED);
    assert_int_equal(info->num_stored_fields, 0);
    assert_int_equal(isn_index_stored_slot(ix, "title"), -1);
    assert_int_equal(isn_index_stored_scratch_bytes(ix), 0);
    char scratch[16];
    isn_stored_text texts[ISN_MAX_FIELDS];
    assert_int_equal(isn_index_stored_get(ix, 0, scratch, texts, err, sizeof err), -1);
    assert_non_null(strstr(err, "no stored fields"));
    isn_index_close(ix);

    ix = build(dir, sizeof dir, "title", ISN_ORDER_INPUT);
    assert_int_equal(isn_index_stored_slot(ix, "title"), 0);
    assert_int_equal(isn_index_stored_slot(ix, "body"), -1);
    isn_index_close(ix);
}

static void test_options_refused(void **state) {
    (void)state;
    isn_build_options o;
    isn_build_options_default(&o);
    char err[ISN_ERR_LEN];
    o.num_stored = 1;
    strcpy(o.stored[0], "titel");
    assert_int_equal(isn_build_options_check(&o, err, sizeof err), -1);
    if (!strstr(err, "\"titel\"") || !strstr(err, "title, body")) fail_msg("unclear: %s", err);
    assert_null(isn_builder_new(&o));
    o.num_stored = 2;
    strcpy(o.stored[0], "body");
    strcpy(o.stored[1], "body");
    assert_int_equal(isn_build_options_check(&o, err, sizeof err), -1);
    assert_non_null(strstr(err, "twice"));
}

/* TSV input has one field, "body": it can be stored, line by line as read. */
static void test_tsv_body(void **state) {
    (void)state;
    char dir[256], input[300], err[ISN_ERR_LEN];
    snprintf(input, sizeof input, "%s/docs.tsv", tmp_root);
    assert_int_equal(support_write_text(input, "a\tfirst document text\nb\tsecond one, café\n"), 0);
    snprintf(dir, sizeof dir, "%s/tsv", tmp_root);
    isn_build_options o;
    isn_build_options_default(&o);
    o.format = ISN_FORMAT_TSV;
    o.num_stored = 1;
    strcpy(o.stored[0], "body");
    isn_build_summary summary;
    if (isn_build_from_file(input, dir, &o, &summary, err, sizeof err) != 0) fail_msg("%s", err);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    assert_non_null(ix);
    char scratch[4096];
    assert_true(isn_index_stored_scratch_bytes(ix) <= sizeof scratch);
    isn_stored_text texts[ISN_MAX_FIELDS];
    assert_int_equal(isn_index_stored_get(ix, 1, scratch, texts, err, sizeof err), 0);
    expect_text(&texts[0], "second one, café", strlen("second one, café"));
    isn_index_close(ix);
}

/* ------------------------------------------------------------------ damaged and crafted sections */

static void expect_refused(const char *dir, const char *needle) {
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (ix) fail_msg("damaged index opened; expected an error naming '%s'", needle);
    if (!strstr(err, needle)) fail_msg("error '%s' does not name '%s'", err, needle);
}

static void test_damaged_section(void **state) {
    (void)state;
    char dir[256], path[300], err[ISN_ERR_LEN];
    isn_index_close(build(dir, sizeof dir, "title,body", ISN_ORDER_INPUT));
    snprintf(path, sizeof path, "%s/%s", dir, ISN_INDEX_FILE);
    size_t len;
    uint8_t *good = support_read_file(path, &len), *bad = malloc(len);
    assert_non_null(good);
    const isn_section_entry *table = (const isn_section_entry *)(good + sizeof(isn_file_header));
    uint64_t at = table[SEC_STORED].offset;
    isn_stored_header *header = (isn_stored_header *)(bad + at);
    isn_stored_block *blocks = (isn_stored_block *)(bad + at + sizeof *header);
    assert_true(((const isn_stored_header *)(good + at))->num_blocks > 4);

    /* a flipped byte: the checksum */
    memcpy(bad, good, len);
    bad[at + table[SEC_STORED].bytes - 3] ^= 0x20;
    assert_int_equal(support_write_file(path, bad, len), 0);
    expect_refused(dir, "section 'stored' is corrupt");

    /* crafted, checksums right: each structural lie is refused at open, naming the section */
    uint32_t nb = ((const isn_stored_header *)(good + at))->num_blocks;
    for (int lie = 0; lie < 9; lie++) {
        memcpy(bad, good, len);
        switch (lie) {
        case 0: header->codec = 7; break;
        case 1: header->num_fields = 3; break;
        case 2: header->fields[1] = 0; break; /* not increasing */
        case 3: header->num_blocks = UINT32_MAX; break;
        case 4: blocks[2].offset = blocks[1].offset; break; /* not increasing */
        case 5: blocks[nb].offset += 1; break; /* past the data */
        case 6: blocks[3].first_doc = blocks[2].first_doc; break;
        case 7: blocks[nb].first_doc = NUM_DOCS - 1; break; /* documents not covered */
        case 8: header->max_block_bytes = ISN_STORED_MAX_BLOCK + 1; break;
        }
        support_reseal_index(bad, SEC_STORED);
        assert_int_equal(support_write_file(path, bad, len), 0);
        expect_refused(dir, "section 'stored'");
    }
    /* A block whose data lies about its size passes the structure, then fails where it is read: the
     * fetch of one of its documents and verify say so; other blocks still answer. */
    memcpy(bad, good, len);
    blocks[1].raw_bytes -= 1;
    support_reseal_index(bad, SEC_STORED);
    assert_int_equal(support_write_file(path, bad, len), 0);
    isn_index *ix = isn_index_open(dir, err, sizeof err);
    if (!ix) fail_msg("open: %s", err);
    void *scratch = malloc(isn_index_stored_scratch_bytes(ix));
    isn_stored_text texts[ISN_MAX_FIELDS];
    assert_int_equal(isn_index_stored_get(ix, blocks[1].first_doc, scratch, texts, err, sizeof err), -1);
    assert_non_null(strstr(err, "section 'stored': block 1"));
    assert_int_equal(isn_index_stored_get(ix, 0, scratch, texts, err, sizeof err), 0);
    assert_int_equal(isn_index_verify(ix, err, sizeof err), -1);
    assert_non_null(strstr(err, "section 'stored'"));
    free(scratch);
    isn_index_close(ix);
    /* the section table claims a 13th section */
    memcpy(bad, good, len);
    ((isn_file_header *)bad)->num_sections = SEC_COUNT + 1;
    support_reseal_index(bad, SEC_STORED);
    assert_int_equal(support_write_file(path, bad, len), 0);
    expect_refused(dir, "sections");
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
        cmocka_unit_test(test_read_back_in_every_order), cmocka_unit_test(test_absent),
        cmocka_unit_test(test_options_refused),          cmocka_unit_test(test_tsv_body),
        cmocka_unit_test(test_damaged_section),
    };
    return cmocka_run_group_tests(tests, NULL, cleanup);
}
