/* LightGBM text models (model.txt). Semantics kept: x <= threshold goes left (compared in double);
 * decision_type bit 0 = categorical (refused), bit 1 = default left, bits 2-3 = missing type (0 None:
 * NaN is read as 0; 1 Zero: 0 and NaN take the default direction; 2 NaN: NaN takes it); leaves are
 * summed in double; no separate base score (LightGBM folds the initial score into the first tree);
 * average_output (random forest) divides by the number of trees. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranking/trees.h"

/* Smallest float s with (double)s > v: "x <= v" for a float x is then "x < s", ISN's split form. */
static float strict_upper(double v) {
    if (v >= (double)FLT_MAX)
        return INFINITY; /* every finite float is <= v */
    float s = (float)v;
    if ((double)s <= v)
        s = nextafterf(s, INFINITY);
    while ((double)nextafterf(s, -INFINITY) > v)
        s = nextafterf(s, -INFINITY);
    return s;
}

/* Value of "key=" in lines [from, to): the rest of that line, or NULL. */
static char *find_key(char **lines, size_t from, size_t to, const char *key) {
    size_t len = strlen(key);
    for (size_t i = from; i < to; i++)
        if (strncmp(lines[i], key, len) == 0 && lines[i][len] == '=')
            return lines[i] + len + 1;
    return NULL;
}

/* Parses exactly n numbers from a space-separated list; false when there are fewer, more or bad ones. */
static bool parse_doubles(const char *s, double *out, size_t n) {
    char *end;
    for (size_t i = 0; i < n; i++) {
        out[i] = strtod(s, &end);
        if (end == s)
            return false;
        s = end;
    }
    while (*s == ' ' || *s == '\t' || *s == '\r')
        s++;
    return *s == 0;
}

