"""The floor's position mixture (`embed/mixture.py`): its posteriors against Bayes' rule written out with scipy,
the densities EM reads from a corpus, when the floor takes it, and a head (and a checkpoint) that holds it."""

import numpy as np
import pytest
import torch
from scipy.special import softmax

from workbench.embed import aspectfile
from workbench.embed.features import DocumentFeatures, position_features
from workbench.embed.floor import STEPS, fit_floor
from workbench.embed.heads import PooledAspectModel, SentencePoolingHead
from workbench.embed.mixture import PositionMixture, fit_mixture, position_bins

from test_floor import ordered_corpus

unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731


def topical_corpus(n: int = 80, seed: int = 5, signal: float = 0.8):
    """Abstracts of 4 to 8 sentences, each carrying its paper's topic (the aspects' pooled sentences then share one
    structure, as a real abstract's do) and stating one aspect: a in the first third, c in the last, b between,
    one sentence in ten at another place. The prototypes see the aspects through noise. Also returns each
    sentence's aspect."""
    rng = np.random.default_rng(seed)
    roles = unit(rng.normal(size=(3, 32)))
    sentences, texts, truth = [], [], []
    for _ in range(n):
        k = int(rng.integers(4, 9))
        rel = np.arange(k) / (k - 1)
        role = np.where(rel < 0.34, 0, np.where(rel > 0.66, 2, 1))
        swap = rng.random(k) < 0.1
        role[swap] = rng.integers(0, 3, int(swap.sum()))
        rows = 1.5 * unit(rng.normal(size=32)) + rng.normal(size=(k, 32)) / np.sqrt(32) + signal * roles[role]
        sentences.append(unit(rows).astype(np.float32))
        texts.append([f"s{i}" for i in range(k)])
        truth.append(role)
    whole = unit(np.stack([s.mean(0) for s in sentences])).astype(np.float32)
    seen = unit(roles + 0.5 * rng.normal(size=roles.shape) / np.sqrt(32)).astype(np.float32)
    feats = DocumentFeatures(whole, sentences, texts)
    feats.truth = truth
    return feats, aspectfile.AspectPrototypes(["a", "b", "c"], seen, seen)


def test_position_bins_cut_relative_position_into_equal_parts_in_numpy_and_torch():
    for n in range(1, 23):
        pos = position_features(n)
        expected = np.minimum((np.arange(n) / max(n - 1, 1) * 5 + 1e-9).astype(int), 4)
        np.testing.assert_array_equal(position_bins(pos, 5), expected)
        np.testing.assert_array_equal(position_bins(torch.as_tensor(pos), 5).numpy(), expected)


def test_the_posterior_is_bayes_rule_and_the_weights_its_share_of_each_aspect():
    feats, protos = topical_corpus()
    scorer = aspectfile.calibrate(feats, protos)
    rng = np.random.default_rng(0)
    density = rng.uniform(0.2, 3.0, size=(3, 5))
    mixture = PositionMixture(scorer, np.log(density))
    s, pos = feats.sentences[0], position_features(len(feats.sentences[0]))
    p = scorer.probabilities(s)  # the likelihood of "states a" (calibrated), times a's density at the position
    bins = np.minimum((np.arange(len(s)) / (len(s) - 1) * 5 + 1e-9).astype(int), 4)
    post = p * density[:, bins].T
    post /= post.sum(1, keepdims=True)
    np.testing.assert_allclose(mixture.posteriors(s, pos), post, rtol=1e-5)
    np.testing.assert_allclose(mixture.pool_weights(s, pos), post / post.sum(0), rtol=1e-5)
    with pytest.raises(ValueError, match="position features"):
        mixture.pool_weights(s)
    zero_shot = PositionMixture(protos, np.log(density), temperature=0.1)
    np.testing.assert_allclose(zero_shot.posteriors(s, pos),
                               softmax(protos.scores(s) / 0.1 + np.log(density[:, bins].T), axis=1), rtol=1e-5)


