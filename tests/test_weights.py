"""Aspect weights fitted to the user's judgement (workbench/maps/weights.py, issue 13)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from workbench.maps import weights as W
from workbench.maps.weights import (FitSettings, WeightFit, fit_weights, pair_cosines, pairs_from_groups,
                                    pairs_from_labels)

ASPECTS = ("a0", "a1", "a2")


def synthetic(n=120, clusters=6, dim=16, noise=0.5, seed=0):
    """Per aspect an independent assignment of n documents to clusters: centroid + noise.

    Returns (embeddings, assignments): same cluster gives a cosine near 0.8, different near 0.
    """
    rng = np.random.default_rng(seed)
    emb, assign = {}, {}
    for a in ASPECTS:
        centres = rng.normal(size=(clusters, dim))
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        assign[a] = rng.integers(0, clusters, n)
        emb[a] = centres[assign[a]] + noise * rng.normal(size=(n, dim)) / np.sqrt(dim)
    return emb, assign


def judged_pairs(emb, w, beta=20.0, t=0.35, seed=1, limit=None):
    """Every pair judged similar with probability sigmoid(beta * (sum_a w_a cos_a - t)): the fitted model."""
    n = len(next(iter(emb.values())))
    i, j = np.triu_indices(n, 1)
    cos = pair_cosines(emb, np.stack([i, j], axis=1))
    p = 1.0 / (1.0 + np.exp(-beta * (cos @ np.asarray(w, dtype=float) - t)))
    similar = np.random.default_rng(seed).random(len(p)) < p
    pairs = [(int(a), int(b), bool(s)) for a, b, s in zip(i, j, similar)]
    return pairs if limit is None else pairs[:limit]


def as_vector(weights):
    return np.array([weights[a] for a in ASPECTS])


@pytest.fixture(scope="module")
def corpus():
    return synthetic()


_FITS: dict = {}


def fitted(corpus, w_true) -> WeightFit:
    """One fit per true weight vector, shared by the tests that look at it from different sides."""
    if w_true not in _FITS:
        _FITS[w_true] = fit_weights(corpus[0], pairs=judged_pairs(corpus[0], w_true),
                                     settings=FitSettings(n_boot=200))
    return _FITS[w_true]


# ---------------------------------------------------------------- recovery and FLeW's grid


@pytest.mark.parametrize("w_true", [(0.6, 0.3, 0.1), (0.1, 0.0, 0.9)])
def test_recovers_known_weights(corpus, w_true):
    fit = fitted(corpus, w_true)
    assert np.abs(as_vector(fit.weights) - w_true).max() < 0.05, fit
    assert sum(fit.weights.values()) == pytest.approx(1.0) and min(fit.weights.values()) >= 0
    assert fit.beta == pytest.approx(20.0, rel=0.2)  # the scale is recovered too
    assert fit.auc > fit.equal_weights_auc + 0.02 and fit.warning is None
    # judged pairs among many papers: folds by documents (a paper is never on both sides)
    assert fit.split == "documents" and fit.folds == 5 and sum(fit.n_pairs) == 7140
    assert 0 < fit.n_heldout < sum(fit.n_pairs)  # pairs across a train and a test paper are used in neither


@pytest.mark.parametrize("w_true", [(0.6, 0.3, 0.1), (0.1, 0.0, 0.9)])
def test_grid_search_agrees_with_the_fit(corpus, w_true):
    fit = fitted(corpus, w_true)
    assert fit.grid_step == pytest.approx(0.05)
    assert fit.auc >= fit.grid_auc - 0.01
    assert np.abs(as_vector(fit.grid_weights) - as_vector(fit.weights)).max() <= 0.075  # within 1.5 grid steps
    grid = np.array(list(fit.grid_weights.values())) / 0.05
    assert np.allclose(grid, grid.round())  # a grid point indeed


def test_labels_path_splits_by_documents_and_finds_the_labelled_aspect(corpus):
    emb, assign = corpus
    labels = [str(c) for c in assign["a1"]]
    labels[0] = None  # unknown: its pairs are left out
    fit = fit_weights(emb, labels=labels, settings=FitSettings(n_boot=200))
    assert fit.split == "documents"
    assert max(fit.weights, key=fit.weights.get) == "a1" and fit.weights["a1"] > 0.8
    n_known = len(labels) - 1
    assert sum(fit.n_pairs) == n_known * (n_known - 1) // 2
    assert fit.n_heldout < sum(fit.n_pairs)  # pairs across a train and a test document are used in neither


# ---------------------------------------------------------------- the optimiser against independent computations


def test_loss_gradient_matches_torch_autograd():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    cos, y = rng.uniform(-1, 1, (200, 4)), (rng.random(200) < 0.3).astype(float)
    params = rng.normal(size=5) * 3
    loss, grad = W.logistic_loss(params, cos, y, l2=0.01)
    p = torch.tensor(params, requires_grad=True)
    z = torch.tensor(cos) @ p[:-1] + p[-1]
    ref = torch.nn.functional.binary_cross_entropy_with_logits(z, torch.tensor(y)) + 0.005 * (p[:-1] ** 2).sum()
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-10)
    np.testing.assert_allclose(grad, p.grad.numpy(), rtol=1e-8, atol=1e-12)


def test_fit_is_the_constrained_optimum_found_by_slsqp():
    """The (w, beta, b) problem solved directly on the simplex by scipy's SLSQP gives the same weights."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(4)
    cos = rng.uniform(-0.2, 1, (400, 3))
    y = (rng.random(400) < 1 / (1 + np.exp(-(6 * cos @ [0.5, 0.5, 0.0] - 3)))).astype(float)
    w, beta, b = W.fit_logistic(cos, y, l2=0.0)

    def nll(x):
        z = x[3] * (cos @ x[:3]) + x[4]
        return np.mean(np.logaddexp(0, -(2 * y - 1) * z))

    ref = minimize(nll, np.r_[np.full(3, 1 / 3), 1.0, 0.0], method="SLSQP",
                   bounds=[(0, 1)] * 3 + [(0, None), (None, None)],
                   constraints=[{"type": "eq", "fun": lambda x: x[:3].sum() - 1}],
                   options={"ftol": 1e-12, "maxiter": 500})
    np.testing.assert_allclose(w, ref.x[:3], atol=2e-3)
    assert beta == pytest.approx(ref.x[3], rel=1e-2) and b == pytest.approx(ref.x[4], abs=1e-2)
    assert nll(np.r_[w, beta, b]) <= ref.fun + 1e-9


