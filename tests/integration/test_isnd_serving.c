/* Both gRPC servers end to end on loopback, each through grpc/: isnd on the test index, and isn-agg
 * in front of it with that one partition. Against each: Search results equal the offline engine's
 * for many queries, modes, algorithms and k (through the project's gRPC client, through a stock
 * Python grpcio client with stubs generated at test time, and through isn-query --server); Health;
 * every error status the servers promise, protocol-level ones included; the stats endpoint
 * (/healthz, /readyz, /metrics checked by promtool when installed, /stats, keep-alive). Then each
 * server's own Info and metrics. Where isn-agg answers differently by design (device "agg",
 * coverage fields, Info of the tier, its fixed message-size limit, its own max_k message and
 * /readyz text) the target table says so and the checks assert it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/support/index_builder.h"
#include "tests/support/isnd_harness.h"
#include "grpc/server.h"
#include "grpc/client.h"
#include "proto/isn.pb-c.h"

#define NUM_DOCS 3000
#define MAX_K 1000

/* One server under test, and what it answers by design. */
typedef struct {
    const char *name;
    harness *process;
    isn_grpc_client *client;
    const char *device;          /* SearchResponse.device */
    uint32_t partitions;         /* SearchResponse.partitions_answered and _total (0 from an ISN) */
    bool reports_algorithm;      /* SearchResponse.debug.algorithm_used (isn-agg forwards debug: its partition's) */
    size_t max_message_bytes;    /* isnd: configured below; isn-agg: fixed (no flag) */
    const char *max_k_message;   /* both run with max_k 1000 */
    const char *ready_page;      /* /readyz while serving */
    uint64_t searches_ok, searches_invalid;
} server_target;

static harness h, agg_process;
static server_target servers[] = {
    {.name = "isnd", .process = &h, .device = "cpu", .partitions = 0, .reports_algorithm = true,
     .max_message_bytes = 64 * 1024, .max_k_message = "max_k = 1000", .ready_page = "ready\n"},
    {.name = "isn-agg", .process = &agg_process, .device = "agg", .partitions = 1, .reports_algorithm = true,
     .max_message_bytes = 4u << 20, .max_k_message = "above the aggregator's max_k 1000",
     .ready_page = "ready: coverage 1/1, 1 needed\n"},
};
enum { ISND, ISN_AGG };

static isn_index *offline_index;
static isn_searcher *offline;
static FILE *cases_json; /* expected results for the Python client, written on the first Search run */
static char cases_path[PATH_MAX];
static bool first_case = true;

static const char *const QUERIES[] = {
    "wind tunnel",
    "search engine ranking",
    "running connection",
    "Connected RUNS",
    "t5 t17 t300 wind",
    "boundary layer pressure heat transfer supersonic wing",
    "the of and",      /* stopwords only: no terms, no hits */
    "nonexistentword", /* unknown term */
    "latency latency throughput",
    "score t1",
};
#define NUM_QUERIES (sizeof QUERIES / sizeof QUERIES[0])

/* ------------------------------------------------------------------ comparison */

static void offline_search(const char *text, isn_mode mode, isn_algo algo, uint32_t k, isn_hit *hits,
                           uint32_t *num_hits) {
    char err[ISN_ERR_LEN];
    if (support_search_text(offline, text, mode, algo, k, hits, num_hits, err) != 0) fail_msg("offline: %s", err);
}

static void assert_same_hits(const server_target *s, const isn_grpc_search_reply *reply, const isn_hit *hits,
                             uint32_t num_hits, const char *what) {
    if (reply->status != 0) fail_msg("%s %s: status %d: %s", s->name, what, reply->status, reply->message);
    if (reply->num_hits != num_hits)
        fail_msg("%s %s: %u hits over gRPC, %u offline", s->name, what, reply->num_hits, num_hits);
    for (uint32_t i = 0; i < num_hits; i++) {
        size_t len;
        const char *id = isn_index_doc_id(offline_index, hits[i].doc, &len);
        if (reply->hits[i].doc != hits[i].doc || reply->hits[i].score != hits[i].score ||
            strlen(reply->hits[i].external_id) != len || memcmp(reply->hits[i].external_id, id, len))
            fail_msg("%s %s: hit %u differs: gRPC %s (doc %u, %.9g), offline %.*s (doc %u, %.9g)", s->name, what, i,
                     reply->hits[i].external_id, reply->hits[i].doc, (double)reply->hits[i].score, (int)len, id,
                     hits[i].doc, (double)hits[i].score);
    }
    assert_true(reply->complete);
    assert_string_equal(reply->device, s->device);
    assert_int_equal(reply->partitions_answered, s->partitions);
    assert_int_equal(reply->partitions_total, s->partitions);
}

