"""The aspect-file floor's builder (`embed/floor.py`) and its position prior (`aspectfile.position_prior`).

The prior's fit is checked against scipy's optimiser on the same objective written out here; a head that holds
the floor is checked against the numpy vectors of the same floor.
"""

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import logsumexp

from workbench.embed import aspectfile
from workbench.embed.features import DocumentFeatures, position_features
from workbench.embed.floor import STEPS, fit_floor

unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731


def ordered_corpus(n: int = 60, seed: int = 3, ordered: bool = True):
    """Abstracts of 4 to 8 sentences: aspect a's sentence near its prototype, then fillers, then b's, then c's at
    the end (ordered), or the three at random places. The prototypes see the sentences through noise."""
    rng = np.random.default_rng(seed)
    topics = unit(rng.normal(size=(3, 24)))
    sentences, texts = [], []
    for _ in range(n):
        k = int(rng.integers(4, 9))
        rows = unit(rng.normal(size=(k, 24)))
        where = [0, k // 2, k - 1] if ordered else list(rng.choice(k, 3, replace=False))
        for j, i in enumerate(where):
            rows[i] = unit(topics[j] + 0.9 * rng.normal(size=24) / np.sqrt(24) * 3)
        sentences.append(rows.astype(np.float32))
        texts.append([f"s{i}" for i in range(k)])
    feats = DocumentFeatures(unit(rng.normal(size=(n, 24))).astype(np.float32), sentences, texts)
    protos = aspectfile.AspectPrototypes(["a", "b", "c"], topics.astype(np.float32), topics.astype(np.float32))
    return feats, protos


def reference_prior(feats, scorer, l2: float) -> np.ndarray:
    """The prior's objective written out and maximised by scipy (BFGS), aspect by aspect."""
    weights = aspectfile.sentence_weights(feats, scorer)
    docs = [(position_features(len(s)), w) for s, w in zip(feats.sentences, weights) if len(s) >= 2]
    out = []
    for a in scorer.aspects:
        def loss(theta):
            return -sum(float(w[a] @ (x @ theta - logsumexp(x @ theta))) for x, w in docs) + l2 / 2 * theta @ theta
        out.append(minimize(loss, np.zeros(3), method="BFGS", options={"gtol": 1e-8}).x)
    return np.stack(out)


@pytest.mark.slow
def test_position_prior_is_the_maximum_of_its_objective():
    feats, protos = ordered_corpus()
    theta = aspectfile.position_prior(feats, protos)
    np.testing.assert_allclose(theta, reference_prior(feats, protos, aspectfile.PRIOR_L2), atol=2e-3)
    # Read from the corpus: a early, c last.
    assert theta[0, 0] < 0 < theta[2, 0] and theta[2, 2] > 0 and theta[0, 1] > 0


def test_position_prior_is_small_where_position_says_nothing_and_absent_on_a_small_corpus():
    feats, protos = ordered_corpus(ordered=False, n=200)
    ordered = aspectfile.position_prior(*ordered_corpus(n=200))
    assert np.abs(aspectfile.position_prior(feats, protos)).max() < 0.25 * np.abs(ordered).max()
    small, protos = ordered_corpus(n=aspectfile.MIN_BLEND_DOCUMENTS - 1)
    assert aspectfile.position_prior(small, protos) is None
    assert aspectfile.with_position_prior(small, protos) is protos


def test_the_prior_moves_the_weights_towards_the_aspects_place():
    feats, protos = ordered_corpus()
    with_prior = aspectfile.with_position_prior(feats, protos)
    mass_last = lambda scorer: np.mean([w["c"][-1] for w in aspectfile.sentence_weights(feats, scorer)])  # noqa: E731
    assert mass_last(with_prior) > mass_last(protos)
    for w in aspectfile.sentence_weights(feats, with_prior):
        assert all(abs(float(v.sum()) - 1) < 1e-5 for v in w.values())


@pytest.mark.parametrize("steps, prior", [([s for s in STEPS if s != "phrases"], False),
                                          ([s for s in STEPS if s != "phrases"], True), (("blend",), True), ((), False)])
def test_a_head_holds_the_fitted_floor_exactly(steps, prior):
    """The head `fit_floor` gives computes the floor's numpy vectors, calibrated or not, with a position prior where
    its scorer has one (phrases, which need an encoder, are checked with the guard in test_aspect_supervision.py;
    the position mixture in test_mixture.py)."""
    import torch
    from workbench.embed.heads import SentencePoolingHead

    feats, protos = ordered_corpus()
    floor = fit_floor(feats, protos, steps=steps)
    assert floor.calibrated == ("calibrate" in steps) and not floor.mixed  # aspects that vary independently
    if prior:
        floor.scorer = aspectfile.with_position_prior(feats, floor.scorer)
        assert floor.scorer.position is not None
    expected = floor.embeddings(feats)
    for a in floor.aspects:
        head = SentencePoolingHead(24)
        floor.place(head, a)
        with torch.no_grad():
            out, _, _ = head(*feats.padded())
        # the zero-shot head's sigmoid is exp to 3 parts in 10,000 (`floor_bias`)
        np.testing.assert_allclose(unit(out.numpy()), expected[a], atol=1e-5 if floor.calibrated else 1e-3)
    summary = floor.summary()
    assert set(summary["blends"]) == set(floor.aspects) and summary["position_mixture"] is None


def test_fit_floor_names_an_unknown_step():
    feats, protos = ordered_corpus()
    with pytest.raises(ValueError, match="unknown floor step"):
        fit_floor(feats, protos, steps=("blend", "prior"))
