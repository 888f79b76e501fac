/* A two-stage tier end to end: the corpus built as 2 partitions, each served by 2 isnd replicas that
 * load the same ranker, isn-agg in front with global statistics, and one unpartitioned isnd with the
 * same ranker for reference, all on loopback.
 *  - through isn-agg every hit carries the score the ranker gives it on its own partition (asked
 *    directly, with the global statistics isn-agg sends: N, df, average length), both scores equal,
 *    and the hits are the partitions' re-ranked hits merged by that score;
 *  - Cranfield nDCG@10 through the tier is within 0.005 of the single node's (with the same ranker);
 *  - every hit names the partition it came from (Hit.partition), and isn-query shows it;
 *  - an unknown ranker is INVALID_ARGUMENT through isn-agg, with the partition's words; n1 without a
 *    ranker too; debug is forwarded (the reply says how much work the partitions did).
 * Corpus: Cranfield ($ISN_CRANFIELD_DIR, set by make test) when present, else a synthetic one (no
 * judgements: the nDCG check then says it is skipped). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/support/tier.h"
#include "grpc/client.h"
#include "ranking/ranking.h"

#define PARTITIONS 2
#define REPLICAS 2
#define TOP 10
#define N1 100
#define RANKER "tier-linear"

static tier t; /* t.whole: the unpartitioned index with the ranker */
static tier_queries qs;
static char ranker_dir[300];

/* ------------------------------------------------------------------ setup */

/* A linear ranker (an MLP of one linear layer) over BM25, the title's BM25 and adjacent query-term
 * pairs: it reorders the first stage, and its BM25 features depend on the global statistics. */
static int write_ranker(void) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/linear.mlp", ranker_dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "isn-mlp 1\ninputs 3\nlayer 1 linear\n1.0 0.5 0.2\n0\n");
    if (fclose(f) != 0) return -1;
    snprintf(path, sizeof path, "%s/%s.ranker", ranker_dir, RANKER);
    if (!(f = fopen(path, "w"))) return -1;
    fprintf(f, "isn-ranker 1\nname %s\nmodel mlp linear.mlp\ninput bm25\ninput title.bm25\ninput adjacent_pairs\n", RANKER);
    return fclose(f);
}

static int setup(void **state) {
    (void)state;
    tier_init(&t);
    snprintf(ranker_dir, sizeof ranker_dir, "%s/rankers", t.whole.work_dir);
    if (tier_prepare_corpus(&t, &qs, TIER_MAX_QUERIES, 11, 2000, 60, 4) != 0 || mkdir(ranker_dir, 0755) != 0 ||
        write_ranker() != 0 || tier_build(&t, PARTITIONS, true, "") != 0)
        return -1;
    char set_dir[400];
    snprintf(set_dir, sizeof set_dir, "rerank.ranker_dir=%s", ranker_dir);
    const char *extra[] = {"--set", set_dir, NULL};
    if (harness_start(&t.whole, NULL, extra) != 0 || tier_start_replicas(&t, REPLICAS, extra) != 0) return -1;
    const char *agg_extra[] = {"--stats-listen", "", "--global-stats", "--no-hedge", NULL};
    return tier_start_agg(&t, agg_extra);
}

static int teardown(void **state) {
    (void)state;
    if (t.aggregator.pid > 0) harness_stop(&t.aggregator);
    tier_cleanup(&t);
    tier_queries_free(&qs);
    return 0;
}

/* ------------------------------------------------------------------ helpers */

static isn_grpc_client *connect_to(const char *address) {
    isn_grpc_client *c = support_connect(address);
    if (!c) fail_msg("cannot connect to %s", address);
    return c;
}

static void search(isn_grpc_client *c, const isn_grpc_search_request *rq, isn_grpc_search_reply *reply) {
    char err[256];
    if (isn_grpc_search(c, rq, reply, err, sizeof err) != 0) fail_msg("search \"%s\": %s", rq->query, err);
}

/* The statistics isn-agg sends with a query: per analysed term the sum of its df over the partitions
 * (each partition counting a repeated term once), N and the average length of the whole corpus. */
typedef struct {
    char terms[32][64];
    uint64_t dfs[32];
    const char *term_ptrs[32];
    uint32_t num_terms;
    uint64_t num_docs, total_len;
} global_stats;

