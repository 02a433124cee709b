"""Training the pooling heads of `heads.py` on cached frozen features: stages 02 and 03 in CPU-first mode.

Nothing here runs the transformer during training: every text was encoded once into the
run's `FeatureCache`, so a step costs microseconds and hundreds of steps take seconds.

Stage 02, `train_view_head` (one aspect's teacher): the views of a document are its
aspect summaries; a residual low-rank projection of the frozen view vectors is trained
with in-batch InfoNCE (two views of one paper close, other papers apart), validated by
the retrieval MRR of the held-out documents' second views as in the fine-tuning mode.
Step 0 is the frozen encoder itself and early stopping keeps the best checkpoint, so the
teacher is never worse on validation than the encoder it starts from.

Stage 03, `train_unified_heads` (all aspects): each aspect's `SentencePoolingHead` learns
which sentences of an abstract state the aspect, from every signal the run has:

* sentence labels (human highlights, where a corpus has them; the LLM's sentence labels of
  stage 01): binary cross-entropy on the head's sentence scores;
* the teacher's targets (mean teacher embedding of the document's views, `targets.compute_targets`):
  - distant sentence labels: a sentence that lies closer to the target than the document's
    other sentences probably states the aspect (soft cross-entropy, documents without
    human or LLM labels only);
  - similarity distillation: within a batch, each document's softmax distribution of
    similarities to the others should match the teacher's (KL), which is what a map and
    a ranking use, and it sets the blend with the whole text;
  - optionally InfoNCE between the head's output and the target.

Validation (every `eval_every` steps and at step 0): per aspect, the mean per-document
Spearman correlation between the head's similarities and the teacher's similarities
among the validation documents ("agreement", the number stage 06 computes against a
ground truth), plus the retrieval rank of each document's own target. The checkpoint
of each head with its best agreement is kept (heads share no parameter, so each aspect
stops where its own validation peaks), then retrained on train + validation for that
many steps (`head_refit`), the validation documents teaching through their targets alone, with no sentence
label: stage 03's check swaps their marked sentences, so those must not have taught the heads it checks.
"""

from __future__ import annotations

from dataclasses import asdict
import random
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .features import DocumentFeatures, FeatureCache
from ..core.files import strict, write_json
from .heads import PooledAspectModel
from ..measures.metrics import mean_rank, mrr, retrieval_ranks
from ..core.progress import close_bar, progress_bar
from .training import (HISTORY_NAME, TRAIN_CONFIG_NAME, Criterion, DistillResult, EarlyStopping, TrainResult,
                       abstracts_of, documents_with_targets, evaluate, selection, stack_targets)
from ..generate.views import eligible_docs, views_fingerprint
from ..core.devices import best_device
from ..data.sentences import match_highlights, split_sentences
from ..measures.evaluation import cosine_similarity_matrix, rowwise_spearman
from .losses import info_nce

AGREEMENT = Criterion("agreement", higher=True)  # a head's validation agreement: higher wins

MODES = ("auto", "frozen", "finetune")


