/* isn-query: run queries against an index directory (in process) and print hits or a TREC run. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "grpc/server.h"
#include "grpc/client.h"
#include "index/index.h"
#include "ranking/ranking.h"

typedef struct {
    const char *index_dir;
    const char *server; /* HOST:PORT of an isnd; NULL = search the index in process */
    const char *queries_path;
    const char *run_tag;
    const char *out_path;
    isn_search_options search;
    bool explicit_mode;
    /* Second stage: re-rank the best n1 with a ranker, or dump their features (LETOR lines). */
    const char *ranker_path;
    const char *dump_path;
    const char *qrels_path;
    uint32_t n1;
    bool list_features;
    bool show_device; /* --server: say which device answered each query */
    bool require_complete; /* --server: an incomplete answer is an error (exit 3) */
    uint32_t wait_ready_s;  /* --server: wait this long for the server to be up and SERVING */
    const char *traceparent; /* --server: sent as the W3C traceparent header */
    const char *request_id;  /* --server: SearchRequest.request_id */
    /* --server over TLS: the CA to verify it by, a client certificate (mutual TLS), the name to check */
    const char *tls_ca, *tls_cert, *tls_key, *tls_server_name;
    /* --fields: stored fields printed under each hit; --index: their slots and the fetch's scratch */
    const char *stored[ISN_MAX_FIELDS];
    uint32_t num_stored;
    int stored_slots[ISN_MAX_FIELDS];
    void *stored_scratch;
    /* --filter: with --index, every one must hold (their text lives in filter_text) */
    isn_filter_spec filters[ISN_MAX_QUERY_FILTERS];
    uint32_t num_filters;
    char filter_text[ISN_MAX_QUERY_FILTERS][256];
    const char *filter_values[ISN_MAX_QUERY_FILTERS][32];
} query_args;


static void usage(FILE *out) {
    fputs("usage: isn-query --index DIR | --server HOST:PORT [options] \"query text\"\n"
          "       isn-query --index DIR | --server HOST:PORT --queries FILE.tsv [--run-tag T] [--out RUN] [options]\n"
          "  --server HOST:PORT  ask a running isnd over gRPC instead of opening the index\n"
          "  --algo auto|or|and|maxscore|wand|bmw|bmm|bmand   first-stage algorithm (default auto)\n"
          "  --mode or|and       match any / every term when --algo is auto (default or)\n"
          "  -k N                hits to return (default 10)\n"
          "  --prior-weight W    with --index: score BM25 + W x each document's static score (the index's\n"
          "                      --static-score; default 0: BM25 alone); every algorithm stays exact\n"
          "  --queries FILE.tsv  qid<TAB>text per line; writes a TREC run (qid Q0 docid rank score tag; a docid's\n"
          "                      whitespace and '%%' percent-encoded)\n"
          "  --run-tag T         the run's tag (default isn)\n"
          "  --out FILE          write the run there instead of stdout\n"
          "  --ranker FILE       re-rank the first stage's best --n1 with this ranker (second stage); with\n"
          "                      --server, the name of a ranker the server loaded\n"
          "  --n1 N              first-stage candidates for --ranker / --dump-features (default 100)\n"
          "  --dump-features OUT with --queries: write LETOR/SVMrank lines (rel qid:Q 1:v ... # docid) for the\n"
          "                      best --n1 of each query; relevance from --qrels FILE (else 0); feature names\n"
          "                      in '# feature N NAME' header lines\n"
          "  --list-features     print the index's feature names and exit\n"
          "  --show-device       with --server: print the device that answered (cpu, gpu, cpu+gpu-l2...)\n"
          "  --require-complete  with --server: exit 3 when an answer is incomplete (a partition missing, a\n"
          "                      deadline hit); without it such answers print a warning and exit 0\n"
          "  --wait-ready S      with --server: first wait up to S seconds for the server to listen and say\n"
          "                      SERVING (grpc.health.v1), e.g. right after starting it\n"
          "  --traceparent TP    with --server: send this W3C traceparent (00-TRACEID-SPANID-FLAGS)\n"
          "  --request-id ID     with --server: SearchRequest.request_id (in the servers' access logs)\n"
          "  --filter EXPR       with --index: only documents whose attribute satisfies EXPR: lang=en, lang!=en,\n"
          "                      year>=2020 (> <= <), site in {a,b}, site not in {a,b}; repeatable, all must hold\n"
          "  --tls-ca FILE       with --server: TLS, the server's certificate checked against this CA (PEM)\n"
          "  --tls-cert FILE     with --tls-ca: a client certificate for mutual TLS (with --tls-key FILE)\n"
          "  --tls-server-name N with --tls-ca: the name the certificate must carry (default: the host)\n"
          "  --fields a,b        print these stored fields under each hit (the index must keep them:\n"
          "                      isn-index build --store); one query text, not --queries\n"
          "Every answer from --server says whether it is complete, and from an aggregator its coverage; an\n"
          "isnd's names the index generation that answered (content hash, build time; with --queries on\n"
          "stderr, when it changes).\n"
          "Exit status: 0 ok, 1 a query or the server failed, 2 bad arguments, 3 incomplete (--require-complete).\n",
          out);
}