static void record_case(const char *text, const char *mode, const char *algo, uint32_t k, const isn_hit *hits,
                        uint32_t num_hits) {
    if (!cases_json) return;
    fprintf(cases_json, "%s\n{\"query\":\"%s\",\"mode\":\"%s\",\"algorithm\":\"%s\",\"k\":%u,\"hits\":[",
            first_case ? "" : ",", text, mode, algo, k);
    first_case = false;
    for (uint32_t i = 0; i < num_hits; i++) {
        size_t len;
        const char *id = isn_index_doc_id(offline_index, hits[i].doc, &len);
        fprintf(cases_json, "%s[\"%.*s\",%u,%.9g]", i ? "," : "", (int)len, id, hits[i].doc, (double)hits[i].score);
    }
    fprintf(cases_json, "]}");
}

static void test_search_matches_offline(void **state) {
    server_target *s = *state;
    static const struct {
        isn_mode mode;
        isn_algo algo;
    } combos[] = {
        {ISN_MODE_OR, ISN_ALGO_AUTO},     {ISN_MODE_OR, ISN_ALGO_OR},   {ISN_MODE_OR, ISN_ALGO_MAXSCORE},
        {ISN_MODE_OR, ISN_ALGO_WAND},     {ISN_MODE_OR, ISN_ALGO_BMW},  {ISN_MODE_AND, ISN_ALGO_AUTO},
        {ISN_MODE_AND, ISN_ALGO_AND},     {ISN_MODE_AND, ISN_ALGO_BMAND},
    };
    static const uint32_t ks[] = {1, 10, 137, MAX_K};
    static isn_hit hits[MAX_K];
    char what[256];
    for (size_t q = 0; q < NUM_QUERIES; q++) {
        for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++) {
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                uint32_t num_hits;
                offline_search(QUERIES[q], combos[c].mode, combos[c].algo, ks[ki], hits, &num_hits);
                isn_grpc_search_request request = {
                    .query = QUERIES[q],
                    .k = ks[ki],
                    .mode = combos[c].mode == ISN_MODE_AND ? ISN_GRPC_MODE_AND : ISN_GRPC_MODE_OR,
                    .algorithm = isn_algo_name(combos[c].algo),
                    .request_id = "r1",
                    .debug = true,
                    .timeout_ms = 10000,
                };
                isn_grpc_search_reply reply;
                char err[256];
                if (isn_grpc_search(s->client, &request, &reply, err, sizeof err) != 0)
                    fail_msg("%s transport: %s", s->name, err);
                snprintf(what, sizeof what, "\"%s\" %s %s k=%u", QUERIES[q],
                         combos[c].mode == ISN_MODE_AND ? "and" : "or", isn_algo_name(combos[c].algo), ks[ki]);
                assert_same_hits(s, &reply, hits, num_hits, what);
                if (!s->reports_algorithm) assert_string_equal(reply.algorithm_used, "");
                else if (combos[c].algo != ISN_ALGO_AUTO)
                    assert_string_equal(reply.algorithm_used, isn_algo_name(combos[c].algo));
                assert_true(reply.total_us >= reply.retrieval_us);
                isn_grpc_search_reply_free(&reply);
                s->searches_ok++;
                if (ki == 1 || ks[ki] == 137)
                    record_case(QUERIES[q], combos[c].mode == ISN_MODE_AND ? "and" : "or",
                                isn_algo_name(combos[c].algo), ks[ki], hits, num_hits);
            }
        }
    }
    if (cases_json) {
        fprintf(cases_json, "\n]\n");
        fclose(cases_json);
        cases_json = NULL;
    }
}

/* Pre-analyzed terms give what the text that analyzes to them gives; repeats count. */
static void test_pre_analyzed_terms(void **state) {
    server_target *s = *state;
    static isn_hit hits[100];
    uint32_t num_hits;
    offline_search("wind tunnel running wind", ISN_MODE_OR, ISN_ALGO_AUTO, 100, hits, &num_hits);
    const char *terms[] = {"wind", "tunnel", "run", "wind", "zzznotindexed"};
    isn_grpc_search_request request = {.terms = terms, .num_terms = 5, .k = 100, .mode = ISN_GRPC_MODE_OR};
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(s->client, &request, &reply, err, sizeof err), 0);
    assert_same_hits(s, &reply, hits, num_hits, "pre-analyzed terms");
    isn_grpc_search_reply_free(&reply);
    s->searches_ok++;
}

