/* One query's trec_eval measures, and their names: see "evaluation of rankings" in ranking.h. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "ranking/ranking.h"

static const struct {
    const char *name;
    size_t offset;
} measures[ISN_EVAL_MEASURES] = {
    {"ndcg_cut_10", offsetof(isn_eval_metrics, ndcg_cut_10)},
    {"recip_rank_cut_10", offsetof(isn_eval_metrics, recip_rank_cut_10)},
    {"P_10", offsetof(isn_eval_metrics, p_10)},
    {"recall_100", offsetof(isn_eval_metrics, recall_100)},
    {"map", offsetof(isn_eval_metrics, map)},
};

const char *isn_eval_measure_name(size_t measure) {
    return measure < ISN_EVAL_MEASURES ? measures[measure].name : "?";
}

double isn_eval_measure_value(const isn_eval_metrics *metrics, size_t measure) {
    double value = 0.0;
    if (measure < ISN_EVAL_MEASURES) memcpy(&value, (const char *)metrics + measures[measure].offset, sizeof value);
    return value;
}

static double rank_discount(size_t rank) {
    return 1.0 / log2((double)rank + 1.0);
}

/* Keeps the largest positive gains, descending, in gains[0..*count): the ideal ranking's top. */
static void add_ideal_gain(long *gains, size_t *count, long gain) {
    size_t position = *count;
    if (position == ISN_EVAL_NDCG_CUTOFF) {
        if (gain <= gains[ISN_EVAL_NDCG_CUTOFF - 1]) return;
        position--;
    } else {
        (*count)++;
    }
    while (position > 0 && gains[position - 1] < gain) {
        gains[position] = gains[position - 1];
        position--;
    }
    gains[position] = gain;
}

isn_eval_metrics isn_eval_query_metrics(const long *ranked, size_t num_ranked, const long *judged,
                                        size_t num_judged) {
    isn_eval_metrics metrics = {0};
    size_t num_relevant = 0, num_ideal_gains = 0;
    long ideal_gains[ISN_EVAL_NDCG_CUTOFF];
    for (size_t i = 0; i < num_judged; i++) {
        if (judged[i] >= 1) num_relevant++;
        if (judged[i] > 0) add_ideal_gain(ideal_gains, &num_ideal_gains, judged[i]);
    }

    size_t relevant_so_far = 0;
    double dcg = 0.0, precision_sum = 0.0;
    for (size_t rank = 1; rank <= num_ranked; rank++) {
        long rel = ranked[rank - 1];
        if (rank <= ISN_EVAL_NDCG_CUTOFF && rel > 0) dcg += (double)rel * rank_discount(rank);
        if (rel < 1) continue;
        relevant_so_far++;
        precision_sum += (double)relevant_so_far / (double)rank;
        if (relevant_so_far == 1 && rank <= ISN_EVAL_RECIP_RANK_CUTOFF) metrics.recip_rank_cut_10 = 1.0 / (double)rank;
        if (rank <= ISN_EVAL_PRECISION_CUTOFF) metrics.p_10 += 1.0 / ISN_EVAL_PRECISION_CUTOFF;
        if (rank <= ISN_EVAL_RECALL_CUTOFF) metrics.recall_100 += 1.0;
    }
    double ideal_dcg = 0.0;
    for (size_t i = 0; i < num_ideal_gains; i++) ideal_dcg += (double)ideal_gains[i] * rank_discount(i + 1);
    if (ideal_dcg > 0.0) metrics.ndcg_cut_10 = dcg / ideal_dcg;
    if (num_relevant > 0) {
        metrics.recall_100 /= (double)num_relevant;
        metrics.map = precision_sum / (double)num_relevant;
    } else {
        metrics.recall_100 = 0.0;
    }
    return metrics;
}

isn_eval_metrics isn_eval_mean(const isn_eval_query_result *queries, size_t num_queries) {
    isn_eval_metrics mean = {0};
    if (num_queries == 0) return mean;
    /* Each measure summed in the queries' order, as trec_eval sums them. */
    for (size_t m = 0; m < ISN_EVAL_MEASURES; m++) {
        double sum = 0.0;
        for (size_t q = 0; q < num_queries; q++) sum += isn_eval_measure_value(&queries[q].metrics, m);
        double value = sum / (double)num_queries;
        memcpy((char *)&mean + measures[m].offset, &value, sizeof value);
    }
    return mean;
}
