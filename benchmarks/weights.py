"""Aspect weights fitted to a judgement (workbench/maps/weights.py, issue 13): recovery, speed, and ACLSum.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/weights.py [--trials 4] [--n 200] [--repeats 3]
        [--run runs/aclsum-demo] [--corpus aclsum] [--split test] [--skip-aclsum] [--smoke]

(a) Synthetic corpus with known weights: per aspect, n documents assigned at random to 6
    clusters, embedding = cluster centre + noise in 16-d; every pair judged similar with
    probability sigmoid(beta * (sum_a w*_a cos_a - t)) for a random w* (Dirichlet). Prints
    the max abs error of `fit_weights`' weights against w* and of FLeW's grid search
    (step 0.05), and the time of one logistic fit against one grid search on the same
    pairs (the cross-validation repeats both k times, so the ratio carries over), plus the
    plain FLeW loop with one sklearn roc_auc_score call per grid point. Medians of
    --repeats, the methods alternating.

(b) ACLSum: the run's unified-model embeddings of the --split documents; the judgement is
    derived from the human summaries of ONE aspect (MiniLM cosine of `summary_<aspect>`,
    as stage 06's ground truth): pairs in the top 10% are similar, the bottom 50%
    dissimilar. The goal of the issue: most of the fitted weight lands on that aspect.

--smoke (or WORKBENCH_BENCH_SMOKE=1): 1 trial of n = 30, 2 repeats, and (b) on a tiny run
with untrained heads built in a temporary folder (10 test papers, the top 30% of their pairs
similar), to check that it runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workbench.maps import weights as W  # noqa: E402
from workbench.core.devices import one_blas_thread  # noqa: E402

from _smoke import SMOKE_CORPUS, add_smoke, tiny_run  # noqa: E402


def synthetic(n, aspects=3, clusters=6, dim=16, noise=0.5, seed=0):
    rng = np.random.default_rng(seed)
    emb = {}
    for a in range(aspects):
        centres = rng.normal(size=(clusters, dim))
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        emb[f"aspect{a}"] = centres[rng.integers(0, clusters, n)] + noise * rng.normal(size=(n, dim)) / np.sqrt(dim)
    return emb


def judge(emb, w, beta=20.0, t=0.35, seed=1):
    n = len(next(iter(emb.values())))
    i, j = np.triu_indices(n, 1)
    cos = W.pair_cosines(emb, np.stack([i, j], axis=1))
    similar = np.random.default_rng(seed).random(len(i)) < 1 / (1 + np.exp(-beta * (cos @ w - t)))
    return [(int(a), int(b), bool(s)) for a, b, s in zip(i, j, similar)], cos, similar.astype(float)


def plain_grid(cos, y, grid):
    """FLeW's search written the obvious way: one roc_auc_score per grid point."""
    aucs = [W.auc(cos @ g, y) for g in grid]
    return grid[int(np.argmax(aucs))]


def part_a(args):
    print(f"(a) synthetic corpus, n = {args.n} documents, 3 aspects, all {args.n * (args.n - 1) // 2} pairs")
    rng = np.random.default_rng(args.seed)
    emb = synthetic(args.n, seed=args.seed)
    grid, _ = W.simplex_grid(3, 0.05)
    rows, t_fit, t_grid, t_plain, t_cv = [], [], [], [], []
    for trial in range(args.trials):
        w_true = rng.dirichlet(np.ones(3))
        pairs, cos, y = judge(emb, w_true, seed=trial + 1)
        start = time.perf_counter()
        fit = W.fit_weights(emb, pairs=pairs)
        t_cv.append(time.perf_counter() - start)
        err = np.abs(np.array(list(fit.weights.values())) - w_true).max()
        err_grid = np.abs(np.array(list(fit.grid_weights.values())) - w_true).max()
        rows.append((w_true, fit, err, err_grid))
        print(f"  w* = {np.round(w_true, 3)}  fitted {np.round(list(fit.weights.values()), 3)}  max error {err:.4f}"
              f" | grid {np.round(list(fit.grid_weights.values()), 2)} max error {err_grid:.4f}"
              f" | held-out AUC fit {fit.auc:.4f} [{fit.auc_ci[0]:.4f}, {fit.auc_ci[1]:.4f}]"
              f" grid {fit.grid_auc:.4f} equal {fit.equal_weights_auc:.4f}")
        for r in range(args.repeats):  # alternate the methods so a busy neighbour hits both alike
            for name in (("fit", "grid", "plain") if r % 2 == 0 else ("plain", "grid", "fit")):
                start = time.perf_counter()
                with one_blas_thread():
                    if name == "fit":
                        W.fit_logistic(cos, y)
                    elif name == "grid":
                        W.grid_search(cos, y, grid)
                    else:
                        plain_grid(cos, y, grid)
                {"fit": t_fit, "grid": t_grid, "plain": t_plain}[name].append(time.perf_counter() - start)
    fit_s, grid_s, plain_s = (statistics.median(t) for t in (t_fit, t_grid, t_plain))
    print(f"  max error over {args.trials} w*: fitted {max(r[2] for r in rows):.4f}, "
          f"grid search {max(r[3] for r in rows):.4f} (its step is 0.05)")
    print(f"  one fit on {len(y)} pairs: logistic fit {fit_s * 1e3:.1f} ms, grid search (231 points, vectorised AUC) "
          f"{grid_s * 1e3:.1f} ms, plain grid (sklearn per point) {plain_s * 1e3:.1f} ms")
    print(f"  time ratio fit / grid = {fit_s / grid_s:.3f}, fit / plain grid = {fit_s / plain_s:.4f}; "
          f"whole fit_weights (5-fold CV of both + bootstrap) median {statistics.median(t_cv):.2f} s")


