#!/usr/bin/env python3
"""Scoring and parsing throughput.

1. compute_metrics on N single-label predictions over 21 classes, against scikit-learn's f1_score + accuracy_score
   on the same already-parsed labels (the baseline, run in the same process). Prints the time ratio (target <= 1.5).
2. read_predictions (JSON + tag parsing + candidate snapping) on a predictions.jsonl of the same rows; prints lines/s
   (target >= 200,000 on a 2-core machine).

Usage: python benchmarks/metrics.py [--n 1000000] [--repeat 3]
"""

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import accuracy_score, f1_score

from vtreetrm.eval.metrics import compute_metrics
from vtreetrm.eval.parse import read_predictions


def best_of(fn, repeat):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return min(ts), out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    classes = [f"Behaviour{k:02d}" for k in range(21)]
    p = 1 / np.arange(1, 22)
    p /= p.sum()
    y = rng.choice(21, a.n, p=p)
    yhat = np.where(rng.random(a.n) < 0.6, y, rng.choice(21, a.n, p=p))
    y_s, yhat_s = [classes[i] for i in y], [classes[i] for i in yhat]
    gold, pred = [[c] for c in y_s], [[c] for c in yhat_s]
    labels = sorted(set(y_s))

    t_sk, (f1_sk, acc_sk) = best_of(
        lambda: (f1_score(y_s, yhat_s, labels=labels, average="macro", zero_division=0), accuracy_score(y_s, yhat_s)),
        a.repeat,
    )
    t_us, m = best_of(lambda: compute_metrics(gold, pred), a.repeat)
    assert abs(m["macro_f1"] - f1_sk) < 1e-9 and abs(m["top1_accuracy_single_label"] - acc_sk) < 1e-12
    print(f"scoring {a.n:,} single-label predictions, 21 classes (best of {a.repeat})")
    print(f"  scikit-learn f1_score + accuracy_score: {t_sk:.3f} s")
    print(f"  vtreetrm compute_metrics (all metrics):  {t_us:.3f} s")
    print(f"  ratio vtreetrm / scikit-learn: {t_us / t_sk:.2f}x  (target <= 1.5x)")

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "predictions.jsonl"
        with open(f, "w") as fh:
            for i in range(a.n):
                cands = sorted(
                    {y_s[i], yhat_s[i], *classes[:3]}
                )  # gold and (mostly) the prediction among the candidates
                fh.write(
                    json.dumps(
                        {
                            "id": i,
                            "gold": [y_s[i]],
                            "candidates": cands,
                            "output": f"The animal stays close to the ground. <predicted_actions>{yhat_s[i]}</predicted_actions>",
                        }
                    )
                    + "\n"
                )
        size = f.stat().st_size
        c0 = time.process_time()
        t_parse, pr = best_of(lambda: read_predictions(f), 1)
        cpu = time.process_time() - c0
        assert pr.n == a.n
        print(
            f"parsing {a.n:,} lines ({size / 2**20:.0f} MiB): {t_parse:.2f} s wall = {a.n / t_parse:,.0f} lines/s  (target >= 200,000)"
            f"; CPU time {cpu:.2f} s, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        n_ref = min(a.n, 200_000)
        with open(f, "rb") as src, open(Path(d) / "head.jsonl", "wb") as dst:
            for _, line in zip(range(n_ref), src):
                dst.write(line)
        t_ref, _ = best_of(lambda: read_predictions(Path(d) / "head.jsonl", fast=False), 1)
        print(
            f"  same with parse_actions per line (the reference): {n_ref / t_ref:,.0f} lines/s on the first {n_ref:,} lines"
            f" (vectorized / reference time per line: {t_parse / a.n / (t_ref / n_ref):.2f}x)"
        )
        t_score, _ = best_of(lambda: __import__("vtreetrm.eval.metrics", fromlist=["x"]).score_file(f, write=False), 1)
        print(f"score_file end to end (read + parse + metrics): {t_score:.2f} s = {a.n / t_score:,.0f} lines/s")


if __name__ == "__main__":
    main()
