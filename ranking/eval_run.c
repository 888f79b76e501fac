/* Reading a TREC run into per-query rankings: see "evaluation of rankings" in ranking.h. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/ranking.h"

#define RUN_FIELDS 6

static int compare_query_doc_line(const void *left, const void *right) {
    const isn_eval_run_entry *a = left, *b = right;
    int order = strcmp(a->query_id, b->query_id);
    if (order == 0) order = strcmp(a->doc_id, b->doc_id);
    if (order == 0) order = (a->line > b->line) - (a->line < b->line);
    return order;
}

/* trec_eval's ranking: score descending, then docid in decreasing strcmp order. */
static int compare_ranking_order(const void *left, const void *right) {
    const isn_eval_run_entry *a = left, *b = right;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return strcmp(b->doc_id, a->doc_id);
}

static bool same_query_and_doc(const isn_eval_run_entry *a, const isn_eval_run_entry *b) {
    return !strcmp(a->query_id, b->query_id) && !strcmp(a->doc_id, b->doc_id);
}

/* Sorts the entries by query and doc; when a query ranks a doc twice, err names the second line that
 * comes first in the file (where a reader checking line by line stops) and -1 is returned. */
static int sort_and_check_duplicates(isn_eval_run *run, char *err, size_t err_len) {
    qsort(run->entries, run->count, sizeof *run->entries, compare_query_doc_line);
    const isn_eval_run_entry *first = NULL, *second = NULL;
    for (size_t i = 1; i < run->count; i++) {
        const isn_eval_run_entry *a = &run->entries[i - 1], *b = &run->entries[i];
        /* Within a pair's run of entries the lines ascend: its first two are the earliest. */
        bool a_starts_pair = i == 1 || !same_query_and_doc(&run->entries[i - 2], a);
        if (a_starts_pair && same_query_and_doc(a, b) && (!second || b->line < second->line)) {
            first = a;
            second = b;
        }
    }
    if (!second) return 0;
    return isn_error(err, err_len, "%s:%zu: docid '%s' appears twice in the ranking of query '%s' (first at line %zu)",
                     run->file.path, second->line, second->doc_id, second->query_id, first->line);
}

static bool parse_score(const char *text, float *value) {
    char *end;
    double parsed = strtod(text, &end);
    if (end == text || *end != '\0' || isnan(parsed)) return false;
    *value = (float)parsed;
    return true;
}

/* Reads the entries up to the end, or up to the first malformed line (-1 with err). */
static int read_entries(isn_eval_run *run, char *err, size_t err_len) {
    isn_trec_file *file = &run->file;
    char *fields[RUN_FIELDS];
    size_t count, capacity = 0;
    int more;
    while ((more = isn_trec_file_next_line(file, fields, RUN_FIELDS, &count, err, err_len)) > 0) {
        if (count == 0) continue;
        if (count != RUN_FIELDS)
            return isn_error(err, err_len, "%s:%zu: expected 6 fields 'qid Q0 docid rank score tag', found %zu",
                             file->path, file->line, count);
        float score;
        if (!parse_score(fields[4], &score))
            return isn_error(err, err_len, "%s:%zu: score '%s' is not a number", file->path, file->line, fields[4]);
        if (run->count == capacity) {
            capacity = capacity ? capacity * 2 : 1024;
            isn_eval_run_entry *grown = realloc(run->entries, capacity * sizeof *grown);
            if (!grown) return isn_error(err, err_len, "out of memory");
            run->entries = grown;
        }
        run->entries[run->count++] =
            (isn_eval_run_entry){.query_id = fields[0], .doc_id = fields[2], .score = score, .line = file->line};
    }
    return more;
}

int isn_eval_run_read(const char *path, isn_eval_run *run, char *err, size_t err_len) {
    memset(run, 0, sizeof *run);
    if (isn_trec_file_read(path, &run->file, err, err_len) != 0) return -1;
    int rc = read_entries(run, err, err_len);
    /* A doc ranked twice before a malformed line is the first error in the file: it replaces err. */
    if (sort_and_check_duplicates(run, err, err_len) != 0) rc = -1;
    if (rc != 0) {
        isn_eval_run_free(run);
        return -1;
    }
    /* The entries are grouped by query already: order each query's ranking. */
    for (size_t start = 0, end; start < run->count; start = end) {
        for (end = start + 1; end < run->count && !strcmp(run->entries[end].query_id, run->entries[start].query_id);)
            end++;
        qsort(run->entries + start, end - start, sizeof *run->entries, compare_ranking_order);
    }
    return 0;
}

void isn_eval_run_free(isn_eval_run *run) {
    free(run->entries);
    isn_trec_file_free(&run->file);
    memset(run, 0, sizeof *run);
}
