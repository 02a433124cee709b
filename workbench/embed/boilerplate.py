"""Boilerplate: sentences that many papers of a corpus share nearly word for word, and that say nothing about any.

"Further research is warranted.", "Missing data were handled by multiple imputation.",
"Experimental results show the effectiveness of our approach.": a sentence that recurs in
many abstracts cannot tell one paper's disease, design or approach from another's, yet it
is often what an aspect's description matches best ("evidence", "design", "results"). On
the synthetic corpora the aspect file's head put half its method weight on such sentences;
leaving them out of the sentences it pools raised method from 32-39% to 51-56% of the
ceiling and generator b's disease from 68-88% to 93-94% (`benchmarks/aspect_file.py`). On
ACLSum about 1% of the sentences are boilerplate.

A sentence is boilerplate when, at cosine NEAR or more, it has a near copy in at least
SHARE of the corpus's other papers (and in at least MIN_PAPERS). `find_boilerplate` returns
one vector per group of near copies, which a head stores (a few kB to a few hundred kB), so
a new abstract's boilerplate is recognised without the corpus: `keep_mask`.
"""

from __future__ import annotations

import numpy as np

from ..core.vectors import unit_rows

NEAR = 0.95  # cosine of two sentence vectors that are the same sentence up to a word or a name
SHARE = 0.05  # of the other papers that must hold a near copy
MIN_PAPERS = 3  # ... and at least this many
MAX_PAPERS = 3000  # a seeded sample of papers above this is searched (the search is all pairs of sentences)
BLOCK = 1024  # sentences per block of the pairwise search (a block x all float32 similarities)


def find_boilerplate(features, seed: int = 0) -> np.ndarray:
    """[K, H] unit vectors, one per group of near copies that recur across the corpus (K may be 0)."""
    docs = [i for i, s in enumerate(features.sentences) if len(s)]
    if len(docs) > MAX_PAPERS:
        docs = sorted(np.random.default_rng(seed).choice(docs, MAX_PAPERS, replace=False).tolist())
    hidden = features.whole.shape[1]
    if len(docs) < MIN_PAPERS + 1:
        return np.zeros((0, hidden), np.float32)
    S = unit_rows(np.concatenate([np.asarray(features.sentences[i], np.float32) for i in docs]))
    owner = np.concatenate([np.full(len(features.sentences[i]), k) for k, i in enumerate(docs)])
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])  # each paper's first sentence (owner is sorted)
    need = max(MIN_PAPERS, int(np.ceil(SHARE * (len(docs) - 1))))
    flagged = np.zeros(len(S), bool)
    for start in range(0, len(S), BLOCK):
        near = S[start:start + BLOCK] @ S.T >= NEAR
        papers = np.logical_or.reduceat(near, starts, axis=1)  # [block, papers]: a near copy in that paper
        papers[np.arange(len(near)), owner[start:start + BLOCK]] = False  # its own paper does not count
        flagged[start:start + BLOCK] = papers.sum(axis=1) >= need
    # One representative per group: greedily, the flagged sentence with the most near copies first.
    candidates = S[flagged]
    if not len(candidates):
        return np.zeros((0, hidden), np.float32)
    near = candidates @ candidates.T >= NEAR
    order = np.argsort(-near.sum(axis=1), kind="stable")
    covered = np.zeros(len(candidates), bool)
    keep = []
    for i in order:
        if not covered[i]:
            keep.append(i)
            covered |= near[i]
    return candidates[keep].astype(np.float32)


def keep_mask(sentences: np.ndarray, boilerplate: np.ndarray | None) -> np.ndarray:
    """[n] True for the sentences of one abstract that are not boilerplate; all True where every one is."""
    n = len(sentences)
    if boilerplate is None or not len(boilerplate) or not n:
        return np.ones(n, bool)
    keep = (unit_rows(np.asarray(sentences, np.float32)) @ np.asarray(boilerplate, np.float32).T).max(axis=1) < NEAR
    return keep if keep.any() else np.ones(n, bool)
