/*
 * isn-eval: scores a TREC run against TREC relevance judgements (qrels) with the measures
 * trec_eval 9.x reports as ndcg_cut_10, P_10, recall_100 and map, plus recip_rank cut at
 * rank 10 (MRR@10), so ISN's quality numbers can be compared with published ones.
 *
 *   isn-eval [--json] [--per-query] QRELS RUN
 *
 * Choices copied from trec_eval, because a number that differs from trec_eval's is useless:
 * - A query's ranking is its run lines ordered by score descending, ties broken by docid in
 *   decreasing strcmp order; the rank column is ignored. Scores are compared as C floats,
 *   because trec_eval stores them as floats: two scores equal in single precision tie.
 * - A document is relevant when its judgement is >= 1. nDCG gains are the judgements
 *   themselves (negative ones count 0); the ideal ranking is built from every judged
 *   document of the query. MAP and recall divide by the number of relevant documents in
 *   the qrels, whether retrieved or not.
 * - Averages run over the queries present in both files. A query judged only non-relevant
 *   is evaluated and scores 0 on every measure (trec_eval does not skip it). Run queries
 *   without judgements are ignored; judged queries absent from the run are only counted.
 * - Duplicate docids within one query of the run or of the qrels are errors, and so is a
 *   pair of files with no query in common (trec_eval exits on both).
 * Blank lines are skipped. Every error names file:line and exits with status 2.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define EXIT_BAD_INPUT 2
#define NDCG_CUTOFF 10
#define RECIP_RANK_CUTOFF 10
#define PRECISION_CUTOFF 10
#define RECALL_CUTOFF 100
#define QRELS_FIELDS 4
#define RUN_FIELDS 6

static const char usage_text[] =
    "usage: isn-eval [--json] [--per-query] QRELS RUN\n"
    "  QRELS lines: qid iter docid rel        (rel >= 1 is relevant)\n"
    "  RUN lines:   qid Q0 docid rank score tag\n"
    "Prints ndcg_cut_10, recip_rank_cut_10, P_10, recall_100 and map as trec_eval 9.x\n"
    "computes them, averaged over the queries present in both files.\n"
    "  --json       one JSON object instead of 'measure<TAB>all<TAB>value' lines\n"
    "  --per-query  also the values of every evaluated query\n";

/* Bad input ends the program: "isn-eval: [PATH:LINE: ]message" on stderr and exit status 2. */
static void fail_at(const char *path, size_t line, const char *format, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
#define fail(...) fail_at(NULL, 0, __VA_ARGS__)

static void fail_at(const char *path, size_t line, const char *format, ...) {
    char message[2048];
    va_list args;
    va_start(args, format);
    isn_verror(message, sizeof message, format, args);
    va_end(args);
    if (path) fprintf(stderr, "isn-eval: %s:%zu: %s\n", path, line, message);
    else fprintf(stderr, "isn-eval: %s\n", message);
    exit(EXIT_BAD_INPUT);
}

static void *checked_realloc(void *old, size_t count, size_t size) {
    if (size != 0 && count > SIZE_MAX / size)
        fail("out of memory");
    void *grown = realloc(old, count * size);
    if (grown == NULL && count != 0)
        fail("out of memory");
    return grown;
}

/* ---- whole-file input: fields are NUL-terminated in place, so no string is copied ---- */

struct text_file {
    const char *path;
    char *data;
    size_t size;
    size_t offset;
    size_t line_number;
};

static void text_file_read(struct text_file *file, const char *path) {
    FILE *stream = fopen(path, "rb");
    if (stream == NULL)
        fail("cannot open %s: %s", path, strerror(errno));
    size_t capacity = 1 << 16, size = 0;
    char *data = checked_realloc(NULL, capacity, 1);
    for (;;) {
        if (size == capacity) {
            capacity *= 2;
            data = checked_realloc(data, capacity, 1);
        }
        size_t got = fread(data + size, 1, capacity - size, stream);
        size += got;
        if (got == 0)
            break;
    }
    if (ferror(stream))
        fail("cannot read %s: %s", path, strerror(errno));
    fclose(stream);
    /* The loop leaves size < capacity: the last field's terminator fits after the data. */
    *file = (struct text_file){.path = path, .data = data, .size = size};
}

static bool is_field_separator(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/*
 * Splits the next line into fields, keeping at most `max_fields` of them; returns false at
 * the end of the file. *field_count is the true count so a caller can report it.
 */
static bool text_file_next_line(struct text_file *file, char **fields, size_t max_fields,
                                size_t *field_count) {
    if (file->offset >= file->size)
        return false;
    char *start = file->data + file->offset;
    char *newline = memchr(start, '\n', file->size - file->offset);
    char *end = newline != NULL ? newline : file->data + file->size;
    file->offset = (size_t)(end - file->data) + 1;
    file->line_number++;
    if (memchr(start, '\0', (size_t)(end - start)) != NULL)
        fail_at(file->path, file->line_number, "line contains a NUL byte");

    size_t count = 0;
    char *cursor = start;
    while (cursor < end) {
        while (cursor < end && is_field_separator(*cursor))
            cursor++;
        if (cursor == end)
            break;
        char *field = cursor;
        while (cursor < end && !is_field_separator(*cursor))
            cursor++;
        /* end points at '\n' or one past the data: the buffer has room for that NUL. */
        *cursor++ = '\0';
        if (count < max_fields)
            fields[count] = field;
        count++;
    }
    *field_count = count;
    return true;
}

/* ---- hash table from (query, string) to an index; strings point into the file buffers ---- */

struct key_slot {
    uint64_t hash;
    const char *text; /* NULL marks an empty slot */
    uint32_t query;
    size_t value;
};

struct key_table {
    struct key_slot *slots;
    size_t capacity; /* a power of two, kept at least twice the count */
    size_t count;
};

static uint64_t key_hash(uint32_t query, const char *text) {
    return isn_hash_string(text) ^ (query * 0x9E3779B97F4A7C15ull); /* golden-ratio spread of the query */
}

static struct key_slot *key_table_slot(const struct key_table *table, uint64_t hash,
                                       uint32_t query, const char *text) {
    size_t mask = table->capacity - 1;
    for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
        struct key_slot *slot = &table->slots[i];
        if (slot->text == NULL ||
            (slot->hash == hash && slot->query == query && strcmp(slot->text, text) == 0))
            return slot;
    }
}

static void key_table_grow(struct key_table *table) {
    struct key_table grown = {.capacity = table->capacity == 0 ? 16 : table->capacity * 2};
    grown.slots = checked_realloc(NULL, grown.capacity, sizeof *grown.slots);
    memset(grown.slots, 0, grown.capacity * sizeof *grown.slots);
    for (size_t i = 0; i < table->capacity; i++) {
        const struct key_slot *old = &table->slots[i];
        if (old->text != NULL)
            *key_table_slot(&grown, old->hash, old->query, old->text) = *old;
    }
    grown.count = table->count;
    free(table->slots);
    *table = grown;
}

/* Returns the slot of the key, inserting it with `value` when absent (see *inserted). */
static struct key_slot *key_table_insert(struct key_table *table, uint32_t query,
                                         const char *text, size_t value, bool *inserted) {
    if ((table->count + 1) * 2 > table->capacity)
        key_table_grow(table);
    uint64_t hash = key_hash(query, text);
    struct key_slot *slot = key_table_slot(table, hash, query, text);
    *inserted = slot->text == NULL;
    if (*inserted) {
        *slot = (struct key_slot){.hash = hash, .text = text, .query = query, .value = value};
        table->count++;
    }
    return slot;
}

static const struct key_slot *key_table_find(const struct key_table *table, uint32_t query,
                                             const char *text) {
    if (table->count == 0)
        return NULL;
    const struct key_slot *slot = key_table_slot(table, key_hash(query, text), query, text);
    return slot->text != NULL ? slot : NULL;
}

/* ---- queries, judgements and the run ---- */

struct query_metrics {
    double ndcg_cut_10;
    double recip_rank_cut_10;
    double p_10;
    double recall_100;
    double map;
};

struct query {
    const char *qid;
    bool judged;
    size_t num_relevant;
    /* The largest positive gains of the query's judgements, descending: the ideal DCG. */
    long ideal_gains[NDCG_CUTOFF];
    size_t num_ideal_gains;
    size_t ranking_start; /* into the sorted run */
    size_t ranking_length;
    struct query_metrics metrics;
};

struct query_set {
    struct query *items;
    size_t count;
    size_t capacity;
    struct key_table by_qid;
};

struct judgement {
    long rel;
    size_t line;
};

struct run_entry {
    uint32_t query;
    float score;
    const char *docid;
    size_t line;
};

struct evaluation {
    struct query_set queries;
    struct judgement *judgements;
    size_t num_judgements;
    struct key_table judgement_by_doc;
    struct run_entry *run;
    size_t run_length;
};

static uint32_t query_set_intern(struct query_set *set, const char *qid, const char *path,
                                 size_t line) {
    if (set->count == UINT32_MAX)
        fail_at(path, line, "too many distinct query ids");
    bool inserted;
    struct key_slot *slot = key_table_insert(&set->by_qid, 0, qid, set->count, &inserted);
    if (inserted) {
        if (set->count == set->capacity) {
            set->capacity = set->capacity == 0 ? 64 : set->capacity * 2;
            set->items = checked_realloc(set->items, set->capacity, sizeof *set->items);
        }
        set->items[set->count++] = (struct query){.qid = qid};
    }
    return (uint32_t)slot->value;
}

static void query_add_ideal_gain(struct query *query, long gain) {
    size_t position = query->num_ideal_gains;
    if (position == NDCG_CUTOFF) {
        if (gain <= query->ideal_gains[NDCG_CUTOFF - 1])
            return;
        position--;
    } else {
        query->num_ideal_gains++;
    }
    while (position > 0 && query->ideal_gains[position - 1] < gain) {
        query->ideal_gains[position] = query->ideal_gains[position - 1];
        position--;
    }
    query->ideal_gains[position] = gain;
}

static bool parse_long(const char *text, long *value) {
    char *end;
    errno = 0;
    *value = strtol(text, &end, 10);
    return end != text && *end == '\0' && errno == 0;
}

static bool parse_score(const char *text, float *value) {
    char *end;
    double parsed = strtod(text, &end);
    if (end == text || *end != '\0' || isnan(parsed))
        return false;
    *value = (float)parsed;
    return true;
}

static void read_qrels(struct evaluation *eval, struct text_file *file) {
    char *fields[QRELS_FIELDS];
    size_t count;
    while (text_file_next_line(file, fields, QRELS_FIELDS, &count)) {
        if (count == 0)
            continue;
        if (count != QRELS_FIELDS)
            fail_at(file->path, file->line_number,
                    "expected 4 fields 'qid iter docid rel', found %zu", count);
        long rel;
        if (!parse_long(fields[3], &rel))
            fail_at(file->path, file->line_number,
                    "relevance '%s' is not an integer", fields[3]);
        uint32_t query_index =
            query_set_intern(&eval->queries, fields[0], file->path, file->line_number);
        bool inserted;
        const struct key_slot *slot = key_table_insert(&eval->judgement_by_doc, query_index,
                                                       fields[2], eval->num_judgements,
                                                       &inserted);
        if (!inserted)
            fail_at(file->path, file->line_number,
                    "docid '%s' of query '%s' is judged twice (first at line %zu)", fields[2],
                    fields[0], eval->judgements[slot->value].line);
        if (eval->num_judgements % 1024 == 0)
            eval->judgements = checked_realloc(eval->judgements, eval->num_judgements + 1024,
                                               sizeof *eval->judgements);
        eval->judgements[eval->num_judgements++] =
            (struct judgement){.rel = rel, .line = file->line_number};

        struct query *query = &eval->queries.items[query_index];
        query->judged = true;
        if (rel >= 1)
            query->num_relevant++;
        if (rel > 0)
            query_add_ideal_gain(query, rel);
    }
}

static void read_run(struct evaluation *eval, struct text_file *file) {
    char *fields[RUN_FIELDS];
    size_t count, capacity = 0;
    struct key_table seen = {0};
    while (text_file_next_line(file, fields, RUN_FIELDS, &count)) {
        if (count == 0)
            continue;
        if (count != RUN_FIELDS)
            fail_at(file->path, file->line_number,
                    "expected 6 fields 'qid Q0 docid rank score tag', found %zu", count);
        float score;
        if (!parse_score(fields[4], &score))
            fail_at(file->path, file->line_number, "score '%s' is not a number", fields[4]);
        uint32_t query_index =
            query_set_intern(&eval->queries, fields[0], file->path, file->line_number);
        bool inserted;
        const struct key_slot *slot =
            key_table_insert(&seen, query_index, fields[2], eval->run_length, &inserted);
        if (!inserted)
            fail_at(file->path, file->line_number,
                    "docid '%s' appears twice in the ranking of query '%s' (first at line %zu)",
                    fields[2], fields[0], eval->run[slot->value].line);
        if (eval->run_length == capacity) {
            capacity = capacity == 0 ? 1024 : capacity * 2;
            eval->run = checked_realloc(eval->run, capacity, sizeof *eval->run);
        }
        eval->run[eval->run_length++] = (struct run_entry){
            .query = query_index, .score = score, .docid = fields[2], .line = file->line_number};
    }
    free(seen.slots);
}

static int compare_ranking_order(const void *left, const void *right) {
    const struct run_entry *a = left, *b = right;
    if (a->query != b->query)
        return a->query < b->query ? -1 : 1;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return strcmp(b->docid, a->docid);
}

static void group_rankings(struct evaluation *eval) {
    qsort(eval->run, eval->run_length, sizeof *eval->run, compare_ranking_order);
    for (size_t i = 0; i < eval->run_length; i++) {
        struct query *query = &eval->queries.items[eval->run[i].query];
        if (query->ranking_length++ == 0)
            query->ranking_start = i;
    }
}

static double rank_discount(size_t rank) {
    return 1.0 / log2((double)rank + 1.0);
}

static void evaluate_query(const struct evaluation *eval, struct query *query) {
    const struct run_entry *ranking = &eval->run[query->ranking_start];
    struct query_metrics metrics = {0};
    size_t relevant_so_far = 0;
    double dcg = 0.0, precision_sum = 0.0;
    for (size_t rank = 1; rank <= query->ranking_length; rank++) {
        const struct run_entry *entry = &ranking[rank - 1];
        const struct key_slot *slot =
            key_table_find(&eval->judgement_by_doc, entry->query, entry->docid);
        long rel = slot != NULL ? eval->judgements[slot->value].rel : 0;
        if (rank <= NDCG_CUTOFF && rel > 0)
            dcg += (double)rel * rank_discount(rank);
        if (rel < 1)
            continue;
        relevant_so_far++;
        precision_sum += (double)relevant_so_far / (double)rank;
        if (relevant_so_far == 1 && rank <= RECIP_RANK_CUTOFF)
            metrics.recip_rank_cut_10 = 1.0 / (double)rank;
        if (rank <= PRECISION_CUTOFF)
            metrics.p_10 += 1.0 / PRECISION_CUTOFF;
        if (rank <= RECALL_CUTOFF)
            metrics.recall_100 += 1.0;
    }
    double ideal_dcg = 0.0;
    for (size_t i = 0; i < query->num_ideal_gains; i++)
        ideal_dcg += (double)query->ideal_gains[i] * rank_discount(i + 1);
    if (ideal_dcg > 0.0)
        metrics.ndcg_cut_10 = dcg / ideal_dcg;
    if (query->num_relevant > 0) {
        metrics.recall_100 /= (double)query->num_relevant;
        metrics.map = precision_sum / (double)query->num_relevant;
    } else {
        metrics.recall_100 = 0.0;
    }
    query->metrics = metrics;
}

/* ---- output ---- */

struct measure {
    const char *name;
    size_t offset;
};

static const struct measure measures[] = {
    {"ndcg_cut_10", offsetof(struct query_metrics, ndcg_cut_10)},
    {"recip_rank_cut_10", offsetof(struct query_metrics, recip_rank_cut_10)},
    {"P_10", offsetof(struct query_metrics, p_10)},
    {"recall_100", offsetof(struct query_metrics, recall_100)},
    {"map", offsetof(struct query_metrics, map)},
};
#define NUM_MEASURES (sizeof measures / sizeof measures[0])

static double measure_value(const struct query_metrics *metrics, const struct measure *measure) {
    double value;
    memcpy(&value, (const char *)metrics + measure->offset, sizeof value);
    return value;
}

static void print_json_string(const char *text) {
    putchar('"');
    for (const unsigned char *c = (const unsigned char *)text; *c != '\0'; c++) {
        if (*c == '"' || *c == '\\')
            printf("\\%c", *c);
        else if (*c < 0x20)
            printf("\\u%04x", *c);
        else
            putchar(*c);
    }
    putchar('"');
}

static void print_json_metrics(const struct query_metrics *metrics) {
    for (size_t m = 0; m < NUM_MEASURES; m++) {
        printf(",\"%s\":%.6f", measures[m].name, measure_value(metrics, &measures[m]));
    }
}

struct report {
    const struct query **evaluated; /* in qid order */
    size_t num_evaluated;
    size_t num_judged_without_results;
    struct query_metrics mean;
};

static void print_text(const struct report *report, bool per_query) {
    if (per_query) {
        for (size_t q = 0; q < report->num_evaluated; q++) {
            const struct query *query = report->evaluated[q];
            for (size_t m = 0; m < NUM_MEASURES; m++)
                printf("%s\t%s\t%.4f\n", measures[m].name, query->qid,
                       measure_value(&query->metrics, &measures[m]));
        }
    }
    printf("num_q\tall\t%zu\n", report->num_evaluated);
    printf("num_q_without_results\tall\t%zu\n", report->num_judged_without_results);
    for (size_t m = 0; m < NUM_MEASURES; m++)
        printf("%s\tall\t%.4f\n", measures[m].name, measure_value(&report->mean, &measures[m]));
}

static void print_json(const struct report *report, bool per_query) {
    printf("{\"queries\":%zu,\"queries_without_results\":%zu", report->num_evaluated,
           report->num_judged_without_results);
    print_json_metrics(&report->mean);
    if (per_query) {
        printf(",\"per_query\":{");
        for (size_t q = 0; q < report->num_evaluated; q++) {
            const struct query *query = report->evaluated[q];
            if (q > 0)
                putchar(',');
            print_json_string(query->qid);
            printf(":{\"ranked\":%zu,\"relevant\":%zu", query->ranking_length,
                   query->num_relevant);
            print_json_metrics(&query->metrics);
            putchar('}');
        }
        putchar('}');
    }
    printf("}\n");
}

static int compare_qids(const void *left, const void *right) {
    const struct query *const *a = left, *const *b = right;
    return strcmp((*a)->qid, (*b)->qid);
}

static void build_report(struct evaluation *eval, struct report *report) {
    *report = (struct report){0};
    report->evaluated = checked_realloc(NULL, eval->queries.count + 1, sizeof *report->evaluated);
    for (size_t q = 0; q < eval->queries.count; q++) {
        struct query *query = &eval->queries.items[q];
        if (!query->judged)
            continue;
        if (query->ranking_length == 0) {
            report->num_judged_without_results++;
            continue;
        }
        evaluate_query(eval, query);
        report->evaluated[report->num_evaluated++] = query;
    }
    qsort(report->evaluated, report->num_evaluated, sizeof *report->evaluated, compare_qids);

    double sums[NUM_MEASURES] = {0};
    for (size_t q = 0; q < report->num_evaluated; q++)
        for (size_t m = 0; m < NUM_MEASURES; m++)
            sums[m] += measure_value(&report->evaluated[q]->metrics, &measures[m]);
    for (size_t m = 0; m < NUM_MEASURES; m++) {
        double mean = report->num_evaluated > 0 ? sums[m] / (double)report->num_evaluated : 0.0;
        memcpy((char *)&report->mean + measures[m].offset, &mean, sizeof mean);
    }
}

int main(int argc, char **argv) {
    bool json = false, per_query = false;
    const char *paths[2];
    size_t num_paths = 0;
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!options_done && strcmp(arg, "--") == 0) {
            options_done = true;
        } else if (!options_done && strcmp(arg, "--json") == 0) {
            json = true;
        } else if (!options_done && strcmp(arg, "--per-query") == 0) {
            per_query = true;
        } else if (!options_done && (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!options_done && arg[0] == '-' && arg[1] != '\0') {
            fprintf(stderr, "isn-eval: unknown option '%s'\n%s", arg, usage_text);
            return EXIT_BAD_INPUT;
        } else if (num_paths < 2) {
            paths[num_paths++] = arg;
        } else {
            fprintf(stderr, "isn-eval: too many arguments\n%s", usage_text);
            return EXIT_BAD_INPUT;
        }
    }
    if (num_paths != 2) {
        fprintf(stderr, "isn-eval: expected QRELS and RUN files\n%s", usage_text);
        return EXIT_BAD_INPUT;
    }

    struct text_file qrels_file, run_file;
    text_file_read(&qrels_file, paths[0]);
    text_file_read(&run_file, paths[1]);

    struct evaluation eval = {0};
    read_qrels(&eval, &qrels_file);
    read_run(&eval, &run_file);
    group_rankings(&eval);

    struct report report;
    build_report(&eval, &report);
    if (report.num_evaluated == 0)
        fail("no query of %s has judgements in %s: nothing to evaluate", run_file.path,
             qrels_file.path);
    if (json)
        print_json(&report, per_query);
    else
        print_text(&report, per_query);
    if (fflush(stdout) != 0 || ferror(stdout))
        fail("cannot write the results: %s", strerror(errno));

    free(report.evaluated);
    free(eval.run);
    free(eval.judgements);
    free(eval.judgement_by_doc.slots);
    free(eval.queries.by_qid.slots);
    free(eval.queries.items);
    free(qrels_file.data);
    free(run_file.data);
    return 0;
}