def test_em_reads_where_each_aspect_sits():
    feats, protos = topical_corpus()
    density = np.exp(fit_mixture(feats, aspectfile.calibrate(feats, protos)).log_density)
    assert density[0, 0] > 1.5 and density[0, 4] < 0.7  # a: first
    assert density[2, 4] > 1.5 and density[2, 0] < 0.7  # c: last
    assert density[1, 2] > density[1, 0] and density[1, 2] > density[1, 4]  # b: the middle


def test_the_mixture_puts_more_weight_on_each_aspects_own_sentences_where_scores_alone_confuse_them():
    feats, protos = topical_corpus(signal=0.35)
    without = fit_floor(feats, protos, steps=[s for s in STEPS if s != "mixture"])
    mixed = fit_floor(feats, protos)

    def own_mass(floor):  # the weight each aspect gives its own sentences, mean over papers and aspects
        weights = aspectfile.sentence_weights(feats, floor.scorer)
        return np.mean([[w[a][role == j].sum() for j, a in enumerate("abc")] for w, role in zip(weights, feats.truth)])
    assert mixed.mixed and not without.mixed
    assert own_mass(mixed) > own_mass(without) + 0.03


def test_the_floor_takes_the_mixture_only_where_no_aspect_is_read_through_phrases():
    feats, protos = topical_corpus()
    floor = fit_floor(feats, protos)
    assert floor.mixed and all(v == 0 for v in floor.word_shares.values())
    assert set(floor.summary()["position_mixture"]) == {"a", "b", "c"}
    independent, protos_i = ordered_corpus(n=80)  # aspects that vary independently: phrases, no mixture
    assert not fit_floor(independent, protos_i, steps=[s for s in STEPS if s != "phrases"]).mixed
    small, protos_s = topical_corpus(n=aspectfile.MIN_BLEND_DOCUMENTS - 1)
    assert not fit_floor(small, protos_s).mixed  # too few abstracts to read positions from


@pytest.mark.parametrize("calibrate", [True, False])
def test_a_head_and_its_checkpoint_hold_the_mixed_floor_exactly(calibrate, tmp_path):
    feats, protos = topical_corpus()
    steps = [s for s in STEPS if calibrate or s != "calibrate"]
    floor = fit_floor(feats, protos, steps=steps)
    assert floor.mixed and floor.calibrated == calibrate
    expected = floor.embeddings(feats)
    model = PooledAspectModel("no-backbone-needed", floor.aspects, hidden=32)
    for a in floor.aspects:
        floor.place(model.heads[a], a)
    model.save_pretrained(tmp_path / "m")
    loaded = PooledAspectModel.from_pretrained(tmp_path / "m", device="cpu", aspects=["c", "a"])
    with torch.no_grad():
        for m in (model, loaded):
            out = m.forward_features(feats, ["a", "c"])
            for a in ("a", "c"):
                np.testing.assert_allclose(unit(out[a][0].numpy()), expected[a], atol=1e-5)
    assert loaded.config()["scorers"]["c"]["index"] == 2