static int load_tree(isn_forest *f, char **lines, size_t from, size_t to, uint32_t t, const char *path, char *err,
                     size_t err_len) {
    char *v = find_key(lines, from, to, "num_leaves");
    long num_leaves = v ? strtol(v, NULL, 10) : 0;
    if (num_leaves < 1 || num_leaves > (1 << 24)) {
        isn_error(err, err_len, "%s: Tree=%u: num_leaves missing or out of range", path, t);
        return -1;
    }
    if ((v = find_key(lines, from, to, "num_cat")) && strtol(v, NULL, 10) != 0) {
        isn_error(err, err_len, "%s: Tree=%u has categorical splits, which ISN does not support", path, t);
        return -1;
    }
    if ((v = find_key(lines, from, to, "is_linear")) && strtol(v, NULL, 10) != 0) {
        isn_error(err, err_len, "%s: Tree=%u is a linear tree, which ISN does not support", path, t);
        return -1;
    }
    size_t nl = (size_t)num_leaves, ns = nl - 1;
    double *buf = malloc((5 * ns + nl + 1) * sizeof *buf);
    double *feature = buf, *threshold = buf + ns, *decision = buf + 2 * ns, *left = buf + 3 * ns,
           *right = buf + 4 * ns, *leaf = buf + 5 * ns;
    forest_node *nodes;
    double *leaves;
    int rc = -1;
    const char *what = NULL;
    if (buf == NULL || forest_add_tree(f, (uint32_t)ns, (uint32_t)nl, &nodes, &leaves) != 0) {
        isn_error(err, err_len, "%s: out of memory at Tree=%u", path, t);
        goto out;
    }
    if (!(v = find_key(lines, from, to, "leaf_value")) || !parse_doubles(v, leaf, nl))
        what = "leaf_value";
    else if (ns && (!(v = find_key(lines, from, to, "split_feature")) || !parse_doubles(v, feature, ns)))
        what = "split_feature";
    else if (ns && (!(v = find_key(lines, from, to, "threshold")) || !parse_doubles(v, threshold, ns)))
        what = "threshold";
    else if (ns && (!(v = find_key(lines, from, to, "decision_type")) || !parse_doubles(v, decision, ns)))
        what = "decision_type";
    else if (ns && (!(v = find_key(lines, from, to, "left_child")) || !parse_doubles(v, left, ns)))
        what = "left_child";
    else if (ns && (!(v = find_key(lines, from, to, "right_child")) || !parse_doubles(v, right, ns)))
        what = "right_child";
    if (what) {
        isn_error(err, err_len, "%s: Tree=%u: %s is missing or does not hold %zu numbers", path, t, what,
                  strcmp(what, "leaf_value") ? ns : nl);
        goto out;
    }
    for (size_t i = 0; i < nl; i++)
        leaves[i] = leaf[i];
    for (size_t i = 0; i < ns; i++) {
        /* LightGBM writes decision_type as a small bit set (categorical, default left, missing type) */
        if (!(decision[i] >= 0.0 && decision[i] <= 255.0) || decision[i] != floor(decision[i])) {
            isn_error(err, err_len, "%s: Tree=%u node %zu: decision_type %g is not a bit set of 0 to 255", path, t, i,
                      decision[i]);
            goto out;
        }
        int dt = (int)decision[i], missing = (dt >> 2) & 3;
        bool default_left = (dt & 2) != 0;
        if (dt & 1) {
            isn_error(err, err_len, "%s: Tree=%u node %zu is a categorical split", path, t, i);
            goto out;
        }
        if (missing == 3 || feature[i] < 0 || feature[i] > 65535 || isnan(threshold[i]) ||
            fabs(left[i]) > (double)nl || fabs(right[i]) > (double)nl) {
            isn_error(err, err_len, "%s: Tree=%u node %zu: bad missing type, feature or child", path, t, i);
            goto out;
        }
        forest_node *n = &nodes[i];
        n->feature = (uint32_t)feature[i];
        n->threshold = strict_upper(threshold[i]);
        n->left = (int32_t)left[i]; /* LightGBM writes leaf j as ~j (-j - 1), as ISN does */
        n->right = (int32_t)right[i];
        n->zero_missing = missing == 1;
        if (missing == 0) /* None: NaN is read as 0.0 and compared */
            n->nan_right = !(0.0 <= threshold[i]);
        else
            n->nan_right = !default_left;
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

isn_forest *isn_forest_load_lightgbm(const char *path, char *err, size_t err_len) {
    FILE *in = isn_fopen_regular(path, "rb");
    if (in == NULL) {
        isn_error(err, err_len, "%s: cannot open", path);
        return NULL;
    }
    char *text = NULL, **lines = NULL;
    size_t len = 0, num_lines = 0, cap_lines = 0;
    FILE *mem = open_memstream(&text, &len);
    char chunk[65536];
    size_t got;
    while (mem && (got = fread(chunk, 1, sizeof chunk, in)) > 0)
        fwrite(chunk, 1, got, mem);
    fclose(in);
    isn_forest *f = forest_new();
    if (mem == NULL || fclose(mem) != 0 || f == NULL) {
        isn_error(err, err_len, "%s: out of memory", path);
        goto fail;
    }
    for (char *p = text, *next; p && *p; p = next) {
        next = strchr(p, '\n');
        if (next)
            *next++ = 0;
        size_t l = strlen(p);
        if (l && p[l - 1] == '\r')
            p[l - 1] = 0;
        if (num_lines == cap_lines) {
            cap_lines = cap_lines ? cap_lines * 2 : 1024;
            char **grown = realloc(lines, cap_lines * sizeof *grown);
            if (grown == NULL) {
                isn_error(err, err_len, "%s: out of memory", path);
                goto fail;
            }
            lines = grown;
        }
        lines[num_lines++] = p;
    }
    if (num_lines == 0 || strcmp(lines[0], "tree") != 0) {
        isn_error(err, err_len, "%s: not a LightGBM text model (first line is not \"tree\")", path);
        goto fail;
    }
    size_t first_tree = 0;
    while (first_tree < num_lines && strncmp(lines[first_tree], "Tree=", 5) != 0)
        first_tree++;
    char *v;
    if ((v = find_key(lines, 0, first_tree, "num_class")) && strtol(v, NULL, 10) != 1) {
        isn_error(err, err_len, "%s: num_class=%s: only single-output models give one score", path, v);
        goto fail;
    }
    if ((v = find_key(lines, 0, first_tree, "num_tree_per_iteration")) && strtol(v, NULL, 10) != 1) {
        isn_error(err, err_len, "%s: num_tree_per_iteration=%s is not 1", path, v);
        goto fail;
    }
    if ((v = find_key(lines, 0, first_tree, "max_feature_idx")))
        f->num_inputs = (uint32_t)strtoul(v, NULL, 10) + 1;
    if ((v = find_key(lines, 0, first_tree, "feature_names"))) {
        size_t count = 1;
        for (char *p = v; *p; p++)
            count += *p == ' ';
        f->input_names = calloc(count, sizeof(char *));
        for (char *tok = strtok(v, " "); f->input_names && tok; tok = strtok(NULL, " "))
            f->input_names[f->num_named++] = strdup(tok);
    }
    for (size_t i = 0; i < first_tree; i++)
        f->average_output |= strcmp(lines[i], "average_output") == 0;
    f->sum_in_double = true;
    f->base_score = 0;
    for (size_t i = first_tree; i < num_lines && strncmp(lines[i], "end of trees", 12) != 0;) {
        if (strncmp(lines[i], "Tree=", 5) != 0) {
            i++;
            continue;
        }
        size_t end = i + 1;
        while (end < num_lines && strncmp(lines[end], "Tree=", 5) != 0 && strncmp(lines[end], "end of trees", 12) != 0)
            end++;
        if (load_tree(f, lines, i + 1, end, f->num_trees, path, err, err_len) != 0)
            goto fail;
        i = end;
    }
    if (forest_finish(f, path, err, err_len) != 0)
        goto fail;
    free(lines);
    free(text);
    return f;
fail:
    isn_forest_free(f);
    free(lines);
    free(text);
    return NULL;
}
