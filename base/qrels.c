/* TREC relevance judgements ("query_id iteration doc_id relevance" lines): see base.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int isn_qrels_read(const char *path, isn_qrels *qrels, char *err, size_t err_len) {
    memset(qrels, 0, sizeof *qrels);
    FILE *f = fopen(path, "r");
    if (!f) return isn_error(err, err_len, "cannot open qrels %s: %s", path, strerror(errno));
    char *line = NULL, query_id[256], iteration[64], doc_id[256];
    size_t line_cap = 0, cap = 0, line_no = 0;
    int relevance, rc = 0;
    while (getline(&line, &line_cap, f) >= 0) {
        line_no++;
        int n = sscanf(line, "%255s %63s %255s %d", query_id, iteration, doc_id, &relevance);
        if (n == EOF) continue; /* blank line */
        if (n != 4) {
            rc = isn_error(err, err_len, "%s:%zu: expected query_id iteration doc_id relevance", path, line_no);
            break;
        }
        if (qrels->count == cap) {
            cap = cap ? cap * 2 : 1024;
            isn_judgement *grown = realloc(qrels->judgements, cap * sizeof *grown);
            if (!grown) {
                rc = isn_error(err, err_len, "%s: out of memory", path);
                break;
            }
            qrels->judgements = grown;
        }
        isn_judgement *j = &qrels->judgements[qrels->count];
        j->query_id = strdup(query_id);
        j->doc_id = strdup(doc_id);
        j->relevance = relevance;
        if (!j->query_id || !j->doc_id) {
            free(j->query_id);
            free(j->doc_id);
            rc = isn_error(err, err_len, "%s: out of memory", path);
            break;
        }
        qrels->count++;
    }
    free(line);
    fclose(f);
    if (rc != 0) isn_qrels_free(qrels);
    return rc;
}

int isn_qrels_relevance(const isn_qrels *qrels, const char *query_id, const char *doc_id, size_t doc_id_len) {
    for (size_t i = 0; i < qrels->count; i++) {
        const isn_judgement *j = &qrels->judgements[i];
        if (!strcmp(j->query_id, query_id) && strlen(j->doc_id) == doc_id_len && !memcmp(j->doc_id, doc_id, doc_id_len))
            return j->relevance;
    }
    return 0;
}

void isn_qrels_free(isn_qrels *qrels) {
    for (size_t i = 0; i < qrels->count; i++) {
        free(qrels->judgements[i].query_id);
        free(qrels->judgements[i].doc_id);
    }
    free(qrels->judgements);
    memset(qrels, 0, sizeof *qrels);
}
