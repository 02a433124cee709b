"""The learner: from the marks, a sentence scorer per aspect over the aspect-file floor, and the head that pools by it.

Per aspect, a logistic regression says whether a sentence states it. It reads the sentence's unit vector, where
the sentence sits (relative position, its square, first, last) and what the floor already believes of it (the
log of the floor's per-sentence belief and of its pooling weight in the abstract, for every aspect). That last
part is why a few marks do not start from nothing: the regression only has to learn how far to trust the floor
and where the marks say otherwise. An aspect whose marks lack a "yes" or a "no" (`MIN_EACH`) keeps the floor's
own weights. An aspect with few "yes" marks pools mostly as the floor does: its trust in its regression grows
with its "yes" marks (`trust`) and sets the regression's share of its pooling weights and blend. The fixed recipe
it grew from (`../shared/benchmarks/taught_marks.py`: vector and position only, pooled by the probability) is what
`benchmarks/teach.py` compares it with.

`TaughtScorer` has the interface of the floor's scorers (`aspects`, `calibrated`, `pool_weights`, `stated`...),
so the floor's own pooling (`floor.AspectFileFloor.embeddings`: boilerplate left out, the blend with the whole
abstract, phrases where the floor reads them) pools by it unchanged: `taught_floor(floor, scorer)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..core.devices import one_blas_thread
from ..core.vectors import unit_rows
from ..embed.aspectfile import TEMPERATURE, PooledMarks
from ..embed.boilerplate import NEAR
from ..embed.floor import AspectFileFloor

MIN_EACH = 1     # an aspect's marks need this many "yes" and "no" before it gets a regression of its own
C = 1.0          # the regressions' inverse ridge, on unit sentence vectors (the recipe's)
LOG_FLOOR = -12.0  # log of a belief or weight of 0 (a boilerplate sentence's), kept finite
# A taught aspect's sentences' share of its vector; the rest is the whole abstract's. The floor keeps more of the
# whole abstract (`aspectfile.corpus_blends`, 0.66 on CSAbstruct) as a hedge against its own misreadings; marks
# need less of it. Chosen on CSAbstruct's dev and ACLSum's validation papers at 30 answers per aspect, by the
# heads' mean gain over the floor with the three truths the bars name (CSAbstruct's MiniLM and mpnet, ACLSum's
# summaries): 1.0 +0.9, 0.85 +1.5, 0.7 +1.3 (`docs/results.md`, "Aspects taught by marks").
TAUGHT_BLEND = 0.85
NEWTON_STEPS = 50  # at most, for the regressions (they settle in 6 to 10 where the marks do not separate)
NEWTON_TOL = 1e-6  # a Newton step this small in every coefficient: settled
INTERCEPT_RIDGE = 1e-4  # the intercept's: next to none (scikit-learn has none), enough for a stable Newton step
# How far an aspect's head trusts its regression over the floor's pooling (`trust`): yes^4 / (yes^4 + TRUST_YES^4)
# of its "yes" marks; its pooling weights are that share of the regression's and the rest the floor's, and so is
# its blend with the whole abstract: 10 "yes" marks trust it 0.16, 20 0.76, 30 0.94. Chosen on CSAbstruct's dev
# and ACLSum's validation papers and generator seed 0, the most trusting half that keeps every head within 1 of
# the floor at 10 marks per aspect (10: ACLSum -1.8; 15: -0.8; 20: -0.4, at 30 marks CSAbstruct's mean 0.1 and
# 0.2 below full trust; the fourth power fades faster by 30 marks than the square, `docs/results.md`).
TRUST_YES = 15.0
TRUST_POWER = 4.0


def floor_beliefs(scorer, sentences: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """[n, A]: how much the floor's scorer believes each sentence states each aspect, per sentence (not
    normalised over the abstract): the position mixture's posterior, a calibrated scorer's probability, else the
    softmax over the aspects of the zero-shot scores at the floor's temperature."""
    if hasattr(scorer, "posteriors"):
        return scorer.posteriors(sentences, positions)
    if scorer.calibrated:
        return scorer.probabilities(sentences, positions)
    z = scorer.scores(sentences) / TEMPERATURE
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def sentence_inputs(floor_scorer, sentences: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """[n, D] what the regressions read of an abstract's n sentences (see the module doc)."""
    sentences = unit_rows(np.asarray(sentences, np.float32))
    rel = positions[:, :1]
    place = np.hstack([rel, rel ** 2, positions[:, 1:3]])
    belief = np.log(np.clip(floor_beliefs(floor_scorer, sentences, positions), np.exp(LOG_FLOOR), 1.0))
    weight = np.log(np.clip(floor_scorer.pool_weights(sentences, positions), np.exp(LOG_FLOOR), 1.0))
    return np.hstack([sentences, place, belief, weight]).astype(np.float32)


@dataclass
class TaughtScorer(PooledMarks):
    """The floor's scorer with each taught aspect's regression over it (`fit_taught`).

    `coef[a]`, `intercept[a]`: the aspect's regression on `sentence_inputs`; an aspect without one keeps the
    floor's pooling weights exactly."""
    floor_scorer: object
    coef: dict[str, np.ndarray] = field(default_factory=dict)
    intercept: dict[str, float] = field(default_factory=dict)
    trust: dict[str, float] = field(default_factory=dict)  # {taught aspect: its pooling's trust}, missing: 1

    calibrated = True  # its probabilities set their own scale, as a calibrated scorer's do (no temperature)
    kind = "taught"

    @property
    def aspects(self) -> list[str]:
        return list(self.floor_scorer.aspects)

    @property
    def description(self) -> str:
        taught = [a for a in self.aspects if a in self.coef]
        return f"{self.floor_scorer.description}, taught by marks ({', '.join(taught) or 'no aspect yet'})"

    def directions(self) -> np.ndarray:
        """[A, H]: a taught aspect's regression weights on the sentence vector, else the floor's direction."""
        base = np.array(self.floor_scorer.directions(), np.float32, copy=True)
        for j, a in enumerate(self.aspects):
            if a in self.coef:
                base[j] = self.coef[a][:base.shape[1]]
        return base

    def logits(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        """{taught aspect: [n] its regression's logits} of `sentence_inputs` rows."""
        return {a: inputs @ w + self.intercept[a] for a, w in self.coef.items()}

    def probabilities(self, sentences: np.ndarray, positions: np.ndarray | None = None) -> np.ndarray:
        """[n, A]: per sentence, the probability that it states each aspect (an untaught aspect: the floor's
        belief)."""
        return self.read(sentence_inputs(self.floor_scorer, sentences, positions))

    def read(self, inputs: np.ndarray) -> np.ndarray:
        """`probabilities` of rows already made by `sentence_inputs`."""
        A = len(self.aspects)
        out = np.exp(inputs[:, -2 * A:-A]).astype(np.float64)  # the floor's beliefs, where no aspect is taught
        for a, z in self.logits(inputs).items():
            out[:, self.aspects.index(a)] = 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))
        return out

    def pool_weights(self, sentences: np.ndarray, positions: np.ndarray | None = None,
                     temperature: float = TEMPERATURE) -> np.ndarray:
        """[n, A]: each taught aspect's probabilities normalised over the abstract's sentences, its trust's share
        of its weights (the rest the floor's); an untaught aspect's column is the floor's own weights."""
        if positions is None:
            raise ValueError("a taught scorer reads where each sentence sits: give its position features")
        weights = np.array(self.floor_scorer.pool_weights(sentences, positions), np.float64)
        if not self.coef:
            return weights
        p = self.read(sentence_inputs(self.floor_scorer, sentences, positions))
        for a in self.coef:
            j, t = self.aspects.index(a), float(self.trust.get(a, 1.0))
            taught = p[:, j] / max(p[:, j].sum(), 1e-30)
            weights[:, j] = taught if t >= 1 else t * taught + (1 - t) * weights[:, j]  # the floor's, the rest
        return weights


