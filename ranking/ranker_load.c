/* Ranker files: which model scores the candidates and how each model input is made from the features.
 *
 *     isn-ranker 1
 *     name deb-lambdamart                  optional; default: the file name without its directory
 *     model xgboost|lightgbm|mlp PATH      PATH relative to the ranker file's directory
 *     then mlp PATH                        optional, after a tree model: a stacked ranker, whose score
 *                                          is this MLP's over the ranker's inputs followed by the trees'
 *                                          score (so the MLP declares `inputs` = the ranker's inputs + 1)
 *     input FEATURE                        the feature as is
 *     input FEATURE linear A B             A * x + B
 *     input FEATURE log A B                A * ln(1 + max(x, 0)) + B
 *     input FEATURE bucket B1 B2 ...       the number of bounds <= x (ascending bounds; a bucket
 *                                          includes its lower bound and excludes its upper one)
 *     input tree N                         then N lines, line 0 the root, each either
 *         split FEATURE THRESHOLD L R      x < THRESHOLD goes to line L, else (and NaN) to line R (L, R later lines)
 *         leaf VALUE
 *
 * '#' starts a comment. The k-th input line is the model's input k. Without input lines, the inputs
 * are the feature names the model file declares, as is. Every feature name must be one the index's
 * registry has (isn_feature_lookup): an unknown one is an error here, never a silent zero later. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/ranker.h"

#define RANKER_MAX_INPUTS 4096u
#define RANKER_MAX_TREE_LINES 65536u

typedef struct {
    FILE *in;
    const char *path;
    unsigned long lineno;
    char *line;
    size_t cap;
    char *err;
    size_t err_len;
} reader;

/* Next non-empty line with comments removed, split into at most max tokens. -1 at EOF. */
static int read_tokens(reader *r, char **tok, int max) {
    for (;;) {
        if (getline(&r->line, &r->cap, r->in) < 0)
            return -1;
        r->lineno++;
        char *hash = strchr(r->line, '#');
        if (hash)
            *hash = 0;
        int n = 0;
        for (char *s = strtok(r->line, " \t\r\n"); s && n < max; s = strtok(NULL, " \t\r\n"))
            tok[n++] = s;
        if (n)
            return n;
    }
}

static bool parse_float(const char *s, float *v) {
    char *end;
    *v = strtof(s, &end);
    return end != s && *end == 0;
}

static int lookup(reader *r, const isn_index_info *info, const char *name, uint32_t *id) {
    if (isn_feature_lookup(info, name, id))
        return 0;
    isn_error(r->err, r->err_len, "%s:%lu: unknown feature '%s' (see isn-query --list-features)", r->path,
              r->lineno, name);
    return -1;
}

static int parse_tree_input(reader *r, const isn_index_info *info, ranker_input *in, const char *count) {
    char *end, *tok[8];
    unsigned long n = strtoul(count, &end, 10);
    if (*end || n == 0 || n > RANKER_MAX_TREE_LINES) {
        isn_error(r->err, r->err_len, "%s:%lu: input tree needs a line count (1..%u)", r->path, r->lineno,
                  RANKER_MAX_TREE_LINES);
        return -1;
    }
    in->kind = TX_TREE;
    in->num_lines = (uint32_t)n;
    in->lines = calloc(n, sizeof *in->lines);
    snprintf(in->name, sizeof in->name, "tree");
    if (in->lines == NULL)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        tree_input_line *l = &in->lines[i];
        int k = read_tokens(r, tok, 8);
        if (k == 2 && strcmp(tok[0], "leaf") == 0 && parse_float(tok[1], &l->value)) {
            l->leaf = true;
            continue;
        }
        unsigned long left = 0, right = 0;
        if (k != 5 || strcmp(tok[0], "split") != 0 || !parse_float(tok[2], &l->threshold) ||
            (left = strtoul(tok[3], &end, 10), *end) || (right = strtoul(tok[4], &end, 10), *end)) {
            isn_error(r->err, r->err_len, "%s:%lu: tree line %u: expected \"split FEATURE THRESHOLD L R\" or "
                      "\"leaf VALUE\"", r->path, r->lineno, i);
            return -1;
        }
        if (left <= i || right <= i || left >= n || right >= n) {
            isn_error(r->err, r->err_len, "%s:%lu: tree line %u: children must be later lines below %lu",
                      r->path, r->lineno, i, n);
            return -1;
        }
        if (lookup(r, info, tok[1], &l->feature) != 0)
            return -1;
        l->left = (uint32_t)left;
        l->right = (uint32_t)right;
    }
    return 0;
}

