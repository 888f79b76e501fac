/* Private to ranking/: a loaded ranker (model inputs with their transforms, and the model). */
#ifndef ISN_RANKING_RANKER_H
#define ISN_RANKING_RANKER_H

#include "ranking/l2_internal.h"

typedef enum { TX_LINEAR, TX_LOG, TX_BUCKET, TX_TREE, TX_KINDS } transform_kind;

/* A line of a decision-tree input: a split (x < threshold goes to `left`, else and NaN to `right`;
 * both are later lines) or a leaf. */
typedef struct {
    bool leaf;
    uint32_t feature;
    float threshold;
    uint32_t left, right;
    float value;
} tree_input_line;

typedef struct {
    transform_kind kind;
    uint32_t feature; /* registry id; unused by TX_TREE */
    float a, b;       /* linear: a * x + b; log: a * ln(1 + max(x, 0)) + b */
    float *bounds;    /* bucket: ascending */
    uint32_t num_bounds;
    tree_input_line *lines;
    uint32_t num_lines;
    char name[ISN_FEATURE_NAME_MAX];
} ranker_input;

typedef enum { MODEL_XGBOOST, MODEL_LIGHTGBM, MODEL_MLP } model_kind;

struct isn_ranker {
    char name[64];
    model_kind kind;
    isn_forest *forest;
    isn_mlp *mlp;
    ranker_input *inputs;
    uint32_t num_inputs;
    uint32_t num_features; /* of the index it was loaded for */
};

float transform_tree_input(const ranker_input *in, const float *row);

#endif
