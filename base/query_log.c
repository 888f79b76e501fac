#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

/* One allocation per query: the id, a NUL where the TAB was, then the text. */
static int append(isn_query_log *log, size_t *cap, const char *line, size_t id_len, size_t line_no) {
    if (log->count == *cap) {
        size_t grown_cap = *cap ? *cap * 2 : 256;
        isn_logged_query *grown = realloc(log->queries, grown_cap * sizeof *grown);
        if (!grown) return -1;
        log->queries = grown;
        *cap = grown_cap;
    }
    char *copy = strdup(line);
    if (!copy) return -1;
    copy[id_len] = '\0';
    log->queries[log->count++] = (isn_logged_query){.id = copy, .text = copy + id_len + 1, .line = line_no};
    return 0;
}

int isn_query_log_read(const char *path, bool strict, size_t max, isn_query_log *log, char *err, size_t err_len) {
    memset(log, 0, sizeof *log);
    FILE *f = fopen(path, "r");
    if (!f) return isn_error(err, err_len, "cannot open query log %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t line_cap = 0, cap = 0, line_no = 0;
    ssize_t len;
    int rc = 0;
    while ((max == 0 || log->count < max) && (len = getline(&line, &line_cap, f)) >= 0) {
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        char *tab = strchr(line, '\t');
        if (!tab || !tab[1]) {
            if (strict) {
                rc = isn_error(err, err_len, "%s:%zu: expected query id<TAB>query text", path, line_no);
                break;
            }
            if (log->skipped++ == 0) log->first_skipped_line = line_no;
            continue;
        }
        if (append(log, &cap, line, (size_t)(tab - line), line_no) != 0) {
            rc = isn_error(err, err_len, "%s: out of memory after %zu queries", path, log->count);
            break;
        }
    }
    if (rc == 0 && ferror(f)) rc = isn_error(err, err_len, "cannot read query log %s: %s", path, strerror(errno));
    free(line);
    fclose(f);
    if (rc != 0) isn_query_log_free(log);
    return rc;
}

void isn_query_log_free(isn_query_log *log) {
    for (size_t i = 0; i < log->count; i++) free(log->queries[i].id); /* the text shares its allocation */
    free(log->queries);
    memset(log, 0, sizeof *log);
}
