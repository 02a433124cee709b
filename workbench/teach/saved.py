"""The taught head in the unified model: `TeachLoop`'s scorer put in a head, so a checkpoint keeps it.

A head of the unified model (`embed.heads.SentencePoolingHead`) computes the floor when the floor is placed in it
(`floor.AspectFileFloor.place`); `place_taught` puts the taught floor there instead (`learner.taught_floor`): the
aspect's regression over the floor's scorers (`embed.taught_head.TaughtHeadScorer`) as far as its marks are
trusted, the taught blend with the whole abstract, and the boilerplate the marks left (a sentence marked as
stating an aspect is pooled even where it recurs in many papers). `load_model` rebuilds it from the checkpoint's config, so stages 04-06 and the
pane embed with it.
"""

from __future__ import annotations

import numpy as np

from ..embed.floor import AspectFileFloor
from ..embed.heads import SentencePoolingHead
from ..embed.taught_head import TaughtHeadScorer
from .learner import TaughtScorer


def floor_scorers(floor: AspectFileFloor, hidden: int) -> list:
    """The floor's head scorer of every aspect, each as `floor.place` puts it in a head."""
    out = []
    for a in floor.aspects:
        head = SentencePoolingHead(hidden)
        floor.place(head, a)
        out.append(head.scorer)
    return out


def place_taught(head, floor: AspectFileFloor, taught: AspectFileFloor, aspect: str) -> None:
    """Make `head` (a pooling head) compute `taught` (`learner.taught_floor` of `floor`) for `aspect`, whose
    regression `taught.scorer` holds; an aspect without one gets the floor as it is."""
    import torch

    scorer: TaughtScorer = taught.scorer
    floor.place(head, aspect)  # the floor's blend, boilerplate and phrases, then what the marks change
    if aspect not in scorer.coef:
        return
    belief = "sigmoid" if floor.mixed or floor.calibrated else "softmax"  # as `learner.floor_beliefs` reads it
    head.scorer = TaughtHeadScorer(head.hidden, floor_scorers(floor, head.hidden), floor.aspects.index(aspect),
                                   belief, trust=float(scorer.trust.get(aspect, 1.0)))
    state = {k: v.detach().clone() for k, v in head.state_dict().items()}
    dtype = state["blend.gate"].dtype
    state["scorer.coef"] = torch.as_tensor(np.asarray(scorer.coef[aspect]), dtype=dtype)
    state["scorer.intercept"] = torch.tensor(float(scorer.intercept[aspect]), dtype=dtype)
    whole = float(np.clip(1.0 - taught.blends[aspect], 1e-13, 1 - 1e-13))
    state["blend.gate"] = torch.tensor(float(np.log(whole / (1.0 - whole))), dtype=dtype)
    state["pooling.boilerplate"] = torch.as_tensor(np.asarray(taught.boilerplate), dtype=dtype)
    head.load_state_dict(state)


def place_taught_heads(model, loop, aspects) -> list[str]:
    """Put what `loop` (a `TeachLoop`) taught into `model`'s heads, in memory, for those of `aspects` its marks
    taught (a "yes" and a "no" each); returns them. The pane does this after a refit, so that the sentences it
    shows are read, and the abstracts it places are embedded, by the heads that drew the map (stage 03, run
    again, saves the heads its check keeps)."""
    taught = loop.taught()
    placed = [a for a in aspects if a in loop.scorer.coef and a in model.heads]
    for a in placed:
        place_taught(model.heads[a], loop.floor, taught, a)
    if placed:
        model.phrase_frequencies = loop.floor.frequencies or model.phrase_frequencies
    return placed
