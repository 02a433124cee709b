"""Stage 02: one contrastive embedding model per aspect (paper section 3, appendix A.3).

For one aspect, every document with at least two views (LLM summaries, and for ACLSum the
human summary and highlighted sentences of the train and validation splits) gives
positive pairs: two different views of the same document should embed close together,
views of other documents in the batch far apart (InfoNCE, cosine / temperature).

The whole recipe is one readable loop, `train_aspect_model`:

    sample a batch of distinct documents -> two different views of each
    -> embed the first views and the second views -> info_nce(first, second)
    -> backward, AdamW step
    every `eval_every` steps (and at step 0, the untrained baseline):
        rank the second view of each held-out document among all second views, from its
        first view -> mean rank, MRR; keep the best checkpoint; stop after `patience`
        evaluations without improvement

It runs unchanged on a CPU, one GPU, and several processes through HF Accelerate
(`torchrun --nproc_per_node 2 scripts/train_ddp.py ...`): each process trains on its own
shard of a shared batch draw, DDP averages the gradients, the main process validates and
saves, and the decisions (improved? stop?) are broadcast so every process agrees.

A model folder `<run_dir>/aspect_models/<aspect>/` holds the best checkpoint
(`AspectEncoder.save_pretrained`: model.safetensors + workbench_config.json + backbone
config + tokenizer), `history.json` (one row per evaluation) and `train_config.json`
(parameters, seed, aspect, data sizes and fingerprint, the result; "status": "finished"
once training completed). `train_aspect_models` skips an aspect whose folder holds a
finished model trained with the same settings on the same views.

Differences from the authors' code (REFERENCE_FACTS.md), on purpose:
* validation ranks the projected, normalised embedding the model is trained and used
  with; the reference code ranked the raw CLS vector, which ignores the head;
* the best checkpoint is chosen by validation MRR (the paper's reported metric) unless
  `select_by="mean_rank"` (the authors' choice);
* step counts sized for a CPU demo (defaults: 60 steps, validation every 20).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from ..core.accel import ConfigDict, adamw, make_accelerator
from .features import FeatureCache, frozen_backbone
from ..core.files import strict, write_json
from .grounding import grounded_views
from .head_training import resolve_mode, train_view_head, MODES
from .losses import info_nce
from ..measures.metrics import retrieval_report
from ..core.progress import close_bar, notice, progress_bar
from ..core.rundir import RunDir
from .training import HISTORY_NAME, TRAIN_CONFIG_NAME, EarlyStopping, TrainResult, evaluate, selection
from ..generate.views import AspectViews, eligible_docs, split_documents, validation_pairs, views_fingerprint
from .checkpoints import load_model
from .untaught import without_supervision
from .encoders import AspectEncoder, CONFIG_NAME, WEIGHTS_NAME

BASE_COLUMN = "base encoder"

# TrainConfig fields that do not change what is learned: a model trained on the GPU is
# as good a reason to skip a re-run on the CPU as one trained on the CPU.
_NOT_COMPARED = ("device",)


# --------------------------------------------------------------------------- config


@dataclass
class TrainConfig(ConfigDict):
    """Settings of one aspect model's training; defaults as in the paper, step counts for a CPU demo.

    lr, weight_decay, batch_size, temperature, dim, head_std, max_length are the paper's /
    authors' values (A.3). `batch_size` is per process: with N processes a step sees
    N x batch_size documents. `patience` counts evaluations without improvement before
    stopping. `device`: "cpu" forces the CPU; None (or a GPU name) lets Accelerate place
    the model: the GPU if there is one (one per process under a launcher), else the CPU.
    """

    base_model: str = "minilm"
    pooling: str = "cls"
    dim: int = 150
    max_length: int = 128
    temperature: float = 0.07
    lr: float = 1e-5
    weight_decay: float = 1e-4
    batch_size: int = 32
    max_steps: int = 60
    eval_every: int = 20
    patience: int = 5
    seed: int = 0
    head_std: float = 0.1
    select_by: str = "mrr"  # "mrr" (higher is better) or "mean_rank" (lower is better; the authors' choice)
    eval_batch_size: int = 64
    mixed_precision: str = "no"  # Accelerate's choice: "no", "bf16", "fp16"
    device: str | None = None
    # "frozen": a residual projection on a frozen encoder, trained on cached vectors (CPU-first,
    # `head_training.train_view_head`); "finetune": the paper's recipe above; "auto": frozen on a CPU.
    mode: str = "auto"
    head_lr: float = 1e-3
    head_steps: int = 300
    head_rank: int = 32

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.select_by not in ("mrr", "mean_rank"):
            raise ValueError(f"select_by must be 'mrr' or 'mean_rank', got {self.select_by!r}")
        for name in ("batch_size", "max_steps", "eval_every", "max_length", "dim"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.batch_size < 2:
            raise ValueError("batch_size must be at least 2: the other pairs of the batch are the negatives")

    def comparable(self) -> dict:
        """The fields that decide whether an existing model can be reused ("auto" resolved to the mode it runs)."""
        values = {k: v for k, v in self.to_dict().items() if k not in _NOT_COMPARED}
        values["mode"] = resolve_mode(self.mode, self.device)
        return values


# --------------------------------------------------------------------------- data


def sample_batch(views: AspectViews, doc_ids: Sequence[str], batch_size: int, rng: random.Random,
                 process_index: int = 0, num_processes: int = 1) -> list[tuple[str, str, str]]:
    """One training batch: [(doc_id, view_a, view_b)] with distinct documents and two different views each.

    Documents are drawn without replacement, so no document appears twice (a second copy
    would be a false negative of itself). With several processes, every process makes
    the same draw of num_processes x batch_size documents from the same `rng` state and
    keeps its own shard, so the global batch has distinct documents too and the rng
    streams stay in step. Only documents with at least two views are used.
    """
    docs = eligible_docs(views, doc_ids)
    if len(docs) < 2 * num_processes:
        raise ValueError(f"aspect '{views.aspect}': {len(docs)} documents with two or more views; "
                         f"a batch needs at least 2 per process ({num_processes} processes)")
    drawn = rng.sample(docs, min(batch_size * num_processes, len(docs)))
    # Draw the views for the whole global batch in every process (same rng use everywhere).
    pairs = [(d, *rng.sample(views.views[d], 2)) for d in drawn]
    return pairs[process_index::num_processes]


def prepare_views(aspects: Sequence[str], run_dir=None, corpus=None, val_split: str | None = None,
                  val_docs: int | float = 0.2, include_human: bool = True, seed: int = 0):
    """Collect every aspect's views and split the documents once for all aspects.

    Returns (views_by_aspect, train_ids, val_ids). The split is over documents, not per
    aspect, so that every aspect (and the cross-aspect table, and the distillation stage)
    holds out the same documents. With `val_split` (ACLSum: "validation") the corpus's
    split column decides; otherwise a seeded share `val_docs` of the documents.
    `corpus` may be a Corpus, a name for `load_corpus`, or None (LLM summaries only).
    """
    if isinstance(corpus, (str, Path)):
        from ..data.corpus import load_corpus

        corpus = load_corpus(corpus)
    # LLM answers that do not find their own abstract, or copy it, are left out (grounding.py).
    views = grounded_views(list(aspects), run_dir, corpus, include_human=include_human)
    # Corpus order when there is a corpus (stable splits), else first-seen order.
    seen = {d for v in views.values() for d in v.views}
    order = [d for d in corpus.ids if d in seen] if corpus is not None else []
    order += [d for v in views.values() for d in v.views if d not in set(order)]
    order = list(dict.fromkeys(order))
    train_ids, val_ids = split_documents(order, corpus, val_split=val_split, val_docs=val_docs, seed=seed)
    return views, train_ids, val_ids


def views_table(views_by_aspect: dict[str, AspectViews], train_ids, val_ids):
    """Per aspect: documents, views per source, and the usable (>= 2 views) train / validation documents."""
    import pandas as pd

    rows = []
    for aspect, views in views_by_aspect.items():
        row = views.stats()
        row["train docs"] = len(eligible_docs(views, train_ids))
        row["val docs"] = len(eligible_docs(views, val_ids))
        rows.append(row)
    return pd.DataFrame(rows).set_index("aspect").fillna(0)


# --------------------------------------------------------------------------- training


def prepare_training(aspect: str, config: TrainConfig, accelerator):
    """A fresh AspectEncoder with one head for `aspect` and its AdamW, both passed through `accelerator.prepare`.

    Seeds torch first, so every process starts from the same head (DDP would also
    broadcast rank 0's weights) and a run is reproducible.
    """
    from accelerate.utils import set_seed

    set_seed(config.seed)
    model = AspectEncoder.from_base(config.base_model, [aspect], dim=config.dim, pooling=config.pooling,
                                    head_std=config.head_std, max_length=config.max_length,
                                    device=str(accelerator.device))
    optimizer = adamw(model.parameters(), config.lr, config.weight_decay)
    return accelerator.prepare(model, optimizer)


def train_step(model, optimizer, accelerator, pairs: Sequence[tuple[str, str, str]], aspect: str,
               config: TrainConfig) -> float:
    """One optimisation step on a batch of (doc_id, view_a, view_b); returns this process's loss.

    The first and the second views go through separate forward passes: each is padded
    only to its own longest text, which measured ~10% faster on CPU than one pass over
    all 2B texts padded to the longest of both.
    """
    core = accelerator.unwrap_model(model)
    first = model(**core.tokenize([a for _, a, _ in pairs], config.max_length))[aspect]
    second = model(**core.tokenize([b for _, _, b in pairs], config.max_length))[aspect]
    loss = info_nce(first, second, temperature=config.temperature)
    accelerator.backward(loss)  # under DDP the gradients are all-reduced (averaged) here
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def train_aspect_model(views: AspectViews, train_ids, val_ids, out_dir, config: TrainConfig | None = None,
                       progress: bool = True, keep_model: bool = False) -> TrainResult:
    """Train one aspect's embedding model with in-batch InfoNCE; keep the best checkpoint in `out_dir`.

    views: the aspect's views (`collect_views(...)[aspect]`); train_ids / val_ids: document
    ids (only those with two or more views take part). The same function runs on CPU, one
    GPU, or several processes started by torchrun / accelerate launch.
    Writes out_dir/{model.safetensors, workbench_config.json, ..., history.json, train_config.json}.
    """
    config = config or TrainConfig()
    aspect = views.aspect
    out_dir = Path(out_dir)
    train_docs, val_docs = eligible_docs(views, train_ids), eligible_docs(views, val_ids)
    overlap = set(train_docs) & set(val_docs)
    if overlap:
        raise ValueError(f"aspect '{aspect}': {len(overlap)} documents are in both train and validation sets")
    if len(val_docs) < 2:
        raise ValueError(f"aspect '{aspect}': {len(val_docs)} validation documents with two views; need at least 2")

    accelerator = make_accelerator(config.device, config.mixed_precision)
    main = accelerator.is_main_process
    rank, world = accelerator.process_index, accelerator.num_processes
    if len(train_docs) < 2 * world:
        raise ValueError(f"aspect '{aspect}': {len(train_docs)} training documents with two views; "
                         f"need at least {2 * world}")

    # Same seed everywhere: identical initial heads (DDP also broadcasts rank 0's weights)
    # and identical batch draws, of which each process keeps its own shard.
    rng = random.Random(config.seed)
    model, optimizer = prepare_training(aspect, config, accelerator)
    core = accelerator.unwrap_model(model)  # the plain AspectEncoder: tokenize, encode, save

    record = {
        "status": "running", "aspect": aspect, "params": config.comparable(), "seed": config.seed,
        "device": str(accelerator.device), "num_processes": world,
        "n_train_docs": len(train_docs), "n_val_docs": len(val_docs),
        "n_train_views": sum(len(views.views[d]) for d in train_docs),
        "data_fingerprint": views_fingerprint(views, train_docs, val_docs),
    }
    if main:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_json(out_dir / TRAIN_CONFIG_NAME, record)  # "running": a killed run is not taken as finished

    stopper = EarlyStopping(config.max_steps, config.eval_every, config.patience)
    bar = progress_bar(config.max_steps, f"train {aspect}", progress and main)
    t0 = time.perf_counter()
    checkpoints = _Checkpoints(core, views, val_docs, out_dir, config, accelerator, bar)
    model.train()
    stopper.record(checkpoints.validate(0))  # the untrained baseline, and a checkpoint even if nothing improves
    for step in stopper.steps():
        pairs = sample_batch(views, train_docs, config.batch_size, rng, rank, world)
        checkpoints.add_loss(train_step(model, optimizer, accelerator, pairs, aspect, config))
        bar.update(1)
        if stopper.due(step):
            stopper.record(checkpoints.validate(step))
    close_bar(bar)
    history, best = checkpoints.history, checkpoints.best

    seconds = time.perf_counter() - t0
    baseline = {k: history[0][k] for k in ("val_mean_rank", "val_mrr", "val_top1")}
    result = TrainResult(aspect=aspect, out_dir=str(out_dir), best_step=best["step"], best_mrr=best["val_mrr"],
                         best_mean_rank=best["val_mean_rank"], baseline=baseline, history=history,
                         n_train_docs=len(train_docs), n_val_docs=len(val_docs), seconds=seconds,
                         stopped_early=stopper.stopped_early)
    if main:
        record.update(status="finished", result={k: v for k, v in asdict(result).items()
                                                   if k not in ("history", "model")})
        write_json(out_dir / TRAIN_CONFIG_NAME, record)
    accelerator.wait_for_everyone()
    if keep_model:
        result.model = core
    else:
        del model, optimizer, core
        accelerator.free_memory()
    return result


class _Checkpoints:
    """Stage 02's validation during training: evaluate, keep the best checkpoint, write the history.

    Every process holds the same weights, so one evaluation (on the main process) is enough; the result
    is broadcast so that all processes take the same decisions, and nobody races ahead while it saves."""

    def __init__(self, core, views: AspectViews, val_docs, out_dir: Path, config: TrainConfig, accelerator, bar):
        self.core, self.views, self.val_docs, self.out_dir = core, views, val_docs, out_dir
        self.config, self.accelerator, self.bar = config, accelerator, bar
        self.history: list[dict] = []
        self.best: dict | None = None
        self.loss_sum, self.loss_n = 0.0, 0
        self.t0 = time.perf_counter()

    def add_loss(self, loss: float) -> None:
        """Count one step's training loss towards the mean shown at the next evaluation."""
        self.loss_sum, self.loss_n = self.loss_sum + loss, self.loss_n + 1

    def validate(self, step: int) -> bool:
        """Evaluate at `step`; save the model where it is the best so far. Returns whether it was."""
        import torch
        from accelerate.utils import broadcast_object_list

        acc, main, config = self.accelerator, self.accelerator.is_main_process, self.config
        # Mean training loss since the last evaluation, averaged over processes.
        mean_loss = torch.tensor(self.loss_sum / max(self.loss_n, 1), device=acc.device)
        mean_loss = float(acc.reduce(mean_loss, "mean")) if self.loss_n else None
        self.loss_sum, self.loss_n = 0.0, 0
        metrics = [evaluate(self.core, self.views, self.val_docs, config.eval_batch_size) if main else None]
        metrics = broadcast_object_list(metrics)[0]
        entry = {"step": step, "train_loss": mean_loss, **metrics, "seconds": round(time.perf_counter() - self.t0, 2)}
        self.history.append(entry)
        improved = selection(config.select_by).better(metrics, self.best)
        if improved:
            self.best = entry
            if main:
                self.core.save_pretrained(self.out_dir, extra=strict({
                    "aspect": self.views.aspect, "step": step, **metrics, "train_config": config.comparable()}))
        if main:
            write_json(self.out_dir / HISTORY_NAME, self.history)
            best = self.best
            self.bar.set_postfix(loss=f"{mean_loss:.3f}" if mean_loss is not None else "-",
                                 mrr=f"{metrics['val_mrr']:.3f}", best=f"{best['val_mrr']:.3f}@{best['step']}")
        acc.wait_for_everyone()
        return improved


def finished_result(out_dir: Path, config: TrainConfig, aspect: str, fingerprint: str) -> TrainResult | None:
    """The stored result if out_dir holds a finished model of this aspect, config and data; else None."""
    try:
        record = json.loads((out_dir / TRAIN_CONFIG_NAME).read_text())
        history = json.loads((out_dir / HISTORY_NAME).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not ((out_dir / WEIGHTS_NAME).is_file() and (out_dir / CONFIG_NAME).is_file()):
        return None
    if (record.get("status") != "finished" or record.get("aspect") != aspect
            or record.get("params") != config.comparable() or record.get("data_fingerprint") != fingerprint):
        return None
    return _stored_result(record, history, skipped=True)


def _stored_result(record: dict, history: list, **extra) -> TrainResult:
    """The TrainResult of a train_config.json record: its nulls (NaN when written) read back as NaN."""
    nan = float("nan")
    stored = dict(record["result"])
    for key in ("best_mrr", "best_mean_rank"):
        if stored.get(key) is None:
            stored[key] = nan
    stored["baseline"] = {k: nan if v is None else v for k, v in (stored.get("baseline") or {}).items()}
    return TrainResult(**{**stored, "history": history, **extra})


def train_aspect_models(aspects: Sequence[str], run_dir, corpus=None, config: TrainConfig | None = None,
                        val_split: str | None = None, include_human: bool = True, overwrite: bool = False,
                        progress: bool = True) -> dict[str, TrainResult]:
    """Train one model per aspect into `<run_dir>/aspect_models/<aspect>/`; returns {aspect: TrainResult}.

    Views come from the run's summaries and (include_human) the corpus's human columns
    (never of its test split). Documents are split once for all aspects (`prepare_views`: the
    corpus's `val_split` papers validate, or without one a seeded fifth of them);
    the split is written to `<run_dir>/aspect_models/split.json`. What it does per aspect is printed.
    An aspect whose folder
    already holds a finished model with the same settings and the same views is not
    retrained (its stored result is returned, with skipped=True) unless overwrite=True.
    An aspect with nothing to learn from (`without_supervision`) is not trained: a notice says why, and
    `<run_dir>/aspect_models/untrained.json` records it for stage 03, which reads it with the aspect-file floor.
    One with too few papers of two views keeps the frozen encoder as its teacher, or, fine-tuning (no frozen
    teacher of the fine-tuned models' kind), is recorded there too.
    """
    config = config or TrainConfig()
    run_dir = Path(run_dir)
    views, train_ids, val_ids = prepare_views(aspects, run_dir, corpus, val_split=val_split,
                                              include_human=include_human, seed=config.seed)
    root = RunDir(run_dir).aspect_models
    RunDir(run_dir).write_split(train_ids, val_ids, val_split)
    untrained = without_supervision(views, aspects, corpus, run_dir, include_human)
    write_json(RunDir(run_dir).untrained, {"aspects": untrained})  # stage 03 gives these the aspect-file floor
    for why in dict.fromkeys(untrained.values()):  # once per reason: "no answer was kept" holds for all at once
        named = [a for a in untrained if untrained[a] == why]
        notice(f"no aspect model trained for {', '.join(named)}: {why}. Stage 03 reads "
               f"{'them' if len(named) > 1 else 'it'} with the aspect file's own head (the aspect-file floor), "
               "which needs no LLM answer.")
    aspects = [a for a in aspects if a not in untrained]
    frozen = resolve_mode(config.mode, config.device) == "frozen"
    cache = FeatureCache.for_run(run_dir, frozen_backbone(config.base_model, config.pooling)) if frozen else None
    results = {}
    for aspect in aspects:
        out_dir = root / aspect
        fingerprint = views_fingerprint(views[aspect], train_ids, val_ids)
        done = None if overwrite else finished_result(out_dir, config, aspect, fingerprint)
        if done is not None:
            kept = (f"best MRR {done.best_mrr:.3f} at step {done.best_step}" if done.best_mrr == done.best_mrr
                    else "the frozen encoder itself: too few documents to train")
            print(f"{aspect}: skipped, {out_dir} already holds a finished model trained with the same settings "
                f"on the same views ({kept}); overwrite=True retrains")
            results[aspect] = done
            continue
        n_train, n_val = len(eligible_docs(views[aspect], train_ids)), len(eligible_docs(views[aspect], val_ids))
        if n_train < 2 or n_val < 2:
            few = f"too few documents with two or more views ({n_train} train, {n_val} validation; need 2 each)"
            if not frozen:  # no frozen teacher to fall back on: recorded as left without a model, as stages 03
                untrained[aspect] = few  # and 04 read it (else stage 03 asked to run stage 02 again for it)
                write_json(RunDir(run_dir).untrained, {"aspects": untrained})
                notice(f"{aspect}: no aspect model trained: {few}, and fine-tuning has no frozen teacher to fall "
                       "back on")
                continue
            print(f"{aspect}: {few}: the teacher is the frozen encoder itself")
            results[aspect] = train_view_head(views[aspect], train_ids, val_ids, out_dir, config, cache,
                                              progress=progress)
            continue
        print(f"{aspect}: training on {n_train} documents, validating on {n_val} -> {out_dir}"
            f" ({'frozen encoder, residual head on cached vectors' if frozen else 'fine-tuning the encoder'})")
        if frozen:
            results[aspect] = train_view_head(views[aspect], train_ids, val_ids, out_dir, config, cache,
                                              progress=progress)
        else:
            results[aspect] = train_aspect_model(views[aspect], train_ids, val_ids, out_dir, config,
                                                 progress=progress)
        r = results[aspect]
        print(f"{aspect}: MRR {r.baseline['val_mrr']:.3f} at step 0 -> best {r.best_mrr:.3f} at step {r.best_step} "
            f"({r.seconds:.0f}s)")
    return results


# --------------------------------------------------------------------------- evaluation


def cross_aspect_mrr(run_dir, views_by_aspect: dict[str, AspectViews], val_ids, base_model: str | None = None,
                     base_pooling: str = "mean", batch_size: int = 64, device: str | None = None,
                     progress: bool = False):
    """The paper's Table 1: MRR of each aspect's validation pairs under every aspect model and the base encoder.

    Rows: the evaluation aspect (its held-out documents' first view as query, second view
    among all second views as the match). Columns: the model of each aspect found in
    `<run_dir>/aspect_models/` and "base encoder" (the untrained backbone with
    `base_pooling`, no head; skipped when base_model is None). The diagonal is each
    aspect's own model. `table.attrs["n_pairs"]` holds the number of queries per row.
    """
    import pandas as pd

    root = RunDir(run_dir).aspect_models
    pairs = {}
    for aspect, views in views_by_aspect.items():
        docs, queries, candidates = validation_pairs(views, val_ids)
        if len(docs) >= 2:
            pairs[aspect] = (queries, candidates)
    model_aspects = [a for a in views_by_aspect if (root / a / "workbench_config.json").is_file()]
    table = pd.DataFrame(index=pd.Index(list(pairs), name="evaluated aspect"), dtype=float)
    table.attrs["n_pairs"] = {a: len(q) for a, (q, _) in pairs.items()}
    if not pairs:  # nothing to retrieve (no aspect has two validation papers with two views): load no model
        return table
    max_length = 128

    def score(embed) -> dict:
        out = {}
        for aspect, (queries, candidates) in pairs.items():
            emb = embed(queries + candidates)
            out[aspect] = retrieval_report(emb[:len(queries)], emb[len(queries):])["mrr"]
        return out

    for name in model_aspects:
        model = load_model(root / name, device=device, run_dir=run_dir)
        max_length = model.max_length
        table[f"{name} model"] = pd.Series(score(
            lambda texts: model.encode(texts, aspects=[name], batch_size=batch_size, progress=progress)[name]))
        del model
    if base_model is not None:
        base = AspectEncoder.from_base(base_model, ["base"], pooling=base_pooling, max_length=max_length,
                                       device=device)
        table[BASE_COLUMN] = pd.Series(score(
            lambda texts: base.encode_pooled(texts, batch_size=batch_size, progress=progress)))
        del base
    return table


# --------------------------------------------------------------------------- plots


def plot_training_curves(results: dict[str, TrainResult], axes=None):
    """Validation MRR (left, best step marked) and mean training loss (right) against the step, one line per aspect."""
    import matplotlib.pyplot as plt

    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    else:
        fig = axes[0].figure
    for i, (aspect, result) in enumerate(results.items()):
        color = f"C{i}"
        steps = [h["step"] for h in result.history]
        axes[0].plot(steps, [h["val_mrr"] for h in result.history], "o-", color=color, label=aspect, ms=4)
        axes[0].plot([result.best_step], [result.best_mrr], "*", color=color, ms=14, mec="black")
        losses = [(h["step"], h["train_loss"]) for h in result.history if h["train_loss"] is not None]
        if losses:
            axes[1].plot(*zip(*losses), "o-", color=color, label=aspect, ms=4)
    axes[0].set(xlabel="step", ylabel="validation MRR", title="Validation MRR (star: kept checkpoint)")
    axes[1].set(xlabel="step", ylabel="InfoNCE loss", title="Training loss (mean since last evaluation)")
    for ax in axes:
        ax.grid(alpha=0.3)
        if results:  # no aspect model (none had a view to learn from): empty axes, no empty legend
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_cross_aspect(table, ax=None):
    """Heatmap of `cross_aspect_mrr`'s table, each aspect's own model (the diagonal) outlined."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.patches import Rectangle

    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 * len(table.columns) + 2.5, 0.7 * len(table) + 1.8))
    if table.empty:  # no aspect has validation pairs: say it where the heatmap would be
        ax.text(0.5, 0.5, "no validation pairs to retrieve", ha="center", va="center")
        ax.set_axis_off()
        return ax
    sns.heatmap(table.astype(float), annot=True, fmt=".2f", cmap="viridis", vmin=0, vmax=1, ax=ax,
                cbar_kws={"label": "MRR"})
    for i, aspect in enumerate(table.index):
        column = f"{aspect} model"
        if column in table.columns:
            ax.add_patch(Rectangle((list(table.columns).index(column), i), 1, 1, fill=False, edgecolor="red", lw=3))
    ax.set(xlabel="embedding model", ylabel="evaluated aspect (validation pairs)",
           title="Retrieval MRR per aspect and model (outlined: the aspect's own model)")
    ax.figure.tight_layout()
    return ax


def load_results(run_dir, aspects: Sequence[str] | None = None) -> dict[str, TrainResult]:
    """The stored results of finished aspect models in `<run_dir>/aspect_models/` (e.g. for a later notebook)."""
    root = RunDir(run_dir).aspect_models
    if aspects is None:
        aspects = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    out = {}
    for name in aspects:
        try:
            record = json.loads((root / name / TRAIN_CONFIG_NAME).read_text())
            history = json.loads((root / name / HISTORY_NAME).read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if record.get("status") == "finished":
            out[name] = _stored_result(record, history)
    return out


__all__ = [
    "TrainConfig", "TrainResult", "train_aspect_model", "train_aspect_models", "cross_aspect_mrr",
    "sample_batch", "train_step", "prepare_training", "validation_pairs", "prepare_views", "views_table",
 "evaluate", "make_accelerator",
    "plot_training_curves", "plot_cross_aspect", "load_results",
]