def test_auc_columns_and_bootstrap_match_sklearn():
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 6, (300, 4)).astype(float)  # many ties: they count a half
    y = rng.random(300) < 0.3
    np.testing.assert_allclose(W.auc_columns(scores, y), [roc_auc_score(y, scores[:, c]) for c in range(4)],
                               atol=1e-12)
    # The bootstrap's weighted counts against resampling explicitly with the same draws.
    s = scores[:, 0] + rng.normal(size=300)
    low, high = W.bootstrap_ci(s, y, n_boot=50, seed=7)
    pos, neg = s[y], np.sort(s[~y])
    draws = np.random.default_rng(7)
    ip, ineg = draws.integers(0, len(pos), (50, len(pos))), draws.integers(0, len(neg), (50, len(neg)))
    aucs = [roc_auc_score(np.r_[np.ones(len(pos)), np.zeros(len(neg))], np.r_[pos[a], neg[b]])
            for a, b in zip(ip, ineg)]
    assert (low, high) == pytest.approx(tuple(np.quantile(aucs, [0.025, 0.975])), abs=1e-12)


def test_simplex_grid_counts_and_coarsens():
    grid, step = W.simplex_grid(3, 0.05)
    assert grid.shape == (231, 3) and step == pytest.approx(0.05)
    assert np.allclose(grid.sum(axis=1), 1) and (grid >= 0).all() and len(np.unique(grid, axis=0)) == 231
    many, coarse = W.simplex_grid(8, 0.05, max_points=5000)
    assert len(many) <= 5000 and coarse > 0.05 and np.allclose(many.sum(axis=1), 1)
    signed, _ = W.signed_grid(3, np.array([False, False, True]), 0.05)
    assert np.allclose(np.abs(signed).sum(axis=1), 1) and (signed[:, 2] < 0).any() and (signed[:, :2] >= 0).all()