/* Global statistics change IDF exactly as isn_search_options.num_docs and isn_query_term.df do (an
 * aggregator passes the caller's own statistics through). */
static void test_global_statistics(void **state) {
    server_target *s = *state;
    const char *text = "wind tunnel t5";
    isn_query query;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(offline, text, strlen(text), &query, err, sizeof err), 0);
    assert_true(query.num_terms >= 2);
    uint32_t wind_id;
    assert_true(isn_index_find_term(offline_index, "wind", 4, &wind_id));
    for (uint32_t i = 0; i < query.num_terms; i++)
        if (query.terms[i].term_id == wind_id) query.terms[i].df = 12345;
    isn_search_options options;
    isn_search_options_default(&options);
    options.k = 50;
    options.num_docs = 1000000;
    static isn_hit hits[50];
    uint32_t num_hits;
    isn_search_stats stats;
    assert_int_equal(isn_search(offline, &query, &options, hits, &num_hits, &stats, err, sizeof err), 0);

    const char *global_terms[] = {"wind", "notaterm"};
    const uint64_t dfs[] = {12345, 7};
    isn_grpc_search_request request = {.query = text, .k = 50, .global_num_docs = 1000000, .global_terms = global_terms,
                                       .global_dfs = dfs, .num_global_terms = 2};
    isn_grpc_search_reply reply;
    assert_int_equal(isn_grpc_search(s->client, &request, &reply, err, sizeof err), 0);
    assert_same_hits(s, &reply, hits, num_hits, "global statistics");
    isn_grpc_search_reply_free(&reply);
    s->searches_ok++;

    /* df above N is refused */
    const uint64_t bad_dfs[] = {2000000, 7};
    request.global_dfs = bad_dfs;
    assert_int_equal(isn_grpc_search(s->client, &request, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 3);
    assert_non_null(strstr(reply.message, "above num_docs"));
    isn_grpc_search_reply_free(&reply);
    s->searches_invalid++;
}

/* ------------------------------------------------------------------ errors */

static void expect_search_error(server_target *s, const isn_grpc_search_request *request, int status,
                                const char *message_part) {
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(s->client, request, &reply, err, sizeof err), 0);
    if (reply.status != status || !strstr(reply.message, message_part))
        fail_msg("%s: expected status %d with \"%s\", got %d \"%s\"", s->name, status, message_part, reply.status,
                 reply.message);
    isn_grpc_search_reply_free(&reply);
    if (status == 3) s->searches_invalid++;
}

/* isn-agg checks k itself and passes every other refusal of its partitions on as they gave it. */
static void test_invalid_requests(void **state) {
    server_target *s = *state;
    expect_search_error(s, &(isn_grpc_search_request){.query = ""}, 3, "empty query");
    expect_search_error(s, &(isn_grpc_search_request){.query = "  \t "}, 3, "empty query");
    expect_search_error(s, &(isn_grpc_search_request){.query = "wind", .k = MAX_K + 1}, 3, s->max_k_message);
    expect_search_error(s, &(isn_grpc_search_request){.query = "wind", .algorithm = "fast"}, 3,
                        "unknown algorithm \"fast\"");
    expect_search_error(s, &(isn_grpc_search_request){.query = "wind", .algorithm = "wand", .mode = ISN_GRPC_MODE_AND},
                        3, "does not run AND");
    expect_search_error(s, &(isn_grpc_search_request){.query = "wind", .mode = (isn_grpc_mode)7}, 3, "unknown mode 7");
    /* an algorithm alone decides the mode */
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(s->client, &(isn_grpc_search_request){.query = "wind tunnel", .algorithm = "bmand"},
                                     &reply, err, sizeof err),
                     0);
    assert_int_equal(reply.status, 0);
    static isn_hit hits[10];
    uint32_t num_hits;
    offline_search("wind tunnel", ISN_MODE_AND, ISN_ALGO_BMAND, 10, hits, &num_hits);
    assert_same_hits(s, &reply, hits, num_hits, "bmand without a mode");
    isn_grpc_search_reply_free(&reply);
    s->searches_ok++;
}

static isn_grpc_result raw_call(const server_target *s, const isn_grpc_request *request) {
    char err[256];
    isn_grpc_client_call *call = isn_grpc_start(s->client, request, err, sizeof err);
    if (!call) fail_msg("%s start: %s", s->name, err);
    if (isn_grpc_wait(s->client, call, 10000, err, sizeof err) != 0) fail_msg("%s wait: %s", s->name, err);
    isn_grpc_result result = *isn_grpc_client_call_result(call);
    result.message = NULL;
    isn_grpc_client_call_free(call);
    return result;
}

