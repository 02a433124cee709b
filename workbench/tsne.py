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

Two fitting paths:

* "exact" (below EXACT_MAX points): dense P from all distances, and the dense KL gradient
  descent of sklearn's method="exact" (early exaggeration 12 for 250 steps at momentum 0.5,
  then momentum 0.8, delta-bar-delta gains, learning rate max(n / 48, 50));
* "opentsne": openTSNE's k-NN affinities (3 x perplexity neighbours) on the features, and
  its Barnes-Hut gradient below FFT_MIN points, its FFT-interpolated one above (openTSNE's
  own rule for fresh fits). A warm start begins from a finished, spread-out map, where
  the FFT grid is large: on 2 cores 50 warm iterations took 1.1 s (BH) against 5.3 s (FFT)
  at n = 2000, and 4.9 s against 16.9 s at n = 10000, so warm starts use Barnes-Hut up to
  WARM_FFT_MIN points.

Placing a point (A.10) optimises its 2-D position only, against the frozen map; inverting
a 2-D point optimises a feature vector in the span of the corpus' top principal
components. Both cost O(n) per step: the O(n^2) quantities they need (the normaliser
Z of the map's Student-t kernel, each corpus row's Gaussian precision) are computed once
per map and cached.

Typical use::

    amap = AspectMap.fit({"task": E1, "method": E2}, weights={"task": 0.7, "method": 0.3})
    amap2 = amap.with_weights({"task": 0.5, "method": 0.5})     # warm start, smooth change
    xy = amap.place({"task": e1_new, "method": e2_new})         # (m, 2)
    vectors = amap.invert([3.0, -1.5])                          # {"task": (d,), "method": (d,)}
    amap.save("runs/x/map"); AspectMap.load("runs/x/map")
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .files import write_json
from .vectors import unit_rows

FORMAT = "workbench-aspect-map"
VERSION = 1
WEIGHTS_NAME = "map.safetensors"
CONFIG_NAME = "map_config.json"
METHODS = ("auto", "exact", "opentsne")
EXACT_MAX = 1500            # "auto" uses the dense exact method below this many points
EARLY_EXAGGERATION = 12.0   # sklearn's and openTSNE's default
EXAGGERATION_ITER = 250     # both libraries' length of the early exaggeration phase
FFT_MIN = 10000             # fresh openTSNE fits: Barnes-Hut below this many points, FFT above (its rule)
WARM_FFT_MIN = 50000        # warm starts: Barnes-Hut up to here (see the module docstring)
N_JOBS: int | None = None  # openTSNE threads; None: the cores free at fit time (devices.free_threads)
CHUNK = 1024                # rows per block wherever an (n, n) product is reduced on the fly


# ---------------------------------------------------------------- weights and distances


def normalize_weights(weights, aspects: Sequence[str]) -> dict[str, float]:
    """Aspect weights alpha as a dict over `aspects` (in that order), non-negative, summing to 1.

    weights: a mapping aspect -> weight (missing aspects count 0), a sequence aligned with
    `aspects`, or None for equal weights. Raises ValueError for an unknown aspect, a
    negative, NaN or infinite weight, a sequence of the wrong length, or weights that are
    all zero; the message names the offender.
    """
    aspects = list(aspects)
    if not aspects:
        raise ValueError("no aspects to weight")
    if weights is None:
        return {a: 1.0 / len(aspects) for a in aspects}
    if isinstance(weights, Mapping):
        unknown = [k for k in weights if k not in aspects]
        if unknown:
            raise ValueError(f"weights for unknown aspects {unknown}; the aspects are {aspects}")
        raw = {a: weights.get(a, 0.0) for a in aspects}
    elif isinstance(weights, (str, bytes)):
        raise ValueError(f"weights must be a mapping or a sequence of numbers, got {weights!r}")
    else:
        values = list(np.asarray(weights, dtype=object).ravel()) if np.ndim(weights) else [weights]
        if len(values) != len(aspects):
            raise ValueError(f"{len(values)} weights for {len(aspects)} aspects {aspects}")
        raw = dict(zip(aspects, values))
    out = {}
    for a, w in raw.items():
        try:
            w = float(w)
        except (TypeError, ValueError):
            raise ValueError(f"weight of aspect {a!r} is not a number: {w!r}") from None
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"weight of aspect {a!r} must be finite and >= 0, got {w}")
        out[a] = w
    total = sum(out.values())
    if total <= 0:
        raise ValueError(f"all aspect weights are zero: {out}")
    return {a: w / total for a, w in out.items()}


def _unit32(e) -> np.ndarray:
    # float32 unit rows; rows that already are (a saved map, a refit) are kept bit for bit.
    if e.dtype == np.float32 and np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-6):
        return e
    return unit_rows(e, np.float64).astype(np.float32)


