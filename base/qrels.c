/* TREC relevance judgements ("query_id iteration doc_id relevance" lines): see base.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static int parse_relevance(char **fields, void *record, const isn_trec_file *file, char *err, size_t err_len) {
    isn_judgement *judgement = record;
    char *end;
    errno = 0;
    judgement->relevance = strtol(fields[3], &end, 10);
    if (end == fields[3] || *end != '\0' || errno != 0)
        return isn_error(err, err_len, "%s:%zu: relevance '%s' is not an integer", file->path, file->line, fields[3]);
    return 0;
}

int isn_qrels_read(const char *path, isn_qrels *qrels, char *err, size_t err_len) {
    memset(qrels, 0, sizeof *qrels);
    if (isn_trec_file_read(path, &qrels->file, err, err_len) != 0) return -1;
    void *records;
    int rc = isn_trec_read_records(&qrels->file, 4, "qid iter docid rel", sizeof(isn_judgement), parse_relevance,
                                   &records, &qrels->count, err, err_len);
    qrels->judgements = records;
    /* A pair judged twice before a malformed line is the first error in the file: it replaces err. */
    const isn_trec_key *first,
        *repeat = isn_trec_sort_find_repeat(qrels->judgements, qrels->count, sizeof *qrels->judgements, &first);
    if (repeat)
        rc = isn_error(err, err_len, "%s:%zu: docid '%s' of query '%s' is judged twice (first at line %zu)", path,
                       repeat->line, repeat->doc_id, repeat->query_id, first->line);
    if (rc != 0) isn_qrels_free(qrels);
    return rc;
}

/* Orders a stored doc id against one given by pointer and length as strcmp orders NUL-free strings. */
static int compare_doc_id(const char *stored, const char *doc_id, size_t doc_id_len) {
    size_t stored_len = strlen(stored);
    int order = memcmp(stored, doc_id, stored_len < doc_id_len ? stored_len : doc_id_len);
    if (order == 0) order = (stored_len > doc_id_len) - (stored_len < doc_id_len);
    return order;
}

long isn_qrels_relevance(const isn_qrels *qrels, const char *query_id, const char *doc_id, size_t doc_id_len) {
    size_t low = 0, high = qrels->count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        const isn_judgement *j = &qrels->judgements[middle];
        int order = strcmp(j->key.query_id, query_id);
        if (order == 0) order = compare_doc_id(j->key.doc_id, doc_id, doc_id_len);
        if (order == 0) return j->relevance;
        if (order < 0) low = middle + 1;
        else high = middle;
    }
    return 0;
}

void isn_qrels_free(isn_qrels *qrels) {
    free(qrels->judgements);
    isn_trec_file_free(&qrels->file);
    memset(qrels, 0, sizeof *qrels);
}
