/* isnd end to end on a loopback port: Search results equal the offline engine's for many queries,
 * modes, algorithms and k (through the project's gRPC client, and through a stock Python grpcio
 * client with stubs generated at test time); Info and Health; every error status the server
 * promises; the stats endpoint (/metrics checked by promtool when installed, /stats, /healthz,
 * /readyz). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/support/isnd_harness.h"
#include "grpc/grpc.h"

#define NUM_DOCS 3000
#define MAX_K 1000

static harness h;
static isn_index *offline_index;
static isn_searcher *offline;
static isn_grpc_client *client;
static uint64_t searches_ok, searches_invalid;
static FILE *cases_json; /* expected results for the Python client */
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
    isn_query query;
    char err[ISN_ERR_LEN];
    assert_int_equal(isn_query_parse(offline, text, strlen(text), &query, err, sizeof err), 0);
    isn_search_options options;
    isn_search_options_default(&options);
    options.mode = mode;
    options.algo = algo;
    options.k = k;
    isn_search_stats stats;
    if (isn_search(offline, &query, &options, hits, num_hits, &stats, err, sizeof err) != 0) fail_msg("offline: %s", err);
}

static void assert_same_hits(const isn_grpc_search_reply *reply, const isn_hit *hits, uint32_t num_hits,
                             const char *what) {
    if (reply->status != 0) fail_msg("%s: status %d: %s", what, reply->status, reply->message);
    if (reply->num_hits != num_hits) fail_msg("%s: %u hits over gRPC, %u offline", what, reply->num_hits, num_hits);
    for (uint32_t i = 0; i < num_hits; i++) {
        size_t len;
        const char *id = isn_index_doc_id(offline_index, hits[i].doc, &len);
        if (reply->hits[i].doc != hits[i].doc || reply->hits[i].score != hits[i].score ||
            strlen(reply->hits[i].external_id) != len || memcmp(reply->hits[i].external_id, id, len))
            fail_msg("%s: hit %u differs: gRPC %s (doc %u, %.9g), offline %.*s (doc %u, %.9g)", what, i,
                     reply->hits[i].external_id, reply->hits[i].doc, (double)reply->hits[i].score, (int)len, id,
                     hits[i].doc, (double)hits[i].score);
    }
    assert_true(reply->complete);
    assert_string_equal(reply->device, "cpu");
}

static void record_case(const char *text, const char *mode, const char *algo, uint32_t k, const isn_hit *hits,
                        uint32_t num_hits) {
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
    (void)state;
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
                if (isn_grpc_search(client, &request, &reply, err, sizeof err) != 0) fail_msg("transport: %s", err);
                snprintf(what, sizeof what, "\"%s\" %s %s k=%u", QUERIES[q],
                         combos[c].mode == ISN_MODE_AND ? "and" : "or", isn_algo_name(combos[c].algo), ks[ki]);
                assert_same_hits(&reply, hits, num_hits, what);
                if (combos[c].algo != ISN_ALGO_AUTO) assert_string_equal(reply.algorithm_used, isn_algo_name(combos[c].algo));
                assert_true(reply.total_us >= reply.retrieval_us);
                isn_grpc_search_reply_free(&reply);
                searches_ok++;
                if (ki == 1 || ks[ki] == 137)
                    record_case(QUERIES[q], combos[c].mode == ISN_MODE_AND ? "and" : "or",
                                isn_algo_name(combos[c].algo), ks[ki], hits, num_hits);
            }
        }
    }
}

/* Pre-analyzed terms give what the text that analyzes to them gives; repeats count. */
static void test_pre_analyzed_terms(void **state) {
    (void)state;
    static isn_hit hits[100];
    uint32_t num_hits;
    offline_search("wind tunnel running wind", ISN_MODE_OR, ISN_ALGO_AUTO, 100, hits, &num_hits);
    const char *terms[] = {"wind", "tunnel", "run", "wind", "zzznotindexed"};
    isn_grpc_search_request request = {.terms = terms, .num_terms = 5, .k = 100, .mode = ISN_GRPC_MODE_OR};
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(client, &request, &reply, err, sizeof err), 0);
    assert_same_hits(&reply, hits, num_hits, "pre-analyzed terms");
    isn_grpc_search_reply_free(&reply);
    searches_ok++;
}