def resolve_mode(mode: str, device: str | None = None) -> str:
    """"frozen" (CPU-first heads on a frozen encoder) or "finetune" (the paper's recipe); "auto" picks by device.

    auto: frozen when the training device is the CPU, finetune on a GPU.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode != "auto":
        return mode
    return "frozen" if (device or best_device()) == "cpu" else "finetune"


class _few_threads:
    """Run the tiny tensor work of head training on one thread, and restore the setting after.

    The heads' tensors are a few hundred kB: splitting such work across threads costs more
    than it saves, and on a busy machine threads that wait for a core slow every step
    several-fold (measured: 0.6 s a step beside two other jobs, against milliseconds).
    """

    def __enter__(self):
        self.before = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.before)


def _params(model) -> list:
    return [p for p in model.parameters() if p.requires_grad]


# --------------------------------------------------------------------------- stage 02: teachers


def train_view_head(views, train_ids, val_ids, out_dir, config, cache: FeatureCache, progress: bool = True):
    """One aspect's teacher in frozen mode: InfoNCE on view pairs through a residual projection.

    `views` is an `AspectViews`; `config` a `train.TrainConfig` (its head_* fields, batch_size,
    temperature, eval_every, patience, seed). Writes the best checkpoint, history.json and
    train_config.json to `out_dir` exactly as the fine-tuning mode does; returns a TrainResult.
    """
    aspect = views.aspect
    out_dir = Path(out_dir)
    train_docs, val_docs = eligible_docs(views, train_ids), eligible_docs(views, val_ids)
    if set(train_docs) & set(val_docs):
        raise ValueError(f"aspect '{aspect}': documents are in both train and validation sets")
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    model = PooledAspectModel(config.base_model, [aspect], hidden=cache.backbone.hidden_size,
                              pooling=config.pooling, max_length=cache.backbone.max_length, pool=False,
                              rank=config.head_rank, seed=config.seed).train()
    model.cache = cache
    # Every view of the aspect at once: one backbone pass for the texts not yet cached.
    texts = sorted({t for d in train_docs + val_docs for t in views.views[d]})
    row = {t: i for i, t in enumerate(texts)}
    vectors = torch.as_tensor(cache.vectors(texts, progress=progress))
    optimizer = torch.optim.AdamW(_params(model), lr=config.head_lr, weight_decay=0.0)
    head = model.heads[aspect]
    record = {"status": "running", "mode": "frozen", **_data_record(views, train_docs, val_docs, config)}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / TRAIN_CONFIG_NAME, record)
    history, best, losses = [], None, []
    stopper = EarlyStopping(config.head_steps, config.eval_every, config.patience)
    t0 = time.perf_counter()
    bar = progress_bar(config.head_steps, f"heads {aspect}", progress)

    def validate(step: int) -> None:
        nonlocal best, losses
        model.eval()
        metrics = evaluate(model, views, val_docs, config.eval_batch_size)
        model.train()
        entry = {"step": step, "train_loss": float(np.mean(losses)) if losses else None, **metrics,
                 "seconds": round(time.perf_counter() - t0, 3)}
        history.append(entry)
        losses = []
        improved = selection(config.select_by).better(metrics, best)
        if improved:
            best = entry
            model.save_pretrained(out_dir, extra=strict({"aspect": aspect, "step": step, **metrics,
                                                             "mode": "frozen", "train_config": config.comparable()}))
        stopper.record(improved)
        write_json(out_dir / HISTORY_NAME, history)
        bar.set_postfix(mrr=f"{metrics['val_mrr']:.3f}", best=f"{best['val_mrr']:.3f}@{best['step']}")

    if len(train_docs) < 2 or len(val_docs) < 2:
        return _frozen_teacher(model, out_dir, config, record)
    validate(0)
    if config.head_rank:  # with no projection there is nothing to train: step 0 is the teacher
        with _few_threads():
            for step in stopper.steps():
                docs = rng.sample(train_docs, min(config.batch_size, len(train_docs)))
                pairs = [rng.sample(views.views[d], 2) for d in docs]
                first = vectors[[row[a] for a, _ in pairs]]
                second = vectors[[row[b] for _, b in pairs]]
                loss = info_nce(head.projection(first), head.projection(second), config.temperature)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
                bar.update(1)
                if stopper.due(step):
                    validate(step)
    close_bar(bar)
    baseline = {k: history[0][k] for k in ("val_mean_rank", "val_mrr", "val_top1")}

    result = TrainResult(aspect=aspect, out_dir=str(out_dir), best_step=best["step"], best_mrr=best["val_mrr"],
                         best_mean_rank=best["val_mean_rank"], baseline=baseline, history=history,
                         n_train_docs=len(train_docs), n_val_docs=len(val_docs),
                         seconds=time.perf_counter() - t0, stopped_early=stopper.stopped_early)
    record.update(status="finished", result={k: v for k, v in asdict(result).items() if k not in ("history", "model")})
    write_json(out_dir / TRAIN_CONFIG_NAME, record)
    return result


def _data_record(views, train_docs, val_docs, config) -> dict:
    """What a teacher's train_config.json says of its data: enough for a re-run to know it is the same."""
    return {"aspect": views.aspect, "params": config.comparable(), "seed": config.seed, "device": "cpu",
            "num_processes": 1, "n_train_docs": len(train_docs), "n_val_docs": len(val_docs),
            "n_train_views": sum(len(views.views[d]) for d in train_docs),
            "data_fingerprint": views_fingerprint(views, train_docs, val_docs)}