/* -k and --n1: 1 .. ISN_MAX_K. */
static int parse_count(const char *flag, const char *text, uint32_t *out) {
    char *end;
    unsigned long value = strtoul(text, &end, 10);
    if (*end || value < 1 || value > ISN_MAX_K) {
        fprintf(stderr, "isn-query: %s must be 1..%d, got '%s'\n", flag, ISN_MAX_K, text);
        return -1;
    }
    *out = (uint32_t)value;
    return 0;
}

static int parse_args(int argc, char **argv, query_args *a, const char **text) {
    memset(a, 0, sizeof *a);
    isn_search_options_default(&a->search);
    a->run_tag = "isn";
    a->n1 = 100;
    static const struct option opts[] = {{"index", 1, 0, 'i'}, {"server", 1, 0, 's'}, {"algo", 1, 0, 'a'}, {"mode", 1, 0, 'm'},
                                         {"queries", 1, 0, 'q'}, {"run-tag", 1, 0, 't'}, {"out", 1, 0, 'o'},
                                         {"help", 0, 0, 'h'}, {"ranker", 1, 0, 'R'}, {"dump-features", 1, 0, 'D'},
                                         {"qrels", 1, 0, 'Q'}, {"n1", 1, 0, 'N'}, {"list-features", 0, 0, 'L'},
                                         {"show-device", 0, 0, 'V'}, {"require-complete", 0, 0, 'C'},
                                         {"wait-ready", 1, 0, 'W'}, {"traceparent", 1, 0, 'T'},
                                         {"request-id", 1, 0, 'I'}, {"fields", 1, 0, 'F'}, {"filter", 1, 0, 'G'},
                                         {"tls-ca", 1, 0, 1000}, {"tls-cert", 1, 0, 1001}, {"tls-key", 1, 0, 1002},
                                         {"tls-server-name", 1, 0, 1003}, {"prior-weight", 1, 0, 1004},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "k:", opts, NULL)) != -1) {
        switch (c) {
        case 'i': a->index_dir = optarg; break;
        case 's': a->server = optarg; break;
        case 1000: a->tls_ca = optarg; break;
        case 1001: a->tls_cert = optarg; break;
        case 1002: a->tls_key = optarg; break;
        case 1003: a->tls_server_name = optarg; break;
        case 1004: { /* its range is isn_search's to check, and to name in the error */
            char *end;
            a->search.prior_weight = strtof(optarg, &end);
            if (*end || end == optarg) {
                fprintf(stderr, "isn-query: --prior-weight takes a number, got '%s'\n", optarg);
                return -1;
            }
            break;
        }
        case 'a':
            if (!isn_algo_from_name(optarg, &a->search.algo)) {
                fprintf(stderr, "isn-query: unknown --algo '%s' (auto, or, and, maxscore, wand, bmw, bmm, bmand)\n", optarg);
                return -1;
            }
            break;
        case 'm':
            if (strcmp(optarg, "or") && strcmp(optarg, "and")) {
                fprintf(stderr, "isn-query: --mode must be or or and, got '%s'\n", optarg);
                return -1;
            }
            a->search.mode = optarg[0] == 'a' ? ISN_MODE_AND : ISN_MODE_OR;
            a->explicit_mode = true;
            break;
        case 'k':
            if (parse_count("-k", optarg, &a->search.k) != 0) return -1;
            break;
        case 'q': a->queries_path = optarg; break;
        case 't': a->run_tag = optarg; break;
        case 'o': a->out_path = optarg; break;
        case 'R': a->ranker_path = optarg; break;
        case 'V': a->show_device = true; break;
        case 'C': a->require_complete = true; break;
        case 'T': a->traceparent = optarg; break;
        case 'I': a->request_id = optarg; break;
        case 'W': {
            char *end;
            unsigned long s = strtoul(optarg, &end, 10);
            if (*end || end == optarg || s > 3600) {
                fprintf(stderr, "isn-query: --wait-ready takes seconds, 0..3600, got '%s'\n", optarg);
                return -1;
            }
            a->wait_ready_s = (uint32_t)s;
            break;
        }
        case 'G': {
            uint32_t f = a->num_filters;
            if (f == ISN_MAX_QUERY_FILTERS || strlen(optarg) >= sizeof a->filter_text[f]) {
                fprintf(stderr, "isn-query: too many or too long --filter\n");
                return 2;
            }
            snprintf(a->filter_text[f], sizeof a->filter_text[f], "%s", optarg);
            if (isn_filter_parse(a->filter_text[f], &a->filters[f], a->filter_values[f], 32) != 0) {
                fprintf(stderr, "isn-query: --filter '%s': expected NAME=V, NAME!=V, NAME>=N (> <= <), NAME in {a,b} "
                                "or NAME not in {a,b}\n", optarg);
                return 2;
            }
            a->num_filters++;
            break;
        }
        case 'F':
            for (char *name = strtok(optarg, ","); name; name = strtok(NULL, ",")) {
                if (a->num_stored == ISN_MAX_FIELDS) {
                    fprintf(stderr, "isn-query: --fields names at most %d fields\n", ISN_MAX_FIELDS);
                    return -1;
                }
                a->stored[a->num_stored++] = name;
            }
            if (!a->num_stored) {
                fprintf(stderr, "isn-query: --fields is empty\n");
                return -1;
            }
            break;
        case 'D': a->dump_path = optarg; break;
        case 'Q': a->qrels_path = optarg; break;
        case 'L': a->list_features = true; break;
        case 'N':
            if (parse_count("--n1", optarg, &a->n1) != 0) return -1;
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (a->search.algo != ISN_ALGO_AUTO) {
        isn_mode implied = isn_algo_mode(a->search.algo, a->search.mode);
        if (a->explicit_mode && implied != a->search.mode) {
            fprintf(stderr, "isn-query: --algo %s does not run in --mode %s\n", isn_algo_name(a->search.algo),
                    a->search.mode == ISN_MODE_AND ? "and" : "or");
            return -1;
        }
        a->search.mode = implied;
    }
    if (a->search.prior_weight != 0.0f && a->server) {
        fprintf(stderr, "isn-query: --prior-weight works with --index (a SearchRequest carries no prior weight yet)\n");
        return 2;
    }
    if (a->num_filters && a->server) {
        fprintf(stderr, "isn-query: --filter works with --index (send Filter messages to a server with any gRPC client)\n");
        return 2;
    }
    if ((a->tls_cert || a->tls_key || a->tls_server_name) && !a->tls_ca) {
        fprintf(stderr, "isn-query: --tls-cert, --tls-key and --tls-server-name need --tls-ca\n");
        return -1;
    }
    if (a->require_complete && !a->server) {
        fprintf(stderr, "isn-query: --require-complete needs --server (an index in process always answers fully)\n");
        return -1;
    }
    if (!a->index_dir == !a->server) {
        fprintf(stderr, "isn-query: give exactly one of --index DIR and --server HOST:PORT\n");
        return -1;
    }
    *text = optind < argc ? argv[optind] : NULL;
    if ((a->dump_path || a->list_features) && !a->index_dir) {
        fprintf(stderr, "isn-query: --dump-features and --list-features need --index\n");
        return -1;
    }
    if (a->num_stored && (a->queries_path || a->dump_path || a->list_features)) {
        fprintf(stderr, "isn-query: --fields prints under the hits of one query text (a TREC run has no room for text)\n");
        return -1;
    }
    if (a->dump_path && !a->queries_path) {
        fprintf(stderr, "isn-query: --dump-features needs --queries\n");
        return -1;
    }
    if (a->list_features)
        return 0;
    if (!a->queries_path && (!*text || optind + 1 != argc)) {
        fprintf(stderr, "isn-query: give one query text (quote it) or --queries FILE\n");
        return -1;
    }
    return 0;
}

/* One query through isnd: the same hits, scores and ids as the in-process path. */
static int search_remote(isn_grpc_client *c, const query_args *a, const char *text, isn_grpc_search_reply *reply,
                         char *err, size_t err_len) {
    isn_grpc_search_request rq = {.query = text, .k = a->search.k, .debug = true,
                                  .mode = a->search.mode == ISN_MODE_AND ? ISN_GRPC_MODE_AND : ISN_GRPC_MODE_OR,
                                  .algorithm = isn_algo_name(a->search.algo)};
    rq.ranker = a->ranker_path; /* --server: a ranker name */
    rq.traceparent = a->traceparent;
    rq.request_id = a->request_id;
    rq.n1 = a->ranker_path ? a->n1 : 0;
    rq.stored_fields = a->stored;
    rq.num_stored_fields = a->num_stored;
    if (isn_grpc_search(c, &rq, reply, err, err_len) != 0) return -1;
    if (reply->status != 0) {
        snprintf(err, err_len, "server answered %s (%d): %.200s", isn_grpc_status_name(reply->status), reply->status,
                 reply->message);
        isn_grpc_search_reply_free(reply);
        return -1;
    }
    return 0;
}

/* "isn-query: FILE:LINE: why" for a query of the --queries file, "isn-query: why" for the one query. */
static void query_error(const query_args *a, const isn_logged_query *q, const char *why) {
    if (a->queries_path) fprintf(stderr, "isn-query: %s:%zu: %s\n", a->queries_path, q->line, why);
    else fprintf(stderr, "isn-query: %s\n", why);
}

/* A TREC run's docid: its fields are split at whitespace, so an id holding any (a JSONL id may) is
 * written with whitespace and '%' percent-encoded ("Branding iron" as "Branding%20iron"), as qrels
 * must name it too. */
static void write_run_id(FILE *out, const char *id, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c == '%' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') fprintf(out, "%%%02X", c);
        else fputc(c, out);
    }
}

