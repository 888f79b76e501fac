/* The model and ranker loaders: XGBoost JSON, LightGBM text, the MLP format and ranker files (which
 * name a model and the features it reads), each given the input as its file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ranking/ranking.h"

static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    snprintf(path, sizeof path, "/tmp/isn-fuzz-model-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) abort();
    close(fd);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fwrite(data + 1, 1, size - 1, f);
    fclose(f);
    char err[1024];
    switch (data[0] % 4) {
    case 0: isn_forest_free(isn_forest_load_xgboost(path, err, sizeof err)); break;
    case 1: isn_forest_free(isn_forest_load_lightgbm(path, err, sizeof err)); break;
    case 2: isn_mlp_free(isn_mlp_load(path, err, sizeof err)); break;
    default: {
        isn_index_info info;
        memset(&info, 0, sizeof info);
        info.num_fields = 2;
        strcpy(info.fields[0], "title");
        strcpy(info.fields[1], "body");
        info.num_docs = 1000;
        info.avg_doc_len = 50.0f;
        info.bm25.k1 = 0.9f;
        info.bm25.b = 0.4f;
        isn_ranker_free(isn_ranker_load(path, &info, err, sizeof err));
    }
    }
    return 0;
}