static void expect_raw(const server_target *s, const isn_grpc_request *request, int grpc_status, int http_status,
                       const char *message_part) {
    isn_grpc_result r = raw_call(s, request);
    if (r.grpc_status != grpc_status || r.http_status != http_status ||
        (message_part && !strstr(r.grpc_message, message_part)))
        fail_msg("%s %s: expected grpc-status %d http %d \"%s\", got %d http %d \"%s\" (reset %d code %u)", s->name,
                 request->path, grpc_status, http_status, message_part ? message_part : "", r.grpc_status,
                 r.http_status, r.grpc_message, r.reset, r.reset_code);
}

/* What grpc/'s server core refuses for either server (framing, size, content type), and what each
 * server's method table refuses. */
static void test_protocol_errors(void **state) {
    server_target *s = *state;
    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = garbage, .body_len = 5, .frame = true},
               3, 200, "not a valid isn.v1.SearchRequest");
    s->searches_invalid++;
    expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Nope", .frame = true}, 12, 200, "unknown method");
    expect_raw(s, &(isn_grpc_request){.path = "/foo.Bar/Baz", .frame = true}, 12, 200, "/foo.Bar/Baz");
    /* Health/Watch streams (test_tier_ops); a request that is not a HealthCheckRequest ends it at once */
    expect_raw(s, &(isn_grpc_request){.path = "/grpc.health.v1.Health/Watch", .body = garbage, .body_len = 5, .frame = true},
               3, 200, "not a valid grpc.health.v1.HealthCheckRequest");

    /* a message over the server's limit: refused before it is read */
    size_t big = s->max_message_bytes + 1;
    uint8_t *body = calloc(1, big);
    expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = body, .body_len = big, .frame = true}, 8,
               200, "exceeds the server's limit");
    free(body);

    /* prefix announces 100 bytes, 10 follow, then END_STREAM */
    uint8_t short_frame[15] = {0, 0, 0, 0, 100};
    expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = short_frame, .body_len = 15}, 3, 200,
               "announces 100 bytes, stream ended after 10");
    /* half a prefix */
    expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = short_frame, .body_len = 3}, 3, 200,
               "prefix");
    /* no message at all */
    expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Search"}, 3, 200, "without a message");
    /* compressed flag */
    const uint8_t compressed[6] = {1, 0, 0, 0, 1, 0};
    expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = compressed, .body_len = 6}, 12, 200,
               "compressed");
    /* two messages on a unary call */
    const uint8_t two[12] = {0, 0, 0, 0, 1, 0x0a, 0, 0, 0, 0, 1, 0x0a};
    expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = two, .body_len = 12}, 3, 200,
               "more than one");
    /* not gRPC */
    expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .content_type = "application/json"}, -1, 415,
               NULL);
    /* the connection still serves */
    int serving;
    char err[256];
    assert_int_equal(isn_grpc_health_check(s->client, "", &serving, err, sizeof err), 0);
    assert_int_equal(serving, 1);
}

/* protobuf-c gives C strings: a NUL inside one would silently cut the query (or name another
 * algorithm or ranker), so both servers refuse it and name the field. */
static void test_nul_in_strings(void **state) {
    server_target *s = *state;
    static const struct {
        uint8_t wire[16];
        size_t len;
        const char *message;
    } cases[] = {
        {{0x0a, 9, 'w', 'i', 'n', 'd', 0, 'x', 'y', 'z', 'w'}, 11, "field query of isn.v1.SearchRequest holds a NUL"},
        {{0x0a, 4, 'w', 'i', 'n', 'd', 0x2a, 5, 'w', 'a', 'n', 'd', 0}, 13, "field algorithm "},
        {{0x0a, 4, 'w', 'i', 'n', 'd', 0x2a, 4, 'w', 'a', 0, 'd'}, 12, "field algorithm "},
        {{0x0a, 4, 'w', 'i', 'n', 'd', 0x52, 2, 0, 'x'}, 10, "field ranker "},
        {{0x12, 4, 'w', 'i', 'n', 0}, 6, "field terms "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = cases[i].wire,
                                          .body_len = cases[i].len, .frame = true},
                   3, 200, cases[i].message);
        s->searches_invalid++;
    }
}

/* ------------------------------------------------------------------ deadlines */

/* grpc-timeout as the spec has it: a zero is a deadline already passed (not "none"); the largest
 * values are far deadlines that neither wrap to the past (isnd runs with max_timeout 0 here, so
 * nothing caps them) nor overflow isn-agg's arithmetic; the client writes a timeout of weeks in 8
 * digits. */