static void write_run_line(FILE *out, const query_args *a, const char *qid, const char *id, size_t len, uint32_t rank,
                           float score) {
    fprintf(out, "%s Q0 ", qid);
    write_run_id(out, id, len);
    fprintf(out, " %u %.6f %s\n", rank, score, a->run_tag);
}

/* One hit: a TREC run line (--queries), else "rank TAB score TAB id TAB (doc N)" on stdout. */
/* partition < 0: one index (doc is its number); else an aggregator's hit, doc numbered in that partition. */
static void print_hit(FILE *out, const query_args *a, const char *qid, uint32_t rank, float score, const char *id,
                      size_t id_len, uint32_t doc, int partition) {
    if (a->queries_path) write_run_line(out, a, qid, id, id_len, rank, score);
    else if (partition >= 0) printf("%u\t%.6f\t%.*s\t(doc %u of partition %d)\n", rank, score, (int)id_len, id, doc, partition);
    else printf("%u\t%.6f\t%.*s\t(doc %u)\n", rank, score, (int)id_len, id, doc);
}

/* One stored field under its hit; line breaks and tabs shown as spaces, so that a hit stays one block. */
static void print_field(const char *name, const char *text, size_t len) {
    printf("\t%s: ", name);
    for (size_t i = 0; i < len; i++) putchar(text[i] == '\n' || text[i] == '\r' || text[i] == '\t' ? ' ' : text[i]);
    putchar('\n');
}

