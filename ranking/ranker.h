/* Private to ranking/: a loaded ranker (model inputs with their transforms, and the model). */
#ifndef ISN_RANKING_RANKER_H
#define ISN_RANKING_RANKER_H

#include "ranking/l2_internal.h"

/* The transforms and tree lines are ranking.h's (feature_rows.h), which gpu/ evaluates too. */
typedef isn_transform_kind transform_kind;
#define TX_LINEAR ISN_TRANSFORM_LINEAR
#define TX_LOG ISN_TRANSFORM_LOG
#define TX_BUCKET ISN_TRANSFORM_BUCKET
#define TX_TREE ISN_TRANSFORM_TREE
#define TX_KINDS ISN_TRANSFORM_KINDS
typedef isn_transform_tree_line tree_input_line;

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
    isn_forest *forest; /* the trees, or NULL */
    isn_mlp *mlp;       /* the MLP, or NULL; with trees too (stacked, a `then mlp` line) it reads the
                         * ranker's inputs followed by the trees' score */
    ranker_input *inputs;
    uint32_t num_inputs;
    uint32_t num_features; /* of the index it was loaded for */
};


#endif