def _frozen_teacher(model, out_dir: Path, config, record: dict) -> TrainResult:
    """Too few pairs to train or to validate (a small corpus, or a generator that often answers "Not
    applicable."): the teacher is the frozen encoder itself, which is what step 0 of training would be, so
    the later stages still have every aspect. Saved and recorded as finished, untrained."""
    aspect = record["aspect"]
    model.save_pretrained(out_dir, extra={"aspect": aspect, "step": 0, "mode": "frozen", "untrained": True,
                                          "train_config": config.comparable()})
    nan = float("nan")
    result = TrainResult(aspect=aspect, out_dir=str(out_dir), best_step=0, best_mrr=nan, best_mean_rank=nan,
                         baseline={"val_mean_rank": nan, "val_mrr": nan, "val_top1": nan},
                         n_train_docs=record["n_train_docs"], n_val_docs=record["n_val_docs"])
    record.update(status="finished", untrained=True,
                  result={k: v for k, v in asdict(result).items() if k not in ("history", "model")})
    # An empty history, as the skip check of a re-run (`train.finished_result`) reads one: without it the
    # frozen-encoder teacher was written anew on every run.
    write_json(out_dir / HISTORY_NAME, [])
    write_json(out_dir / TRAIN_CONFIG_NAME, record)  # last: "finished" only once everything is there
    return result


# --------------------------------------------------------------------------- stage 03: the unified heads


def distant_labels(features: DocumentFeatures, targets: np.ndarray, sharpness: float = 2.0) -> list[np.ndarray]:
    """Soft sentence labels from a target vector: sigmoid(sharpness x z), z the sentence's standardised cosine.

    Within one document, sentences are compared with each other (z-scores), so a document
    whose every sentence is far from the target still has its closest sentences marked.
    A document with fewer than two sentences gets no labels (an empty array).
    """
    out = []
    for sents, target in zip(features.sentences, targets):
        if len(sents) < 2 or not np.all(np.isfinite(target)):
            out.append(np.zeros(0, dtype=np.float32))
            continue
        c = sents @ (target / max(np.linalg.norm(target), 1e-12))
        z = (c - c.mean()) / max(c.std(), 1e-6)
        out.append((1.0 / (1.0 + np.exp(-sharpness * z))).astype(np.float32))
    return out


def _label_matrix(labels: Sequence[np.ndarray | None], m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [N, M], present [N, M]) from per-document label arrays (None or empty: no labels)."""
    values = torch.zeros(len(labels), m)
    present = torch.zeros(len(labels), m, dtype=torch.bool)
    for i, lab in enumerate(labels):
        if lab is not None and len(lab):
            values[i, :len(lab)] = torch.as_tensor(np.asarray(lab, dtype=np.float32))
            present[i, :len(lab)] = True
    return values, present


def similarity_kd(pred: torch.Tensor, target: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL from the target's to the prediction's softmax over similarities to the other rows (self excluded).

    A ranking-shaped distillation: what matters is which documents a document is close to,
    not where its vector lies, which leaves the head free in directions no ranking uses.
    """
    p, t = F.normalize(pred, dim=-1), F.normalize(target, dim=-1)
    eye = torch.eye(len(p), dtype=torch.bool, device=p.device)
    log_q = torch.log_softmax((p @ p.T / temperature).masked_fill(eye, -1e9), dim=-1)
    log_p = torch.log_softmax((t @ t.T / temperature).masked_fill(eye, -1e9), dim=-1)
    return F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")


