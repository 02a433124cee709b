"""Maps of many papers (`sampled.SampledEngine`): the rest placed by their sample neighbours, the whole refined."""

import numpy as np
import pytest

from map_quality import neighbours_kept
from workbench.maps import neighbours, reweight, sampled, tsne, tsne_math
from workbench.maps.engine import Job, KNNEngine
from workbench.maps.optimiser import Schedule
from workbench.maps.reduced import ReducedSearch
from workbench.maps.sampled import SampledEngine, place_rest
from workbench.maps.tsne import AspectMap, engine_for

N, SAMPLE = 900, 200


def _clusters(n=N, clusters=6, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(clusters, size=n)
    emb = {name: rng.normal(size=(clusters, d))[labels] + 0.6 * rng.normal(size=(n, d))
           for name, d in (("task", 12), ("method", 10), ("outcome", 8))}
    return emb, labels


@pytest.fixture(scope="module")
def fitted():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tsne, "N_JOBS", 1)
        mp.setattr(sampled, "REFINE_EXAGGERATED_ITER", 20)
        mp.setattr(sampled, "REFINE_ITER", 60)
        emb, labels = _clusters()
        engine = SampledEngine(sample_size=SAMPLE, schedule=Schedule(exaggeration_iter=60))
        amap = AspectMap.fit(emb, {"task": 0.5, "method": 0.3, "outcome": 0.2}, perplexity=10, n_iter=100, seed=0,
                             method=engine)
        frames = []
        moved = amap.with_weights({"task": 0.2, "method": 0.3, "outcome": 0.5}, n_iter=40,
                                  on_frame=lambda c: frames.append(c.copy()))
    return amap, labels, moved, frames


def test_the_rest_sit_at_the_weighted_mean_of_their_sample_neighbours():
    rng = np.random.default_rng(1)
    n, k = 60, 5
    idx = np.stack([rng.choice(np.delete(np.arange(n), i), k, replace=False) for i in range(n)])
    weights = rng.random((n, k))
    sample = np.arange(0, n, 3)
    sample_coords = rng.normal(size=(len(sample), 2))
    y = place_rest(sample_coords, sample, idx, weights)
    in_sample = np.isin(np.arange(n), sample)
    pos = np.full((n, 2), np.nan)
    pos[sample] = sample_coords
    for i in range(n):  # round 1, by a loop: only the neighbours in the sample count
        if in_sample[i]:
            continue
        use = [(w, pos[j]) for j, w in zip(idx[i], weights[i]) if in_sample[j]]
        if use:
            expect = sum(w * p for w, p in use) / sum(w for w, _ in use)
            assert np.allclose(y[i], expect), i
    assert np.allclose(y[sample], sample_coords)
    lonely = np.zeros((3, 2), dtype=int)  # rows 1 and 2 see only each other: no path to the sample
    lonely[1], lonely[2] = [2, 2], [1, 1]
    y = place_rest(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([0, 0]), lonely, np.ones((3, 2)))
    assert np.allclose(y[1:], [2.0, 3.0])


def test_moves_spread_along_the_neighbour_rows_from_the_sample():
    """`diffuse` against sums over paths written out: after r rounds, a paper's move is the sum over r-step paths
    to sample papers of the product of the weights times their moves, over the same sum of the products alone."""
    rng = np.random.default_rng(2)
    n, k = 40, 4
    idx = np.stack([rng.choice(np.delete(np.arange(n), i), k, replace=False) for i in range(n)])
    weights = rng.random((n, k))
    weights /= weights.sum(axis=1, keepdims=True)
    sample = np.arange(0, n, 4)
    moves = rng.normal(size=(len(sample), 2))
    move_of = dict(zip(sample.tolist(), moves))

    def paths(i, r):  # (product of weights, end) of every r-step path from i
        if r == 0:
            return [(1.0, i)]
        return [(w * p, end) for j, w in zip(idx[i], weights[i]) for p, end in paths(j, r - 1)]

    for rounds in (1, 2):
        got = sampled.diffuse(moves, sample, idx, weights, rounds)
        for i in range(n):
            ends = [(p, move_of[end]) for p, end in paths(i, rounds) if end in move_of]
            expect = sum(p * m for p, m in ends) / sum(p for p, _ in ends) if ends else np.zeros(2)
            np.testing.assert_allclose(got[i], expect, rtol=1e-5, atol=1e-6, err_msg=f"{rounds}: {i}")
    lonely = np.array([[1], [0], [0]])  # rows 0 and 1 see only each other, away from the sample (row 2)
    assert np.allclose(sampled.diffuse(np.ones((1, 2)), np.array([2]), lonely, np.ones((3, 1)), 3)[:2], 0.0)