static void test_deadlines(void **state) {
    server_target *s = *state;
    uint8_t body[64];
    Isn__V1__SearchRequest message = ISN__V1__SEARCH_REQUEST__INIT;
    message.query = "wind";
    size_t len = isn__v1__search_request__pack(&message, body);
    static const char *const zeros[] = {"0m", "0n", "00000000H"};
    for (size_t i = 0; i < sizeof zeros / sizeof zeros[0]; i++)
        expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = body, .body_len = len, .frame = true,
                                          .timeout_header = zeros[i]},
                   4, 200, "deadline");
    static const char *const far[] = {"99999999H", "9999999H", "99999999M", "99999999S"};
    for (size_t i = 0; i < sizeof far / sizeof far[0]; i++) {
        expect_raw(s, &(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = body, .body_len = len, .frame = true,
                                          .timeout_header = far[i]},
                   0, 200, NULL);
        s->searches_ok++;
    }
    /* 49.7 days: 4294967295 ms was sent as 10 digits and refused */
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(s->client, &(isn_grpc_search_request){.query = "wind", .timeout_ms = UINT32_MAX},
                                     &reply, err, sizeof err),
                     0);
    if (reply.status != 0) fail_msg("%s: a 49-day deadline got %d \"%s\"", s->name, reply.status, reply.message);
    isn_grpc_search_reply_free(&reply);
    s->searches_ok++;
}

/* ------------------------------------------------------------------ Info and Health */

/* isnd's Info: its partition's index and the statistics of the terms asked for. */
static void test_isnd_info(void **state) {
    server_target *s = *state;
    const isn_index_info *info = isn_index_get_info(offline_index);
    const char *terms[] = {"wind", "Running", "the", "zzz"};
    isn_grpc_info_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_info(s->client, terms, 4, true, -1, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 0);
    assert_int_equal(reply.num_docs, NUM_DOCS);
    assert_int_equal(reply.num_docs, info->num_docs);
    assert_int_equal(reply.num_terms, info->num_terms);
    assert_int_equal(reply.num_postings, info->num_postings);
    assert_int_equal(reply.index_version, info->version);
    assert_int_equal(reply.index_bytes, info->file_bytes);
    assert_true(reply.bm25_k1 == info->bm25.k1 && reply.bm25_b == info->bm25.b);
    assert_true(reply.stem && reply.stopwords);
    assert_int_equal(reply.partition_id, 7);
    /* "the" is a stopword: analyzed to nothing; the other three give one term each */
    assert_int_equal(reply.num_term_infos, 3);
    assert_string_equal(reply.terms[0].index_term, "wind");
    assert_string_equal(reply.terms[1].term, "Running");
    assert_string_equal(reply.terms[1].index_term, "run");
    uint32_t id;
    isn_term_stats stats;
    assert_true(isn_index_find_term(offline_index, "run", 3, &id));
    isn_index_term_stats(offline_index, id, &stats);
    assert_true(reply.terms[1].found);
    assert_int_equal(reply.terms[1].df, stats.df);
    assert_int_equal(reply.terms[1].cf, stats.cf);
    assert_false(reply.terms[2].found);
    isn_grpc_info_reply_free(&reply);
}

/* isn-agg's Info: the tier's totals over its partitions (here one: isnd's), no partition id and no
 * term statistics even when asked (those are per partition). */
static void test_agg_info(void **state) {
    server_target *s = *state;
    const char *terms[] = {"wind"};
    isn_grpc_info_reply tier, partition;
    char err[256];
    assert_int_equal(isn_grpc_info(servers[ISND].client, NULL, 0, false, -1, &partition, err, sizeof err), 0);
    assert_int_equal(isn_grpc_info(s->client, terms, 1, true, -1, &tier, err, sizeof err), 0);
    assert_int_equal(tier.status, 0);
    assert_int_equal(tier.num_docs, NUM_DOCS);
    assert_int_equal(tier.total_doc_len, partition.total_doc_len);
    assert_true(tier.avg_doc_len == (double)partition.total_doc_len / NUM_DOCS);
    assert_string_equal(tier.server_version, "isn-agg 0.1.0");
    assert_int_equal(tier.partition_id, 0);
    assert_int_equal(tier.num_term_infos, 0);
    isn_grpc_info_reply_free(&tier);
    isn_grpc_info_reply_free(&partition);
}

