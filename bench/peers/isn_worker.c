/* ISN worker for bench/peers/driver.py: the first stage in-process, one query at a time, each timed
 * from the query text to the sorted hits (isn_query_parse + isn_search), as a peer's call is timed
 * from the text to its top-k.
 *   isn_worker INDEX_DIR [algorithm]     (default auto)
 * Line protocol on stdin/stdout, shared with the peers' workers:
 *   load NAME PATH   read a query log (id TAB text)        -> "ok N"
 *   load-tree NAME PATH   a log of query trees: id TAB text in the query syntax [TAB filter], the
 *                    filter as isn-query --filter takes it ("section in {a,b}", "words>=5")
 *   run NAME K       every query once, in order            -> "ns T1 T2 ..."
 *   empty N          N queries that match nothing (k=10)   -> "ns ..."
 *   top NAME K       external ids of each query's hits     -> "top" then per query a TAB and its ids
 *                    separated by 0x1f ("-" for none): ids may hold spaces and commas
 *   count NAME       each query's matching documents (the exhaustive algorithm) -> "count N1 N2 ..."
 *   quit */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "index/index.h"
#include "ranking/ranking.h"

#define MAX_LOGS 8

typedef struct {
    char name[64];
    isn_query_log log;
    bool tree; /* the query syntax and a filter per query (load-tree); else the bag of words */
    isn_filter_spec *filters; /* per query; num_values 0 = none */
    const char *(*filter_values)[16];
} named_log;

static named_log logs[MAX_LOGS];
static size_t num_logs;

static named_log *find_log(const char *name) {
    for (size_t i = 0; i < num_logs; i++)
        if (strcmp(logs[i].name, name) == 0) return &logs[i];
    return NULL;
}

/* A tree log's filters, split off the texts once. 0, or -1 with the line at fault on stdout. */
static int split_filters(named_log *l) {
    l->filters = calloc(l->log.count ? l->log.count : 1, sizeof *l->filters);
    l->filter_values = calloc(l->log.count ? l->log.count : 1, sizeof *l->filter_values);
    if (!l->filters || !l->filter_values) return -1;
    for (size_t i = 0; i < l->log.count; i++) {
        char *tab = strchr(l->log.queries[i].text, '\t');
        if (!tab) continue;
        *tab = '\0';
        if (tab[1] && isn_filter_parse(tab + 1, &l->filters[i], l->filter_values[i], 16) != 0) {
            printf("error line %zu: bad filter\n", l->log.queries[i].line);
            return -1;
        }
    }
    return 0;
}

