/* The threshold probe: a cheap, exact lower bound of a query's final k-th score in OR mode, for the
 * scheduler's cost model (what the pruning will skip) and as a seed for the search itself
 * (isn_search_options.initial_threshold). The rarest lists, while their postings fit
 * ISN_PROBE_POSTINGS (the rarest alone is cut there), drive a merge; each of their documents gets its
 * full BM25 score, the other lists probed with next_geq in decreasing order of their bounds and no
 * further once the document cannot enter the probe's top k (that only saves work: the k-th best of the
 * driven documents is the same). Every score is a real document's, so the k-th best is a bound. */
#include "ranking/ranking_internal.h"

double isn_threshold_probe(const isn_index *index, const isn_query *query, uint32_t k, const double *levels,
                           uint32_t num_levels, double *passed_share, uint32_t *docs_scored) {
    uint32_t n = query->num_terms;
    *docs_scored = 0;
    for (uint32_t i = 0; i < num_levels; i++)
        passed_share[i] = 1.0;
    if (k == 0 || k > ISN_PROBE_MAX_K || n == 0 || n > ISN_PROBE_MAX_TERMS)
        return 0.0;
    const isn_index_info *info = isn_index_get_info(index);
    const float *norms = isn_index_doc_norms(index);
    float k1_plus_1 = info->bm25.k1 + 1.0f;
    isn_cursor cursors[ISN_PROBE_MAX_TERMS];
    float weights[ISN_PROBE_MAX_TERMS];
    double bounds[ISN_PROBE_MAX_TERMS];
    bool driver[ISN_PROBE_MAX_TERMS] = {false};
    for (uint32_t i = 0; i < n; i++) {
        isn_term_stats stats;
        if (query->terms[i].term_id >= info->num_terms)
            return 0.0; /* the search will refuse it */
        isn_index_term_stats(index, query->terms[i].term_id, &stats);
        if (stats.num_blocks == 0)
            return 0.0;
        isn_cursor_open(&cursors[i], index, query->terms[i].term_id);
        weights[i] = isn_bm25_idf(info->num_docs, query->terms[i].df) * (float)query->terms[i].count;
        bounds[i] = (double)weights[i] * stats.max_tf_part;
    }
    uint32_t drivers = 0;
    uint64_t driven = 0;
    while (drivers < n) {
        uint32_t rarest = n;
        for (uint32_t i = 0; i < n; i++)
            if (!driver[i] && (rarest == n || cursors[i].df < cursors[rarest].df))
                rarest = i;
        if (drivers > 0 && driven + cursors[rarest].df > ISN_PROBE_POSTINGS)
            break;
        driver[rarest] = true;
        drivers++;
        driven += cursors[rarest].df;
    }
    /* probed[]: the other lists, largest bound first; rest[j]: the most probed[j..] can add. */
    uint32_t probed[ISN_PROBE_MAX_TERMS], num_probed = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (driver[i])
            continue;
        uint32_t j = num_probed++;
        while (j > 0 && bounds[probed[j - 1]] < bounds[i]) {
            probed[j] = probed[j - 1];
            j--;
        }
        probed[j] = i;
    }
    double rest[ISN_PROBE_MAX_TERMS + 1];
    rest[num_probed] = 0.0;
    for (uint32_t j = num_probed; j-- > 0;)
        rest[j] = rest[j + 1] + bounds[probed[j]] * RANKING_BOUND_SLACK;
    /* Documents come in increasing id, as the search offers them: the same heap keeps the same k. */
    isn_hit entries[ISN_PROBE_MAX_K];
    isn_topk topk;
    isn_topk_init(&topk, entries, k);
    uint32_t scored = 0, passed = 0;
    uint32_t doc = ISN_DOC_END;
    for (uint32_t i = 0; i < n; i++)
        if (driver[i] && cursors[i].doc < doc)
            doc = cursors[i].doc;
    while (doc != ISN_DOC_END && scored < ISN_PROBE_POSTINGS) {
        double score = 0.0;
        uint32_t next_doc = ISN_DOC_END;
        for (uint32_t i = 0; i < n; i++) {
            isn_cursor *cursor = &cursors[i];
            if (!driver[i])
                continue;
            if (cursor->doc == doc) {
                score += (double)(weights[i] * isn_bm25_tf_part(k1_plus_1, isn_cursor_freq(cursor), norms[doc]));
                isn_cursor_next(cursor);
            }
            if (cursor->doc < next_doc)
                next_doc = cursor->doc;
        }
        bool full = topk.size == k;
        uint32_t j = 0;
        for (; j < num_probed && !(full && score + rest[j] <= entries[0].score); j++) {
            isn_cursor *cursor = &cursors[probed[j]];
            if (cursor->doc < doc)
                isn_cursor_next_geq(cursor, doc);
            if (cursor->doc == doc)
                score += (double)(weights[probed[j]] *
                                  isn_bm25_tf_part(k1_plus_1, isn_cursor_freq(cursor), norms[doc]));
        }
        if (j == num_probed) {
            isn_topk_offer(&topk, doc, (float)score);
            while (topk.size == k && passed < num_levels && entries[0].score > levels[passed])
                passed_share[passed++] = ((double)doc + 1.0) / info->num_docs;
        }
        scored++;
        doc = next_doc;
    }
    *docs_scored = scored;
    return topk.size == k ? entries[0].score : 0.0;
}
