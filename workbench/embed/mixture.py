"""The position mixture: each sentence states one aspect, and where in the abstract it sits says which.

A step of the aspect-file floor (`floor.fit_floor`). A sentence's posterior over the aspects is its scores
times each aspect's density over the abstract's relative positions; an aspect pools its sentences by their
posteriors:

    post[i, a] = softmax_a(e[i, a] + log d_a(bin_i))    e: the scorer's log-probability (calibrated) or score / t
    w[i, a]    = post[i, a] / sum_j post[j, a]           over the abstract's sentences, boilerplate left out

d_a is aspect a's density over POSITION_BINS bins of relative position, relative to the sentences' own density
(1: flat), re-estimated by EM over the corpus's sentences from a flat start. Its shares are not re-estimated:
a prior on how many sentences an aspect takes would let the aspect the prototypes favour take them all. No
label is read.

The emissions carry one more constant read from the corpus, their sharpness beta (e = beta x the scorer's): the
mixture is a model of where a sentence sits, p(bin | sentence) = sum_a softmax(beta e)_a d_a(bin) x the bin's
share, and beta and the densities are the values under which the corpus's sentences' positions are likeliest.
A scorer fitted to the aspect file's words alone is as sure of itself as its training made it; how well its
readings predict where each sentence sits, a quantity it never read, says how sure it may be. On CSAbstruct
it read 0.51 (+0.8 and +1.8 over beta = 1 on its two splits), on ACLSum 0.83 (+0.1 and +0.3), and it holds in
every fold of `benchmarks/families.py`'s leave-one-family-out where it acts.

Why: the linear position prior (`aspectfile.position_prior`) moves each aspect's scores on its own, so two
aspects can still claim one sentence and a sentence that neither states well can go to both. The posterior
makes the aspects share each sentence out, the way the roles of a real abstract do (background, then method,
then results). Against the human-marked sentences (`benchmarks/families.py`) it added 1.6 on CSAbstruct and on
ACLSum over the floor without it. Its model, one aspect per sentence, fails where one sentence states several
aspects and other sentences none (the synthetic corpora, whose aspects vary independently: -0.6 there), so the
floor takes it only where the aspects' pooled sentences share one structure, as a real abstract's sentences
share its topic: where no aspect is read through its phrases (`aspectfile.word_shares` 0 for every aspect).

`PositionMixture` is the scorer in numpy, with the interface of `aspectfile`'s scorers (`pool_weights`...), so
every floor function takes it; `MixtureScorer` is the same in a `heads.SentencePoolingHead`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from .aspectfile import MIN_BLEND_DOCUMENTS, TEMPERATURE, AspectPrototypes, CalibratedScorer
from .boilerplate import keep_mask
from .features import position_features

POSITION_BINS = 5       # bins of relative position (CSAbstruct and ACLSum chose 5 of 3, 5 and 10; 10 within 0.3)
EM_ROUNDS = 300         # at most, rounds of EM for the densities; it stops where the likelihood settles (EM_TOL)
EM_TOL = 1e-7           # a round that raises the mean log-likelihood of the sentences' bins by less: settled
EDGE = 1e-4             # a relative position a hair below a bin's edge is in the bin above, in numpy and torch alike
SHARPNESS = (0.1, 3.0)  # the range the emissions' sharpness is read from (1: the scorer's own)


def position_bins(positions, bins: int = POSITION_BINS):
    """Each sentence's bin of relative position, from its `features.position_features` (numpy or torch): the
    relative position (0 first, 1 last) cut into `bins` equal parts."""
    if isinstance(positions, torch.Tensor):
        return torch.clamp(torch.floor(positions[..., 0] * bins + EDGE), 0, bins - 1).long()
    rel = np.asarray(positions, np.float32)[..., 0]
    return np.clip(np.floor(rel * np.float32(bins) + np.float32(EDGE)), 0, bins - 1).astype(int)


@dataclass
class PositionMixture:
    """A scorer whose sentence weights are the mixture's posteriors (see module doc): `base` (without a position
    prior) scores the sentences, `log_density` [A, bins] says where each aspect sits."""
    base: AspectPrototypes | CalibratedScorer
    log_density: np.ndarray
    temperature: float = TEMPERATURE  # the scale of an uncalibrated base's scores
    sharpness: float = 1.0            # beta: the emissions' exponent read from the corpus (see module doc)

    kind = "mixture"  # what each scorer says of itself, as the heads' scorers do (`MixtureScorer.kind`)

    @property
    def aspects(self) -> list[str]:
        return list(self.base.aspects)

    @property
    def calibrated(self) -> bool:
        return self.base.calibrated

    @property
    def description(self) -> str:
        return f"{self.base.description}, each sentence given to the aspects by where it sits"

    def directions(self) -> np.ndarray:
        return self.base.directions()

    def emissions(self, sentences: np.ndarray) -> np.ndarray:
        """[n, A]: the base's log-probabilities (calibrated) or its scores over the temperature, times the
        sharpness."""
        if self.base.calibrated:
            return self.sharpness * np.log(np.maximum(self.base.probabilities(sentences), 1e-30))
        return self.sharpness * self.base.scores(sentences) / self.temperature

    def posteriors(self, sentences: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """[n, A]: each sentence's posterior over the aspects (rows sum to 1)."""
        z = self.emissions(sentences) + self.log_density[:, position_bins(positions, self.log_density.shape[1])].T
        p = np.exp(z - z.max(axis=1, keepdims=True))
        return p / p.sum(axis=1, keepdims=True)

    def pool_weights(self, sentences: np.ndarray, positions: np.ndarray | None = None,
                     temperature: float = TEMPERATURE) -> np.ndarray:
        """[n, A]: the posteriors normalised over the abstract's n sentences (`temperature` is not read: the
        mixture keeps the scale it was fitted at)."""
        if positions is None:
            raise ValueError("the position mixture needs the sentences' position features")
        p = self.posteriors(sentences, positions)
        return p / np.maximum(p.sum(axis=0, keepdims=True), 1e-30)

    def stated(self, sentences: np.ndarray, positions: np.ndarray | None = None,
               temperature: float = TEMPERATURE) -> np.ndarray:
        """[n, A] bool: each sentence marked for the aspect its posterior puts first, the mixture's own model (one
        aspect per sentence). Against the sentences people marked (`benchmarks/families.py`) it recalls more of
        each aspect's than the sentences holding 0.3 of the aspect's weight do, at a higher mean F1 on CSAbstruct
        and on ACLSum."""
        if positions is None:
            raise ValueError("the position mixture needs the sentences' position features")
        post = self.posteriors(sentences, positions)
        return post.argmax(axis=1)[:, None] == np.arange(post.shape[1])[None, :]

    def head_scorer(self, hidden: int, aspect: str) -> "MixtureScorer":
        """A `MixtureScorer` holding this mixture for one aspect (its state set)."""
        A, bins = self.log_density.shape
        scorer = MixtureScorer(hidden, A, bins, self.aspects.index(aspect), self.calibrated, self.sharpness)
        if self.calibrated:
            weights, biases = self.base.weights, self.base.biases
        else:
            weights, biases = self.base.queries / self.temperature, np.zeros(A)
        scorer.load_state_dict({"weights": torch.as_tensor(np.asarray(weights, np.float32)),
                                "biases": torch.as_tensor(np.asarray(biases, np.float32)),
                                "log_density": torch.as_tensor(np.asarray(self.log_density, np.float32))})
        return scorer


