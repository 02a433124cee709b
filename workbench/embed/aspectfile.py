"""Stages 02-03 without an LLM: supervision read from the aspect file itself (zero-shot sentence weights, a floor).

A user's own corpus has no human summaries or highlighted sentences, and a small local LLM
answers mostly in generalities. The aspect file, though, says what each aspect is: its
description, the features to include and example sentences. The frozen encoder embeds those
once into a *prototype* per aspect; every sentence of every abstract is then scored by how
much nearer it lies to its aspect's prototype than to the other aspects' and to the things
the aspect excludes (the negatives):

    score[s, a] = s . query_a,   query_a = proto_a - mean of the other aspects' protos
                                           - EXCLUDE_WEIGHT x mean of a's exclude vectors

(sentence vectors are unit rows, so s . proto is a cosine). The score is linear in the
sentence vector, so a `heads.SentencePoolingHead` can hold it exactly (`floor_head`). The
sentences of an abstract compete for each aspect (a softmax over them at `temperature`), and
the aspect's vector is the weighted mean of the sentence vectors, blended with the
whole-abstract vector (`blend` is the sentences' share). This costs one encoder pass over
the aspect file and nothing per paper beyond the sentence vectors stage 03 caches anyway.

Two uses: `zero_shot_embeddings` is the floor a trained head must beat (stage 03 puts it in
a head's place where the head reads its aspect's sentences less selectively than the encoder, see
`guard.py`), and `sentence_marks` labels the sentences that state each aspect where the
corpus has neither highlights nor LLM sentence labels.

Calibrated to the corpus (`calibrate`): the aspect file's words are not the corpus's words,
so the sentences it points at most clearly (softmax weight >= 0.5, each to one aspect) train
a logistic classifier per aspect on the corpus's own sentence vectors, whose sentences then
mark the next round (self-training, CALIBRATION_ROUNDS rounds). The pooled vector weighs a
sentence by its probability, normalised over the abstract: exactly a `SentencePoolingHead`
with query w and bias b. On the synthetic corpora (`benchmarks/aspect_file.py`, two
generators, three seeds each) it followed every aspect more than the zero-shot scores did, by
2 to 7 points of Spearman; on ACLSum it was within a point of them.

An abstract states its aspects in an order its field shares (background first, results last), which no
one sentence's words show. `position_prior` reads, per aspect, where the scores put it in the corpus's
abstracts (a log-prior on a sentence's relative position and on its being first or last), which a scorer can
add to every sentence's logit. The floor reads position through its mixture instead (`mixture.py`); this prior
stays as what `benchmarks/families.py` compares the mixture with.

Sentences that many papers share nearly word for word ("Further research is warranted.") are
left out of the pooling and train the classifiers as negatives (`boilerplate.py`).

How much of the whole abstract to blend in depends on the corpus (`corpus_blends`): where the
aspects' own sentences share one structure (ACLSum: the paper's topic runs through every
sentence; debiased CKA 0.66 to 0.78 between the aspects' pooled sentences), the whole abstract
states that shared part more robustly than one sentence does, and half and half did best;
where they vary independently (the synthetic corpora: CKA 0.0 to 0.1), the whole abstract only
mixes the other aspects and the nuisance in. The blend is 1 - s / 2, s an aspect's mean CKA
with the other aspects, measured on the corpus itself without labels.

Where the aspects vary independently, one sentence often states several ("we enrolled older adults
with a lasting lung illness"), and its vector is mostly the sentence's frame. There each sentence that
states an aspect (`stating_sentences`) gets its own vector for it (`word_pooled_sentences`):
min(1, WORD_SHARE x (1 - 2 s)) of it (0 where s >= 0.5, as on ACLSum) comes from the sentence's phrases,
each embedded on its own, weighed by a softmax of their cosine to the aspect's direction less what it
excludes (`aspect_directions`) and less how often the corpus repeats their pieces (`phrases.py`), centred
on their mean over the stating sentences. On the synthetic corpora this took method from 54% / 49% to
85% / 79% of its ceiling (generators a / b, worst seed), population from 86% / 74% to 97% / 96%, and
disease from 95% / 92% to 99% / 100%, the drug from up to 19.5 to at most 7.8 (`benchmarks/aspect_file.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..core.vectors import unit_rows
from ..measures.health import linear_cka
from .boilerplate import keep_mask
from .features import N_POSITION, blend_documents, marked_word_vectors, position_features
from .phrases import piece_frequencies, stating

TEMPERATURE = 0.05  # sentence softmax: low enough that the one or two sentences stating the aspect dominate
BLEND = 0.5         # the sentences' share of the zero-shot vector; the rest is the whole abstract
EXCLUDE_WEIGHT = 0.5  # how strongly what an aspect excludes counts against a sentence
CALIBRATION_ROUNDS = 3  # self-training rounds of `calibrate` (the second and third add 1-2 points on the synthetic corpora)
CALIBRATION_C = 1.0  # inverse L2 strength of its logistic classifiers (sklearn's default)
MIN_MARKED = 5  # sentences an aspect must have marked before its classifier is trained
MAX_CALIBRATION_SENTENCES = 20000  # a seeded sample of sentences trains the classifiers on large corpora
MIN_BLEND_DOCUMENTS = 20  # fewer papers: no CKA to read the blend from, BLEND it is
MAX_BLEND_DOCUMENTS = 2000  # a seeded sample of papers above this (the CKA's Gram matrices are n x n)
PRIOR_L2 = 1.0  # ridge on the position prior's three weights, against a corpus of a few dozen papers
PRIOR_NEWTON_STEPS = 25  # the prior's fit converges in 4 to 6 on a corpus (concave in three weights)
WORD_SHARE = 1.5  # x (1 - 2 s), at most 1: the aspect's phrases' share of a sentence's vector (all of it for s <= 1/6)


class PooledMarks:
    """What a scorer that pools by weights says states an aspect: the stating sentences of its weights."""

    def stated(self, sentences: np.ndarray, positions: np.ndarray | None = None,
               temperature: float = TEMPERATURE) -> np.ndarray:
        """[n, A] bool: the sentences that state each aspect (`stating_columns` of the pooling weights)."""
        return stating_columns(self.pool_weights(sentences, positions, temperature))


@dataclass
class AspectPrototypes(PooledMarks):
    """Per aspect: its prototype (the unit mean of its text vectors) and the query a sentence is scored with."""
    aspects: list[str]
    prototypes: np.ndarray                # [A, H] unit rows
    queries: np.ndarray                   # [A, H]: score[s, a] = s . queries[a]
    excluded: np.ndarray | None = None    # [A, H] the mean of each aspect's exclude vectors (zero: none)
    position: np.ndarray | None = None    # [A, N_POSITION] log-prior of a sentence's position (`position_prior`)

    calibrated = False  # what each scorer says of itself, so that no caller asks for its class
    description = "zero-shot sentence scores"
    kind = "linear"  # its logit is linear in the sentence vector (a head holds it in a `heads.LinearScorer`)

    def scores(self, sentences: np.ndarray) -> np.ndarray:
        """[n, A] scores of n sentence vectors (see the module docstring)."""
        return unit_rows(np.asarray(sentences, dtype=np.float32)) @ self.queries.T

    def directions(self) -> np.ndarray:
        """[A, H]: the direction along which each aspect's score grows (its query)."""
        return self.queries

    def pool_weights(self, sentences: np.ndarray, positions: np.ndarray | None = None,
                     temperature: float = TEMPERATURE) -> np.ndarray:
        """[n, A]: an abstract's n sentences weighted for each aspect, each column summing to 1: the softmax of
        the scores at `temperature`, with the position log-prior (in temperature units, as a head holds it)
        added where the scorer has one and `positions` are given."""
        score = self.scores(sentences)
        if self.position is not None and positions is not None:
            score = score + temperature * (positions @ self.position.T)
        return np.stack([softmax(score[:, j], temperature) for j in range(len(self.aspects))], axis=1)


