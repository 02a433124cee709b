"""Maps of many papers: `SampledEngine` against openTSNE's large-data recipe and today's full `KNNEngine` fit.

On seeded synthetic papers (`_million.papers`: three aspects of 384 dimensions, two-level clusters, float32),
weighted 0.5 / 0.3 / 0.2, all on the same --threads threads:

  sampled  `AspectMap.fit(method=SampledEngine(sample_size=--sample))`: a sample laid out by today's engine,
           the rest placed by their sample neighbours, the whole refined (workbench/maps/sampled.py);
  recipe   openTSNE's "embedding large data sets" example, its parameters untuned: a sample of 25,000
           (--sample-recipe) at perplexity 500 (Annoy), a default `TSNE().fit` of it from a PCA start, the
           rest placed by `prepare_partial(k=1, perplexity=1/3)`, the whole rescaled to a spread of 1e-4 and
           optimised on perplexity-50 affinities: 500 iterations at exaggeration 12 (momentum 0.5), then
           3 x 250 at exaggeration 4 (momentum 0.8);
  full     today's `KNNEngine` fit of all papers (up to --full-max papers);
  change   a weight change of the sampled map (to 0.4 / 0.35 / 0.25): the first frame's time and score, and
           the settled map's.

Each layout's time and peak memory (the process's resident set, sampled every 0.1 s, the input included),
and its score: the share of each paper's 10 nearest papers (weighted cosine, exact) found among its 50
nearest on the map, over --queries random papers (all when fewer). Ratios: the recipe's time over ours,
our score over the recipe's and over the full fit's (bar: 0.95 at 100,000 papers), the first frame's score
over the settled map's (bar: 0.8).

    nice .venv/bin/python benchmarks/map_million.py [--papers 100000] [--sample 25000] [--threads 2]
        [--seed 1] [--queries 10000] [--full-max 200000] [--no-recipe] [--no-change] [--graph-only]
        [--dims 100] [--recipe-only] [--recipe-cap SECONDS] [--smoke]

--no-change: no weight change (the layout's time and memory alone).
--recipe-only: the recipe alone (no sampled fit); --recipe-cap SECONDS: the recipe stops there, its phases done
printed (exit status 3), where it would take hours (openTSNE builds an Annoy index of 50 trees of all rows).
--dims: the principal axes the sampled fit searches its graph of all papers in (`reduced.ReducedSearch`; 0: Annoy
on the full 1,152 dimensions, as before).
--graph-only: only the sampled fit's graph of all papers, searched as the fit searches it (read by blocks of
rows, beside the embeddings; with --dims 0 Annoy's index of the full rows, built only): its time and the
process's peak RSS, then nothing else.

--smoke (or WORKBENCH_BENCH_SMOKE=1): 1,500 papers of 3 x 16 dimensions, a sample of 300, short schedules.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import numpy as np  # noqa: E402

from workbench.maps import sampled, tsne  # noqa: E402
from workbench.maps.reduced import REDUCED_DIMS, ReducedSearch  # noqa: E402
from workbench.maps.sampled import SampledEngine  # noqa: E402
from workbench.maps.tsne import AspectMap  # noqa: E402
from workbench.maps.tsne_math import weighted_features  # noqa: E402

from _machine import matmul_gflops  # noqa: E402
from _million import papers  # noqa: E402
from _smoke import add_smoke  # noqa: E402

W_OLD = {"task": 0.5, "method": 0.3, "outcome": 0.2}
W_NEW = {"task": 0.4, "method": 0.35, "outcome": 0.25}
TRUTH_BLOCK = 250
RECIPE = {"sample": 25000, "sample_perplexity": 500, "perplexity": 50, "early": 500, "late": (250, 250, 250)}


def rss_gb() -> float:
    """The process's resident set now, in GB (/proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1e6
    return float("nan")