static int parse_input(reader *r, const isn_index_info *info, ranker_input *in, char **tok, int k) {
    if (k >= 3 && strcmp(tok[1], "tree") == 0)
        return k == 3 ? parse_tree_input(r, info, in, tok[2]) : -1;
    snprintf(in->name, sizeof in->name, "%s", tok[1]);
    if (lookup(r, info, tok[1], &in->feature) != 0)
        return -1;
    in->kind = TX_LINEAR;
    in->a = 1;
    if (k == 2)
        return 0;
    if ((strcmp(tok[2], "linear") == 0 || strcmp(tok[2], "log") == 0) && k == 5 && parse_float(tok[3], &in->a) &&
        parse_float(tok[4], &in->b)) {
        in->kind = tok[2][1] == 'o' ? TX_LOG : TX_LINEAR;
        return 0;
    }
    if (strcmp(tok[2], "bucket") == 0 && k > 3) {
        in->kind = TX_BUCKET;
        in->num_bounds = (uint32_t)(k - 3);
        in->bounds = malloc(in->num_bounds * sizeof *in->bounds);
        for (uint32_t i = 0; in->bounds && i < in->num_bounds; i++)
            if (!parse_float(tok[3 + i], &in->bounds[i]) || (i && !(in->bounds[i] > in->bounds[i - 1]))) {
                isn_error(r->err, r->err_len, "%s:%lu: bucket bounds must be numbers in ascending order",
                          r->path, r->lineno);
                return -1;
            }
        return in->bounds ? 0 : -1;
    }
    isn_error(r->err, r->err_len, "%s:%lu: expected \"input FEATURE [linear A B | log A B | bucket B1 ...]\" "
              "or \"input tree N\"", r->path, r->lineno);
    return -1;
}

/* A model file's path: as written when absolute, else relative to the ranker file's directory. */
static void model_file(const reader *r, const char *model_path, char *full, size_t len) {
    char dir_buf[4096];
    snprintf(dir_buf, sizeof dir_buf, "%s", r->path);
    if (model_path[0] == '/')
        snprintf(full, len, "%s", model_path);
    else
        snprintf(full, len, "%s/%s", dirname(dir_buf), model_path);
}

static int load_model(reader *r, isn_ranker *rk, const char *kind, const char *model_path) {
    char full[4096];
    model_file(r, model_path, full, sizeof full);
    if (strcmp(kind, "xgboost") == 0) {
        rk->kind = MODEL_XGBOOST;
        rk->forest = isn_forest_load_xgboost(full, r->err, r->err_len);
    } else if (strcmp(kind, "lightgbm") == 0) {
        rk->kind = MODEL_LIGHTGBM;
        rk->forest = isn_forest_load_lightgbm(full, r->err, r->err_len);
    } else if (strcmp(kind, "mlp") == 0) {
        rk->kind = MODEL_MLP;
        rk->mlp = isn_mlp_load(full, r->err, r->err_len);
    } else {
        isn_error(r->err, r->err_len, "%s:%lu: unknown model kind '%s' (xgboost, lightgbm, mlp)", r->path,
                  r->lineno, kind);
        return -1;
    }
    return rk->forest || rk->mlp ? 0 : -1;
}

