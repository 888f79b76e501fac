/* Paired significance of the difference between two runs over the same judged queries: Student's
 * paired t-test and the paired randomization (sign-flip) test that IR evaluation prefers (Smucker,
 * Allan and Carterette 2007). See isn_eval_compare in ranking.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/ranking.h"

/* Up to this many queries every sign pattern is enumerated: the p value is exact. */
#define EXACT_RANDOMIZATION_QUERIES 16

/* Continued fraction of the regularized incomplete beta function (modified Lentz). */
static double beta_continued_fraction(double a, double b, double x) {
    const double tiny = 1e-300;
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
    d = fabs(d) < tiny ? tiny : d;
    d = 1.0 / d;
    double h = d;
    for (int m = 1; m <= 400; m++) {
        double m2 = 2.0 * m, aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        d = 1.0 + aa * d;
        d = fabs(d) < tiny ? tiny : d;
        c = 1.0 + aa / c;
        c = fabs(c) < tiny ? tiny : c;
        d = 1.0 / d;
        h *= d * c;
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
        d = 1.0 + aa * d;
        d = fabs(d) < tiny ? tiny : d;
        c = 1.0 + aa / c;
        c = fabs(c) < tiny ? tiny : c;
        d = 1.0 / d;
        double step = d * c;
        h *= step;
        if (fabs(step - 1.0) < 1e-15)
            break;
    }
    return h;
}

static double regularized_incomplete_beta(double a, double b, double x) {
    if (x <= 0.0)
        return 0.0;
    if (x >= 1.0)
        return 1.0;
    double front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
    if (x < (a + 1.0) / (a + b + 2.0))
        return front * beta_continued_fraction(a, b, x) / a;
    return 1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b;
}

double isn_student_t_two_sided_p(double t, double dof) {
    if (isnan(t) || dof <= 0)
        return NAN;
    return regularized_incomplete_beta(dof / 2.0, 0.5, dof / (dof + t * t));
}

static uint64_t next_random(uint64_t *state) { /* splitmix64 */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Two-sided: the share of sign assignments whose |sum| reaches the observed one. A tolerance keeps a
 * pattern that equals the observed sum up to rounding counted. */
static double randomization_p(const double *diff, size_t n, uint32_t trials, uint64_t seed, uint32_t *done) {
    double observed = 0;
    for (size_t i = 0; i < n; i++) observed += diff[i];
    double bar = fabs(observed) - 1e-9 * (1.0 + fabs(observed));
    if (n <= EXACT_RANDOMIZATION_QUERIES) {
        uint64_t patterns = 1ull << n, hits = 0;
        for (uint64_t p = 0; p < patterns; p++) {
            double s = 0;
            for (size_t i = 0; i < n; i++) s += (p >> i & 1) ? -diff[i] : diff[i];
            hits += fabs(s) >= bar;
        }
        *done = 0;
        return (double)hits / (double)patterns;
    }
    uint64_t state = seed, hits = 0;
    for (uint32_t t = 0; t < trials; t++) {
        double s = 0;
        uint64_t bits = 0;
        for (size_t i = 0; i < n; i++) {
            if (i % 64 == 0)
                bits = next_random(&state);
            s += (bits & 1) ? -diff[i] : diff[i];
            bits >>= 1;
        }
        hits += fabs(s) >= bar;
    }
    *done = trials;
    /* The observed assignment is one of the trials' population: (hits + 1) / (trials + 1) never says 0. */
    return (double)(hits + 1) / (double)(trials + 1);
}

int isn_eval_compare(const isn_eval_report *baseline, const isn_eval_report *run, size_t measure, uint32_t trials,
                     uint64_t seed, isn_eval_paired *out, char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    if (measure >= ISN_EVAL_MEASURES)
        return isn_error(err, err_len, "no measure %zu (there are %d)", measure, ISN_EVAL_MEASURES);
    if (trials == 0)
        return isn_error(err, err_len, "the randomization test needs at least one trial");
    size_t cap = baseline->num_queries + run->num_queries;
    double *diff = malloc((cap ? cap : 1) * sizeof *diff);
    if (diff == NULL)
        return isn_error(err, err_len, "out of memory");
    /* Both reports list their queries in strcmp order: a merge pairs them; a query one run did not
     * answer scores 0 there, as trec_eval -c counts it. */
    size_t i = 0, j = 0, n = 0;
    double sum_a = 0, sum_b = 0;
    while (i < baseline->num_queries || j < run->num_queries) {
        int order = i == baseline->num_queries ? 1
                    : j == run->num_queries    ? -1
                                               : strcmp(baseline->queries[i].query_id, run->queries[j].query_id);
        double a = order <= 0 ? isn_eval_measure_value(&baseline->queries[i].metrics, measure) : 0;
        double b = order >= 0 ? isn_eval_measure_value(&run->queries[j].metrics, measure) : 0;
        i += order <= 0;
        j += order >= 0;
        diff[n++] = b - a;
        sum_a += a;
        sum_b += b;
        out->wins += b > a;
        out->losses += b < a;
    }
    out->num_queries = n;
    if (n == 0) {
        free(diff);
        return isn_error(err, err_len, "no query to compare: neither run answers a judged query");
    }
    out->mean_baseline = sum_a / n;
    out->mean_run = sum_b / n;
    double mean = 0;
    for (size_t q = 0; q < n; q++) mean += diff[q];
    mean /= n;
    double squares = 0;
    for (size_t q = 0; q < n; q++) squares += (diff[q] - mean) * (diff[q] - mean);
    out->mean_difference = mean;
    if (n < 2) {
        out->t = NAN;
        out->t_p = NAN;
    } else if (squares == 0) {
        out->t = mean == 0 ? 0 : copysign(INFINITY, mean);
        out->t_p = mean == 0 ? 1.0 : 0.0;
    } else {
        double standard_error = sqrt(squares / (double)(n - 1) / (double)n);
        out->t = mean / standard_error;
        out->t_p = isn_student_t_two_sided_p(out->t, (double)(n - 1));
    }
    out->randomization_p = randomization_p(diff, n, trials, seed, &out->randomization_trials);
    free(diff);
    return 0;
}
