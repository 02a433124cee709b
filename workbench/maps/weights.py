"""Fit the aspect weights to what the user means by "similar".

FLeW (Dou et al.) combines facet embeddings with weights found by a grid search on
validation data. Here the user states what they mean - a label per document, a few marked
pairs, or groups of papers that belong together - and the weights follow from it.

Model. For a pair of documents (i, j) and weights w on the simplex,

    s_ij(w) = sum_a w_a * cos_a(i, j),        P(similar | i, j) = sigmoid(beta * s_ij(w) + b),

with a free scale beta > 0 and bias b. Writing v = beta * w turns this into a logistic
regression on the per-aspect cosines with non-negative coefficients v >= 0 (v != 0):
(beta, w) <-> v is a bijection, w = v / sum(v), beta = sum(v). So the maximum-likelihood
weights are the solution of a *convex* problem with box constraints, which L-BFGS-B solves
to its global optimum - no softmax reparametrisation, no local minima, and exact zeros are
reachable. As a maximum-likelihood estimate it is consistent: a judgement drawn from this
model with known weights gives those weights back as the number of pairs grows.

Negative weights. Aspects listed in `negative` may take a negative weight ("similar task,
but a *different* method"): their coefficient v_a is unbounded, and the weights are
normalised by sum_a |v_a|, i.e. the constraint becomes sum |w_a| = 1. A map cannot use a
negative weight (a t-SNE distance must be >= 0): `map_weights` clips it to 0.

Check against FLeW. `grid_search` enumerates the simplex at `grid_step` and keeps the point
with the best ROC AUC of s_ij for similar vs dissimilar pairs - FLeW's plain search. Both
are cross-validated the same way and reported side by side.

Held-out agreement. k-fold cross-validation; with labels or groups the folds split the
*documents* (a test pair has both documents in the test fold, so no document is seen in
training and testing), with marked pairs they split the pairs. The held-out scores of all
folds are pooled into one ROC AUC with a stratified bootstrap 95% interval.

    fit = fit_weights({"task": E1, "method": E2}, labels=venue)     # same venue = similar
    fit = fit_weights(emb, pairs=[(3, 17, True), (3, 40, False), ...])
    fit = fit_weights(emb, groups=[[1, 5, 9], [2, 8]])
    fit.weights, fit.auc, fit.auc_ci, fit.warning; print(fit)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Mapping, Sequence

import numpy as np
from scipy.optimize import minimize
from sklearn.metrics import roc_auc_score

from ..core.devices import one_blas_thread

MAX_PAIRS = 20_000      # pairs used for fitting; more adds little and costs time
MAX_GRID = 5_000        # grid points at most; a finer step is coarsened to fit (see simplex_grid)
ENUMERATE_MAX = 2_000   # labels: enumerate all pairs up to this many labelled documents, sample above
N_BOOT = 500            # bootstrap resamples for the confidence interval
WIDE_CI = 0.2           # a 95% interval wider than this gets a warning
MIN_CLASS = 10          # ... and so do fewer similar (or dissimilar) pairs: a bootstrap of 5 is too narrow
L2 = 1e-6               # keeps v finite when the pairs are perfectly separable; far too small to bias it


# ---------------------------------------------------------------- the judgement as pairs


def _label_set(value) -> frozenset:
    """A label as a set: a list/tuple/set label is its elements, None/NaN/empty is unknown (empty set)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return frozenset()
    if isinstance(value, (list, tuple, set, frozenset, np.ndarray)):
        return frozenset(v for v in value if not (v is None or (isinstance(v, float) and math.isnan(v))))
    try:
        if value != value:  # pd.NA, NaT and other NaN-likes
            return frozenset()
    except (TypeError, ValueError):  # pd.NA raises on bool()
        return frozenset()
    return frozenset([value])