def test_chosen_above_the_threshold_and_by_name():
    assert isinstance(engine_for("auto", sampled.SAMPLED_MIN), SampledEngine)
    below = engine_for("auto", sampled.SAMPLED_MIN - 1)
    assert type(below) is KNNEngine
    assert engine_for("sampled", 10).method == "sampled"


@pytest.mark.slow  # the shared fit: about 2 s of CPU
def test_the_sampled_map_keeps_neighbourhoods_in_float32(fitted):
    amap, labels, _, _ = fitted
    assert amap.method == "sampled" and amap.coords.shape == (N, 2)
    assert amap.features().dtype == np.float32 and all(e.dtype == np.float32 for e in amap.embeddings.values())
    frame = amap._cache[sampled.SAMPLE_KEY]
    assert len(frame.sample) == SAMPLE and frame.idx.max() < SAMPLE  # the sample's neighbours index the sample
    kept = neighbours_kept(amap.coords, amap.features(), m=30)
    assert kept > 0.5, kept  # chance: 30 of 899, 0.03
    centres = np.stack([amap.coords[labels == c].mean(axis=0) for c in range(6)])
    own = np.argmin(np.sum((amap.coords[:, None] - centres[None]) ** 2, axis=-1), axis=1)
    assert np.mean(own == labels) > 0.9


@pytest.mark.slow  # the shared fit: about 2 s of CPU
def test_a_weight_change_gives_a_first_frame_then_the_settled_map(fitted):
    amap, labels, moved, frames = fitted
    assert len(frames) == 1
    frame = frames[0]
    assert frame.shape == (N, 2) and not np.allclose(frame, moved.coords) and not np.allclose(frame, amap.coords)
    settled = neighbours_kept(moved.coords, moved.features(), m=30)
    assert neighbours_kept(frame, moved.features(), m=30) > 0.6 * settled > 0.25, settled
    kept, moved_frame = amap._cache[sampled.SAMPLE_KEY], moved._cache[sampled.SAMPLE_KEY]
    assert moved.method == "sampled" and moved_frame.sample is kept.sample


@pytest.mark.slow  # the shared fit and one more: about 3 s of CPU
def test_a_large_change_is_laid_out_again_as_well_as_a_fresh_fit(fitted):
    """0.5 / 0.3 / 0.2 to 0.2 / 0.3 / 0.5 keeps few of the 10 nearest (`reweight.large_change`): the sample is laid
    out again (its neighbour rows are found anew) and the settled map keeps the new neighbours as a fit does."""
    amap, _, moved, _ = fitted
    assert reweight.neighbour_overlap(amap.known_neighbours()[0], moved.known_neighbours()[0]) < reweight.RELAYOUT_BELOW
    assert moved._cache[sampled.SAMPLE_KEY].idx is not amap._cache[sampled.SAMPLE_KEY].idx
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tsne, "N_JOBS", 1)
        mp.setattr(sampled, "REFINE_EXAGGERATED_ITER", 20)
        mp.setattr(sampled, "REFINE_ITER", 60)
        fresh = AspectMap.fit(amap.embeddings, moved.weights, perplexity=10, n_iter=100, seed=0,
                              method=SampledEngine(sample_size=SAMPLE, schedule=Schedule(exaggeration_iter=60)))
    f = moved.features()
    assert neighbours_kept(moved.coords, f, m=30) > 0.9 * neighbours_kept(fresh.coords, f, m=30)


