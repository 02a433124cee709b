"""The aspect-file floor: one builder that fits it to a corpus, its steps named parts, and the head that holds it.

Stage 03 keeps a trained head only where it reads its aspect at least half as selectively as this floor does
(`guard.py` compares them); where the corpus has no human summaries, the floor is what the user gets. It is
read from the aspect file and the corpus alone, no label, in named steps (`STEPS`, each in `aspectfile.py`):

* ``boilerplate``: sentences the corpus repeats nearly word for word are never pooled (`boilerplate.py`);
* ``calibrate``: the aspect file's sentence scores self-trained on the corpus's own sentences;
* ``blend``: the whole abstract's share, from how much the aspects' pooled sentences share (`corpus_blends`);
* ``phrases``: where the aspects vary independently, a stating sentence is read through its phrases
  (`word_pooled_sentences`);
* ``mixture``: where they do not (no aspect read through its phrases), each sentence is shared out among the
  aspects by its posterior, the scores times where each aspect sits in an abstract (`mixture.py`).

A linear position prior (`aspectfile.position_prior`) is not a step: beside the mixture it moved no family by
more than 0.1 (`benchmarks/families.py`).

`benchmarks/families.py` measures each step on three families of corpora, choosing on two and reporting on the
third; a step is here because it adds on the family that did not choose it (see `docs/results.md`).
`fit_floor(..., steps=...)` leaves steps out for such measurements. `AspectFileFloor.head_state` is the state
of a `heads.SentencePoolingHead` that computes the floor exactly (the guard puts it in a head's place);
`AspectFileFloor.embeddings` computes the same vectors in numpy, on any papers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .aspectfile import (BLEND, TEMPERATURE, AspectPrototypes, CalibratedScorer, aspect_directions, calibrate,
                         corpus_blends, corpus_word_means, corpus_word_shares, pooled_words, stating_sentences,
                         zero_shot_embeddings)
from .boilerplate import find_boilerplate
from .features import blend_documents, position_features
from .heads import LinearScorer
from .mixture import PositionMixture, fit_mixture
from .phrases import piece_frequencies

STEPS = ("boilerplate", "calibrate", "blend", "phrases", "mixture")


@dataclass
class AspectFileFloor:
    """The aspect-file floor fitted to one corpus (`fit_floor`): what each step read from it."""
    prototypes: AspectPrototypes          # the aspect file's prototypes and zero-shot queries
    # calibrated where it could be, or its position mixture where the floor took one
    scorer: AspectPrototypes | CalibratedScorer | PositionMixture
    boilerplate: np.ndarray               # [B, H] the corpus's near-copied sentences (0 rows: none)
    blends: dict[str, float]              # the sentences' share of each aspect's vector
    word_shares: dict[str, float]         # the phrases' share of a stating sentence's vector
    directions: np.ndarray                # [A, H] each aspect's direction among a sentence's phrases
    frequencies: dict[str, float] = field(default_factory=dict)  # phrase pieces' paper shares (phrases only)
    word_means: dict[str, np.ndarray] = field(default_factory=dict)  # the pooled phrases' corpus means
    biases: dict[str, float] = field(default_factory=dict)  # a zero-shot head's bias (softmax regime; `floor_bias`)

    @property
    def aspects(self) -> list[str]:
        return list(self.scorer.aspects)

    @property
    def calibrated(self) -> bool:
        return self.scorer.calibrated

    def place(self, head, aspect: str) -> None:
        """Make `head` (a pooling `SentencePoolingHead`) compute this floor for `aspect`: the floor's kind of
        scorer in it (the position mixture's, or a linear one), then its state."""
        head.scorer = self.scorer.head_scorer(head.hidden, aspect) if self.mixed else LinearScorer(head.hidden)
        head.load_state_dict(self.head_state(head, aspect))

    @property
    def mixed(self) -> bool:
        """Whether the floor took the position mixture (its scorer a `mixture.PositionMixture`)."""
        return self.scorer.kind == PositionMixture.kind

    def head_state(self, head, aspect: str) -> dict:
        """The state of `head` (a pooling `SentencePoolingHead` with the floor's kind of scorer, see `place`) that
        computes this floor for `aspect`."""
        j = self.aspects.index(aspect)
        phrases = PhraseReading(self.word_shares[aspect], self.directions[j], self.word_means.get(aspect))
        if self.mixed:
            state = floor_state(head, None, 0.0, blend=self.blends[aspect], boilerplate=self.boilerplate,
                                phrases=phrases)
            state.update({f"scorer.{k}": v.to(state["blend.gate"].dtype)
                          for k, v in self.scorer.head_scorer(head.hidden, aspect).state_dict().items()})
            return state
        position = None if self.scorer.position is None else self.scorer.position[j]
        if self.calibrated:
            query, bias, temperature = self.scorer.weights[j], float(self.scorer.biases[j]), 1.0
        else:
            query, bias, temperature = self.scorer.queries[j], self.biases[aspect], TEMPERATURE
        return floor_state(head, query, bias, temperature=temperature, blend=self.blends[aspect],
                           boilerplate=self.boilerplate, phrases=phrases, position=position)

    def embeddings(self, features, word_vectors: Callable | None = None) -> dict[str, np.ndarray]:
        """{aspect: [N, H] unit rows}: the floor's vectors of these documents (`word_vectors`: the cache's, needed
        where a phrases' share is > 0)."""
        sentences = None
        if any(v > 0 for v in self.word_shares.values()):
            # As the head reads them: the fitted directions, piece frequencies and corpus means, not these papers'.
            marks = stating_sentences(features, self.scorer, self.boilerplate)
            words = pooled_words(features, self.aspects, self.directions, self.word_shares, word_vectors,
                                 self.frequencies, marks)
            sentences = {a: blend_documents(features, w, self.word_shares[a], self.word_means.get(a), marks[a])
                         for a, w in words.items()}
        return zero_shot_embeddings(features, self.scorer, blend=self.blends, boilerplate=self.boilerplate,
                                    sentences=sentences)

    def summary(self) -> dict:
        """What stage 03 writes of the floor into guard.json (JSON-ready)."""
        return {"blends": self.blends, "word_shares": self.word_shares, "boilerplate": len(self.boilerplate),
                "calibrated": self.calibrated,
                "position_mixture": None if not self.mixed else
                {a: [round(float(x), 3) for x in np.exp(self.scorer.log_density[j])]
                 for j, a in enumerate(self.aspects)},
                "mixture_sharpness": None if not self.mixed else round(float(self.scorer.sharpness), 3)}


def fit_floor(features, prototypes: AspectPrototypes, word_vectors: Callable | None = None, seed: int = 0,
              steps=STEPS) -> AspectFileFloor:
    """Fit the floor's steps (`STEPS`; `steps` names those taken) to a corpus's `DocumentFeatures`, no label.

    `word_vectors` (`FeatureCache.word_vectors`) is called only where the corpus reads a phrases' share > 0."""
    unknown = set(steps) - set(STEPS)
    if unknown:
        raise ValueError(f"unknown floor step(s) {sorted(unknown)}; the steps are {list(STEPS)}")
    H = prototypes.prototypes.shape[1]
    boiler = find_boilerplate(features, seed) if "boilerplate" in steps else np.zeros((0, H), np.float32)
    scorer = (calibrate(features, prototypes, seed=seed, boilerplate=boiler) or prototypes) \
        if "calibrate" in steps else prototypes
    aspects = list(scorer.aspects)
    blends = corpus_blends(features, scorer, seed, boiler) if "blend" in steps else {a: 1.0 for a in aspects}
    shares = corpus_word_shares(features, scorer, seed, boiler) if "phrases" in steps else {a: 0.0 for a in aspects}
    directions = aspect_directions(scorer, prototypes)
    frequencies, means = {}, {}
    if any(v > 0 for v in shares.values()):
        frequencies = piece_frequencies(features.sentence_texts)  # frames such as "was assessed in" weigh less
        means = corpus_word_means(features, aspects, directions, shares, word_vectors, frequencies,
                                  stating_sentences(features, scorer, boiler))
    mixture = None
    if "mixture" in steps:
        # One aspect per sentence holds where no sentence is read through its phrases (see `mixture.py`).
        read = shares if "phrases" in steps else corpus_word_shares(features, scorer, seed, boiler)
        mixture = None if any(v > 0 for v in read.values()) else fit_mixture(features, scorer, boilerplate=boiler)
        scorer = mixture if mixture is not None else scorer
    # The zero-shot linear head's softmax regime; a calibrated or mixture scorer is held exactly without one.
    biases = {} if scorer.calibrated or mixture is not None else \
        {a: floor_bias(features, q, position=None if scorer.position is None else scorer.position[j])
         for j, (a, q) in enumerate(zip(aspects, prototypes.queries))}
    return AspectFileFloor(prototypes, scorer, boiler, blends, shares, directions, frequencies, means, biases)


def floor_bias(features, query: np.ndarray, temperature: float = TEMPERATURE,
               position: np.ndarray | None = None) -> float:
    """A bias 8 below the highest sentence score of the corpus (with its position's log-prior, where given): the
    softmax regime of `floor_state`, where sigmoid(x) is exp(x) to 3 parts in 10,000. Scores are cosines over
    the temperature, so the weakest document's best sentence stays far above float32's smallest number."""
    prior = (lambda n: position_features(n) @ position) if position is not None else (lambda n: 0.0)  # noqa: E731
    best = [float((np.asarray(s) @ query / temperature + prior(len(s))).max()) for s in features.sentences if len(s)]
    return -(max(best) + 8.0) if best else 0.0


@dataclass(frozen=True)
class PhraseReading:
    """How a head reads each stating sentence through its phrases (`aspectfile.word_pooled_sentences`): the
    phrases' share of the sentence's vector (0: the sentence as it is), the aspect's direction among them
    (None: the query's) and their mean over the corpus's stating sentences, taken off (None: zero)."""
    share: float = 0.0
    direction: np.ndarray | None = None
    mean: np.ndarray | None = None


def floor_state(head, query: np.ndarray, bias: float, temperature: float = TEMPERATURE, blend: float = BLEND,
                boilerplate: np.ndarray | None = None, phrases: PhraseReading = PhraseReading(),
                position: np.ndarray | None = None) -> dict:
    """The state of a `SentencePoolingHead` (its `LinearScorer`) that computes the aspect file's zero-shot vector.

    Scores s . query / temperature; with the bias well below them, sigmoid(x) is exp(x) to a
    few per cent, so the head's normalised sigmoid weights are the softmax of `aspectfile`.
    A calibrated scorer (`aspectfile.calibrate`) is held exactly: query w, bias b, temperature 1.
    `position`: the aspect's log-prior on the position features (`aspectfile.position_prior`), added to the
    scores as is; None: none. The gate holds the blend: the whole abstract's share sigmoid(gate) = 1 - blend
    (`blend` 0.5: gate 0; `aspectfile.corpus_blends` reads it from the corpus). `boilerplate`: the corpus's
    (`boilerplate.find_boilerplate`), never pooled; None keeps the head's. `phrases.share` > 0: each
    sentence's vector takes that share from its phrases pooled towards `phrases.direction`
    (`aspectfile.aspect_directions`; None: `query`'s unit direction) less `phrases.mean`, as in
    `aspectfile.word_pooled_sentences` with `aspectfile.corpus_word_shares`. No projection.
    """
    import torch

    state = {k: v.detach().clone() for k, v in head.state_dict().items()}
    dtype = state["blend.gate"].dtype
    if query is not None:  # None: the head's scorer is not a linear one (`AspectFileFloor.head_state` sets it)
        state["scorer.query"] = torch.as_tensor(query / temperature, dtype=dtype)
        state["scorer.position"] = torch.zeros_like(state["scorer.position"]) if position is None else \
            torch.as_tensor(np.asarray(position), dtype=dtype)
        state["scorer.bias"] = torch.tensor(float(bias), dtype=dtype)
    whole = float(np.clip(1.0 - blend, 1e-13, 1 - 1e-13))  # sigmoid(+-30) is within 1e-13 of 1 and 0
    state["blend.gate"] = torch.tensor(float(np.log(whole / (1.0 - whole))), dtype=dtype)
    if boilerplate is not None:
        state["pooling.boilerplate"] = torch.as_tensor(np.asarray(boilerplate), dtype=dtype)
    direction = np.asarray(query, dtype=np.float64)
    direction = direction / max(float(np.linalg.norm(direction)), 1e-12) if phrases.direction is None \
        else phrases.direction
    state["pooling.words"] = torch.as_tensor(np.asarray(direction), dtype=dtype)
    state["pooling.word_share"] = torch.tensor(float(phrases.share), dtype=dtype)
    state["pooling.word_mean"] = (torch.zeros_like(state["pooling.word_mean"]) if phrases.mean is None else
                                  torch.as_tensor(np.asarray(phrases.mean), dtype=dtype))
    if "projection.up" in state:
        state["projection.up"] = torch.zeros_like(state["projection.up"])
    return state