/* Global statistics change IDF exactly as isn_search_options.num_docs and isn_query_term.df do. */
static void test_global_statistics(void **state) {
    (void)state;
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
    assert_int_equal(isn_grpc_search(client, &request, &reply, err, sizeof err), 0);
    assert_same_hits(&reply, hits, num_hits, "global statistics");
    isn_grpc_search_reply_free(&reply);
    searches_ok++;

    /* df above N is refused */
    const uint64_t bad_dfs[] = {2000000, 7};
    request.global_dfs = bad_dfs;
    assert_int_equal(isn_grpc_search(client, &request, &reply, err, sizeof err), 0);
    assert_int_equal(reply.status, 3);
    assert_non_null(strstr(reply.message, "above num_docs"));
    searches_invalid++;
}

/* ------------------------------------------------------------------ errors */

static void expect_search_error(const isn_grpc_search_request *request, int status, const char *message_part) {
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(client, request, &reply, err, sizeof err), 0);
    if (reply.status != status || !strstr(reply.message, message_part))
        fail_msg("expected status %d with \"%s\", got %d \"%s\"", status, message_part, reply.status, reply.message);
    isn_grpc_search_reply_free(&reply);
    if (status == 3) searches_invalid++;
}

static void test_invalid_requests(void **state) {
    (void)state;
    expect_search_error(&(isn_grpc_search_request){.query = ""}, 3, "empty query");
    expect_search_error(&(isn_grpc_search_request){.query = "  \t "}, 3, "empty query");
    expect_search_error(&(isn_grpc_search_request){.query = "wind", .k = MAX_K + 1}, 3, "max_k = 1000");
    expect_search_error(&(isn_grpc_search_request){.query = "wind", .algorithm = "fast"}, 3, "unknown algorithm \"fast\"");
    expect_search_error(&(isn_grpc_search_request){.query = "wind", .algorithm = "wand", .mode = ISN_GRPC_MODE_AND}, 3,
                        "does not run AND");
    expect_search_error(&(isn_grpc_search_request){.query = "wind", .mode = (isn_grpc_mode)7}, 3, "unknown mode 7");
    /* an algorithm alone decides the mode */
    isn_grpc_search_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_search(client, &(isn_grpc_search_request){.query = "wind tunnel", .algorithm = "bmand"},
                                     &reply, err, sizeof err),
                     0);
    assert_int_equal(reply.status, 0);
    static isn_hit hits[10];
    uint32_t num_hits;
    offline_search("wind tunnel", ISN_MODE_AND, ISN_ALGO_BMAND, 10, hits, &num_hits);
    assert_same_hits(&reply, hits, num_hits, "bmand without a mode");
    isn_grpc_search_reply_free(&reply);
    searches_ok++;
}

static isn_grpc_result raw_call(const isn_grpc_request *request) {
    char err[256];
    isn_grpc_call *call = isn_grpc_start(client, request, err, sizeof err);
    if (!call) fail_msg("start: %s", err);
    if (isn_grpc_wait(client, call, 10000, err, sizeof err) != 0) fail_msg("wait: %s", err);
    isn_grpc_result result = *isn_grpc_call_result(call);
    result.message = NULL;
    isn_grpc_call_free(call);
    return result;
}

static void expect_raw(const isn_grpc_request *request, int grpc_status, int http_status, const char *message_part) {
    isn_grpc_result r = raw_call(request);
    if (r.grpc_status != grpc_status || r.http_status != http_status ||
        (message_part && !strstr(r.grpc_message, message_part)))
        fail_msg("%s: expected grpc-status %d http %d \"%s\", got %d http %d \"%s\" (reset %d code %u)", request->path,
                 grpc_status, http_status, message_part ? message_part : "", r.grpc_status, r.http_status,
                 r.grpc_message, r.reset, r.reset_code);
}