# ---------------------------------------------------------------- the judgement as pairs


def test_pairs_from_labels_by_hand():
    got = pairs_from_labels(["a", "b", "a", None, "b", float("nan"), ["a", "c"]])
    assert {tuple(r) for r in got.tolist()} == {
        (0, 1, 0), (0, 2, 1), (0, 4, 0), (0, 6, 1),
        (1, 2, 0), (1, 4, 1), (1, 6, 0),
        (2, 4, 0), (2, 6, 1),
        (4, 6, 0),
    }


def test_pairs_from_groups_by_hand():
    got = {tuple(r) for r in pairs_from_groups([[0, 1, 2], [4, 3]], n=8).tolist()}
    similar = {(0, 1, 1), (0, 2, 1), (1, 2, 1), (3, 4, 1)}
    across = {(i, j, 0) for i in (0, 1, 2) for j in (3, 4)}
    assert got == similar | across  # documents 5-7 are in no group: unknown, not dissimilar

    one = pairs_from_groups([[0, 1, 2]], n=6, seed=0)
    assert {tuple(r) for r in one.tolist() if r[2] == 1} == {(0, 1, 1), (0, 2, 1), (1, 2, 1)}
    outsiders = one[one[:, 2] == 0]
    assert len(outsiders) == 6 and (outsiders[:, 0] <= 2).all() and (outsiders[:, 1] >= 3).all()