def part_b(args):
    from workbench.data.aspects import load_aspects
    from workbench.data.corpus import load_corpus
    from workbench.embed.embeddings import embed_corpus, embeddings_key
    from workbench.core.rundir import RunDir
    from workbench.measures.evaluation import summary_similarity
    from workbench.evaluate.report import encode_texts, evaluation_corpus

    run = Path(args.run)
    model_dir = RunDir(run).unified_model
    docs, _ = load_corpus(args.corpus).drop_invalid()
    held = evaluation_corpus(docs, run, args.split)
    names = load_aspects("acl").names
    cached = (RunDir(run).embeddings / f"{embeddings_key(model_dir, held)}.safetensors")
    if not cached.is_file():
        print(f"(b) no cached embeddings of the {args.split} split under {RunDir(run).embeddings}: computing them")
    emb = embed_corpus(model_dir, held, run, progress=False)
    emb = {a: emb[a] for a in names}
    frame = held.docs.reset_index(drop=True)
    n = len(frame)
    print(f"(b) ACLSum {args.split} split: {n} documents, unified model {model_dir} ({cached.name}), "
          f"aspects {names}; judgement from one aspect's human summaries (MiniLM cosine): "
          f"top {args.top:.0%} of pairs similar, bottom {args.bottom:.0%} dissimilar")
    i, j = np.triu_indices(n, 1)
    for target in names:
        sim = summary_similarity(encode_texts("minilm", frame[f"summary_{target}"].tolist(), max_length=128))[i, j]
        hi, lo = np.quantile(sim, 1 - args.top), np.quantile(sim, args.bottom)
        pairs = [(int(a), int(b), True) for a, b in zip(i[sim >= hi], j[sim >= hi])]
        pairs += [(int(a), int(b), False) for a, b in zip(i[sim <= lo], j[sim <= lo])]
        start = time.perf_counter()
        fit = W.fit_weights(emb, pairs=pairs, settings=W.FitSettings(seed=args.seed))
        took = time.perf_counter() - start
        single = {a: W.auc(W.pair_cosines({a: emb[a]}, np.array(pairs))[:, 0], [p[2] for p in pairs]) for a in names}
        print(f"  target {target:>9}: fitted " + ", ".join(f"{a} {w:.2f}" for a, w in fit.weights.items())
              + f" | held-out AUC {fit.auc:.3f} [{fit.auc_ci[0]:.3f}, {fit.auc_ci[1]:.3f}],"
              + f" equal {fit.equal_weights_auc:.3f}"
              + " | grid " + ", ".join(f"{w:.2f}" for w in fit.grid_weights.values()) + f" AUC {fit.grid_auc:.3f}"
              + " | single-aspect AUC " + ", ".join(f"{a} {v:.3f}" for a, v in single.items())
              + f" | {fit.n_pairs[0]}+{fit.n_pairs[1]} pairs, {took:.1f} s"
              + (f" | warning: {fit.warning}" if fit.warning else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run", default=str(Path(__file__).resolve().parents[1] / "runs" / "aclsum-demo"),
                        help="a finished run (smoke mode: a tiny run made in a temporary folder)")
    parser.add_argument("--corpus", default="aclsum")
    parser.add_argument("--split", default="test")
    parser.add_argument("--top", type=float, default=0.10)
    parser.add_argument("--bottom", type=float, default=0.50)
    parser.add_argument("--skip-aclsum", action="store_true")
    add_smoke(parser, trials=1, n=30, repeats=2, run=None, corpus=SMOKE_CORPUS, top=0.3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cores")
    part_a(args)
    if not args.skip_aclsum:
        with tempfile.TemporaryDirectory(prefix="bench-weights-") as tmp:
            if args.run is None:  # smoke mode
                args.run = str(tiny_run(Path(tmp) / "run", args.corpus))
            part_b(args)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
