/* Algorithm names, the mode each implements, and default search options. */
#include <string.h>

#include "ranking/ranking.h"

static const char *const algo_names[ISN_ALGO_COUNT] = {
    [ISN_ALGO_AUTO] = "auto", [ISN_ALGO_OR] = "or",   [ISN_ALGO_AND] = "and",     [ISN_ALGO_MAXSCORE] = "maxscore",
    [ISN_ALGO_WAND] = "wand", [ISN_ALGO_BMW] = "bmw", [ISN_ALGO_BMAND] = "bmand",
    [ISN_ALGO_BMM] = "bmm",
};

const char *isn_algo_name(isn_algo algo) {
    if ((unsigned)algo >= ISN_ALGO_COUNT)
        return "unknown";
    return algo_names[algo];
}

bool isn_algo_from_name(const char *name, isn_algo *algo) {
    if (name == NULL)
        return false;
    for (unsigned i = 0; i < ISN_ALGO_COUNT; i++) {
        if (strcmp(name, algo_names[i]) == 0) {
            *algo = (isn_algo)i;
            return true;
        }
    }
    return false;
}

isn_mode isn_algo_mode(isn_algo algo, isn_mode default_mode) {
    switch (algo) {
    case ISN_ALGO_OR:
    case ISN_ALGO_MAXSCORE:
    case ISN_ALGO_WAND:
    case ISN_ALGO_BMW:
    case ISN_ALGO_BMM:
        return ISN_MODE_OR;
    case ISN_ALGO_AND:
    case ISN_ALGO_BMAND:
        return ISN_MODE_AND;
    default:
        return default_mode;
    }
}

void isn_search_options_default(isn_search_options *options) {
    memset(options, 0, sizeof *options);
    options->mode = ISN_MODE_OR;
    options->algo = ISN_ALGO_AUTO;
    options->k = 10;
    options->num_docs = 0;
    options->deadline_ns = 0;
    options->early_stop_fraction = 1.0;
    options->initial_threshold = 0.0f;
    options->prior_weight = 0.0f;
}