static void collect_global_stats(isn_grpc_client *const *parts, const char *text, global_stats *g) {
    memset(g, 0, sizeof *g);
    for (int p = 0; p < PARTITIONS; p++) {
        isn_grpc_info_reply info;
        char err[256];
        if (isn_grpc_info(parts[p], &text, 1, true, -1, &info, err, sizeof err) != 0 || info.status != 0)
            fail_msg("Info of partition %d: %s %s", p, err, info.message);
        g->num_docs += info.num_docs;
        g->total_len += info.total_doc_len;
        for (uint32_t i = 0; i < info.num_term_infos; i++) {
            const char *term = info.terms[i].index_term;
            bool seen_here = false;
            for (uint32_t j = 0; j < i && !seen_here; j++) seen_here = !strcmp(info.terms[j].index_term, term);
            if (!term[0] || seen_here) continue;
            uint32_t term_at = 0;
            while (term_at < g->num_terms && strcmp(g->terms[term_at], term)) term_at++;
            if (term_at == g->num_terms) {
                assert_true(g->num_terms < 32);
                snprintf(g->terms[term_at], sizeof g->terms[term_at], "%s", term);
                g->term_ptrs[term_at] = g->terms[term_at];
                g->num_terms++;
            }
            g->dfs[term_at] += info.terms[i].df;
        }
        isn_grpc_info_reply_free(&info);
    }
    /* a term no partition holds is not sent (a df of 0 would be refused) */
    for (uint32_t term_at = 0; term_at < g->num_terms;)
        if (g->dfs[term_at]) term_at++;
        else {
            g->num_terms--;
            memcpy(g->terms[term_at], g->terms[g->num_terms], sizeof g->terms[term_at]);
            g->dfs[term_at] = g->dfs[g->num_terms];
        }
}

static int write_run_line(FILE *f, const char *qid, const isn_grpc_search_reply *reply) {
    for (uint32_t i = 0; i < reply->num_hits; i++)
        fprintf(f, "%s Q0 %s %u %.6f tier\n", qid, reply->hits[i].external_id, i + 1, reply->hits[i].score);
    return 0;
}

static double ndcg_at_10(const char *run_path) {
    char err[512];
    isn_qrels qrels;
    isn_eval_run run;
    isn_eval_report report;
    if (isn_qrels_read(qs.qrels_path, &qrels, err, sizeof err) != 0) fail_msg("%s", err);
    if (isn_eval_run_read(run_path, &run, err, sizeof err) != 0) fail_msg("%s", err);
    if (isn_eval_evaluate(&qrels, &run, &report, err, sizeof err) != 0) fail_msg("%s", err);
    double ndcg = report.mean.ndcg_cut_10;
    isn_eval_report_free(&report);
    isn_eval_run_free(&run);
    isn_qrels_free(&qrels);
    return ndcg;
}

/* ------------------------------------------------------------------ tests */

/* Every hit through isn-agg is a partition's re-ranked hit with the same two scores, in the order of
 * the partitions' answers merged by the ranker's score; nDCG@10 as the single node's. */