def agreement(pred: np.ndarray, target: np.ndarray) -> float:
    """Mean per-document Spearman correlation between two embeddings' similarity rows (diagonal left out)."""
    if len(pred) < 3:
        return float("nan")
    rho = rowwise_spearman(cosine_similarity_matrix(pred), cosine_similarity_matrix(target))
    return float(np.nanmean(rho)) if np.isfinite(rho).any() else float("nan")


def evaluate_heads(model: PooledAspectModel, features: DocumentFeatures, targets: Mapping[str, np.ndarray],
                   masks: Mapping[str, np.ndarray]) -> dict:
    """Validation of the unified heads: per aspect agreement with the teacher, rank of the own target, MSE."""
    model.eval()
    with torch.no_grad():
        out = {a: e.float().cpu().numpy() for a, (e, _, _) in model.forward_features(features).items()}
    model.train()
    per_aspect = {}
    for aspect in model.aspects:
        rows = np.asarray(masks[aspect], dtype=bool)
        if rows.sum() < 2:
            per_aspect[aspect] = {"agreement": float("nan"), "mean_rank": float("nan"), "mrr": float("nan"),
                                  "loss": float("nan"), "n": int(rows.sum())}
            continue
        p, t = out[aspect][rows], targets[aspect][rows]
        ranks = retrieval_ranks(p, t)
        unit = p / np.maximum(np.linalg.norm(p, axis=1, keepdims=True), 1e-12)
        per_aspect[aspect] = {"agreement": agreement(p, t), "mean_rank": mean_rank(ranks), "mrr": mrr(ranks),
                              "loss": float(np.mean((unit - t) ** 2)), "n": int(rows.sum())}
    return _summarise(per_aspect)


def evaluate_base(features: DocumentFeatures, targets: Mapping[str, np.ndarray], masks: Mapping[str, np.ndarray],
                  aspects: Sequence[str]) -> dict:
    """The validation of `evaluate_heads` for the base encoder's whole-abstract vectors (the same for every aspect)."""
    per_aspect = {}
    for aspect in aspects:
        rows = np.asarray(masks[aspect], dtype=bool)
        if rows.sum() < 2:
            per_aspect[aspect] = {"agreement": float("nan"), "mrr": float("nan"), "n": int(rows.sum())}
            continue
        p, t = features.whole[rows], targets[aspect][rows]
        per_aspect[aspect] = {"agreement": agreement(p, t), "mrr": mrr(retrieval_ranks(p, t)), "n": int(rows.sum())}
    scored = [m for m in per_aspect.values() if m["n"] >= 2]
    return {k: float(np.mean([m[k] for m in scored])) if scored else float("nan") for k in ("agreement", "mrr")} \
        | {"aspects": per_aspect}


