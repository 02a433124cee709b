"""Seeded synthetic papers for maps of many papers: three aspects of clustered unit vectors, float32.

Each aspect groups the papers its own way, in two levels: TOPICS topics of SUBTOPICS subtopics each, a
paper's vector its topic's centre plus its subtopic's offset plus its own noise (so a paper's nearest
papers are mostly of its subtopic, then of its topic), made unit. Generated in blocks of rows, so a
million papers of 3 x 384 dimensions take the 4.6 GB of the result and little more.
"""

from __future__ import annotations

import numpy as np

ASPECTS, DIM = ("task", "method", "outcome"), 384
TOPICS, SUBTOPICS = 30, 20
SUBTOPIC_SCALE, NOISE_SCALE = 0.6, 0.45  # offsets relative to a unit-norm topic centre (per dimension x sqrt(dim))
BLOCK = 50_000


def papers(n: int, seed: int = 0, dim: int = DIM, aspects=ASPECTS) -> dict[str, np.ndarray]:
    """aspect -> (n, dim) float32 unit rows of n synthetic papers (module docstring); the same for the same seed."""
    rng = np.random.default_rng(seed)
    out = {}
    for a in aspects:
        centres = rng.standard_normal((TOPICS, dim)).astype(np.float32) / np.sqrt(dim)
        offsets = (rng.standard_normal((TOPICS, SUBTOPICS, dim)) * SUBTOPIC_SCALE / np.sqrt(dim)).astype(np.float32)
        topic = rng.integers(TOPICS, size=n)
        sub = rng.integers(SUBTOPICS, size=n)
        rows = np.empty((n, dim), dtype=np.float32)
        for start in range(0, n, BLOCK):
            s = slice(start, start + BLOCK)
            noise = rng.standard_normal((len(topic[s]), dim), dtype=np.float32) * np.float32(NOISE_SCALE / np.sqrt(dim))
            block = centres[topic[s]] + offsets[topic[s], sub[s]] + noise
            rows[s] = block / np.linalg.norm(block, axis=1, keepdims=True)
        out[a] = rows
    return out
