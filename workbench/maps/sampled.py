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
4. the whole is refined briefly by openTSNE (FFT gradient from `engine.FFT_MIN` papers) on P:
   `REFINE_EXAGGERATED_ITER` iterations at exaggeration `REFINE_EXAGGERATION`, then `REFINE_ITER` (the
   sample's layout already holds the global arrangement, so the refinement only has to settle the local one).
   The placed map keeps the sample's spread: scaled up to the sample's density, openTSNE's FFT grid (which
   grows with the square of the spread) made each iteration 14 times slower at 20,000 papers.

The features stay float32 (`AspectMap.features`); only the (n, 2) coordinates and the (n, k) graph are
float64. Where Annoy searches the graph, the fit never holds the features whole: the PCA start, the sample, the
graph and `prepare`'s products read them by blocks of rows (`AspectMap.feature_rows`; the re-ranking reads the
embeddings), so at a million papers the embeddings (4.6 GB), the candidates with their distances (2.2 GB) and
the graph are what the fit holds at its peak.

A weight change (`with_weights`) draws its first frame from the sample alone, without the features (4.6 GB to
build at a million papers) or any search: the fit keeps the sample's neighbours within it, each pair's cosine
per aspect and the sample relaxed under its own affinities (`SampleFrame`), so the sample's affinities under
any weights are a weighted sum away. The sample moves FRAME_ITER warm iterations under them, and its moves
spread to every paper along the map's neighbour rows (`Spread`): each paper moves by the mean move of the
sample papers near it, and keeps its place among its neighbours. The new graph follows, and the whole settles
warm from that frame (`reweight.reweight`). Where `reduced.ReducedSearch` found the graph, its re-ranking kept
each pair's cosine per aspect (`KeptGraph`): after a small change the kept neighbour lists are re-ranked under
the new weights and nothing is searched; after a larger one the graph is searched again. Papers added later are
placed as on any k-NN map (`AspectMap.extend`).

`tsne.engine_for("auto", n)` picks this engine from SAMPLED_MIN papers; `method="sampled"` (or
`SampledEngine(sample_size=...)`) asks for it at any size. At or below `sample_size` papers it is `KNNEngine`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from .engine import ENGINES, RERANK_MIN, Job, KNNEngine, Layout
from .neighbours import WARM_TREES, AnnoySearch, NeighbourSearch
from .optimiser import EARLY_MOMENTUM, MOMENTUM
from .reweight import (FIRST_ITER, SMALL_CHANGE, change_iterations, graph_affinities, iterations,
                       knn_affinities, large_change, neighbour_overlap, reweight, reweighted_affinities, shrunk,
                       slow_search)
from .reduced import REDUCED_DIMS, ReducedSearch, nearest_first
from .tsne_math import row_blocks