@contextlib.contextmanager
def measured(out: dict):
    """Wall time (out["s"]) and peak RSS in GB (out["gb"]) of the block, RSS sampled every 0.1 s."""
    peak, done = [rss_gb()], threading.Event()

    def watch():
        while not done.wait(0.1):
            peak[0] = max(peak[0], rss_gb())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out["s"] = time.perf_counter() - t0
        done.set()
        watcher.join()
        out["gb"] = max(peak[0], rss_gb())


def true_neighbours(features: np.ndarray, queries: np.ndarray, k: int = 10) -> np.ndarray:
    """Each query row's k nearest other rows by exact cosine (blocked float32 products, torch; a block of
    TRUTH_BLOCK queries against a million papers is 1 GB)."""
    import torch

    f = torch.from_numpy(features)
    out = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), TRUTH_BLOCK):
        q = queries[start:start + TRUTH_BLOCK]
        sims = f[torch.from_numpy(q)] @ f.T
        sims[torch.arange(len(q)), torch.from_numpy(q)] = -float("inf")
        out[start:start + TRUTH_BLOCK] = torch.topk(sims, k, dim=1).indices.numpy()
    return out


def score(coords: np.ndarray, queries: np.ndarray, truth: np.ndarray, m: int = 50) -> float:
    """The share of each query's true 10 neighbours among its m nearest map points."""
    from scipy.spatial import cKDTree

    near = cKDTree(coords).query(coords[queries], m + 1)[1]
    hits = [len(np.intersect1d(truth[i], near[i][near[i] != q])) for i, q in enumerate(queries)]
    return float(np.mean(hits) / truth.shape[1])


def recipe(x: np.ndarray, threads: int, sample: int, iter_share: float, seed: int = 0, log=None) -> np.ndarray:
    """openTSNE's large-data example on rows x (float32 features), its parameters (RECIPE), `iter_share` of its
    iterations (1 but in smoke runs); log(phase) after each phase."""
    import openTSNE

    it = lambda k: max(1, int(round(k * iter_share)))  # noqa: E731
    log = log or (lambda phase: None)
    rng = np.random.RandomState(seed)
    indices = rng.permutation(len(x))
    reverse = np.argsort(indices)
    x_sample, x_rest = x[indices[:sample]], x[indices[sample:]]
    aff_sample = openTSNE.affinity.PerplexityBasedNN(x_sample, perplexity=RECIPE["sample_perplexity"],
                                                     n_jobs=threads, random_state=0)
    init = openTSNE.initialization.pca(x_sample, random_state=42)
    log("the sample's affinities (perplexity 500)")
    sample_emb = openTSNE.TSNE(n_jobs=threads, n_iter=it(500), early_exaggeration_iter=it(250)).fit(
        affinities=aff_sample, initialization=init)
    log("the sample's layout")
    rest_init = sample_emb.prepare_partial(x_rest, k=1, perplexity=1 / 3)
    init_full = np.vstack((sample_emb, rest_init))[reverse]
    init_full = init_full / (np.std(init_full[:, 0]) * 10000)
    log("the rest placed (prepare_partial)")
    aff = openTSNE.affinity.PerplexityBasedNN(x, perplexity=RECIPE["perplexity"], n_jobs=threads, random_state=0)
    log("the affinities of all papers (perplexity 50)")
    emb = openTSNE.TSNEEmbedding(init_full, aff, n_jobs=threads, random_state=42)
    emb = emb.optimize(n_iter=it(RECIPE["early"]), exaggeration=12, momentum=0.5)
    log("500 iterations at exaggeration 12")
    for n_iter in RECIPE["late"]:
        emb = emb.optimize(n_iter=it(n_iter), exaggeration=4, momentum=0.8)
    log("750 iterations at exaggeration 4")
    return np.asarray(emb)


