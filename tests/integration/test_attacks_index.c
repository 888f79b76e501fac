/* Crafted files against isnd: an index whose checksums are all valid but one posting block is
 * inconsistent with its metadata (the crash of issue 16: the threshold probe's cursor ran past its
 * block), a block whose encoding overruns the next, and FIFOs or directories where the index, the
 * configuration or a ranker is expected. Each is refused at open with the section or the reason
 * named, offline and by isnd, which exits instead of serving or hanging. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "tests/support/files.h"
#include "tests/support/index_builder.h"
#include "tests/support/isnd_harness.h"
#include "index/format.h" /* the crafted files are resealed: the layout and its checksums */

static harness h;
static uint8_t *good;
static size_t good_len;
static char index_path[600];


static const isn_section_entry *section_table(const uint8_t *data) {
    return (const isn_section_entry *)(data + sizeof(isn_file_header));
}

/* A term of the test index with at least two posting blocks: its first block id. */
static uint32_t first_block_of_long_list(void) {
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(h.index_dir, err, sizeof err);
    if (!ix) fail_msg("open: %s", err);
    uint32_t found = UINT32_MAX;
    for (uint32_t t = 0; t < isn_index_get_info(ix)->num_terms && found == UINT32_MAX; t++) {
        isn_term_stats stats;
        isn_index_term_stats(ix, t, &stats);
        if (stats.num_blocks >= 2) found = stats.first_block;
    }
    isn_index_close(ix);
    if (found == UINT32_MAX) fail_msg("the test index has no term with two blocks");
    return found;
}

/* Offline and in isnd: refused, with `needle` in the message. */
static void expect_refused(const char *needle) {
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(h.index_dir, err, sizeof err);
    if (ix) fail_msg("crafted index opened; expected an error naming '%s'", needle);
    if (!strstr(err, needle)) fail_msg("error '%s' does not name '%s'", err, needle);
    assert_int_not_equal(harness_start(&h, NULL, NULL), 0); /* exits at once instead of serving */
    assert_true(harness_log_has(&h, needle));
}

static void restore(void) { assert_int_equal(support_write_file(index_path, good, good_len), 0); }

/* The block's metadata claims a last doc beyond what its postings hold: a cursor skipping to a doc
 * in between would run past the decoded block. */
static void test_block_metadata_beyond_postings(void **state) {
    (void)state;
    uint32_t block = first_block_of_long_list();
    uint8_t *bad = malloc(good_len);
    memcpy(bad, good, good_len);
    isn_block_meta *metas = (isn_block_meta *)(bad + section_table(bad)[SEC_BLOCK_META].offset);
    assert_true(metas[block + 1].last_doc > metas[block].last_doc + 1);
    metas[block].last_doc = metas[block + 1].last_doc - 1;
    support_reseal_index(bad, SEC_BLOCK_META);
    assert_int_equal(support_write_file(index_path, bad, good_len), 0);
    expect_refused("section 'postings'");
    free(bad);
    restore();
}

/* A block whose doc ids run past the number of documents (its first gap made huge). */
static void test_block_docs_beyond_collection(void **state) {
    (void)state;
    uint32_t block = first_block_of_long_list();
    uint8_t *bad = malloc(good_len);
    memcpy(bad, good, good_len);
    const isn_section_entry *table = section_table(bad);
    const isn_block_meta *metas = (const isn_block_meta *)(bad + table[SEC_BLOCK_META].offset);
    uint8_t *encoded = bad + table[SEC_POSTINGS].offset + metas[block].offset;
    encoded[0] = (uint8_t)((encoded[0] & 0xC0u) | 31u); /* width 31: the block overruns or decodes huge gaps */
    support_reseal_index(bad, SEC_POSTINGS);
    assert_int_equal(support_write_file(index_path, bad, good_len), 0);
    expect_refused("section 'postings'");
    free(bad);
    restore();
}

/* The good file still opens and serves after the crafted ones. */
static void test_good_index_serves(void **state) {
    (void)state;
    isn_grpc_client *client = harness_start_connected(&h, NULL, "ready:");
    assert_non_null(client);
    char err[256];
    isn_grpc_search_reply reply;
    isn_grpc_search_request request = {.query = "wind tunnel", .k = 10, .timeout_ms = 5000};
    assert_int_equal(isn_grpc_search(client, &request, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    isn_grpc_search_reply_free(&reply);
    isn_grpc_close(client);
    assert_int_equal(harness_stop_checked(&h), 0);
}

/* A FIFO as the index file, or as the configuration: refused at once (opening one for reading would
 * block until a writer came, and SIGTERM would not stop isnd). A directory: named as such. */
static void test_fifo_and_directory(void **state) {
    (void)state;
    char saved[700];
    snprintf(saved, sizeof saved, "%s/index-saved", h.work_dir);
    assert_int_equal(rename(index_path, saved), 0);
    assert_int_equal(mkfifo(index_path, 0600), 0);
    expect_refused("not a regular file");
    unlink(index_path);
    assert_int_equal(mkdir(index_path, 0700), 0);
    expect_refused("Is a directory");
    rmdir(index_path);
    assert_int_equal(rename(saved, index_path), 0);

    char config[600];
    snprintf(config, sizeof config, "%s/fifo.conf", h.work_dir);
    assert_int_equal(mkfifo(config, 0600), 0);
    const char *extra[] = {"--config", config, NULL};
    assert_int_not_equal(harness_start(&h, NULL, extra), 0);
    assert_true(harness_log_has(&h, "not a regular file"));
    unlink(config);
}

static int setup(void **state) {
    (void)state;
    harness_prepare(&h, 2000);
    snprintf(index_path, sizeof index_path, "%s/%s", h.index_dir, ISN_INDEX_FILE);
    good = support_read_file(index_path, &good_len);
    assert_non_null(good);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    free(good);
    harness_cleanup(&h);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_metadata_beyond_postings),
        cmocka_unit_test(test_block_docs_beyond_collection),
        cmocka_unit_test(test_fifo_and_directory),
        cmocka_unit_test(test_good_index_serves),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
