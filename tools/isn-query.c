/* isn-query: run queries against an index directory (in process) and print hits or a TREC run. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"
#include "ranking/ranking.h"
#include "grpc/grpc.h"

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
} query_args;

static void usage(FILE *out) {
    fputs("usage: isn-query --index DIR | --server HOST:PORT [options] \"query text\"\n"
          "       isn-query --index DIR | --server HOST:PORT --queries FILE.tsv [--run-tag T] [--out RUN] [options]\n"
          "  --server HOST:PORT  ask a running isnd over gRPC instead of opening the index\n"
          "  --algo auto|or|and|maxscore|wand|bmw|bmand   first-stage algorithm (default auto)\n"
          "  --mode or|and       match any / every term when --algo is auto (default or)\n"
          "  -k N                hits to return (default 10)\n"
          "  --queries FILE.tsv  qid<TAB>text per line; writes a TREC run (qid Q0 docid rank score tag)\n"
          "  --run-tag T         the run's tag (default isn)\n"
          "  --out FILE          write the run there instead of stdout\n"
          "  --ranker FILE       re-rank the first stage's best --n1 with this ranker (second stage); with\n"
          "                      --server, the name of a ranker the server loaded\n"
          "  --n1 N              first-stage candidates for --ranker / --dump-features (default 100)\n"
          "  --dump-features OUT with --queries: write LETOR/SVMrank lines (rel qid:Q 1:v ... # docid) for the\n"
          "                      best --n1 of each query; relevance from --qrels FILE (else 0); feature names\n"
          "                      in '# feature N NAME' header lines\n"
          "  --list-features     print the index's feature names and exit\n"
          "  --show-device       with --server: print the device that answered (cpu, gpu, cpu+gpu-l2...)\n",
          out);
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
                                         {"show-device", 0, 0, 'V'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "k:", opts, NULL)) != -1) {
        char *end;
        unsigned long k;
        switch (c) {
        case 'i': a->index_dir = optarg; break;
        case 's': a->server = optarg; break;
        case 'a':
            if (!isn_algo_from_name(optarg, &a->search.algo)) {
                fprintf(stderr, "isn-query: unknown --algo '%s' (auto, or, and, maxscore, wand, bmw, bmand)\n", optarg);
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
            k = strtoul(optarg, &end, 10);
            if (*end || k < 1 || k > ISN_MAX_K) {
                fprintf(stderr, "isn-query: -k must be 1..%d, got '%s'\n", ISN_MAX_K, optarg);
                return -1;
            }
            a->search.k = (uint32_t)k;
            break;
        case 'q': a->queries_path = optarg; break;
        case 't': a->run_tag = optarg; break;
        case 'o': a->out_path = optarg; break;
        case 'R': a->ranker_path = optarg; break;
        case 'V': a->show_device = true; break;
        case 'D': a->dump_path = optarg; break;
        case 'Q': a->qrels_path = optarg; break;
        case 'L': a->list_features = true; break;
        case 'N':
            k = strtoul(optarg, &end, 10);
            if (*end || k < 1 || k > ISN_MAX_K) {
                fprintf(stderr, "isn-query: --n1 must be 1..%d, got '%s'\n", ISN_MAX_K, optarg);
                return -1;
            }
            a->n1 = (uint32_t)k;
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
    if (!a->index_dir == !a->server) {
        fprintf(stderr, "isn-query: give exactly one of --index DIR and --server HOST:PORT\n");
        return -1;
    }
    *text = optind < argc ? argv[optind] : NULL;
    if ((a->dump_path || a->list_features) && !a->index_dir) {
        fprintf(stderr, "isn-query: --dump-features and --list-features need --index\n");
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
typedef struct {
    uint32_t n;
    char **ids;
    isn_hit *hits;
    char algo[16], device[16];
    uint32_t num_terms, num_unknown;
    uint64_t postings;
} remote_hits;

static int search_remote(isn_grpc_client *c, const query_args *a, const char *text, remote_hits *out, char *err,
                         size_t err_len) {
    isn_grpc_search_request rq = {.query = text, .k = a->search.k, .debug = true,
                                  .mode = a->search.mode == ISN_MODE_AND ? ISN_GRPC_MODE_AND : ISN_GRPC_MODE_OR,
                                  .algorithm = isn_algo_name(a->search.algo)};
    rq.ranker = a->ranker_path; /* --server: a ranker name */
    rq.n1 = a->ranker_path ? a->n1 : 0;
    isn_grpc_search_reply reply;
    if (isn_grpc_search(c, &rq, &reply, err, err_len) != 0) return -1;
    if (reply.status != 0) {
        snprintf(err, err_len, "server answered status %d: %.200s", reply.status, reply.message);
        isn_grpc_search_reply_free(&reply);
        return -1;
    }
    out->n = reply.num_hits < a->search.k ? reply.num_hits : a->search.k;
    for (uint32_t i = 0; i < out->n; i++) {
        out->hits[i].doc = reply.hits[i].doc;
        out->hits[i].score = reply.hits[i].score;
        out->ids[i] = strdup(reply.hits[i].external_id ? reply.hits[i].external_id : "");
    }
    snprintf(out->algo, sizeof out->algo, "%s", reply.algorithm_used);
    snprintf(out->device, sizeof out->device, "%s", reply.device);
    out->num_terms = reply.num_terms;
    out->num_unknown = reply.num_unknown_terms;
    out->postings = reply.postings_scored;
    isn_grpc_search_reply_free(&reply);
    return 0;
}