SAMPLED_MIN = 200_000       # "auto" lays maps of this many papers out from a sample (a plain Bokeh plot's limit)
SAMPLE_SIZE = 25_000        # openTSNE's example's sample (of 1.3 million cells)
GRAPH_TREES = WARM_TREES    # Annoy trees of the graph of all papers (the refinement needs P, not exact rows)
PLACE_ROUNDS = 8            # rounds of `place_rest`: a paper without sample neighbours waits for placed ones
PLACE_BLOCK = 100_000       # rows per block of `place_rest` (bounded temporaries at a million)
# 100 iterations after the exaggerated ones, not 200: on seed 0's 100,000 papers the same score (0.828 against 0.827)
# in 150 iterations for 250; a coarser FFT grid (ints_in_interval 2) lost 0.02 of it.
REFINE_EXAGGERATION, REFINE_EXAGGERATED_ITER, REFINE_ITER = 4.0, 50, 100
# A weight change's first frame (`SampledEngine.first_frame`), chosen on seed 0's 100,000 papers (0.5 / 0.3 / 0.2
# to 0.4 / 0.35 / 0.25): 10 FFT iterations of the 25,000-paper sample (0.6 s; 20 Barnes-Hut ones took 3.5 s) and
# 3 rounds of spreading its moves over each paper's 30 nearest scored 0.809 (the old map: 0.811, the settled map
# 0.780; 1 round 0.709, 2 rounds 0.793), where placing every paper anew at its sample neighbours' mean scored 0.70.
FRAME_ITER = 10             # warm iterations of the sample, from its relaxed layout
FRAME_RELAX_ITER = 30       # iterations that relax the sample under its own affinities (`SampleFrame.relaxed`)
FRAME_NEIGHBOURS = 30       # of each paper's nearest, along which the sample's moves spread
FRAME_ROUNDS = 3            # rounds of spreading (`Spread.moves`)
SPREAD_PARTS = 8            # row blocks of `Spread`'s matrix: products in threads
SAMPLE_KEY = "sample"       # `AspectMap._cache` key: the map's `SampleFrame`
SPREAD_KEY = "spread"       # and its `Spread`
GRAPH_KEY = "graph"         # and its `KeptGraph`
# A weight change re-ranks the kept neighbours (`KeptGraph`) instead of searching where their 10 nearest under the
# new weights keep at least `engine.RERANK_MIN` of those they were searched with: where the re-ranked lists
# themselves show no large change (`reweight.RELAYOUT_BELOW`); else the graph is searched and a large change laid out
# again. One line for both engines, chosen here on seed 0's 100,000 papers, from 0.5 / 0.3 / 0.2 (share kept by the
# re-ranked lists; settled score re-ranked / searched): to 0.45 / 0.3 / 0.25 0.93 (0.734 / 0.729); to 0.4 / 0.35 /
# 0.25 0.88 (0.780 / 0.780); to 0.35 / 0.35 / 0.3 0.82 (0.691 / 0.686, a fresh fit 0.685); to 0.2 / 0.3 / 0.5 0.60
# (searched). At a million papers (seed 1) the re-ranked lists of 0.4 / 0.35 / 0.25 (0.84) held 0.96 of the new
# weights' true 10 nearest, where the graph's search finds 0.88 of them. Those settled scores are after
# `reweight.SMALL_CHANGE_ITER` iterations, which a re-ranked change gets whatever its overlap (from the first frame,
# 25 against 40 iterations: 0.6889 / 0.6889 for 0.35 / 0.35 / 0.3, 0.7797 / 0.7780 for 0.4 / 0.35 / 0.25).


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


@dataclass(frozen=True)
class Spread:
    """The row-stochastic neighbour matrix W of a map (row i: its weights on its neighbours idx[i]) in blocks of
    rows, along which a weight change's first frame spreads the sample's moves (`moves`). Kept with the map
    (`AspectMap._cache[SPREAD_KEY]`): at a million papers building it took 0.7 s, the products 0.25 s on 2
    threads (scipy's sparse products release the GIL)."""

    blocks: tuple   # ((rows slice, CSR block of W), ...)
    n: int

    @classmethod
    def of(cls, idx: np.ndarray, weights: np.ndarray, parts: int = SPREAD_PARTS) -> "Spread":
        from scipy import sparse

        n, k = idx.shape
        index = np.int32 if n * k < 2 ** 31 else np.int64
        W = sparse.csr_matrix((np.asarray(weights, np.float32).ravel(), idx.astype(index).ravel(),
                               np.arange(0, n * k + 1, k, dtype=index)), shape=(n, n))
        bounds = np.linspace(0, n, max(1, min(parts, n)) + 1).astype(int)
        return cls(tuple((slice(lo, hi), W[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])), n)

    @classmethod
    def of_rows(cls, rows) -> "Spread":
        """Over each paper's FRAME_NEIGHBOURS nearest of a map's neighbour rows (indices, p_{j|i}, ...), nearest
        first (`reweight.knn_affinities`)."""
        k = min(FRAME_NEIGHBOURS, rows[0].shape[1])
        return cls.of(rows[0][:, :k], rows[1][:, :k])

    def moves(self, moves: np.ndarray, sample: np.ndarray, rounds: int = FRAME_ROUNDS, n_jobs: int = 1) -> np.ndarray:
        """(n, 2) moves of every paper from the sample's `moves` (s, 2): `rounds` products with W of the sample's
        moves and of its indicator, the one divided by the other. So each paper moves by the weighted mean move of
        the sample papers within `rounds` steps of it, the sample's own papers too (a move of their
        neighbourhood, not their own jitter, which would tear them from the papers around them). A paper with no
        sample paper that near stays where it is."""
        carried = np.zeros((self.n, 3), np.float32)  # the moves and the sample's indicator, carried together
        carried[sample, :2], carried[sample, 2] = moves, 1.0
        with ThreadPoolExecutor(max(1, int(n_jobs))) as pool:
            for _ in range(rounds):
                out = np.empty_like(carried)

                def product(block, source=carried, out=out):
                    out[block[0]] = block[1] @ source

                list(pool.map(product, self.blocks))
                carried = out
        mass = carried[:, 2:]
        return np.where(mass > 0, carried[:, :2] / np.where(mass > 0, mass, 1.0), 0.0).astype(np.float64)