def train_unified_heads(corpus, targets: Mapping[str, Mapping[str, np.ndarray]], split, out_dir, config,
                        cache: FeatureCache, sentence_labels: Mapping[str, Mapping[str, Sequence[float]]]
                        | None = None, progress: bool = True):
    """Train the unified model's pooling heads (frozen mode of stage 03); returns a `training.DistillResult`.

    targets: {aspect: {doc_id: vector}} from `targets.compute_targets`; split: the run's (train ids, validation
    ids); sentence_labels: {aspect: {doc_id: [label per sentence of split_sentences(abstract)]}} (human
    highlights, LLM labels; see `sentence_supervision`). `config` is a `distill.DistillConfig` (its head_*
    and *_weight fields). Writes the best checkpoint, history.json and distill_config.json.
    """
    sentence_labels = sentence_labels or {}
    aspects = list(targets)
    dim = _target_size(targets, cache)
    train, val = _supervised_split(targets, sentence_labels, split)
    texts = abstracts_of(corpus, train + val)
    features = cache.documents([texts[d] for d in train + val], progress=progress)
    val_data = (features.subset(range(len(train), len(features))), *stack_targets(targets, val, dim))
    model = new_unified(cache, aspects, config)
    data = _supervision(train, features.subset(range(len(train))), targets, sentence_labels, aspects, dim)
    t0 = time.perf_counter()
    baseline = evaluate_heads(model, *val_data)
    reference = evaluate_base(*val_data, aspects)
    kept, history, stopper = _train_heads(model, data, val_data, baseline, config, progress)
    best_steps = {a: kept[a][0]["step"] for a in aspects}
    best = _summarise({a: kept[a][0] for a in aspects})
    best_step = max(best_steps.values())
    for a in aspects:
        model.heads[a].load_state_dict(kept[a][1])
    refit, refit_counts = bool(config.head_refit and best_step > 0), None
    if refit:
        # The step counts are chosen; now every document with a target teaches the final heads, the
        # validation documents included (on small corpora they are a third of the data). Not which of their
        # sentences state an aspect: stage 03's check swaps exactly those sentences (`guard.check_heads`), and
        # a head trained on them, or on distant labels from targets built of the very sentences (highlights
        # are views), would pass a check that grades its own evidence.
        data_all = _supervision(train + val, features, targets, sentence_labels, aspects, dim, unmarked=set(val))
        model, refit_counts = _refit_heads(cache, aspects, config, data_all, best_steps), data_all["counts"]
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir, extra=strict({
        "stage": "distill", "mode": "frozen", "step": best_step, "refit_on_train_and_validation": refit,
        "best_step_per_aspect": best_steps, "val_agreement": best["agreement"], "val_mean_rank": best["mean_rank"],
        "val_mrr": best["mrr"], "distill_config": config.to_dict(),  # heads with nothing to learn: the guard's floor
        "untrained": [a for a in aspects if not targets[a] and not sentence_labels.get(a)]}))
    seconds = time.perf_counter() - t0
    meta = {"n_train": len(train), "n_val": len(val), "aspects": aspects, "dim": dim, "docs_per_aspect": data["counts"],
            "refit_on_train_and_validation": refit, "refit_docs_per_aspect": refit_counts,
            "best_step_per_aspect": best_steps,
            "base_model": cache.backbone.name, "corpus": getattr(corpus, "name", ""),
            "corpus_fingerprint": corpus.fingerprint() if hasattr(corpus, "fingerprint") else None}
    write_json(out_dir / "history.json", history, indent=1)
    record = {"kind": "distill", "mode": "frozen", "config": config.to_dict(), "seed": config.seed, **meta,
              "validation": {"base encoder": reference, "step 0": baseline, "kept": best},
              "steps": stopper.step, "best_step": best_step, "stopped_early": stopper.stopped_early,
              "seconds": round(seconds, 2), "num_processes": 1, "device": "cpu", "torch": torch.__version__}
    write_json(out_dir / "distill_config.json", record)
    return DistillResult(out_dir=out_dir, kind="distill (frozen heads)", aspects=aspects, best_step=best_step,
                         best=best, baseline=baseline, history=history, config=config, n_train=len(train),
                         n_val=len(val), steps=stopper.step, stopped_early=stopper.stopped_early, seconds=seconds,
                         reference=reference)


def _target_size(targets, cache: FeatureCache) -> int:
    """The frozen backbone's width, which every aspect's targets must have (else: which stage 02 to rerun)."""
    dim = cache.backbone.hidden_size
    sizes = {a: len(next(iter(t.values()))) for a, t in targets.items() if t}
    wrong = {a: s for a, s in sizes.items() if s != dim}
    if wrong:
        raise ValueError(f"targets of {sorted(wrong)} have {sorted(set(wrong.values()))} dimensions but the frozen "
                         f"backbone {cache.backbone.name!r} has {dim}: the teachers of stage 02 were trained on "
                         f"another encoder; run 02_train with the same base_model and mode")
    return dim


