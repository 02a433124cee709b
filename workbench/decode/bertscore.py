"""BERTScore on a local encoder, with each text read once per session (stage 06's Table 3).

BERTScore (Zhang et al., 2020) matches every token of a candidate with its most similar token
of the reference (cosine of the encoder's token vectors at one layer): precision averages over
the candidate's tokens, recall over the reference's, F1 is their harmonic mean, and against
several references a candidate keeps its best F1. The special tokens (<s>, </s>, [CLS], [SEP])
can be matched but are not averaged over. That is what `bert_score.BERTScorer(model_type=folder,
num_layers=layer)` computes without idf weighting or baseline rescaling; tests/test_bertscore.py
checks it against that package.

Why not call the package: stage 06 reads its 300 human summaries with the same encoder for its
ground truths (`report.summary_truths`), and those summaries are Table 3's references. `read`
returns a text's pooled vector and its token vectors from one pass, and the token vectors stay
here for the session, so BERTScore reads only the decoded texts (each once, whatever the
aspect or control). Texts are read up to 256 tokens, the frozen mode's length (bert-score reads
up to the model's maximum; summaries are far shorter).
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import numpy as np
from ..core.models import resolve_model
from ..embed.features import FrozenBackbone, text_key

# (model path, layer, max_length) -> {text key: (unit token vectors [n, H], weights [n]: 0 for special tokens)}
TOKENS: dict[tuple, dict] = {}
# Texts kept per store: about 100 kB each (30 tokens x 768 floats), so at most about 400 MB. A
# kernel kept from run to run would otherwise hold every text any run read; the oldest go first.
MAX_KEPT = 4096


def token_store(model: str, layer: int, max_length: int) -> dict:
    """The token vectors kept this session for texts read with `model` at `layer`: {text key: (vectors, weights)}."""
    return TOKENS.setdefault((resolve_model(model).path, int(layer), int(max_length)), {})


@contextlib.contextmanager
def _first_layers(backbone, n: int):
    """Run only the first n transformer layers inside the block (bert-score does the same to its copy)."""
    encoder = getattr(backbone, "encoder", None)
    layers = getattr(encoder, "layer", None)
    import torch

    if not isinstance(layers, torch.nn.ModuleList) or n >= len(layers):
        yield
        return
    encoder.layer = layers[:n]
    try:
        yield
    finally:
        encoder.layer = layers


def read(model: str, texts: Sequence[str], layer: int, pooled: bool = False, max_length: int = 256,
         batch_size: int = 32, device: str | None = None):
    """Read texts with `model` (a packaged name, folder or hub id) and keep their token vectors at `layer`.

    pooled=False: reads only texts not read before, up to `layer`; returns None.
    pooled=True: reads every text through all layers and returns their mean-pooled last
    layer as unit rows [len(texts), H], what `features.FrozenBackbone(model)` gives.
    """
    import torch
    import torch.nn.functional as F

    encoder = FrozenBackbone(model, max_length=max_length, device=device).encoder()  # loaded once per session
    store = token_store(model, layer, max_length)
    tok = encoder.tokenizer
    special = torch.tensor(sorted({i for i in (tok.cls_token_id, tok.sep_token_id, tok.bos_token_id,
                                               tok.eos_token_id) if i is not None}))
    texts = list(texts)
    todo = list(range(len(texts))) if pooled else list({text_key(t): i for i, t in enumerate(texts)
                                                        if text_key(t) not in store}.values())
    out = np.zeros((len(texts), encoder.backbone.config.hidden_size), dtype=np.float32) if pooled else None
    _make_room(store, len(todo), {text_key(t) for t in texts})
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.inference_mode(), (contextlib.nullcontext() if pooled else _first_layers(encoder.backbone, layer)):
            for rows, batch in encoder.batches([texts[i] for i in todo], batch_size, max_length):
                idx = [todo[r] for r in rows]
                result = encoder.backbone(**batch, output_hidden_states=True)
                hidden, mask = result.hidden_states[layer], batch["attention_mask"]
                for r, i in enumerate(idx):
                    n = int(mask[r].sum())
                    weights = (~torch.isin(batch["input_ids"][r, :n].cpu(), special)).float().numpy()
                    store[text_key(texts[i])] = (F.normalize(hidden[r, :n].float(), dim=-1).cpu().numpy(), weights)
                if pooled:
                    m = mask.unsqueeze(-1).to(result.last_hidden_state.dtype)
                    mean = (result.last_hidden_state * m).sum(1) / m.sum(1).clamp(min=1.0)
                    out[idx] = F.normalize(mean.float(), dim=-1).cpu().numpy()
    finally:
        encoder.train(was_training)
    return out


def _make_room(store: dict, incoming: int, needed: set) -> None:
    """Drop the oldest texts of `store` (never those in `needed`) so that `incoming` more fit in MAX_KEPT."""
    excess = len(store) + incoming - MAX_KEPT
    if excess > 0:
        for key in [k for k in store if k not in needed][:excess]:
            del store[key]


def f1(candidates: Sequence[str], references: Sequence[str | Sequence[str]], model: str, layer: int,
       max_length: int = 256, batch_size: int = 32, device: str | None = None) -> np.ndarray:
    """BERTScore F1 of each candidate against its reference(s), the best of several; 0 for an empty candidate."""
    refs = [[r] if isinstance(r, str) else list(r) for r in references]
    if len(candidates) != len(refs):
        raise ValueError(f"{len(candidates)} candidates but {len(refs)} references")
    if any(not r for r in refs):
        raise ValueError("every candidate needs at least one reference text")
    read(model, list(candidates) + [r for rs in refs for r in rs], layer, max_length=max_length,
         batch_size=batch_size, device=device)
    store = token_store(model, layer, max_length)
    scores = np.zeros(len(refs))
    for i, (candidate, rs) in enumerate(zip(candidates, refs)):
        cv, cw = store[text_key(candidate)]
        if not cw.sum():
            continue  # nothing but special tokens: bert-score gives 0 (with a warning)
        for reference in rs:
            rv, rw = store[text_key(reference)]
            if not rw.sum():
                continue
            sim = cv @ rv.T
            precision = float(sim.max(1) @ cw / cw.sum())
            recall = float(sim.max(0) @ rw / rw.sum())
            if precision + recall > 0:
                scores[i] = max(scores[i], 2 * precision * recall / (precision + recall))
    return scores
