"""The chooser: which sentences to ask about next, and how sure each aspect's head is.

A person's minutes are the budget, so every question should move the heads:

1. First, each aspect's clearest sentence by the aspect file (the largest margin of the floor's belief in that
   aspect over any other), to confirm or reject what the aspect file reads. An aspect is asked this way until
   one of its sentences is confirmed, at most `CLEAREST_TRIES` times: an aspect file that reads its aspect
   badly should not take the whole budget.
2. Then the sentences whose answer would change the heads most: those the current scorer is least sure of
   (summed over the aspects, p (1 - p)), spread over papers (one per paper in a batch, papers asked less first)
   and over positions (the batch takes the most uncertain sentence of each fifth of the abstract in turn), so
   that a batch is not ten near-copies of one doubt.

All functions here read arrays over the askable sentences (one row each), so they are cheap and testable
without an encoder.
"""

from __future__ import annotations

import numpy as np

CLEAREST_TRIES = 3   # questions an aspect gets from its clearest sentences before one is confirmed
POSITION_GROUPS = 5  # a batch takes the most uncertain sentence of each fifth of the abstracts in turn
SURE = 0.2           # a probability within this of 0 or 1 counts as sure (`certainty`)


def margins(beliefs: np.ndarray) -> np.ndarray:
    """[N, A]: each sentence's log-belief in an aspect less its largest log-belief in another (log-odds, so that
    beliefs all near 1 are still told apart)."""
    beliefs = np.log(np.maximum(np.asarray(beliefs, np.float64), 1e-300))
    if beliefs.shape[1] < 2:
        return beliefs.copy()
    top2 = np.sort(beliefs, axis=1)[:, -2:]
    other = np.where(beliefs >= top2[:, 1:2], top2[:, :1], top2[:, 1:2])
    return beliefs - other


def clearest(beliefs: np.ndarray, open_rows: np.ndarray, doc: np.ndarray, aspects: list[int]) -> list[int]:
    """Per aspect index in `aspects`, the open row (`open_rows` bool [N]) the floor reads most clearly as it,
    each in a different paper."""
    m = margins(beliefs)
    chosen, used = [], set()
    for j in aspects:
        for row in np.argsort(-m[:, j], kind="stable"):
            if open_rows[row] and doc[row] not in used:
                chosen.append(int(row))
                used.add(doc[row])
                break
    return chosen


def uncertainty(probabilities: np.ndarray) -> np.ndarray:
    """[N]: how unsure the scorer is of each sentence, sum over the aspects of p (1 - p)."""
    p = np.asarray(probabilities, np.float64)
    return (p * (1 - p)).sum(axis=1)


def spread(score: np.ndarray, open_rows: np.ndarray, doc: np.ndarray, position: np.ndarray, asked: np.ndarray,
           n: int, taken=()) -> list[int]:
    """`n` open rows, the highest `score` first, at most one per paper (none of the papers of `taken`), a paper's
    score divided by 1 + the questions it was already asked (`asked` [papers]), the position groups in turn."""
    adjusted = np.where(open_rows, score / (1.0 + asked[doc]), -np.inf)
    group = np.minimum((np.asarray(position) * POSITION_GROUPS).astype(int), POSITION_GROUPS - 1)
    queues = [list(np.flatnonzero(group == g)[np.argsort(-adjusted[group == g], kind="stable")])
              for g in range(POSITION_GROUPS)]
    chosen, used = [], {int(doc[r]) for r in taken}
    while len(chosen) < n and any(queues):
        for queue in queues:
            while queue and (not np.isfinite(adjusted[queue[0]]) or int(doc[queue[0]]) in used):
                queue.pop(0)
            if queue and len(chosen) < n:
                row = int(queue.pop(0))
                chosen.append(row)
                used.add(int(doc[row]))
    return chosen


def certainty(probabilities: np.ndarray) -> np.ndarray:
    """[A]: per aspect, the share of sentences the scorer is sure of (probability within SURE of 0 or 1)."""
    p = np.asarray(probabilities, np.float64)
    return ((p <= SURE) | (p >= 1 - SURE)).mean(axis=0) if len(p) else np.zeros(p.shape[1])
