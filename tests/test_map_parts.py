"""A map engine's parts can be replaced: a neighbour search written here is plugged into a map and shapes it."""

import numpy as np

from map_quality import neighbours_kept
from workbench.maps.engine import KNNEngine
from workbench.maps.neighbours import NeighbourSearch
from workbench.maps.optimiser import Schedule
from workbench.maps.tsne import AspectMap, weighted_features


class BruteForce(NeighbourSearch):
    """Every distance in numpy, the k smallest per row: a neighbour search of a user's own, counting its calls."""

    def __init__(self):
        self.calls = []

    def search(self, features, k, n_jobs=1, seed=0):
        self.calls.append((len(features), k))
        f = np.asarray(features, dtype=np.float64)
        d = np.clip(1.0 - f @ f.T, 0.0, 2.0)
        np.fill_diagonal(d, np.inf)
        idx = np.argsort(d, axis=1, kind="stable")[:, :k]
        return idx, np.take_along_axis(d, idx, axis=1)


def _clusters(n=300, clusters=4, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(clusters, size=n)
    emb = {name: rng.normal(size=(clusters, d))[labels] + 0.7 * rng.normal(size=(n, d))
           for name, d in (("task", 16), ("method", 12))}
    return emb, labels


def test_a_plugged_in_neighbour_search_lays_out_the_map_and_stays_with_it():
    emb, labels = _clusters()
    weights = {"task": 0.6, "method": 0.4}
    toy = BruteForce()
    amap = AspectMap.fit(emb, weights, perplexity=10, n_iter=200, seed=0,
                         method=KNNEngine(search=toy, schedule=Schedule(exaggeration_iter=100)))
    assert toy.calls == [(300, 30)]  # 3 x perplexity neighbours of every paper, searched once
    assert amap.method == "opentsne" and amap.search is toy
    kept = neighbours_kept(amap.coords, weighted_features(emb, weights))
    assert kept > 0.25, kept  # 0.41 here; chance: 10 of 299, 0.03; from random lists (below) 0.03
    # each cluster stays together: its points nearer their own centre than any other's
    centres = np.stack([amap.coords[labels == c].mean(axis=0) for c in range(4)])
    own = np.argmin(np.sum((amap.coords[:, None] - centres[None]) ** 2, axis=-1), axis=1)
    assert np.mean(own == labels) > 0.9

    moved = amap.with_weights({"task": 0.3, "method": 0.7}, n_iter=40)  # a weight change searches with it again
    assert len(toy.calls) == 2 and moved.search is toy
    grown = amap.extend({a: e[:3] for a, e in emb.items()}, n_iter=20)
    assert grown.search is toy and grown.coords.shape == (303, 2)


def test_a_search_that_finds_the_wrong_neighbours_draws_a_worse_map():
    """The plugged search is what the map's affinities come from: random 'neighbours' give a map that keeps few."""

    class Random(BruteForce):
        def search(self, features, k, n_jobs=1, seed=0):
            idx, d = super().search(features, k, n_jobs, seed)
            return np.random.default_rng(0).permuted(idx, axis=0), d  # each row another paper's list

    emb, _ = _clusters(seed=1)
    weights = {"task": 0.5, "method": 0.5}
    engine = KNNEngine(search=Random(), schedule=Schedule(exaggeration_iter=100))
    amap = AspectMap.fit(emb, weights, perplexity=10, n_iter=200, seed=0, method=engine)
    assert neighbours_kept(amap.coords, weighted_features(emb, weights)) < 0.1  # 0.04 here, against 0.40 searched
