/* search.prior_weight over gRPC: isnd on an index in global order with static scores answers what the
 * offline engine answers with the same weight (documents and scores), which differs from BM25 alone;
 * on an index without static scores isnd refuses to start and names the missing --static-score. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "tests/support/isnd_harness.h"

#define NUM_DOCS 3000
#define WEIGHT "2.5"
#define K 100

static harness with_prior, without_prior;

/* A signed static score per document, spread over [-2, 8): large enough beside BM25 to reorder hits. */
static float static_score_of(uint32_t doc) { return (float)((doc * 7919u) % 1000u) / 100.0f - 2.0f; }

/* The server's hits for `text` against the offline engine's with prior_weight; true when the top k with
 * the prior differs from BM25's alone (the weight reached the search). */
static bool same_hits_as_offline(isn_grpc_client *client, isn_index *index, isn_searcher *searcher, const char *text) {
    isn_search_options options;
    isn_search_options_default(&options);
    options.k = K;
    options.prior_weight = strtof(WEIGHT, NULL);
    static isn_hit hits[K], plain[K];
    uint32_t n = 0, n_plain = 0;
    isn_query query;
    assert_int_equal(harness_offline_search(searcher, text, &options, &query, hits, &n), 0);
    options.prior_weight = 0;
    assert_int_equal(harness_offline_search(searcher, text, &options, &query, plain, &n_plain), 0);
    char err[ISN_ERR_LEN];
    isn_grpc_search_request request = {.query = text, .k = K};
    isn_grpc_search_reply reply;
    assert_int_equal(isn_grpc_search(client, &request, &reply, err, sizeof err), 0);
    if (reply.status != 0) fail_msg("'%s': status %d %s", text, reply.status, reply.message);
    if (reply.num_hits != n) fail_msg("'%s': %u hits, offline %u", text, reply.num_hits, n);
    for (uint32_t i = 0; i < n; i++) {
        size_t len;
        const char *id = isn_index_doc_id(index, hits[i].doc, &len);
        if (strlen(reply.hits[i].external_id) != len || memcmp(reply.hits[i].external_id, id, len) != 0 ||
            reply.hits[i].score != hits[i].score)
            fail_msg("'%s' rank %u: %s %.9g, offline %.*s %.9g", text, i, reply.hits[i].external_id,
                     reply.hits[i].score, (int)len, id, hits[i].score);
    }
    isn_grpc_search_reply_free(&reply);
    bool differs = n != n_plain;
    for (uint32_t i = 0; i < n && !differs; i++) differs = hits[i].doc != plain[i].doc || hits[i].score != plain[i].score;
    return differs;
}

static void test_answers_with_the_prior(void **state) {
    (void)state;
    const char *extra[] = {"--set", "search.prior_weight=" WEIGHT, NULL};
    assert_int_equal(harness_start(&with_prior, NULL, extra), 0);
    char err[256];
    isn_grpc_client *client = isn_grpc_connect(with_prior.grpc_address, 5000, err, sizeof err);
    assert_non_null(client);
    isn_index *index;
    isn_searcher *searcher;
    assert_int_equal(harness_open_offline(&with_prior, &index, &searcher), 0);
    harness_seed(7);
    uint32_t differed = 0;
    for (int q = 0; q < 40; q++) {
        char text[128];
        snprintf(text, sizeof text, "%s %s", harness_word(), harness_word());
        differed += same_hits_as_offline(client, index, searcher, text);
    }
    if (differed < 20) fail_msg("only %u of 40 queries ranked differently with the prior", differed);
    assert_int_equal(harness_finish(&with_prior, client, index, searcher), 0);
}

static void test_refuses_an_index_without_static_scores(void **state) {
    (void)state;
    const char *extra[] = {"--set", "search.prior_weight=" WEIGHT, NULL};
    assert_int_equal(harness_start(&without_prior, NULL, extra), -1);
    if (!harness_log_has(&without_prior, "search.prior_weight = 2.5 weights the documents' static scores") ||
        !harness_log_has(&without_prior, "--static-score"))
        fail_msg("isnd did not say why it refused the index");
    harness_cleanup(&without_prior);
}

int main(int argc, char **argv) {
    (void)argc;
    harness_init(&with_prior, argv[0]);
    harness_init(&without_prior, argv[0]);
    harness_build_scored_index(&with_prior, NUM_DOCS, static_score_of);
    harness_build_index(&without_prior, 500);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answers_with_the_prior),
        cmocka_unit_test(test_refuses_an_index_without_static_scores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