/* The standard health service: "" and isn.v1.Search are served, any other name is NOT_FOUND. */
static void test_health(void **state) {
    server_target *s = *state;
    int serving;
    char err[256];
    assert_int_equal(isn_grpc_health_check(s->client, "", &serving, err, sizeof err), 0);
    assert_int_equal(serving, 1);
    assert_int_equal(isn_grpc_health_check(s->client, "isn.v1.Search", &serving, err, sizeof err), 0);
    assert_int_equal(serving, 1);
    assert_int_equal(isn_grpc_health_check(s->client, "other.Service", &serving, err, sizeof err), 5);
    assert_non_null(strstr(err, "unknown service"));
}

/* ------------------------------------------------------------------ Python grpcio */

static const char *python(void) {
    const char *env = getenv("ISN_PYTHON");
    if (env) return env;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

/* The offline engine's hits (recorded by the first Search run) through a stock client. */
static void test_python_grpcio_client(void **state) {
    server_target *s = *state;
    assert_null(cases_json);
    char cmd[PATH_MAX * 3];
    snprintf(cmd, sizeof cmd,
             "%s tests/integration/grpcio_check.py --server %s --stats 127.0.0.1:%d --cases %s "
             "--proto-dir proto --work-dir %s --device %s --partitions %u --num-docs %d%s",
             python(), s->process->grpc_address, s->process->stats_port, cases_path, h.work_dir, s->device,
             s->partitions, NUM_DOCS, s == &servers[ISN_AGG] ? " --tier-info" : "");
    int rc = system(cmd);
    if (rc != 0) fail_msg("the Python grpcio client check failed on %s (exit %d): %s", s->name, WEXITSTATUS(rc), cmd);
}

/* ------------------------------------------------------------------ isn-query --server */

/* isn-query prints the same hits through the server as from the index directly (compared line by
 * line, comments aside; through isn-agg each hit also names its partition, the only one: 0). */
static void test_isn_query_server(void **state) {
    server_target *s = *state;
    char cmd[2048];
    FILE *p;
    size_t n;
    static const char *const args[] = {"-k 20 \"wind tunnel\"", "-k 5 --mode and \"search engine\"",
                                       "-k 100 --algo maxscore \"t5 t17 connected runs\""};
    static char local[1 << 16], remote[1 << 16];
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        char *outs[2] = {local, remote};
        for (int side = 0; side < 2; side++) {
            snprintf(cmd, sizeof cmd, "%s/bin/isn-query %s %s %s | grep -v '^#'%s", h.build_dir,
                     side ? "--server" : "--index", side ? s->process->grpc_address : h.index_dir, args[i],
                     side && s->process == &agg_process ? " | sed 's/ of partition 0)$/)/'" : "");
            p = popen(cmd, "r");
            assert_non_null(p);
            n = fread(outs[side], 1, sizeof local - 1, p);
            outs[side][n] = '\0';
            if (pclose(p) != 0) fail_msg("failed: %s", cmd);
        }
        if (strcmp(local, remote) != 0)
            fail_msg("isn-query %s: --server %s output differs from --index:\n%s\nvs\n%s", args[i], s->name, remote,
                     local);
        assert_true(strlen(local) > 0);
    }
}

/* ------------------------------------------------------------------ stats endpoint */

static char page[1 << 20];

/* The value of a sample line (the name at the start of a line, not in a # HELP comment). */
static uint64_t metric_value(const char *text, const char *sample) {
    char needle[256];
    snprintf(needle, sizeof needle, "\n%s", sample);
    const char *p = strstr(text, needle);
    if (!p) fail_msg("metric %s missing", sample);
    return strtoull(p + strlen(needle), NULL, 10);
}

/* /stats parsed (the caller frees it). */
static json_t *stats_json(const server_target *s) {
    assert_int_equal(harness_http_get(s->process, "/stats", page, sizeof page), 200);
    json_error_t jerr;
    json_t *stats = json_loads(page, 0, &jerr);
    if (!stats) fail_msg("%s /stats is not JSON: %s", s->name, jerr.text);
    return stats;
}

/* grpc/'s HTTP/1.1 endpoint as both servers use it: the four pages, 404, keep-alive, and /metrics
 * valid for promtool. */
