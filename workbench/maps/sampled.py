"""Maps of many papers: a sample laid out by `KNNEngine`, the rest placed by their neighbours in it, all refined.

`SampledEngine` ("sampled") is openTSNE's recipe for large data ("embedding large data sets": lay out a
sample, place the rest with `prepare_partial`, optimise the whole), on the map's own parts:

1. a seeded sample of `sample_size` papers is laid out by today's `KNNEngine` (its search, its schedule);
2. one approximate k-NN graph of all papers (k = 3 x perplexity) gives P: above `reweight.EXACT_SEARCH_MAX`
   papers on a CPU, Annoy of `trees` trees in the `dims` leading principal axes of the weighted features, its
   candidates re-ranked by their exact distances (`reduced.ReducedSearch`, `graph_search`; Annoy on the full
   1,152 dimensions took 10 minutes to build at a million papers); else exact products or the engine's `search`;
3. each other paper is placed at the mean of its sample neighbours' positions, weighted by its calibrated
   p_{j|i} (`place_rest`; openTSNE's `prepare_partial` weighs its k nearest sample points the same way).
   A paper with no sample neighbour among its k takes its placed neighbours' mean in a later round;
   the weight change's first frame also runs 5 iterations of the whole (see `first_frame`);
4. the whole is refined briefly by openTSNE (FFT gradient from `engine.FFT_MIN` papers) on P:
   `REFINE_EXAGGERATED_ITER` iterations at exaggeration `REFINE_EXAGGERATION`, then `REFINE_ITER` (the
   sample's layout already holds the global arrangement, so the refinement only has to settle the local one).
   The placed map keeps the sample's spread: scaled up to the sample's density, openTSNE's FFT grid (which
   grows with the square of the spread) made each iteration 14 times slower at 20,000 papers.

The features stay float32 (`AspectMap.features`); only the (n, 2) coordinates and the (n, k) graph are
float64. Where Annoy searches the graph, the fit never holds the features whole: the PCA start, the sample, the
graph and `prepare`'s products read them by blocks of rows (`AspectMap.feature_rows`; the re-ranking reads the
embeddings), so at a million papers the embeddings (4.6 GB), the candidates with their distances (2.2 GB) and
the graph are what the fit holds at its peak. A weight change (`with_weights`) lays the sample out again first,
warm, on its old neighbours re-ranked under the new weights (no search), and re-places the rest by their old
neighbours re-ranked the same way: that is the first frame. The new graph is then searched and the whole
settled warm from it (`reweight.reweight`). Papers added later are placed as on any k-NN map (`AspectMap.extend`).

`tsne.engine_for("auto", n)` picks this engine from SAMPLED_MIN papers; `method="sampled"` (or
`SampledEngine(sample_size=...)`) asks for it at any size. At or below `sample_size` papers it is `KNNEngine`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .engine import ENGINES, Job, KNNEngine, Layout
from .neighbours import WARM_TREES, AnnoySearch, NeighbourSearch
from .optimiser import EARLY_MOMENTUM, MOMENTUM
from .reweight import (FIRST_ITER, PREVIEW_PERPLEXITY, iterations, knn_affinities, reweight, reweighted_affinities,
                       slow_search)
from .reduced import REDUCED_DIMS, ReducedSearch, candidate_distances, nearest_first
from .tsne_math import calibrate_rows

SAMPLED_MIN = 200_000       # "auto" lays maps of this many papers out from a sample (a plain Bokeh plot's limit)
SAMPLE_SIZE = 25_000        # openTSNE's example's sample (of 1.3 million cells)
GRAPH_TREES = WARM_TREES    # Annoy trees of the graph of all papers (the refinement needs P, not exact rows)
PLACE_ROUNDS = 8            # rounds of `place_rest`: a paper without sample neighbours waits for placed ones
PLACE_BLOCK = 100_000       # rows per block of `place_rest` (bounded temporaries at a million)
# 100 iterations after the exaggerated ones, not 200: on seed 0's 100,000 papers the same score (0.828 against 0.827)
# in 150 iterations for 250; a coarser FFT grid (ints_in_interval 2) lost 0.02 of it.
REFINE_EXAGGERATION, REFINE_EXAGGERATED_ITER, REFINE_ITER = 4.0, 50, 100
FRAME_ITER = 20             # warm iterations of the sample for a weight change's first frame
FRAME_WHOLE_ITER = FIRST_ITER  # then of all papers on their re-ranked old neighbours (`first_frame`)
SAMPLE_KEY = "sample"       # `AspectMap._cache` key: (sample indices, the sample's neighbour rows within it)


def sample_indices(n: int, size: int, seed: int) -> np.ndarray:
    """A seeded sample of `size` of n papers, sorted."""
    return np.sort(np.random.default_rng(seed).choice(n, int(size), replace=False))


def place_rest(sample_coords: np.ndarray, sample: np.ndarray, idx: np.ndarray, weights: np.ndarray,
               rounds: int = PLACE_ROUNDS) -> np.ndarray:
    """(n, 2) positions: the sample's rows at `sample_coords`, every other row i at the mean of its placed
    neighbours idx[i] weighted by weights[i] (n = len(idx)). Round 1 places the rows with a neighbour in the
    sample, from those alone; each later round the rows with a neighbour placed before it. Rows left after
    `rounds` (no path to the sample) sit at the sample's centre."""
    n = len(idx)
    y = np.zeros((n, 2))
    placed = np.zeros(n, dtype=bool)
    y[sample], placed[sample] = sample_coords, True
    todo = np.flatnonzero(~placed)
    for _ in range(rounds):
        if not todo.size:
            break
        ready = np.zeros(todo.size, dtype=bool)
        new_y = np.empty((todo.size, 2))
        for start in range(0, todo.size, PLACE_BLOCK):  # from the rows placed before this round only
            rows = todo[start:start + PLACE_BLOCK]
            w = weights[rows] * placed[idx[rows]]
            total = w.sum(axis=1)
            ready[start:start + len(rows)] = total > 0
            mean = np.einsum("mk,mkd->md", w, y[idx[rows]]) / np.maximum(total, 1e-300)[:, None]
            new_y[start:start + len(rows)] = mean
        y[todo[ready]], placed[todo[ready]] = new_y[ready], True
        todo = todo[~ready]
    y[todo] = np.asarray(sample_coords).mean(axis=0)
    return y