def fit_taught(floor_scorer, inputs: np.ndarray, answers: np.ndarray, weights: np.ndarray | None = None,
               c: float = C) -> TaughtScorer:
    """A `TaughtScorer` over `floor_scorer` fitted to marked sentences: `inputs` [m, D] their `sentence_inputs`,
    `answers` [m, A] bool (does the sentence state the aspect; skips already left out), `weights` [m] per mark
    (None: 1)."""
    scorer = TaughtScorer(floor_scorer)
    answers = np.asarray(answers, bool)
    with one_blas_thread():  # a few hundred inputs: BLAS threads on busy cores would wait on each other, 100x slower
        for j, a in enumerate(scorer.aspects):
            yes = int(answers[:, j].sum()) if len(answers) else 0
            if yes < MIN_EACH or len(answers) - yes < MIN_EACH:
                continue  # nothing to contrast: the floor's weights stand for this aspect
            scorer.coef[a], scorer.intercept[a] = logistic(inputs, answers[:, j], c, weights)
            scorer.trust[a] = trust(yes)
    return scorer


def trust(yes: int, half: float | None = None, power: float | None = None) -> float:
    """An aspect's trust in its regression from its "yes" marks: yes^p / (yes^p + half^p), half TRUST_YES and p
    TRUST_POWER unless given; half 0: full trust."""
    half = TRUST_YES if half is None else half
    power = TRUST_POWER if power is None else power
    if half <= 0:
        return 1.0
    return float(yes ** power / (yes ** power + half ** power))


