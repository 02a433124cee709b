"""Maps of many papers (`sampled.SampledEngine`): the rest placed by their sample neighbours, the whole refined."""

import numpy as np
import pytest

from map_quality import neighbours_kept
from workbench.maps import sampled, tsne
from workbench.maps.engine import KNNEngine
from workbench.maps.optimiser import Schedule
from workbench.maps.sampled import SampledEngine, place_rest, rerank
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


def test_rerank_orders_candidates_by_their_distance_under_new_features():
    rng = np.random.default_rng(2)
    f = rng.normal(size=(20, 4)).astype(np.float32)
    f /= np.linalg.norm(f, axis=1, keepdims=True)
    idx = rng.integers(20, size=(20, 6))
    ranked, d = rerank(f, idx)
    expect = 1.0 - np.einsum("nd,nkd->nk", f.astype(np.float64), f[idx].astype(np.float64))
    assert np.allclose(np.sort(expect, axis=1), d, atol=1e-6)
    assert np.all(np.diff(d, axis=1) >= 0) and all(set(a) == set(b) for a, b in zip(ranked, idx))


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
    sample, sample_idx = amap._cache[sampled.SAMPLE_KEY]
    assert len(sample) == SAMPLE and sample_idx.max() < SAMPLE  # the sample's neighbours index the sample
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
    assert moved.method == "sampled" and moved._cache[sampled.SAMPLE_KEY][0] is amap._cache[sampled.SAMPLE_KEY][0]


@pytest.mark.slow  # the shared fit: about 2 s of CPU
def test_papers_added_later_are_placed_as_on_any_map(fitted):
    amap, _, _, _ = fitted
    emb, _ = _clusters(n=3, seed=5)
    grown = amap.extend(emb, n_iter=20)
    assert len(grown) == N + 3 and np.allclose(grown.coords[:N], amap.coords)
