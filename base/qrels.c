/* TREC relevance judgements ("query_id iteration doc_id relevance" lines): see base.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define QRELS_FIELDS 4

static int compare_judgements(const void *left, const void *right) {
    const isn_judgement *a = left, *b = right;
    int order = strcmp(a->query_id, b->query_id);
    if (order == 0) order = strcmp(a->doc_id, b->doc_id);
    if (order == 0) order = (a->line > b->line) - (a->line < b->line);
    return order;
}

static bool same_pair(const isn_judgement *a, const isn_judgement *b) {
    return !strcmp(a->query_id, b->query_id) && !strcmp(a->doc_id, b->doc_id);
}

/* Sorts the judgements; when a pair is judged twice, err names the second judgement that comes first
 * in the file (where a reader checking line by line stops) and -1 is returned. */
static int sort_and_check_duplicates(isn_qrels *qrels, char *err, size_t err_len) {
    qsort(qrels->judgements, qrels->count, sizeof *qrels->judgements, compare_judgements);
    const isn_judgement *first = NULL, *second = NULL;
    for (size_t i = 1; i < qrels->count; i++) {
        const isn_judgement *a = &qrels->judgements[i - 1], *b = &qrels->judgements[i];
        /* Within a pair's run the lines ascend: its first two judgements are the earliest. */
        bool a_starts_run = i == 1 || !same_pair(&qrels->judgements[i - 2], a);
        if (a_starts_run && same_pair(a, b) && (!second || b->line < second->line)) {
            first = a;
            second = b;
        }
    }
    if (!second) return 0;
    return isn_error(err, err_len, "%s:%zu: docid '%s' of query '%s' is judged twice (first at line %zu)",
                     qrels->file.path, second->line, second->doc_id, second->query_id, first->line);
}

/* Reads the judgements up to the end, or up to the first malformed line (-1 with err). */
static int read_judgements(isn_qrels *qrels, char *err, size_t err_len) {
    isn_trec_file *file = &qrels->file;
    char *fields[QRELS_FIELDS];
    size_t count, capacity = 0;
    int more;
    while ((more = isn_trec_file_next_line(file, fields, QRELS_FIELDS, &count, err, err_len)) > 0) {
        if (count == 0) continue;
        if (count != QRELS_FIELDS)
            return isn_error(err, err_len, "%s:%zu: expected 4 fields 'qid iter docid rel', found %zu", file->path,
                             file->line, count);
        char *end;
        errno = 0;
        long relevance = strtol(fields[3], &end, 10);
        if (end == fields[3] || *end != '\0' || errno != 0)
            return isn_error(err, err_len, "%s:%zu: relevance '%s' is not an integer", file->path, file->line,
                             fields[3]);
        if (qrels->count == capacity) {
            capacity = capacity ? capacity * 2 : 1024;
            isn_judgement *grown = realloc(qrels->judgements, capacity * sizeof *grown);
            if (!grown) return isn_error(err, err_len, "out of memory");
            qrels->judgements = grown;
        }
        qrels->judgements[qrels->count++] = (isn_judgement){
            .query_id = fields[0], .doc_id = fields[2], .relevance = relevance, .line = file->line};
    }
    return more;
}

int isn_qrels_read(const char *path, isn_qrels *qrels, char *err, size_t err_len) {
    memset(qrels, 0, sizeof *qrels);
    if (isn_trec_file_read(path, &qrels->file, err, err_len) != 0) return -1;
    int rc = read_judgements(qrels, err, err_len);
    /* A pair judged twice before a malformed line is the first error in the file: it replaces err. */
    if (sort_and_check_duplicates(qrels, err, err_len) != 0) rc = -1;
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
        int order = strcmp(j->query_id, query_id);
        if (order == 0) order = compare_doc_id(j->doc_id, doc_id, doc_id_len);
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
