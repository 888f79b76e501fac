/* Reading a TREC run into per-query rankings: see "evaluation of rankings" in ranking.h. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/ranking.h"

/* Scores are parsed as doubles and kept as floats, as trec_eval keeps them; NaN is refused. */
static int parse_score(char **fields, void *record, const isn_trec_file *file, char *err, size_t err_len) {
    isn_eval_run_entry *entry = record;
    char *end;
    double parsed = strtod(fields[4], &end);
    if (end == fields[4] || *end != '\0' || isnan(parsed))
        return isn_error(err, err_len, "%s:%zu: score '%s' is not a number", file->path, file->line, fields[4]);
    entry->score = (float)parsed;
    return 0;
}

/* trec_eval's ranking: score descending, then docid in decreasing strcmp order. */
static int compare_ranking_order(const void *left, const void *right) {
    const isn_eval_run_entry *a = left, *b = right;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return strcmp(b->key.doc_id, a->key.doc_id);
}

int isn_eval_run_read(const char *path, isn_eval_run *run, char *err, size_t err_len) {
    memset(run, 0, sizeof *run);
    if (isn_trec_file_read(path, &run->file, err, err_len) != 0) return -1;
    void *records;
    int rc = isn_trec_read_records(&run->file, 6, "qid Q0 docid rank score tag", sizeof(isn_eval_run_entry),
                                   parse_score, &records, &run->count, err, err_len);
    run->entries = records;
    /* A doc ranked twice before a malformed line is the first error in the file: it replaces err. */
    const isn_trec_key *first, *repeat = isn_trec_sort_find_repeat(run->entries, run->count, sizeof *run->entries, &first);
    if (repeat)
        rc = isn_error(err, err_len, "%s:%zu: docid '%s' appears twice in the ranking of query '%s' (first at line %zu)",
                       path, repeat->line, repeat->doc_id, repeat->query_id, first->line);
    if (rc != 0) {
        isn_eval_run_free(run);
        return -1;
    }
    /* The entries are grouped by query already: order each query's ranking. */
    for (size_t start = 0, end; start < run->count; start = end) {
        const char *query_id = run->entries[start].key.query_id;
        for (end = start + 1; end < run->count && !strcmp(run->entries[end].key.query_id, query_id);) end++;
        qsort(run->entries + start, end - start, sizeof *run->entries, compare_ranking_order);
    }
    return 0;
}

void isn_eval_run_free(isn_eval_run *run) {
    free(run->entries);
    isn_trec_file_free(&run->file);
    memset(run, 0, sizeof *run);
}