static int search_text(isn_searcher *s, const isn_search_options *base, uint32_t k, const char *text,
                       const isn_filter_spec *filter, isn_hit *hits, uint32_t *n) {
    char err[ISN_ERR_LEN];
    isn_query q;
    isn_search_options o = *base;
    o.k = k;
    isn_search_stats st;
    int parsed = filter ? isn_query_parse_syntax(s, text, strlen(text), filter, filter->num_values > 0, &q, err, sizeof err)
                        : isn_query_parse(s, text, strlen(text), &q, err, sizeof err);
    if (parsed != 0 ||
        isn_search(s, &q, &o, hits, n, &st, err, sizeof err) != 0) {
        fprintf(stderr, "isn_worker: %s\n", err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: isn_worker INDEX_DIR [algorithm]\n");
        return 2;
    }
    char err[ISN_ERR_LEN];
    isn_index *ix = isn_index_open(argv[1], err, sizeof err);
    if (!ix) {
        fprintf(stderr, "isn_worker: %s\n", err);
        return 1;
    }
    isn_search_options base;
    isn_search_options_default(&base);
    if (argc > 2 && !isn_algo_from_name(argv[2], &base.algo)) {
        fprintf(stderr, "isn_worker: unknown algorithm %s\n", argv[2]);
        return 2;
    }
    /* ISN_WORKER_LENGTHS=FILE (id TAB length per document, in doc order: LuceneTreeWorker lengths): score
     * with these lengths and Lucene's collection statistics (documents with a length, their average),
     * to measure what Lucene's one-byte length norms change. Such searches score exhaustively. */
    float *lucene_norms = NULL;
    const char *lengths_path = getenv("ISN_WORKER_LENGTHS");
    if (lengths_path) {
        const isn_index_info *info = isn_index_get_info(ix);
        FILE *f = fopen(lengths_path, "r");
        uint32_t *lengths = calloc(info->num_docs ? info->num_docs : 1, sizeof *lengths);
        lucene_norms = malloc((info->num_docs ? info->num_docs : 1) * sizeof *lucene_norms);
        if (!f || !lengths || !lucene_norms) {
            fprintf(stderr, "isn_worker: %s: cannot read\n", lengths_path);
            return 1;
        }
        char row[1024];
        uint32_t doc = 0, with = 0;
        while (doc < info->num_docs && fgets(row, sizeof row, f)) {
            char *tab = strrchr(row, '\t');
            size_t id_len;
            const char *id = isn_index_doc_id(ix, doc, &id_len);
            if (!tab || (size_t)(tab - row) != id_len || memcmp(row, id, id_len) != 0) {
                fprintf(stderr, "isn_worker: %s: line %u is not document %u\n", lengths_path, doc + 1, doc);
                return 1;
            }
            lengths[doc] = (uint32_t)strtoul(tab + 1, NULL, 10);
            with += lengths[doc] > 0;
            doc++;
        }
        fclose(f);
        float avg = (float)((double)info->total_doc_len / (with ? with : 1));
        for (uint32_t d = 0; d < info->num_docs; d++) lucene_norms[d] = isn_bm25_doc_norm(&info->bm25, lengths[d], avg);
        free(lengths);
        base.doc_norms = lucene_norms;
        base.num_docs = with;
    }
    isn_searcher *s = isn_searcher_new(ix);
    isn_hit *hits = malloc(ISN_MAX_K * sizeof *hits);
    size_t line_cap = 0;
    char *line = NULL;
    uint64_t sink = 0;
    printf("ready isn %s\n", isn_algo_name(base.algo));
    fflush(stdout);
    for (ssize_t len; (len = getline(&line, &line_cap, stdin)) > 0;) {
        if (line[len - 1] == '\n') line[len - 1] = 0;
        char *save = NULL, *cmd = strtok_r(line, " ", &save);
        if (!cmd || strcmp(cmd, "quit") == 0) break;
        char *a1 = strtok_r(NULL, " ", &save), *a2 = strtok_r(NULL, "", &save);
        if ((strcmp(cmd, "load") == 0 || strcmp(cmd, "load-tree") == 0) && a1 && a2 && num_logs < MAX_LOGS) {
            named_log *l = &logs[num_logs];
            snprintf(l->name, sizeof l->name, "%s", a1);
            l->tree = cmd[4] == '-';
            if (isn_query_log_read(a2, false, 0, &l->log, err, sizeof err) != 0) {
                printf("error %s\n", err);
            } else if (!l->tree || split_filters(l) == 0) {
                num_logs++;
                printf("ok %zu\n", l->log.count);
            }
        } else if ((strcmp(cmd, "run") == 0 || strcmp(cmd, "top") == 0) && a1 && a2 && find_log(a1)) {
            named_log *named = find_log(a1);
            isn_query_log *log = &named->log;
            uint32_t k = (uint32_t)strtoul(a2, NULL, 10);
            bool top = cmd[0] == 't';
            fputs(top ? "top" : "ns", stdout);
            for (size_t i = 0; i < log->count; i++) {
                uint32_t n = 0;
                uint64_t t0 = isn_now_ns();
                if (search_text(s, &base, k, log->queries[i].text, named->tree ? &named->filters[i] : NULL, hits, &n) != 0)
                    return 1;
                uint64_t t1 = isn_now_ns();
                sink += n;
                if (!top) {
                    printf(" %llu", (unsigned long long)(t1 - t0));
                    continue;
                }
                putchar('\t');
                if (n == 0) putchar('-');
                for (uint32_t j = 0; j < n; j++) {
                    size_t id_len;
                    const char *id = isn_index_doc_id(ix, hits[j].doc, &id_len);
                    printf("%s%.*s", j ? "\x1f" : "", (int)id_len, id);
                }
            }
            putchar('\n');
        } else if (strcmp(cmd, "count") == 0 && a1 && find_log(a1)) {
            named_log *named = find_log(a1);
            isn_search_options exhaustive = base;
            exhaustive.algo = ISN_ALGO_OR;
            fputs("count", stdout);
            for (size_t i = 0; i < named->log.count; i++) {
                const char *text = named->log.queries[i].text;
                const isn_filter_spec *filter = named->tree ? &named->filters[i] : NULL;
                isn_query q;
                isn_search_stats st;
                uint32_t n = 0;
                int parsed = filter ? isn_query_parse_syntax(s, text, strlen(text), filter, filter->num_values > 0, &q, err,
                                                             sizeof err)
                                    : isn_query_parse(s, text, strlen(text), &q, err, sizeof err);
                exhaustive.k = 1;
                if (parsed != 0 || isn_search(s, &q, &exhaustive, hits, &n, &st, err, sizeof err) != 0) return 1;
                printf(" %llu", (unsigned long long)st.matched_lower_bound);
            }
            putchar('\n');
        } else if (strcmp(cmd, "empty") == 0 && a1) {
            unsigned long reps = strtoul(a1, NULL, 10);
            fputs("ns", stdout);
            for (unsigned long i = 0; i < reps; i++) {
                uint32_t n = 0;
                uint64_t t0 = isn_now_ns();
                if (search_text(s, &base, 10, "zzqqxxjjvv", NULL, hits, &n) != 0) return 1;
                printf(" %llu", (unsigned long long)(isn_now_ns() - t0));
                sink += n;
            }
            putchar('\n');
        } else {
            printf("error bad command %s\n", cmd);
        }
        fflush(stdout);
    }
    if (sink == 42) fputc('\n', stderr);
    free(line);
    free(hits);
    isn_searcher_free(s);
    free(lucene_norms);
    isn_index_close(ix);
    for (size_t i = 0; i < num_logs; i++) {
        isn_query_log_free(&logs[i].log);
        free(logs[i].filters);
        free(logs[i].filter_values);
    }
    return 0;
}
