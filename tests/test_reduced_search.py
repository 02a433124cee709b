"""Neighbours found in a PCA of the weighted features, re-ranked exactly (`reduced.ReducedSearch`), against sklearn."""

import numpy as np
from sklearn.decomposition import PCA
from sklearn.neighbors import NearestNeighbors

from workbench.maps import reweight, tsne_math
from workbench.maps.neighbours import AnnoySearch
from workbench.maps.reduced import ReducedSearch, candidate_distances, locality_order, principal_axes
from workbench.maps.sampled import SampledEngine


def _rows(n=800, seed=0):
    # Papers near a 10-dimensional subspace (as embeddings' leading components hold most of their spread): 12
    # principal axes find their neighbours' candidates, the small noise off it decides the order among them.
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(n, 10))
    emb = {a: tsne_math.unit32(latent @ rng.normal(size=(10, d)) + 0.05 * rng.normal(size=(n, d)))
           for a, d in (("task", 24), ("method", 20), ("outcome", 16))}
    w = {"task": 0.5, "method": 0.3, "outcome": 0.2}
    return tsne_math.WeightedRows(emb, w), tsne_math.weighted_features(emb, w)


def test_reduced_neighbours_are_mostly_the_exact_ones_at_their_exact_distances():
    rows, f = _rows()
    k = 15
    idx, d = ReducedSearch(dims=12, trees=10, candidates=2.0).search(rows, k, n_jobs=1, seed=0)
    exact = NearestNeighbors(n_neighbors=k + 1, metric="cosine", algorithm="brute").fit(f.astype(np.float64))
    truth = exact.kneighbors(return_distance=False)[:, :k]  # sklearn leaves each row out of its own query
    recall = np.mean([len(np.intersect1d(a, b)) / k for a, b in zip(idx, truth)])
    assert recall > 0.9, recall
    assert not np.any(idx == np.arange(len(f))[:, None]) and np.all(np.diff(d, axis=1) >= 0)
    ff = f.astype(np.float64)
    np.testing.assert_allclose(d, 1.0 - np.einsum("nd,nkd->nk", ff, ff[idx]), atol=1e-6)


def test_candidate_distances_read_from_the_aspects_are_the_weighted_rows_ones():
    rows, f = _rows(300)
    idx = np.random.default_rng(1).integers(300, size=(300, 7))
    ff = f.astype(np.float64)
    expect = 1.0 - np.einsum("nd,nkd->nk", ff, ff[idx])
    np.testing.assert_allclose(candidate_distances(rows, idx, n_jobs=2), expect, atol=1e-6)
    np.testing.assert_allclose(candidate_distances(f, idx), expect, atol=1e-6)
    order = locality_order(f[:, :9], seed=3)  # any order of the rows gives the same distances
    assert np.array_equal(np.sort(order), np.arange(300))
    np.testing.assert_array_equal(candidate_distances(rows, idx, 2, order), candidate_distances(rows, idx, 1))


def test_a_paper_with_a_zero_aspect_vector_gets_finite_distances_as_in_the_weighted_features():
    """A zero row (an aspect text with no term in common with the corpus's, in a TF-IDF map) is zero in the
    weighted features: cosine 0 in that aspect, not NaN."""
    rows, f = _rows(300)
    rows.embeddings["method"][:5] = 0.0
    f = tsne_math.weighted_features(rows.embeddings, rows.weights).astype(np.float64)
    idx = np.random.default_rng(2).integers(300, size=(300, 7))
    d = candidate_distances(rows, idx)
    assert np.isfinite(d).all()
    np.testing.assert_allclose(d, np.clip(1.0 - np.einsum("nd,nkd->nk", f, f[idx]), 0.0, 2.0), atol=1e-6)

def test_principal_axes_span_sklearns_leading_components():
    rows, f = _rows(500)
    axes = principal_axes(rows, 5)
    comps = PCA(5, svd_solver="full").fit(f.astype(np.float64)).components_
    assert axes.shape == (60, 5)
    np.testing.assert_allclose(np.abs(np.sum(axes * comps.T, axis=0)), 1.0, atol=1e-6)


def test_the_sampled_engine_searches_its_graph_in_reduced_dimensions_only_where_annoy_would(monkeypatch):
    monkeypatch.setattr(reweight, "EXACT_SEARCH_MAX", 1000)
    monkeypatch.setattr(reweight, "best_device", lambda: "cpu")
    assert SampledEngine().graph_search(1000) is None  # exact products
    assert isinstance(SampledEngine().graph_search(1001), ReducedSearch)
    assert isinstance(SampledEngine(dims=0).graph_search(1001), AnnoySearch)
    plugged = AnnoySearch(3)
    assert SampledEngine(search=plugged).graph_search(10 ** 6) is plugged


def test_the_pca_start_of_many_rows_takes_its_axes_from_a_sample(monkeypatch):
    rows, f = _rows(900)
    whole = tsne_math.pca_init(f, 0)
    monkeypatch.setattr(tsne_math, "PCA_START_ROWS", 300)
    sampled_axes = tsne_math.pca_init(rows, 0)
    assert sampled_axes.shape == (900, 2) and np.isclose(sampled_axes[:, 0].std(), 1e-4, rtol=0.02)
    for c in range(2):  # the same two components, up to sign, from a third of the rows
        assert abs(np.corrcoef(whole[:, c], sampled_axes[:, c])[0, 1]) > 0.95
