"""The phrase of a sentence that states an aspect, read out of its sentence.

One sentence often states several aspects ("we used a matched case-referent design to evaluate Lumetrox in
older adults"), and an encoder's vector of it is mostly the sentence's frame ("we used ... to evaluate").
Even its contextual token vectors carry that frame. A phrase embedded on its own does not: MiniLM's vector of
"a matched case-referent design" alone is about the design. So each sentence is cut into short phrases, each
phrase is embedded by itself (the backbone's own `embed`), and an aspect's vector of the sentence is the mean
of its phrases weighted by a softmax of their cosine to the aspect's direction (`aspectfile.aspect_directions`).

Phrases are cut without a parser (none ships offline): a sentence splits at punctuation (commas included:
kept inside a piece they cost 2 to 3 points of disease and population on the synthetic corpora) and before
the function words that open a new constituent ("with", "to", "was", "we", ...); a phrase is one to
MAX_CHUNKS neighbouring pieces (three cost 1.7 times as much on real abstracts and moved no factor by more
than 1.5). A frame such as "was assessed in" or "data were gathered through" is the classifier's favourite,
since it marks the sentences that state the aspect; but it recurs across the corpus, while what a paper
states recurs far less. A phrase's score therefore loses FREQUENCY_WEIGHT x the largest share of the
corpus's papers that contain one of its pieces (`piece_frequencies`, kept in the model's config).
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from typing import Sequence

import numpy as np

from ..core.vectors import unit_rows

MAX_CHUNKS = 2  # a phrase is one or two neighbouring pieces ("a blinded parallel-arm trial with concealed allocation")
FREQUENCY_WEIGHT = 1.0  # cosine a phrase loses per unit of the largest paper share of its pieces
TEMPERATURE = 0.05  # softmax over a sentence's phrases, scored by their cosine to an aspect's direction
MIN_FREQUENCY = 0.01  # pieces in fewer papers than this share lose under 0.01 of cosine: not kept
MAX_PIECES = 5000  # the most frequent pieces kept in a model's config
MIN_WEIGHT = 0.3  # a sentence is read through its phrases where it holds this much of the aspect's weight (or the most)

# Words that open a new constituent: articles, prepositions, conjunctions, auxiliaries, pronouns. A piece
# starts at one of them after a content word, so "was assessed in a randomised trial" gives "was assessed",
# "in a randomised trial".
OPENERS = frozenset("""a an the to of in on at by for from with without into through over under after before
during among between within across against via per that which who whom whose where when while whether if
because as than and or but nor so was were is are be been being has have had do does did can could may might
must shall should will would we they it this these those our their its he she his her there here""".split())
_WORD = re.compile(r"[\w'\-]+|[^\w\s]")


def pieces(sentence: str) -> list[str]:
    """A sentence cut at punctuation and before each opener that follows a content word; pieces made only of
    openers ("in the") are left out."""
    out: list[list[str]] = []
    current: list[str] = []
    for word in _WORD.findall(sentence):
        if not (word[0].isalnum() or word[0] in "_'-"):  # punctuation ends a piece
            if current:
                out.append(current)
            current = []
            continue
        if word.lower() in OPENERS and current and current[-1].lower() not in OPENERS:
            out.append(current)
            current = []
        current.append(word)
    if current:
        out.append(current)
    return [" ".join(p) for p in out if any(w.lower() not in OPENERS for w in p)]


def phrases(sentence: str, max_chunks: int = MAX_CHUNKS) -> list[tuple[str, list[str]]]:
    """[(phrase, its pieces)]: every run of one to `max_chunks` neighbouring pieces; the whole sentence where it
    has no piece (a sentence of openers, or of symbols)."""
    cut = pieces(sentence)
    if not cut:
        return [(sentence, [])]
    return [(" ".join(cut[i:i + n]), cut[i:i + n])
            for i in range(len(cut)) for n in range(1, max_chunks + 1) if i + n <= len(cut)]


def piece_frequencies(documents: Sequence[Sequence[str]], min_share: float = MIN_FREQUENCY,
                      limit: int = MAX_PIECES) -> dict[str, float]:
    """{piece (lower case): share of the documents that contain it} for the pieces in at least `min_share` of the
    documents and at least two of them, the `limit` most frequent; `documents` holds each one's sentences."""
    counts: Counter = Counter()
    for sentences in documents:
        counts.update({p.lower() for s in sentences for p in pieces(s)})
    n = max(len(documents), 1)
    kept = [(p, c / n) for p, c in counts.most_common() if c >= 2 and c / n >= min_share][:limit]
    return {p: round(share, 4) for p, share in kept}


def frequencies_tag(frequencies: dict[str, float] | None) -> str:
    """A short digest of a frequency table, so pooled vectors cached under one table are not read under another."""
    text = json.dumps(frequencies or {}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def penalties(parts: Sequence[Sequence[str]], frequencies: dict[str, float] | None,
              weight: float = FREQUENCY_WEIGHT) -> np.ndarray:
    """Per phrase (given as its pieces), `weight` x the largest paper share among its pieces (0 for unknown ones)."""
    table = frequencies or {}
    return np.array([weight * max((table.get(p.lower(), 0.0) for p in ps), default=0.0) for ps in parts],
                    dtype=np.float32)


def stating(weights: np.ndarray, min_weight: float = MIN_WEIGHT) -> np.ndarray:
    """Which sentences of one abstract state the aspect [M] (bool): those holding at least `min_weight` of its
    pooling weights, and always the one holding the most (none where every weight is 0). Only these are read
    through their phrases: the others weigh little in the pooled vector, and on 1,000 real abstracts, where
    the weights spread, this read 41% of the sentences instead of all of them."""
    w = np.asarray(weights, dtype=np.float64)
    if not len(w) or w.max() <= 0:
        return np.zeros(len(w), dtype=bool)
    w = w / w.sum()  # shares of the abstract's weight, however the weights were scaled
    return (w >= min_weight) | (w >= w.max())


def pool_phrases(vectors: np.ndarray, direction: np.ndarray, penalty: np.ndarray | None = None,
                 temperature: float = TEMPERATURE) -> np.ndarray:
    """A sentence's phrase vectors [P, H] pooled into one unit vector [H]: their mean weighted by a softmax (at
    `temperature`) of each unit phrase vector's product with `direction`, less its `penalty`."""
    u = unit_rows(np.asarray(vectors, dtype=np.float32))
    z = u @ np.asarray(direction, dtype=np.float32)
    if penalty is not None:
        z = z - penalty
    z = z / temperature
    w = np.exp(z - z.max())
    return unit_rows((w / w.sum()) @ u)
