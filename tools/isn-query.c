/* isn-query: run queries against an index directory (in process) and print hits or a TREC run. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"
#include "ranking/ranking.h"
#include "tools/grpc_client.h"

typedef struct {
    const char *index_dir;
    const char *server; /* HOST:PORT of an isnd; NULL = search the index in process */
    const char *queries_path;
    const char *run_tag;
    const char *out_path;
    isn_search_options search;
    bool explicit_mode;
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
          "  --out FILE          write the run there instead of stdout\n",
          out);
}

static int parse_args(int argc, char **argv, query_args *a, const char **text) {
    memset(a, 0, sizeof *a);
    isn_search_options_default(&a->search);
    a->run_tag = "isn";
    static const struct option opts[] = {{"index", 1, 0, 'i'}, {"server", 1, 0, 's'}, {"algo", 1, 0, 'a'}, {"mode", 1, 0, 'm'},
                                         {"queries", 1, 0, 'q'}, {"run-tag", 1, 0, 't'}, {"out", 1, 0, 'o'},
                                         {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
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
    char algo[16];
    uint32_t num_terms, num_unknown;
    uint64_t postings;
} remote_hits;

static int search_remote(isn_grpc_client *c, const query_args *a, const char *text, remote_hits *out, char *err,
                         size_t err_len) {
    isn_grpc_search_request rq = {.query = text, .k = a->search.k, .debug = true,
                                  .mode = a->search.mode == ISN_MODE_AND ? ISN_GRPC_MODE_AND : ISN_GRPC_MODE_OR,
                                  .algorithm = isn_algo_name(a->search.algo)};
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
