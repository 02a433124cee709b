"""t-SNE's arithmetic without a map: aspect-weighted distances, perplexity-calibrated affinities, exact KL descent.

What `tsne.AspectMap` is built from (the conventions are in `tsne.py`'s module doc): the
weights and the weighted features whose inner products give every distance, the binary
search for each row's precision, the exact joint probabilities, the dense KL gradient
descent of sklearn's exact method, the PCA start and each row's nearest neighbours.
"""

from __future__ import annotations

import math
import warnings
from typing import Mapping, Sequence

import numpy as np

from ..core.vectors import unit_rows

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


def unit32(e) -> np.ndarray:
    """Rows of unit length in float32; rows that already are (a saved map, a refit) are kept bit for bit."""
    # float32 unit rows; rows that already are (a saved map, a refit) are kept bit for bit.
    if e.dtype == np.float32 and np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-6):
        return e
    return unit_rows(e, np.float64).astype(np.float32)


def check_embeddings(embeddings: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """{aspect: (n, d) float32 unit rows} from arrays or tensors; a ValueError names what is wrong."""
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
    embeddings = check_embeddings(embeddings)
    alpha = normalize_weights(weights, list(embeddings))
    blocks = [math.sqrt(alpha[a]) * unit_rows(e, np.float64) for a, e in embeddings.items()]
    return np.concatenate(blocks, axis=1).astype(np.float32)


def weighted_distance(embeddings: Mapping[str, np.ndarray], weights=None) -> np.ndarray:
    """(n, n) float64 matrix sum_a alpha_a * (1 - cos_a), each 1 - cos clipped to [0, 2] as the authors do.

    Computed aspect by aspect, independently of `weighted_features` (the tests check that
    the two agree). The diagonal is exactly 0.
    """
    embeddings = check_embeddings(embeddings)
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


def effective_perplexity(perplexity: float, n: int) -> float:
    """The perplexity a map of n points can have: at most (n - 1) / 3, with a warning when it is lowered."""
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
    perplexity = effective_perplexity(perplexity, d.shape[0])
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


def gradient_descent(P, Y, n_iter, momentum, learning_rate, exaggeration=1.0, verbose=False, label=""):
    """Exact t-SNE optimisation of layout Y against affinities P (sklearn's scheme, see the comment)."""
    # sklearn's gradient_descent: momentum plus per-coordinate gains that grow while the
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


def pca_init(features: np.ndarray, seed: int) -> np.ndarray:
    """A starting layout from the top two principal components of the features (sklearn's init="pca")."""
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
