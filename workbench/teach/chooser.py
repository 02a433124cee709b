"""The chooser: which sentences to ask about next, and how sure each aspect's head is.

A person's minutes are the budget, so every question should move the heads:

1. First, each aspect's clearest sentence by the aspect file (the largest margin of the floor's belief in that
   aspect over any other), to confirm or reject what the aspect file reads. An aspect is asked this way until
   one of its sentences is confirmed, at most `CLEAREST_TRIES` times: an aspect file that reads its aspect
   badly should not take the whole budget.
2. Then the sentences whose answer would change the heads most: those the current scorer is unsure of
   (summed over the aspects, p (1 - p)), drawn at random with a chance that grows with that uncertainty
   (`UNCERTAIN_SHARE` of it; the rest is the same for every sentence), spread over papers (one per paper in a
   batch, papers already asked less likely) and so over positions: a draw from the whole corpus takes each
   part of the abstracts as often as it is there. (Taking each fifth of the abstracts in turn cost 0.3 at 30
   answers per aspect and 0.7 at 10 on CSAbstruct's dev papers, 5 user seeds: it asked a third fewer outcome
   sentences.)

Why a draw and not the most uncertain sentences: on CSAbstruct's dev papers (`benchmarks/teach.py --split dev`,
worst of the user seeds, mean over the three aspects) always asking the most uncertain ones scored 83.0 at 30
answers per aspect and 81.7 at 10 (2 seeds), a uniform draw 84.1 and 82.6, the half-and-half draw 85.3 and 82.8
(3 seeds). The most uncertain sentences are the ambiguous ones (a method sentence that reports a result), and a
regression fitted to them alone misjudges how common each aspect is (the approach head: 78.1 against 81.3).
Weighting each answer by the inverse of its chance (importance weighting) changed nothing measurable there, so
answers weigh alike.

All functions here read arrays over the askable sentences (one row each), so they are cheap and testable
without an encoder.
"""

from __future__ import annotations

import numpy as np

CLEAREST_TRIES = 3   # questions an aspect gets from its clearest sentences before one is confirmed
UNCERTAIN_SHARE = 0.5  # of a sentence's chance to be drawn, the part that follows its uncertainty (see module doc)
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


def draw(score: np.ndarray, open_rows: np.ndarray, doc: np.ndarray, asked: np.ndarray, n: int,
         rng: np.random.Generator, taken=()) -> list[int]:
    """`n` open rows drawn at random, each with a chance of (1 - UNCERTAIN_SHARE) + UNCERTAIN_SHARE x its
    `score` over the open rows' mean, divided by 1 + the questions its paper was already asked (`asked`
    [papers]); at most one per paper (none of the papers of `taken`)."""
    score = np.asarray(score, np.float64)
    mean = max(float(score[open_rows].mean()), 1e-12) if open_rows.any() else 1.0
    chance = np.where(open_rows, ((1 - UNCERTAIN_SHARE) + UNCERTAIN_SHARE * score / mean) / (1.0 + asked[doc]), 0.0)
    chance[np.isin(doc, [doc[r] for r in taken])] = 0.0
    chosen = []
    while len(chosen) < n and chance.sum() > 0:
        row = int(rng.choice(len(chance), p=chance / chance.sum()))
        chosen.append(row)
        chance[doc == doc[row]] = 0.0  # one question per paper in a batch
    return chosen


def certainty(probabilities: np.ndarray) -> np.ndarray:
    """[A]: per aspect, the share of sentences the scorer is sure of (probability within SURE of 0 or 1)."""
    p = np.asarray(probabilities, np.float64)
    return ((p <= SURE) | (p >= 1 - SURE)).mean(axis=0) if len(p) else np.zeros(p.shape[1])