def _supervised_split(targets, sentence_labels, split) -> tuple[list[str], list[str]]:
    """The train and validation documents of `split` that have a target or sentence labels, in order, once."""
    train_ids, val_ids = split
    have = documents_with_targets(targets) | {d for lab in sentence_labels.values() for d in lab}
    train = [d for d in dict.fromkeys(map(str, train_ids)) if d in have]
    val = [d for d in dict.fromkeys(map(str, val_ids)) if d in have]
    if set(train) & set(val):
        raise ValueError("documents are in both train_ids and val_ids")
    if not train or len(val) < 2:
        raise ValueError(f"need documents with targets or sentence labels for training and validation, got "
                         f"{len(train)} and {len(val)}")
    return train, val


def _train_heads(model, data: dict, val_data: tuple, baseline: dict, config, progress: bool):
    """The training loop of the frozen heads: ({aspect: (its best validation, its head's state)}, the history,
    the `EarlyStopping` that ended it). `val_data`: (validation features, dense targets, masks).

    Each head is kept at its own best step: the heads share no parameter, and one aspect's
    agreement may peak long before another's (a single step for all would stop the slow one early)."""
    aspects = list(model.heads)
    optimizer = _head_optimizer(model, config)
    rng = np.random.default_rng(config.seed)
    t0 = time.perf_counter()
    history = {"train": [], "eval": [{"step": 0, **baseline, "best": True, "seconds": 0.0}]}
    kept = {a: ({**baseline["aspects"][a], "step": 0}, _state(model.heads[a])) for a in aspects}
    stopper = EarlyStopping(config.head_steps, config.eval_every, config.patience)
    window = []
    bar = progress_bar(config.head_steps, "unified heads", progress)
    with _few_threads():  # tiny tensors: one thread is fastest, and stays fast on a busy machine
        for step in stopper.steps():
            loss, parts = _step(model, optimizer, data, rng, config)
            window.append(loss)
            history["train"].append({"step": step, "loss": loss, "aspects": parts})
            bar.update(1)
            if stopper.due(step):
                metrics = evaluate_heads(model, *val_data)
                improved = [a for a in aspects if AGREEMENT.better(metrics["aspects"][a], kept[a][0])]
                for a in improved:
                    kept[a] = ({**metrics["aspects"][a], "step": step}, _state(model.heads[a]))
                stopper.record(bool(improved))
                history["eval"].append({"step": step, **metrics, "train_loss": float(np.mean(window)),
                                        "best": bool(improved), "improved": improved,
                                        "seconds": round(time.perf_counter() - t0, 3)})
                bar.set_postfix(loss=f"{np.mean(window):.3f}", agreement=f"{metrics['agreement']:.3f}")
                window = []
    close_bar(bar)
    return kept, history, stopper


def _refit_heads(cache: FeatureCache, aspects, config, data_all: dict, best_steps: dict):
    """Fresh heads trained on every labelled document (`data_all`), each taken at its own chosen step count."""
    model = new_unified(cache, aspects, config)
    optimizer = _head_optimizer(model, config)
    rng = np.random.default_rng(config.seed)
    snapshot = {a: _state(model.heads[a]) for a in aspects if best_steps[a] == 0}
    with _few_threads():
        for k in range(1, max(best_steps.values()) + 1):
            _step(model, optimizer, data_all, rng, config)
            snapshot.update({a: _state(model.heads[a]) for a in aspects if best_steps[a] == k})
    for a in aspects:
        model.heads[a].load_state_dict(snapshot[a])
    return model