def _check_embeddings(embeddings: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if not isinstance(embeddings, Mapping) or not embeddings:
        raise ValueError("embeddings must be a non-empty mapping aspect -> (n, d) array")
    out, n = {}, None
    for a, e in embeddings.items():
        if hasattr(e, "detach"):  # torch tensors welcome
            e = e.detach().cpu().numpy()
        e = np.asarray(e)
        if e.ndim != 2 or e.shape[1] == 0:
            raise ValueError(f"embeddings[{a!r}] must be a 2-D (n, d) array, got shape {e.shape}")
        if n is not None and e.shape[0] != n:
            raise ValueError(f"embeddings[{a!r}] has {e.shape[0]} rows, the other aspects {n}")
        if not np.all(np.isfinite(e)):
            raise ValueError(f"embeddings[{a!r}] holds NaN or infinite values")
        n = e.shape[0]
        out[str(a)] = e
    return out


def weighted_features(embeddings: Mapping[str, np.ndarray], weights=None) -> np.ndarray:
    """Rows concat_a(sqrt(alpha_a) * unit(e^a)), in the order of `embeddings`: (n, sum d_a) float32.

    The rows are unit vectors and 1 - <f_i, f_j> is the weighted distance of
    `weighted_distance`. Aspects of weight 0 keep their (zero) columns, so the layout of
    the feature vector does not depend on the weights.
    """
    embeddings = _check_embeddings(embeddings)
    alpha = normalize_weights(weights, list(embeddings))
    blocks = [math.sqrt(alpha[a]) * unit_rows(e, np.float64) for a, e in embeddings.items()]
    return np.concatenate(blocks, axis=1).astype(np.float32)


def weighted_distance(embeddings: Mapping[str, np.ndarray], weights=None) -> np.ndarray:
    """(n, n) float64 matrix sum_a alpha_a * (1 - cos_a), each 1 - cos clipped to [0, 2] as the authors do.

    Computed aspect by aspect, independently of `weighted_features` (the tests check that
    the two agree). The diagonal is exactly 0.
    """
    embeddings = _check_embeddings(embeddings)
    alpha = normalize_weights(weights, list(embeddings))
    n = next(iter(embeddings.values())).shape[0]
    out = np.zeros((n, n))
    for a, e in embeddings.items():
        if alpha[a] > 0:
            u = unit_rows(e, np.float64)
            out += alpha[a] * np.clip(1.0 - u @ u.T, 0.0, 2.0)
    np.fill_diagonal(out, 0.0)
    return out


# ---------------------------------------------------------------- affinities


def _effective_perplexity(perplexity: float, n: int) -> float:
    perplexity = float(perplexity)
    if not perplexity > 0:
        raise ValueError(f"perplexity must be positive, got {perplexity}")
    limit = (n - 1) / 3.0
    if perplexity > limit:
        # Like openTSNE: a row cannot spread over more neighbours than it has.
        warnings.warn(f"perplexity {perplexity:g} is too high for {n} points; using {limit:g}", stacklevel=3)
        perplexity = limit
    if perplexity < 1:
        raise ValueError(f"t-SNE needs at least 4 points (got {n})")
    return perplexity


def calibrate_rows(distances: np.ndarray, perplexity: float, tol: float = 1e-5, max_steps: int = 200,
                   beta0: np.ndarray | None = None):
    """Binary search, all rows at once, for beta_i such that p_{j|i} ∝ exp(-beta_i d_ij) has perplexity `perplexity`.

    distances: (m, k) float64, np.inf for excluded pairs (a point and itself). Returns
    (P (m, k) with rows summing to 1, beta (m,), log_norm (m,)), where
    log_norm_i = log sum_j exp(-beta_i d_ij): it lets a later caller add one more point
    to row i (p_{new|i} = sigmoid(-(beta_i d + log_norm_i))) without the row's O(k) sum.
    tol is on the entropy in nats, so the perplexity is met to a relative 1e-5.
    beta0: a close guess (the previous step's betas, when an optimiser moves a point a
    little); a few safeguarded Newton steps then replace the ~40 bisection steps.
    """
    d = np.asarray(distances, dtype=np.float64)
    finite = np.isfinite(d)
    # Shift each row by its smallest distance: the row's distribution does not change,
    # and exp() cannot underflow to an all-zero row however large beta gets.
    shift = np.where(finite, d, np.inf).min(axis=1)
    shift = np.where(np.isfinite(shift), shift, 0.0)
    d0 = np.where(finite, d - shift[:, None], 0.0)
    target = math.log(perplexity)
    if beta0 is not None:
        # Newton on the entropy H(beta) = log S + beta <d>, dH/dbeta = -beta Var(d), each
        # step limited to a factor 2; rows that have not converged fall back to bisection.
        beta = np.array(beta0, dtype=np.float64)
        for _ in range(8):
            e = np.where(finite, np.exp(-d0 * beta[:, None]), 0.0)
            p = e / e.sum(axis=1, keepdims=True)
            mean = (d0 * p).sum(axis=1)
            diff = np.log(e.sum(axis=1)) + beta * mean - target
            if np.all(np.abs(diff) <= tol):
                return p, beta, np.log(e.sum(axis=1)) - beta * shift
            var = np.maximum((d0 * d0 * p).sum(axis=1) - mean ** 2, 1e-300)
            beta = beta * np.clip(1.0 + diff / (beta * beta * var), 0.5, 2.0)
    beta = np.ones(d.shape[0])
    lo, hi = np.zeros_like(beta), np.full_like(beta, np.inf)
    for _ in range(max_steps):
        e = np.where(finite, np.exp(-d0 * beta[:, None]), 0.0)
        s = e.sum(axis=1)
        entropy = np.log(s) + beta * (d0 * e).sum(axis=1) / s
        diff = entropy - target
        todo = np.abs(diff) > tol
        if not todo.any():
            break
        up = todo & (diff > 0)      # too flat: sharpen
        down = todo & (diff < 0)    # too peaked: flatten
        lo = np.where(up, beta, lo)
        hi = np.where(down, beta, hi)
        beta = np.where(up, np.where(np.isinf(hi), beta * 2.0, (beta + hi) / 2.0), beta)
        beta = np.where(down, (beta + lo) / 2.0, beta)
    e = np.where(finite, np.exp(-d0 * beta[:, None]), 0.0)
    s = e.sum(axis=1)
    return e / s[:, None], beta, np.log(s) - beta * shift


def conditional_probabilities(distances: np.ndarray, perplexity: float = 30.0) -> np.ndarray:
    """(n, n) conditional rows p_{j|i} ∝ exp(-beta_i * d_ij), p_{i|i} = 0, each of perplexity `perplexity`.

    `distances` are used as given (1 - cos, not squared: the authors' convention, which is
    what sklearn's `_joint_probabilities` does with its input). Perplexity is clipped to
    (n - 1) / 3 with a warning.
    """
    d = np.array(distances, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"distances must be a square matrix, got shape {d.shape}")
    perplexity = _effective_perplexity(perplexity, d.shape[0])
    np.fill_diagonal(d, np.inf)
    return calibrate_rows(d, perplexity)[0]


def joint_probabilities(distances: np.ndarray, perplexity: float = 30.0) -> np.ndarray:
    """Exact symmetric t-SNE affinities P = (p_{j|i} + p_{i|j}) / 2n from an (n, n) distance matrix; P sums to 1.

    Same input convention as `conditional_probabilities` (and sklearn's exact method on a
    precomputed matrix): the distances enter the Gaussian unsquared.
    """
    cond = conditional_probabilities(distances, perplexity)
    return (cond + cond.T) / (2.0 * cond.shape[0])


# ---------------------------------------------------------------- exact t-SNE


def _kl_gradient(P: np.ndarray, Y: np.ndarray, with_kl: bool = True):
    # Dense O(n^2): the Student-t kernel W, Q = W / Z, grad_i = 4 sum_j (p_ij - q_ij) w_ij (y_i - y_j).
    sq = np.einsum("ij,ij->i", Y, Y)
    W = sq[:, None] + sq[None, :] - 2.0 * (Y @ Y.T)
    np.maximum(W, 0.0, out=W)
    W += 1.0
    np.reciprocal(W, out=W)
    np.fill_diagonal(W, 0.0)
    Z = W.sum()
    PQ = (P - W / Z) * W
    grad = 4.0 * (PQ.sum(axis=1)[:, None] * Y - PQ @ Y)
    kl = float("nan")
    if with_kl:
        mask = P > 0
        kl = float(np.sum(P[mask] * (np.log(P[mask]) - np.log(W[mask] / Z))))
    return kl, grad


def kl_divergence(P: np.ndarray, Y: np.ndarray) -> tuple[float, np.ndarray]:
    """Exact t-SNE objective KL(P || Q) and its gradient with respect to Y (n, 2).

    Q is the normalised Student-t kernel of Y, q_ij = (1 + |y_i - y_j|^2)^-1 / Z; pairs with
    p_ij = 0 contribute nothing. Dense, O(n^2) memory: for maps of up to a few thousand points.
    """
    P = np.asarray(P, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] != P.shape[1] or Y.ndim != 2 or Y.shape[0] != P.shape[0]:
        raise ValueError(f"kl_divergence wants P (n, n) and Y (n, k), got {P.shape} and {Y.shape}")
    return _kl_gradient(P, Y, with_kl=True)


def _gradient_descent(P, Y, n_iter, momentum, learning_rate, exaggeration=1.0, verbose=False, label=""):
    # sklearn's _gradient_descent: momentum plus per-coordinate gains that grow while the
    # gradient keeps its sign and shrink when it flips (delta-bar-delta, min gain 0.01).
    Y = Y.copy()
    update = np.zeros_like(Y)
    gains = np.ones_like(Y)
    PE = P * exaggeration if exaggeration != 1.0 else P
    for it in range(n_iter):
        report = verbose and ((it + 1) % 50 == 0 or it == n_iter - 1)
        kl, grad = _kl_gradient(PE, Y, with_kl=report)
        same = update * grad < 0.0
        gains = np.where(same, gains + 0.2, gains * 0.8)
        np.clip(gains, 0.01, None, out=gains)
        update = momentum * update - learning_rate * gains * grad
        Y += update
        if report:
            print(f"[t-SNE exact{label}] iteration {it + 1}: KL {kl:.4f}, gradient norm {np.linalg.norm(grad):.2e}")
        if np.linalg.norm(grad) < 1e-7:
            break
    return Y


def thread_count() -> int:
    """openTSNE's threads: N_JOBS if set, else the cores free now (WORKBENCH_THREADS overrides).

    On a core another job keeps busy, openTSNE's threads wait for each other at every
    iteration: a 250-point fit took 10.1 s with 2 threads against 0.7 s with 1 on a shared
    2-core machine (benchmarks/maps.py, benchmarks/threads.py).
    """
    if N_JOBS is not None:
        return max(1, int(N_JOBS))
    from .devices import free_threads

    return min(8, free_threads())


def _pca_init(features: np.ndarray, seed: int) -> np.ndarray:
    # sklearn's init="pca": the top two principal components, scaled so that the first has
    # standard deviation 1e-4 (a tiny start lets early exaggeration form the clusters).
    # A seeded jitter of 1% of that scale separates duplicate points and makes `seed` mean
    # something on both paths.
    x = np.asarray(features, dtype=np.float64)
    x = x - x.mean(axis=0)
    vals, vecs = np.linalg.eigh(x.T @ x)
    comps = vecs[:, ::-1][:, :2]
    comps *= np.where(comps[np.abs(comps).argmax(axis=0), [0, 1]] < 0, -1.0, 1.0)  # sign convention
    y = x @ comps
    y = y / max(float(np.std(y[:, 0])), 1e-12) * 1e-4
    return y + np.random.default_rng(seed).normal(scale=1e-6, size=y.shape)


def knn_rows(features: np.ndarray, k: int):
    """(n, k) indices and 1 - cos distances of each row's k nearest other rows (chunked matmul)."""
    f = np.asarray(features, dtype=np.float64)
    n = f.shape[0]
    idx = np.empty((n, k), dtype=np.int64)
    dist = np.empty((n, k))
    for start in range(0, n, CHUNK):
        sims = f[start:start + CHUNK] @ f.T
        rows = np.arange(sims.shape[0])
        sims[rows, start + rows] = -np.inf
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        idx[start:start + CHUNK] = top
        dist[start:start + CHUNK] = np.clip(1.0 - np.take_along_axis(sims, top, axis=1), 0.0, 2.0)
    return idx, dist


# ---------------------------------------------------------------- the map


class AspectMap:
    """A 2-D t-SNE map of papers under aspect weights alpha, with placement and inversion.

    Attributes: aspects (list, the order of the feature blocks), weights (alpha, sums to 1),
    embeddings (aspect -> (n, d_a) unit rows, float32), coords ((n, 2) float64),
    perplexity, seed, method ("exact" or "opentsne", the one actually used).
    """

    def __init__(self, embeddings, weights, coords, perplexity=30.0, seed=42, method="exact"):
        """A map from given coordinates (use `fit` to compute them); embeddings are unit-normalised here."""
        self.embeddings = {a: _unit32(e) for a, e in _check_embeddings(embeddings).items()}
        self.aspects = list(self.embeddings)
        self.weights = normalize_weights(weights, self.aspects)
        self.coords = np.asarray(coords, dtype=np.float64)
        n = len(self)
        if self.coords.shape != (n, 2):
            raise ValueError(f"coords must have shape ({n}, 2), got {self.coords.shape}")
        self.perplexity = float(perplexity)
        self.seed = int(seed)
        self.method = str(method)
        self._cache: dict = {}

    def __len__(self) -> int:
        return next(iter(self.embeddings.values())).shape[0]

    def __repr__(self) -> str:
        w = ", ".join(f"{a}={w:.2f}" for a, w in self.weights.items())
        return f"AspectMap({len(self)} points, {w}, perplexity {self.perplexity:g}, {self.method})"

    # ------------------------------------------------------------ fitting

    @classmethod
    def fit(cls, embeddings, weights=None, perplexity=30.0, method="auto", init=None, seed=42,
            n_iter=None, verbose=False) -> "AspectMap":
        """Fit a map of `embeddings` (aspect -> (n, d_a)) under `weights` (None: equal).

        method: "exact" (dense, sklearn's exact algorithm), "opentsne" (k-NN affinities,
        Barnes-Hut or FFT gradient) or "auto" (exact below EXACT_MAX points). init: None for
        the scaled PCA start (seeded jitter), or an (n, 2) array. n_iter: iterations after
        the 250 of early exaggeration (default 750 exact, as sklearn's 1000 in all; 500
        openTSNE, its default). The exact path gives the same map for the same inputs and
        seed; openTSNE's is seeded too, but its approximate neighbour search (above 1000
        points) may vary with threads.
        """
        return cls._fit(embeddings, weights, perplexity, method, init, seed, n_iter, verbose, warm=False)

    def with_weights(self, weights, n_iter=None) -> "AspectMap":
        """The same corpus mapped under new weights, started from this map's coordinates.

        No early exaggeration (it would tear the layout apart again) and fewer iterations
        (default 300 exact, 100 openTSNE): a small weight change gives a small, smooth move.
        (On openTSNE maps of 2,000 and 10,000 points the share of preserved 10-NN was the
        same after 50 warm iterations as after 250; the KL still falls slowly with more.)
        """
        return type(self)._fit(self.embeddings, weights, self.perplexity, self.method, self.coords,
                               self.seed, n_iter, False, warm=True)

    @classmethod
    def _fit(cls, embeddings, weights, perplexity, method, init, seed, n_iter, verbose, warm):
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        embeddings = _check_embeddings(embeddings)
        n = next(iter(embeddings.values())).shape[0]
        perplexity = _effective_perplexity(perplexity, n)  # warns once, here; the map keeps the clipped value
        amap = cls(embeddings, weights, np.zeros((n, 2)), perplexity, seed)
        amap.method = ("exact" if n < EXACT_MAX else "opentsne") if method == "auto" else method
        if amap.method == "exact" and n > 8 * EXACT_MAX:
            raise ValueError(f"method='exact' holds several dense {n} x {n} matrices; use 'opentsne' or 'auto'")
        features = amap.features()
        if init is None:
            y0 = _pca_init(features, seed)
        else:
            y0 = np.array(init, dtype=np.float64)
            if y0.shape != (n, 2):
                raise ValueError(f"init must have shape ({n}, 2), got {y0.shape}")
        n_exag = 0 if warm else EXAGGERATION_ITER
        if amap.method == "exact":
            n_iter = (300 if warm else 750) if n_iter is None else int(n_iter)
            f = features.astype(np.float64)
            P = joint_probabilities(np.clip(1.0 - f @ f.T, 0.0, 2.0), perplexity)
            lr = max(n / EARLY_EXAGGERATION / 4.0, 50.0)   # sklearn's learning_rate="auto"
            y = _gradient_descent(P, y0, n_exag, 0.5, lr, EARLY_EXAGGERATION, verbose, " early")
            y = _gradient_descent(P, y, n_iter, 0.8, lr, 1.0, verbose)
        else:
            from openTSNE import TSNEEmbedding
            from openTSNE.affinity import PerplexityBasedNN

            n_iter = (100 if warm else 500) if n_iter is None else int(n_iter)
            n_jobs = thread_count()
            # Euclidean on unit features: |f_i - f_j|^2 = 2 d(i, j), and openTSNE squares
            # its distances, so its rows are the exact path's rows restricted to the k-NN.
            affinities = PerplexityBasedNN(features.astype(np.float64), perplexity=perplexity, metric="euclidean",
                                           n_jobs=n_jobs, random_state=seed, verbose=verbose)
            gradient = "bh" if n < (WARM_FFT_MIN if warm else FFT_MIN) else "fft"
            emb = TSNEEmbedding(y0, affinities, negative_gradient_method=gradient, n_jobs=n_jobs,
                                random_state=seed, verbose=verbose)
            if n_exag:
                emb.optimize(n_exag, exaggeration=EARLY_EXAGGERATION, momentum=0.5, learning_rate="auto",
                             inplace=True)
            emb.optimize(n_iter, momentum=0.8, learning_rate="auto", inplace=True)
            y = np.array(emb, dtype=np.float64)
        amap.coords = y
        return amap

    # ------------------------------------------------------------ cached per-map quantities

    def features(self) -> np.ndarray:
        """The weighted features of the corpus, `weighted_features(self.embeddings, self.weights)` (cached)."""
        if "features" not in self._cache:
            self._cache["features"] = weighted_features(self.embeddings, self.weights)
        return self._cache["features"]

    def _features64(self) -> np.ndarray:
        if "features64" not in self._cache:
            self._cache["features64"] = self.features().astype(np.float64)
        return self._cache["features64"]

    def _rows(self):
        # Per corpus row j: its Gaussian precision beta_j and log normaliser (so that
        # p_{new|j} costs O(1)), and K_j = sum_i p_{i|j} log(p_ij / q_ij), which `invert_features`
        # needs for the first-order effect of a new point on row j's normalisation.
        # Full rows for small maps (what the exact fit used); k-NN rows (3 x perplexity, as
        # openTSNE) for large ones, where the far tail of a row is negligible anyway.
        if "rows" not in self._cache:
            n, f, y = len(self), self._features64(), self.coords
            perplexity = _effective_perplexity(self.perplexity, n)
            if n < EXACT_MAX:
                d = np.clip(1.0 - f @ f.T, 0.0, 2.0)
                np.fill_diagonal(d, np.inf)
                cond, beta, log_norm = calibrate_rows(d, perplexity)
                P = (cond + cond.T) / (2.0 * n)
                w = 1.0 / (1.0 + np.sum((y[:, None, :] - y[None, :, :]) ** 2, axis=-1))
                np.fill_diagonal(w, 0.0)
                ratio = np.where(cond > 0, np.log(np.maximum(P, 1e-300) / np.maximum(w / self._z(), 1e-300)), 0.0)
                k_row = np.sum(cond * ratio, axis=1)
            else:
                from scipy import sparse

                idx, d = knn_rows(f, min(n - 1, int(3 * perplexity)))
                cond, beta, log_norm = calibrate_rows(d, perplexity)
                rows = np.repeat(np.arange(n), idx.shape[1])
                C = sparse.csr_matrix((cond.ravel(), (rows, idx.ravel())), shape=(n, n))
                P = (C + C.T) / (2.0 * n)
                p = np.asarray(P[rows, idx.ravel()]).reshape(idx.shape)
                w = 1.0 / (1.0 + np.sum((y[:, None, :] - y[idx]) ** 2, axis=-1))
                k_row = np.sum(cond * np.log(np.maximum(p, 1e-300) / (w / self._z())), axis=1)
            self._cache["rows"] = (beta, log_norm, k_row)
        return self._cache["rows"]

    def _z(self) -> float:
        # Z = sum_{i != j} (1 + |y_i - y_j|^2)^-1 of the frozen map: O(n^2) once, in row blocks.
        if "z" not in self._cache:
            y = self.coords
            sq = np.einsum("ij,ij->i", y, y)
            z = 0.0
            for start in range(0, len(y), CHUNK):
                blk = sq[start:start + CHUNK, None] + sq[None, :] - 2.0 * (y[start:start + CHUNK] @ y.T)
                z += float(np.sum(1.0 / (1.0 + np.maximum(blk, 0.0))))
            self._cache["z"] = z - len(y)  # drop the diagonal terms (1 each)
        return self._cache["z"]

    def _pca(self, n_components: int):
        # Mean, top components (k, D) and their standard deviations of the corpus features.
        key = ("pca", n_components)
        if key not in self._cache:
            f = self._features64()
            mean = f.mean(axis=0)
            vals, vecs = np.linalg.eigh((f - mean).T @ (f - mean) / len(f))
            k = max(1, min(n_components, f.shape[1], len(f) - 1))
            order = np.argsort(vals)[::-1][:k]
            self._cache[key] = (mean, vecs[:, order].T.copy(), np.sqrt(np.maximum(vals[order], 1e-12)))
        return self._cache[key]

    def _p_rows(self, d: np.ndarray) -> np.ndarray:
        # Symmetrised affinities p_{new,j} of m new points (distances d, (m, n)) to the corpus,
        # as in the (n + 1)-point map: (p_{j|new} + p_{new|j}) / 2(n + 1). The corpus rows keep
        # their precisions (one extra point barely moves a row of perplexity 30).
        n = d.shape[1]
        cond = calibrate_rows(d, _effective_perplexity(self.perplexity, n + 1))[0]
        beta, log_norm, _ = self._rows()
        reverse = 1.0 / (1.0 + np.exp(np.clip(beta * d + log_norm, -700, 700)))  # sigmoid(-(...))
        return (cond + reverse) / (2.0 * (n + 1))

    # ------------------------------------------------------------ placing new points

    def _new_features(self, new_embeddings) -> np.ndarray:
        if not isinstance(new_embeddings, Mapping):
            raise ValueError("new_embeddings must be a mapping aspect -> (m, d_a) array")
        unknown = [a for a in new_embeddings if a not in self.aspects]
        missing = [a for a in self.aspects if self.weights[a] > 0 and a not in new_embeddings]
        if unknown or missing:
            raise ValueError(f"new_embeddings: unknown aspects {unknown}, missing weighted aspects {missing}")
        rows = {}
        for a, e in new_embeddings.items():
            if hasattr(e, "detach"):
                e = e.detach().cpu().numpy()
            e = np.atleast_2d(np.asarray(e, dtype=np.float64))
            want = self.embeddings[a].shape[1]
            if e.ndim != 2 or e.shape[1] != want:
                raise ValueError(f"new_embeddings[{a!r}] has shape {e.shape}, the map's aspect has dimension {want}")
            rows[a] = e
        m = {e.shape[0] for e in rows.values()}
        if len(m) != 1:
            raise ValueError(f"new_embeddings have different numbers of rows: {sorted(m)}")
        m = m.pop()
        # Aspects of weight 0 may be left out: their columns are zero anyway.
        full = {a: rows.get(a, np.zeros((m, self.embeddings[a].shape[1]))) for a in self.aspects}
        return weighted_features(full, self.weights).astype(np.float64)

    def place(self, new_embeddings: Mapping[str, np.ndarray], n_iter: int = 250) -> np.ndarray:
        """2-D positions (m, 2) for new papers, the map frozen (appendix A.10).

        Each point minimises the KL of the (n + 1)-point map with respect to its own position
        only: P from its weighted distances to the corpus (perplexity-calibrated), Q with its
        terms and the renormalisation they cause, Z = Z_map + 2 sum_j w_j. Started at the mean
        position of its 5 nearest papers (cosine in the weighted space). Points are placed
        independently of each other; each step costs O(m n).
        """
        f = self._new_features(new_embeddings)
        corpus = self._features64()
        sims = f @ corpus.T
        p = self._p_rows(np.clip(1.0 - sims, 0.0, 2.0))
        near = np.argsort(-sims, axis=1, kind="stable")[:, :5]
        y0 = self.coords[near].mean(axis=1)
        return self._optimise_positions(p, y0, n_iter)

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
        # Adam with a cosine-decayed step in map units (2% of the map's spread at first): the
        # gradient of one point is O(1/n), so a step size in map units is what stays sensible
        # from 100 to 100,000 points. The best position seen is returned.
        y = y0.copy()
        lr0 = 0.02 * float(np.std(self.coords)) + 1e-12
        m1, m2 = np.zeros_like(y), np.zeros_like(y)
        best_loss, _ = self._position_loss(p, y, with_grad=False)
        best = y.copy()
        for t in range(1, int(n_iter) + 1):
            _, grad = self._position_loss(p, y)
            m1 = 0.9 * m1 + 0.1 * grad
            m2 = 0.999 * m2 + 0.001 * grad * grad
            lr = lr0 * 0.5 * (1.0 + math.cos(math.pi * (t - 1) / max(int(n_iter), 1)))
            y = y - lr * (m1 / (1 - 0.9 ** t)) / (np.sqrt(m2 / (1 - 0.999 ** t)) + 1e-12)
            loss, _ = self._position_loss(p, y, with_grad=False)
            better = loss < best_loss
            best[better], best_loss[better] = y[better], loss[better]
        return best

    # ------------------------------------------------------------ inverting 2-D points

    def nearest(self, point, k: int = 5) -> np.ndarray:
        """Indices of the k map points nearest to a 2-D point (closest first); (m, k) for (m, 2) points."""
        pts = np.asarray(point, dtype=np.float64)
        if pts.shape[-1] != 2 or pts.ndim > 2:
            raise ValueError(f"point must have shape (2,) or (m, 2), got {pts.shape}")
        d = np.sum((np.atleast_2d(pts)[:, None, :] - self.coords[None]) ** 2, axis=-1)
        idx = np.argsort(d, axis=1, kind="stable")[:, :k]
        return idx[0] if pts.ndim == 1 else idx

    def _inversion_objective(self, point, n_components: int = 20):
        """(objective, c0) for inverting `point`: objective(c, beta=None) -> (loss, gradient, x_hat).

        x = mean + (c * std) @ components; each weighted aspect block of x is rescaled to norm
        sqrt(alpha_a) (the feature layout of a real paper), giving x_hat; d_j = 1 - <x_hat, f_j>.
        The loss is the new point's share of the (n + 1)-point KL with the map frozen,

            2 sum_j p_j log(p_j / q_j) - sum_j (1 + K_j) r_j / (n + 1),
            p_j = (softmax(-beta d)_j + r_j) / 2(n + 1),   r_j = p_{new|j} = sigmoid(-(beta_j d_j + log_norm_j)),

        where the second term is the first-order change of the corpus pairs: row j gives the
        share r_j to the new point (P must still sum to 1). Without it the loss would reward
        pushing x away from everyone. beta, the new row's precision, is calibrated to the
        perplexity at each call (or given); no gradient flows through it, as in the authors'
        code. The gradient is analytic (checked against finite differences in the tests); every
        call is O(n D). c0: the start, the mean features of the point's 5 nearest map points.
        """
        y = np.asarray(point, dtype=np.float64).reshape(-1)
        if y.shape != (2,):
            raise ValueError(f"point must be a 2-D position, got shape {np.shape(point)}")
        n = len(self)
        diff = self.coords - y
        w = 1.0 / (1.0 + np.einsum("nk,nk->n", diff, diff))
        log_q = np.log(w / (self._z() + 2.0 * w.sum()))
        mean, comps, std = self._pca(n_components)
        basis = comps * std[:, None]
        corpus = self._features64()
        beta_rows, log_norm, k_row = self._rows()
        bounds = np.cumsum([0] + [self.embeddings[a].shape[1] for a in self.aspects])
        blocks = [(lo, hi, math.sqrt(self.weights[a]))
                  for a, lo, hi in zip(self.aspects, bounds[:-1], bounds[1:]) if self.weights[a] > 0]

        perplexity = _effective_perplexity(self.perplexity, n + 1)
        last_beta = [None]

        def objective(c, beta=None):
            x = mean + c @ basis
            x_hat = np.zeros_like(x)
            for lo, hi, s in blocks:
                x_hat[lo:hi] = s * x[lo:hi] / max(np.linalg.norm(x[lo:hi]), 1e-12)
            d = np.clip(1.0 - corpus @ x_hat, 0.0, 2.0)
            if beta is None:  # calibrate the new row here, warm-started from the previous call
                last_beta[0] = calibrate_rows(d[None], perplexity, beta0=last_beta[0])[1]
                beta = float(last_beta[0][0])
            e = np.exp(-beta * (d - d.min()))
            cond = e / e.sum()
            r = 1.0 / (1.0 + np.exp(np.clip(beta_rows * d + log_norm, -700, 700)))
            p = (cond + r) / (2.0 * (n + 1))
            log_p = np.log(np.maximum(p, 1e-300))
            loss = 2.0 * np.sum(p * (log_p - log_q)) - np.sum((1.0 + k_row) * r) / (n + 1)
            # Backward, by hand: loss -> p -> (cond, r) -> d -> x_hat -> x -> c.
            g = (log_p - log_q + 1.0) / (n + 1)                        # dL/dcond
            g_r = g - (1.0 + k_row) / (n + 1)                          # dL/dr
            g_d = -beta * cond * (g - cond @ g) - g_r * beta_rows * r * (1.0 - r)
            g_d = np.where((d > 0.0) & (d < 2.0), g_d, 0.0)             # the clip
            g_hat = -(g_d @ corpus)
            g_x = np.zeros_like(x)
            for lo, hi, s in blocks:
                norm = max(np.linalg.norm(x[lo:hi]), 1e-12)
                u = x[lo:hi] / norm
                g_x[lo:hi] = s / norm * (g_hat[lo:hi] - u * (u @ g_hat[lo:hi]))
            return float(loss), basis @ g_x, x_hat

        x0 = corpus[self.nearest(y, 5)].mean(axis=0)
        return objective, ((x0 - mean) @ comps.T) / std

    def invert_features(self, point, n_components: int = 20, n_iter: int = 300, lr: float = 0.05) -> np.ndarray:
        """A unit weighted-feature vector (D,) whose map position would be `point` (appendix A.10).

        Minimises the KL of the (n + 1)-point map over the new paper's features x, the map
        and the corpus frozen (see `_inversion_objective`): x = mean + (c * std) @ components
        in the span of the corpus features' top `n_components` principal components, started
        from the mean features of the point's 5 nearest map points, its perplexity-calibrated
        affinities re-solved every step. Adam (step `lr` in units of each component's
        standard deviation, cosine-decayed); O(n D) per step; the best x seen is returned.
        """
        objective, c = self._inversion_objective(point, n_components)
        m1, m2 = np.zeros_like(c), np.zeros_like(c)
        best_loss, best = math.inf, None
        for t in range(int(n_iter) + 1):
            loss, grad, x_hat = objective(c)
            if loss < best_loss:
                best_loss, best = loss, x_hat
            if t == n_iter:
                break
            m1 = 0.9 * m1 + 0.1 * grad
            m2 = 0.999 * m2 + 0.001 * grad * grad
            step = lr * 0.5 * (1.0 + math.cos(math.pi * t / max(int(n_iter), 1)))
            c = c - step * (m1 / (1 - 0.9 ** (t + 1))) / (np.sqrt(m2 / (1 - 0.999 ** (t + 1))) + 1e-12)
        return best

    def invert(self, point, n_components: int = 20, n_iter: int = 300) -> dict[str, np.ndarray]:
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
        from safetensors.numpy import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {"coords": np.ascontiguousarray(self.coords)}
        # Keys by position, not by name: the names (any string) live in the config.
        for i, a in enumerate(self.aspects):
            tensors[f"embeddings/{i}"] = np.ascontiguousarray(self.embeddings[a])
        tmp = folder / f".{WEIGHTS_NAME}.{os.getpid()}.tmp"
        save_file(tensors, str(tmp))
        os.replace(tmp, folder / WEIGHTS_NAME)  # whole or not at all; the config last
        config = {"format": FORMAT, "version": VERSION, "aspects": self.aspects, "weights": self.weights,
                  "perplexity": self.perplexity, "seed": self.seed, "method": self.method, "n": len(self)}
        write_json(folder / CONFIG_NAME, config)
        return folder

    @classmethod
    def load(cls, folder) -> "AspectMap":
        """Read a map written by `save`."""
        from safetensors.numpy import load_file

        folder = Path(folder)
        config = json.loads((folder / CONFIG_NAME).read_text())
        if config.get("format") != FORMAT:
            raise ValueError(f"{folder} does not hold a {FORMAT} (format {config.get('format')!r})")
        tensors = load_file(str(folder / WEIGHTS_NAME))
        embeddings = {a: tensors[f"embeddings/{i}"] for i, a in enumerate(config["aspects"])}
        return cls(embeddings, config["weights"], tensors["coords"], config["perplexity"], config["seed"],
                   config["method"])