static void free_remote(remote_hits *r) {
    for (uint32_t i = 0; i < r->n; i++) free(r->ids[i]);
    r->n = 0;
}

static int run_server(const query_args *a, const char *text) {
    char err[ISN_ERR_LEN];
    isn_grpc_client *c = isn_grpc_connect(a->server, 5000, err, sizeof err);
    if (!c) {
        fprintf(stderr, "isn-query: %s: %s\n", a->server, err);
        return 1;
    }
    remote_hits r = {.ids = calloc(a->search.k, sizeof(char *)), .hits = calloc(a->search.k, sizeof(isn_hit))};
    int rc = 0;
    FILE *in = a->queries_path ? fopen(a->queries_path, "r") : NULL;
    FILE *out = a->out_path ? fopen(a->out_path, "w") : stdout;
    if ((a->queries_path && !in) || !out || !r.ids || !r.hits) {
        perror(a->queries_path && !in ? a->queries_path : "isn-query");
        rc = 1;
    } else if (!in) {
        if (search_remote(c, a, text, &r, err, sizeof err) != 0) {
            fprintf(stderr, "isn-query: %s\n", err);
            rc = 1;
        } else {
            printf("# %u hits (algorithm %s, %u terms, %u unknown, %llu postings scored)\n", r.n, r.algo, r.num_terms,
                   r.num_unknown, (unsigned long long)r.postings);
            if (a->show_device) printf("# device %s\n", r.device);
            for (uint32_t i = 0; i < r.n; i++) printf("%u\t%.6f\t%s\t(doc %u)\n", i + 1, r.hits[i].score, r.ids[i], r.hits[i].doc);
        }
        free_remote(&r);
    } else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t got;
        unsigned long lineno = 0;
        while ((got = getline(&line, &cap, in)) >= 0) {
            lineno++;
            while (got && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
            char *tab = got ? strchr(line, '\t') : NULL;
            if (!tab) {
                if (got) fprintf(stderr, "isn-query: %s:%lu: no TAB between query id and text (skipped)\n", a->queries_path, lineno);
                continue;
            }
            *tab = 0;
            if (search_remote(c, a, tab + 1, &r, err, sizeof err) != 0) {
                fprintf(stderr, "isn-query: %s:%lu: %s\n", a->queries_path, lineno, err);
                rc = 1;
                continue;
            }
            for (uint32_t i = 0; i < r.n; i++)
                fprintf(out, "%s Q0 %s %u %.6f %s\n", line, r.ids[i], i + 1, r.hits[i].score, a->run_tag);
            if (a->show_device) fprintf(stderr, "# query %s: device %s\n", line, r.device);
            free_remote(&r);
        }
        free(line);
    }
    if (in) fclose(in);
    if (out && out != stdout) fclose(out);
    free(r.ids);
    free(r.hits);
    isn_grpc_close(c);
    return rc;
}