@pytest.mark.slow  # the shared fit: about 2 s of CPU
def test_the_first_frame_reads_the_samples_cosines_not_the_features(fitted):
    """The sample's affinities under new weights, from the kept per-aspect cosines, are those of the weighted
    features built anew (1 - <f_i, f_j> on the same pairs); the frame never builds the features."""
    amap, _, _, _ = fitted
    frame = amap._cache[sampled.SAMPLE_KEY]
    weights = {"task": 0.1, "method": 0.0, "outcome": 0.9}
    f = tsne_math.weighted_features(amap.embeddings, weights)[frame.sample].astype(np.float64)
    d = 1.0 - np.einsum("sd,skd->sk", f, f[frame.idx])
    expect = reweight.knn_affinities(frame.idx, np.clip(d, 0.0, 2.0), amap.perplexity)[0]
    got = frame.affinities([weights[a] for a in amap.aspects], amap.perplexity).P
    np.testing.assert_allclose(got.toarray(), expect.toarray(), rtol=1e-4, atol=1e-9)  # float32 cosines
    old = AspectMap(amap.embeddings, amap.weights, amap.coords, amap.perplexity, amap.seed, amap.engine)
    old._cache.update({key: amap._cache[key] for key in (sampled.SAMPLE_KEY, "knn", "knn_rows")})
    new = AspectMap(amap.embeddings, weights, amap.coords, amap.perplexity, amap.seed, amap.engine)
    y = amap.engine.first_frame(old, new, Job(None, 0, True))
    assert y.shape == (N, 2) and "features" not in old._cache and "features" not in new._cache
    assert new._cache[sampled.SAMPLE_KEY].coords.shape == (SAMPLE, 2)


@pytest.mark.slow  # the shared fit: about 2 s of CPU
def test_papers_added_later_are_placed_as_on_any_map(fitted):
    amap, _, _, _ = fitted
    emb, _ = _clusters(n=3, seed=5)
    grown = amap.extend(emb, n_iter=20)
    assert len(grown) == N + 3 and np.allclose(grown.coords[:N], amap.coords)


# ---------------------------------------------------------------- a million papers in 12 GB: no float64 copy, no whole temporary


def _features(n=N, weights=(0.5, 0.3, 0.2)):
    emb, _ = _clusters(n)
    emb = {a: tsne_math.unit32(e) for a, e in emb.items()}  # a map's own float32 unit rows
    return emb, dict(zip(emb, weights))


def test_the_pca_start_from_float32_blocks_is_the_float64_svd_s(monkeypatch):
    monkeypatch.setattr(tsne_math, "ROW_BLOCK", 64)  # 15 blocks
    emb, w = _features()
    f = tsne_math.weighted_features(emb, w)
    assert f.dtype == np.float32
    y = tsne_math.pca_init(f, 3) - np.random.default_rng(3).normal(scale=1e-6, size=(N, 2))  # less its jitter
    x = f.astype(np.float64) - f.astype(np.float64).mean(axis=0)  # reference: numpy's float64 SVD
    comps = np.linalg.svd(x, full_matrices=False)[2][:2].T
    comps *= np.where(comps[np.abs(comps).argmax(axis=0), [0, 1]] < 0, -1.0, 1.0)
    ref = x @ comps
    np.testing.assert_allclose(y, ref / ref[:, 0].std() * 1e-4, rtol=0, atol=1e-10)  # 1e-6 of the 1e-4 spread