@dataclass
class CalibratedScorer(PooledMarks):
    """Per aspect, a logistic "this sentence states the aspect": p = sigmoid(s . weights[a] + biases[a])."""
    aspects: list[str]
    weights: np.ndarray                   # [A, H]
    biases: np.ndarray                    # [A]
    position: np.ndarray | None = None    # [A, N_POSITION] added to the logits by position (`position_prior`)

    def probabilities(self, sentences: np.ndarray, positions: np.ndarray | None = None) -> np.ndarray:
        """[n, A] probabilities of n sentence vectors (with their `position_features`, where the scorer has a
        position prior and they are given)."""
        z = unit_rows(np.asarray(sentences, dtype=np.float32)) @ self.weights.T + self.biases
        if self.position is not None and positions is not None:
            z = z + np.asarray(positions, np.float32) @ self.position.T
        return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))

    calibrated = True
    description = "calibrated to the corpus"
    kind = "linear"

    def directions(self) -> np.ndarray:
        """[A, H]: the direction along which each aspect's score grows (its classifier's weights)."""
        return self.weights

    def pool_weights(self, sentences: np.ndarray, positions: np.ndarray | None = None,
                     temperature: float = TEMPERATURE) -> np.ndarray:
        """[n, A]: the probabilities normalised over the abstract's n sentences (`temperature` is not used: the
        calibration set the scale)."""
        p = self.probabilities(sentences, positions)
        return p / np.maximum(p.sum(axis=0, keepdims=True), 1e-30)