def capped_recipe(x: np.ndarray, threads: int, sample: int, iter_share: float, cap: float) -> np.ndarray:
    """`recipe`, each phase's time printed; past `cap` seconds (> 0) the process ends (exit status 3) with the
    phases finished printed: the recipe's time is then known to be more than the cap."""
    t0 = time.perf_counter()
    done = []

    def log(phase):
        done.append(phase)
        print(f"(recipe: {phase} done at {time.perf_counter() - t0:.1f} s, load {os.getloadavg()[0]:.2f})", flush=True)

    def stop():
        print(f"recipe: not finished after {cap:.0f} s (the cap); phases done: {len(done)} of 6, the last: "
              f"{done[-1] if done else 'none'}; peak RSS so far {peak_rss_gb():.2f} GB", flush=True)
        os._exit(3)

    timer = threading.Timer(cap, stop) if cap > 0 else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        return recipe(x, threads, sample, iter_share, log=log)
    finally:
        if timer is not None:
            timer.cancel()


def peak_rss_gb() -> float:
    """The process's peak resident set so far, in GB (/proc/self/status VmHWM)."""
    with open("/proc/self/status") as f:
        return next((int(line.split()[1]) / 1e6 for line in f if line.startswith("VmHWM:")), float("nan"))


def graph_only(data: dict, threads: int, dims: int) -> None:
    """The sampled fit's largest phase, the graph of all papers (k = 90) searched as the fit searches it
    (`SampledEngine.graph_search`: Annoy in `dims` principal axes, re-ranked exactly; dims 0: Annoy's index of
    the full rows, built alone), from blocks of the features beside the embeddings: time and the process's
    peak RSS (/proc VmHWM)."""
    from workbench.maps.neighbours import AnnoySearch
    from workbench.maps.tsne_math import WeightedRows

    out, rows, trees = {}, WeightedRows(data, W_OLD), SampledEngine.trees
    with measured(out):
        if dims:
            search = ReducedSearch(dims, trees)
            idx = search.search(rows, 90, threads, 0)[0]
            what = f"{search!r}, 90 neighbours of {len(idx)} papers"
        else:
            index = AnnoySearch(trees).build(rows, threads, 0)
            what = f"Annoy index of {index.get_n_items()} papers, {trees} trees (build only)"
    hwm = peak_rss_gb()
    print(f"{what}: {out['s']:.1f} s, peak RSS {out['gb']:.2f} GB (VmHWM {hwm:.2f} GB), "
          f"load at end {os.getloadavg()[0]:.2f}")


