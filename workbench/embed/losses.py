"""Training objectives: InfoNCE for the aspect models, masked MSE for the unified model.

Both follow the authors' reference code (see REFERENCE_FACTS.md):

* aspect models: cosine similarity / 0.07, cross-entropy against the in-batch diagonal;
* unified model: 10 x mean squared error per aspect, only where the abstract has a target.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def info_nce(a: Tensor, b: Tensor, temperature: float = 0.07, symmetric: bool = False) -> Tensor:
    """In-batch contrastive loss: a[i] should be closer to b[i] than to any other b[j].

    logits[i, j] = cos(a[i], b[j]) / temperature, and the loss is the cross-entropy of
    each row against its diagonal entry (mean over the batch). With `symmetric=True`
    the b -> a direction (columns) is added and the two are averaged.

    Equals sentence-transformers' MultipleNegativesRankingLoss with scale = 1 / temperature.
    """
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"info_nce wants two [B, D] tensors of the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    logits = F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T / temperature
    labels = torch.arange(a.shape[0], device=a.device)
    loss = F.cross_entropy(logits, labels)
    if symmetric:
        loss = (loss + F.cross_entropy(logits.T, labels)) / 2
    return loss


def masked_mse(
    pred: dict[str, Tensor],
    target: dict[str, Tensor],
    mask: dict[str, Tensor] | None = None,
    scale: float = 10.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Distillation loss of the unified model: scale x MSE per aspect, averaged over aspects.

    For each aspect in `target`, the MSE (mean over the selected rows and all dimensions)
    is taken over the rows where `mask[aspect]` is True; rows without a target are
    *selected away*, not multiplied by zero, so they get exactly zero gradient and a
    NaN placeholder in their target cannot leak into the loss. Aspects with no target
    in the batch are skipped; the loss is the mean over the remaining ones.
    `mask=None` means every row of every aspect has a target.

    Returns (loss, per_aspect), where per_aspect[aspect] is that aspect's *scaled*,
    detached loss (so loss == mean of per_aspect values). When no aspect has a target,
    the loss is a zero that is still connected to `pred`, so `loss.backward()` works.
    """
    terms: dict[str, Tensor] = {}
    for aspect, tgt in target.items():
        if aspect not in pred:
            raise KeyError(f"masked_mse: no prediction for aspect '{aspect}' (predicted: {sorted(pred)})")
        p = pred[aspect]
        if p.shape != tgt.shape:
            raise ValueError(f"masked_mse: aspect '{aspect}' prediction {tuple(p.shape)} vs target {tuple(tgt.shape)}")
        if mask is None:
            rows = torch.ones(p.shape[0], dtype=torch.bool, device=p.device)
        elif aspect not in mask:
            raise KeyError(f"masked_mse: no mask for aspect '{aspect}' (masks: {sorted(mask)})")
        else:
            rows = mask[aspect].to(device=p.device, dtype=torch.bool)
        if not bool(rows.any()):
            continue
        terms[aspect] = scale * F.mse_loss(p[rows], tgt[rows].to(p.dtype))
    if not terms:
        zero = sum(p.sum() for p in pred.values()) * 0.0
        return zero, {}
    loss = torch.stack(list(terms.values())).mean()
    return loss, {aspect: term.detach() for aspect, term in terms.items()}