static int run_one(isn_searcher *s, const isn_index *ix, const query_args *a, const char *text, isn_hit *hits) {
    isn_query q;
    isn_search_stats st;
    uint32_t n;
    char err[ISN_ERR_LEN];
    if (isn_query_parse(s, text, strlen(text), &q, err, sizeof err) != 0 ||
        isn_search(s, &q, &a->search, hits, &n, &st, err, sizeof err) != 0) {
        fprintf(stderr, "isn-query: %s\n", err);
        return 1;
    }
    printf("# %u hits (algorithm %s, %u terms, %u unknown, %llu postings scored)\n", n, isn_algo_name(st.algo_used),
           q.num_terms, q.num_unknown, (unsigned long long)st.postings_scored);
    for (uint32_t i = 0; i < n; i++) {
        size_t len;
        const char *id = isn_index_doc_id(ix, hits[i].doc, &len);
        printf("%u\t%.6f\t%.*s\t(doc %u)\n", i + 1, hits[i].score, (int)len, id, hits[i].doc);
    }
    return 0;
}

static int run_file(isn_searcher *s, const isn_index *ix, const query_args *a, isn_hit *hits) {
    FILE *in = fopen(a->queries_path, "r");
    if (!in) {
        perror(a->queries_path);
        return 1;
    }
    FILE *out = a->out_path ? fopen(a->out_path, "w") : stdout;
    if (!out) {
        perror(a->out_path);
        fclose(in);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    unsigned long lineno = 0;
    int rc = 0;
    while ((got = getline(&line, &cap, in)) >= 0) {
        lineno++;
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (got == 0) continue;
        char *tab = strchr(line, '\t');
        if (!tab) {
            fprintf(stderr, "isn-query: %s:%lu: no TAB between query id and text (skipped)\n", a->queries_path, lineno);
            continue;
        }
        *tab = 0;
        const char *text = tab + 1;
        isn_query q;
        isn_search_stats st;
        uint32_t n;
        char err[ISN_ERR_LEN];
        if (isn_query_parse(s, text, strlen(text), &q, err, sizeof err) != 0 ||
            isn_search(s, &q, &a->search, hits, &n, &st, err, sizeof err) != 0) {
            fprintf(stderr, "isn-query: %s:%lu: %s\n", a->queries_path, lineno, err);
            rc = 1;
            continue;
        }
        for (uint32_t i = 0; i < n; i++) {
            size_t len;
            const char *id = isn_index_doc_id(ix, hits[i].doc, &len);
            fprintf(out, "%s Q0 %.*s %u %.6f %s\n", line, (int)len, id, i + 1, hits[i].score, a->run_tag);
        }
    }
    free(line);
    fclose(in);
    if (out != stdout && fclose(out) != 0) {
        perror(a->out_path);
        rc = 1;
    }
    return rc;
}

/* ------------------------------------------------------------------ second stage */

typedef struct {
    char qid[64];
    char doc[256];
    int rel;
} qrel_line;

static qrel_line *load_qrels(const char *path, size_t *count) {
    FILE *in = fopen(path, "r");
    if (!in) {
        perror(path);
        return NULL;
    }
    qrel_line *q = NULL;
    size_t n = 0, cap = 0;
    char qid[64], doc[256], iter[32];
    int rel;
    while (fscanf(in, "%63s %31s %255s %d", qid, iter, doc, &rel) == 4) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            qrel_line *grown = realloc(q, cap * sizeof *q);
            if (!grown) break;
            q = grown;
        }
        snprintf(q[n].qid, sizeof q[n].qid, "%s", qid);
        snprintf(q[n].doc, sizeof q[n].doc, "%s", doc);
        q[n++].rel = rel;
    }
    fclose(in);
    *count = n;
    return q;
}

static int relevance(const qrel_line *q, size_t n, const char *qid, const char *doc, size_t doc_len) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(q[i].qid, qid) == 0 && strlen(q[i].doc) == doc_len && memcmp(q[i].doc, doc, doc_len) == 0)
            return q[i].rel;
    return 0;
}

