/* Brute-force BM25 oracle; see oracle.h. Slow on purpose: no index, no pruning, no floats. */
#include "tests/support/oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *term;
    uint32_t tf;
} oracle_entry;

typedef struct {
    oracle_entry *entries; /* distinct terms of the document, sorted by strcmp */
    uint32_t num_entries;
    uint32_t length; /* number of terms, repeats included */
} oracle_doc;

struct oracle_collection {
    oracle_doc *docs;
    uint32_t num_docs;
    double avg_length;
    double k1;
    double b;
    double *priors; /* NULL without a prior */
    double prior_weight;
};

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int compare_hits(const void *a, const void *b) {
    const oracle_hit *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->doc > y->doc) - (x->doc < y->doc);
}

oracle_collection *oracle_new(uint32_t num_docs, const char *const *const *docs, const uint32_t *doc_lens,
                              double k1, double b) {
    oracle_collection *oracle = calloc(1, sizeof *oracle);
    if (oracle == NULL)
        return NULL;
    oracle->docs = calloc(num_docs > 0 ? num_docs : 1, sizeof *oracle->docs);
    if (oracle->docs == NULL) {
        free(oracle);
        return NULL;
    }
    oracle->num_docs = num_docs;
    oracle->k1 = k1;
    oracle->b = b;
    double total = 0.0;
    for (uint32_t d = 0; d < num_docs; d++) {
        uint32_t len = doc_lens[d];
        const char **sorted = malloc((len > 0 ? len : 1) * sizeof *sorted);
        oracle_doc *doc = &oracle->docs[d];
        doc->entries = calloc(len > 0 ? len : 1, sizeof *doc->entries);
        if (sorted == NULL || doc->entries == NULL) {
            free(sorted);
            oracle_free(oracle);
            return NULL;
        }
        memcpy(sorted, docs[d], len * sizeof *sorted);
        qsort(sorted, len, sizeof *sorted, compare_strings);
        for (uint32_t i = 0; i < len; i++) {
            if (doc->num_entries > 0 && strcmp(doc->entries[doc->num_entries - 1].term, sorted[i]) == 0) {
                doc->entries[doc->num_entries - 1].tf++;
                continue;
            }
            doc->entries[doc->num_entries].term = strdup(sorted[i]);
            doc->entries[doc->num_entries].tf = 1;
            doc->num_entries++;
        }
        free(sorted);
        doc->length = len;
        total += len;
    }
    oracle->avg_length = num_docs > 0 ? total / num_docs : 0.0;
    return oracle;
}

void oracle_free(oracle_collection *oracle) {
    if (oracle == NULL)
        return;
    for (uint32_t d = 0; d < oracle->num_docs; d++) {
        for (uint32_t i = 0; i < oracle->docs[d].num_entries; i++)
            free(oracle->docs[d].entries[i].term);
        free(oracle->docs[d].entries);
    }
    free(oracle->docs);
    free(oracle->priors);
    free(oracle);
}

bool oracle_set_prior(oracle_collection *oracle, const double *priors, double weight) {
    free(oracle->priors);
    oracle->priors = NULL;
    oracle->prior_weight = 0.0;
    if (priors == NULL || weight == 0.0)
        return true;
    oracle->priors = malloc((oracle->num_docs > 0 ? oracle->num_docs : 1) * sizeof *oracle->priors);
    if (oracle->priors == NULL)
        return false;
    memcpy(oracle->priors, priors, oracle->num_docs * sizeof *priors);
    oracle->prior_weight = weight;
    return true;
}

static uint32_t term_frequency(const oracle_doc *doc, const char *term) {
    uint32_t lo = 0, hi = doc->num_entries;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(doc->entries[mid].term, term);
        if (c == 0)
            return doc->entries[mid].tf;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

uint32_t oracle_df(const oracle_collection *oracle, const char *term) {
    uint32_t df = 0;
    for (uint32_t d = 0; d < oracle->num_docs; d++)
        df += term_frequency(&oracle->docs[d], term) > 0;
    return df;
}

uint32_t oracle_score_all(const oracle_collection *oracle, const char *const *query, uint32_t query_len, bool and_mode,
                          uint64_t num_docs_override, double *scores, bool *matched) {
    double n = num_docs_override != 0 ? (double)num_docs_override : (double)oracle->num_docs;
    double *idf = malloc((query_len > 0 ? query_len : 1) * sizeof *idf);
    bool any_absent = false;
    for (uint32_t t = 0; t < query_len; t++) {
        double df = oracle_df(oracle, query[t]);
        any_absent |= df == 0;
        idf[t] = log(1.0 + (n - df + 0.5) / (df + 0.5));
    }
    uint32_t num_matched = 0;
    for (uint32_t d = 0; d < oracle->num_docs; d++) {
        const oracle_doc *doc = &oracle->docs[d];
        double norm = oracle->k1 * (1.0 - oracle->b + oracle->b * doc->length / oracle->avg_length);
        double score = 0.0;
        uint32_t terms_present = 0;
        for (uint32_t t = 0; t < query_len; t++) {
            double tf = term_frequency(doc, query[t]);
            if (tf == 0)
                continue;
            terms_present++;
            score += idf[t] * tf * (oracle->k1 + 1.0) / (tf + norm);
        }
        bool is_match = and_mode ? (query_len > 0 && !any_absent && terms_present == query_len) : terms_present > 0;
        if (is_match && oracle->priors != NULL)
            score += oracle->prior_weight * oracle->priors[d];
        scores[d] = is_match ? score : 0.0;
        matched[d] = is_match;
        num_matched += is_match;
    }
    free(idf);
    return num_matched;
}

uint32_t oracle_top_k(const oracle_collection *oracle, const char *const *query, uint32_t query_len, bool and_mode,
                      uint64_t num_docs_override, uint32_t k, oracle_hit *out) {
    uint32_t n = oracle->num_docs;
    double *scores = malloc((n > 0 ? n : 1) * sizeof *scores);
    bool *matched = malloc((n > 0 ? n : 1) * sizeof *matched);
    oracle_hit *all = malloc((n > 0 ? n : 1) * sizeof *all);
    uint32_t count = 0;
    oracle_score_all(oracle, query, query_len, and_mode, num_docs_override, scores, matched);
    for (uint32_t d = 0; d < n; d++)
        if (matched[d])
            all[count++] = (oracle_hit){.doc = d, .score = scores[d]};
    qsort(all, count, sizeof *all, compare_hits);
    if (count > k)
        count = k;
    memcpy(out, all, count * sizeof *out);
    free(scores);
    free(matched);
    free(all);
    return count;
}
