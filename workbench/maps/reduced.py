"""Neighbours of many papers found in fewer dimensions: Annoy in a PCA of the weighted features, re-ranked exactly.

Annoy's cost grows with the dimension: every split of a tree and every distance of a query is a product of
rows. On the weighted features of three aspects (1,152 dimensions) its index of a million papers took 10
minutes to build, and at 200,000 papers its queries took most of a sampled fit. `ReducedSearch` finds the
candidates in `dims` dimensions instead and keeps the exact distances:

1. the principal axes of a seeded sample of `fit_rows` rows (`principal_axes`, float64 covariance);
2. every row projected onto them by blocks of rows, float32 (`project`: 0.4 GB at a million papers of 100
   dimensions, against Annoy's 4.6 GB copy of the full rows);
3. an Annoy index of `trees` trees of the projected rows, each row's `candidates` x k nearest in it;
4. those candidates re-ranked by their exact 1 - cos distances in the full space (`candidate_distances`:
   k x `candidates` products a row, read from the embeddings where the rows are a `tsne_math.WeightedRows`),
   the nearest k kept; `search_kept` keeps each pair's cosine per aspect too, for a later weight change.

Centring changes no Euclidean distance, so the projection has no mean. The candidates' distances are exact,
so the affinities are calibrated on true distances; what the reduction can lose is a true neighbour that
never became a candidate (measured in benchmarks/README.md, map_million, and docs/results.md).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .neighbours import WARM_TREES, AnnoySearch, NeighbourSearch
from .tsne_math import WeightedRows, normalize_weights, row_blocks

REDUCED_DIMS = 100    # principal axes the candidates are searched in
CANDIDATES = 1.5      # candidates per neighbour asked of Annoy, re-ranked exactly (k = 90: 135)
FIT_ROWS = 20_000     # rows of the seeded sample the axes are fitted on
RANK_BLOCK = 128      # rows per task of `candidate_distances` (128 x 135 candidates x 384 floats: 27 MB; 512: 2x slower)
CLUSTER_ROWS = 4000   # rows per cluster of `locality_order` (4,000 x 384 floats: 6 MB of the 32 MB cache)
KMEANS_ITER = 5


def principal_axes(features, dims: int, fit_rows: int = FIT_ROWS, seed: int = 0) -> np.ndarray:
    """(D, dims) float64: the `dims` leading principal axes of a seeded sample of at most fit_rows rows of
    `features` (an array or `tsne_math.WeightedRows`), by the eigenvectors of their float64 covariance."""
    from scipy.linalg import eigh

    n, width = features.shape
    rows = np.arange(n)
    if n > fit_rows:
        rows = np.sort(np.random.default_rng(seed).choice(n, int(fit_rows), replace=False))
    x = np.asarray(features[rows], dtype=np.float64)
    x -= x.mean(axis=0)
    dims = max(1, min(int(dims), width, len(x) - 1))
    vals, vecs = eigh(x.T @ x / len(x), subset_by_index=[width - dims, width - 1])
    return vecs[:, np.argsort(vals)[::-1]]


def project(features, axes: np.ndarray) -> np.ndarray:
    """(n, dims) float32: every row of `features` on `axes`, computed by blocks of rows."""
    basis = axes.astype(np.float32)
    out = np.empty((len(features), basis.shape[1]), np.float32)
    for s in row_blocks(len(features)):
        out[s] = np.asarray(features[s], dtype=np.float32) @ basis
    return out


def candidate_distances(features, idx: np.ndarray, n_jobs: int = 1, order: np.ndarray | None = None,
                        cosines: np.ndarray | None = None) -> np.ndarray:
    """(n, c) float64 1 - cos distances of each row i to its candidates idx[i] (n, c) under `features`: unit rows
    (an array) or a `tsne_math.WeightedRows`, whose aspects are read directly (sum_a alpha_a cos_a) rather than
    built into weighted rows for every candidate. RANK_BLOCK rows a task, in n_jobs threads, the rows taken in
    `order` (default: as they stand; `locality_order` keeps the candidates being read in the cache).
    cosines: an (A, n, c) array (of a `WeightedRows`' A aspects, in its order) that receives each pair's cosine
    per aspect, those of zero weight included (a later weight change re-ranks by them, `ReducedSearch.search_kept`)."""
    if isinstance(features, WeightedRows):
        alpha = normalize_weights(features.weights, list(features.embeddings))
        parts = [(e, alpha[a], inverse_norms(e), slot) for slot, (a, e) in enumerate(features.embeddings.items())
                 if alpha[a] > 0 or cosines is not None]
    else:
        parts = [(np.asarray(features, dtype=np.float32), 1.0, None, None)]
    order = np.arange(len(idx)) if order is None else np.asarray(order)
    d = np.ones(idx.shape, np.float64)
    for e, weight, inv, slot in parts:  # one aspect at a time: the rows read are a third of the weighted ones

        # numpy's gather and matmul release the GIL (torch's: 6x slower)
        def rank(s, e=e, weight=weight, inv=inv, slot=slot):
            rows = order[s]
            cos = np.matmul(e[idx[rows]], e[rows][:, :, None])[:, :, 0].astype(np.float64)
            if inv is not None:
                cos *= inv[rows][:, None] * inv[idx[rows]]
            if cosines is not None and slot is not None:
                cosines[slot, rows] = cos
            d[rows] -= weight * cos

        with ThreadPoolExecutor(max(1, int(n_jobs))) as pool:
            list(pool.map(rank, row_blocks(len(idx), RANK_BLOCK)))
    return np.clip(d, 0.0, 2.0, out=d)


def locality_order(z: np.ndarray, seed: int = 0) -> np.ndarray:
    """An order of the rows of z (n, dims) that keeps near rows together: by their nearest of n / CLUSTER_ROWS
    centres, found by KMEANS_ITER rounds of k-means on a seeded sample. A row's candidates are mostly of its own
    cluster, so taken in this order they are read from the cache (at 100,000 papers, 12 s against 23 s)."""
    n = len(z)
    rng = np.random.default_rng(seed)
    m = max(1, n // CLUSTER_ROWS)
    centres = z[np.sort(rng.choice(n, m, replace=False))].astype(np.float64)
    sample = z[np.sort(rng.choice(n, min(n, 50 * m), replace=False))].astype(np.float64)

    def nearest(x):
        return np.argmin((centres * centres).sum(axis=1)[None] - 2.0 * (x @ centres.T), axis=1)

    for _ in range(KMEANS_ITER):
        labels = nearest(sample)
        counts = np.bincount(labels, minlength=m)
        sums = np.zeros_like(centres)
        np.add.at(sums, labels, sample)
        centres[counts > 0] = sums[counts > 0] / counts[counts > 0, None]
    labels = np.concatenate([nearest(z[s].astype(np.float64)) for s in row_blocks(n)])
    return np.argsort(labels, kind="stable")


def inverse_norms(e: np.ndarray) -> np.ndarray:
    """(n,) float64 1 / |e_i| of the rows of e, by blocks of rows; 0 for a zero row, which stays zero as in
    `weighted_features` (its cosines are 0, not NaN: a paper whose aspect text has no term in common with any)."""
    out = np.zeros(len(e))
    for s in row_blocks(len(e)):
        block = np.asarray(e[s], dtype=np.float64)
        norms = np.sqrt(np.einsum("nd,nd->n", block, block))
        out[s] = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    return out


class ReducedSearch(NeighbourSearch):
    """Annoy of `trees` trees in the `dims` leading principal axes of the rows, each row's candidates x k
    nearest there re-ranked by their exact distances in the full space (module docstring)."""

    def __init__(self, dims: int = REDUCED_DIMS, trees: int = WARM_TREES, candidates: float = CANDIDATES,
                 fit_rows: int = FIT_ROWS):
        self.dims, self.trees, self.candidates, self.fit_rows = int(dims), int(trees), float(candidates), int(fit_rows)

    def __repr__(self) -> str:
        return f"ReducedSearch(dims={self.dims}, trees={self.trees}, candidates={self.candidates})"

    def slow(self, n: int) -> bool:
        return True

    def search(self, features, k, n_jobs=1, seed=0):
        return self.search_kept(features, k, n_jobs, seed)[:2]

    def search_kept(self, features, k, n_jobs=1, seed=0):
        """`search`'s (indices, distances), and where `features` is a `tsne_math.WeightedRows` each neighbour pair's
        cosine per aspect, (A, n, k) float16 in its embeddings' order (else None): the re-ranking computes them, and
        under other weights a pair's distance is 1 - sum_a alpha_a cos_a (`sampled.KeptGraph`)."""
        n = len(features)
        k = min(int(k), n - 1)
        z = project(features, principal_axes(features, self.dims, self.fit_rows, seed))
        wanted = min(max(k, int(round(self.candidates * k))), n - 1)
        idx = AnnoySearch(self.trees).search(z, wanted, n_jobs, seed)[0]
        cosines = None
        if isinstance(features, WeightedRows):  # float16: 0.8 GB for 135 candidates of a million papers
            cosines = np.empty((len(features.embeddings),) + idx.shape, np.float16)
        d = candidate_distances(features, idx, n_jobs, locality_order(z, seed), cosines)
        return nearest_first(idx, d, k, cosines)


def nearest_first(idx: np.ndarray, d: np.ndarray, k: int, cosines: np.ndarray | None = None):
    """(indices, distances, cosines) of each row's k nearest candidates idx (n, c) by their distances d (n, c),
    nearest first ((n, k), (n, k), and (A, n, k) of the candidates' cosines (A, n, c), None without them); sorted by
    blocks of rows: no (n, c) order array beside idx and d."""
    n = len(idx)
    out_idx, out_d = np.empty((n, k), idx.dtype), np.empty((n, k), np.float64)
    out_cos = None if cosines is None else np.empty((len(cosines), n, k), cosines.dtype)
    for s in row_blocks(n):
        order = np.argsort(d[s], axis=1, kind="stable")[:, :k]
        out_idx[s], out_d[s] = np.take_along_axis(idx[s], order, axis=1), np.take_along_axis(d[s], order, axis=1)
        if out_cos is not None:
            for a in range(len(cosines)):
                out_cos[a, s] = np.take_along_axis(cosines[a, s], order, axis=1)
    return out_idx, out_d, out_cos