def pairs_from_labels(labels: Sequence, seed: int = 0) -> np.ndarray:
    """(m, 3) int array of (i, j, similar) from one label per document.

    Same label = similar, different = dissimilar, None/NaN = unknown (its pairs skipped).
    A list label (several categories) counts as similar to another when they share one, as
    the evaluation's `label_similarity` does. Up to ENUMERATE_MAX labelled documents every
    pair i < j is listed; above, 4 * MAX_PAIRS random pairs are drawn (all n^2 would not fit).
    """
    sets = [_label_set(v) for v in labels]
    known = np.array([i for i, s in enumerate(sets) if s], dtype=np.int64)
    if len(known) <= ENUMERATE_MAX:
        a, b = np.triu_indices(len(known), k=1)
        i, j = known[a], known[b]
    else:
        rng = np.random.default_rng(seed)
        a, b = rng.integers(0, len(known), size=(2, 4 * MAX_PAIRS))
        keep = a != b
        i, j = np.minimum(known[a[keep]], known[b[keep]]), np.maximum(known[a[keep]], known[b[keep]])
        i, j = np.unique(np.stack([i, j], axis=1), axis=0).T
    similar = np.array([bool(sets[x] & sets[y]) for x, y in zip(i.tolist(), j.tolist())], dtype=np.int64)
    return np.stack([i, j, similar], axis=1).reshape(-1, 3)


