"""Training steps per second: our aspect-model loop against sentence-transformers' trainer.

Both train the packaged MiniLM (all-MiniLM-L6-v2) on the SAME batches: B pairs of
ACLSum "challenge" views (human summary and highlighted sentences of the train split,
two different views per document, drawn by `workbench.train.sample_batch`), truncated to
the same max length, with an in-batch contrastive loss at the same temperature
(our `info_nce`, sentence-transformers' MultipleNegativesRankingLoss with scale 1/0.07),
AdamW at lr 1e-5 and weight decay 1e-4, CLS pooling and a bias-free Linear(384 -> 150)
head on both sides. sentence-transformers runs twice: with its default AdamW, and with
the fused AdamW our loop uses, to show how much of the difference the optimiser is.
The heads are initialised independently (same distribution) and dropout draws differ,
so the printed losses agree in size, not digit for digit. Timed: the wall time between the end of warm-up step W and the end of
the last step (so data loading, tokenisation, forward, backward and optimiser are all in),
in one process, alternating the systems for --rounds rounds (the median is reported, all
rounds are printed: on a shared machine the spread is the honest error bar):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/train.py [--batch 16] [--steps 10] [--warmup 2]
        [--max-length 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from workbench.corpus import load_corpus  # noqa: E402
from workbench.models import resolve_model  # noqa: E402
from workbench.train import (TrainConfig, make_accelerator, prepare_training, prepare_views,  # noqa: E402
                             sample_batch, train_step)

ASPECT = "challenge"


def make_batches(n_batches: int, batch: int, seed: int = 0) -> list[list[tuple[str, str, str]]]:
    """n_batches batches of (doc_id, view_a, view_b) from ACLSum's train split, as our loop draws them."""
    views, train_ids, _ = prepare_views([ASPECT], None, load_corpus("aclsum"), val_split="validation")
    rng = random.Random(seed)
    return [sample_batch(views[ASPECT], train_ids, batch, rng) for _ in range(n_batches)]


def time_ours(batches, config: TrainConfig, warmup: int) -> tuple[float, list[float]]:
    """(steps per second after warm-up, losses) of workbench.train.train_step."""
    accelerator = make_accelerator("cpu")
    model, optimizer = prepare_training(ASPECT, config, accelerator)
    model.train()
    ends, losses = [], []
    for pairs in batches:
        losses.append(train_step(model, optimizer, accelerator, pairs, ASPECT, config))
        ends.append(time.perf_counter())
    return (len(batches) - warmup) / (ends[-1] - ends[warmup - 1]), losses


def time_sentence_transformers(batches, config: TrainConfig, warmup: int, fused: bool = False):
    """(steps per second after warm-up, losses) of sentence-transformers' fit loop on the same pairs.

    `SentenceTransformer.old_fit` is the library's classic `fit` training loop (the new
    `fit` wraps SentenceTransformerTrainer, which needs the `datasets` package the
    workbench does not install). It keeps its own defaults: AdamW (torch's default
    implementation unless fused=True), gradient-norm clipping at 1, no weight decay on
    biases and LayerNorm.
    """
    from sentence_transformers import InputExample, SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer
    from torch.utils.data import DataLoader

    torch.manual_seed(config.seed)
    path = str(resolve_model(config.base_model).path)
    transformer = Transformer(path, max_seq_length=config.max_length)
    hidden = transformer.get_embedding_dimension()
    head = Dense(hidden, config.dim, bias=False, activation_function=torch.nn.Identity())
    torch.nn.init.normal_(head.linear.weight, std=config.head_std)
    model = SentenceTransformer(modules=[transformer, Pooling(hidden, pooling_mode="cls"), head], device="cpu")
    # Our batches in our order (shuffle=False), so both systems see the same texts per step.
    examples = [InputExample(texts=[a, p]) for b in batches for _, a, p in b]
    loader = DataLoader(examples, batch_size=len(batches[0]), shuffle=False)
    ends, losses = [], []

    class TimedAdamW(torch.optim.AdamW):
        def step(self, *args, **kwargs):
            out = super().step(*args, **kwargs)
            ends.append(time.perf_counter())
            return out

    class RecordedLoss(MultipleNegativesRankingLoss):
        def forward(self, *args, **kwargs):
            loss = super().forward(*args, **kwargs)
            losses.append(float(loss.detach()))
            return loss

    params = {"lr": config.lr, **({"fused": True} if fused else {})}
    model.old_fit(train_objectives=[(loader, RecordedLoss(model, scale=1.0 / config.temperature))], epochs=1,
                  steps_per_epoch=len(batches), scheduler="constantlr", warmup_steps=0, optimizer_class=TimedAdamW,
                  optimizer_params=params, weight_decay=config.weight_decay, show_progress_bar=False)
    return (len(ends) - warmup) / (ends[-1] - ends[warmup - 1]), losses


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16, help="pairs per step")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the systems")
    args = parser.parse_args(argv)

    config = TrainConfig(batch_size=args.batch, max_length=args.max_length, device="cpu")
    batches = make_batches(args.warmup + args.steps, args.batch)
    systems = {
        "ours (workbench.train.train_step: Accelerate, fused AdamW)":
            lambda: time_ours(batches, config, args.warmup),
        "sentence-transformers fit + MNRL (default AdamW)":
            lambda: time_sentence_transformers(batches, config, args.warmup),
        "sentence-transformers fit + MNRL (fused AdamW)":
            lambda: time_sentence_transformers(batches, config, args.warmup, fused=True),
    }
    rates = {name: [] for name in systems}
    load_before = os.getloadavg()
    for r in range(args.rounds):
        for name, run in systems.items():
            rate, losses = run()
            rates[name].append(rate)
            print(f"round {r + 1}: {name}: {rate:.3f} steps/s (losses of the first 3 steps "
                  f"{[round(x, 3) for x in losses[:3]]})", flush=True)

    tokens = sum(len(t) for b in batches[args.warmup:] for _, a, p in b for t in (a, p)) / args.steps
    medians = {name: statistics.median(r) for name, r in rates.items()}
    ours_m = next(iter(medians.values()))
    print()
    print(f"date: {datetime.date.today()}  machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads); load average (1 min) "
          f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"setup: packaged MiniLM-L6, {args.batch} pairs/step of ACLSum '{ASPECT}' views "
          f"(~{tokens:.0f} characters per step), max_length {args.max_length}, {args.steps} timed steps after "
          f"{args.warmup} warm-up, {args.rounds} rounds, median")
    print()
    print("| system | steps/s (median) | all rounds | ratio to ours |")
    print("|---|---|---|---|")
    for name, m in medians.items():
        print(f"| {name} | {m:.3f} | {', '.join(f'{x:.3f}' for x in rates[name])} | {m / ours_m:.2f} |")


if __name__ == "__main__":
    main()
