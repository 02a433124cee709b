"""Neighbour search for maps: the `NeighbourSearch` strategy and its exact and approximate implementations.

A k-NN map (method "opentsne") needs each paper's k = 3 x perplexity nearest papers under the weighted
distance d(i, j) = 1 - <f_i, f_j> of its unit weighted features (`tsne_math.weighted_features`), once
per fit and again after every weight change; placing and inverting a point on a large map reuses them.
A search is a part of the map (`AspectMap(search=...)`), like openTSNE's `KNNIndex` subclasses, so a
user or a test can plug in their own: subclass `NeighbourSearch` and implement `search`.

* `ExactSearch`: one blocked matrix product and a top-k per block (float32, torch), on the CPU or a GPU;
* `AnnoySearch`: openTSNE's copy of Annoy, queried by blocks of rows in threads.

Which of the two a map uses when none is plugged in (exact up to `reweight.EXACT_SEARCH_MAX` papers on
a CPU, at any size on a GPU) is decided in one place, `reweight.neighbours`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..core.devices import best_device

BLOCK = 1024  # query rows per product: BLOCK x n float32 similarities at a time
QUERY_BLOCK = 2000  # rows per task of the threaded Annoy search
# Annoy's trees for a fresh fit (openTSNE's and FIt-SNE's default) and for a weight change, which starts
# warm from a laid-out map: at 100,000 papers 10 trees took 9 s against 21 s through openTSNE's
# Annoy class, with 92% of the 90 nearest found (98% with 50) and all of the 10 nearest.
FIT_TREES, WARM_TREES = 50, 10


class NeighbourSearch:
    """Each row's k nearest other rows of unit weighted features: the strategy a map finds neighbours with.

    Subclasses implement `search`; `slow` says whether a search takes seconds (then a weight change
    draws its first frame from the old neighbours before it, `reweight.preview_affinities`).
    """

    def search(self, features: np.ndarray, k: int, n_jobs: int = 1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(n, k) int64 indices and float64 1 - cos distances of each row's k nearest other rows, nearest first.

        features: (n, D) unit rows; k is at most n - 1; a row is never its own neighbour. n_jobs: the
        threads the search may use; seed: for searches with randomness (Annoy's trees).
        """
        raise NotImplementedError

    def slow(self, n: int) -> bool:
        """Whether searching n papers takes seconds (a weight change then previews from the old neighbours)."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ExactSearch(NeighbourSearch):
    """All distances by blocked products, a top-k per block: exact, 0.5 s at 10,000 papers on 2 cores.

    device: where the products run (None: the detected one, `best_device`); on a GPU only the (n, k)
    results come back. block: query rows per product.
    """

    def __init__(self, device: str | None = None, block: int = BLOCK):
        self.device = device
        self.block = int(block)

    def __repr__(self) -> str:
        return f"ExactSearch(device={self.device!r})"

    def search(self, features, k, n_jobs=1, seed=0):
        import torch  # lazy: torch's top-k is threaded, numpy's argpartition is not

        device = self.device or best_device()
        f = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)).to(device)
        n = f.shape[0]
        k = min(int(k), n - 1)
        idx = np.empty((n, k), dtype=np.int64)
        dist = np.empty((n, k), dtype=np.float64)
        before = torch.get_num_threads()
        torch.set_num_threads(max(1, int(n_jobs)))
        try:
            with torch.no_grad():
                for start in range(0, n, self.block):
                    sims = f[start:start + self.block] @ f.T
                    rows = torch.arange(sims.shape[0], device=sims.device)
                    sims[rows, start + rows] = -float("inf")  # a paper is not its own neighbour
                    top, where = torch.topk(sims, k, dim=1)  # sorted, largest first
                    idx[start:start + self.block] = where.cpu().numpy()
                    dist[start:start + self.block] = np.clip(1.0 - top.cpu().double().numpy(), 0.0, 2.0)
        finally:
            torch.set_num_threads(before)
        return idx, dist


class AnnoySearch(NeighbourSearch):
    """An Annoy index of `trees` random-projection trees (openTSNE's copy): approximate, for large corpora.

    At 100,000 papers the exact products grow as n^2 (minutes on a CPU); Annoy takes 7 to 8 s.
    """

    def __init__(self, trees: int = FIT_TREES):
        self.trees = int(trees)

    def __repr__(self) -> str:
        return f"AnnoySearch(trees={self.trees})"

    def slow(self, n: int) -> bool:
        return True

    def build(self, features, n_jobs: int = 1, seed: int = 0):
        """The Annoy index (openTSNE's copy) of the rows of `features`, an array or anything that gives blocks of
        rows (`tsne_math.WeightedRows`): read by blocks, never copied whole, since Annoy keeps its own float32
        copy of every row (4.6 GB at a million papers of 1,152 dimensions)."""
        from openTSNE.dependencies.annoy import AnnoyIndex  # openTSNE's own copy of Annoy, as its Annoy class builds

        index = AnnoyIndex(features.shape[1], "euclidean")
        index.set_seed(int(np.random.RandomState(seed).randint(np.iinfo(np.int32).max)))
        for start in range(0, len(features), QUERY_BLOCK):
            block = np.asarray(features[start:start + QUERY_BLOCK], dtype=np.float64)  # Annoy converts float64 fastest
            for i, row in enumerate(block, start):
                index.add_item(i, row)
        index.build(self.trees, n_jobs=max(1, int(n_jobs)))
        return index

    def search(self, features, k, n_jobs=1, seed=0):
        data = features if hasattr(features, "shape") else np.asarray(features, dtype=np.float32)
        n, k = len(data), min(int(k), len(data) - 1)
        index = self.build(data, n_jobs, seed)
        idx, dist = np.empty((n, k), np.int64), np.empty((n, k), np.float64)

        def query(start):  # a block of rows; Annoy releases the GIL while it searches
            for i in range(start, min(start + QUERY_BLOCK, n)):
                idx[i], dist[i] = _annoy_row(index, data, i, k)

        # openTSNE queries row by row through joblib: 10 s at 100,000 rows on 2 cores against 6 s in blocks.
        with ThreadPoolExecutor(max(1, int(n_jobs))) as pool:
            list(pool.map(query, range(0, n, QUERY_BLOCK)))
        index.unload()  # Annoy's copy of the rows goes before anything else is allocated
        np.square(dist, out=dist)  # in place: |f_i - f_j|^2 = 2 d(i, j) on unit weighted features
        dist /= 2.0
        return idx, np.clip(dist, 0.0, 2.0, out=dist)


def _annoy_row(index, data: np.ndarray, i: int, k: int):
    # Row i's k nearest other rows from the index (Euclidean distances), without row i itself.
    found, d = index.get_nns_by_item(i, k + 1, include_distances=True)
    if len(found) == k + 1 and found[0] == i:  # the usual case: the row itself first
        return found[1:], d[1:]
    keep = [j for j, f in enumerate(found) if f != i][:k]  # the row itself, where it was found
    if len(keep) < k:  # the trees held too few candidates (tiny or duplicated data): this row exactly
        row = np.asarray(data[i], dtype=np.float32)
        d2 = np.concatenate([np.sum((np.asarray(data[s:s + QUERY_BLOCK]) - row) ** 2, axis=1)
                             for s in range(0, len(data), QUERY_BLOCK)])
        near = np.argsort(d2, kind="stable")
        found, keep = near[near != i][:k], np.arange(k)
        d = np.sqrt(d2[found])
    return np.take(found, keep), np.take(d, keep)