def stating_columns(weights: np.ndarray) -> np.ndarray:
    """[n, A] bool: per aspect (column of an abstract's pooling weights [n, A]), its stating sentences
    (`phrases.stating`: at least 0.3 of its weight, or the most)."""
    weights = np.asarray(weights)
    return np.stack([stating(weights[:, j]) for j in range(weights.shape[1])], axis=1) if len(weights) else \
        np.zeros(weights.shape, bool)


def aspect_texts(aspect) -> list[str]:
    """What the aspect file says an aspect is: its description, include items and examples (empty ones left out)."""
    texts = [aspect.description, *aspect.include, *aspect.examples]
    return [t.strip() for t in texts if isinstance(t, str) and t.strip()]


def aspect_prototypes(aspect_set, aspects: Sequence[str], embed) -> AspectPrototypes:
    """Embed each aspect's texts with `embed(texts) -> [n, H]` (the frozen backbone) into its prototype.

    Raises ValueError naming an aspect whose description, include items and examples are all
    empty: with nothing said about it, nothing can be recognised.
    """
    empty = [a for a in aspects if not aspect_texts(aspect_set[a])]
    if empty:
        raise ValueError(f"aspect(s) {empty} have an empty description, no include items and no examples in the "
                         "aspect file: say in a sentence what each aspect is (workbench aspects new writes a start)")
    protos, excluded = [], []
    for a in aspects:
        vectors = unit_rows(np.asarray(embed(aspect_texts(aspect_set[a])), dtype=np.float32))
        protos.append(unit_rows(vectors.mean(axis=0, keepdims=True))[0])
        ex = [t.strip() for t in aspect_set[a].exclude if isinstance(t, str) and t.strip()]
        excluded.append(unit_rows(np.asarray(embed(ex), dtype=np.float32)).mean(axis=0) if ex
                        else np.zeros_like(protos[-1]))
    protos = np.stack(protos).astype(np.float32)
    n = len(aspects)
    others = (protos.sum(axis=0, keepdims=True) - protos) / max(n - 1, 1) if n > 1 else np.zeros_like(protos)
    queries = protos - others - EXCLUDE_WEIGHT * np.stack(excluded)
    return AspectPrototypes(list(aspects), protos, queries.astype(np.float32), np.stack(excluded).astype(np.float32))


def softmax(x: np.ndarray, temperature: float) -> np.ndarray:
    """exp(x / temperature), normalised to sum to 1 (shifted by the maximum first, so it cannot overflow)."""
    z = (x - x.max()) / temperature
    e = np.exp(z)
    return e / e.sum()


def sentence_weights(features, prototypes: AspectPrototypes | CalibratedScorer, temperature: float = TEMPERATURE,
                     boilerplate: np.ndarray | None = None) -> list[dict[str, np.ndarray]]:
    """Per document, {aspect: weights over its sentences} (summing to 1; empty for a document without sentences):
    the softmax of the zero-shot scores, or a `CalibratedScorer`'s probabilities normalised over the abstract,
    with the scorer's position prior (`position_prior`) added to the logits where it has one.
    Sentences matching `boilerplate` (`boilerplate.find_boilerplate`) get weight 0, unless all of them do."""
    rows = kept_sentence_rows(features, lambda s, pos: prototypes.pool_weights(s, pos, temperature),
                              len(prototypes.aspects), boilerplate, np.float32)
    return [{a: r[:, j].copy() for j, a in enumerate(prototypes.aspects)} for r in rows]