static void test_stats_endpoint(void **state) {
    server_target *s = *state;
    assert_int_equal(harness_http_get(s->process, "/healthz", page, sizeof page), 200);
    assert_string_equal(page, "ok\n");
    assert_int_equal(harness_http_get(s->process, "/readyz", page, sizeof page), 200);
    assert_string_equal(page, s->ready_page);
    assert_int_equal(harness_http_get(s->process, "/nope", page, sizeof page), 404);
    json_decref(stats_json(s));

    assert_int_equal(harness_http_get(s->process, "/metrics", page, sizeof page), 200);
    char metrics_path[PATH_MAX + 32];
    snprintf(metrics_path, sizeof metrics_path, "%s/metrics-%s.txt", h.work_dir, s->name);
    FILE *f = fopen(metrics_path, "w");
    fputs(page, f);
    fclose(f);
    if (system("command -v promtool >/dev/null 2>&1") == 0) {
        char cmd[PATH_MAX + 64];
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s", metrics_path);
        if (system(cmd) != 0) fail_msg("promtool check metrics failed on %s", metrics_path);
    } else {
        fprintf(stderr, "note: promtool not installed (Debian package prometheus): /metrics not linted\n");
    }

    /* keep-alive: two requests on one connection */
    int fd = harness_connect(s->process->stats_port);
    const char *two = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(send(fd, two, strlen(two), 0), (ssize_t)strlen(two));
    ssize_t n = harness_read_until_close(fd, page, sizeof page - 1, 5000);
    close(fd);
    assert_true(n > 0);
    page[n] = '\0';
    assert_non_null(strstr(page, "ok\n"));
    assert_non_null(strstr(page, s->ready_page));
}

/* isnd's counts of what this test did (the Python check and isn-agg sent their own requests too: at
 * least as many). */
static void test_isnd_metrics(void **state) {
    server_target *s = *state;
    assert_int_equal(harness_http_get(s->process, "/metrics", page, sizeof page), 200);
    assert_true(metric_value(page, "isn_requests_total{method=\"isn.v1.Search/Search\",code=\"OK\"} ") >= s->searches_ok);
    assert_true(metric_value(page, "isn_requests_total{method=\"isn.v1.Search/Search\",code=\"INVALID_ARGUMENT\"} ") >=
                s->searches_invalid);
    assert_true(metric_value(page, "isn_requests_total{method=\"isn.v1.Search/Search\",code=\"RESOURCE_EXHAUSTED\"} ") >= 1);
    assert_true(metric_value(page, "isn_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"} ") >= 2);
    assert_int_equal(metric_value(page, "isn_index_documents "), NUM_DOCS);
    assert_int_equal(metric_value(page, "isn_ready "), 1);
    const char *startup = strstr(page, "\nisn_startup_seconds ");
    assert_non_null(startup);
    double startup_seconds = strtod(startup + strlen("\nisn_startup_seconds "), NULL);
    assert_true(startup_seconds > 0.0 && startup_seconds < 600.0);
    assert_true(metric_value(page, "process_resident_memory_bytes ") > 1000000);
    assert_true(metric_value(page, "isn_search_stage_duration_seconds_count{stage=\"retrieval\",device=\"cpu\"} ") >=
                s->searches_ok);
    assert_non_null(strstr(page, "isn_search_stage_duration_seconds_bucket{stage=\"queue\",device=\"cpu\",le=\"+Inf\"}"));
    /* one CPU first stage in a few has its worker's CPU time taken; that time lies inside the stage's wall time */
    assert_true(metric_value(page, "isn_search_retrieval_sampled_jobs_total ") >= 1);
    double sampled_cpu = harness_metric_value(s->process, "isn_search_retrieval_sampled_seconds_total{clock=\"cpu\"}");
    double sampled_wall = harness_metric_value(s->process, "isn_search_retrieval_sampled_seconds_total{clock=\"wall\"}");
    assert_true(sampled_cpu > 0.0);
    assert_true(sampled_cpu <= sampled_wall);

    json_t *stats = stats_json(s);
    assert_true(json_is_true(json_object_get(stats, "ready")));
    assert_string_equal(json_string_value(json_object_get(stats, "state")), "ready");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(stats, "index"), "documents")), NUM_DOCS);
    assert_int_equal(json_integer_value(json_object_get(stats, "workers")), 2);
    json_t *search = json_object_get(json_object_get(stats, "requests"), "isn.v1.Search/Search");
    assert_true((uint64_t)json_integer_value(json_object_get(search, "OK")) >= s->searches_ok);
    json_decref(stats);
}

/* isn-agg's counts (by numeric gRPC status; what its handlers answered, not what grpc/ refused
 * before a handler ran), its one replica up, nothing partial. */
