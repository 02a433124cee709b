"""Training the soft-prompt decoder of `soft_prompt.py`: the loop, its validation loss, the best checkpoint kept.

`train_decoder` fits one `decoder.EmbeddingDecoder` on (embedding, summaries) items, with the
validation loss at step 0 and every `eval_every` steps, early stopping, and the best weights
saved and handed back. Stage 04 (`decoding.train_decoders`) calls it once per aspect, or once
for a decoder shared by all aspects.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..core.accel import adamw, make_accelerator
from .soft_prompt import HISTORY_NAME, DecoderConfig, EmbeddingDecoder
from ..core.files import write_json
from ..core.models import load_causal_lm
from ..core.progress import close_bar, progress_bar
from ..embed.training import EarlyStopping


@dataclass
class DecoderTrainResult:
    """What `train_decoder` returns: where the best checkpoint is, its score, the history."""

    out_dir: str
    best_step: int
    best_val_loss: float
    stopped_early: bool
    seconds: float
    history: list[dict] = field(default_factory=list)
    decoder: EmbeddingDecoder | None = field(default=None, repr=False)


def validation_loss(decoder: EmbeddingDecoder, embeddings: np.ndarray, texts: list[list[str]], idx,
                    batch_size: int = 8, item_aspects: Sequence[str] | None = None,
                    per_item: int | None = None) -> float:
    """Token-weighted mean NLL of the summaries of every item in `idx`, given its embedding.

    per_item: only the first that many summaries of each item (always the same ones, so
    evaluations compare fairly; fewer texts keep CPU validation short); None takes all.
    """
    pairs = [(i, t) for i in idx for t in texts[i][:per_item]]
    if not pairs:
        return float("nan")
    aspect = None if item_aspects is None else [item_aspects[i] for i, _ in pairs]
    return math.log(decoder.perplexity(embeddings[[i for i, _ in pairs]], [t for _, t in pairs], batch_size,
                                       aspect=aspect))


@dataclass(frozen=True)
class DecoderItems:
    """The material `train_decoder` learns from: one item per document (or per document and aspect).

    embeddings [N, D]: one embedding per item (e.g. the mean aspect embedding of a document);
    texts[i]: the summaries of item i; train_idx and val_idx: the items trained on and those the
    validation loss is taken on (disjoint). item_aspects: the aspect of each item, which makes a
    shared decoder (one aspect token per aspect) trained on the items of all aspects together.
    """

    embeddings: np.ndarray
    texts: list[list[str]]
    train_idx: Sequence[int]
    val_idx: Sequence[int]
    item_aspects: Sequence[str] | None = None


def train_decoder(items: DecoderItems, out_dir, config: DecoderConfig | None = None, aspect: str | None = None,
                  lm=None, progress: bool = True, extra: dict | None = None) -> DecoderTrainResult:
    """Train one embedding decoder; keep the best checkpoint (by validation loss) in `out_dir`.

    items: the embeddings, their summaries and the train/validation split (`DecoderItems`).
    Each step draws `batch_size` training items and one of their summaries at random.
    Validation loss at step 0 and every `eval_every` steps; stop after `patience`
    evaluations without improvement. aspect: the aspect of a per-aspect decoder.
    lm: an already loaded (model, tokenizer) pair for config.lm (saves a reload).
    extra: JSON data saved in the checkpoint's config (e.g. what the training data was).
    Writes out_dir/{decoder.safetensors, decoder_config.json, history.json}; the result
    carries the decoder with the best weights restored.
    """
    from accelerate.utils import set_seed

    config = config or DecoderConfig()
    embeddings = np.asarray(items.embeddings, dtype=np.float32)
    texts, item_aspects = items.texts, items.item_aspects
    train_idx, val_idx = _checked_split(texts, items.train_idx, items.val_idx)
    out_dir = Path(out_dir)
    accelerator = make_accelerator(config.device)
    main = accelerator.is_main_process
    rank, world = accelerator.process_index, accelerator.num_processes

    set_seed(config.seed)  # same initial mapping on every process
    decoder = _new_decoder(embeddings, train_idx, item_aspects, config, aspect, lm, accelerator.device)
    shared = sorted(set(item_aspects)) if item_aspects is not None else None
    optimizer = adamw([p for p in decoder.parameters() if p.requires_grad], config.lr, config.weight_decay)
    wrapped, optimizer = accelerator.prepare(decoder, optimizer)
    rng = random.Random(config.seed)  # same draws everywhere; each process keeps its shard

    stopper = EarlyStopping(config.max_steps, config.eval_every, config.patience)
    t0 = time.perf_counter()
    if main:
        out_dir.mkdir(parents=True, exist_ok=True)
    bar = progress_bar(config.max_steps, f"decoder {aspect or ''}".strip(), progress and main)
    keeper = _BestCheckpoint(decoder, items, config, out_dir, extra, main)
    loss_sum, loss_n = 0.0, 0

    def validate(step: int) -> None:
        """Evaluate, keep the best weights, count the evaluation for the stopping rule."""
        nonlocal loss_sum, loss_n
        improved = keeper.evaluate(step, loss_sum / loss_n if loss_n else None, round(time.perf_counter() - t0, 2))
        loss_sum, loss_n = 0.0, 0
        stopper.record(improved)
        if main:
            write_json(out_dir / HISTORY_NAME, keeper.history)
            val, best = keeper.history[-1]["val_loss"], keeper.best
            bar.set_postfix(val=f"{val:.3f}", best=f"{best['val_loss']:.3f}@{best['step']}")
        accelerator.wait_for_everyone()

    decoder.train()
    validate(0)  # the untrained baseline, and a checkpoint even if nothing improves
    for step in stopper.steps():
        draw = [rng.choice(train_idx) for _ in range(config.batch_size * world)]
        picks = [(i, rng.choice(texts[i])) for i in draw][rank::world]
        loss = wrapped(embeddings[[i for i, _ in picks]], [t for _, t in picks],
                       aspect=None if shared is None else [item_aspects[i] for i, _ in picks])
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss_sum, loss_n = loss_sum + float(loss.detach()), loss_n + 1
        bar.update(1)
        if stopper.due(step):
            validate(step)
    close_bar(bar)
    decoder.load_state_dict(keeper.best_state, strict=False)  # hand back the best weights, as saved
    decoder.eval()
    return DecoderTrainResult(out_dir=str(out_dir), best_step=keeper.best["step"],
                              best_val_loss=keeper.best["val_loss"], stopped_early=stopper.stopped_early,
                              seconds=time.perf_counter() - t0, history=keeper.history, decoder=decoder)


def _checked_split(texts: list[list[str]], train_idx, val_idx) -> tuple[list[int], list[int]]:
    """The train and validation indices as ints, training items without a summary left out;
    refuses an overlap, and a side with no summary at all."""
    train_idx, val_idx = [int(i) for i in train_idx], [int(i) for i in val_idx]
    if set(train_idx) & set(val_idx):
        raise ValueError("train_idx and val_idx overlap")
    train_idx = [i for i in train_idx if texts[i]]  # an item without summaries has nothing to learn
    if not train_idx:
        raise ValueError("no training item has a summary")
    if not any(texts[i] for i in val_idx):
        # Without a validation loss no checkpoint could ever be judged better than another.
        raise ValueError("no validation item has a summary")
    return train_idx, val_idx


def _new_decoder(embeddings: np.ndarray, train_idx: list[int], item_aspects, config: DecoderConfig,
                 aspect: str | None, lm, device) -> EmbeddingDecoder:
    """A fresh decoder on `device`, its input statistics taken from the training items; a shared one
    (one aspect token per aspect) when `item_aspects` is given."""
    model, tokenizer = lm if lm is not None else load_causal_lm(config.lm, device=str(device))
    shared = sorted(set(item_aspects)) if item_aspects is not None else None
    if shared is not None and len(item_aspects) != len(embeddings):
        raise ValueError(f"{len(item_aspects)} item aspects for {len(embeddings)} embeddings")
    decoder = EmbeddingDecoder(model, tokenizer, embeddings.shape[1], config, aspect=None if shared else aspect,
                               lm_id=config.lm, aspects=shared)
    decoder.set_input_stats(embeddings[train_idx])
    decoder.to(device)
    return decoder


class _BestCheckpoint:
    """The validation history of one training run and its best weights, saved as they improve."""

    def __init__(self, decoder: EmbeddingDecoder, items: DecoderItems, config: DecoderConfig, out_dir: Path,
                 extra: dict | None, main: bool):
        self.decoder, self.items, self.config = decoder, items, config
        self.out_dir, self.extra, self.main = out_dir, extra, main
        self.embeddings = np.asarray(items.embeddings, dtype=np.float32)
        self.val_idx = [int(i) for i in items.val_idx]
        self.history: list[dict] = []
        self.best: dict | None = None
        self.best_state: dict[str, torch.Tensor] = {}

    def evaluate(self, step: int, train_loss: float | None, seconds: float) -> bool:
        """Record the validation loss at `step`; True (and the weights kept and saved) when it improved."""
        # Every process holds the same weights and evaluates the same items, so they agree.
        val = validation_loss(self.decoder, self.embeddings, self.items.texts, self.val_idx,
                              self.config.eval_batch_size, self.items.item_aspects, self.config.val_summaries)
        entry = {"step": step, "train_loss": train_loss, "val_loss": val,
                 "val_perplexity": math.exp(val) if math.isfinite(val) else None, "seconds": seconds}
        self.history.append(entry)
        improved = self.best is None or val < self.best["val_loss"] - 1e-9
        if improved:
            self.best = entry
            self.best_state = {k: v.detach().clone() for k, v in self.decoder.saved_state().items()}
            if self.main:
                self.decoder.save_pretrained(self.out_dir,
                                             extra={**(self.extra or {}), "step": step, "val_loss": val})
        return improved
