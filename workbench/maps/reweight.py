"""A weight change on a large map: exact neighbours by blocked products, then a first frame and a settled layout.

Moving an aspect weight changes every distance d(i, j) = sum_a alpha_a (1 - cos_a(i, j)), so
the k = 3 x perplexity nearest papers of every paper must be found again. openTSNE finds them
with an approximate index (Annoy), which took half of the 15 s a 10,000-paper weight change
took on one core. On the weighted features (unit rows, a few hundred dimensions) the exact
search is one blocked matrix product and a top-k per block: about half a second at 10,000
papers, in float32 (`nearest`). The affinities then come from one perplexity calibration of
those rows, which the map keeps for its clicks (`knn_affinities`: the P of openTSNE's
`joint_probabilities_nn`), and the layout from openTSNE's gradient, warm from the current map:
`FIRST_ITER` iterations give a first frame, handed to `on_frame` so a pane can draw it at once,
and the rest of `iterations(n)` the settled map.

A warm start keeps the old global arrangement. After a small change that is what a user wants
(and a fresh fit's quality: kNN@10 0.70 against 0.70 at 10,000 papers), but after a large one
the new neighbours sit in pieces across the old clusters, and no number of warm iterations
gathers them (0.42 after 80 or 120 iterations against a fresh fit's 0.48). So where fewer than
RELAYOUT_BELOW of the papers' 10 nearest neighbours stay the same (`neighbour_overlap`), the
settled map is laid out again from the first frame shrunk to a spread of RELAYOUT_SPREAD: 40
iterations of exaggeration 4 gather each new cluster, 80 more spread it out (a fresh fit's
schedule, short: 1.1 s at 10,000 papers for 0.475; 250 + 500 iterations of exaggeration 12
from a 10^-4 spread give a fresh fit 0.48 in 20 s). The spread and the milder exaggeration keep
some of the first frame's arrangement (Procrustes disparity 0.16 to 0.5 against about 1.0
from openTSNE's 10^-4 start, at the same quality; benchmarks/README.md, maps).

Above `EXACT_SEARCH_MAX` papers the product grows as n^2 and an Annoy index (openTSNE's copy) takes over,
unless a GPU is there (auto-detected, `WORKBENCH_DEVICE` overrides): the exact search then runs on it at any
size (about 2 x 10^12 multiply-adds at 100,000 papers of 192 dimensions). `neighbours` makes that choice
between the searches of `neighbours.py`, or takes the one plugged into the map (`AspectMap(method=engine)`).
Quality against a fresh fit is measured in `benchmarks/maps.py` (kNN@10).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..core.devices import best_device
from .neighbours import BLOCK, FIT_TREES, AnnoySearch, ExactSearch, NeighbourSearch
from .optimiser import EARLY_MOMENTUM, MOMENTUM
from .tsne_math import calibrate_rows, row_blocks

EXACT_SEARCH_MAX = 30000  # exact blocked search up to here; an Annoy index above (openTSNE's copy)
FIRST_ITER = 5  # iterations before the first frame
# openTSNE's FFT grid for those and for all but the last FINE_ITER warm iterations: 2 map units per
# interval instead of 1. At 100,000 papers the first frame took 0.55 s against 1.26 s (kNN@10 0.253 / 0.267
# against 0.242 / 0.276, small / large change), 20 coarse and 15 fine iterations 5.4 s against 7.8 s for
# 35 fine (0.241 / 0.358 against 0.239 / 0.360); all 35 coarse lost the large change 0.03.
COARSE_INTS, FINE_ITER = 2, 15
# Iterations in all, as many as cost about the same time at any size (each is O(n)): 80 at 10,000
# papers (about 2 s on 2 cores), never under 40 nor over 100. Below 8,000 papers an iteration's fixed cost
# dominates, and more do not help: a small change on 1,600, 2,000 and 5,000 synthetic papers reached the same
# kNN@10 after 100 iterations as after 500, 400 and 160 (0.737, 0.763, 0.651 against 0.736, 0.764, 0.648), in
# a quarter of the time at 2,000 (1.1 s against 4.5 s, 2 threads). A warm start settles a small change to a
# fresh fit's quality; a large one is laid out again (`relayout`), with its own iterations.
POINT_ITERATIONS = 800_000
MIN_ITER, MAX_ITER = 40, 100
RELAYOUT_MAX = 50000  # above this many papers a warm map already matches a fresh fit's kNN@10 (re-laying: 3x the time)
RELAYOUT_BELOW = 0.8  # share of the 10 nearest neighbours a change keeps, below which the map is laid out again
RELAYOUT_SPREAD = 5.0  # standard deviation of the shrunk first frame a re-layout starts from
# A small change (at least SMALL_CHANGE of the 10 nearest neighbours kept, a slider step) settles in
# SMALL_CHANGE_ITER iterations in all: the warm start already holds its arrangement. On 10,000 synthetic papers
# (3 x 64 dimensions, seed 0) steps that kept 0.89 to 0.94 scored the same after 25 iterations as after 80 (share
# of the 10 nearest papers among the 50 nearest on the map: 0.8655 / 0.8656, 0.9499 / 0.9477, 0.9352 / 0.9339,
# 0.9512 / 0.9488), in a third of the time; seed 1 and CSAbstruct's 2,155 abstracts (TF-IDF, 100 iterations
# before) agreed within 0.002. Larger warm changes keep `iterations(n)`.
SMALL_CHANGE, SMALL_CHANGE_ITER = 0.85, 25
RELAYOUT_EXAGGERATION, RELAYOUT_EXAGGERATED_ITER, RELAYOUT_ITER = 4.0, 40, 80
PREVIEW_PERPLEXITY = 10.0  # of a first frame's affinities before the search (`preview_affinities`)
PREVIEW_BLOCK = 2000  # rows per block of `preview_affinities` (2,000 x 30 candidates x 192 floats: 46 MB)
CALIBRATE_BLOCK = 65_536  # rows per `calibrate_rows` call of `knn_affinities` (a few (rows, k) float64 temporaries)
KERNEL_BLOCK = 256  # rows per block of `kernel_sum` (256 x 10,000 floats: 10 MB, 4x faster than 1024 rows)


def nearest(features: np.ndarray, k: int, n_jobs: int = 1, device: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(n, k) indices and 1 - cos distances of each row's k nearest other rows, nearest first (unit rows):
    `neighbours.ExactSearch` on `device` (default: the detected one, `best_device`), BLOCK rows at a time."""
    return ExactSearch(device or best_device(), BLOCK).search(features, k, n_jobs)


