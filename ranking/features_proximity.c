/* Proximity features of one field: smallest window holding all matched query terms, and pairs of
 * consecutive query terms found near each other. Linear merges over the sorted position lists. */
#include "ranking/l2_internal.h"

/* Smallest gap q - p (q from b, p from a, q > p); UINT32_MAX when b has nothing after any p. */
static uint32_t smallest_forward_gap(const uint32_t *a, uint32_t na, const uint32_t *b, uint32_t nb) {
    uint32_t best = UINT32_MAX, j = 0;
    for (uint32_t i = 0; i < na; i++) {
        while (j < nb && b[j] <= a[i]) j++;
        if (j == nb)
            break;
        if (b[j] - a[i] < best)
            best = b[j] - a[i];
    }
    return best;
}

/* The classic k-list sweep: repeatedly advance the list holding the window's smallest position. */
static uint32_t smallest_window(const uint32_t *const *lists, const uint32_t *counts, uint32_t num_terms,
                                uint32_t *at) {
    uint32_t present = 0;
    for (uint32_t t = 0; t < num_terms; t++) {
        at[t] = 0;
        present += counts[t] > 0;
    }
    if (present == 0)
        return 0;
    uint32_t best = UINT32_MAX;
    for (;;) {
        uint32_t lo = UINT32_MAX, hi = 0, lo_term = 0;
        for (uint32_t t = 0; t < num_terms; t++) {
            if (counts[t] == 0)
                continue;
            uint32_t p = lists[t][at[t]];
            if (p < lo) {
                lo = p;
                lo_term = t;
            }
            if (p > hi)
                hi = p;
        }
        if (hi - lo + 1 < best)
            best = hi - lo + 1;
        if (++at[lo_term] == counts[lo_term])
            return best;
    }
}

/* Dynamic programming over the terms in query order: run_prev[i] is the longest run ending at term
 * t - 1's i-th position; a position of term t extends the best run ending 1..L2_RUN_GAP before it. */
static uint32_t longest_run(const uint32_t *const *lists, const uint32_t *counts, uint32_t num_terms) {
    uint32_t runs[2][L2_POS_CAP];
    uint32_t best = 0;
    for (uint32_t t = 0; t < num_terms; t++) {
        uint32_t *run = runs[t & 1];
        const uint32_t *prev = runs[(t & 1) ^ 1];
        uint32_t prev_count = t > 0 ? counts[t - 1] : 0, j = 0;
        for (uint32_t i = 0; i < counts[t]; i++) {
            uint32_t q = lists[t][i], longest_before = 0;
            while (j < prev_count && lists[t - 1][j] + L2_RUN_GAP < q) j++;
            for (uint32_t k = j; k < prev_count && lists[t - 1][k] < q; k++)
                longest_before = prev[k] > longest_before ? prev[k] : longest_before;
            run[i] = longest_before + 1;
            best = run[i] > best ? run[i] : best;
        }
    }
    return best;
}

void l2_proximity_compute(const uint32_t *const *lists, const uint32_t *counts, uint32_t num_terms,
                          uint32_t *cursor_scratch, l2_proximity *out) {
    out->min_window = smallest_window(lists, counts, num_terms, cursor_scratch);
    out->ordered_pairs = out->unordered_pairs = out->adjacent_pairs = 0;
    out->longest_run = longest_run(lists, counts, num_terms);
    out->lead_terms = 0;
    for (uint32_t t = 0; t < num_terms; t++)
        out->lead_terms += counts[t] > 0 && lists[t][0] < L2_LEAD_POSITIONS;
    for (uint32_t t = 0; t + 1 < num_terms; t++) {
        if (counts[t] == 0 || counts[t + 1] == 0)
            continue;
        uint32_t forward = smallest_forward_gap(lists[t], counts[t], lists[t + 1], counts[t + 1]);
        uint32_t backward = smallest_forward_gap(lists[t + 1], counts[t + 1], lists[t], counts[t]);
        out->adjacent_pairs += forward == 1;
        out->ordered_pairs += forward <= L2_PAIR_WINDOW;
        out->unordered_pairs += forward <= L2_PAIR_WINDOW || backward <= L2_PAIR_WINDOW;
    }
}