def pairs_from_groups(groups: Sequence[Sequence[int]], n: int, seed: int = 0) -> np.ndarray:
    """(m, 3) int array of (i, j, similar) from groups of documents that belong together.

    Our choice: pairs within a group are similar; a member of one group and a member of
    another group are dissimilar (the user told them apart); documents in no group are
    unknown - the user has not said they differ. A single group has no other group to
    differ from, so then each member is paired with random documents outside it (as many
    dissimilar pairs as similar ones, at least 2 per member): "these belong together, the
    rest of the corpus does not". A pair in one group and also across two groups (a document
    in two groups) is similar: being put together is the stronger statement.
    """
    groups = [sorted({int(x) for x in g}) for g in groups]
    groups = [g for g in groups if g]
    similar = {(i, j) for g in groups for i, j in combinations(g, 2)}
    dissimilar = set()
    for ga, gb in combinations(groups, 2):
        dissimilar |= {(min(i, j), max(i, j)) for i in ga for j in gb if i != j}
    if len(groups) == 1:
        members = groups[0]
        outside = np.setdiff1d(np.arange(n), members)
        if len(outside):
            rng = np.random.default_rng(seed)
            per = max(2, math.ceil(len(similar) / max(len(members), 1)))
            for i in members:
                for j in rng.choice(outside, size=min(per, len(outside)), replace=False).tolist():
                    dissimilar.add((min(i, j), max(i, j)))
    dissimilar -= similar
    rows = [(i, j, 1) for i, j in sorted(similar)] + [(i, j, 0) for i, j in sorted(dissimilar)]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def _check_pairs(pairs, n: int) -> np.ndarray:
    rows = []
    for k, p in enumerate(pairs):
        try:
            i, j, s = p
        except (TypeError, ValueError):
            raise ValueError(f"pairs[{k}] must be (i, j, similar), got {p!r}") from None
        if not all(isinstance(x, (int, np.integer)) for x in (i, j)):
            raise ValueError(f"pairs[{k}]: indices must be integers, got {p!r}")
        if not (0 <= i < n and 0 <= j < n):
            raise ValueError(f"pairs[{k}]: index out of range for {n} documents: {p!r}")
        if i == j:
            raise ValueError(f"pairs[{k}]: a document paired with itself: {p!r}")
        rows.append((int(i), int(j), int(bool(s))))
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def _subsample(pairs: np.ndarray, max_pairs: int, rng) -> np.ndarray:
    """At most max_pairs pairs, keeping the rarer class whole up to half of them.

    Sampling the classes at different rates only shifts the bias b of a logistic model,
    not its coefficients (case-control sampling), so the weights stay consistent.
    """
    if len(pairs) <= max_pairs:
        return pairs
    pos, neg = np.flatnonzero(pairs[:, 2] == 1), np.flatnonzero(pairs[:, 2] == 0)
    small, large = (pos, neg) if len(pos) <= len(neg) else (neg, pos)
    k_small = min(len(small), max_pairs // 2)
    keep = np.concatenate([rng.choice(small, k_small, replace=False),
                           rng.choice(large, max_pairs - k_small, replace=False)])
    return pairs[np.sort(keep)]


def pair_cosines(embeddings: Mapping[str, np.ndarray], pairs: np.ndarray) -> np.ndarray:
    """(m, A) cosines cos_a(i, j) of each pair under each aspect (columns in the order of `embeddings`)."""
    cols = []
    for e in embeddings.values():
        u = np.asarray(e, dtype=np.float64)
        u = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
        cols.append(np.einsum("md,md->m", u[pairs[:, 0]], u[pairs[:, 1]]))
    return np.stack(cols, axis=1)


# ---------------------------------------------------------------- AUC


def auc(scores, y) -> float:
    """ROC AUC of scores for similar (y = 1) vs dissimilar (y = 0) pairs (sklearn)."""
    return float(roc_auc_score(np.asarray(y), np.asarray(scores)))


def auc_columns(scores: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The ROC AUC of every column of (m, g) scores, as sklearn's roc_auc_score would give it (ties count 1/2).

    Per column: sort the dissimilar pairs' scores once, and count for each similar pair the
    dissimilar ones below it (searchsorted left) and not above it (right); their mean is
    the Mann-Whitney count with ties halved. The grid search needs hundreds of AUCs of
    thousands of pairs, which one roc_auc_score call each makes slow; the tests check the two agree.
    """
    y = np.asarray(y).astype(bool)
    rows = np.ascontiguousarray(np.asarray(scores, dtype=np.float64).reshape(len(y), -1).T)  # (g, m)
    # Sorting the similar pairs too does not change the count and makes searchsorted's lookups sequential.
    pos, neg = np.sort(rows[:, y], axis=1), np.sort(rows[:, ~y], axis=1)
    out = np.empty(len(rows))
    for r in range(len(rows)):
        below = np.searchsorted(neg[r], pos[r], "left").sum() + np.searchsorted(neg[r], pos[r], "right").sum()
        out[r] = 0.5 * below / (pos.shape[1] * neg.shape[1])
    return out


def bootstrap_ci(scores, y, n_boot: int = N_BOOT, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the AUC over pairs resampled within each class (stratified bootstrap).

    Resampling only changes how often each pair counts, never the order of the scores, so
    the dissimilar scores are sorted once and each resample is a weighted count: for every
    similar pair, the resampled weight of the dissimilar pairs below it (ties half). That
    is O(n_boot * m) without a sort per resample.
    """
    scores, y = np.asarray(scores, dtype=np.float64), np.asarray(y).astype(bool)
    pos, neg = scores[y], np.sort(scores[~y])
    lo, hi = np.searchsorted(neg, pos, "left"), np.searchsorted(neg, pos, "right")
    rng = np.random.default_rng(seed)
    pos_count, neg_count = _resample_counts(len(pos), n_boot, rng), _resample_counts(len(neg), n_boot, rng)
    below = np.concatenate([np.zeros((n_boot, 1)), np.cumsum(neg_count, axis=1)], axis=1)  # weight of neg[:k]
    wins = 0.5 * (below[:, lo] + below[:, hi])                                            # (n_boot, n_pos)
    aucs = (pos_count * wins).sum(axis=1) / (len(pos) * len(neg))
    low, high = np.quantile(aucs, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def _resample_counts(m: int, n_boot: int, rng) -> np.ndarray:
    """(n_boot, m): how often each of m items is drawn in each of n_boot resamples with replacement."""
    draws = rng.integers(0, m, (n_boot, m)) + m * np.arange(n_boot)[:, None]
    return np.bincount(draws.ravel(), minlength=n_boot * m).reshape(n_boot, m)


# ---------------------------------------------------------------- FLeW's grid search


def simplex_grid(n_aspects: int, step: float = 0.05, max_points: int = MAX_GRID) -> tuple[np.ndarray, float]:
    """All weight vectors on the simplex with coordinates in multiples of `step`: ((g, A), step used).

    There are C(m + A - 1, A - 1) of them for m = 1/step (231 for 3 aspects at 0.05); when
    that exceeds max_points the step is coarsened (m lowered) until it fits, because the
    grid grows as m^(A-1) and many aspects would otherwise never finish.
    """
    m = max(1, round(1.0 / step))
    while m > 1 and math.comb(m + n_aspects - 1, n_aspects - 1) > max_points:
        m -= 1
    points = []

    def fill(prefix, left, slots):
        if slots == 1:
            points.append(prefix + [left])
            return
        for k in range(left + 1):
            fill(prefix + [k], left - k, slots - 1)

    fill([], m, n_aspects)
    return np.array(points, dtype=np.float64) / m, 1.0 / m


def signed_grid(n_aspects: int, negative_mask: np.ndarray, step: float, max_points: int = MAX_GRID):
    """The grid of `simplex_grid` with every sign pattern of the aspects allowed to be negative (sum |w| = 1)."""
    k = int(np.sum(negative_mask))
    base, used = simplex_grid(n_aspects, step, max(1, max_points // (2 ** k)))
    if k == 0:
        return base, used
    grids = []
    for signs in np.array(np.meshgrid(*[[1.0, -1.0]] * k)).reshape(k, -1).T:
        flip = np.ones(n_aspects)
        flip[np.flatnonzero(negative_mask)] = signs
        grids.append(base * flip)
    return np.unique(np.concatenate(grids), axis=0), used


def grid_search(cos: np.ndarray, y: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, float]:
    """FLeW's search: the grid point whose scores s = cos @ w have the best AUC (first one on ties)."""
    aucs = auc_columns(cos @ grid.T, y)
    best = int(np.argmax(aucs))
    return grid[best], float(aucs[best])


# ---------------------------------------------------------------- the logistic fit


def logistic_loss(params: np.ndarray, cos: np.ndarray, y: np.ndarray, l2: float = L2):
    """Mean negative log-likelihood of sigmoid(cos @ v + b) and its gradient; params = (v, b).

    Written out by hand (numerically stable softplus) so that L-BFGS-B gets an exact
    gradient; the tests compare it with torch autograd.
    """
    v, b = params[:-1], params[-1]
    z = cos @ v + b
    sign = 2.0 * y - 1.0                       # +1 similar, -1 dissimilar
    loss = np.mean(np.logaddexp(0.0, -sign * z)) + 0.5 * l2 * float(v @ v)
    r = -sign * _sigmoid(-sign * z) / len(y)   # d loss / d z
    grad = np.concatenate([cos.T @ r + l2 * v, [r.sum()]])
    return loss, grad


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))      # overflow-free


def fit_logistic(cos: np.ndarray, y: np.ndarray, negative_mask: np.ndarray | None = None,
                 l2: float = L2) -> tuple[np.ndarray, float, float]:
    """Maximum-likelihood (w, beta, b): w with sum |w| = 1, w_a >= 0 unless negative_mask[a].

    Solves for v = beta * w with L-BFGS-B (bounds v_a >= 0 where the sign is fixed); the
    problem is convex, so this is the global optimum. beta = sum |v|. If every v_a is 0
    (the judgement is unrelated to every aspect) the weights are equal and beta is 0.
    """
    n_aspects = cos.shape[1]
    negative_mask = np.zeros(n_aspects, bool) if negative_mask is None else np.asarray(negative_mask, bool)
    y = np.asarray(y, dtype=np.float64)
    bounds = [(None, None) if neg else (0.0, None) for neg in negative_mask] + [(None, None)]
    prior = np.clip(y.mean(), 1e-6, 1 - 1e-6)
    x0 = np.r_[np.ones(n_aspects), math.log(prior / (1 - prior)) - cos.mean(axis=0).sum()]
    res = minimize(logistic_loss, x0, args=(cos, y, l2), jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"maxiter": 1000, "ftol": 1e-12, "gtol": 1e-9})
    v, b = res.x[:-1], float(res.x[-1])
    beta = float(np.abs(v).sum())
    if beta < 1e-9:
        return np.full(n_aspects, 1.0 / n_aspects), 0.0, b
    return v / beta, beta, b


def pairs_from_similarity(similarity, top: float = 0.1, bottom: float = 0.5, rows: Sequence[int] | None = None,
                          max_pairs: int = MAX_PAIRS, seed: int = 0) -> np.ndarray:
    """(m, 3) int array of (i, j, similar) from a graded similarity, e.g. of the papers' human summaries.

    The pairs in the `top` fraction of similarity are similar, those in the `bottom` fraction
    dissimilar, the middle is left out (a judgement says "alike" or "unlike", not "somewhat").
    similarity: (k, k) over the documents `rows` (default 0..k-1); NaN entries are unknown.
    Above `max_pairs` pairs a seeded sample is kept.
    """
    sim = np.asarray(similarity, dtype=np.float64)
    if sim.ndim != 2 or sim.shape[0] != sim.shape[1]:
        raise ValueError(f"similarity must be a square matrix, got shape {sim.shape}")
    if not (0 < top < 1 and 0 < bottom < 1 and top + bottom <= 1):
        raise ValueError(f"top ({top}) and bottom ({bottom}) must be fractions in (0, 1) that sum to at most 1")
    rows = np.arange(len(sim)) if rows is None else np.asarray(rows, dtype=np.int64)
    if len(rows) != len(sim):
        raise ValueError(f"{len(rows)} rows for a {len(sim)} x {len(sim)} similarity")
    a, b = np.triu_indices(len(sim), k=1)
    values = sim[a, b]
    known = np.isfinite(values)
    a, b, values = a[known], b[known], values[known]
    if len(values) < 4:
        raise ValueError(f"{len(values)} known pairs: too few to say which are alike")
    high, low = np.quantile(values, 1 - top), np.quantile(values, bottom)
    keep = (values >= high) | (values <= low)
    out = np.stack([rows[a[keep]], rows[b[keep]], (values[keep] >= high).astype(np.int64)], axis=1)
    if len(out) > max_pairs:
        out = out[np.sort(np.random.default_rng(seed).choice(len(out), size=max_pairs, replace=False))]
    return out.reshape(-1, 3)


def map_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Weights a map can use: negative ones clipped to 0, the rest renormalised to sum 1.

    A t-SNE distance must be non-negative (`tsne.normalize_weights` rejects negatives), so a
    negative weight ("unlike in this aspect") cannot be drawn; it is reported, not mapped.
    Raises ValueError when no weight is positive.
    """
    clipped = {a: max(float(w), 0.0) for a, w in weights.items()}
    total = sum(clipped.values())
    if total <= 0:
        raise ValueError(f"no aspect has a positive weight ({weights}); a map needs one")
    return {a: w / total for a, w in clipped.items()}


# ---------------------------------------------------------------- cross-validation and the result


@dataclass
class WeightFit:
    """Fitted aspect weights, their held-out agreement with the judgement, and FLeW's grid search beside them.

    weights: fitted on all pairs (sum |w| = 1). auc / auc_ci: cross-validated ROC AUC of
    s_ij(w) on held-out pairs (each fold's weights fitted without them) and its bootstrap 95%
    interval. equal_weights_auc: equal weights on the same held-out pairs, the baseline.
    grid_weights: FLeW's grid search on all pairs; grid_auc: the grid search cross-validated
    like the fit. n_pairs: (similar, dissimilar) pairs used. warning: set when the interval
    is too wide to trust the weights, or the judgement shows no relation to any aspect.
    """

    weights: dict[str, float]
    auc: float
    auc_ci: tuple[float, float]
    equal_weights_auc: float
    grid_weights: dict[str, float]
    grid_auc: float
    n_pairs: tuple[int, int]
    warning: str | None = None
    beta: float = 0.0
    bias: float = 0.0
    grid_step: float = 0.05
    split: str = "pairs"
    folds: int = 0
    n_heldout: int = 0
    fold_weights: list[dict[str, float]] = field(default_factory=list)

    def summary(self) -> str:
        """A few lines for a notebook or the map pane."""
        fmt = lambda w: ", ".join(f"{a} {v:+.2f}" if v < 0 else f"{a} {v:.2f}" for a, v in w.items())  # noqa: E731
        lines = [
            f"fitted weights: {fmt(self.weights)}",
            f"held-out AUC {self.auc:.3f} (95% CI {self.auc_ci[0]:.3f}-{self.auc_ci[1]:.3f}); "
            f"equal weights {self.equal_weights_auc:.3f}",
            f"FLeW grid search (step {self.grid_step:g}): {fmt(self.grid_weights)}, held-out AUC {self.grid_auc:.3f}",
            f"{self.n_pairs[0]} similar and {self.n_pairs[1]} dissimilar pairs; {self.folds}-fold cross-validation "
            f"split by {self.split}, {self.n_heldout} held-out pairs scored",
        ]
        if self.warning:
            lines.append(f"warning: {self.warning}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"WeightFit(\n  " + self.summary().replace("\n", "\n  ") + "\n)"


def _doc_folds(pairs: np.ndarray, n: int, folds: int, rng) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Folds over documents: test pairs have both documents in the fold, train pairs neither.

    Pairs with one document on each side are used in neither (that is what keeps a document
    out of training and testing at once). None when a fold would lack a class.
    """
    docs = np.unique(pairs[:, :2])
    fold_of = np.full(n, -1)
    fold_of[docs] = rng.permutation(len(docs)) % folds
    fi, fj = fold_of[pairs[:, 0]], fold_of[pairs[:, 1]]
    out = []
    for f in range(folds):
        test = np.flatnonzero((fi == f) & (fj == f))
        train = np.flatnonzero((fi != f) & (fj != f))
        if any(np.sum(pairs[idx, 2] == c) < need for idx, need in ((test, 1), (train, 2)) for c in (0, 1)):
            return None
        out.append((train, test))
    return out


def _pair_folds(y: np.ndarray, folds: int, rng) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified folds over pairs: each class dealt round-robin in a random order."""
    fold_of = np.empty(len(y), dtype=np.int64)
    for c in (0, 1):
        idx = np.flatnonzero(y == c)
        fold_of[idx] = rng.permutation(len(idx)) % folds
    return [(np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)) for f in range(folds)]


@dataclass(frozen=True)
class FitSettings:
    """How `fit_weights` fits and checks the weights.

    folds: cross-validation folds (at least 2); seed: the pair sampling, the folds and the
    bootstrap; grid_step: the step of FLeW's grid over the simplex; max_pairs: pairs used at
    most (a random sample of more); max_grid: grid points at most (a finer step is coarsened);
    n_boot: bootstrap resamples of the held-out AUC's 95% interval; wide_ci: an interval wider
    than this gets a warning.
    """

    folds: int = 5
    seed: int = 0
    grid_step: float = 0.05
    max_pairs: int = MAX_PAIRS
    max_grid: int = MAX_GRID
    n_boot: int = N_BOOT
    wide_ci: float = WIDE_CI


def fit_weights(embeddings: Mapping[str, np.ndarray], *, labels: Sequence | None = None,
                pairs: Sequence | None = None, groups: Sequence[Sequence[int]] | None = None,
                negative: Sequence[str] = (), settings: FitSettings = FitSettings()) -> WeightFit:
    """Aspect weights that make the weighted similarity agree with the user's judgement.

    embeddings: {aspect: (n, d)} (the unified model's aspect embeddings). The judgement is
    exactly one of: `labels` (one per document; same = similar, None/NaN = unknown), `pairs`
    ([(i, j, similar), ...], e.g. marked on the map) or `groups` ([[i, j, ...], ...]
    documents that belong together; see `pairs_from_groups`). negative: aspects whose weight
    may be negative (then sum |w| = 1). settings: folds, seed, grid, bootstrap (`FitSettings`).
    See the module docstring for the model.
    """
    # The matrices here are thin (pairs x aspects): BLAS threads only hand work back and
    # forth, which on a busy machine cost 4x (1.1 s against 0.25 s for 1,000 pairs on 2 cores).
    with one_blas_thread():
        return _fit_weights(embeddings, (labels, pairs, groups), negative, settings)


def _fit_weights(embeddings, judgement: tuple, negative, settings: FitSettings) -> WeightFit:
    """`fit_weights` on one BLAS thread; judgement = (labels, pairs, groups), exactly one given."""
    emb, n = _checked_embeddings(embeddings)
    aspects = list(emb)
    given = [name for name, v in zip(("labels", "pairs", "groups"), judgement) if v is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of labels, pairs or groups (got {given or 'none'})")
    negative = (negative,) if isinstance(negative, str) else tuple(negative)
    unknown = [a for a in negative if a not in aspects]
    if unknown:
        raise ValueError(f"negative names unknown aspects {unknown}; the aspects are {aspects}")
    if settings.folds < 2:
        raise ValueError(f"folds must be at least 2, got {settings.folds}")
    rng = np.random.default_rng(settings.seed)
    table = _judged_pairs(judgement, n, settings.seed)
    n_sim, n_dis = int(np.sum(table[:, 2] == 1)), int(np.sum(table[:, 2] == 0))
    if n_sim < 2 or n_dis < 2:
        raise ValueError(f"need at least 2 similar and 2 dissimilar pairs, got {n_sim} similar and {n_dis} "
                         "dissimilar: mark more pairs (or give labels with at least two values)")
    table = _subsample(table, settings.max_pairs, rng)
    y = table[:, 2]
    n_sim, n_dis = int(np.sum(y == 1)), int(np.sum(y == 0))
    cos = pair_cosines(emb, table)
    neg_mask = np.array([a in negative for a in aspects])
    grid, step = signed_grid(len(aspects), neg_mask, settings.grid_step, settings.max_grid)

    # Folds by documents wherever each fold keeps both kinds of pair: folds by pairs put a paper on
    # both sides, which flatters the held-out AUC. A few marked pairs rarely allow it: then by pairs.
    k = min(settings.folds, n_sim, n_dis)
    splits = _doc_folds(table, n, k, rng)
    split = "documents" if splits is not None else "pairs"
    if splits is None:
        splits = _pair_folds(y, k, rng)
    held_idx, s_fit, s_grid, fold_weights = _held_out_scores(cos, y, neg_mask, grid, splits, aspects)
    y_held = y[held_idx]

    w, beta, bias = fit_logistic(cos, y, neg_mask)
    g, _ = grid_search(cos, y, grid)
    fit_auc = auc(s_fit, y_held)
    ci = bootstrap_ci(s_fit, y_held, settings.n_boot, settings.seed)
    return WeightFit(
        weights=dict(zip(aspects, [float(x) for x in w])), auc=fit_auc, auc_ci=ci,
        equal_weights_auc=auc(cos[held_idx].mean(axis=1), y_held),
        grid_weights=dict(zip(aspects, [float(x) for x in g])), grid_auc=auc(s_grid, y_held),
        n_pairs=(n_sim, n_dis), warning=_fit_warning(beta, ci, len(y), min(n_sim, n_dis), settings.wide_ci),
        beta=beta, bias=bias, grid_step=step, split=split, folds=k, n_heldout=len(held_idx),
        fold_weights=fold_weights)


def _checked_embeddings(embeddings) -> tuple[dict[str, np.ndarray], int]:
    """{aspect: (n, d) numpy array} of the same n (tensors are copied to the CPU), and n."""
    if not isinstance(embeddings, Mapping) or not embeddings:
        raise ValueError("embeddings must be a non-empty mapping aspect -> (n, d) array")
    emb = {str(a): np.asarray(e.detach().cpu().numpy() if hasattr(e, "detach") else e) for a, e in embeddings.items()}
    sizes = {a: e.shape for a, e in emb.items()}
    if any(len(s) != 2 for s in sizes.values()) or len({s[0] for s in sizes.values()}) != 1:
        raise ValueError(f"embeddings must be (n, d) arrays with the same n, got shapes {sizes}")
    return emb, next(iter(sizes.values()))[0]


def _judged_pairs(judgement: tuple, n: int, seed: int) -> np.ndarray:
    """The (i, j, similar) table of the one judgement given of (labels, pairs, groups), checked against n."""
    labels, pairs, groups = judgement
    if labels is not None:
        labels = list(labels)
        if len(labels) != n:
            raise ValueError(f"{len(labels)} labels for {n} documents")
        return pairs_from_labels(labels, seed)
    if groups is not None:
        for g in groups:
            bad = [x for x in g if not isinstance(x, (int, np.integer)) or not 0 <= x < n]
            if bad:
                raise ValueError(f"group {list(g)} holds indices out of range for {n} documents: {bad}")
        return pairs_from_groups(groups, n, seed)
    return _check_pairs(pairs, n)


def _held_out_scores(cos: np.ndarray, y: np.ndarray, neg_mask: np.ndarray, grid: np.ndarray, splits,
                     aspects: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
    """Each fold fitted on its training pairs and scored on its test pairs, by the logistic fit and by the
    grid: the held-out pair indices, both scores (pooled over folds) and each fold's fitted weights."""
    held_fit, held_grid, held_idx, fold_weights = [], [], [], []
    for train, test in splits:
        w, _, _ = fit_logistic(cos[train], y[train], neg_mask)
        g, _ = grid_search(cos[train], y[train], grid)
        held_fit.append(cos[test] @ w)
        held_grid.append(cos[test] @ g)
        held_idx.append(test)
        fold_weights.append(dict(zip(aspects, w.round(4).tolist())))
    return np.concatenate(held_idx), np.concatenate(held_fit), np.concatenate(held_grid), fold_weights


def _fit_warning(beta: float, ci: tuple, n_pairs: int, rarer: int, wide_ci: float) -> str | None:
    """What to say about a fit that says little: no relation at all, or too few pairs to pin it down."""
    if beta == 0.0:
        return "the judgement shows no relation to any aspect's similarity: the weights are left equal"
    if ci[1] - ci[0] > wide_ci or rarer < MIN_CLASS:
        # The percentile bootstrap is itself too narrow on a handful of pairs (5 similar and 5
        # dissimilar well-separated pairs give 0.84-1.00), hence the count as a second rule.
        return (f"{n_pairs} pairs are not enough to pin the weights down: the held-out AUC's 95% interval "
                f"is {ci[0]:.2f}-{ci[1]:.2f} from {rarer} pairs of the rarer kind; "
                f"mark more pairs (at least {MIN_CLASS} similar and {MIN_CLASS} not similar)")
    return None