def neighbours(features: np.ndarray, k: int, n_jobs: int = 1, seed: int = 0, trees: int = FIT_TREES,
               search: NeighbourSearch | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(n, k) indices and 1 - cos distances of each row's k nearest other rows (unit rows), from `search`.

    The one place a map's neighbour search is chosen: the search plugged into the map (`AspectMap(search=...)`),
    else exact blocked products (`nearest`) up to EXACT_SEARCH_MAX rows on a CPU and at any size on a GPU, and
    an Annoy index of `trees` trees (`neighbours.AnnoySearch`) above that on a CPU."""
    if search is not None:
        return search.search(features, k, n_jobs, seed)
    if not slow_search(len(features)):
        return nearest(features, k, n_jobs, best_device())
    return AnnoySearch(trees).search(features, k, n_jobs, seed)


def reweighted_affinities(features: np.ndarray, perplexity: float, n_jobs: int = 1, seed: int = 0,
                          trees: int = FIT_TREES, search: NeighbourSearch | None = None):
    """(openTSNE affinities, neighbours, rows): symmetric P over the 3 x perplexity nearest papers of unit
    weighted features, the (indices, 1 - cos distances) of `neighbours` they came from, and the rows
    (indices, conditional p_{j|i}, precisions, log normalisers, the symmetric p of each pair) that
    `AspectMap._knn_rows` keeps. A map keeps both: placing or inverting a point on it needs the same
    rows, and would otherwise search and calibrate again (openTSNE's `joint_probabilities_nn` computes the
    same P: 2.3 s at 100,000 papers, which this calibration replaces rather than repeats). trees, search: as
    `neighbours`."""
    return graph_affinities(*neighbours(features, int(3 * perplexity), n_jobs, seed, trees, search), perplexity)


def graph_affinities(idx: np.ndarray, d: np.ndarray, perplexity: float, beta0: np.ndarray | None = None):
    """`reweighted_affinities`' (openTSNE affinities, neighbours, rows) of neighbours already found: idx (n, k)
    at 1 - cos distances d, nearest first; beta0: `knn_affinities`' guess of the precisions."""
    from openTSNE.affinity import PrecomputedAffinities

    P, rows = knn_affinities(idx, d, perplexity, beta0)
    return PrecomputedAffinities(P, normalize=False), (idx, d), rows


def knn_affinities(idx: np.ndarray, d: np.ndarray, perplexity: float, beta0: np.ndarray | None = None):
    """(P, rows) from each paper's neighbours `idx` at 1 - cos distances `d`: the symmetric sparse P =
    (C + C^T) / 2n of the perplexity-calibrated conditional rows C, and (idx, p_{j|i}, beta, log_norm, the
    symmetric p of each neighbour pair). p_{j|i} is proportional to exp(-beta_i d(i, j)): openTSNE's
    Gaussian on |f_i - f_j|^2 = 2 d(i, j) at the same perplexity is the same distribution (its beta halved).
    beta0 (n,): a close guess of the precisions (a map's before a small weight change), which turns the
    calibration's bisection into a few Newton steps (`calibrate_rows`; 0.3 s against 2.1 s at 100,000 papers)."""
    from scipy import sparse

    n, k = idx.shape
    cond, beta, log_norm = np.empty(d.shape), np.empty(n), np.empty(n)
    for s in row_blocks(n, CALIBRATE_BLOCK):  # each row's search is its own: the same rows as in one call
        cond[s], beta[s], log_norm[s] = calibrate_rows(d[s], perplexity, beta0=None if beta0 is None else beta0[s])
    # C straight as CSR (k entries a row, int32 indices) and P scaled in place: at a million papers of 90
    # neighbours each (n, k) array is 0.72 GB, and a COO matrix and a scaled copy of P were 4 GB more.
    index = np.int32 if n * k < 2 ** 31 else np.int64
    cols = idx.astype(index).ravel()
    C = sparse.csr_matrix((cond.ravel(), cols, np.arange(0, n * k + 1, k, dtype=index)), shape=(n, n))
    P = (C + C.T).tocsr()
    del C
    P.data /= 2.0 * n
    # Each pair's p read back by a binary search in its row, not a scan of it: on a synthetic graph of a million
    # papers of 90 neighbours this call took 60 s against 71 s (50 against 57 from close precisions). The sort
    # reorders P's own arrays only (C's are cond's and cols', which must keep their order).
    P.sort_indices()
    pairs = np.repeat(np.arange(n, dtype=index), k)
    return P, (idx, cond, beta, log_norm, np.asarray(P[pairs, cols]).reshape(idx.shape))


def slow_search(n: int, search: NeighbourSearch | None = None) -> bool:
    """Whether `neighbours` takes seconds on n papers: the plugged `search`'s own say, else whether it uses
    Annoy rather than exact products."""
    if search is not None:
        return search.slow(n)
    return n > EXACT_SEARCH_MAX and best_device() == "cpu"


def preview_affinities(features: np.ndarray, old_idx: np.ndarray, perplexity: float):
    """openTSNE affinities for a first frame while the new neighbours are still being searched: each paper's
    old neighbour list (`old_idx`, from the weights before), ranked by its distances under the new weights,
    at perplexity min(perplexity, PREVIEW_PERPLEXITY) on the first 3 x that many of each list.

    The new weights' nearest papers are mostly among the old ones after a small change, and some of them
    after a large one. At 100,000 papers, with the map's perplexity 30 on all 90, the first frame held
    kNN@10 0.250 / 0.233 (small / large change; 0.253 / 0.267 from the searched neighbours) 3.9 / 3.0 s
    after the change; at perplexity 10 on 30, 0.270 / 0.246 after 1.3 s (the closest neighbours weigh more).
    """
    from openTSNE.affinity import PrecomputedAffinities

    perplexity = min(float(perplexity), PREVIEW_PERPLEXITY)
    f = np.asarray(features, dtype=np.float32)
    idx = np.asarray(old_idx)[:, :int(3 * perplexity)]
    d = np.empty(idx.shape, np.float64)
    for start in range(0, len(f), PREVIEW_BLOCK):  # one row's products with its own candidates
        rows = slice(start, start + PREVIEW_BLOCK)
        d[rows] = 1.0 - np.einsum("nd,nkd->nk", f[rows], f[idx[rows]])
    order = np.argsort(d, axis=1)
    idx, d = np.take_along_axis(idx, order, axis=1), np.clip(np.take_along_axis(d, order, axis=1), 0.0, 2.0)
    return PrecomputedAffinities(knn_affinities(idx, d, perplexity)[0], normalize=False)


def kernel_sum(coords: np.ndarray, n_jobs: int = 1, max_rows: int | None = None, seed: int = 0) -> float:
    """Z = sum over i != j of (1 + |y_i - y_j|^2)^-1, the normaliser of a map's Q, by blocked float32 products.

    O(n^2) but one pass over in-place blocks that stay in cache: 0.1 s at 10,000 points on 2 cores, against
    0.8 s for a float64 numpy loop.
    Squared distances in float32 are within 1e-3 of the float64 ones on maps of spread 100, a
    relative error of Z below 1e-5 (checked against float64 in the tests); the i = j terms are set
    to 0, not computed and subtracted, since float32 cancellation leaves them a hair under 1.

    max_rows: above this many points, the sum of the full rows of a seeded sample of max_rows points,
    scaled by n / max_rows: O(n max_rows) instead of O(n^2) (10 s at 100,000 points, 1 s from 4,000
    rows). Z only sets the scale of the repulsion a placed or inverted point feels; the sample's
    error (0.5-1% with 5,000 of 30,000 clustered points, 0.1-3% with 2,000) moves nothing visibly.
    """
    import torch

    y = np.asarray(coords, dtype=np.float64)
    rows = np.arange(len(y))
    if max_rows is not None and len(y) > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(len(y), int(max_rows), replace=False))
    scale = len(y) / len(rows)
    y = torch.from_numpy((y - y.mean(axis=0)).astype(np.float32))  # centred: smaller norms, less cancellation
    sq = (y * y).sum(dim=1)
    rows = torch.from_numpy(rows)
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n_jobs)))
    total = 0.0
    try:
        with torch.no_grad():
            for start in range(0, len(rows), KERNEL_BLOCK):
                block = rows[start:start + KERNEL_BLOCK]
                # |y_i|^2 + |y_j|^2 - 2 y_i.y_j, then 1 / (1 + d), all in place on one block
                d = torch.addmm(sq[None, :], y[block], y.T, alpha=-2.0)
                d.add_(sq[block, None]).clamp_(min=0).add_(1.0).reciprocal_()
                d[torch.arange(len(block)), block] = 0.0  # i = j is no pair (its float32 "distance" is not 0)
                total += float(d.sum())  # float32 per block (cascade summation: 1e-6 relative), float64 across
    finally:
        torch.set_num_threads(before)
    return total * scale