def spread_of(amap) -> Spread:
    """The map's `Spread` over each paper's FRAME_NEIGHBOURS nearest: kept, else built from its neighbour rows."""
    if SPREAD_KEY not in amap._cache:
        amap._cache[SPREAD_KEY] = Spread.of_rows(amap._knn_rows())  # the fit's or the last change's
    return amap._cache[SPREAD_KEY]


def diffuse(moves: np.ndarray, sample: np.ndarray, idx: np.ndarray, weights: np.ndarray,
            rounds: int = FRAME_ROUNDS) -> np.ndarray:
    """`Spread.moves` of the neighbour rows idx (n, k) with their weights (n, k), built for this call."""
    return Spread.of(idx, weights).moves(moves, sample, rounds)


@dataclass(frozen=True)
class SampleFrame:
    """What a weight change's first frame needs of the sample, kept with the map (`AspectMap._cache[SAMPLE_KEY]`):
    sample (s,) its papers; idx (s, k) each one's neighbours within it (positions in `sample`); cosines (A, s, k)
    float32 each pair's cosine per aspect, in the map's aspect order; coords (s, 2) the sample relaxed under its
    own affinities at the map's weights. Under any weights alpha a pair's distance is 1 - sum_a alpha_a cos_a
    (`tsne_math.weighted_features`), so no row of features is built again."""

    sample: np.ndarray
    idx: np.ndarray
    cosines: np.ndarray
    coords: np.ndarray

    @classmethod
    def of(cls, amap, sample: np.ndarray, idx: np.ndarray, coords: np.ndarray, gradient: str, n_jobs: int,
           seed: int) -> "SampleFrame":
        """The sample's frame on `amap` laid out at `coords` (the map's (n, 2)): cosines from its embeddings by
        blocks of rows, then FRAME_RELAX_ITER iterations of the sample alone from its place on the map."""
        cosines = np.empty((len(amap.aspects),) + idx.shape, np.float32)
        for a, name in enumerate(amap.aspects):
            e = amap.embeddings[name][sample]  # the map's unit float32 rows
            for s in row_blocks(len(idx), 2048):
                cosines[a, s] = np.matmul(e[idx[s]], e[s][:, :, None])[:, :, 0]
        frame = cls(sample, idx, cosines, np.asarray(coords, np.float64)[sample])
        return frame.relaxed(aspect_weights(amap), amap.perplexity, FRAME_RELAX_ITER, gradient, n_jobs, seed)

    def affinities(self, alpha, perplexity: float):
        """openTSNE affinities of the sample under the aspect weights `alpha` (in the cosines' order, summing to 1):
        each row's distances 1 - sum_a alpha_a cos_a, calibrated to `perplexity`."""
        from openTSNE.affinity import PrecomputedAffinities

        d = np.ones(self.idx.shape, np.float64)
        for a, w in enumerate(alpha):
            d -= float(w) * self.cosines[a]
        return PrecomputedAffinities(knn_affinities(self.idx, np.clip(d, 0.0, 2.0), perplexity)[0], normalize=False)

    def relaxed(self, alpha, perplexity: float, n_iter: int, gradient: str, n_jobs: int, seed: int) -> "SampleFrame":
        """This frame with the sample moved n_iter warm iterations under its affinities at the weights `alpha`."""
        coords = reweight(self.coords, self.affinities(alpha, perplexity), n_iter, 0, None, gradient, n_jobs, seed)
        return replace(self, coords=coords)


@dataclass(frozen=True)
class KeptGraph:
    """The graph of all papers as it was searched, kept with the map (`AspectMap._cache[GRAPH_KEY]`) where
    `reduced.ReducedSearch` found it: idx (n, k) each paper's neighbours, nearest first at the weights of the
    search; cosines (A, n, k) float16 each pair's cosine per aspect, in the map's aspect order (the re-ranking
    computed them; 0.54 GB at a million papers of 90 neighbours and 3 aspects, each cosine within 2.5e-4).
    Under new weights a pair's distance is 1 - sum_a alpha_a cos_a, so a small change re-ranks these lists
    (`reranked`: 0.5 s at 100,000 papers, 4 to 7 s at a million) instead of searching again (30 s; 190 to
    330 s at a million)."""

    idx: np.ndarray
    cosines: np.ndarray

    def reranked(self, alpha) -> tuple[np.ndarray, np.ndarray]:
        """(indices, 1 - cos distances) (n, k) of each paper's kept neighbours under the aspect weights alpha (in
        the map's aspect order, summing to 1), nearest first."""
        d = np.ones(self.idx.shape, np.float64)
        for s in row_blocks(len(d)):
            for a, w in enumerate(alpha):
                d[s] -= float(w) * self.cosines[a, s].astype(np.float32)
        np.clip(d, 0.0, 2.0, out=d)
        return nearest_first(self.idx, d, self.idx.shape[1])[:2]

    def kept(self, idx: np.ndarray) -> float:
        """The share of each paper's 10 nearest in `idx` (re-ranked rows) among its 10 nearest as searched."""
        return neighbour_overlap(self.idx, idx)