/* A `then` line: an MLP stacked on the tree model already loaded. */
static int load_head(reader *r, isn_ranker *rk, bool have_model, char **tok, int k) {
    if (!have_model) {
        isn_error(r->err, r->err_len, "%s:%lu: 'then' without a first model (a \"model xgboost|lightgbm PATH\" "
                  "line must come before it)", r->path, r->lineno);
        return -1;
    }
    if (rk->kind == MODEL_MLP) {
        isn_error(r->err, r->err_len, "%s:%lu: 'then' after an MLP: only a tree model (xgboost, lightgbm) takes an "
                  "MLP after it", r->path, r->lineno);
        return -1;
    }
    if (rk->mlp) {
        isn_error(r->err, r->err_len, "%s:%lu: a second 'then' line: a ranker stacks at most one MLP on its trees",
                  r->path, r->lineno);
        return -1;
    }
    if (k != 3 || strcmp(tok[1], "mlp") != 0) {
        isn_error(r->err, r->err_len, "%s:%lu: expected \"then mlp PATH\" (only an MLP follows the trees)", r->path,
                  r->lineno);
        return -1;
    }
    char full[4096];
    model_file(r, tok[2], full, sizeof full);
    rk->mlp = isn_mlp_load(full, r->err, r->err_len);
    return rk->mlp ? 0 : -1;
}

/* Without input lines the model's declared names are the inputs; with them, names the model declares
 * that are registry names must agree with the ranker's, so a reordered file cannot go unnoticed. */
static int bind_inputs(reader *r, isn_ranker *rk, const isn_index_info *info) {
    uint32_t model_inputs = rk->forest ? isn_forest_num_inputs(rk->forest) : isn_mlp_num_inputs(rk->mlp);
    if (rk->num_inputs == 0 && rk->forest) {
        rk->inputs = calloc(model_inputs, sizeof *rk->inputs);
        for (uint32_t i = 0; rk->inputs && i < model_inputs; i++) {
            const char *name = isn_forest_input_name(rk->forest, i);
            if (name == NULL) {
                isn_error(r->err, r->err_len, "%s: no input lines, and the model does not name its input %u",
                          r->path, i);
                return -1;
            }
            if (!isn_feature_lookup(info, name, &rk->inputs[i].feature)) {
                isn_error(r->err, r->err_len, "%s: the model's input %u is '%s', an unknown feature", r->path,
                          i, name);
                return -1;
            }
            rk->inputs[i].kind = TX_LINEAR;
            rk->inputs[i].a = 1;
            snprintf(rk->inputs[i].name, sizeof rk->inputs[i].name, "%s", name);
            rk->num_inputs++;
        }
    }
    if (rk->num_inputs == 0 || rk->num_inputs < model_inputs || (!rk->forest && rk->num_inputs != model_inputs)) {
        isn_error(r->err, r->err_len, "%s: the ranker gives %u inputs but the model reads %u", r->path,
                  rk->num_inputs, model_inputs);
        return -1;
    }
    for (uint32_t i = 0; rk->forest && i < rk->num_inputs; i++) {
        const char *name = isn_forest_input_name(rk->forest, i);
        uint32_t id;
        if (name && rk->inputs[i].kind != TX_TREE && isn_feature_lookup(info, name, &id) &&
            strcmp(name, rk->inputs[i].name) != 0) {
            isn_error(r->err, r->err_len, "%s: input %u is '%s' here but '%s' in the model", r->path, i,
                      rk->inputs[i].name, name);
            return -1;
        }
    }
    if (rk->forest && rk->mlp && isn_mlp_num_inputs(rk->mlp) != rk->num_inputs + 1) {
        isn_error(r->err, r->err_len, "%s: the MLP after 'then' reads %u inputs, but the ranker gives %u inputs and "
                  "the trees' score (%u)", r->path, isn_mlp_num_inputs(rk->mlp), rk->num_inputs, rk->num_inputs + 1);
        return -1;
    }
    return 0;
}