static void test_protocol_errors(void **state) {
    (void)state;
    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    expect_raw(&(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = garbage, .body_len = 5, .frame = true}, 3,
               200, "not a valid isn.v1.SearchRequest");
    searches_invalid++;
    expect_raw(&(isn_grpc_request){.path = "/isn.v1.Search/Nope", .frame = true}, 12, 200, "unknown method");
    expect_raw(&(isn_grpc_request){.path = "/foo.Bar/Baz", .frame = true}, 12, 200, "/foo.Bar/Baz");
    expect_raw(&(isn_grpc_request){.path = "/grpc.health.v1.Health/Watch", .frame = true}, 12, 200, "Watch");

    /* message over max_message_size (64 KiB here): refused before it is read */
    size_t big = 64 * 1024 + 1;
    uint8_t *body = calloc(1, big);
    expect_raw(&(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = body, .body_len = big, .frame = true}, 8, 200,
               "exceeds the server's limit");
    free(body);

    /* prefix announces 100 bytes, 10 follow, then END_STREAM */
    uint8_t short_frame[15] = {0, 0, 0, 0, 100};
    expect_raw(&(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = short_frame, .body_len = 15}, 3, 200,
               "announces 100 bytes, stream ended after 10");
    /* half a prefix */
    expect_raw(&(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = short_frame, .body_len = 3}, 3, 200, "prefix");
    /* no message at all */
    expect_raw(&(isn_grpc_request){.path = "/isn.v1.Search/Search"}, 3, 200, "without a message");
    /* compressed flag */
    const uint8_t compressed[6] = {1, 0, 0, 0, 1, 0};
    expect_raw(&(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = compressed, .body_len = 6}, 12, 200,
               "compressed");
    /* two messages on a unary call */
    const uint8_t two[12] = {0, 0, 0, 0, 1, 0x0a, 0, 0, 0, 0, 1, 0x0a};
    expect_raw(&(isn_grpc_request){.path = "/isn.v1.Search/Search", .body = two, .body_len = 12}, 3, 200,
               "more than one");
    /* not gRPC */
    expect_raw(&(isn_grpc_request){.path = "/isn.v1.Search/Search", .content_type = "application/json"}, -1, 415, NULL);
    /* the connection still serves */
    int serving;
    char err[256];
    assert_int_equal(isn_grpc_health_check(client, "", &serving, err, sizeof err), 0);
    assert_int_equal(serving, 1);
}

/* ------------------------------------------------------------------ Info and Health */