def kept_sentence_rows(features, read, columns: int, boilerplate: np.ndarray | None = None,
                       dtype=np.float64) -> list[np.ndarray]:
    """Per document [n, columns]: `read(sentences, position features)` of the sentences that are not
    boilerplate (`boilerplate.keep_mask`), zeros for the others; what every per-sentence reading of a scorer
    (weights, marks, posteriors) goes through."""
    out = []
    for sents in features.sentences:
        rows = np.zeros((len(sents), columns), dtype)
        if len(sents):
            keep = keep_mask(sents, boilerplate)
            rows[keep] = read(np.asarray(sents)[keep], position_features(len(sents))[keep])
        out.append(rows)
    return out


def calibrate(features, prototypes: AspectPrototypes, rounds: int = CALIBRATION_ROUNDS, C: float = CALIBRATION_C,
              seed: int = 0, boilerplate: np.ndarray | None = None) -> CalibratedScorer | None:
    """The aspect file's sentence scores self-trained on this corpus (see the module doc); None where it cannot be
    (fewer than MIN_MARKED marked sentences for an aspect, or every sentence marked): use the zero-shot scores.
    Boilerplate sentences (weight 0) are never marked, so they train every classifier as negatives."""
    from sklearn.linear_model import LogisticRegression

    sentences = [np.asarray(s, dtype=np.float32) for s in features.sentences if len(s)]
    if not sentences or not rounds:
        return None
    S = unit_rows(np.concatenate(sentences))
    sample = np.arange(len(S))
    if len(S) > MAX_CALIBRATION_SENTENCES:
        sample = np.sort(np.random.default_rng(seed).choice(len(S), MAX_CALIBRATION_SENTENCES, replace=False))
    scorer: AspectPrototypes | CalibratedScorer = prototypes
    for _ in range(int(rounds)):
        W = np.concatenate([np.stack([w[a] for a in prototypes.aspects], axis=1)
                            for w in sentence_weights(features, scorer, boilerplate=boilerplate)
                            if len(next(iter(w.values())))])
        weights, biases = [], []
        for j in range(len(prototypes.aspects)):
            # A sentence marks the aspect it points at most clearly, and no other one.
            y = ((W[sample, j] >= 0.5) & (W[sample].argmax(axis=1) == j)).astype(int)
            if y.sum() < MIN_MARKED or y.sum() == len(y):
                return None if scorer is prototypes else scorer
            clf = LogisticRegression(C=C, max_iter=1000).fit(S[sample], y)
            weights.append(clf.coef_[0])
            biases.append(clf.intercept_[0])
        scorer = CalibratedScorer(list(prototypes.aspects), np.asarray(weights, np.float32),
                                  np.asarray(biases, np.float32))
    return scorer


def position_prior(features, scorer: AspectPrototypes | CalibratedScorer, temperature: float = TEMPERATURE,
                   boilerplate: np.ndarray | None = None, l2: float = PRIOR_L2) -> np.ndarray | None:
    """[A, N_POSITION]: per aspect, where in an abstract the scorer's own weights put it, as a log-prior on a
    sentence's position features (relative position, is first, is last); None on fewer than MIN_BLEND_DOCUMENTS
    abstracts with two sentences or more. Read from the corpus alone, no label.

    Per aspect, theta maximises sum over abstracts, sentences i of w_i log softmax_i(theta . x_i) - l2/2 |theta|^2
    (w: the weights `sentence_weights` gives without a prior, boilerplate left out; x: `position_features`): the
    position distribution closest to uniform whose mean features are the weights' (a conditional logit; Newton
    steps on a concave function). Where the weights ignore position, theta is 0 and nothing changes. Why: an
    abstract states its aspects in an order its field shares (background first, results last), which one
    sentence's words do not show. Across CSAbstruct, ACLSum and the synthetic corpora (`benchmarks/families.py`)
    it added 0.6 to 2.6 points on the held-out family in every fold, and nothing beside the position mixture."""
    scorer = replace(scorer, position=None)
    rows = [(position_features(len(s))[k], w, k)
            for s, w in zip(features.sentences, sentence_weights(features, scorer, temperature, boilerplate))
            if len(s) and (k := keep_mask(s, boilerplate)).sum() >= 2]
    if len(rows) < MIN_BLEND_DOCUMENTS:
        return None
    m = max(int(k.sum()) for _, _, k in rows)
    X = np.zeros((len(rows), m, N_POSITION))
    mask = np.zeros((len(rows), m), bool)
    for d, (x, _, k) in enumerate(rows):
        X[d, :k.sum()], mask[d, :k.sum()] = x, True
    theta = np.zeros((len(scorer.aspects), N_POSITION))
    for j, a in enumerate(scorer.aspects):
        W = np.zeros((len(rows), m))
        for d, (_, w, k) in enumerate(rows):
            W[d, :k.sum()] = w[a][k] / max(float(w[a][k].sum()), 1e-30)
        target = np.einsum("dm,dmf->f", W, X)
        for _ in range(PRIOR_NEWTON_STEPS):
            z = np.where(mask, X @ theta[j], -np.inf)
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            mean = np.einsum("dm,dmf->df", p, X)
            grad = target - mean.sum(axis=0) - l2 * theta[j]
            hess = np.einsum("dm,dmf,dmg->fg", p, X, X) - mean.T @ mean + l2 * np.eye(N_POSITION)
            step = np.linalg.solve(hess, grad)
            theta[j] += step
            if np.abs(step).max() < 1e-6:
                break
    return theta.astype(np.float32)


