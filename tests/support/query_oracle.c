/* The query-tree oracle: every document, every clause, straight from the words. */
#include "tests/support/query_oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Occurrences of the clause (a word, or consecutive words) in one field of a doc. */
static uint32_t freq_in_field(const query_oracle_collection *c, const query_oracle_clause *clause, uint32_t doc,
                              uint32_t field) {
    uint32_t len = c->lens[doc][field], n = clause->num_words, freq = 0;
    const char *const *words = c->words[doc][field];
    for (uint32_t start = 0; start + n <= len; start++) {
        uint32_t i = 0;
        while (i < n && strcmp(words[start + i], clause->words[i]) == 0) i++;
        freq += i == n;
    }
    return freq;
}

static uint32_t freq_of(const query_oracle_collection *c, const query_oracle_clause *clause, uint32_t doc) {
    if (clause->field >= 0) return freq_in_field(c, clause, doc, (uint32_t)clause->field);
    uint32_t freq = 0;
    for (uint32_t f = 0; f < c->num_fields; f++) freq += freq_in_field(c, clause, doc, f);
    return freq;
}

static uint32_t doc_len(const query_oracle_collection *c, uint32_t doc, int field) {
    if (field >= 0) return c->lens[doc][field];
    uint32_t len = 0;
    for (uint32_t f = 0; f < c->num_fields; f++) len += c->lens[doc][f];
    return len;
}

/* Documents that have the field (all of them for the whole document) and their average length. */
static void field_stats(const query_oracle_collection *c, int field, double *docs, double *avg) {
    double with = 0, total = 0;
    for (uint32_t d = 0; d < c->num_docs; d++) {
        uint32_t len = doc_len(c, d, field);
        with += field < 0 || len > 0;
        total += len;
    }
    *docs = with > 0 ? with : 1;
    *avg = with > 0 ? total / with : 1;
}

/* Sum of the clause's words' IDFs, each with its document frequency in the clause's field. */
static double clause_idf(const query_oracle_collection *c, const query_oracle_clause *clause, double num_docs) {
    double idf = 0;
    for (uint32_t i = 0; i < clause->num_words; i++) {
        query_oracle_clause word = {.occur = clause->occur, .field = clause->field, .num_words = 1,
                                    .words = {clause->words[i]}};
        double df = 0;
        for (uint32_t d = 0; d < c->num_docs; d++) df += freq_of(c, &word, d) > 0;
        idf += (float)log(1.0 + (num_docs - df + 0.5) / (df + 0.5));
    }
    return idf;
}

static bool filter_true(const query_oracle_collection *c, const query_oracle_filter *filter, uint32_t doc) {
    int64_t v = c->attributes[filter->attribute][doc];
    bool ok = false;
    if (v != INT64_MIN) {
        switch (filter->op) {
        case 0:
            for (uint32_t i = 0; i < filter->num_values; i++) ok |= v == filter->values[i];
            break;
        case 1: ok = v >= filter->values[0]; break;
        case 2: ok = v > filter->values[0]; break;
        case 3: ok = v <= filter->values[0]; break;
        default: ok = v < filter->values[0]; break;
        }
    }
    return ok != filter->negate;
}

bool query_oracle_matches(const query_oracle_collection *c, const query_oracle_clause *clauses, uint32_t n,
                          const query_oracle_filter *filters, uint32_t num_filters, bool and_mode, uint32_t doc) {
    for (uint32_t f = 0; f < num_filters; f++)
        if (!filter_true(c, &filters[f], doc)) return false;
    bool any_required = false, any_should = false, positive = false;
    for (uint32_t i = 0; i < n; i++) {
        bool required = clauses[i].occur == QO_MUST || (and_mode && clauses[i].occur == QO_SHOULD);
        any_required |= required;
        positive |= clauses[i].occur != QO_MUST_NOT;
        uint32_t freq = freq_of(c, &clauses[i], doc);
        if (clauses[i].occur == QO_MUST_NOT && freq) return false;
        if (required && !freq) return false;
        if (clauses[i].occur == QO_SHOULD && freq) any_should = true;
    }
    return positive && (any_required || any_should);
}

typedef struct {
    double score;
    uint32_t doc;
} scored;

static int better_first(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->doc < y->doc ? -1 : x->doc > y->doc;
}

uint32_t query_oracle_top_k(const query_oracle_collection *c, const query_oracle_clause *clauses, uint32_t n,
                            const query_oracle_filter *filters, uint32_t num_filters, bool and_mode, uint32_t k,
                            oracle_hit *out, uint64_t *matched) {
    double *weights = calloc(n ? n : 1, sizeof *weights), *avgs = calloc(n ? n : 1, sizeof *avgs);
    scored *all = calloc(c->num_docs ? c->num_docs : 1, sizeof *all);
    if (!weights || !avgs || !all) abort();
    for (uint32_t i = 0; i < n; i++) {
        if (clauses[i].occur == QO_MUST_NOT) continue;
        double docs;
        field_stats(c, clauses[i].field, &docs, &avgs[i]);
        weights[i] = clause_idf(c, &clauses[i], docs);
    }
    uint32_t count = 0;
    for (uint32_t d = 0; d < c->num_docs; d++) {
        if (!query_oracle_matches(c, clauses, n, filters, num_filters, and_mode, d)) continue;
        double score = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (clauses[i].occur == QO_MUST_NOT) continue;
            double tf = freq_of(c, &clauses[i], d);
            if (tf == 0) continue;
            double norm = c->k1 * (1 - c->b + c->b * doc_len(c, d, clauses[i].field) / avgs[i]);
            score += weights[i] * tf * (c->k1 + 1) / (tf + norm);
        }
        all[count++] = (scored){score, d};
    }
    qsort(all, count, sizeof *all, better_first);
    *matched = count;
    uint32_t kept = count < k ? count : k;
    for (uint32_t i = 0; i < kept; i++) out[i] = (oracle_hit){.doc = all[i].doc, .score = all[i].score};
    free(weights);
    free(avgs);
    free(all);
    return kept;
}