def test_a_checkpoint_naming_an_unknown_scorer_says_so(tmp_path):
    from workbench.embed.encoders import CheckpointError
    import json

    model = PooledAspectModel("no-backbone-needed", ["a", "b"], hidden=8)
    folder = model.save_pretrained(tmp_path / "m")
    config = json.loads((folder / "workbench_config.json").read_text())
    config["scorers"] = {"a": {"kind": "attention"}}
    (folder / "workbench_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="unknown sentence scorer 'attention'"):
        PooledAspectModel.from_pretrained(folder, device="cpu")
    assert "scorers" not in model.config()  # trained heads' checkpoints read as they always have
    assert isinstance(SentencePoolingHead(8).scorer.config(), dict)


def bin_likelihood(mixture: PositionMixture, feats) -> float:
    """The mean log-likelihood of the sentences' position bins under a mixture, written out from its definition:
    log sum_a softmax(beta e)_a d_a(bin)."""
    from scipy.special import log_softmax, logsumexp

    total, n = 0.0, 0
    for s in feats.sentences:
        bins = np.minimum((np.arange(len(s)) / max(len(s) - 1, 1) * 5 + 1e-9).astype(int), 4)
        total += logsumexp(log_softmax(mixture.emissions(s), axis=1) + mixture.log_density[:, bins].T, axis=1).sum()
        n += len(s)
    return total / n


def test_the_sharpness_is_where_the_positions_are_likeliest_and_undoes_a_rescaled_scorer():
    feats, protos = topical_corpus(signal=0.5)
    fitted = fit_mixture(feats, protos, temperature=0.05)
    assert 0.1 < fitted.sharpness < 3.0 and abs(fitted.sharpness - 1.0) > 0.05
    best = bin_likelihood(fitted, feats)
    for beta in (0.5 * fitted.sharpness, 0.8 * fitted.sharpness, 1.25 * fitted.sharpness, 2 * fitted.sharpness):
        other = fit_mixture(feats, protos, temperature=0.05, sharpness=beta)
        assert bin_likelihood(other, feats) < best
    # Scores twice as sharp (half the temperature): half the sharpness, and the same posteriors.
    sharper = fit_mixture(feats, protos, temperature=0.025)
    assert sharper.sharpness == pytest.approx(fitted.sharpness / 2, rel=0.03)
    s, pos = feats.sentences[3], position_features(len(feats.sentences[3]))
    np.testing.assert_allclose(sharper.posteriors(s, pos), fitted.posteriors(s, pos), atol=0.02)
    assert fit_mixture(feats, protos, temperature=0.05, sharpness=1.0).sharpness == 1.0


def test_a_checkpoint_written_before_the_sharpness_was_read_loads_with_the_scorers_own(tmp_path):
    import json

    feats, protos = topical_corpus()
    floor = fit_floor(feats, protos)
    assert floor.mixed and floor.summary()["mixture_sharpness"] == round(floor.scorer.sharpness, 3)
    model = PooledAspectModel("no-backbone-needed", floor.aspects, hidden=32)
    for a in floor.aspects:
        floor.place(model.heads[a], a)
    folder = model.save_pretrained(tmp_path / "m")
    config = json.loads((folder / "workbench_config.json").read_text())
    assert config["scorers"]["a"]["sharpness"] == pytest.approx(floor.scorer.sharpness)
    for scorer in config["scorers"].values():
        del scorer["sharpness"]
    (folder / "workbench_config.json").write_text(json.dumps(config))
    assert PooledAspectModel.from_pretrained(folder, device="cpu").heads["a"].scorer.sharpness == 1.0


def test_the_mixtures_marks_are_each_sentences_most_likely_aspect_and_boilerplate_is_never_marked():
    feats, protos = topical_corpus()
    floor = fit_floor(feats, protos)
    assert floor.mixed
    boiler = feats.sentences[0][:1]  # one sentence taken as the corpus's boilerplate
    marks = aspectfile.sentence_marks(feats, floor.scorer, boilerplate=boiler)
    for i in (0, 7):
        s = feats.sentences[i]
        p = floor.scorer.base.probabilities(s) ** floor.scorer.sharpness  # Bayes' rule written out
        bins = np.minimum((np.arange(len(s)) / (len(s) - 1) * 5 + 1e-9).astype(int), 4)
        top = (p * np.exp(floor.scorer.log_density[:, bins].T)).argmax(axis=1)
        got = np.array([marks[i][a] for a in floor.aspects]).T
        kept = np.ones(len(s), bool) if i else np.arange(len(s)) > 0
        assert (got[~kept] == 0).all() and (got[kept].sum(axis=1) == 1).all()
        np.testing.assert_array_equal(got[kept].argmax(axis=1), top[kept])
    with pytest.raises(ValueError, match="position features"):
        floor.scorer.stated(feats.sentences[0])
