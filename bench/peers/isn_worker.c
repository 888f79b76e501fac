/* ISN worker for bench/peers/driver.py: the first stage in-process, one query at a time, each timed
 * from the query text to the sorted hits (isn_query_parse + isn_search), as a peer's call is timed
 * from the text to its top-k.
 *   isn_worker INDEX_DIR [algorithm]     (default auto)
 * Line protocol on stdin/stdout, shared with the peers' workers:
 *   load NAME PATH   read a query log (id TAB text)        -> "ok N"
 *   run NAME K       every query once, in order            -> "ns T1 T2 ..."
 *   empty N          N queries that match nothing (k=10)   -> "ns ..."
 *   top NAME K       external ids of each query's hits     -> "top" then per query a TAB and its ids
 *                    separated by 0x1f ("-" for none): ids may hold spaces and commas
 *   quit */
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
} named_log;

static named_log logs[MAX_LOGS];
static size_t num_logs;

static isn_query_log *find_log(const char *name) {
    for (size_t i = 0; i < num_logs; i++)
        if (strcmp(logs[i].name, name) == 0) return &logs[i].log;
    return NULL;
}

static int search_text(isn_searcher *s, const isn_search_options *base, uint32_t k, const char *text, isn_hit *hits,
                       uint32_t *n) {
    char err[ISN_ERR_LEN];
    isn_query q;
    isn_search_options o = *base;
    o.k = k;
    isn_search_stats st;
    if (isn_query_parse(s, text, strlen(text), &q, err, sizeof err) != 0 ||
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
        if (strcmp(cmd, "load") == 0 && a1 && a2 && num_logs < MAX_LOGS) {
            named_log *l = &logs[num_logs];
            snprintf(l->name, sizeof l->name, "%s", a1);
            if (isn_query_log_read(a2, false, 0, &l->log, err, sizeof err) != 0) {
                printf("error %s\n", err);
            } else {
                num_logs++;
                printf("ok %zu\n", l->log.count);
            }
        } else if ((strcmp(cmd, "run") == 0 || strcmp(cmd, "top") == 0) && a1 && a2 && find_log(a1)) {
            isn_query_log *log = find_log(a1);
            uint32_t k = (uint32_t)strtoul(a2, NULL, 10);
            bool top = cmd[0] == 't';
            fputs(top ? "top" : "ns", stdout);
            for (size_t i = 0; i < log->count; i++) {
                uint32_t n = 0;
                uint64_t t0 = isn_now_ns();
                if (search_text(s, &base, k, log->queries[i].text, hits, &n) != 0) return 1;
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
        } else if (strcmp(cmd, "empty") == 0 && a1) {
            unsigned long reps = strtoul(a1, NULL, 10);
            fputs("ns", stdout);
            for (unsigned long i = 0; i < reps; i++) {
                uint32_t n = 0;
                uint64_t t0 = isn_now_ns();
                if (search_text(s, &base, 10, "zzqqxxjjvv", hits, &n) != 0) return 1;
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
    isn_index_close(ix);
    for (size_t i = 0; i < num_logs; i++) isn_query_log_free(&logs[i].log);
    return 0;
}
