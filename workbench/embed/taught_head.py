"""The taught scorer in a head: a sentence scorer fitted to a person's marks, over the aspect-file floor.

`teach.learner.TaughtScorer` reads, per sentence, its unit vector, where it sits and what the floor believes of
it (its belief in every aspect and its pooling weight in the abstract, both as logs). `TaughtHeadScorer` computes
the same logit in torch, so that a head of the unified model (`heads.SentencePoolingHead`) pools by it and the
checkpoint holds it as safetensors plus its config, never a pickle. It holds the floor's own head scorers, one
per aspect (a `LinearScorer` or a `mixture.MixtureScorer`, as `floor.AspectFileFloor.place` builds them), since
the regression reads the floor's belief in every aspect, and the aspect's regression weights.

The floor's pooling weight is normalised over the abstract's pooled sentences, so this scorer reads the mask
(`needs_mask`): the head passes it the sentences it pools (boilerplate left out). Where the marks are trusted less
than fully (`trust` < 1, `teach.learner.trust`), the head pools by that share of the regression's normalised
weights and the rest the floor's: the scorer returns the log of that mix less `SHIFT`, whose sigmoid the head
normalises back to the mix.
"""

from __future__ import annotations

import torch
from torch import nn

LOG_FLOOR = -12.0  # log of a belief or weight of 0, kept finite (as `teach.learner` keeps it)
# sigmoid(log w - SHIFT) = w x e^-SHIFT to a part in 1e8, so the head's normalised sigmoid is w; their sum,
# e^-SHIFT (2e-9), stays above the clamp of `heads.SentencePooling.weights` (1e-12), so the weights sum to 1
SHIFT = 20.0
BELIEFS = ("sigmoid", "softmax")  # a floor scorer's belief: its own sigmoid, or the softmax over the aspects


class TaughtHeadScorer(nn.Module):
    """Aspect `index`'s taught logit over `floors` (the floor's head scorers, one per aspect).

    `belief` "sigmoid": the floor believes what its head's sigmoid says (a calibrated scorer, the position
    mixture); "softmax": the zero-shot scores, softmax over the aspects of each floor scorer's query."""

    kind = "taught"
    needs_mask = True

    def __init__(self, hidden: int, floors: list[nn.Module], index: int, belief: str = "sigmoid",
                 n_position: int = 3, trust: float = 1.0):
        super().__init__()
        if belief not in BELIEFS:
            raise ValueError(f"belief is one of {BELIEFS}, not {belief!r}")
        self.index, self.belief, self.n_position, self.trust = int(index), belief, int(n_position), float(trust)
        self.floors = nn.ModuleList(floors)
        A = len(floors)
        self.register_buffer("coef", torch.zeros(int(hidden) + 1 + self.n_position + 2 * A))
        self.register_buffer("intercept", torch.zeros(()))

    def config(self) -> dict:
        """What a checkpoint's config holds to rebuild this scorer (`heads.scorer_from_config`)."""
        return {"kind": self.kind, "index": self.index, "belief": self.belief, "n_position": self.n_position,
                "trust": self.trust, "floors": [f.config() for f in self.floors]}

    def inputs(self, sentences: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """[..., D] `teach.learner.sentence_inputs` of padded sentences [B, M, H] (positions [B, M, 3])."""
        unit = nn.functional.normalize(sentences, dim=-1)
        scores = torch.stack([f(unit, positions) for f in self.floors], dim=-1)  # [B, M, A]
        if self.belief == "softmax":
            belief = torch.softmax(torch.stack([unit @ f.query for f in self.floors], dim=-1), dim=-1)
        else:
            belief = torch.sigmoid(scores)
        weight = torch.sigmoid(scores)
        if mask is not None:
            weight = weight * mask.unsqueeze(-1).to(weight.dtype)
        weight = weight / weight.sum(dim=-2, keepdim=True).clamp(min=1e-30)
        low = float(torch.exp(torch.tensor(LOG_FLOOR)))
        rel = positions[..., :1]
        place = torch.cat([rel, rel ** 2, positions[..., 1:3]], dim=-1)
        return torch.cat([unit, place, torch.log(belief.clamp(low, 1.0)), torch.log(weight.clamp(low, 1.0))], dim=-1)

    def forward(self, sentences: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None = None):
        x = self.inputs(sentences, positions, mask)
        logit = x @ self.coef.to(x.dtype) + self.intercept.to(x.dtype)
        if self.trust >= 1:
            return logit
        p = torch.sigmoid(logit)
        if mask is not None:
            p = p * mask.to(p.dtype)
        floor = torch.exp(x[..., -len(self.floors) + self.index])  # the floor's normalised pooling weight
        mix = self.trust * p / p.sum(dim=-1, keepdim=True).clamp(min=1e-30) + (1 - self.trust) * floor
        return torch.log(mix.clamp(min=1e-30)) - SHIFT

    def penalty(self) -> float:
        return 0.0  # fitted to the marks, never trained by stage 03's loss
