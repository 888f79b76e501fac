#!/usr/bin/env python3
"""Generates the tree-evaluator oracle for tests/unit/test_trees.c into OUT_DIR (once; the test reuses it).

XGBoost: trains 1,000 trees of depth 6 with Debian's python3-xgboost on random data with missing
values (NaN) and integer-valued columns, then writes the model (save_model, JSON), 10,000 test rows
(some set exactly to split thresholds, so `<` vs `<=` matters) and XGBoost's own predictions.
LightGBM: Debian 12 has no LightGBM package, so a random model.txt (1,000 trees up to depth 6, every
missing type, default directions, thresholds equal to row values) is written by hand and the
expected predictions come from an independent numpy evaluator of LightGBM's documented semantics.

Files: rows.f32 (N x F float32), xgb_model.json, xgb_pred.f32, lgb_model.txt, lgb_pred.f64, DONE.
"""
import json
import os
import sys

import numpy as np

N_ROWS, N_FEAT, N_TREES, DEPTH = 10000, 12, 1000, 6


def make_rows(rng, n):
    x = rng.normal(size=(n, N_FEAT)).astype(np.float32)
    x[:, 0:3] = rng.integers(0, 6, size=(n, 3))            # integer-valued: splits fall on values
    x[:, 3] = np.where(rng.random(n) < 0.3, 0.0, x[:, 3])   # many exact zeros
    x[:, 4] = np.where(rng.random(n) < 0.05, 1e-36, x[:, 4])  # "zero" for LightGBM's zero_as_missing
    x[rng.random((n, N_FEAT)) < 0.05] = np.nan
    return x


def xgboost_part(out, rng, rows):
    import xgboost as xgb
    train = make_rows(rng, 20000)
    y = np.nan_to_num(train[:, 0] * 0.5 + np.sin(train[:, 5]) + train[:, 6] * train[:, 7]) + rng.normal(size=20000) * 0.1
    params = {"objective": "reg:squarederror", "max_depth": DEPTH, "eta": 0.05, "base_score": 0.3,
              "tree_method": "hist", "nthread": 2, "seed": 1}
    bst = xgb.train(params, xgb.DMatrix(train, label=y, missing=np.nan), num_boost_round=N_TREES)
    path = os.path.join(out, "xgb_model.json")
    bst.save_model(path)
    model = json.load(open(path))
    # Put split thresholds into a fifth of the rows so that x == threshold is exercised.
    splits = [(f, c) for t in model["learner"]["gradient_booster"]["model"]["trees"]
              for f, c, l in zip(t["split_indices"], t["split_conditions"], t["left_children"]) if l != -1]
    for r in range(0, len(rows), 5):
        f, c = splits[rng.integers(len(splits))]
        rows[r, f] = np.float32(c)
    pred = bst.predict(xgb.DMatrix(rows, missing=np.nan)).astype(np.float32)
    pred.tofile(os.path.join(out, "xgb_pred.f32"))


def random_tree(rng, rows):
    """A random tree in LightGBM's arrays: children >= 0 are nodes, leaf j is ~j."""
    feats, thrs, dts, lefts, rights, leaves = [], [], [], [], [], []

    def grow(depth):
        if depth == DEPTH or (depth > 1 and rng.random() < 0.25):
            leaves.append(float(rng.normal() * 0.1))
            return ~(len(leaves) - 1)
        i = len(feats)
        f = int(rng.integers(N_FEAT))
        col = rows[:, f]
        col = col[~np.isnan(col)]
        thr = float(col[rng.integers(len(col))]) if rng.random() < 0.6 else float(rng.normal())
        if rng.random() < 0.1:
            thr = 0.0
        dt = (2 if rng.random() < 0.5 else 0) | (int(rng.integers(3)) << 2)
        feats.append(f); thrs.append(thr); dts.append(dt); lefts.append(0); rights.append(0)
        lefts[i] = grow(depth + 1)
        rights[i] = grow(depth + 1)
        return i

    grow(0)
    return feats, thrs, dts, lefts, rights, leaves


def lgb_predict(trees, rows):
    x = rows.astype(np.float64)
    total = np.zeros(len(x))
    for feats, thrs, dts, lefts, rights, leaves in trees:
        node = np.zeros(len(x), dtype=np.int64)
        for _ in range(DEPTH + 1):
            active = node >= 0
            if not active.any():
                break
            idx = np.nonzero(active)[0]
            n = node[idx]
            f = np.array(feats)[n]
            thr = np.array(thrs)[n]
            dt = np.array(dts)[n]
            v = x[idx, f]
            missing_type = (dt >> 2) & 3
            default_left = (dt & 2) != 0
            nan = np.isnan(v)
            v = np.where(nan & (missing_type != 2), 0.0, v)
            is_zero = (v >= -1e-35) & (v <= 1e-35)
            use_default = ((missing_type == 1) & is_zero) | ((missing_type == 2) & np.isnan(v))
            go_left = np.where(use_default, default_left, v <= thr)
            node[idx] = np.where(go_left, np.array(lefts)[n], np.array(rights)[n])
        total += np.array(leaves)[~node]
    return total


def lightgbm_part(out, rng, rows):
    trees = [random_tree(rng, rows) for _ in range(N_TREES)]
    fmt = lambda xs: " ".join(repr(float(v)) if isinstance(v, float) else str(v) for v in xs)
    lines = ["tree", "version=v3", "num_class=1", "num_tree_per_iteration=1", "label_index=0",
             "max_feature_idx=%d" % (N_FEAT - 1), "objective=lambdarank",
             "feature_names=" + " ".join("Column_%d" % i for i in range(N_FEAT)), "", ""]
    for t, (feats, thrs, dts, lefts, rights, leaves) in enumerate(trees):
        lines += ["Tree=%d" % t, "num_leaves=%d" % len(leaves), "num_cat=0"]
        if feats:
            lines += ["split_feature=" + fmt(feats), "split_gain=" + fmt([1.0] * len(feats)),
                      "threshold=" + fmt(thrs), "decision_type=" + fmt(dts),
                      "left_child=" + fmt(lefts), "right_child=" + fmt(rights)]
        lines += ["leaf_value=" + fmt(leaves), "leaf_count=" + fmt([1] * len(leaves)), "shrinkage=1", "", ""]
    lines += ["end of trees", ""]
    open(os.path.join(out, "lgb_model.txt"), "w").write("\n".join(lines))
    lgb_predict(trees, rows).tofile(os.path.join(out, "lgb_pred.f64"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    rows = make_rows(rng, N_ROWS)
    xgboost_part(out, rng, rows)
    lightgbm_part(out, rng, rows)
    rows.tofile(os.path.join(out, "rows.f32"))
    open(os.path.join(out, "DONE"), "w").write("%d %d\n" % (N_ROWS, N_FEAT))


if __name__ == "__main__":
    main()