def test_feature_rows_are_the_features_bit_for_bit_and_annoy_finds_the_same_on_them(monkeypatch):
    monkeypatch.setattr(tsne_math, "ROW_BLOCK", 100)
    emb, w = _features(600)
    f, rows = tsne_math.weighted_features(emb, w), tsne_math.WeightedRows(emb, w)
    assert rows.shape == f.shape and np.array_equal(np.asarray(rows), f) and np.array_equal(rows[7], f[7])
    assert np.array_equal(rows[[5, 0, 599]], f[[5, 0, 599]]) and np.array_equal(rows[250:420], f[250:420])
    monkeypatch.setattr(neighbours, "QUERY_BLOCK", 128)  # Annoy reads 5 blocks
    whole, blocks = (neighbours.AnnoySearch(5).search(x, 12, 1, seed=0) for x in (f, rows))
    assert np.array_equal(whole[0], blocks[0]) and np.array_equal(whole[1], blocks[1])


def test_blocked_calibration_and_products_are_the_whole_ones(monkeypatch):
    emb, w = _features(600)
    f = tsne_math.weighted_features(emb, w).astype(np.float64)
    d = np.clip(1.0 - f @ f.T, 0.0, 2.0)
    np.fill_diagonal(d, np.inf)
    idx = np.argsort(d, axis=1)[:, :30]
    d = np.take_along_axis(d, idx, axis=1)
    monkeypatch.setattr(reweight, "CALIBRATE_BLOCK", 70)
    P, rows = reweight.knn_affinities(idx, d, 10.0)
    whole = tsne_math.calibrate_rows(d, 10.0)
    assert all(np.array_equal(a, b) for a, b in zip(rows[1:4], whole))  # each row's search is its own
    dense = np.zeros((600, 600))
    np.put_along_axis(dense, idx, whole[0], axis=1)
    dense = (dense + dense.T) / 1200.0  # the symmetric P, dense
    np.testing.assert_allclose(P.toarray(), dense, rtol=1e-15, atol=0)
    np.testing.assert_allclose(rows[4], np.take_along_axis(dense, idx, axis=1), rtol=1e-15, atol=0)
    monkeypatch.setattr(tsne_math, "ROW_BLOCK", 64)
    amap = AspectMap(emb, w, np.random.default_rng(0).normal(size=(600, 2)), perplexity=10, method="opentsne")
    mean, comps, std = amap._pca(5)
    m_b, g_b = amap._projections(5, 12, 22)  # the method block, float64 against float64 products of the whole
    np.testing.assert_allclose(m_b, f[:, 12:22] @ mean[12:22], rtol=0, atol=1e-13)
    np.testing.assert_allclose(g_b, f[:, 12:22] @ (comps[:, 12:22] * std[:, None]).T, rtol=0, atol=1e-13)
    new = f[:3] * 0.5 + f[3:6] * 0.5
    np.testing.assert_allclose(amap._corpus_products(new), new @ f.T, rtol=0, atol=1e-13)


def _fit_on_reduced_search(monkeypatch, refine_iter: int, n_iter: int):
    """A sampled map of 400 papers whose graph is searched as at a million (`ReducedSearch` on blocks of rows, from
    100 papers), short schedules: (embeddings, the map)."""
    monkeypatch.setattr(reweight, "EXACT_SEARCH_MAX", 100)  # Annoy from 100 papers
    monkeypatch.setattr(tsne, "N_JOBS", 1)
    monkeypatch.setattr(sampled, "REFINE_EXAGGERATED_ITER", 5)
    monkeypatch.setattr(sampled, "REFINE_ITER", refine_iter)
    emb, w = _features(400)
    return emb, AspectMap.fit(emb, w, perplexity=5, n_iter=n_iter, seed=0,
                              method=SampledEngine(sample_size=100, schedule=Schedule(exaggeration_iter=10)))


