/* XGBoost JSON models (Booster.save_model with a .json name), gbtree booster, one output.
 * Semantics kept: x < split_condition goes left, NaN follows default_left, a leaf's value is its
 * split_condition entry, base_score is a margin (for logistic objectives the probability's logit). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/trees.h"

static const json_t *get_path(const json_t *root, const char *const *keys, uint32_t n) {
    for (uint32_t i = 0; i < n && root; i++)
        root = json_object_get(root, keys[i]);
    return root;
}

/* A number that XGBoost writes either as a JSON number or as a string ("5E-1", "[5E-1]"). */
static bool number_of(const json_t *v, double *out) {
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return true;
    }
    if (!json_is_string(v))
        return false;
    const char *s = json_string_value(v);
    if (*s == '[')
        s++;
    char *end;
    *out = strtod(s, &end);
    return end != s && (*end == 0 || *end == ']');
}

static int load_tree(isn_forest *f, const json_t *tree, uint32_t t, const char *path, char *err, size_t err_len) {
    const json_t *left = json_object_get(tree, "left_children"), *right = json_object_get(tree, "right_children");
    const json_t *cond = json_object_get(tree, "split_conditions"), *index = json_object_get(tree, "split_indices");
    const json_t *def = json_object_get(tree, "default_left"), *type = json_object_get(tree, "split_type");
    size_t n = json_array_size(left);
    if (!json_is_array(left) || n == 0 || json_array_size(right) != n || json_array_size(cond) != n ||
        json_array_size(index) != n || json_array_size(def) != n) {
        isn_error(err, err_len, "%s: tree %u lacks left_children/right_children/split_conditions/"
                  "split_indices/default_left arrays of one length", path, t);
        return -1;
    }
    /* XGBoost numbers nodes in one array; ISN keeps splits and leaves apart. */
    int32_t *map = malloc(n * sizeof *map);
    uint32_t splits = 0, leaves = 0;
    if (map == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        map[i] = json_integer_value(json_array_get(left, i)) == -1 ? ~(int32_t)leaves++ : (int32_t)splits++;
    forest_node *nodes;
    double *leaf_values;
    if (forest_add_tree(f, splits, leaves, &nodes, &leaf_values) != 0) {
        free(map);
        isn_error(err, err_len, "%s: out of memory at tree %u", path, t);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        double c;
        if (!number_of(json_array_get(cond, i), &c)) {
            isn_error(err, err_len, "%s: tree %u node %zu: split_condition is not a number", path, t, i);
            free(map);
            return -1;
        }
        if (map[i] < 0) {
            leaf_values[~map[i]] = (double)(float)c;
            continue;
        }
        json_int_t l = json_integer_value(json_array_get(left, i)), r = json_integer_value(json_array_get(right, i));
        json_int_t feature = json_integer_value(json_array_get(index, i));
        if (type && json_integer_value(json_array_get(type, i)) != 0) {
            isn_error(err, err_len, "%s: tree %u node %zu is a categorical split, which ISN does not support",
                      path, t, i);
            free(map);
            return -1;
        }
        if (l < 0 || r < 0 || (size_t)l >= n || (size_t)r >= n || feature < 0 || feature > 65535) {
            isn_error(err, err_len, "%s: tree %u node %zu: child or split index out of range", path, t, i);
            free(map);
            return -1;
        }
        const json_t *d = json_array_get(def, i);
        bool default_left = json_is_true(d) || (json_is_integer(d) && json_integer_value(d) != 0);
        forest_node *node = &nodes[map[i]];
        *node = (forest_node){.feature = (uint32_t)feature, .threshold = (float)c, .left = map[l], .right = map[r],
                              .nan_right = !default_left};
    }
    free(map);
    return 0;
}

isn_forest *isn_forest_load_xgboost(const char *path, char *err, size_t err_len) {
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_DECODE_ANY, &jerr);
    if (root == NULL) {
        isn_error(err, err_len, "%s: not valid JSON (line %d: %s)", path, jerr.line, jerr.text);
        return NULL;
    }
    isn_forest *f = forest_new();
    const char *booster_keys[] = {"learner", "gradient_booster", "name"};
    const char *trees_keys[] = {"learner", "gradient_booster", "model", "trees"};
    const char *base_keys[] = {"learner", "learner_model_param", "base_score"};
    const char *class_keys[] = {"learner", "learner_model_param", "num_class"};
    const char *feat_keys[] = {"learner", "learner_model_param", "num_feature"};
    const char *objective_keys[] = {"learner", "objective", "name"};
    const char *names_keys[] = {"learner", "feature_names"};
    const json_t *booster = get_path(root, booster_keys, 3), *trees = get_path(root, trees_keys, 4);
    double base = 0.5, num_class = 0, num_feature = 0;
    const char *objective = json_string_value(get_path(root, objective_keys, 3));
    if (f == NULL) {
        isn_error(err, err_len, "%s: out of memory", path);
        goto fail;
    }
    if (!json_is_string(booster) || !json_is_array(trees)) {
        isn_error(err, err_len, "%s: not an XGBoost JSON model (no learner.gradient_booster.model.trees)", path);
        goto fail;
    }
    if (strcmp(json_string_value(booster), "gbtree") != 0) {
        isn_error(err, err_len, "%s: booster '%s' is not supported (gbtree only)", path,
                  json_string_value(booster));
        goto fail;
    }
    if (!number_of(get_path(root, base_keys, 3), &base)) {
        isn_error(err, err_len, "%s: learner_model_param.base_score is missing or not a number", path);
        goto fail;
    }
    if (number_of(get_path(root, class_keys, 3), &num_class) && num_class > 1) {
        isn_error(err, err_len, "%s: a multi-class model (num_class %.0f) has no single score", path, num_class);
        goto fail;
    }
    if (objective && (strcmp(objective, "binary:logistic") == 0 || strcmp(objective, "reg:logistic") == 0)) {
        if (!(base > 0 && base < 1)) {
            isn_error(err, err_len, "%s: logistic base_score %g is not in (0, 1)", path, base);
            goto fail;
        }
        base = log(base / (1 - base));
    }
    f->base_score = (float)base;
    f->sum_in_double = false;
    for (size_t t = 0; t < json_array_size(trees); t++)
        if (load_tree(f, json_array_get(trees, t), (uint32_t)t, path, err, err_len) != 0)
            goto fail;
    if (number_of(get_path(root, feat_keys, 3), &num_feature) && num_feature > 0 && num_feature < 65536)
        f->num_inputs = (uint32_t)num_feature;
    const json_t *names = get_path(root, names_keys, 2);
    if (json_is_array(names) && json_array_size(names) > 0) {
        f->input_names = calloc(json_array_size(names), sizeof(char *));
        for (size_t i = 0; f->input_names && i < json_array_size(names); i++) {
            const char *s = json_string_value(json_array_get(names, i));
            f->input_names[f->num_named++] = strdup(s ? s : "");
        }
    }
    if (forest_finish(f, path, err, err_len) != 0)
        goto fail;
    json_decref(root);
    return f;
fail:
    isn_forest_free(f);
    json_decref(root);
    return NULL;
}