/* --list-features, --ranker (re-rank the best n1) and --dump-features (LETOR lines for training). */
static int run_l2(isn_index *ix, const query_args *a, const char *text) {
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
    size_t num_qrels = 0;
    qrel_line *qrels = a->qrels_path ? load_qrels(a->qrels_path, &num_qrels) : NULL;
    isn_searcher *s = isn_searcher_new(ix);
    isn_l2_workspace *ws = isn_l2_workspace_new(ix);
    isn_search_options first = a->search;
    first.k = a->n1 > a->search.k ? a->n1 : a->search.k;
    isn_hit *hits = malloc(first.k * sizeof *hits);
    isn_l2_hit *l2 = malloc(first.k * sizeof *l2);
    uint32_t *docs = malloc(first.k * sizeof *docs);
    float *features = malloc((size_t)first.k * nf * sizeof *features);
    FILE *in = a->queries_path ? fopen(a->queries_path, "r") : NULL;
    const char *out_path = a->dump_path ? a->dump_path : a->out_path;
    FILE *out = out_path ? fopen(out_path, "w") : stdout;
    int rc = 0;
    if (!s || !ws || !hits || !l2 || !docs || !features || (a->qrels_path && !qrels) || (a->queries_path && !in) || !out) {
        fprintf(stderr, "isn-query: cannot set up the second stage (out of memory or a file cannot be opened)\n");
        rc = 1;
        goto done;
    }
    if (a->dump_path)
        for (uint32_t f = 0; f < nf; f++) {
            isn_feature_name(info, f, name, sizeof name);
            fprintf(out, "# feature %u %s\n", f + 1, name);
        }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    unsigned long lineno = 0;
    while (rc == 0 && (in ? (got = getline(&line, &cap, in)) >= 0 : lineno == 0)) {
        lineno++;
        const char *qid = "1", *qtext = text;
        if (in) {
            while (got && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
            char *tab = got ? strchr(line, '\t') : NULL;
            if (!tab) continue;
            *tab = 0;
            qid = line;
            qtext = tab + 1;
        }
        isn_query q;
        isn_search_stats st;
        uint32_t n, m;
        if (isn_query_parse(s, qtext, strlen(qtext), &q, err, sizeof err) != 0 ||
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
                fprintf(out, "%d qid:%s", qrels ? relevance(qrels, num_qrels, qid, id, len) : 0, qid);
                for (uint32_t f = 0; f < nf; f++) fprintf(out, " %u:%.9g", f + 1, features[(size_t)i * nf + f]);
                fprintf(out, " # %.*s\n", (int)len, id);
            }
            continue;
        }
        if (isn_rerank(ws, ranker, &q, first.num_docs, hits, n, a->search.k, l2, &m, err, sizeof err) != 0) {
            fprintf(stderr, "isn-query: query %s: %s\n", qid, err);
            rc = 1;
            break;
        }
        if (!in) printf("# %u hits (ranker %s over %u first-stage candidates)\n", m, isn_ranker_name(ranker), n);
        for (uint32_t i = 0; i < m; i++) {
            size_t len;
            const char *id = isn_index_doc_id(ix, l2[i].doc, &len);
            if (in)
                fprintf(out, "%s Q0 %.*s %u %.6f %s\n", qid, (int)len, id, i + 1, l2[i].score, a->run_tag);
            else
                printf("%u\t%.6f\t%.*s\t(doc %u, first stage %.6f)\n", i + 1, l2[i].score, (int)len, id, l2[i].doc,
                       l2[i].l1_score);
        }
    }
    free(line);
done:
    if (in) fclose(in);
    if (out && out != stdout && fclose(out) != 0) {
        perror(out_path);
        rc = 1;
    }
    free(hits);
    free(l2);
    free(docs);
    free(features);
    free(qrels);
    isn_l2_workspace_free(ws);
    isn_searcher_free(s);
    isn_ranker_free(ranker);
    isn_index_close(ix);
    return rc;
}

int main(int argc, char **argv) {
    query_args a;
    const char *text;
    if (parse_args(argc, argv, &a, &text) != 0) return 2;
    if (a.server) return run_server(&a, text);
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(a.index_dir, err, sizeof err);
    if (!ix) {
        fprintf(stderr, "isn-query: %s\n", err);
        return 1;
    }
    if (a.list_features || a.ranker_path || a.dump_path)
        return run_l2(ix, &a, text);
    isn_searcher *s = isn_searcher_new(ix);
    isn_hit *hits = malloc(a.search.k * sizeof *hits);
    if (!s || !hits) {
        fprintf(stderr, "isn-query: out of memory\n");
        return 1;
    }
    int rc = a.queries_path ? run_file(s, ix, &a, hits) : run_one(s, ix, &a, text, hits);
    free(hits);
    isn_searcher_free(s);
    isn_index_close(ix);
    return rc;
}