static void test_info(void **state) {
    (void)state;
    const isn_index_info *info = isn_index_get_info(offline_index);
    const char *terms[] = {"wind", "Running", "the", "zzz"};
    isn_grpc_info_reply reply;
    char err[256];
    assert_int_equal(isn_grpc_info(client, terms, 4, true, &reply, err, sizeof err), 0);
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

static void test_health(void **state) {
    (void)state;
    int serving;
    char err[256];
    assert_int_equal(isn_grpc_health_check(client, "", &serving, err, sizeof err), 0);
    assert_int_equal(serving, 1);
    assert_int_equal(isn_grpc_health_check(client, "isn.v1.Search", &serving, err, sizeof err), 0);
    assert_int_equal(serving, 1);
    assert_int_equal(isn_grpc_health_check(client, "other.Service", &serving, err, sizeof err), 5);
    assert_non_null(strstr(err, "unknown service"));
}

/* ------------------------------------------------------------------ Python grpcio */

static const char *python(void) {
    const char *env = getenv("ISN_PYTHON");
    if (env) return env;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

static void test_python_grpcio_client(void **state) {
    (void)state;
    fprintf(cases_json, "\n]\n");
    fclose(cases_json);
    cases_json = NULL;
    char cmd[PATH_MAX * 3];
    snprintf(cmd, sizeof cmd,
             "%s tests/integration/grpcio_check.py --server %s --stats 127.0.0.1:%d --cases %s/cases.json "
             "--proto-dir proto --work-dir %s",
             python(), h.grpc_address, h.stats_port, h.work_dir, h.work_dir);
    int rc = system(cmd);
    if (rc != 0) fail_msg("the Python grpcio client check failed (exit %d): %s", WEXITSTATUS(rc), cmd);
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

static void test_stats_endpoint(void **state) {
    (void)state;
    assert_int_equal(harness_http_get(&h, "/healthz", page, sizeof page), 200);
    assert_string_equal(page, "ok\n");
    assert_int_equal(harness_http_get(&h, "/readyz", page, sizeof page), 200);
    assert_int_equal(harness_http_get(&h, "/nope", page, sizeof page), 404);

    assert_int_equal(harness_http_get(&h, "/metrics", page, sizeof page), 200);
    /* exact counts of what this test did (the Python check ran its own requests: at least as many) */
    assert_true(metric_value(page, "isn_requests_total{method=\"isn.v1.Search/Search\",code=\"OK\"} ") >= searches_ok);
    assert_true(metric_value(page, "isn_requests_total{method=\"isn.v1.Search/Search\",code=\"INVALID_ARGUMENT\"} ") >=
                searches_invalid);
    assert_true(metric_value(page, "isn_requests_total{method=\"isn.v1.Search/Search\",code=\"RESOURCE_EXHAUSTED\"} ") >= 1);
    assert_true(metric_value(page, "isn_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"} ") >= 2);
    assert_int_equal(metric_value(page, "isn_index_documents "), NUM_DOCS);
    assert_int_equal(metric_value(page, "isn_ready "), 1);
    assert_true(metric_value(page, "process_resident_memory_bytes ") > 1000000);
    assert_true(metric_value(page, "isn_search_stage_duration_seconds_count{stage=\"retrieval\",device=\"cpu\"} ") >=
                searches_ok);
    assert_non_null(strstr(page, "isn_search_stage_duration_seconds_bucket{stage=\"queue\",device=\"cpu\",le=\"+Inf\"}"));

    char metrics_path[PATH_MAX + 16];
    snprintf(metrics_path, sizeof metrics_path, "%s/metrics.txt", h.work_dir);
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

    assert_int_equal(harness_http_get(&h, "/stats", page, sizeof page), 200);
    json_error_t jerr;
    json_t *stats = json_loads(page, 0, &jerr);
    if (!stats) fail_msg("/stats is not JSON: %s", jerr.text);
    assert_true(json_is_true(json_object_get(stats, "ready")));
    assert_string_equal(json_string_value(json_object_get(stats, "state")), "ready");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(stats, "index"), "documents")), NUM_DOCS);
    assert_int_equal(json_integer_value(json_object_get(stats, "workers")), 2);
    json_t *search = json_object_get(json_object_get(stats, "requests"), "isn.v1.Search/Search");
    assert_true((uint64_t)json_integer_value(json_object_get(search, "OK")) >= searches_ok);
    json_decref(stats);

    /* keep-alive: two requests on one connection */
    int fd = harness_connect(h.stats_port);
    const char *two = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(send(fd, two, strlen(two), 0), (ssize_t)strlen(two));
    ssize_t n = harness_read_until_close(fd, page, sizeof page - 1, 5000);
    close(fd);
    assert_true(n > 0);
    page[n] = '\0';
    assert_non_null(strstr(page, "ok\n"));
    assert_non_null(strstr(page, "ready\n"));
}

/* ------------------------------------------------------------------ isn-query --server */

/* isn-query prints the same hits through the daemon as from the index directly (compared line by
 * line, comments aside). */
static void test_isn_query_server(void **state) {
    (void)state;
    char cmd[2048];
    FILE *p;
    size_t n;
    static const char *const args[] = {"-k 20 \"wind tunnel\"", "-k 5 --mode and \"search engine\"",
                                       "-k 100 --algo maxscore \"t5 t17 connected runs\""};
    static char local[1 << 16], remote[1 << 16];
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        char *outs[2] = {local, remote};
        for (int side = 0; side < 2; side++) {
            snprintf(cmd, sizeof cmd, "%s/bin/isn-query %s %s %s | grep -v '^#'", h.build_dir,
                     side ? "--server" : "--index", side ? h.grpc_address : h.index_dir, args[i]);
            p = popen(cmd, "r");
            assert_non_null(p);
            n = fread(outs[side], 1, sizeof local - 1, p);
            outs[side][n] = '\0';
            if (pclose(p) != 0) fail_msg("failed: %s", cmd);
        }
        if (strcmp(local, remote) != 0) fail_msg("isn-query %s: --server output differs from --index:\n%s\nvs\n%s", args[i], remote, local);
        assert_true(strlen(local) > 0);
    }
}

/* ------------------------------------------------------------------ setup */

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
                           "--set", "scheduler.analysis_min_workers=0", NULL};
    if (harness_start(&h, NULL, extra) != 0) return -1;
    client = isn_grpc_connect(h.grpc_address, 5000, err, sizeof err);
    if (!client) {
        fprintf(stderr, "cannot connect: %s\n", err);
        return -1;
    }
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/cases.json", h.work_dir);
    cases_json = fopen(path, "w");
    fprintf(cases_json, "[");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (cases_json) fclose(cases_json);
    isn_grpc_close(client);
    int status = harness_stop(&h);
    if (status != 0) {
        fprintf(stderr, "isnd exit status %d after SIGTERM (expected 0)\n", status);
        harness_dump_log(&h);
    }
    isn_searcher_free(offline);
    isn_index_close(offline_index);
    harness_cleanup(&h);
    return status == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    (void)argc;
    harness_init(&h, argv[0]);
    harness_build_index(&h, NUM_DOCS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_search_matches_offline),
        cmocka_unit_test(test_pre_analyzed_terms),
        cmocka_unit_test(test_global_statistics),
        cmocka_unit_test(test_invalid_requests),
        cmocka_unit_test(test_protocol_errors),
        cmocka_unit_test(test_info),
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_python_grpcio_client),
        cmocka_unit_test(test_isn_query_server),
        cmocka_unit_test(test_stats_endpoint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
