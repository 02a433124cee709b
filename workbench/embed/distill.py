"""Stage 03: distil the aspect models into one unified model (paper section 4, appendices A.4, A.7).

Stage 02 leaves one aspect model per aspect in ``<run_dir>/aspect_models/<aspect>/``;
each embeds *summaries* of that aspect. Here one shared encoder with one linear head
per aspect learns to predict, from the *abstract* alone, where each aspect model puts
that document:

1. `compute_targets` (`targets.py`): every view (summary) of a document is embedded by its
   aspect's model; the document's target in that aspect is the mean of those embeddings.
   Cached in ``<run_dir>/targets.safetensors`` + ``targets.json``.
2. `train_unified_model`: 10 x MSE between the heads' outputs and the targets, only
   over the aspects a document has a target for (`losses.masked_mse`); validated by
   the rank of the true target among all validation targets; best checkpoint kept.
3. `embed_corpus`: every aspect of every abstract from one forward pass, cached in
   ``<run_dir>/embeddings/`` keyed by model and corpus.

`train_unified_baseline` is the paper's A.7 control (one model trained contrastively
on all aspects at once), which disentangles the aspects less well.

Typical use (what notebooks/03_distill.ipynb does)::

    views = collect_views(aspects, run_dir, corpus)
    targets = compute_targets(run_dir, views, aspects)
    train_ids, val_ids = split_documents(sorted(documents_with_targets(targets)), corpus, "validation")
    result = train_unified_model(corpus, targets, (train_ids, val_ids), f"{run_dir}/unified_model", DistillConfig())
    vectors = embed_corpus(result.out_dir, corpus, run_dir)          # {aspect: [N, dim]}
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ..core.accel import ConfigDict, adamw, make_accelerator
from .features import FeatureCache, frozen_backbone
from ..core.files import strict, write_json
from .encoders import POOLINGS, AspectEncoder
from .head_training import resolve_mode, train_unified_heads, MODES
from .losses import info_nce, masked_mse
from ..measures.metrics import mean_rank, mrr, retrieval_ranks
from ..core.progress import close_bar, progress_bar
from .targets import views_of
from .training import Criterion, DistillResult, EarlyStopping, abstracts_of, documents_with_targets, stack_targets
from .untaught import mark_untrained, say_too_few, too_few_to_train, untrained_heads

BASELINE_DIR = "unified_baseline"


# --------------------------------------------------------------------------- config


@dataclass
class DistillConfig(ConfigDict):
    """Settings of the unified model's training (paper A.4 values unless said otherwise).

    max_length is 256 tokens, enough for abstracts (the authors use 512); max_steps and
    eval_every are sized for a CPU demo (the authors evaluate every 250 updates).
    `clip_value` clips each gradient entry to [-v, v] as the authors do (0.01);
    `grad_clip` is the more common norm clipping; both off when None.
    `dim` and `temperature` are used only by `train_unified_baseline` (the distilled
    model takes its size from the targets).
    """

    base_model: str = "minilm"
    pooling: str = "cls"
    max_length: int = 256
    lr: float = 1e-4
    weight_decay: float = 1e-4
    batch_size: int = 16
    max_steps: int = 60
    eval_every: int = 10
    patience: int = 10
    seed: int = 0
    head_std: float = 1e-2
    grad_clip: float | None = None
    clip_value: float | None = 0.01
    loss_scale: float = 10.0
    device: str | None = None
    mixed_precision: str = "no"
    eval_batch_size: int = 32
    dim: int = 150
    temperature: float = 0.07
    # "frozen": sentence-pooling heads on a frozen encoder, trained on cached vectors (CPU-first,
    # `head_training.train_unified_heads`); "finetune": the paper's recipe above; "auto": frozen on a CPU.
    mode: str = "auto"
    head_lr: float = 0.05
    head_steps: int = 400
    head_batch_size: int = 512      # documents per step (all of them when the corpus is smaller)
    head_rank: int = 0              # low-rank residual projection after pooling (0: none)
    head_temperature: float = 0.05  # of the similarity distillation and InfoNCE terms
    label_weight: float = 1.0       # sentence labels (human highlights, LLM labels): cross-entropy
    distant_weight: float = 0.5     # sentences close to the teacher's target: soft cross-entropy
    kd_weight: float = 1.0          # similarity distillation from the teacher's targets
    nce_weight: float = 0.0         # InfoNCE between head output and target
    l2: float = 1e-3                # pull towards the untrained head (the base encoder)
    head_refit: bool = True         # after choosing the step count on validation, retrain on train + validation

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        for name in ("max_length", "batch_size", "max_steps", "eval_every", "patience", "eval_batch_size", "dim"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("grad_clip", "clip_value"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive or None, got {value}")


# --------------------------------------------------------------------------- distillation pieces


class DistillCollate:
    """Turn a list of doc ids into a training batch: tokens, a target and a mask per aspect.

    Rows without a target hold zeros that `masked_mse` selects away (mask False), so
    they never reach the loss. Tokenised on the CPU here; Accelerate moves the batch.
    """

    def __init__(self, tokenizer, max_length: int, texts: Mapping[str, str],
                 targets: Mapping[str, Mapping[str, np.ndarray]], dim: int):
        self.tokenizer, self.max_length, self.texts, self.targets, self.dim = tokenizer, max_length, texts, targets, dim

    def __call__(self, doc_ids: Sequence[str]) -> dict:
        # Same call as AspectEncoder.tokenize (right padding is set on the tokenizer by the model).
        enc = self.tokenizer([self.texts[d] for d in doc_ids], padding=True, truncation=True,
                             max_length=self.max_length, return_tensors="pt")
        target, mask = {}, {}
        for aspect, table in self.targets.items():
            t = torch.zeros(len(doc_ids), self.dim)
            m = torch.zeros(len(doc_ids), dtype=torch.bool)
            for i, d in enumerate(doc_ids):
                if d in table:
                    t[i] = torch.as_tensor(np.asarray(table[d], dtype=np.float32))
                    m[i] = True
            target[aspect], mask[aspect] = t, m
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "target": target, "mask": mask}


def distill_loss(model, batch: Mapping, scale: float = 10.0):
    """(loss, {aspect: scaled loss}) of one batch: all heads from one backbone pass, masked MSE.

    An aspect with no target in the batch is left out of the loss entirely, so its head
    gets no gradient (None, not zero): AdamW then leaves it alone, weight decay included.
    """
    pred = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return masked_mse(pred, batch["target"], batch["mask"], scale=scale)


def _aggregate(per_aspect: dict[str, dict]) -> dict:
    """Averages over aspects of the per-aspect metrics (the paper's selection score is the mean rank)."""
    scored = {a: m for a, m in per_aspect.items() if m["n"] > 0}
    out = {"aspects": per_aspect}
    for name in ("mean_rank", "mrr", "loss"):
        values = [m[name] for m in scored.values() if name in m]
        out[name] = float(np.mean(values)) if values else float("nan")
    return out


def evaluate_distill(model: AspectEncoder, texts: Sequence[str], targets: Mapping[str, np.ndarray],
                     masks: Mapping[str, np.ndarray], batch_size: int = 32, loss_scale: float = 10.0) -> dict:
    """Validation of a unified model: per aspect, the rank of each document's true target.

    Queries are the model's predictions for the documents that have a target in that
    aspect; candidates are the targets of those same documents (cosine similarity).
    Returns {"mean_rank", "mrr", "loss", "aspects": {aspect: {"mean_rank", "mrr", "loss", "n"}}},
    the top-level values averaged over aspects.
    """
    pred = model.encode(list(texts), batch_size=batch_size, normalize=False)
    per_aspect = {}
    for aspect, table in targets.items():
        rows = np.asarray(masks[aspect], dtype=bool)
        if not rows.any():
            per_aspect[aspect] = {"mean_rank": float("nan"), "mrr": float("nan"), "loss": float("nan"), "n": 0}
            continue
        p, t = pred[aspect][rows], table[rows]
        ranks = retrieval_ranks(p, t)
        per_aspect[aspect] = {"mean_rank": mean_rank(ranks), "mrr": mrr(ranks),
                              "loss": float(loss_scale * np.mean((p - t) ** 2)), "n": int(rows.sum())}
    return _aggregate(per_aspect)


# --------------------------------------------------------------------------- results and the loop


# Lower average mean rank wins (the paper's criterion); a tie goes to the higher MRR.
BETTER = Criterion("mean_rank", higher=False, tie_key="mrr")


@dataclass
class Training:
    """What the shared loop (`_fit`) trains: the model and its optimiser, prepared by `accelerator`, and the
    task: where each step's batch comes from, its loss ((loss, per-aspect parts)), and the validation."""
    accelerator: Any
    model: Any
    optimizer: Any
    next_batch: Callable[[], dict]
    loss_fn: Callable
    evaluate: Callable[[AspectEncoder], dict]


def _fit(kind: str, training: Training, out_dir: Path, config: DistillConfig, meta: dict,
         progress: bool) -> DistillResult:
    """The shared training loop: step, clip, evaluate every eval_every steps, keep the best, stop early."""
    accelerator, model, optimizer = training.accelerator, training.model, training.optimizer
    next_batch, loss_fn, evaluate = training.next_batch, training.loss_fn, training.evaluate
    out_dir = Path(out_dir)
    main = accelerator.is_main_process
    raw = accelerator.unwrap_model(model)
    t0 = time.perf_counter()

    def save(step: int, metrics: dict) -> None:
        # Every process holds the same weights; one writes. The others wait, so nobody reads a half file.
        if main:
            raw.save_pretrained(out_dir, extra=strict({
                "stage": kind, "step": step, "val_mean_rank": metrics["mean_rank"], "val_mrr": metrics["mrr"],
                "distill_config": config.to_dict()}))
        accelerator.wait_for_everyone()

    # Every process evaluates the full validation set itself: the numbers, and so the
    # keep/stop decisions, are identical everywhere without any communication.
    baseline = evaluate(raw)
    history = {"train": [], "eval": [{"step": 0, **baseline, "best": True, "seconds": 0.0}]}
    best, best_step = baseline, 0
    stopper = EarlyStopping(config.max_steps, config.eval_every, config.patience)
    save(0, baseline)
    window: list[float] = []
    bar = progress_bar(config.max_steps, kind, progress and main)
    model.train()
    for step in stopper.steps():
        batch = next_batch()
        loss, parts = loss_fn(model, batch)
        accelerator.backward(loss)
        if config.clip_value is not None and accelerator.sync_gradients:
            accelerator.clip_grad_value_(model.parameters(), config.clip_value)
        if config.grad_clip is not None and accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad()  # set_to_none: a head without targets next step keeps grad None
        value = float(loss.detach())
        window.append(value)
        history["train"].append({"step": step, "loss": value, "aspects": {a: float(v) for a, v in parts.items()}})
        bar.update(1)
        if stopper.due(step):
            metrics = evaluate(raw)
            improved = BETTER.better(metrics, best)
            if improved:
                best, best_step = metrics, step
                save(step, metrics)
            stopper.record(improved)
            history["eval"].append({"step": step, **metrics, "train_loss": float(np.mean(window)),
                                    "best": improved, "seconds": round(time.perf_counter() - t0, 2)})
            bar.set_postfix(loss=f"{np.mean(window):.4f}", val_rank=f"{metrics['mean_rank']:.2f}",
                            best=f"{best['mean_rank']:.2f}@{best_step}")
            window = []
    close_bar(bar)
    step, stopped_early = stopper.step, stopper.stopped_early
    seconds = time.perf_counter() - t0
    if main:
        write_json(out_dir / "history.json", history, indent=1)
        record = {"kind": kind, "config": config.to_dict(), "seed": config.seed, **meta, "steps": step,
                  "best_step": best_step, "stopped_early": stopped_early, "seconds": round(seconds, 1),
                  "num_processes": accelerator.num_processes, "device": str(accelerator.device),
                  "torch": torch.__version__}
        write_json(out_dir / "distill_config.json", record)
    accelerator.wait_for_everyone()
    return DistillResult(out_dir=out_dir, kind=kind, aspects=list(raw.aspects), best_step=best_step, best=best,
                         baseline=baseline, history=history, config=config, n_train=meta["n_train"],
                         n_val=meta["n_val"], steps=step, stopped_early=stopped_early, seconds=seconds)


def _cycle(loader):
    """Endless batches: a new epoch (new shuffle) whenever the loader runs out."""
    while True:
        yielded = False
        for batch in loader:
            yielded = True
            yield batch
        if not yielded:
            raise ValueError("the training loader is empty")


def train_unified_model(
    corpus,
    targets: Mapping[str, Mapping[str, np.ndarray]],
    split: tuple[Sequence[str], Sequence[str]],
    out_dir: str | os.PathLike,
    config: DistillConfig | None = None,
    progress: bool = True,
    run_dir: str | os.PathLike | None = None,
    sentence_labels: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
) -> DistillResult:
    """Distil the aspect models' targets into one model with a head per aspect (paper section 4, A.4).

    Two modes (`config.mode`; "auto" picks frozen on a CPU, finetune on a GPU):

    * frozen (CPU-first): sentence-pooling heads on the frozen encoder, trained in seconds on
      vectors cached in `run_dir` (`head_training.train_unified_heads`), from the targets and
      from `sentence_labels` ({aspect: {doc_id: [label per sentence]}},
      `head_training.sentence_supervision`); selected by agreement with the teacher's similarities;
    * finetune (the paper): described below.

    `split`: the run's (train ids, validation ids), as `RunDir.split()` reads them.
    The student reads each document's abstract from `corpus`; for every aspect the
    document has a target in, its head's output is pulled towards that target
    (10 x MSE, masked). Documents with no target in any aspect are skipped. Runs on
    CPU, a GPU or several processes (`accelerate launch`) through HF Accelerate.

    Validation every `eval_every` steps (and at step 0): per aspect, the rank of each
    validation document's true target among all validation targets of that aspect, by
    cosine similarity to the prediction; the checkpoint with the best average mean rank
    is saved to `out_dir`, with history.json and distill_config.json next to it.

    Where too few papers have a target (or, frozen, sentence labels) of an aspect to train and validate its head
    (`untaught.too_few_to_train`), a notice says so and what to do; its head is marked untrained and stage 03's
    check puts the aspect-file floor there. Where that leaves no head to train, in either mode, the unified
    model is frozen heads as they start (`untaught.untrained_heads`); the fine-tuned model trains the rest.
    """
    config = config or DistillConfig()
    frozen = resolve_mode(config.mode, config.device) == "frozen"
    labels = (sentence_labels or {}) if frozen else {}  # the fine-tuned model learns from targets alone
    # An aspect whose usable answers cover too few papers (a weak model, answers cut off) cannot be trained and
    # validated: said with its counts, and its head is the aspect-file floor, as for one with no answer at all.
    few = too_few_to_train(targets, labels, split, len(corpus))
    taught = [a for a, t in targets.items() if (t or labels.get(a)) and a not in few]
    say_too_few(few, taught)
    if frozen or not taught:  # with no head to train, the fine-tuned model too would be the floor: frozen heads
        if run_dir is None:
            raise ValueError("the frozen heads keep their feature cache in the run directory: pass run_dir")
        cache = FeatureCache.for_run(run_dir, frozen_backbone(config.base_model, config.pooling))
        if not taught:  # the heads as they start, marked untrained: the guard puts the floor there
            return untrained_heads(corpus, list(targets), out_dir, config, cache, few)
        result = train_unified_heads(corpus, targets, split, out_dir, config, cache,
                                     sentence_labels=sentence_labels, progress=progress)
        mark_untrained(out_dir, few)
        return result
    untaught = [a for a, t in targets.items() if not t]
    if untaught:  # the aspect-file floor is a pooling head on the frozen encoder: the fine-tuned model has none
        raise ValueError(f"no target for {untaught} (stage 02 trained no model of them: nothing to learn from); "
                         "the fine-tuned model cannot learn them. Run stage 03 with mode=frozen, whose heads fall "
                         "back to the aspect file, or leave them out with aspect_names.")
    return _train_finetuned(corpus, targets, split, out_dir, config, progress)


def _train_finetuned(corpus, targets, split, out_dir, config: DistillConfig, progress: bool) -> DistillResult:
    """`train_unified_model`'s finetune mode (the paper's): the whole encoder and its heads, through Accelerate."""
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader

    train_ids, val_ids = split
    aspects = list(targets)
    if not aspects:
        raise ValueError("no aspects in targets")
    dims = {a: len(next(iter(t.values()))) for a, t in targets.items() if t}
    if not dims or len(set(dims.values())) != 1:
        raise ValueError(f"targets must have one size across aspects and at least one document, got sizes {dims}")
    dim = next(iter(dims.values()))
    have = documents_with_targets(targets)
    train = [d for d in dict.fromkeys(map(str, train_ids)) if d in have]
    val = [d for d in dict.fromkeys(map(str, val_ids)) if d in have]
    overlap = set(train) & set(val)
    if overlap:
        raise ValueError(f"{len(overlap)} documents are in both train_ids and val_ids, e.g. {sorted(overlap)[:3]}")
    if not train or not val:
        raise ValueError(f"need documents with targets for training and validation, got {len(train)} and {len(val)}")
    texts = abstracts_of(corpus, train + val)

    accelerator = make_accelerator(config.device, config.mixed_precision)
    set_seed(config.seed)
    model = AspectEncoder.from_base(config.base_model, aspects, dim=dim, pooling=config.pooling,
                                    head_std=config.head_std, max_length=config.max_length, device="cpu")
    collate = DistillCollate(model.tokenizer, config.max_length, texts, targets, dim)
    loader = DataLoader(train, batch_size=config.batch_size, shuffle=True, collate_fn=collate,
                        generator=torch.Generator().manual_seed(config.seed))
    optimizer = adamw(model.parameters(), config.lr, config.weight_decay)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    val_texts = [texts[d] for d in val]
    val_targets, val_masks = stack_targets(targets, val, dim)
    batches = _cycle(loader)
    counts = {a: {"train": sum(d in targets[a] for d in train), "val": sum(d in targets[a] for d in val)}
              for a in aspects}
    meta = {"n_train": len(train), "n_val": len(val), "aspects": aspects, "dim": dim, "docs_per_aspect": counts,
            "base_model": config.base_model, "corpus": getattr(corpus, "name", ""),
            "corpus_fingerprint": corpus.fingerprint() if hasattr(corpus, "fingerprint") else None}
    training = Training(accelerator, model, optimizer, next_batch=lambda: next(batches),
                        loss_fn=lambda m, b: distill_loss(m, b, config.loss_scale),
                        evaluate=lambda m: evaluate_distill(m, val_texts, val_targets, val_masks,
                                                            config.eval_batch_size, config.loss_scale))
    return _fit("distill", training, Path(out_dir), config, meta, progress)


# --------------------------------------------------------------------------- the A.7 baseline


def _baseline_validation(texts: dict, views: dict, val_docs: dict, every_val: list, batch_size: int) -> Callable:
    """The unified baseline's validation, model -> scores: per aspect, each validation document's abstract
    (through that aspect's head) as query, its first view as candidate; mean rank and MRR."""
    def evaluate(m: AspectEncoder) -> dict:
        # The abstracts once, through every head; then each aspect's candidate views through its head.
        queries = m.encode([texts[d] for d in every_val], batch_size=batch_size)
        row = {d: i for i, d in enumerate(every_val)}
        per_aspect = {}
        for a, docs in val_docs.items():
            if len(docs) == 0:
                per_aspect[a] = {"mean_rank": float("nan"), "mrr": float("nan"), "n": 0}
                continue
            q = queries[a][[row[d] for d in docs]]
            c = m.encode([views[a][d][0] for d in docs], aspects=[a], batch_size=batch_size)[a]
            ranks = retrieval_ranks(q, c)
            per_aspect[a] = {"mean_rank": mean_rank(ranks), "mrr": mrr(ranks), "n": len(docs)}
        return _aggregate(per_aspect)
    return evaluate


def train_unified_baseline(
    views_by_aspect: Mapping,
    corpus,
    split: tuple[Sequence[str], Sequence[str]],
    out_dir: str | os.PathLike,
    config: DistillConfig | None = None,
    progress: bool = True,
) -> DistillResult:
    """The paper's "unified baseline" (A.7): all aspects trained at once, contrastively, no teachers.

    Each step draws, for every aspect, `batch_size` training documents and two
    different texts of each from its pool (the aspect's views plus the abstract, so
    abstracts learn to land on their summaries); InfoNCE over each aspect's pairs through
    that aspect's head, summed over aspects. All texts of a step go through the backbone
    in one pass (one forward per backward also keeps DDP simple). Validation per aspect:
    the abstract's embedding as query, each validation document's first view as candidate.
    Embedding size `config.dim`: pass the teachers' to compare spaces of one size.
    """
    from accelerate.utils import set_seed

    config = config or DistillConfig()
    train_ids, val_ids = split  # the run's, as `train_unified_model` takes it
    aspects = list(views_by_aspect)
    views = {a: views_of(views_by_aspect[a]) for a in aspects}
    train_set, val_set = set(map(str, train_ids)), set(map(str, val_ids))
    texts = abstracts_of(corpus, [d for a in aspects for d in views[a] if d in train_set | val_set])
    pools = {a: {d: [texts[d]] + [v for v in views[a][d] if v != texts[d]]
                 for d in views[a] if d in train_set and views[a][d]} for a in aspects}
    empty = [a for a in aspects if not pools[a]]
    if empty:
        raise ValueError(f"no training documents with views for aspect(s) {empty}")
    val_docs = {a: [d for d in views[a] if d in val_set and views[a][d]] for a in aspects}

    accelerator = make_accelerator(config.device, config.mixed_precision)
    set_seed(config.seed)
    model = AspectEncoder.from_base(config.base_model, aspects, dim=config.dim, pooling=config.pooling,
                                    head_std=config.head_std, max_length=config.max_length, device="cpu")
    tokenizer = model.tokenizer
    optimizer = adamw(model.parameters(), config.lr, config.weight_decay)
    model, optimizer = accelerator.prepare(model, optimizer)
    # Different processes must draw different batches (data parallelism), reproducibly.
    rng = random.Random(config.seed * 1000 + accelerator.process_index)
    pool_ids = {a: sorted(pools[a]) for a in aspects}

    def next_batch() -> dict:
        chunk, slices = [], {}
        for a in aspects:
            docs = rng.sample(pool_ids[a], min(config.batch_size, len(pool_ids[a])))
            pairs = [rng.sample(pools[a][d], 2) for d in docs]
            slices[a] = (len(chunk), len(pairs))
            chunk += [p[0] for p in pairs] + [p[1] for p in pairs]
        enc = tokenizer(chunk, padding=True, truncation=True, max_length=config.max_length, return_tensors="pt")
        return {"input_ids": enc["input_ids"].to(accelerator.device),
                "attention_mask": enc["attention_mask"].to(accelerator.device), "slices": slices}

    def loss_fn(m, batch):
        pred = m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        parts = {}
        for a, (start, n) in batch["slices"].items():
            parts[a] = info_nce(pred[a][start:start + n], pred[a][start + n:start + 2 * n], config.temperature)
        return torch.stack(list(parts.values())).sum(), {a: v.detach() for a, v in parts.items()}

    every_val = sorted(set().union(*[set(v) for v in val_docs.values()]))
    evaluate = _baseline_validation(texts, views, val_docs, every_val, config.eval_batch_size)

    meta = {"n_train": len(set().union(*[set(p) for p in pools.values()])), "n_val": len(every_val),
            "aspects": aspects, "dim": config.dim,
            "docs_per_aspect": {a: {"train": len(pools[a]), "val": len(val_docs[a])} for a in aspects},
            "base_model": config.base_model, "corpus": getattr(corpus, "name", "")}
    training = Training(accelerator, model, optimizer, next_batch, loss_fn, evaluate)
    return _fit("unified-baseline", training, Path(out_dir), config, meta, progress)
