"""Embedding arithmetic every stage shares: arrays from tensors, and rows of unit length.

Embeddings travel between the stages as numpy arrays with one vector per row. `as_array`
takes what a model or a caller hands over (a list, an array, a torch tensor) to a float64
array for exact metrics; `unit_rows` scales each row to length 1 (float32 unless asked
otherwise, the precision the encoders give), so that a dot product is a cosine.
"""

from __future__ import annotations

import numpy as np


def as_array(x) -> np.ndarray:
    """`x` as a float64 numpy array: lists, arrays and torch tensors alike (without importing torch here)."""
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def unit_rows(x, dtype=np.float32) -> np.ndarray:
    """`x` as `dtype` with every row (the last axis) scaled to length 1; a zero row stays zero (similarity 0 to all)."""
    x = np.asarray(x, dtype=dtype)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
