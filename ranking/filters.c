/* Filter clauses over the index's document attributes: compiled once per query (names and keyword
 * values to ids), then tested per candidate before it is scored. */
#include "ranking/ranking_internal.h"

int ranking_compile_filters(isn_searcher *searcher, const isn_filter_spec *filters, uint32_t num_filters,
                            ranking_filter *out, int64_t *values, uint32_t *num_values, char *err, size_t err_len) {
    (void)searcher;
    (void)out;
    (void)values;
    *num_values = 0;
    if (num_filters == 0) return 0;
    isn_error(err, err_len, "filter on '%s': this index has no attributes (isn-index build --attribute NAME:keyword|int)",
              filters[0].attribute ? filters[0].attribute : "");
    return -1;
}

bool ranking_filters_accept(const isn_index *index, const ranking_filter *filters, uint32_t num_filters,
                            const int64_t *values, uint32_t doc) {
    (void)index;
    (void)filters;
    (void)num_filters;
    (void)values;
    (void)doc;
    return true;
}