def with_position_prior(features, scorer: AspectPrototypes | CalibratedScorer, temperature: float = TEMPERATURE,
                        boilerplate: np.ndarray | None = None) -> AspectPrototypes | CalibratedScorer:
    """The scorer with its `position_prior` read from this corpus (the scorer unchanged where none can be)."""
    prior = position_prior(features, scorer, temperature, boilerplate)
    return scorer if prior is None else replace(scorer, position=prior)


def zero_shot_embeddings(features, prototypes: AspectPrototypes | CalibratedScorer, temperature: float = TEMPERATURE,
                         blend: float | dict[str, float] = BLEND, boilerplate: np.ndarray | None = None,
                         sentences: dict[str, list[np.ndarray]] | None = None) -> dict[str, np.ndarray]:
    """{aspect: [N, H] unit rows}: the softmax-weighted mean of each abstract's sentence vectors (boilerplate left
    out), blended with the whole-abstract vector (`blend` the sentences' share, one for all aspects or
    {aspect: share}, e.g. from `corpus_blends`). A document without sentences gets its whole vector.
    `sentences`, where given, holds an aspect's own vectors of the sentences (`word_pooled_sentences`): the
    weights still come from the shared ones."""
    whole = unit_rows(np.asarray(features.whole, dtype=np.float32))
    share = blend if isinstance(blend, dict) else {a: float(blend) for a in prototypes.aspects}
    weights = sentence_weights(features, prototypes, temperature, boilerplate)
    out = {a: whole.copy() for a in prototypes.aspects}
    for i, (sents, w) in enumerate(zip(features.sentences, weights)):
        if not len(sents):
            continue
        shared = unit_rows(np.asarray(sents, dtype=np.float32))
        for a in prototypes.aspects:
            s = sentences[a][i] if sentences is not None and a in sentences else shared
            pooled = unit_rows((w[a] @ s)[None])[0]
            out[a][i] = share[a] * pooled + (1 - share[a]) * whole[i]
    return {a: unit_rows(v) for a, v in out.items()}


def shared_structure(features, prototypes: AspectPrototypes | CalibratedScorer, seed: int = 0,
                     boilerplate: np.ndarray | None = None) -> dict[str, float]:
    """{aspect: s}: the mean debiased linear CKA between the aspect's pooled sentences (no whole abstract) and
    each other aspect's, over the corpus's papers (a seeded sample of MAX_BLEND_DOCUMENTS above that), clipped
    to [0, 1]. Near 0 where the aspects vary independently, near 1 where their sentences carry one structure."""
    names = list(prototypes.aspects)
    pooled = zero_shot_embeddings(features, prototypes, blend=1.0, boilerplate=boilerplate)
    n = len(next(iter(pooled.values())))
    rows = np.arange(n)
    if n > MAX_BLEND_DOCUMENTS:
        rows = np.sort(np.random.default_rng(seed).choice(n, MAX_BLEND_DOCUMENTS, replace=False))
    pair = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pair[a, b] = pair[b, a] = float(np.clip(np.nan_to_num(linear_cka(pooled[a][rows], pooled[b][rows])), 0, 1))
    return {a: float(np.mean([pair[a, b] for b in names if b != a])) if len(names) > 1 else 0.0 for a in names}


