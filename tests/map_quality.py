"""How well a map keeps neighbourhoods, computed by brute force for the map tests (small maps only)."""

import numpy as np


def neighbours_kept(coords, features, k: int = 10, m: int | None = None) -> float:
    """The mean share of each point's k nearest in the weighted space (cosine of `features`) found among its m
    nearest on the map (m = k unless given)."""
    f = np.asarray(features, dtype=np.float64)
    sims = f @ f.T
    np.fill_diagonal(sims, -np.inf)
    d2 = np.sum((coords[:, None] - coords[None]) ** 2, axis=-1)
    np.fill_diagonal(d2, np.inf)
    near, drawn = np.argsort(-sims, axis=1)[:, :k], np.argsort(d2, axis=1)[:, :m or k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(near, drawn)]))