def iterations(n: int) -> int:
    """How many warm iterations a weight change on a map of n papers gets, first frame included."""
    return int(np.clip(POINT_ITERATIONS // max(n, 1), MIN_ITER, MAX_ITER))


def neighbour_overlap(old: np.ndarray, new: np.ndarray, k: int = 10) -> float:
    """The mean share of each paper's k nearest neighbours in `new` (rows of indices, nearest first) that are
    among its k nearest in `old`: 1 where a weight change moves no neighbour, near 0 where it moves all."""
    old, new = np.asarray(old)[:, :k], np.asarray(new)[:, :k]
    return float((new[:, :, None] == old[:, None, :]).any(axis=2).mean())


def change_overlap(old: np.ndarray | None, new: np.ndarray | None) -> float | None:
    """`neighbour_overlap` of a weight change from the neighbour rows `old` to `new`, on a map of up to
    RELAYOUT_MAX papers (None without `old`, or above: a warm map already matches a fresh fit there)."""
    if old is None or new is None or len(new) > RELAYOUT_MAX:
        return None
    return neighbour_overlap(old, new)


def large_change(overlap: float | None) -> bool:
    """Whether a weight change that kept `overlap` of the 10 nearest neighbours (`change_overlap`) should be laid
    out again: fewer than RELAYOUT_BELOW stay (False where the overlap was not measured)."""
    return overlap is not None and overlap < RELAYOUT_BELOW


def change_iterations(total: int, overlap: float | None) -> int:
    """Iterations in all for a warm change that kept `overlap` of the 10 nearest neighbours (`change_overlap`):
    SMALL_CHANGE_ITER for a small change (see SMALL_CHANGE), `total` otherwise or where it was not measured."""
    return min(total, SMALL_CHANGE_ITER) if overlap is not None and overlap >= SMALL_CHANGE else total


def reweight(coords: np.ndarray, affinities, first_iter: int = FIRST_ITER, settle_iter: int = 35,
             on_frame: Callable[[np.ndarray], object] | None = None, gradient: str = "bh", n_jobs: int = 1,
             seed: int = 0) -> np.ndarray:
    """The layout under new affinities, warm from `coords`: on_frame(first frame), then the settled (n, 2).

    On the FFT gradient the first frame and all but the last FINE_ITER settling iterations take the
    coarser grid (COARSE_INTS). A large change is laid out again from the first frame instead of
    settling (`relayout`, after a call with settle_iter=0)."""
    from openTSNE import TSNEEmbedding

    emb = TSNEEmbedding(np.array(coords, dtype=np.float64), affinities, negative_gradient_method=gradient,
                        n_jobs=n_jobs, random_state=seed)
    coarse = {"ints_in_interval": COARSE_INTS} if gradient == "fft" else {}  # a coarser FFT grid (COARSE_INTS)
    if first_iter:
        emb.optimize(first_iter, momentum=MOMENTUM, learning_rate="auto", inplace=True, **coarse)
    if on_frame is not None:
        on_frame(np.array(emb, dtype=np.float64))
    if settle_iter:
        fine = min(settle_iter, FINE_ITER) if coarse else settle_iter
        if settle_iter > fine:
            emb.optimize(settle_iter - fine, momentum=MOMENTUM, learning_rate="auto", inplace=True, **coarse)
        emb.optimize(fine, momentum=MOMENTUM, learning_rate="auto", inplace=True)
    return np.array(emb, dtype=np.float64)


def shrunk(frame: np.ndarray) -> np.ndarray:
    """The layout `frame` centred and scaled to a spread (first axis' standard deviation) of RELAYOUT_SPREAD: where
    a re-layout starts, small enough for exaggeration to rearrange it, with the frame's orientation."""
    y = np.array(frame, dtype=np.float64)
    return (y - y.mean(axis=0)) * (RELAYOUT_SPREAD / max(float(y[:, 0].std()), 1e-12))


def relayout(frame: np.ndarray, affinities, gradient: str = "bh", n_jobs: int = 1, seed: int = 0) -> np.ndarray:
    """The settled layout of a large change, laid out again from its first `frame` shrunk to RELAYOUT_SPREAD:
    RELAYOUT_EXAGGERATED_ITER iterations at exaggeration RELAYOUT_EXAGGERATION, then RELAYOUT_ITER (see the
    module docstring), with openTSNE's `gradient` ("bh" or "fft")."""
    from openTSNE import TSNEEmbedding

    emb = TSNEEmbedding(shrunk(frame), affinities, negative_gradient_method=gradient, n_jobs=n_jobs, random_state=seed)
    emb.optimize(RELAYOUT_EXAGGERATED_ITER, exaggeration=RELAYOUT_EXAGGERATION, momentum=EARLY_MOMENTUM,
                 learning_rate="auto", inplace=True)
    emb.optimize(RELAYOUT_ITER, momentum=MOMENTUM, learning_rate="auto", inplace=True)
    return np.array(emb, dtype=np.float64)