def recipe_only(data: dict, args, row, runs: dict) -> None:
    """The recipe alone on the weighted features (the embeddings dropped: 4.6 GB at a million papers), within
    --recipe-cap seconds (`capped_recipe`)."""
    f = weighted_features(data, W_OLD)
    data.clear()
    queries = np.sort(np.random.default_rng(0).choice(len(f), min(args.queries, len(f)), replace=False))
    with measured(runs.setdefault("recipe", {})):
        coords = capped_recipe(f, args.threads, min(args.sample_recipe, len(f) // 2), args.iter_share,
                               args.recipe_cap)
    runs["recipe"]["score"] = score(coords, queries, true_neighbours(f, queries))
    row("recipe")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--papers", type=int, default=100000)
    p.add_argument("--sample", type=int, default=25000)
    p.add_argument("--sample-recipe", type=int, default=RECIPE["sample"])
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1, help="the data's seed (0 is the dev seed the constants came from)")
    p.add_argument("--queries", type=int, default=10000)
    p.add_argument("--full-max", type=int, default=200000)
    p.add_argument("--no-recipe", action="store_true")
    p.add_argument("--recipe-only", action="store_true")
    p.add_argument("--recipe-cap", type=float, default=0.0)
    p.add_argument("--no-change", action="store_true")
    p.add_argument("--graph-only", action="store_true")
    p.add_argument("--dims", type=int, default=REDUCED_DIMS,
                   help="principal axes the graph is searched in (0: Annoy on the full rows)")
    p.add_argument("--iter-share", type=float, default=1.0, help=argparse.SUPPRESS)
    smoke = add_smoke(p, papers=1500, sample=300, sample_recipe=300, dim=16, queries=500, iter_share=0.05, threads=1)
    args = p.parse_args()
    if smoke:
        tsne.EXAGGERATION_ITER = 20
        sampled.REFINE_EXAGGERATED_ITER, sampled.REFINE_ITER, sampled.FRAME_ITER = 10, 20, 5
    tsne.N_JOBS = args.threads
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    n_iter = 30 if smoke else None
    data = papers(args.papers, args.seed, args.dim)
    print(f"# maps of many papers — {datetime.date.today()}, {args.papers} papers, 3 x {args.dim} dims, seed "
          f"{args.seed}, threads {args.threads}, load {os.getloadavg()[0]:.2f}, {matmul_gflops():.0f} GFLOP/s")
    if args.graph_only:
        return graph_only(data, args.threads, args.dims)
    runs = {}
    print("\n| layout | time (s) | peak RSS (GB) | score (10 in 50) |\n|---|---:|---:|---:|", flush=True)

    def row(name):
        r = runs[name]
        print(f"| {name} | {r['s']:.1f} | {r['gb']:.2f} | {r['score']:.3f} |", flush=True)

    if args.recipe_only:
        return recipe_only(data, args, row, runs)
    with measured(runs.setdefault("sampled", {})):
        ours = AspectMap.fit(data, W_OLD, method=SampledEngine(sample_size=args.sample, dims=args.dims), n_iter=n_iter)
    print(f"(sampled layout: {runs['sampled']['s']:.1f} s, peak RSS {runs['sampled']['gb']:.2f} GB; scoring)", flush=True)
    f = ours.features()
    queries = np.sort(np.random.default_rng(0).choice(len(f), min(args.queries, len(f)), replace=False))
    truth = true_neighbours(f, queries)
    runs["sampled"]["score"] = score(ours.coords, queries, truth)
    row("sampled")
    if not args.no_change:
        if args.no_recipe:  # the old map's features (4.6 GB at a million papers) are not part of the change's peak
            ours._cache.pop("features", None)
            del f
        frames = []
        t0 = time.perf_counter()
        with measured(runs.setdefault("change, settled", {})):
            changed = ours.with_weights(W_NEW, n_iter=n_iter,
                                        on_frame=lambda c: frames.append((time.perf_counter() - t0, c.copy())))
        if changed.preparing is not None:  # its click caches build the features: once, not beside a second copy
            changed.preparing.join()
        truth_new = true_neighbours(changed.features(), queries)
        runs["change, settled"]["score"] = score(changed.coords, queries, truth_new)
        runs["change, first frame"] = {"s": frames[0][0], "gb": float("nan"),
                                       "score": score(frames[0][1], queries, truth_new)}
        row("change, first frame")
        row("change, settled")
        del changed
    if args.papers <= args.full_max:
        with measured(runs.setdefault("full", {})):
            full = AspectMap.fit(data, W_OLD, method="opentsne", n_iter=n_iter)
        runs["full"]["score"] = score(full.coords, queries, truth)
        row("full")
        del full
    if not args.no_recipe:
        with measured(runs.setdefault("recipe", {})):
            coords = capped_recipe(f, args.threads, min(args.sample_recipe, len(f) // 2), args.iter_share,
                                   args.recipe_cap)
        runs["recipe"]["score"] = score(coords, queries, truth)
        row("recipe")
    rows = []
    ours_r = runs["sampled"]
    if "recipe" in runs:
        rows.append(f"recipe time / sampled time ratio: {runs['recipe']['s'] / ours_r['s']:.2f}x")
        rows.append(f"sampled score / recipe score ratio: {ours_r['score'] / max(runs['recipe']['score'], 1e-9):.3f}")
    if "full" in runs:
        rows.append(f"sampled score / full fit score ratio: {ours_r['score'] / max(runs['full']['score'], 1e-9):.3f}"
                    " (bar 0.95)")
    if "change, settled" in runs:
        rows.append("first frame score / settled score ratio: "
                    f"{runs['change, first frame']['score'] / max(runs['change, settled']['score'], 1e-9):.3f} (bar 0.8)")
    print("\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
