#!/usr/bin/env python3
"""Trains a LambdaMART ranker (XGBoost, objective rank:ndcg) on features dumped by
`isn-query --dump-features` and writes a ranker file ISN loads (isn_ranker_load, isn-query --ranker).

    tools/train-ranker.py --features train.letor --out-dir DIR [--name NAME] [--trees 300] [--depth 6]
                          [--eta 0.1] [--qids FILE]    (train only on the query ids listed in FILE)
                          [--valid-fraction F]         (hold out that share of the training queries, by a
                                                        hash of their ids, and keep the trees up to the best
                                                        nDCG@10 on them: early stopping after 50 rounds)

Writes DIR/NAME.model.json (Booster.save_model, with the ISN feature names) and DIR/NAME.ranker
(model xgboost NAME.model.json, one identity input per feature). Needs Debian's python3-xgboost.
"""
import argparse
import hashlib
import os
import sys

import numpy as np
import xgboost as xgb


def read_letor(path, keep_qids):
    names, labels, qids, rows = {}, [], [], []
    for line in open(path):
        if line.startswith("# feature "):
            _, _, num, name = line.split(None, 3)
            names[int(num)] = name.strip()
            continue
        body = line.split("#", 1)[0].split()
        if not body:
            continue
        qid = body[1].split(":", 1)[1]
        if keep_qids is not None and qid not in keep_qids:
            continue
        labels.append(float(body[0]))
        qids.append(qid)
        row = np.zeros(len(names), dtype=np.float32)
        for tok in body[2:]:
            k, v = tok.split(":", 1)
            row[int(k) - 1] = float(v)
        rows.append(row)
    if not names:
        sys.exit("train-ranker: %s has no '# feature N NAME' header (write it with isn-query --dump-features)" % path)
    return [names[i] for i in sorted(names)], np.array(labels), qids, np.array(rows)


def matrix(x, labels, qids, names):
    # XGBoost wants each query's rows contiguous; --dump-features writes them so.
    groups = []
    for i, q in enumerate(qids):
        if i == 0 or q != qids[i - 1]:
            groups.append(0)
        groups[-1] += 1
    d = xgb.DMatrix(x, label=labels, feature_names=names)
    d.set_group(groups)
    return d, groups


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--features", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--name", default="lambdamart")
    ap.add_argument("--qids")
    ap.add_argument("--trees", type=int, default=300)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--eta", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--valid-fraction", type=float, default=0.0)
    args = ap.parse_args()
    keep = set(open(args.qids).read().split()) if args.qids else None
    names, labels, qids, x = read_letor(args.features, keep)
    # Queries whose candidates hold no relevant document teach LambdaMART nothing.
    useful = {q for q, l in zip(qids, labels) if l > 0}
    mask = np.array([q in useful for q in qids])
    labels, x = labels[mask], x[mask]
    qids = [q for q, m in zip(qids, mask) if m]
    if not 0 <= args.valid_fraction < 1:
        sys.exit("train-ranker: --valid-fraction must be in [0, 1)")
    # A query's share of the hash space decides its side: the same split on every run and machine.
    def in_valid(q):
        return int(hashlib.sha1(q.encode()).hexdigest()[:8], 16) < args.valid_fraction * 0x100000000
    valid_mask = np.array([in_valid(q) for q in qids], dtype=bool)
    params = {"objective": "rank:ndcg", "eval_metric": "ndcg@10", "max_depth": args.depth, "eta": args.eta,
              "min_child_weight": 1, "subsample": 0.8, "colsample_bytree": 0.8, "tree_method": "hist",
              "nthread": args.threads, "seed": 1}
    dtrain, groups = matrix(x[~valid_mask], labels[~valid_mask], [q for q, v in zip(qids, valid_mask) if not v], names)
    if valid_mask.any():
        dvalid, valid_groups = matrix(x[valid_mask], labels[valid_mask], [q for q, v in zip(qids, valid_mask) if v], names)
        bst = xgb.train(params, dtrain, num_boost_round=args.trees, evals=[(dvalid, "valid")],
                        early_stopping_rounds=50, verbose_eval=False)
        best = bst.best_iteration + 1
        bst = bst[:best]
        score = float(bst.eval(dvalid).split(":")[-1])
        print("train-ranker: %d validation queries: best nDCG@10 %.4f at %d trees" % (len(valid_groups), score, best),
              file=sys.stderr)
        args.trees = best
    else:
        bst = xgb.train(params, dtrain, num_boost_round=args.trees)
    os.makedirs(args.out_dir, exist_ok=True)
    model = args.name + ".model.json"
    bst.save_model(os.path.join(args.out_dir, model))
    with open(os.path.join(args.out_dir, args.name + ".ranker"), "w") as out:
        out.write("isn-ranker 1\nname %s\nmodel xgboost %s\n" % (args.name, model))
        for n in names:
            out.write("input %s\n" % n)
    print("train-ranker: %d queries, %d rows, %d features, %d trees -> %s" %
          (len(groups), int((~valid_mask).sum()), len(names), args.trees, os.path.join(args.out_dir, args.name + ".ranker")),
          file=sys.stderr)


if __name__ == "__main__":
    main()