static void test_agg_metrics(void **state) {
    server_target *s = *state;
    assert_int_equal(harness_http_get(s->process, "/metrics", page, sizeof page), 200);
    assert_true(metric_value(page, "isn_agg_requests_total{code=\"OK\"} ") >= s->searches_ok);
    assert_true(metric_value(page, "isn_agg_requests_total{code=\"INVALID_ARGUMENT\"} ") >= s->searches_invalid);
    assert_true(metric_value(page, "isn_agg_requests_total{code=\"UNIMPLEMENTED\"} ") >= 3); /* the unknown paths */
    assert_true(metric_value(page, "isn_agg_upstream_requests_total ") >= s->searches_ok);
    assert_int_equal(metric_value(page, "isn_agg_partial_total "), 0);
    char sample[128];
    snprintf(sample, sizeof sample, "isn_agg_replica_up{partition=\"0\",replica=\"%s\"} ", h.grpc_address);
    assert_int_equal(metric_value(page, sample), 1);

    json_t *stats = stats_json(s);
    assert_int_equal(json_integer_value(json_object_get(stats, "partitions")), 1);
    assert_true((uint64_t)json_integer_value(json_object_get(stats, "ok")) >= s->searches_ok);
    json_t *replica = json_array_get(json_object_get(stats, "replicas"), 0);
    assert_string_equal(json_string_value(json_object_get(replica, "address")), h.grpc_address);
    assert_true(json_is_true(json_object_get(replica, "up")));
    json_decref(stats);
}

/* ------------------------------------------------------------------ setup */

static isn_grpc_client *connect_to(const server_target *s) {
    char err[ISN_ERR_LEN];
    isn_grpc_client *client = isn_grpc_connect(s->process->grpc_address, 5000, err, sizeof err);
    if (!client) fprintf(stderr, "cannot connect to %s: %s\n", s->name, err);
    return client;
}

static int setup(void **state) {
    (void)state;
    char err[ISN_ERR_LEN];
    offline_index = isn_index_open(h.index_dir, err, sizeof err);
    if (!offline_index) {
        fprintf(stderr, "cannot open the test index: %s\n", err);
        return -1;
    }
    offline = isn_searcher_new(offline_index);
    /* Queries are analysed on the workers (the path of nodes with many cores). */
    const char *extra[] = {"--set", "search.max_k=1000", "--set", "server.max_message_size=64KiB", "--partition-id", "7",
                           "--set", "scheduler.analysis_min_workers=0",
                           /* no cap on deadlines: test_deadlines sends the largest grpc-timeout values */
                           "--set", "search.max_timeout=0", NULL};
    if (harness_start(&h, NULL, extra) != 0) return -1;
    /* isn-agg in front of it, with the same max_k (isn-agg has no message-size setting). */
    const char *partitions[] = {h.grpc_address, NULL};
    const char *agg_extra[] = {"--set", "max_k=1000", NULL};
    if (harness_start_agg(&agg_process, partitions, agg_extra) != 0) return -1;
    for (size_t i = 0; i < sizeof servers / sizeof servers[0]; i++)
        if (!(servers[i].client = connect_to(&servers[i]))) return -1;
    snprintf(cases_path, sizeof cases_path, "%s/cases.json", h.work_dir);
    cases_json = fopen(cases_path, "w");
    fprintf(cases_json, "[");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (cases_json) fclose(cases_json);
    int status = 0;
    /* isn-agg first: it drains, then its partition does. */
    for (size_t i = sizeof servers / sizeof servers[0]; i-- > 0;) {
        server_target *s = &servers[i];
        if (s->client) isn_grpc_close(s->client);
        int exit_status = harness_stop(s->process);
        if (exit_status != 0) {
            fprintf(stderr, "%s exit status %d after SIGTERM (expected 0)\n", s->name, exit_status);
            harness_dump_log(s->process);
            status = -1;
        }
        harness_cleanup(s->process);
    }
    isn_searcher_free(offline);
    isn_index_close(offline_index);
    return status;
}

/* A check run against one server: "test_health on isn-agg". */
#define ON(test, server) {#test " on " #server, test, NULL, NULL, &servers[server]}
/* The checks both servers pass, each as its target says. */
#define ON_EACH_SERVER(server)                                                                                   \
    ON(test_search_matches_offline, server), ON(test_pre_analyzed_terms, server),                                \
        ON(test_global_statistics, server), ON(test_invalid_requests, server), ON(test_protocol_errors, server), \
        ON(test_health, server), ON(test_python_grpcio_client, server), ON(test_isn_query_server, server),       \
        ON(test_stats_endpoint, server), ON(test_deadlines, server), ON(test_nul_in_strings, server)

int main(int argc, char **argv) {
    (void)argc;
    harness_init(&h, argv[0]);
    harness_init(&agg_process, argv[0]);
    harness_build_index(&h, NUM_DOCS);
    const struct CMUnitTest tests[] = {
        ON_EACH_SERVER(ISND), ON(test_isnd_info, ISND), ON(test_isnd_metrics, ISND),
        ON_EACH_SERVER(ISN_AGG), ON(test_agg_info, ISN_AGG), ON(test_agg_metrics, ISN_AGG),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