def corpus_blends(features, prototypes: AspectPrototypes | CalibratedScorer, seed: int = 0,
                  boilerplate: np.ndarray | None = None) -> dict[str, float]:
    """{aspect: the sentences' share of its vector}: 1 - s / 2 with s from `shared_structure` (see the module
    doc); BLEND for every aspect on fewer than MIN_BLEND_DOCUMENTS papers with sentences."""
    if sum(1 for s in features.sentences if len(s)) < MIN_BLEND_DOCUMENTS or len(prototypes.aspects) < 2:
        return {a: BLEND for a in prototypes.aspects}
    shared = shared_structure(features, prototypes, seed, boilerplate)
    return {a: round(1.0 - s / 2.0, 3) for a, s in shared.items()}


def aspect_directions(scorer: AspectPrototypes | CalibratedScorer,
                      prototypes: AspectPrototypes | None = None) -> np.ndarray:
    """[A, H]: the direction in the encoder's space along which each aspect's score grows (the zero-shot
    query, or the calibrated classifier's weights), as a unit row, less EXCLUDE_WEIGHT x the mean of what the
    aspect excludes where `prototypes` (or the scorer itself) holds it: the form of the zero-shot query, so a
    word such as a medicine's name, which an aspect excludes, weighs less."""
    direction = unit_rows(np.asarray(scorer.directions(), dtype=np.float32))
    source = prototypes if prototypes is not None else scorer
    excluded = getattr(source, "excluded", None)
    return direction - EXCLUDE_WEIGHT * excluded if excluded is not None else direction


def word_shares(shared: dict[str, float]) -> dict[str, float]:
    """{aspect: the share of its sentence vectors taken from the sentence's phrases}: min(1, WORD_SHARE x max(0,
    1 - 2 s)), s the aspect's shared structure (`shared_structure`). Where the aspects vary independently (s
    near 0: the synthetic corpora, 0.0 to 0.15) an aspect is one phrase of a sentence that also states others,
    and the phrase replaces the sentence; where every sentence carries the paper's topic (ACLSum: 0.58 to
    0.76) a sentence's phrases are no more the aspect's than the sentence is."""
    return {a: round(min(1.0, WORD_SHARE * max(0.0, 1.0 - 2.0 * float(s))), 3) for a, s in shared.items()}


def corpus_word_shares(features, scorer: AspectPrototypes | CalibratedScorer, seed: int = 0,
                       boilerplate: np.ndarray | None = None) -> dict[str, float]:
    """{aspect: its phrases' share} read from the corpus (`word_shares` of `shared_structure`); 0 for every aspect on
    fewer than MIN_BLEND_DOCUMENTS papers with sentences, where there is no CKA to read."""
    if sum(1 for s in features.sentences if len(s)) < MIN_BLEND_DOCUMENTS or len(scorer.aspects) < 2:
        return {a: 0.0 for a in scorer.aspects}
    return word_shares(shared_structure(features, scorer, seed, boilerplate))


def word_pooled_sentences(features, scorer: AspectPrototypes | CalibratedScorer, word_vectors,
                          shares: dict[str, float], prototypes: AspectPrototypes | None = None,
                          frequencies: dict[str, float] | None = None,
                          boilerplate: np.ndarray | None = None) -> dict[str, list[np.ndarray]]:
    """{aspect: per document its sentences' vectors [n_i, H] for that aspect}, for the aspects with a share > 0.
    A sentence that states the aspect (`stating_sentences`) becomes unit(share x t + (1 - share) x s), s its
    vector and t its phrases pooled towards the aspect's direction (`aspect_directions`, with what `prototypes`
    excludes; `phrases.pool_phrases`) less their mean over the corpus's stating sentences (`corpus_word_means`:
    what every paper's phrases for the aspect share), so that "in pregnant women with kidney disease" gives
    the population head the women and the disease head the kidneys; the other sentences stay as they are.
    `word_vectors(texts, directions, frequencies)` is `FeatureCache.word_vectors` (every direction at once:
    each sentence's phrases are encoded once); it is not called when no share is > 0. `frequencies`: the
    pieces' paper shares that lower a phrase's score (`phrases.piece_frequencies`; None: this corpus's).
    """
    directions = aspect_directions(scorer, prototypes)
    marks = stating_sentences(features, scorer, boilerplate)
    words = pooled_words(features, scorer.aspects, directions, shares, word_vectors, frequencies, marks)
    means = marked_means(words, marks)
    return {a: blend_documents(features, w, shares[a], means.get(a), marks[a]) for a, w in words.items()}