def fit_mixture(features, scorer: AspectPrototypes | CalibratedScorer, temperature: float = TEMPERATURE,
                boilerplate: np.ndarray | None = None, bins: int = POSITION_BINS, rounds: int = EM_ROUNDS,
                sharpness: float | None = None) -> PositionMixture | None:
    """The mixture of `scorer` (its position prior, if any, set aside) fitted to a corpus: its densities by EM and
    its sharpness (`sharpness` None) by the likelihood of where the sentences sit; None with fewer than two aspects
    or MIN_BLEND_DOCUMENTS abstracts of two sentences or more (no positions to read)."""
    scorer = replace(scorer, position=None)
    docs = [(np.asarray(s, np.float32)[k], position_features(len(s))[k])
            for s in features.sentences if len(s) and (k := keep_mask(s, boilerplate)).any()]
    if len(scorer.aspects) < 2 or sum(1 for s, _ in docs if len(s) >= 2) < MIN_BLEND_DOCUMENTS:
        return None
    emission = PositionMixture(scorer, np.zeros((len(scorer.aspects), bins)), temperature).emissions(
        np.concatenate([s for s, _ in docs]))
    b = position_bins(np.concatenate([p for _, p in docs]), bins)
    if sharpness is None:
        from scipy.optimize import minimize_scalar

        # The likelihood is smooth and, in every corpus measured, has one peak in beta; on a log scale the
        # bounded search treats a halving and a doubling alike.
        found = minimize_scalar(lambda x: -position_density(emission * np.exp(x), b, bins, rounds)[1],
                                bounds=np.log(SHARPNESS), method="bounded", options={"xatol": 0.01})
        sharpness = float(np.exp(found.x))
    log_density, _ = position_density(emission * sharpness, b, bins, rounds)
    return PositionMixture(scorer, log_density, temperature, float(sharpness))