static void test_rerank_through_the_tier(void **state) {
    (void)state;
    isn_grpc_client *agg_client = connect_to(t.aggregator.grpc_address), *single_client = connect_to(t.whole.grpc_address);
    isn_grpc_client *parts[PARTITIONS];
    for (int p = 0; p < PARTITIONS; p++) parts[p] = connect_to(t.replicas[p][p % REPLICAS].grpc_address);
    char tier_run[PATH_MAX], single_run[PATH_MAX];
    snprintf(tier_run, sizeof tier_run, "%s/merged.run", t.whole.work_dir);
    snprintf(single_run, sizeof single_run, "%s/single.run", t.whole.work_dir);
    FILE *tier_out = fopen(tier_run, "w"), *single_out = fopen(single_run, "w");
    assert_non_null(tier_out);
    assert_non_null(single_out);
    uint32_t reordered = 0, hits_checked = 0;
    for (uint32_t qi = 0; qi < qs.count; qi++) {
        const char *text = qs.texts[qi];
        isn_grpc_search_request rq = {.query = text, .k = TOP, .ranker = RANKER, .n1 = N1, .timeout_ms = 10000};
        isn_grpc_search_reply merged, one;
        search(agg_client, &rq, &merged);
        if (merged.status != 0) fail_msg("\"%s\" through isn-agg: status %d: %s", text, merged.status, merged.message);
        assert_true(merged.complete);
        assert_int_equal(merged.partitions_answered, PARTITIONS);
        search(single_client, &rq, &one);
        if (one.status != 0) fail_msg("\"%s\" single node: status %d: %s", text, one.status, one.message);
        write_run_line(tier_out, qs.ids[qi], &merged);
        write_run_line(single_out, qs.ids[qi], &one);

        /* each partition asked as isn-agg asks it */
        global_stats g;
        collect_global_stats(parts, text, &g);
        isn_grpc_search_request prq = rq;
        prq.global_num_docs = g.num_docs;
        prq.global_avg_doc_len = g.num_docs ? (double)g.total_len / (double)g.num_docs : 0;
        prq.global_terms = g.term_ptrs;
        prq.global_dfs = g.dfs;
        prq.num_global_terms = g.num_terms;
        isn_grpc_search_reply own[PARTITIONS];
        uint32_t total = 0;
        for (int p = 0; p < PARTITIONS; p++) {
            search(parts[p], &prq, &own[p]);
            if (own[p].status != 0) fail_msg("\"%s\" partition %d: %s", text, p, own[p].message);
            total += own[p].num_hits;
        }
        /* the partitions' hits merged by the ranker's score (ties: partition, then doc), cut at k */
        uint32_t want = total < TOP ? total : TOP, next[PARTITIONS] = {0};
        assert_int_equal(merged.num_hits, want);
        for (uint32_t i = 0; i < want; i++) {
            int best = -1;
            for (int p = 0; p < PARTITIONS; p++) {
                if (next[p] >= own[p].num_hits) continue;
                if (best < 0 || own[p].hits[next[p]].score > own[best].hits[next[best]].score) best = p;
            }
            const isn_grpc_hit *expect = &own[best].hits[next[best]++], *got = &merged.hits[i];
            if (strcmp(got->external_id, expect->external_id) || got->score != expect->score ||
                got->l1_score != expect->l1_score || got->doc != expect->doc || got->partition != (uint32_t)best)
                fail_msg("\"%s\" hit %u: isn-agg %s (%.9g, l1 %.9g, Hit.partition %u), partition %d %s (%.9g, l1 %.9g)",
                         text, i, got->external_id, got->score, got->l1_score, got->partition, best,
                         expect->external_id, expect->score, expect->l1_score);
            if (i && got->l1_score > merged.hits[i - 1].l1_score) reordered++;
            hits_checked++;
        }
        for (int p = 0; p < PARTITIONS; p++) isn_grpc_search_reply_free(&own[p]);
        isn_grpc_search_reply_free(&merged);
        isn_grpc_search_reply_free(&one);
    }
    fclose(tier_out);
    fclose(single_out);
    fprintf(stderr, "test_tier: %u hits checked against their partitions, %u reordered by the ranker\n", hits_checked,
            reordered);
    assert_true(reordered > 0); /* else the ranker proved nothing */
    if (qs.have_qrels) {
        double tier_ndcg = ndcg_at_10(tier_run), single_ndcg = ndcg_at_10(single_run);
        fprintf(stderr, "test_tier: nDCG@10 with ranker %s: tier %.4f, single node %.4f (difference %.4f)\n", RANKER,
                tier_ndcg, single_ndcg, fabs(tier_ndcg - single_ndcg));
        assert_true(fabs(tier_ndcg - single_ndcg) <= 0.005);
    } else
        fprintf(stderr, "test_tier: no judgements: nDCG comparison skipped\n");
    for (int p = 0; p < PARTITIONS; p++) isn_grpc_close(parts[p]);
    isn_grpc_close(agg_client);
    isn_grpc_close(single_client);
}

/* A request every partition refuses is the caller's error, passed back with its status and words. */
static void test_caller_errors_pass_through(void **state) {
    (void)state;
    isn_grpc_client *c = connect_to(t.aggregator.grpc_address);
    isn_grpc_search_reply reply;
    isn_grpc_search_request unknown = {.query = "wind tunnel", .ranker = "no-such-ranker", .timeout_ms = 5000};
    search(c, &unknown, &reply);
    assert_int_equal(reply.status, ISN_GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(reply.message, "unknown ranker"));
    isn_grpc_search_request n1_alone = {.query = "wind tunnel", .n1 = 50, .timeout_ms = 5000};
    search(c, &n1_alone, &reply);
    assert_int_equal(reply.status, ISN_GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(reply.message, "n1"));
    isn_grpc_search_request debug = {.query = qs.texts[0], .debug = true, .timeout_ms = 5000};
    search(c, &debug, &reply);
    assert_int_equal(reply.status, 0);
    assert_true(reply.postings_scored > 0);
    assert_true(reply.num_terms > 0);
    isn_grpc_search_reply_free(&reply);
    isn_grpc_close(c);
}

/* isn-query through isn-agg: each hit's doc with the partition it numbers a document of. */
static void test_isn_query_shows_the_partition(void **state) {
    (void)state;
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s/isn-query.out", t.whole.work_dir);
    assert_int_equal(support_run_command("'%s/bin/isn-query' --server %s -k 20 '%s' >'%s'", t.whole.build_dir,
                                         t.aggregator.grpc_address, qs.texts[0], out),
                     0);
    size_t len;
    char *text = (char *)support_read_file(out, &len);
    assert_non_null(text);
    text = realloc(text, len + 1);
    text[len] = '\0';
    fprintf(stderr, "test_tier: isn-query through isn-agg:\n%.400s", text);
    assert_non_null(strstr(text, "of partition 0)"));
    assert_non_null(strstr(text, "of partition 1)"));
    free(text);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rerank_through_the_tier),
        cmocka_unit_test(test_caller_errors_pass_through),
        cmocka_unit_test(test_isn_query_shows_the_partition),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