isn_ranker *isn_ranker_load(const char *path, const isn_index_info *info, char *err, size_t err_len) {
    reader r = {.in = isn_fopen_regular(path, "r"), .path = path, .err = err, .err_len = err_len};
    if (err && err_len)
        err[0] = 0;
    if (r.in == NULL) {
        isn_error(err, err_len, "%s: cannot open ranker file", path);
        return NULL;
    }
    isn_ranker *rk = calloc(1, sizeof *rk);
    char *tok[4 + 1024];
    int k = read_tokens(&r, tok, 4);
    if (rk == NULL || k != 2 || strcmp(tok[0], "isn-ranker") || strcmp(tok[1], "1")) {
        isn_error(err, err_len, "%s: not a ranker file (the first line must be \"isn-ranker 1\")", path);
        goto fail;
    }
    const char *base = strrchr(path, '/');
    snprintf(rk->name, sizeof rk->name, "%s", base ? base + 1 : path);
    rk->num_features = isn_feature_count(info);
    rk->inputs = calloc(RANKER_MAX_INPUTS, sizeof *rk->inputs);
    if (rk->inputs == NULL)
        goto fail;
    bool have_model = false;
    while ((k = read_tokens(&r, tok, 4 + 1024)) > 0) {
        if (strcmp(tok[0], "name") == 0 && k == 2) {
            snprintf(rk->name, sizeof rk->name, "%s", tok[1]);
        } else if (strcmp(tok[0], "model") == 0 && k == 3 && !have_model) {
            if (load_model(&r, rk, tok[1], tok[2]) != 0)
                goto fail;
            have_model = true;
        } else if (strcmp(tok[0], "then") == 0) {
            if (load_head(&r, rk, have_model, tok, k) != 0)
                goto fail;
        } else if (strcmp(tok[0], "input") == 0 && k >= 2) {
            if (rk->num_inputs == RANKER_MAX_INPUTS) {
                isn_error(err, err_len, "%s:%lu: more than %u inputs", path, r.lineno, RANKER_MAX_INPUTS);
                goto fail;
            }
            if (parse_input(&r, info, &rk->inputs[rk->num_inputs++], tok, k) != 0) {
                if (err && err_len && !err[0])
                    isn_error(err, err_len, "%s:%lu: bad input line", path, r.lineno);
                goto fail;
            }
        } else {
            isn_error(err, err_len, "%s:%lu: expected name, model (once), then or input, got '%s'", path, r.lineno,
                      tok[0]);
            goto fail;
        }
    }
    if (!have_model) {
        isn_error(err, err_len, "%s: no model line", path);
        goto fail;
    }
    if (rk->num_inputs == 0) {
        free(rk->inputs);
        rk->inputs = NULL;
    }
    if (bind_inputs(&r, rk, info) != 0)
        goto fail;
    free(r.line);
    fclose(r.in);
    return rk;
fail:
    free(r.line);
    fclose(r.in);
    isn_ranker_free(rk);
    return NULL;
}

void isn_ranker_free(isn_ranker *rk) {
    if (rk == NULL)
        return;
    for (uint32_t i = 0; rk->inputs && i < rk->num_inputs; i++) {
        free(rk->inputs[i].bounds);
        free(rk->inputs[i].lines);
    }
    free(rk->inputs);
    isn_forest_free(rk->forest);
    isn_mlp_free(rk->mlp);
    free(rk);
}

const char *isn_ranker_name(const isn_ranker *rk) {
    return rk->name;
}

uint32_t isn_ranker_num_inputs(const isn_ranker *rk) {
    return rk->num_inputs;
}

const char *isn_ranker_model_kind(const isn_ranker *rk) {
    if (rk->forest && rk->mlp)
        return rk->kind == MODEL_XGBOOST ? "xgboost+mlp" : "lightgbm+mlp";
    return rk->kind == MODEL_XGBOOST ? "xgboost" : rk->kind == MODEL_LIGHTGBM ? "lightgbm" : "mlp";
}

uint32_t isn_ranker_num_trees(const isn_ranker *rk) {
    return rk->forest ? isn_forest_num_trees(rk->forest) : 0;
}