def position_density(emission: np.ndarray, b: np.ndarray, bins: int = POSITION_BINS,
                     rounds: int = EM_ROUNDS) -> tuple[np.ndarray, float]:
    """(log d [A, bins], the mean log-likelihood of the sentences' bins, less that of their own shares): EM from
    flat densities until a round raises the likelihood by less than EM_TOL (or `rounds` of them), `emission`
    [n, A] each sentence's log-scores, `b` [n] its bin. With a sharpness below 1 the densities take 30 to 60
    rounds to settle on the real corpora (CSAbstruct, ACLSum); after 10 they were a third of the way from flat."""
    share = (np.bincount(b, minlength=bins) + 1.0) / (len(b) + bins)  # the sentences' own share of each bin
    log_density = np.zeros((emission.shape[1], bins))
    prior = np.exp(emission - emission.max(axis=1, keepdims=True))
    prior /= prior.sum(axis=1, keepdims=True)  # softmax_a(e): what the scores alone say each sentence states
    likelihood = -np.inf
    for _ in range(int(rounds)):
        post = prior * np.exp(log_density[:, b].T)
        total = post.sum(axis=1, keepdims=True)
        before, likelihood = likelihood, float(np.log(total).mean())  # of the densities this round starts from
        if likelihood - before < EM_TOL:
            break
        post /= total
        density = np.stack([(np.bincount(b, weights=post[:, j], minlength=bins) + 1.0) / (post[:, j].sum() + bins)
                            for j in range(post.shape[1])]) / share
        log_density = np.log(density)
    else:  # every round taken: the last densities are not yet scored
        likelihood = float(np.log((prior * np.exp(log_density[:, b].T)).sum(axis=1)).mean())
    return log_density, likelihood


class MixtureScorer(nn.Module):
    """The mixture in a head: the logit of aspect `index`'s posterior, so that the head's sigmoid is the posterior
    and its normalised weights are `PositionMixture.pool_weights`. Holds every aspect's scorer, since a posterior
    weighs them all; `calibrated`: log-sigmoid emissions, else linear ones (the queries over the temperature);
    `sharpness`: their exponent (a checkpoint written before it was read from the corpus holds 1)."""

    kind = "mixture"

    def __init__(self, hidden: int, n_aspects: int, bins: int, index: int, calibrated: bool, sharpness: float = 1.0):
        super().__init__()
        self.n_aspects, self.bins, self.index, self.calibrated = int(n_aspects), int(bins), int(index), bool(calibrated)
        self.sharpness = float(sharpness)
        self.register_buffer("weights", torch.zeros(self.n_aspects, int(hidden)))
        self.register_buffer("biases", torch.zeros(self.n_aspects))
        self.register_buffer("log_density", torch.zeros(self.n_aspects, self.bins))

    def config(self) -> dict:
        """What a checkpoint's config holds to rebuild this scorer (`heads.scorer_from_config`)."""
        return {"kind": self.kind, "n_aspects": self.n_aspects, "bins": self.bins, "index": self.index,
                "calibrated": self.calibrated, "sharpness": self.sharpness}

    def forward(self, sentences: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        z = sentences @ self.weights.to(sentences.dtype).T + self.biases.to(sentences.dtype)
        e = self.sharpness * (nn.functional.logsigmoid(z) if self.calibrated else z)
        e = e + self.log_density.to(e.dtype).T[position_bins(positions, self.bins)]
        others = torch.cat([e[..., :self.index], e[..., self.index + 1:]], dim=-1)
        return e[..., self.index] - torch.logsumexp(others, dim=-1)

    def penalty(self) -> float:
        return 0.0  # fitted, never trained

