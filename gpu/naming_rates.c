/* Expected namings of each list (naming_rates.h). */
#include <stdbool.h>
#include <string.h>

#include "gpu/naming_rates.h"

#define DF_BANDS 33 /* df 0 and the 32 binary orders of magnitude */

static uint32_t df_band(uint32_t df) { return df ? 32u - (uint32_t)__builtin_clz(df) : 0u; }

void naming_rates(const isn_index *ix, const isn_query *log, uint32_t log_length, double *rates, bool *named) {
    const uint32_t nt = isn_index_get_info(ix)->num_terms;
    memset(rates, 0, (size_t)nt * sizeof *rates);
    for (uint32_t i = 0; i < log_length; i++)
        for (uint32_t j = 0; j < log[i].num_terms; j++)
            if (log[i].terms[j].term_id < nt) rates[log[i].terms[j].term_id] += 1.0;
    uint64_t once[DF_BANDS] = {0}, never[DF_BANDS] = {0};
    for (uint32_t t = 0; t < nt; t++) {
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        const uint32_t band = df_band(st.df);
        once[band] += rates[t] == 1.0;
        never[band] += rates[t] == 0.0;
    }
    for (uint32_t t = 0; t < nt; t++) {
        if (named) named[t] = rates[t] > 0.0;
        if (rates[t] > 0.0) continue;
        isn_term_stats st;
        isn_index_term_stats(ix, t, &st);
        const uint32_t band = df_band(st.df);
        rates[t] = st.df ? (double)(once[band] + 1) / (double)(never[band] + 1) : 0.0;
    }
}