def test_groups_path_fits(corpus):
    emb, assign = corpus
    members = [np.flatnonzero(assign["a2"] == c)[:8].tolist() for c in range(4)]
    fit = fit_weights(emb, groups=members, settings=FitSettings(n_boot=200))
    assert max(fit.weights, key=fit.weights.get) == "a2"
    assert fit.n_pairs == (4 * 28, 6 * 64)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "exactly one"),
    ({"labels": ["a"] * 120, "pairs": [(0, 1, True)]}, "exactly one"),
    ({"pairs": [(0, 1, True), (0, 2, True), (0, 3, False), (0, 999, False)]}, "out of range"),
    ({"pairs": [(0, 1, True), (0, 2, True), (0, 3, False), (4, 4, False)]}, "itself"),
    ({"pairs": [(0, 1, True), (0, 2, True), (0, 3, False)]}, "at least 2 similar and 2 dissimilar"),
    ({"pairs": [(0, 1)]}, "(i, j, similar)"),
    ({"labels": ["a"] * 120}, "at least 2 similar and 2 dissimilar"),
    ({"labels": ["a", "b"]}, "2 labels for 120"),
    ({"groups": [[0, 1], [2, -1]]}, "out of range"),
    ({"labels": ["a", "b"] * 60, "negative": ["nope"]}, "unknown aspects"),
])
def test_bad_input_is_a_clear_value_error(corpus, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fit_weights(corpus[0], **kwargs)


# ---------------------------------------------------------------- negative weights, confidence


def test_negative_weight_only_where_allowed(corpus):
    emb = corpus[0]
    pairs = judged_pairs(emb, (0.7, 0.0, -0.3), t=0.1, limit=4000)  # "like in a0, unlike in a2"
    free = fit_weights(emb, pairs=pairs, negative=("a2",), settings=FitSettings(n_boot=100))
    assert free.weights["a2"] == pytest.approx(-0.3, abs=0.05) and free.weights["a0"] == pytest.approx(0.7, abs=0.05)
    assert sum(abs(w) for w in free.weights.values()) == pytest.approx(1.0)
    assert (free.grid_weights["a2"] < 0) and "a2 -0." in free.summary()
    fixed = fit_weights(emb, pairs=pairs, settings=FitSettings(n_boot=100))
    assert min(fixed.weights.values()) >= 0 and fixed.weights["a2"] < 0.01
    assert free.auc > fixed.auc
    assert W.map_weights(free.weights)["a2"] == 0.0 and sum(W.map_weights(free.weights).values()) == pytest.approx(1)


def test_few_pairs_warn_many_do_not(corpus):
    emb = corpus[0]
    pairs = judged_pairs(emb, (0.6, 0.3, 0.1))
    few = [p for p in pairs if p[2]][:5] + [p for p in pairs if not p[2]][:5]
    fit = fit_weights(emb, pairs=few, settings=FitSettings(n_boot=200))
    assert fit.warning and "10 pairs are not enough" in fit.warning
    assert "warning" in fit.summary()
    assert fit.split == "pairs"  # ten marked pairs cannot be split by papers with both kinds in every fold
    many = fit_weights(emb, pairs=pairs[:3000], settings=FitSettings(n_boot=200))
    assert many.warning is None and many.auc_ci[1] - many.auc_ci[0] < 0.1
    assert fit.auc_ci[1] - fit.auc_ci[0] > 3 * (many.auc_ci[1] - many.auc_ci[0])
    assert many.auc_ci[0] <= many.auc <= many.auc_ci[1]


def test_large_judgements_are_subsampled_with_the_seed(corpus):
    emb = corpus[0]
    pairs = judged_pairs(emb, (0.6, 0.3, 0.1))
    settings = FitSettings(max_pairs=1000, seed=3, n_boot=50)
    a = fit_weights(emb, pairs=pairs, settings=settings)
    b = fit_weights(emb, pairs=pairs, settings=settings)
    assert sum(a.n_pairs) == 1000 and a.weights == b.weights and a.auc_ci == b.auc_ci


# ---------------------------------------------------------------- the Explorer method


def test_explorer_fit_weights_refits_the_map_with_the_positive_part(corpus):
    from workbench.maps.explore import Explorer

    class StubMap:
        def __init__(self, weights):
            self.weights, self.coords = weights, np.zeros((120, 2))

        def with_weights(self, weights, on_frame=None):
            return StubMap(weights)

    ex = Explorer.__new__(Explorer)  # no run directory needed for the wiring
    ex.embeddings, ex.aspects, ex.map = corpus[0], list(ASPECTS), StubMap({a: 1 / 3 for a in ASPECTS})
    pairs = judged_pairs(corpus[0], (0.7, 0.0, -0.3), t=0.1, limit=3000)
    fit = ex.fit_weights(pairs=pairs, negative=("a2",), settings=FitSettings(n_boot=50))
    assert fit.weights["a2"] < 0
    assert ex.weights["a2"] == 0.0 and ex.weights["a0"] == pytest.approx(fit.weights["a0"] / (1 + fit.weights["a2"]))
    kept = ex.map
    ex.fit_weights(pairs=pairs, apply=False, settings=FitSettings(n_boot=50))
    assert ex.map is kept


def test_pairs_from_similarity_keeps_the_ends_by_hand():
    sim = np.array([[1.0, 0.9, 0.1, 0.5],
                    [0.9, 1.0, 0.2, np.nan],
                    [0.1, 0.2, 1.0, 0.3],
                    [0.5, np.nan, 0.3, 1.0]])
    # known pairs (0,1) .9, (0,2) .1, (0,3) .5, (1,2) .2, (2,3) .3: top fifth similar, bottom two fifths dissimilar
    out = W.pairs_from_similarity(sim, top=0.2, bottom=0.4, rows=[10, 11, 12, 13])
    assert sorted(map(tuple, out.tolist())) == [(10, 11, 1), (10, 12, 0), (11, 12, 0)]
    with pytest.raises(ValueError, match="square"):
        W.pairs_from_similarity(np.ones((2, 3)))
    with pytest.raises(ValueError, match="fractions"):
        W.pairs_from_similarity(sim, top=0.7, bottom=0.5)
