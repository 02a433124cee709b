"""Retrieval metrics: the rank of the matching candidate, mean rank and MRR (paper section 3.3)."""

from __future__ import annotations

import numpy as np

from ..core.vectors import as_array, unit_rows


def retrieval_ranks(queries, candidates, chunk: int = 2048) -> np.ndarray:
    """1-based rank of candidate i for query i, by cosine similarity among all candidates.

    queries: [N, D]; candidates: [M, D] with M >= N. Candidate i is the match of query i;
    candidates N..M-1, if any, are extra distractors.

    Ties are counted in the query's favour: rank = 1 + number of candidates whose
    similarity is *strictly greater* than that of the match (so a duplicate of the
    match does not push it down). Computed in float64, `chunk` queries at a time so
    that memory stays O(chunk x M).
    """
    q, c = unit_rows(as_array(queries), np.float64), unit_rows(as_array(candidates), np.float64)
    if q.ndim != 2 or c.ndim != 2 or q.shape[1] != c.shape[1] or c.shape[0] < q.shape[0]:
        raise ValueError(f"retrieval_ranks wants queries [N, D] and candidates [M>=N, D], got {q.shape} and {c.shape}")
    ranks = np.empty(q.shape[0], dtype=np.int64)
    for start in range(0, q.shape[0], chunk):
        sims = q[start:start + chunk] @ c.T
        rows = np.arange(sims.shape[0])
        # Take the match's similarity from the same matrix, so it is compared with
        # numbers computed the same way (a duplicate candidate then ties exactly).
        correct = sims[rows, start + rows]
        ranks[start:start + chunk] = (sims > correct[:, None]).sum(axis=1) + 1
    return ranks


def mean_rank(ranks) -> float:
    """Average rank of the match (1 is perfect); the authors' validation metric."""
    return float(np.mean(ranks))


def mrr(ranks) -> float:
    """Mean reciprocal rank, mean of 1 / rank_i (paper section 3.3)."""
    return float(np.mean(1.0 / np.asarray(ranks, dtype=np.float64)))


def retrieval_report(queries, candidates) -> dict:
    """Mean rank, MRR, top-1 accuracy and the number of queries for a query/candidate pairing."""
    ranks = retrieval_ranks(queries, candidates)
    return {"mean_rank": mean_rank(ranks), "mrr": mrr(ranks), "top1": float(np.mean(ranks == 1)), "n": int(len(ranks))}