def test_a_sampled_fit_on_annoy_never_holds_its_features_whole(monkeypatch):
    monkeypatch.setattr(tsne, "EXACT_MAX", 100)  # a k-NN map's caches (`prepare`) from 100 papers
    _, amap = _fit_on_reduced_search(monkeypatch, refine_iter=5, n_iter=10)
    assert "features" not in amap._cache  # the PCA start, the sample, Annoy and `prepare` read blocks of rows
    f = amap.features()
    idx, d = ReducedSearch(trees=sampled.GRAPH_TREES).search(f, 15, 1, 0)  # on the whole array: the same search
    kept_idx, kept_d = amap.known_neighbours()[:2]
    assert np.mean(kept_idx == idx) > 0.99 and np.allclose(kept_d, d, atol=1e-6)  # re-ranked from the aspects
    assert neighbours_kept(amap.coords, f, m=30) > 0.5


def test_a_small_change_re_ranks_the_kept_neighbours_and_a_large_one_searches(monkeypatch):
    """The fit keeps each neighbour pair's cosine per aspect (`sampled.KeptGraph`): under other weights they give
    the distances of the weighted features built anew on the same pairs. A small change re-ranks them and searches
    nothing, and settles as well as on a searched graph; a change that keeps few of the 10 nearest searches."""
    emb, amap = _fit_on_reduced_search(monkeypatch, refine_iter=20, n_iter=30)
    kept = amap._cache[sampled.GRAPH_KEY]
    assert kept.idx is amap.known_neighbours()[0] and kept.cosines.shape == (3, 400, 15)
    other = {"task": 0.1, "method": 0.0, "outcome": 0.9}
    idx, d = kept.reranked([other[a] for a in amap.aspects])
    f = tsne_math.weighted_features(emb, other).astype(np.float64)
    np.testing.assert_allclose(d, np.clip(1.0 - np.einsum("nd,nkd->nk", f, f[idx]), 0.0, 2.0), rtol=0, atol=1e-3)
    assert np.all(np.diff(d, axis=1) >= 0) and np.array_equal(np.sort(idx, axis=1), np.sort(kept.idx, axis=1))
    small = {"task": 0.45, "method": 0.32, "outcome": 0.23}
    searched = []
    search_kept = ReducedSearch.search_kept
    monkeypatch.setattr(ReducedSearch, "search_kept", lambda *a, **k: searched.append(1) or search_kept(*a, **k))
    moved = amap.with_weights(small, n_iter=20)
    assert not searched and moved._cache[sampled.GRAPH_KEY] is kept
    monkeypatch.setattr(sampled, "RERANK_MIN", 1.01)  # the same change on a graph searched again
    again = amap.with_weights(small, n_iter=20)
    assert searched and again._cache[sampled.GRAPH_KEY] is not kept
    f = moved.features()
    assert neighbours_kept(moved.coords, f, m=30) > neighbours_kept(again.coords, f, m=30) - 0.02
    # Left to the engine (no n_iter), a middling overlap settles in SMALL_CHANGE_ITER on the re-ranked graph and in
    # `iterations(n)` on a searched one.
    settles = []
    warm = sampled.reweight
    monkeypatch.setattr(sampled, "reweight", lambda y, a, first, settle, *r: (settle and settles.append(first + settle))
                        or warm(y, a, first, settle, *r))  # settle 0: the first frame's sample
    monkeypatch.setattr(sampled, "neighbour_overlap", lambda *a: 0.81)
    amap.with_weights(small)
    monkeypatch.setattr(sampled, "RERANK_MIN", reweight.RELAYOUT_BELOW)
    searched.clear()
    amap.with_weights(small)
    assert not searched and settles == [reweight.iterations(400), reweight.SMALL_CHANGE_ITER]
    monkeypatch.setattr(sampled, "neighbour_overlap", reweight.neighbour_overlap)
    amap.with_weights({"task": 0.0, "method": 0.05, "outcome": 0.95}, n_iter=20)
    assert searched
