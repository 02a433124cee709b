"""A head's parts can be replaced: a sentence scorer written here plugs into stage 03's head and shapes it.

A head is a scorer, a pooling, a blend and a projection (`workbench/embed/heads.py`). The toy scorer reads
only where a sentence stands, so what the head returns can be computed by hand from the sentence vectors.
"""

import numpy as np
import pytest
import torch
from torch import nn

from workbench.embed.features import FeatureCache
from workbench.embed.heads import FLAT_NAMES, LinearScorer, PooledAspectModel, SentencePoolingHead

from stand_ins import BagOfWords

TEXTS = ["A cat sat on the mat. The dog barked loudly. Birds fly south in winter.",
         "Rain fell all day. Nobody came to the party."]


class LastSentence(nn.Module):
    """Scores the abstract's last sentence far above the others, from the position features alone."""

    def forward(self, sentences, positions):
        return 20.0 * positions[..., 2] - 10.0  # positions: relative position, is first, is last


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _model_with(scorer_for_approach=None):
    model = PooledAspectModel("bag-of-words", ["challenge", "approach"], hidden=48, pool=True)
    if scorer_for_approach is not None:
        model.heads["approach"] = SentencePoolingHead(48, scorer=scorer_for_approach)
    model.cache = FeatureCache(None, BagOfWords())
    return model.eval()


def test_a_toy_scorer_plugged_into_stage_03s_head_pools_what_it_scores():
    model = _model_with(LastSentence())
    out = model.encode(TEXTS)
    features = model.cache.documents(TEXTS)
    # by hand: the gate starts at 0, so half the whole abstract and half its last sentence (sigmoid(10) to 5e-5)
    expected = _unit(np.stack([0.5 * w + 0.5 * _unit(s[-1]) for w, s in zip(features.whole, features.sentences)]))
    np.testing.assert_allclose(out["approach"], expected, atol=1e-4)
    # the head beside it keeps its own linear scorer: untrained, the mean of the sentences
    plain = _unit(np.stack([0.5 * w + 0.5 * _unit(s.mean(axis=0)) for w, s in zip(features.whole, features.sentences)]))
    np.testing.assert_allclose(out["challenge"], plain, atol=1e-5)
    assert not np.allclose(out["approach"], out["challenge"], atol=1e-2)
    weights = model.attention(TEXTS[:1])[0]
    assert weights["approach"].round(3).tolist() == [0.0, 0.0, 1.0]
    assert np.allclose(weights["challenge"], 1 / 3)


def test_a_head_is_its_four_parts_and_reads_checkpoints_written_before_it_had_parts(tmp_path):
    head = SentencePoolingHead(48, rank=4)
    assert [name for name, _ in head.named_children()] == ["scorer", "pooling", "blend", "projection"]
    assert isinstance(head.scorer, LinearScorer)
    model = _model_with()
    with torch.no_grad():
        model.heads["approach"].scorer.query.copy_(torch.as_tensor(model.cache.vectors(["dog barked"])[0]) * 15)
        model.heads["approach"].blend.gate.fill_(-1.0)
    before = model.encode(TEXTS)
    model.save_pretrained(tmp_path / "m")
    # the same tensors under the names a head held them by before it had parts
    from safetensors.torch import load_file, save_file

    flat = {k.rsplit(".", 2)[0] + "." + old: v for k, v in load_file(str(tmp_path / "m" / "model.safetensors")).items()
            for old, new in FLAT_NAMES.items() if k.endswith("." + new)}
    assert len(flat) == len(model.state_dict()) and not any(".scorer." in k for k in flat)
    save_file(flat, str(tmp_path / "m" / "model.safetensors"), metadata={"format": "pt"})
    loaded = PooledAspectModel.from_pretrained(tmp_path / "m", device="cpu")
    loaded.cache = model.cache
    for a, v in loaded.encode(TEXTS).items():
        np.testing.assert_allclose(v, before[a], atol=1e-6)
    assert loaded.heads["approach"].share_whole() == pytest.approx(1 / (1 + np.e))