def stating_sentences(features, scorer: AspectPrototypes | CalibratedScorer,
                      boilerplate: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """{aspect: [n_sentences] bool}: the corpus's sentences (documents in order) that state the aspect by its
    pooling weights (`sentence_weights`, boilerplate left out; `phrases.stating`)."""
    weights = sentence_weights(features, scorer, TEMPERATURE, boilerplate)
    return {a: np.concatenate([stating(w[a]) for w in weights] + [np.zeros(0, dtype=bool)])
            for a in scorer.aspects}


def pooled_words(features, aspects: Sequence[str], directions: np.ndarray, shares: dict[str, float],
                 word_vectors, frequencies: dict[str, float] | None = None,
                 marks: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """{aspect: [n_sentences, H]} the phrases of the sentences `marks` holds for the aspect (None: every
    sentence) pooled towards its direction (a row of `directions`, in `aspects`' order), zero rows elsewhere,
    the corpus's sentences in order, for the aspects whose share is > 0 (`features.marked_word_vectors`).
    `frequencies` None: the table of this corpus (`phrases.piece_frequencies`)."""
    pooling = [a for a in aspects if shares.get(a, 0.0) > 0]
    if not pooling:
        return {}
    if frequencies is None:
        frequencies = piece_frequencies(features.sentence_texts)
    flat = [t for texts in features.sentence_texts for t in texts]
    rows = [list(aspects).index(a) for a in pooling]
    masks = [np.ones(len(flat), dtype=bool) if marks is None else marks[a] for a in pooling]
    return dict(zip(pooling, marked_word_vectors(word_vectors, flat, masks, np.asarray(directions)[rows],
                                                 frequencies)))


def marked_means(words: dict[str, np.ndarray], marks: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """{aspect: the mean of its rows of `words` that `marks` holds (None: all)}, for the aspects with such a row."""
    out = {}
    for a, w in words.items():
        keep = np.ones(len(w), dtype=bool) if marks is None else np.asarray(marks[a], dtype=bool)
        if keep.any():
            out[a] = w[keep].mean(axis=0)
    return out


def corpus_word_means(features, aspects: Sequence[str], directions: np.ndarray, shares: dict[str, float],
                      word_vectors, frequencies: dict[str, float] | None = None,
                      marks: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """{aspect: the mean over the corpus's sentences that state it (`marks`; None: all) of their phrases pooled
    towards the aspect} for the aspects whose share is > 0 and with such a sentence (`pooled_words`): what
    `word_pooled_sentences` centres on, kept in a head's `word_mean`."""
    return marked_means(pooled_words(features, aspects, directions, shares, word_vectors, frequencies, marks),
                        marks)


def sentence_marks(features, scorer, temperature: float = TEMPERATURE,
                   boilerplate: np.ndarray | None = None) -> list[dict[str, list[float]]]:
    """Per document, {aspect: [1.0 or 0.0 per sentence]}: the sentences that state the aspect, as the scorer
    reads them (its `stated`: the stating sentences of its pooling weights, `phrases.stating`, or the position
    mixture's most likely aspect per sentence); boilerplate never. The format of `health.corpus_sentence_aspects`,
    so the swap probe can read a corpus without highlights.

    Why not only the sentences holding half the weight: on ACLSum without its highlights, calibrated weights
    spread over the abstract, and 22 validation papers then gave no pair to swap for two aspects of three (3
    for the third); with the stating sentences, 13 to 18 pairs each."""
    rows = kept_sentence_rows(features, lambda s, pos: scorer.stated(s, pos, temperature), len(scorer.aspects),
                              boilerplate, bool)
    return [{a: [float(x) for x in marks[:, j]] for j, a in enumerate(scorer.aspects)} for marks in rows]