/* --index: the asked stored fields of doc (resolved by resolve_stored). 0, or -1 after saying why. */
static int print_stored_local(const isn_index *ix, const query_args *a, uint32_t doc) {
    if (!a->num_stored) return 0;
    isn_stored_text texts[ISN_MAX_FIELDS];
    char err[ISN_ERR_LEN];
    if (isn_index_stored_get(ix, doc, a->stored_scratch, texts, err, sizeof err) != 0) {
        fprintf(stderr, "isn-query: document %u: %s\n", doc, err);
        return -1;
    }
    for (uint32_t j = 0; j < a->num_stored; j++)
        print_field(a->stored[j], texts[a->stored_slots[j]].text, texts[a->stored_slots[j]].len);
    return 0;
}

/* --index: the slots of the --fields names and scratch for one fetch. 0, or -1 after saying why. */
static int resolve_stored(const isn_index *ix, query_args *a) {
    if (!a->num_stored) return 0;
    const isn_index_info *info = isn_index_get_info(ix);
    for (uint32_t j = 0; j < a->num_stored; j++) {
        if ((a->stored_slots[j] = isn_index_stored_slot(ix, a->stored[j])) < 0) {
            fprintf(stderr, "isn-query: --fields: \"%s\" is not a stored field of %s (stored:", a->stored[j], a->index_dir);
            for (uint32_t i = 0; i < info->num_stored_fields; i++) fprintf(stderr, " %s", info->stored_fields[i]);
            fprintf(stderr, "%s; isn-index build --store)\n", info->num_stored_fields ? "" : " none");
            return -1;
        }
    }
    if (!(a->stored_scratch = malloc(isn_index_stored_scratch_bytes(ix)))) {
        fprintf(stderr, "isn-query: out of memory\n");
        return -1;
    }
    return 0;
}

