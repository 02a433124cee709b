"""Map engines: how a map's 2-D coordinates are found, one class per method, its search and optimiser as parts.

* `ExactEngine` ("exact"): dense P from all distances and sklearn's exact descent (`optimiser.GainsDescent`);
* `KNNEngine` ("opentsne"): P over each paper's k = 3 x perplexity nearest papers, found by the map's
  neighbour search (`neighbours.NeighbourSearch`, chosen in `reweight.neighbours`), and openTSNE's
  Barnes-Hut or FFT gradient; a weight change starts warm (`reweight.py`), and finds the new neighbours by
  re-ranking each paper's searched ones after a small change where they were searched exactly, else by
  searching again.

Both run the phases of an `optimiser.Schedule` (early exaggeration, then settling). An engine is a frozen
dataclass: `AspectMap.fit(method=KNNEngine(search=MySearch()))` plugs in a search, and `tsne.engine_for`
fills the parts left None (the schedule, the thread count) from `tsne`'s settings at fit time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .neighbours import WARM_TREES, NeighbourSearch
from .optimiser import GainsDescent, Schedule
from .reduced import candidate_distances, nearest_first
from .reweight import (FIRST_ITER, RELAYOUT_BELOW, SMALL_CHANGE, change_iterations, change_overlap, graph_affinities,
                       iterations, large_change, neighbour_overlap, preview_affinities, reweight, reweighted_affinities,
                       slow_search)
from .reweight import relayout as lay_out_again

FFT_MIN = 10000             # fresh openTSNE fits: Barnes-Hut below this many points, FFT above (its rule)
WARM_FFT_MIN = 50000        # warm starts: Barnes-Hut up to here (see `KNNEngine`)
SEARCHED_KEY = "searched"   # `AspectMap._cache`: each paper's neighbours as last searched, which a re-ranked change keeps
# A weight change re-ranks each paper's searched neighbours under the new weights instead of searching again where
# their 10 nearest keep at least this share of those searched: where the re-ranked lists show no large change
# (`reweight.RELAYOUT_BELOW`), as `sampled.KeptGraph` does at a million papers; only where the search was exact
# (up to `reweight.EXACT_SEARCH_MAX` papers on a CPU). Measured in docs/results.md ("A small step at 10,000
# papers: the searched neighbours re-ranked").
RERANK_MIN = RELAYOUT_BELOW


@dataclass(frozen=True)
class Job:
    """What one layout run is asked for: n_iter settling iterations (None: the engine's default), warm or fresh."""

    n_iter: int | None = None
    seed: int = 42
    warm: bool = False
    verbose: bool = False


@dataclass(frozen=True)
class Layout:
    """An engine's answer: coordinates (n, 2) and, from a k-NN engine, the neighbours and rows it computed."""

    coords: np.ndarray
    knn: tuple | None = None       # (indices, 1 - cos distances), `reweight.neighbours`
    knn_rows: tuple | None = None  # `reweight.knn_affinities`' rows, which placing and inverting reuse


@dataclass(frozen=True)
class MapEngine:
    """How a map is laid out. Parts: `search`, the neighbour search (None: `reweight.neighbours`' choice by
    size); `schedule`, the phases; `threads`, a callable giving the threads a run may use (read when it starts)."""

    search: NeighbourSearch | None = None
    schedule: Schedule | None = None
    threads: Callable[[], int] | None = None
    method = ""           # the name a saved map records (`AspectMap.save`)
    sparse = False        # k-NN affinities: the map keeps its neighbours and builds its click caches when made
    iters = (500, 100)    # default settling iterations (fresh, warm)

    def n_iter(self, job: Job) -> int:
        """The settling iterations of `job`: its own, else the engine's default for a fresh or warm start."""
        return int(job.n_iter) if job.n_iter is not None else self.iters[1 if job.warm else 0]

    def layout(self, amap, y0: np.ndarray, job: Job) -> Layout:
        """Coordinates (n, 2) for the `AspectMap` amap (its weighted features, its perplexity), started from y0."""
        raise NotImplementedError

    def with_weights(self, old, new, job: Job, on_frame=None, relayout: bool | None = None):
        """The map `new` (old's corpus under new weights) laid out warm from `old` (an `AspectMap`): see
        `AspectMap.with_weights`; here a warm `layout` (relayout has no say)."""
        layout = self.layout(new, old.coords, job)
        new.coords = layout.coords
        if layout.knn is not None:
            new.keep_neighbours(layout.knn, layout.knn_rows)
        if on_frame is not None:
            on_frame(new.coords)
        return new


@dataclass(frozen=True)
class ExactEngine(MapEngine):
    """Dense P from all distances, sklearn's exact descent: the same map for the same inputs and seed.

    O(n^2) memory: for up to `max_points` papers.
    """

    optimiser: GainsDescent = field(default_factory=GainsDescent)
    max_points: int = 12000  # several dense n x n float64 matrices: 1.2 GB each at 12,000 points
    method = "exact"
    iters = (750, 300)  # 250 + 750 as sklearn's 1000 in all; a warm start 300

    def layout(self, amap, y0, job):
        n = len(amap)
        if n > self.max_points:
            raise ValueError(f"method='exact' holds several dense {n} x {n} matrices; use 'opentsne' or 'auto'")
        P = amap.joint_affinities()
        schedule = self.schedule or Schedule()
        lr = self.optimiser.learning_rate(n, schedule.exaggeration)  # the early exaggeration's, in both phases
        y = y0
        for phase in schedule.phases(self.n_iter(job), job.warm):
            y = self.optimiser.run(P, y, phase, lr, job.verbose)
        return Layout(y)


@dataclass(frozen=True)
class KNNEngine(MapEngine):
    """openTSNE on k-NN affinities: P over the 3 x perplexity nearest papers (the map's `search`), Barnes-Hut
    below FFT_MIN points and FFT above (openTSNE's rule for fresh fits; warm starts up to WARM_FFT_MIN, whose
    spread-out start makes the FFT grid large: 50 warm iterations at n = 10000 took BH 4.9 s, FFT 16.9 s)."""

    method = "opentsne"
    sparse = True

    def gradient(self, n: int, warm: bool) -> str:
        """openTSNE's negative gradient method for n points: "bh" or "fft"."""
        return "bh" if n < (WARM_FFT_MIN if warm else FFT_MIN) else "fft"

    def layout(self, amap, y0, job):
        return self.layout_features(amap.features(), amap.perplexity, y0, job)

    def layout_features(self, features: np.ndarray, perplexity: float, y0: np.ndarray, job: Job) -> Layout:
        """`layout` of unit weighted features (n, D) at `perplexity`: what `SampledEngine` lays its sample out with."""
        from openTSNE import TSNEEmbedding

        n_jobs = self._threads()
        # Euclidean on unit features: |f_i - f_j|^2 = 2 d(i, j), and openTSNE squares its distances, so its
        # rows are the exact path's rows restricted to the k-NN. The neighbours and rows are kept for
        # placing and inverting (`AspectMap._rows`).
        affinities, knn, rows = reweighted_affinities(features, perplexity, n_jobs, job.seed, search=self.search)
        emb = TSNEEmbedding(y0, affinities, negative_gradient_method=self.gradient(len(features), job.warm),
                            n_jobs=n_jobs, random_state=job.seed, verbose=job.verbose)
        for phase in (self.schedule or Schedule()).phases(self.n_iter(job), job.warm):
            if phase.iterations:
                emb.optimize(phase.iterations, exaggeration=phase.exaggeration, momentum=phase.momentum,
                             learning_rate="auto", inplace=True)
        return Layout(np.array(emb, dtype=np.float64), knn, rows)

    def _threads(self) -> int:
        return max(1, int(self.threads())) if self.threads is not None else 1

    def with_weights(self, old, new, job, on_frame=None, relayout=None):
        """New neighbours (the map's search), FIRST_ITER iterations to a first frame (`on_frame`), the rest
        of `reweight.iterations(n)` (fewer after a small change: `reweight.change_iterations`; or job.n_iter in
        all) to the settled map, laid out again after a large change (relayout None: `reweight.large_change`).
        After a small change on exactly searched neighbours nothing is searched: each paper's searched neighbours
        are re-ranked (`_reranked`).
        Where the search is slow (Annoy) the first frame comes before it, from the old neighbours
        (`reweight.preview_affinities`)."""
        n = len(old)
        total, n_jobs, gradient = (iterations(n) if job.n_iter is None else int(job.n_iter), self._threads(),
                                   self.gradient(n, warm=True))
        old_knn = old.known_neighbours()
        start, first = old.coords, min(FIRST_ITER, total)
        # A small change on exact neighbours: nothing searched. Annoy's lists (slow searches) re-ranked scored 0.02
        # below a new search at 100,000 papers (docs/results.md), so those are searched, their frame first.
        exact = not slow_search(n, self.search)
        graph = self._reranked(old, new) if relayout is not True and exact else None
        if graph is None and on_frame is not None and old_knn is not None and not exact:
            preview = preview_affinities(new.features(), old_knn[0], old.perplexity)  # a frame before the search
            start = reweight(old.coords, preview, first, 0, on_frame, gradient, n_jobs, job.seed)
            first, on_frame = 0, None  # shown
        reranked = graph is not None
        if not reranked:
            graph = reweighted_affinities(new.features(), old.perplexity, n_jobs, job.seed, WARM_TREES, self.search)
            new._cache[SEARCHED_KEY] = graph[1][0]
        affinities, knn, rows = graph
        new.keep_neighbours(knn, rows)
        # A re-ranked graph is a small change by its own lists (at least RERANK_MIN kept): it settles as one.
        overlap = SMALL_CHANGE if reranked else change_overlap(old_knn[0] if old_knn else None, knn[0])
        if relayout is None:
            relayout = large_change(overlap)
        if job.n_iter is None:  # a small change settles in fewer iterations
            total = change_iterations(total, overlap)

        def first_frame(coords):  # then the caches the layout does not change: here, not in a thread
            if on_frame is not None:  # beside openTSNE's, whose threads would wait for it
                on_frame(coords)
            new.prepare(layout=False)

        settle = 0 if relayout else max(total - FIRST_ITER, 0)
        coords = reweight(start, affinities, first, settle, first_frame, gradient, n_jobs, job.seed)
        if relayout:
            coords = lay_out_again(coords, affinities, self.gradient(n, warm=False), n_jobs, job.seed)
        new.coords = coords
        return new.prepare(background=True)

    def _reranked(self, old, new):
        """new's graph (`reweight.graph_affinities`' (affinities, neighbours, rows)) from each paper's neighbours as old's
        map last searched them, ranked by their distances under new's weights (`reduced.candidate_distances`), where
        their 10 nearest keep at least RERANK_MIN of those searched; else None (the graph is searched again). The
        calibration starts from old's precisions. The searched lists stay with new, so that steps in a row are
        measured against the search, not against each other."""
        searched = old._cache.get(SEARCHED_KEY)
        if searched is None:
            known = old.known_neighbours()
            if known is None:
                return None
            searched = np.asarray(known[0])
        d = candidate_distances(new.feature_rows(), searched, self._threads())
        idx, d = nearest_first(searched, d, searched.shape[1])[:2]
        if neighbour_overlap(searched, idx) < RERANK_MIN:
            return None
        new._cache[SEARCHED_KEY] = searched
        rows = old._cache.get("knn_rows")  # (indices, p_{j|i}, precisions, ...)
        return graph_affinities(idx, d, old.perplexity, None if rows is None else rows[2])


# A method's name -> its engine class: `tsne.engine_for` looks names up here, and a saved map is reopened with the
# engine of the name it recorded (an engine of one's own: add it here to reopen its maps by name).
ENGINES = {engine.method: engine for engine in (ExactEngine, KNNEngine)}