def _head_optimizer(model, config):
    """AdamW with the projection (a [H, r] and an [r, H] matrix) at a tenth of the scoring's learning rate.

    The sentence scores and the blend are a few hundred numbers whose effect is bounded
    (weights stay a convex combination); the projection can rotate the whole space, and at
    the scoring's rate it overfits a small corpus within a few steps.
    """
    projection = [p for n, p in model.named_parameters() if n.endswith((".down", ".up"))]
    rest = [p for n, p in model.named_parameters() if not n.endswith((".down", ".up"))]
    groups = [{"params": rest, "lr": config.head_lr}]
    if projection:
        groups.append({"params": projection, "lr": config.head_lr / 10})
    return torch.optim.AdamW(groups, lr=config.head_lr, weight_decay=0.0)


def _state(module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _summarise(per_aspect: dict) -> dict:
    """The mean over aspects (with at least two validation documents) of the per-aspect metrics."""
    scored = [m for m in per_aspect.values() if m["n"] >= 2]
    summary = {k: float(np.mean([m[k] for m in scored])) if scored else float("nan")
               for k in ("agreement", "mean_rank", "mrr", "loss")}
    return {**summary, "aspects": per_aspect}


def new_unified(cache: FeatureCache, aspects, config) -> PooledAspectModel:
    """The unified model's untrained heads, one per aspect, on `cache`'s frozen backbone (seeded)."""
    torch.manual_seed(config.seed)
    model = PooledAspectModel(cache.backbone.name, aspects, hidden=cache.backbone.hidden_size,
                              pooling=cache.backbone.pooling, max_length=cache.backbone.max_length, pool=True,
                              rank=config.head_rank, seed=config.seed).train()
    model.cache = cache
    return model


def _supervision(doc_ids: Sequence[str], features: DocumentFeatures, targets, sentence_labels, aspects,
                 dim: int, unmarked: set = frozenset()) -> dict:
    """The training tensors of the given documents (features in the same order): inputs, labels, targets.
    Documents in `unmarked` teach through their targets only, with no sentence label, given or distant."""
    whole, sents, mask, pos = features.padded()
    m = sents.shape[1]
    dense, present = stack_targets(targets, doc_ids, dim)
    data = {"whole": whole, "sents": sents, "mask": mask, "pos": pos, "n": len(doc_ids), "counts": {},
            "labels": {}, "distant": {}, "target": {}, "has_target": {}}
    for a in aspects:
        # Given labels where they exist and cover this split of the abstract, else distant ones.
        given = [None if d in unmarked else _matching(sentence_labels.get(a, {}).get(d), len(s))
                 for d, s in zip(doc_ids, features.sentence_texts)]
        safe = np.where(present[a][:, None], dense[a], 0.0)
        distant = [None if g is not None or not present[a][i] or doc_ids[i] in unmarked else lab
                   for i, (g, lab) in enumerate(zip(given, distant_labels(features, safe)))]
        data["labels"][a] = _label_matrix(given, m)
        data["distant"][a] = _label_matrix(distant, m)
        data["target"][a] = torch.as_tensor(np.nan_to_num(dense[a]))
        data["has_target"][a] = torch.as_tensor(present[a])
        data["counts"][a] = {"with target": int(present[a].sum()),
                             "labelled docs": int(sum(g is not None for g in given)),
                             "distant-labelled docs": int(sum(x is not None and len(x) > 0 for x in distant))}
    return data


def _loss(model: PooledAspectModel, data: dict, rows: np.ndarray, config) -> tuple[torch.Tensor, dict]:
    """The training loss of a batch of documents (see module doc), summed over aspects."""
    idx = torch.as_tensor(rows)
    whole, sents, mask, pos = (data[k][idx] for k in ("whole", "sents", "mask", "pos"))
    parts = {}
    for a, head in model.heads.items():
        emb, _, scores = head(whole, sents, mask, pos)
        terms = []
        for weight, (values, present) in ((config.label_weight, data["labels"][a]),
                                          (config.distant_weight, data["distant"][a])):
            present = present[idx]
            if weight and present.any():
                terms.append(weight * F.binary_cross_entropy_with_logits(scores[present], values[idx][present]))
        has = data["has_target"][a][idx]
        if has.sum() >= 2:
            target = data["target"][a][idx][has]
            if config.kd_weight:
                terms.append(config.kd_weight * similarity_kd(emb[has], target, config.head_temperature))
            if config.nce_weight:
                terms.append(config.nce_weight * info_nce(emb[has], target, config.head_temperature))
        # L2 towards the untrained head (uniform weights, identity projection): the prior is the base encoder.
        terms.append(config.l2 * (head.scorer.penalty() + head.projection.penalty()))
        parts[a] = torch.stack([t.reshape(()) for t in terms]).sum()
    return torch.stack(list(parts.values())).sum(), {a: float(v.detach()) for a, v in parts.items()}


def _step(model, optimizer, data: dict, rng, config) -> tuple[float, dict]:
    """One AdamW step on all documents, or on a random batch of `head_batch_size` when there are more."""
    n = data["n"]
    rows = np.arange(n) if n <= config.head_batch_size else rng.choice(n, config.head_batch_size, replace=False)
    loss, parts = _loss(model, data, rows, config)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return float(loss.detach()), parts


def _matching(labels, n_sentences: int):
    """The labels as an array if they cover exactly this document's sentences, else None."""
    if labels is None or n_sentences < 1 or len(labels) != n_sentences:
        return None
    return np.asarray(labels, dtype=np.float32)


# --------------------------------------------------------------------------- supervision


def human_sentence_labels(corpus, aspects: Sequence[str], exclude_splits=("test",)) -> dict[str, dict[str, list[float]]]:
    """{aspect: {doc_id: [0/1 per sentence]}} from a corpus's `highlights_<aspect>` columns (ACLSum).

    Rows whose `split` is in `exclude_splits` (the test split: evaluation ground truth)
    are never read. A document whose highlights for an aspect lie entirely outside its
    abstract (in ACLSum's introduction or conclusion) gets all-zero labels: a human read it
    and marked none of its abstract's sentences.
    """
    docs = corpus.docs
    out: dict[str, dict[str, list[float]]] = {a: {} for a in aspects}
    allowed = ~docs["split"].isin(exclude_splits) if "split" in docs else np.ones(len(docs), dtype=bool)
    for i, ok in zip(docs.index, np.asarray(allowed)):
        if not ok or not isinstance(docs.at[i, "abstract"], str):
            continue
        sentences = split_sentences(docs.at[i, "abstract"])
        for a in aspects:
            column = f"highlights_{a}"
            if column in docs and isinstance(docs.at[i, column], (list, tuple, np.ndarray)):
                out[a][str(docs.at[i, "doc_id"])] = match_highlights(sentences, docs.at[i, column])
    return {a: v for a, v in out.items() if v}


def sentence_supervision(corpus, aspects: Sequence[str], run_dir=None, include_human: bool = True,
                         exclude_splits=("test",)) -> dict[str, dict[str, list[float]]]:
    """Every sentence label the run has: the LLM's (stage 01) and, where the corpus has them, human highlights.

    Where both exist for a document, they are averaged sentence by sentence (two
    annotators). The test split's human labels are never read.
    """
    merged: dict[str, dict[str, list[float]]] = {a: {} for a in aspects}
    sources = []
    if include_human:
        sources.append(human_sentence_labels(corpus, aspects, exclude_splits))
    if run_dir is not None and (Path(run_dir) / "sentence_labels.jsonl").is_file():
        try:
            from ..generate.sentence_labels import load_sentence_labels
        except ImportError:  # pragma: no cover - the module ships with the package
            load_sentence_labels = None
        if load_sentence_labels is not None:
            sources.append(load_sentence_labels(run_dir, corpus, aspects))
    for source in sources:
        for a, table in source.items():
            for d, lab in table.items():
                if d in merged[a] and len(merged[a][d]) == len(lab):
                    merged[a][d] = [(x + y) / 2 for x, y in zip(merged[a][d], lab)]
                else:
                    merged[a][d] = list(lab)
    return merged