def logistic(X: np.ndarray, y: np.ndarray, c: float = C, weights: np.ndarray | None = None,
             steps: int = NEWTON_STEPS) -> tuple[np.ndarray, float]:
    """(w, b) minimising c x sum_i weights_i log-loss(y_i, X_i w + b) + |w|^2 / 2 (the intercept not penalised):
    scikit-learn's `LogisticRegression(C=c)`, by Newton's method. A few hundred marks and a few hundred inputs
    make the Hessian small, so a refit takes milliseconds and needs no scikit-learn import (seconds)."""
    X = np.hstack([np.asarray(X, np.float64), np.ones((len(X), 1))])
    y = np.asarray(y, np.float64)
    s = np.ones(len(X)) if weights is None else np.asarray(weights, np.float64)
    ridge = np.ones(X.shape[1])
    ridge[-1] = INTERCEPT_RIDGE
    theta = np.zeros(X.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(X @ theta, -60, 60)))
        grad = c * X.T @ (s * (p - y)) + ridge * theta
        step = newton_step(X, c * s * p * (1 - p), ridge, grad)
        theta -= step
        if np.abs(step).max() < NEWTON_TOL:
            break
    return theta[:-1].astype(np.float32), float(theta[-1])


def newton_step(X: np.ndarray, w: np.ndarray, ridge: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """(diag(ridge) + X' diag(w) X)^-1 grad. With fewer marks than inputs (the usual case: tens of marks, hundreds
    of inputs) through the marks' m x m matrix (Woodbury's identity), a few times faster than the inputs' own."""
    m, d = X.shape
    if m >= d:
        return np.linalg.solve((X * w[:, None]).T @ X + np.diag(ridge), grad)
    scaled = X * np.sqrt(w)[:, None]                     # W^1/2 X
    B = scaled / ridge                                   # W^1/2 X R^-1
    return grad / ridge - B.T @ np.linalg.solve(np.eye(m) + B @ scaled.T, B @ grad)


def taught_floor(floor: AspectFileFloor, scorer: TaughtScorer, stated: np.ndarray | None = None) -> AspectFileFloor:
    """The floor with its scorer taught: its `embeddings` pool by the taught scorer through the floor's own
    steps (boilerplate, phrases), a taught aspect's sentences blended with the whole abstract at TAUGHT_BLEND as far
    as its marks are trusted (`TaughtScorer.trust`), the rest at the floor's blend.

    `stated` [k, H]: vectors of sentences a mark says state an aspect. A floor step the marks contradict is not
    applied: a boilerplate group (`boilerplate.find_boilerplate`) holding such a sentence is pooled again, in
    every paper that repeats it (a recurring "patients were aged 65 or over" may be the patient group)."""
    trusted = {a: scorer.trust.get(a, 1.0) for a in scorer.coef}
    blends = {a: trusted[a] * TAUGHT_BLEND + (1 - trusted[a]) * b if a in trusted else b
              for a, b in floor.blends.items()}
    boiler = floor.boilerplate
    if stated is not None and len(stated) and len(boiler):
        near = (unit_rows(np.asarray(boiler, np.float32)) @ unit_rows(np.asarray(stated, np.float32)).T).max(axis=1)
        boiler = boiler[near < NEAR]
    return replace(floor, scorer=scorer, blends=blends, boilerplate=boiler)