/* "GENERATION (built 2026-11-26T17:00:00Z)": the index generation a reply names, with its build time. */
static void format_generation(const isn_grpc_search_reply *r, char *out, size_t len) {
    time_t built = (time_t)r->generation_built_unix;
    struct tm tm;
    char when[32] = "unknown";
    if (r->generation_built_unix && gmtime_r(&built, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(out, len, "%s (built %s)", r->generation, when);
}

/* --wait-ready: connects and asks Health/Check until the server says SERVING or the time is up. */
static isn_grpc_client *connect_ready(const query_args *a, isn_grpc_tls *tls, char *err, size_t err_len) {
    uint64_t give_up = isn_now_ns() + (uint64_t)a->wait_ready_s * 1000000000ull;
    for (;;) {
        isn_grpc_client *c = isn_grpc_connect_tls(a->server, 5000, tls, a->tls_server_name, err, err_len);
        int serving = 0;
        if (c && (!a->wait_ready_s || (isn_grpc_health_check(c, "", &serving, err, err_len) == 0 && serving == 1)))
            return c;
        if (c) {
            isn_grpc_close(c);
            if (!serving) serving = 2;
            if (serving != 1) snprintf(err, err_len, "not SERVING");
        }
        if (isn_now_ns() >= give_up) {
            if (a->wait_ready_s) {
                char why[ISN_ERR_LEN];
                snprintf(why, sizeof why, "%s", err);
                snprintf(err, err_len, "not ready within %u s (%.200s)", a->wait_ready_s, why);
            }
            return NULL;
        }
        struct timespec pause = {0, 50 * 1000000L};
        nanosleep(&pause, NULL);
    }
}

static int run_server(const query_args *a, const isn_query_log *queries) {
    char err[ISN_ERR_LEN];
    isn_grpc_tls *tls = NULL;
    if (a->tls_ca) {
        isn_grpc_tls_config config = {.ca_file = a->tls_ca, .cert_file = a->tls_cert, .key_file = a->tls_key};
        if (!(tls = isn_grpc_tls_client_new(&config, err, sizeof err))) {
            fprintf(stderr, "isn-query: %s\n", err);
            return 2;
        }
    }
    isn_grpc_client *c = connect_ready(a, tls, err, sizeof err);
    if (!c) {
        fprintf(stderr, "isn-query: %s: %s\n", a->server, err);
        isn_grpc_tls_free(tls);
        return 1;
    }
    FILE *out = a->out_path ? fopen(a->out_path, "w") : stdout;
    if (!out) {
        perror(a->out_path);
        isn_grpc_close(c);
        isn_grpc_tls_free(tls);
        return 1;
    }
    int rc = 0;
    char last_generation[sizeof ((isn_grpc_search_reply *)0)->generation] = "";
    for (size_t q = 0; q < queries->count; q++) {
        const isn_logged_query *query = &queries->queries[q];
        isn_grpc_search_reply r;
        if (search_remote(c, a, query->text, &r, err, sizeof err) != 0) {
            query_error(a, query, err);
            rc = 1;
            continue;
        }
        uint32_t n = r.num_hits < a->search.k ? r.num_hits : a->search.k;
        if (a->queries_path && a->show_device) fprintf(stderr, "# query %s: device %s\n", query->id, r.device);
        /* coverage: an aggregator names its partitions; one ISN is its own one partition */
        char coverage[64] = "";
        if (r.partitions_total)
            snprintf(coverage, sizeof coverage, ", coverage %u/%u partitions", r.partitions_answered, r.partitions_total);
        if (!a->queries_path) {
            printf("# %u hits (%s%s, %u terms, %u unknown, %llu postings scored%s%s)\n", n,
                   r.algorithm_used[0] ? "algorithm " : "algorithm not reported", r.algorithm_used, r.num_terms,
                   r.num_unknown_terms, (unsigned long long)r.postings_scored, a->ranker_path ? "; re-ranked by " : "",
                   a->ranker_path ? a->ranker_path : "");
            if (r.complete) printf("# complete%s\n", coverage);
            else printf("# INCOMPLETE (%s)%s\n", r.incomplete_reason[0] ? r.incomplete_reason : "no reason given", coverage);
            if (a->show_device) printf("# device %s\n", r.device);
        }
        /* An isnd names its index generation (an aggregator does not: its partitions may differ);
         * with --queries, on stderr when it changes (a swap during the run). */
        if (r.generation[0] && (!a->queries_path || strcmp(r.generation, last_generation))) {
            char generation[96];
            format_generation(&r, generation, sizeof generation);
            if (a->queries_path) fprintf(stderr, "# query %s on: index generation %s\n", query->id, generation);
            else printf("# index generation %s\n", generation);
            snprintf(last_generation, sizeof last_generation, "%s", r.generation);
        }
        if (!r.complete) {
            char why[256];
            snprintf(why, sizeof why, "incomplete answer (%s%s)%s",
                     r.incomplete_reason[0] ? r.incomplete_reason : "no reason given", coverage,
                     a->require_complete ? "" : "; its hits are printed (--require-complete makes this an error)");
            query_error(a, query, why);
            if (a->require_complete && rc == 0) rc = 3;
        }
        for (uint32_t i = 0; i < n; i++) {
            print_hit(out, a, query->id, i + 1, r.hits[i].score, r.hits[i].external_id, strlen(r.hits[i].external_id),
                      r.hits[i].doc, r.partitions_total ? (int)r.hits[i].partition : -1);
            for (uint32_t j = 0; j < r.hits[i].num_fields; j++)
                print_field(r.hits[i].fields[j].name, r.hits[i].fields[j].value, strlen(r.hits[i].fields[j].value));
        }
        isn_grpc_search_reply_free(&r);
    }
    if (out != stdout) fclose(out);
    isn_grpc_close(c);
    isn_grpc_tls_free(tls);
    return rc;
}

static int run_local(isn_searcher *s, const isn_index *ix, const query_args *a, const isn_query_log *queries,
                     isn_hit *hits) {
    FILE *out = a->out_path ? fopen(a->out_path, "w") : stdout;
    if (!out) {
        perror(a->out_path);
        return 1;
    }
    int rc = 0;
    for (size_t q = 0; q < queries->count; q++) {
        const isn_logged_query *query = &queries->queries[q];
        isn_query parsed;
        isn_search_stats st;
        uint32_t n;
        char err[ISN_ERR_LEN];
        if (isn_query_parse_syntax(s, query->text, strlen(query->text), a->filters, a->num_filters, &parsed, err,
                                   sizeof err) != 0 ||
            isn_search(s, &parsed, &a->search, hits, &n, &st, err, sizeof err) != 0) {
            query_error(a, query, err);
            rc = 1;
            continue;
        }
        if (!a->queries_path)
            printf("# %u hits (algorithm %s, %u terms, %u unknown, %llu postings scored)\n", n,
                   isn_algo_name(st.algo_used), parsed.num_terms, parsed.num_unknown,
                   (unsigned long long)st.postings_scored);
        for (uint32_t i = 0; i < n; i++) {
            size_t len;
            const char *id = isn_index_doc_id(ix, hits[i].doc, &len);
            print_hit(out, a, query->id, i + 1, hits[i].score, id, len, hits[i].doc, -1);
            if (print_stored_local(ix, a, hits[i].doc) != 0) rc = 1;
        }
    }
    if (out != stdout && fclose(out) != 0) {
        perror(a->out_path);
        rc = 1;
    }
    return rc;
}

/* ------------------------------------------------------------------ second stage */

/* --list-features, --ranker (re-rank the best n1) and --dump-features (LETOR lines for training). */
static int run_l2(isn_index *ix, const query_args *a, const isn_query_log *queries) {
    const isn_index_info *info = isn_index_get_info(ix);
    uint32_t nf = isn_feature_count(info);
    char name[ISN_FEATURE_NAME_MAX + ISN_FIELD_NAME_MAX], err[ISN_ERR_LEN];
    if (a->list_features) {
        for (uint32_t f = 0; f < nf; f++) {
            isn_feature_name(info, f, name, sizeof name);
            printf("%u\t%s\n", f + 1, name);
        }
        isn_index_close(ix);
        return 0;
    }
    isn_ranker *ranker = NULL;
    if (a->ranker_path && !(ranker = isn_ranker_load(a->ranker_path, info, err, sizeof err))) {
        fprintf(stderr, "isn-query: %s\n", err);
        return 1;
    }
    isn_qrels qrels = {0};
    if (a->qrels_path && isn_qrels_read(a->qrels_path, &qrels, err, sizeof err) != 0) {
        fprintf(stderr, "isn-query: %s\n", err);
        isn_ranker_free(ranker);
        isn_index_close(ix);
        return 1;
    }
    isn_searcher *s = isn_searcher_new(ix);
    isn_l2_workspace *ws = isn_l2_workspace_new(ix);
    isn_search_options first = a->search;
    first.k = a->n1 > a->search.k ? a->n1 : a->search.k;
    isn_hit *hits = malloc(first.k * sizeof *hits);
    isn_l2_hit *l2 = malloc(first.k * sizeof *l2);
    uint32_t *docs = malloc(first.k * sizeof *docs);
    float *features = malloc((size_t)first.k * nf * sizeof *features);
    const char *out_path = a->dump_path ? a->dump_path : a->out_path;
    FILE *out = out_path ? fopen(out_path, "w") : stdout;
    int rc = 0;
    if (!s || !ws || !hits || !l2 || !docs || !features || !out) {
        fprintf(stderr, "isn-query: cannot set up the second stage (out of memory or a file cannot be opened)\n");
        rc = 1;
        goto done;
    }
    if (a->dump_path)
        for (uint32_t f = 0; f < nf; f++) {
            isn_feature_name(info, f, name, sizeof name);
            fprintf(out, "# feature %u %s\n", f + 1, name);
        }
    for (size_t qi = 0; rc == 0 && qi < queries->count; qi++) {
        const char *qid = queries->queries[qi].id, *qtext = queries->queries[qi].text;
        isn_query q;
        isn_search_stats st;
        uint32_t n, m;
        if (isn_query_parse_syntax(s, qtext, strlen(qtext), a->filters, a->num_filters, &q, err, sizeof err) != 0 ||
            isn_search(s, &q, &first, hits, &n, &st, err, sizeof err) != 0) {
            fprintf(stderr, "isn-query: query %s: %s\n", qid, err);
            rc = 1;
            break;
        }
        if (a->dump_path) {
            for (uint32_t i = 0; i < n; i++) docs[i] = hits[i].doc;
            if (isn_features_extract(ws, &q, first.num_docs, docs, n, features, err, sizeof err) != 0) {
                fprintf(stderr, "isn-query: query %s: %s\n", qid, err);
                rc = 1;
                break;
            }
            for (uint32_t i = 0; i < n; i++) {
                size_t len;
                const char *id = isn_index_doc_id(ix, docs[i], &len);
                fprintf(out, "%ld qid:%s", isn_qrels_relevance(&qrels, qid, id, len), qid);
                for (uint32_t f = 0; f < nf; f++) fprintf(out, " %u:%.9g", f + 1, features[(size_t)i * nf + f]);
                fprintf(out, " # %.*s\n", (int)len, id);
            }
            continue;
        }
        if (isn_rerank(ws, ranker, &q, first.num_docs, hits, n, a->search.k, NULL, NULL, l2, &m, err, sizeof err) != 0) {
            fprintf(stderr, "isn-query: query %s: %s\n", qid, err);
            rc = 1;
            break;
        }
        if (!a->queries_path) printf("# %u hits (ranker %s over %u first-stage candidates)\n", m, isn_ranker_name(ranker), n);
        for (uint32_t i = 0; i < m; i++) {
            size_t len;
            const char *id = isn_index_doc_id(ix, l2[i].doc, &len);
            if (a->queries_path)
                write_run_line(out, a, qid, id, len, i + 1, l2[i].score);
            else {
                printf("%u\t%.6f\t%.*s\t(doc %u, first stage %.6f)\n", i + 1, l2[i].score, (int)len, id, l2[i].doc,
                       l2[i].l1_score);
                if (print_stored_local(ix, a, l2[i].doc) != 0) rc = 1;
            }
        }
    }
done:
    if (out && out != stdout && fclose(out) != 0) {
        perror(out_path);
        rc = 1;
    }
    free(hits);
    free(l2);
    free(docs);
    free(features);
    isn_qrels_free(&qrels);
    isn_l2_workspace_free(ws);
    isn_searcher_free(s);
    isn_ranker_free(ranker);
    isn_index_close(ix);
    return rc;
}

static int run(query_args *a, const isn_query_log *queries) {
    if (a->server) return run_server(a, queries);
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(a->index_dir, err, sizeof err);
    if (!ix) {
        fprintf(stderr, "isn-query: %s\n", err);
        return 1;
    }
    if (resolve_stored(ix, a) != 0) {
        isn_index_close(ix);
        return 1;
    }
    if (a->list_features || a->ranker_path || a->dump_path) {
        int rc = run_l2(ix, a, queries);
        free(a->stored_scratch);
        return rc;
    }
    isn_searcher *s = isn_searcher_new(ix);
    isn_hit *hits = malloc(a->search.k * sizeof *hits);
    if (!s || !hits) {
        fprintf(stderr, "isn-query: out of memory\n");
        return 1;
    }
    int rc = run_local(s, ix, a, queries, hits);
    free(a->stored_scratch);
    free(hits);
    isn_searcher_free(s);
    isn_index_close(ix);
    return rc;
}

int main(int argc, char **argv) {
    query_args a;
    const char *text;
    if (parse_args(argc, argv, &a, &text) != 0) return 2;
    /* The queries to run: the --queries file ("id TAB text" lines), or the one text given (id "1"). */
    isn_logged_query one = {.id = "1", .text = (char *)text, .line = 1};
    isn_query_log queries = {.queries = &one, .count = text ? 1 : 0};
    char err[ISN_ERR_LEN];
    if (a.queries_path && isn_query_log_read(a.queries_path, false, 0, &queries, err, sizeof err) != 0) {
        fprintf(stderr, "isn-query: %s\n", err);
        return 1;
    }
    if (queries.skipped)
        fprintf(stderr, "isn-query: %s:%zu: no TAB between query id and text (skipped; %zu such lines in all)\n",
                a.queries_path, queries.first_skipped_line, queries.skipped);
    int rc = run(&a, &queries);
    if (a.queries_path) isn_query_log_free(&queries);
    return rc;
}