def rerank(features: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's candidate neighbours idx (n, k) sorted by their 1 - cos distances under `features` (unit
    rows, float32): (indices, distances), nearest first. No search: a weight change's first frame."""
    return nearest_first(idx, candidate_distances(features, idx), idx.shape[1])


@dataclass(frozen=True)
class SampledEngine(KNNEngine):
    """A sample laid out by `KNNEngine`, the rest placed by their neighbours in it, the whole refined (module
    docstring). sample_size: papers in the sample; trees: Annoy trees of the graph of all papers, dims: the
    principal axes its candidates are found in (`reduced.ReducedSearch`; 0: Annoy on the full rows), where
    `search` is None and the graph is searched by Annoy (`graph_search`)."""

    sample_size: int = SAMPLE_SIZE
    trees: int = GRAPH_TREES
    dims: int = REDUCED_DIMS
    method = "sampled"

    def graph_search(self, n: int) -> NeighbourSearch | None:
        """The search of the graph of all n papers: the plugged `search`, else (on a CPU above
        `reweight.EXACT_SEARCH_MAX` papers) Annoy in `dims` principal axes with exact re-ranking, else None
        (`reweight.neighbours`' exact products)."""
        if self.search is not None or not slow_search(n):
            return self.search
        return ReducedSearch(self.dims, self.trees) if self.dims else AnnoySearch(self.trees)

    def layout(self, amap, y0, job):
        n = len(amap)
        if n <= self.sample_size:
            return super().layout(amap, y0, job)
        # Annoy keeps its own float32 copy of every row (4.6 GB at a million papers): it reads the features block by
        # block (`AspectMap.feature_rows`), not beside a whole copy of them. Other searches get the array.
        f = amap.feature_rows() if self.search is None and slow_search(n) else amap.features()
        n_jobs, sample = self._threads(), sample_indices(n, self.sample_size, job.seed)
        small = KNNEngine(self.search, self.schedule, self.threads).layout_features(
            f[sample], amap.perplexity, np.asarray(y0)[sample], Job(job.n_iter, job.seed, False, job.verbose))
        affinities, knn, rows = reweighted_affinities(f, amap.perplexity, n_jobs, job.seed, self.trees,
                                                      self.graph_search(n))
        # At the sample's spread, not scaled up to a density like the sample's: openTSNE's FFT grid grows with the
        # square of the spread (10 iterations at 20,000 papers: 1.0 s, against 14 s at sqrt(n / s) times it).
        y = place_rest(small.coords, sample, knn[0], rows[1])
        amap._cache[SAMPLE_KEY] = (sample, small.knn[0])
        return Layout(self._refine(y, affinities, n_jobs, job), knn, rows)

    def _refine(self, y, affinities, n_jobs: int, job: Job) -> np.ndarray:
        from openTSNE import TSNEEmbedding

        emb = TSNEEmbedding(y, affinities, negative_gradient_method=self.gradient(len(y), warm=False), n_jobs=n_jobs,
                            random_state=job.seed, verbose=job.verbose)
        emb.optimize(REFINE_EXAGGERATED_ITER, exaggeration=REFINE_EXAGGERATION, momentum=EARLY_MOMENTUM,
                     learning_rate="auto", inplace=True)
        emb.optimize(REFINE_ITER, momentum=MOMENTUM, learning_rate="auto", inplace=True)
        return np.array(emb, dtype=np.float64)

    def with_weights(self, old, new, job, on_frame=None, relayout=None):
        """The sample laid out again warm on its old neighbours re-ranked (FRAME_ITER iterations), the rest
        re-placed by theirs: the first frame (`on_frame`); then the new graph and `reweight.iterations(n)`
        warm iterations of the whole from it. relayout has no say (the whole is never laid out afresh)."""
        kept, old_knn = old._cache.get(SAMPLE_KEY), old.known_neighbours()
        if kept is None or old_knn is None:
            return super().with_weights(old, new, job, on_frame, relayout)
        frame = self.first_frame(old, new, job)
        if on_frame is not None:
            on_frame(frame)
        n_jobs = self._threads()
        affinities, knn, rows = reweighted_affinities(new.features(), old.perplexity, n_jobs, job.seed, self.trees,
                                                      self.graph_search(len(old)))
        new.keep_neighbours(knn, rows)
        total = iterations(len(old)) if job.n_iter is None else int(job.n_iter)
        new.coords = reweight(frame, affinities, FIRST_ITER, max(total - FIRST_ITER, 0), None,
                              self.gradient(len(old), warm=True), n_jobs, job.seed)
        return new.prepare(background=True)

    def first_frame(self, old, new, job: Job) -> np.ndarray:
        """A weight change's first frame (n, 2): the sample warm on its re-ranked neighbours, the rest re-placed.
        Keeps the sample and its re-ranked rows in `new` for the next change."""
        sample, sample_idx = old._cache[SAMPLE_KEY]
        f, n_jobs = new.features(), self._threads()
        s_idx, s_d = rerank(f[sample], sample_idx)
        P = knn_affinities(s_idx, s_d, old.perplexity)[0]
        from openTSNE.affinity import PrecomputedAffinities

        ys = reweight(old.coords[sample], PrecomputedAffinities(P, normalize=False), FRAME_ITER, 0, None,
                      self.gradient(len(sample), warm=True), n_jobs, job.seed)
        # The rest: the first 3 x PREVIEW_PERPLEXITY of their old neighbours, as a k-NN map's preview does.
        perplexity = min(old.perplexity, PREVIEW_PERPLEXITY)
        idx, d = rerank(f, old.known_neighbours()[0][:, :int(3 * perplexity)])
        new._cache[SAMPLE_KEY] = (sample, s_idx)
        y = place_rest(ys, sample, idx, calibrate_rows(d, perplexity)[0])
        if not FRAME_WHOLE_ITER:
            return y
        # A few iterations of the whole on those re-ranked rows spread each placed paper among its neighbours.
        preview = PrecomputedAffinities(knn_affinities(idx, d, perplexity)[0], normalize=False)
        return reweight(y, preview, FRAME_WHOLE_ITER, 0, None, self.gradient(len(y), warm=True), n_jobs, job.seed)


ENGINES[SampledEngine.method] = SampledEngine  # saved maps reopen with it by name (`AspectMap.load`)
