"""Stage 03 with marks, at function level on planted vectors (no encoder): the taught head in the unified model's
checkpoint, reloaded as it was saved, and the verdict the marks give.

The corpus is `test_teach.corpus`'s: 8-dimensional unit sentence vectors, the aspect file reading aspect a along
e0 and b along e1.
"""

from dataclasses import replace

import numpy as np
import torch

from workbench.embed.floor import floor_bias
from workbench.embed.heads import PooledAspectModel
from workbench.teach.loop import TeachLoop
from workbench.teach.saved import place_taught

from test_teach import ASPECTS, H, corpus, floor


def taught_loop(papers=10, blend=0.5):
    """A loop whose marks say that each paper's sentence 2 states a (one the floor does not read as a)."""
    features, ids = corpus(papers=papers)
    base = floor()  # a zero-shot head needs its softmax regime's bias (`floor.floor_bias`)
    biases = {a: floor_bias(features, q) for a, q in zip(ASPECTS, base.scorer.queries)}
    loop = TeachLoop(features, replace(base, blends={a: blend for a in ASPECTS}, biases=biases), ids)
    for i in range(papers):
        for k in range(4):
            loop.answer(ids[i], "a" if k == 2 else "b" if k == 0 else "none",
                        sentence=features.sentence_texts[i][k])
    loop.refit()
    return loop, features


def test_the_taught_head_in_a_checkpoint_embeds_as_the_loop_does_and_reloads_from_safetensors(tmp_path):
    loop, features = taught_loop()
    model = PooledAspectModel("stand-in", ASPECTS, hidden=H, pooling="mean")
    for a in ASPECTS:
        place_taught(model.heads[a], loop.floor, loop.taught(), a)
    with torch.no_grad():
        out = {a: torch.nn.functional.normalize(v[0], dim=-1).numpy() for a, v in
               model.forward_features(features).items()}
    expected = loop.embeddings()
    for a in ASPECTS:
        np.testing.assert_allclose(out[a], expected[a], atol=2e-3)
    model.save_pretrained(tmp_path / "unified_model")
    assert not list(tmp_path.rglob("*.pkl")) and not list(tmp_path.rglob("*.bin"))
    again = PooledAspectModel.from_pretrained(tmp_path / "unified_model", device="cpu")
    assert type(again.heads["a"].scorer).__name__ == "TaughtHeadScorer"
    with torch.no_grad():
        back = {a: torch.nn.functional.normalize(v[0], dim=-1).numpy() for a, v in
                again.forward_features(features).items()}
    for a in ASPECTS:
        np.testing.assert_allclose(back[a], out[a], atol=1e-6)
