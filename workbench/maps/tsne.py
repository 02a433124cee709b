"""Aspect-weighted t-SNE maps: fit, refit with new weights, place new points, invert 2-D points.

Paper section 6 and appendices A.9-A.11. A map is built from several aspect spaces at
once: the distance between papers i and j is

    d(i, j) = sum_a alpha_a * (1 - cos(e_i^a, e_j^a)),      alpha >= 0, sum alpha = 1.

For unit rows this is 1 - <f_i, f_j> with the "weighted features"
f = concat_a(sqrt(alpha_a) * e^a), which are unit vectors themselves. So one matrix
product gives every distance, and any Euclidean t-SNE on the features sees the same
neighbours (|f_i - f_j|^2 = 2 d(i, j)).

Affinity convention (the authors' code): sklearn's exact TSNE on the precomputed matrix
of 1 - cos, which it does *not* square, so p_{j|i} is proportional to
exp(-beta_i * d(i, j)). That is the usual Gaussian on |f_i - f_j|^2 (what openTSNE
computes on the unit features with metric="euclidean"), with beta rescaled, so the two
paths below calibrate the same rows.

Two fitting paths, each a map engine (`engine.py`) that the map holds, with its neighbour
search (`neighbours.py`) and optimiser (`optimiser.py`) as parts; `engine_for` turns a
method's name into one:

* "exact" (below EXACT_MAX points): dense P from all distances, and the dense KL gradient
  descent of sklearn's method="exact" (early exaggeration 12 for 250 steps at momentum 0.5,
  then momentum 0.8, delta-bar-delta gains, learning rate max(n / 48, 50));
* "opentsne": openTSNE's k-NN affinities (3 x perplexity neighbours) on the features, and
  its Barnes-Hut gradient below engine.FFT_MIN points, FFT above (openTSNE's rule for fresh
  fits; warm starts Barnes-Hut up to engine.WARM_FFT_MIN).

Placing a point (A.10) optimises its 2-D position only, against the frozen map; inverting
a 2-D point optimises a feature vector in the span of the corpus' top principal
components. Both cost O(n) per step: the O(n^2) quantities they need (the normaliser
Z of the map's Student-t kernel, each corpus row's Gaussian precision) are computed once
per map and cached, by `prepare` when a large map is made (in the background after a
weight change), so the first click costs what the next ones do.

The arithmetic without a map (weighted distances, affinities, the exact KL, the inversion's
objective, an empty spot between regions) is in `tsne_math.py`; both point optimisations run
one Adam loop (`optimiser.Adam`).
`leave_one_out_reconstruction` is appendix A.11's round trip (fit a map without a paper,
place it, invert its spot).

Typical use::

    amap = AspectMap.fit({"task": E1, "method": E2}, weights={"task": 0.7, "method": 0.3})
    amap2 = amap.with_weights({"task": 0.5, "method": 0.5})     # warm start, smooth change
    xy = amap.place({"task": e1_new, "method": e2_new})         # (m, 2)
    vectors = amap.invert([3.0, -1.5])                          # {"task": (d,), "method": (d,)}
    AspectMap.fit(E, method=KNNEngine(search=MySearch()))       # a neighbour search of one's own
    amap.save("runs/x/map"); AspectMap.load("runs/x/map")
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import threading
from pathlib import Path
from typing import Mapping

import numpy as np

from ..core.devices import free_threads
from ..core.files import write_arrays, write_json
from ..core.vectors import unit_rows
from .engine import ENGINES, Job, MapEngine
from .optimiser import Adam, Schedule
from .reweight import kernel_sum, knn_affinities, neighbours
from .sampled import SAMPLED_MIN  # registers the "sampled" engine in ENGINES
from .tsne_math import (calibrate_rows, check_embeddings, effective_perplexity, inversion_distances,
                        inversion_objective, joint_probabilities, new_features, normalize_weights, pca_init,
                        row_blocks, smallest, unit32, weighted_features, WeightedRows)

FORMAT = "workbench-aspect-map"
VERSION = 1
WEIGHTS_NAME = "map.safetensors"
CONFIG_NAME = "map_config.json"
METHODS = ("auto", *ENGINES)  # the names `engine_for` knows (an engine object is welcome too)
EXACT_MAX = 1500            # "auto" uses the dense exact method below this many points
# The phases of the engines built from a method's name (`engine_for`), read at fit time (tests shorten them).
EARLY_EXAGGERATION = Schedule.exaggeration      # sklearn's and openTSNE's default, 12
EXAGGERATION_ITER = Schedule.exaggeration_iter  # both libraries' length of the early exaggeration phase, 250
N_JOBS: int | None = None  # openTSNE threads; None: the cores free at fit time (devices.free_threads)
CLICK_SAMPLE = 0.03         # seconds the first click samples the idle cores for (a fit samples 0.3 s)
WEIGHT_SAMPLE = 0.1         # a weight change samples them for (its first frame waits on the sample)
PLACE_STEP = 0.02           # placing a point: Adam's first step, as a share of the map's spread (see `place`)
INVERT_ROWS, INVERT_REFRESH = 1000, 10  # an inversion's nearest corpus rows, and how often they are found again
PCA_ROWS = 2000             # corpus rows the inversion's principal components are estimated from
Z_PAIRS = 400_000_000       # Z from at most this many pairs: exact up to 20,000 points, sampled rows above


def thread_count(sample_seconds: float = 0.3) -> int:
    """openTSNE's threads: N_JOBS if set, else the cores free now (WORKBENCH_THREADS overrides).

    On a core another job keeps busy, openTSNE's threads wait for each other at every
    iteration: a 250-point fit took 10.1 s with 2 threads against 0.7 s with 1 on a shared
    2-core machine (benchmarks/maps.py, benchmarks/threads.py). The caches a click builds
    sample for CLICK_SAMPLE seconds instead: their whole work takes about as long as a sample.
    """
    if N_JOBS is not None:
        return max(1, int(N_JOBS))
    return min(8, free_threads(sample_seconds))


def engine_for(method, n: int) -> MapEngine:
    """The engine of a map of n points for `method`: "exact", "opentsne", "sampled", "auto" (exact below EXACT_MAX
    points, sampled from SAMPLED_MIN) or a `MapEngine` (its parts left None filled in); the one place a method's
    name is looked at. The schedule comes from EARLY_EXAGGERATION and EXAGGERATION_ITER as they are now, the
    threads from `thread_count` when a run starts."""
    if isinstance(method, MapEngine):
        engine = method
    elif method == "auto":
        engine = ENGINES["exact" if n < EXACT_MAX else "sampled" if n >= SAMPLED_MIN else "opentsne"]()
    elif isinstance(method, str) and method in ENGINES:  # ENGINES, not METHODS: engines added later count
        engine = ENGINES[method]()
    else:
        raise ValueError(f"method must be one of {('auto', *ENGINES)} or a MapEngine, got {method!r}")
    return dataclasses.replace(engine, schedule=engine.schedule or Schedule(EARLY_EXAGGERATION, EXAGGERATION_ITER),
                               threads=engine.threads or thread_count)


def _locked(method):
    """A cache builder of `AspectMap` under the map's lock: a background `prepare` and a click never build one
    cache twice, and a click that comes early waits for it."""
    @functools.wraps(method)
    def wrapper(self, *args):
        with self._lock:
            return method(self, *args)
    return wrapper


class AspectMap:
    """A 2-D t-SNE map of papers under aspect weights alpha, with placement and inversion.

    Attributes: aspects (list, the order of the feature blocks), weights (alpha, sums to 1),
    embeddings (aspect -> (n, d_a) unit rows, float32), coords ((n, 2) float64),
    perplexity, seed, engine (the `engine.MapEngine` that lays it out, with its neighbour search and
    optimiser as parts), method (its name, "exact" or "opentsne", the one actually used).
    """

    def __init__(self, embeddings, weights, coords, perplexity=30.0, seed=42, method="exact"):
        """A map from given coordinates (use `fit` to compute them); embeddings are unit-normalised here.

        method: a method's name or a `MapEngine` (see `engine_for`); weight changes and placed papers keep it."""
        self.embeddings = {a: unit32(e) for a, e in check_embeddings(embeddings).items()}
        self.aspects = list(self.embeddings)
        self.weights = normalize_weights(weights, self.aspects)
        self.coords = np.asarray(coords, dtype=np.float64)
        n = len(self)
        if self.coords.shape != (n, 2):
            raise ValueError(f"coords must have shape ({n}, 2), got {self.coords.shape}")
        self.perplexity = float(perplexity)
        self.seed = int(seed)
        self.engine = engine_for(method, n)
        self.method = self.engine.method
        self._cache: dict = {}
        self._lock = threading.RLock()  # guards _cache (see `prepare`)
        self.preparing: threading.Thread | None = None  # the background `prepare`, if one was started

    def __len__(self) -> int:
        return next(iter(self.embeddings.values())).shape[0]

    def __repr__(self) -> str:
        w = ", ".join(f"{a}={w:.2f}" for a, w in self.weights.items())
        return f"AspectMap({len(self)} points, {w}, perplexity {self.perplexity:g}, {self.method})"

    @property
    def search(self):
        """The neighbour search of the map's engine (None: `reweight.neighbours`' choice by size)."""
        return self.engine.search

    # ------------------------------------------------------------ fitting

    @classmethod
    def fit(cls, embeddings, weights=None, perplexity=30.0, method="auto", init=None, seed=42,
            n_iter=None, verbose=False) -> "AspectMap":
        """Fit a map of `embeddings` (aspect -> (n, d_a)) under `weights` (None: equal).

        method: "exact" (dense, sklearn's exact algorithm), "opentsne" (k-NN affinities,
        Barnes-Hut or FFT gradient), "auto" (exact below EXACT_MAX points), or an engine
        (`engine.ExactEngine`, `engine.KNNEngine(search=...)` with a neighbour search of one's
        own, a `neighbours.NeighbourSearch`). init: None for
        the scaled PCA start (seeded jitter), or an (n, 2) array. n_iter: iterations after
        the 250 of early exaggeration (default 750 exact, as sklearn's 1000 in all; 500
        openTSNE, its default). The exact path gives the same map for the same inputs and
        seed; openTSNE's is seeded too, but its approximate neighbour search (above 1000
        points) may vary with threads.
        """
        embeddings = check_embeddings(embeddings)
        n = next(iter(embeddings.values())).shape[0]
        perplexity = effective_perplexity(perplexity, n)  # warns once, here; the map keeps the clipped value
        amap = cls(embeddings, weights, np.zeros((n, 2)), perplexity, seed, engine_for(method, n))
        if init is None:
            y0 = pca_init(amap.feature_rows(), seed)
        else:
            y0 = np.array(init, dtype=np.float64)
            if y0.shape != (n, 2):
                raise ValueError(f"init must have shape ({n}, 2), got {y0.shape}")
        layout = amap.engine.layout(amap, y0, Job(n_iter, amap.seed, warm=False, verbose=verbose))
        amap.coords = layout.coords
        if layout.knn is not None:
            amap.keep_neighbours(layout.knn, layout.knn_rows)
        return amap.prepare() if amap.engine.sparse else amap

    def with_weights(self, weights, n_iter=None, on_frame=None, relayout=None) -> "AspectMap":
        """The same corpus mapped under new weights, started from this map's coordinates.

        No early exaggeration (it would tear the layout apart again) and fewer iterations: a small
        change gives a small, smooth move. Exact maps: 300 iterations of the dense gradient. openTSNE
        maps: the new neighbours (`reweight.neighbours`), reweight.FIRST_ITER iterations to a first
        frame (handed to `on_frame(coords)`, for a pane to draw at once), the rest of
        `reweight.iterations(n)` (80 at 10,000 papers, 25 after a small change; n_iter sets the total) to the
        settled map.
        relayout: lay the settled map out again from the first frame (`reweight.relayout`); None (the
        default) does after a large change (`reweight.large_change`). Where the search takes seconds (Annoy),
        on_frame's frame comes first, from the old neighbours (`reweight.preview_affinities`).
        """
        new = self._under(weights)
        if self.engine.sparse and self.engine.threads is thread_count:  # the engine's own call reuses this sample
            thread_count(WEIGHT_SAMPLE)
        return self.engine.with_weights(self, new, Job(n_iter, self.seed, warm=True), on_frame, relayout)

    def _under(self, weights) -> "AspectMap":
        """This map under `weights`, nothing cached; its embeddings shared, not checked again (4.6 GB read at 1M)."""
        new = copy.copy(self)
        new.weights, new.coords, new._cache = normalize_weights(weights, self.aspects), self.coords.copy(), {}
        new._lock, new.preparing = threading.RLock(), None
        return new

    def with_embeddings(self, embeddings, n_iter=None, on_frame=None) -> "AspectMap":
        """The same papers under the same weights with some aspects' embeddings replaced ({aspect: (n, d)}; a
        refit of taught heads), laid out through the weight change's warm path (`with_weights`): new neighbours,
        a first frame for `on_frame`, then the settled map."""
        new = type(self)({**self.embeddings, **{a: embeddings[a] for a in self.aspects if a in embeddings}},
                         self.weights, self.coords, self.perplexity, self.seed, self.engine)
        return self.engine.with_weights(self, new, Job(n_iter, self.seed, warm=True), on_frame, None)

    # ------------------------------------------------------------ cached per-map quantities

    def prepare(self, background: bool = False, n_components: int = 20, layout: bool = True) -> "AspectMap":
        """Build what placing and inverting a point need, so that the first click costs what the next ones do.

        The row precisions and K_j (`_rows`, from the neighbours the fit or weight change found), Z,
        the principal components and their products with the corpus: about 0.5 s at 10,000 papers of
        1,152 dimensions on 2 cores. background: in a thread (`self.preparing`); a click that comes first waits
        for it (the caches share one lock), and so does the interpreter's exit (a daemon thread still in BLAS at
        exit aborted a script whose last line was a weight change, exit status 134). `fit` prepares an openTSNE
        map before it returns, `with_weights` and `extend` in the background. layout=False: only what the layout
        does not change (precisions, components), which `with_weights` builds right after its first frame.
        """
        def build():
            with self._lock:
                if layout:
                    self._rows()
                elif self.engine.sparse and len(self) >= EXACT_MAX:
                    self._knn_rows()
                self._pca(n_components)
                bounds = np.cumsum([0] + [self.embeddings[a].shape[1] for a in self.aspects])
                for lo, hi in zip(bounds[:-1], bounds[1:]):
                    self._projections(n_components, int(lo), int(hi))

        if background:
            self.preparing = threading.Thread(target=build, name="aspect-map-prepare", daemon=False)
            self.preparing.start()
        else:
            build()
        return self

    @_locked
    def features(self) -> np.ndarray:
        """The weighted features of the corpus, `weighted_features(self.embeddings, self.weights)` (cached)."""
        if "features" not in self._cache:
            self._cache["features"] = weighted_features(self.embeddings, self.weights)
        return self._cache["features"]

    def feature_rows(self):
        """The features if the map holds them, else a `tsne_math.WeightedRows` that computes blocks of them: for one
        pass over the corpus (the PCA start, the sampled engine's graph, `prepare`'s products) that need not make
        a million-paper map hold its features (4.6 GB) beside its embeddings."""
        return self._cache.get("features", WeightedRows(self.embeddings, self.weights))

    def known_neighbours(self):
        """The (indices, ...) rows of the neighbours this map's fit or weight change searched, or None."""
        return self._cache.get("knn") or self._cache.get("knn_rows")  # the fit's, the last change's, prepare's

    def keep_neighbours(self, knn, knn_rows) -> None:
        """Keep the neighbours (indices, 1 - cos distances) and rows (`reweight.knn_affinities`) a layout found,
        for placing and inverting points (`_rows`) and for the next weight change."""
        self._cache["knn"], self._cache["knn_rows"] = knn, knn_rows

    @_locked
    def joint_affinities(self) -> np.ndarray:
        """The exact path's P (n, n): every pair's weighted distance, each row calibrated to the map's perplexity."""
        f = self.features().astype(np.float64)  # an exact map is small (EXACT_MAX)
        return joint_probabilities(np.clip(1.0 - f @ f.T, 0.0, 2.0), self.perplexity)

    def _corpus_products(self, x: np.ndarray) -> np.ndarray:
        """(m, n) float64 products of float64 rows x (m, D) with every corpus row's features, by blocks of corpus
        rows: the features stay float32 (a float64 copy of a million papers' is 9.2 GB), each product float64."""
        f = self.features()
        out = np.empty((len(x), len(f)))
        for s in row_blocks(len(f)):
            out[:, s] = x @ f[s].astype(np.float64).T
        return out

    @_locked
    def _rows(self):
        # Per corpus row j: its Gaussian precision beta_j and log normaliser (so that
        # p_{new|j} costs O(1)), and K_j = sum_i p_{i|j} log(p_ij / q_ij), which `invert_features`
        # needs for the first-order effect of a new point on row j's normalisation.
        # Full rows for small maps (as the exact fit); k-NN rows (`_knn_rows`) for large ones.
        if "rows" not in self._cache:
            n, y = len(self), self.coords
            perplexity = effective_perplexity(self.perplexity, n)
            if n < EXACT_MAX:
                f = self.features().astype(np.float64)
                d = np.clip(1.0 - f @ f.T, 0.0, 2.0)
                np.fill_diagonal(d, np.inf)
                cond, beta, log_norm = calibrate_rows(d, perplexity)
                P = (cond + cond.T) / (2.0 * n)
                w = 1.0 / (1.0 + np.sum((y[:, None, :] - y[None, :, :]) ** 2, axis=-1))
                np.fill_diagonal(w, 0.0)
                ratio = np.where(cond > 0, np.log(np.maximum(P, 1e-300) / np.maximum(w / self._z(), 1e-300)), 0.0)
                k_row = np.sum(cond * ratio, axis=1)
            else:
                idx, cond, beta, log_norm, p = self._knn_rows()
                k_row, z = np.empty(n), self._z()
                for s in row_blocks(n):  # (rows, k, 2) temporaries per block: 4.3 GB each at a million papers
                    w = 1.0 / (1.0 + np.sum((y[s, None, :] - y[idx[s]]) ** 2, axis=-1))
                    k_row[s] = np.sum(cond[s] * np.log(np.maximum(p[s], 1e-300) / (w / z)), axis=1)
            self._cache["rows"] = (beta, log_norm, k_row)
        return self._cache["rows"]

    @_locked
    def _knn_rows(self):
        # The part of `_rows` on a k-NN map that the layout does not change: each row's neighbours, its
        # conditional p_{i|j}, precision and log normaliser, and the symmetric p_ij of its neighbour pairs.
        if "knn_rows" not in self._cache:  # the fit and a weight change store theirs (`reweighted_affinities`)
            n, f = len(self), self.features()  # the searches take float32 rows
            perplexity = effective_perplexity(self.perplexity, n)
            k = min(n - 1, int(3 * perplexity))
            known = self._cache.get("knn")  # the neighbours the fit or weight change searched
            idx, d = (known[0][:, :k], known[1][:, :k]) if known is not None and known[0].shape[1] >= k \
                else neighbours(f, k, thread_count(CLICK_SAMPLE), self.seed, search=self.search)
            self._cache["knn_rows"] = knn_affinities(idx, d, perplexity)[1]
        return self._cache["knn_rows"]

    @_locked
    def _z(self) -> float:
        # Z = sum_{i != j} (1 + |y_i - y_j|^2)^-1 of the frozen map: O(n^2) once, in row blocks.
        if "z" not in self._cache:
            y = self.coords
            if len(y) < EXACT_MAX:  # small: float64, so the dense path's objective is the exact KL
                d2 = np.sum((y[:, None, :] - y[None, :, :]) ** 2, axis=-1)
                self._cache["z"] = float(np.sum(1.0 / (1.0 + d2))) - len(y)
            else:
                self._cache["z"] = kernel_sum(y, thread_count(CLICK_SAMPLE), max(Z_PAIRS // len(y), 1000), self.seed)
        return self._cache["z"]

    @_locked
    def _pca(self, n_components: int):
        # Mean, top components (k, D) and their standard deviations of the corpus features.
        # From at most PCA_ROWS seeded rows: the components only span the inversion's search space,
        # and at 10,000 papers of 1,152 dimensions the full covariance took 0.4 s of a first click.
        key = ("pca", n_components)
        if key not in self._cache:
            from scipy.linalg import eigh

            f = self.feature_rows()
            if len(f) > PCA_ROWS:
                f = f[np.sort(np.random.default_rng(self.seed).choice(len(f), PCA_ROWS, replace=False))]
            f = np.asarray(f, dtype=np.float64)
            mean = f.mean(axis=0)
            k = max(1, min(n_components, f.shape[1], len(f) - 1))
            dim = f.shape[1]
            vals, vecs = eigh((f - mean).T @ (f - mean) / len(f), subset_by_index=[dim - k, dim - 1])
            order = np.argsort(vals)[::-1]
            self._cache[key] = (mean, vecs[:, order].T.copy(), np.sqrt(np.maximum(vals[order], 1e-12)))
        return self._cache[key]

    @_locked
    def _projections(self, n_components: int, lo: int, hi: int):
        # The corpus block [lo:hi]'s products with the PCA mean and the scaled components of
        # `_pca`: (n,) and (n, k), in float64, for `_inversion_objective`.
        key = ("projections", n_components, lo, hi)
        if key not in self._cache:
            mean, comps, std = self._pca(n_components)
            f, basis = self.feature_rows(), (comps[:, lo:hi] * std[:, None]).T
            m_b, g_b = np.empty(len(f)), np.empty((len(f), basis.shape[1]))
            for s in row_blocks(len(f)):  # float64 by blocks of rows, not a float64 copy of the corpus
                block = f[s][:, lo:hi].astype(np.float64)
                m_b[s], g_b[s] = block @ mean[lo:hi], block @ basis
            self._cache[key] = (m_b, g_b)
        return self._cache[key]

    def _p_rows(self, d: np.ndarray) -> np.ndarray:
        # Symmetrised affinities p_{new,j} of m new points (distances d, (m, n)) to the corpus,
        # as in the (n + 1)-point map: (p_{j|new} + p_{new|j}) / 2(n + 1). The corpus rows keep
        # their precisions (one extra point barely moves a row of perplexity 30).
        n = d.shape[1]
        cond = calibrate_rows(d, effective_perplexity(self.perplexity, n + 1))[0]
        beta, log_norm, _ = self._rows()
        reverse = 1.0 / (1.0 + np.exp(np.clip(beta * d + log_norm, -700, 700)))  # sigmoid(-(...))
        return (cond + reverse) / (2.0 * (n + 1))

    # ------------------------------------------------------------ placing new points

    def _new_features(self, new_embeddings) -> np.ndarray:
        return new_features(new_embeddings, self.embeddings, self.weights)

    def place(self, new_embeddings: Mapping[str, np.ndarray], n_iter: int = 250) -> np.ndarray:
        """2-D positions (m, 2) for new papers, the map frozen (appendix A.10).

        Each point minimises the KL of the (n + 1)-point map with respect to its own position
        only: P from its weighted distances to the corpus (perplexity-calibrated), Q with its
        terms and the renormalisation they cause, Z = Z_map + 2 sum_j w_j. Started at the mean
        position of its 5 nearest papers (cosine in the weighted space). Points are placed
        independently of each other; each step costs O(m n).
        """
        sims = self._corpus_products(self._new_features(new_embeddings))
        p = self._p_rows(np.clip(1.0 - sims, 0.0, 2.0))
        near = np.argsort(-sims, axis=1, kind="stable")[:, :5]
        y0 = self.coords[near].mean(axis=1)
        return self._optimise_positions(p, y0, n_iter)

    def extend(self, new_embeddings: Mapping[str, np.ndarray], n_iter: int = 250) -> "AspectMap":
        """This map with new papers appended: each placed on the frozen map (`place`), nothing else moves.

        For papers added to a corpus after its map was drawn: the rest keeps its positions, so
        the map a user knows stays the map; a fresh fit (or `with_weights`) re-lays out everything.
        """
        placed = self.place(new_embeddings, n_iter=n_iter)
        embeddings = {a: np.concatenate([self.embeddings[a], unit32(np.asarray(new_embeddings[a]))])
                      for a in self.aspects}
        grown = type(self)(embeddings, self.weights, np.concatenate([self.coords, placed]), self.perplexity,
                           self.seed, self.engine)
        return grown.prepare(background=True) if grown.engine.sparse else grown

    def _position_loss(self, p, y, with_grad=True):
        # KL terms that depend on the new points' positions y (m, 2), up to a constant:
        # -2 sum_j p_j log w_j + log(Z_map + 2 sum_j w_j), and the gradient 4 sum_j (p_j - w_j / Z) w_j (y - y_j).
        diff = y[:, None, :] - self.coords[None, :, :]                 # (m, n, 2)
        w = 1.0 / (1.0 + np.einsum("mnk,mnk->mn", diff, diff))
        z = self._z() + 2.0 * w.sum(axis=1)
        loss = -2.0 * np.sum(p * np.log(w), axis=1) + np.log(z)
        if not with_grad:
            return loss, None
        grad = 4.0 * np.einsum("mn,mnk->mk", (p - w / z[:, None]) * w, diff)
        return loss, grad

    def _optimise_positions(self, p, y0, n_iter):
        # Adam (`optimiser.Adam`) with a step in map units (PLACE_STEP of the map's spread at first): the gradient
        # of one point is O(1/n), so a step size in map units is what stays sensible from 100 to 100,000
        # points. Each row of y is one point; the best position each had is returned.
        def evaluate(y, t):
            loss, grad = self._position_loss(p, y)
            return loss, grad, y

        return Adam().minimise(evaluate, y0, n_iter, PLACE_STEP * float(np.std(self.coords)) + 1e-12)

    # ------------------------------------------------------------ inverting 2-D points

    def nearest(self, point, k: int = 5) -> np.ndarray:
        """Indices of the k map points nearest to a 2-D point (closest first); (m, k) for (m, 2) points."""
        pts = np.asarray(point, dtype=np.float64)
        if pts.shape[-1] != 2 or pts.ndim > 2:
            raise ValueError(f"point must have shape (2,) or (m, 2), got {pts.shape}")
        d = np.sum((np.atleast_2d(pts)[:, None, :] - self.coords[None]) ** 2, axis=-1)
        idx = smallest(d, k)  # a tap at a million points need not sort a million distances
        return idx[0] if pts.ndim == 1 else idx

    def _inversion_objective(self, point, n_components: int = 20):
        """(objective, c0, distances) for inverting `point`: `tsne_math.inversion_objective` on this map's caches.

        c0: the start, the mean features of the point's 5 nearest map points, in the coordinates
        of the corpus features' top `n_components` principal components (scaled by their std);
        distances(c): `tsne_math.inversion_distances` to every corpus row.
        """
        y = np.asarray(point, dtype=np.float64).reshape(-1)
        if y.shape != (2,):
            raise ValueError(f"point must be a 2-D position, got shape {np.shape(point)}")
        diff = self.coords - y
        w = 1.0 / (1.0 + np.einsum("nk,nk->n", diff, diff))
        log_q = np.log(w / (self._z() + 2.0 * w.sum()))
        mean, comps, std = self._pca(n_components)
        bounds = np.cumsum([0] + [self.embeddings[a].shape[1] for a in self.aspects])
        blocks = [(lo, hi, math.sqrt(self.weights[a]), *self._projections(n_components, lo, hi))
                  for a, lo, hi in zip(self.aspects, bounds[:-1], bounds[1:]) if self.weights[a] > 0]
        objective = inversion_objective(log_q, mean, comps * std[:, None], blocks, self._rows(),
                                        effective_perplexity(self.perplexity, len(self) + 1))
        x0 = self.features()[self.nearest(y, 5)].astype(np.float64).mean(axis=0)
        return objective, ((x0 - mean) @ comps.T) / std, functools.partial(
            inversion_distances, mean=mean, basis=comps * std[:, None], blocks=blocks)

    def invert_features(self, point, n_components: int = 20, n_iter: int | None = None, lr: float = 0.05) -> np.ndarray:
        """A unit weighted-feature vector (D,) whose map position would be `point` (appendix A.10).

        Minimises the KL of the (n + 1)-point map over the new paper's features x, the map
        and the corpus frozen (see `_inversion_objective`): x = mean + (c * std) @ components
        in the span of the corpus features' top `n_components` principal components, started
        from the mean features of the point's 5 nearest map points, its perplexity-calibrated
        affinities re-solved every step. Adam (step `lr` in units of each component's
        standard deviation, cosine-decayed); O(n D) per step; the best x seen is returned.
        n_iter: None for `invert_steps(n)`. Above INVERT_ROWS papers each step reads only the
        INVERT_ROWS corpus rows nearest to x, found again every INVERT_REFRESH steps (the objective's
        `keep`): 0.05 s instead of 0.64 s per inversion at 100,000 papers.
        """
        n_iter = invert_steps(len(self)) if n_iter is None else int(n_iter)
        objective, c, distances = self._inversion_objective(point, n_components)
        keep = [None]

        def evaluate(c, t):  # one problem: the loss as a row of one, the x_hat it stands for as its row
            if len(self) > INVERT_ROWS and t % INVERT_REFRESH == 0:
                keep[0] = np.argpartition(distances(c), INVERT_ROWS)[:INVERT_ROWS]
            loss, grad, x_hat = objective(c, keep=keep[0])
            return np.array([loss]), grad, x_hat[None]

        return Adam().minimise(evaluate, c, n_iter, lr)[0]

    def invert(self, point, n_components: int = 20, n_iter: int | None = None) -> dict[str, np.ndarray]:
        """Per weighted aspect (alpha > 0), a unit vector (d_a,) for the 2-D `point`.

        `invert_features` split into aspect blocks, each divided by sqrt(alpha_a) (a unit vector).
        """
        x = self.invert_features(point, n_components=n_components, n_iter=n_iter)
        out, start = {}, 0
        for a in self.aspects:
            size = self.embeddings[a].shape[1]
            if self.weights[a] > 0:
                out[a] = unit_rows(x[start:start + size] / math.sqrt(self.weights[a]), np.float64)
            start += size
        return out

    # ------------------------------------------------------------ files

    def save(self, folder) -> Path:
        """Write folder/map.safetensors (coords and one tensor per aspect) and folder/map_config.json; no pickles."""

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {"coords": np.ascontiguousarray(self.coords)}
        # Keys by position, not by name: the names (any string) live in the config.
        for i, a in enumerate(self.aspects):
            tensors[f"embeddings/{i}"] = np.ascontiguousarray(self.embeddings[a])
        write_arrays(folder / WEIGHTS_NAME, tensors)  # the config last
        config = {"format": FORMAT, "version": VERSION, "aspects": self.aspects, "weights": self.weights,
                  "perplexity": self.perplexity, "seed": self.seed, "method": self.method, "n": len(self)}
        write_json(folder / CONFIG_NAME, config)
        return folder

    @classmethod
    def load(cls, folder) -> "AspectMap":
        """Read a map written by `save`."""
        from safetensors.numpy import load_file

        folder = Path(folder)
        config = read_map_config(folder)
        tensors = load_file(str(folder / WEIGHTS_NAME))
        embeddings = {a: tensors[f"embeddings/{i}"] for i, a in enumerate(config["aspects"])}
        return cls(embeddings, config["weights"], tensors["coords"], config["perplexity"], config["seed"],
                   config["method"])


def read_map_config(folder: Path) -> dict:
    """The config `AspectMap.save` wrote in `folder` (ValueError where the folder holds something else)."""
    config = json.loads((folder / CONFIG_NAME).read_text())
    if config.get("format") != FORMAT:
        raise ValueError(f"{folder} does not hold a {FORMAT} (format {config.get('format')!r})")
    return config


def invert_steps(n: int) -> int:
    """Adam steps of an inversion on a map of n papers: 300 on dense maps, 100 on k-NN (openTSNE) maps.

    Measured as the distance between a clicked point and where its inverted features are placed
    again: on a 250-paper map 3.1 map units after 100 steps, 1.1 after 300; on maps of 1,500 and
    10,000 papers the same (1.0-1.1, map spread 24-45) after 50, 100 or 300 steps.
    """
    return 300 if n < EXACT_MAX else 100


def leave_one_out_reconstruction(embeddings: Mapping[str, np.ndarray], index: int, weights=None,
                                 perplexity: float = 30.0, seed: int = 42, method: str = "auto") -> dict:
    """The paper's appendix A.11 round trip for one document.

    Fit a map without document `index`, place it from its embeddings, invert its map
    position back into an embedding. Returns {"point": (x, y), "reconstructed":
    {aspect: [D]}, "cosine": {aspect: cosine to the original}}.
    """
    n = len(next(iter(embeddings.values())))
    rest = np.array([i for i in range(n) if i != index])
    held = {a: np.asarray(v)[rest] for a, v in embeddings.items()}
    fitted = AspectMap.fit(held, weights, perplexity=perplexity, seed=seed, method=method)
    point = fitted.place({a: np.asarray(v)[[index]] for a, v in embeddings.items()})[0]
    rec = fitted.invert(point)
    cos = {a: float(unit_rows(rec[a]) @ unit_rows(np.asarray(embeddings[a])[index])) for a in rec}
    return {"point": (float(point[0]), float(point[1])), "reconstructed": rec, "cosine": cos}