def aspect_weights(amap) -> list[float]:
    """The map's aspect weights alpha (normalised when the map was made) in its aspects' order."""
    return [amap.weights[a] for a in amap.aspects]


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

    def _graph_rows(self, amap):
        """The features the graph of all papers is searched on. Annoy keeps its own float32 copy of every row (4.6 GB
        at a million papers): it reads them block by block (`AspectMap.feature_rows`), not beside a whole copy of
        them. Other searches get the array."""
        return amap.feature_rows() if self.search is None and slow_search(len(amap)) else amap.features()

    def layout(self, amap, y0, job):
        n = len(amap)
        if n <= self.sample_size:
            return super().layout(amap, y0, job)
        f, sample = self._graph_rows(amap), sample_indices(n, self.sample_size, job.seed)
        small = self._sample_layout(amap, f[sample], np.asarray(y0)[sample], job)
        return self._from_sample(amap, sample, small, self._graph(amap, f, job), job)

    def _graph(self, amap, f, job: Job):
        """The graph of all papers on their features f (`reweight.reweighted_affinities`' (affinities, neighbours,
        rows)); where the search gives each pair's cosines per aspect, they are kept with the map (`KeptGraph`)."""
        n_jobs, search = self._threads(), self.graph_search(len(f))
        if not isinstance(search, ReducedSearch):
            return reweighted_affinities(f, amap.perplexity, n_jobs, job.seed, self.trees, search)
        idx, d, cosines = search.search_kept(f, int(3 * amap.perplexity), n_jobs, job.seed)
        if cosines is not None:  # f is the map's `feature_rows`: its embeddings, in its aspect order
            amap._cache[GRAPH_KEY] = KeptGraph(idx, cosines)
        return graph_affinities(idx, d, amap.perplexity)

    def _reranked(self, old, new):
        """The graph under new's weights from old's `KeptGraph` re-ranked (kept in `new` too), where its 10 nearest
        keep at least RERANK_MIN of those it was searched with; else None (the graph is searched again). The
        calibration starts from old's precisions."""
        kept = old._cache.get(GRAPH_KEY)
        if not isinstance(kept, KeptGraph):
            return None
        idx, d = kept.reranked(aspect_weights(new))
        if kept.kept(idx) < RERANK_MIN:
            return None
        new._cache[GRAPH_KEY] = kept
        rows = old._cache.get("knn_rows")  # (indices, p_{j|i}, precisions, ...) of old's rows
        return graph_affinities(idx, d, old.perplexity, None if rows is None else rows[2])

    def _sample_layout(self, amap, f, y0: np.ndarray, job: Job) -> Layout:
        """The sample (its features f) laid out by `KNNEngine` (its search, its schedule) from y0 (s, 2)."""
        return KNNEngine(self.search, self.schedule, self.threads).layout_features(
            f, amap.perplexity, y0, Job(job.n_iter, job.seed, False, job.verbose))

    def _from_sample(self, amap, sample: np.ndarray, small: Layout, graph, job: Job) -> Layout:
        """Every paper placed from the sample's layout `small` and refined on the graph of all papers (the
        (affinities, neighbours, rows) of `reweighted_affinities`); keeps the map's `SampleFrame`."""
        affinities, knn, rows = graph
        n_jobs = self._threads()
        # At the sample's spread, not scaled up to a density like the sample's: openTSNE's FFT grid grows with the
        # square of the spread (10 iterations at 20,000 papers: 1.0 s, against 14 s at sqrt(n / s) times it).
        y = self._refine(place_rest(small.coords, sample, knn[0], rows[1]), affinities, n_jobs, job)
        amap._cache[SAMPLE_KEY] = SampleFrame.of(amap, sample, small.knn[0], y, self.gradient(len(sample), warm=False),
                                                 n_jobs, job.seed)
        amap._cache[SPREAD_KEY] = Spread.of_rows(rows)
        return Layout(y, knn, rows)

    def _refine(self, y, affinities, n_jobs: int, job: Job) -> np.ndarray:
        from openTSNE import TSNEEmbedding

        emb = TSNEEmbedding(y, affinities, negative_gradient_method=self.gradient(len(y), warm=False), n_jobs=n_jobs,
                            random_state=job.seed, verbose=job.verbose)
        emb.optimize(REFINE_EXAGGERATED_ITER, exaggeration=REFINE_EXAGGERATION, momentum=EARLY_MOMENTUM,
                     learning_rate="auto", inplace=True)
        emb.optimize(REFINE_ITER, momentum=MOMENTUM, learning_rate="auto", inplace=True)
        return np.array(emb, dtype=np.float64)

    def with_weights(self, old, new, job, on_frame=None, relayout=None):
        """The first frame from the sample alone (`first_frame`; `on_frame`), then the new graph (the kept
        neighbours re-ranked after a small change, `_reranked`; else searched), and from that frame: after a
        small change (re-ranked, or by `reweight.change_iterations`) `reweight.SMALL_CHANGE_ITER` warm
        iterations of the whole, after a middling one `reweight.iterations(n)` (job.n_iter in all); after a large
        one (relayout None: `reweight.large_change`, measured at any size), the sample laid out again and the
        rest placed and refined, as a fit does (on seed 0's 100,000 papers, 0.5 / 0.3 / 0.2 to 0.2 / 0.3 / 0.5,
        the score of benchmarks/map_million.py: warm iterations 0.355, laid out again 0.829, a fresh fit 0.827)."""
        if not isinstance(old._cache.get(SAMPLE_KEY), SampleFrame) or old.known_neighbours() is None:
            return super().with_weights(old, new, job, on_frame, relayout)
        frame = self.first_frame(old, new, job)
        if on_frame is not None:
            on_frame(frame)
        n, f = len(old), self._graph_rows(new)
        reranked = self._reranked(old, new)  # a small change: no search
        graph = reranked or self._graph(new, f, job)
        affinities, knn, rows = graph
        # A re-ranked graph is a small change by its own lists (their share kept, `KeptGraph.kept`, is at least
        # RERANK_MIN): it settles in SMALL_CHANGE_ITER, as a step that keeps SMALL_CHANGE of the 10 nearest does
        # (the scores at RERANK_MIN), and its overlap is not measured a second time.
        overlap = SMALL_CHANGE if reranked is not None else neighbour_overlap(old.known_neighbours()[0], knn[0])
        if large_change(overlap) if relayout is None else relayout:
            sample = old._cache[SAMPLE_KEY].sample
            # From the frame's sample shrunk (`reweight.shrunk`), as `reweight.relayout` starts: the map keeps its
            # orientation (from the PCA start of the new features instead: 0.827, against 0.829 from the frame).
            small = self._sample_layout(new, np.asarray(f[sample]), shrunk(frame[sample]), job)
            new.coords = self._from_sample(new, sample, small, graph, job).coords
        else:
            total = change_iterations(iterations(n), overlap) if job.n_iter is None else int(job.n_iter)
            new.coords = reweight(frame, affinities, FIRST_ITER, max(total - FIRST_ITER, 0), None,
                                  self.gradient(n, warm=True), self._threads(), job.seed)
        new.keep_neighbours(knn, rows)
        if SPREAD_KEY not in new._cache:  # a re-layout built it
            new._cache[SPREAD_KEY] = Spread.of_rows(rows)
        return new.prepare(background=True)

    def first_frame(self, old, new, job: Job) -> np.ndarray:
        """A weight change's first frame (n, 2), from the sample alone (module docstring): the sample moved
        FRAME_ITER iterations under its affinities at the new weights, every paper moved by its neighbourhood's
        share of the sample's moves (`diffuse`). Keeps the moved sample in `new` for the next change."""
        kept = old._cache[SAMPLE_KEY]
        # The FFT gradient at any sample size: at 25,000 papers an iteration took 0.06 s, Barnes-Hut's 0.18 s.
        moved = kept.relaxed(aspect_weights(new), old.perplexity, FRAME_ITER, "fft", self._threads(), job.seed)
        new._cache[SAMPLE_KEY] = moved
        return old.coords + spread_of(old).moves(moved.coords - kept.coords, kept.sample, FRAME_ROUNDS, self._threads())


ENGINES[SampledEngine.method] = SampledEngine  # saved maps reopen with it by name (`AspectMap.load`)
