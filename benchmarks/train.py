"""Stage 02 training: steps per second against sentence-transformers, and seconds to the best score per mode.

Part 1 (skip with --skip-steps-per-second): training steps per second of our aspect-model loop
against sentence-transformers' trainer.

Both train the packaged MiniLM (all-MiniLM-L6-v2) on the SAME batches: B pairs of
ACLSum "challenge" views (human summary and highlighted sentences of the train split,
two different views per document, drawn by `workbench.embed.aspect_training.sample_batch`), truncated to
the same max length, with an in-batch contrastive loss at the same temperature
(our `info_nce`, sentence-transformers' MultipleNegativesRankingLoss with scale 1/0.07),
AdamW at lr 1e-5 and weight decay 1e-4, CLS pooling and a bias-free Linear(384 -> 150)
head on both sides. sentence-transformers runs twice: with its default AdamW, and with
the fused AdamW our loop uses, to show how much of the difference the optimiser is.
The heads are initialised independently (same distribution) and dropout draws differ,
so the printed losses agree in size, not digit for digit. Timed: the wall time between the
end of warm-up step W and the end of the last step (so data loading, tokenisation, forward,
backward and optimiser are all in),
in one process, alternating the systems for --rounds rounds (the median is reported, all
rounds are printed: on a shared machine the spread is the honest error bar).

Part 2 (on by default, --no-modes skips it): seconds each mode needs to reach its best
validation score, CPU-first ("frozen") against full fine-tuning ("finetune"), on the CPU.
ACLSum, aspect "challenge", human views, the validation split held out, MiniLM with mean
pooling. Each mode runs in a fresh temporary run directory (nothing cached, the model loaded
from disk again):

* stage 02, the aspect model: frozen = the frozen encoder's feature cache of every view plus
  a residual low-rank head (--head-steps, validation every --head-eval-every); finetune =
  the encoder fine-tuned (lr 5e-5, batch 16, max length 64, --finetune-steps, validation
  every --eval-every). Both select by validation MRR;
* stage 03, the unified model, from that run's own teachers: frozen = sentence-pooling heads
  (`DistillConfig(mode="frozen")` defaults, --unified-head-steps), selected by agreement
  with the teacher's similarities; finetune = the encoder distilled (max length 256,
  --distill-max-length, batch 16, --distill-steps, validation every --eval-every), selected by mean rank of the
  true target. Both also report the MRR of the true target.

The clock of a stage starts when the stage is called in the fresh run directory. It
includes everything before the first training step: loading the model, collecting the
views, and in frozen mode encoding every text once into the feature cache (views in
stage 02; abstracts and their sentences in stage 03); stage 03's clock also includes
computing the teachers' targets. "s to best" = that set-up time + the training loop's own
clock (`seconds` of its history) at the evaluation that found the best checkpoint, so a
frozen run whose best is step 0 (the frozen encoder itself) reaches it right after the
encoding. "total s" also includes the evaluations after the best and, in frozen stage 03,
the final refit on train + validation.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/train.py [--batch 16] [--steps 10] [--warmup 2]
        [--max-length 128] [--rounds 3] [--skip-steps-per-second] [--no-modes]
        [--head-steps 300] [--head-eval-every 10] [--finetune-steps 60] [--eval-every 10]
        [--unified-head-steps 400] [--distill-steps 40] [--distill-max-length 256]
        [--corpus aclsum] [--smoke]

--smoke (or WORKBENCH_BENCH_SMOKE=1): part 1 with 1 warm-up and 1 timed step of 2 pairs at max
length 16, 1 round; part 2 on 4 train and 4 validation papers with 2 steps per stage and mode,
validation every step, stage 03 distilled at max length 32; to check that it runs.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from workbench.embed import features  # noqa: E402
from workbench.data.corpus import load_corpus  # noqa: E402
from workbench.embed.distill import DistillConfig, documents_with_targets, train_unified_model  # noqa: E402
from workbench.embed.targets import compute_targets  # noqa: E402
from workbench.embed.head_training import sentence_supervision  # noqa: E402
from workbench.core.models import resolve_model  # noqa: E402
from workbench.embed.aspect_training import (TrainConfig, make_accelerator, prepare_training, prepare_views,  # noqa: E402
                             sample_batch, train_aspect_models, train_step)
from workbench.generate.views import collect_views, split_documents  # noqa: E402

from _smoke import add_smoke  # noqa: E402
from workbench.core.rundir import RunDir

ASPECT = "challenge"


def make_batches(n_batches: int, batch: int, seed: int = 0, corpus: str = "aclsum") -> list[list[tuple[str, str, str]]]:
    """n_batches batches of (doc_id, view_a, view_b) from the corpus's (ACLSum's) train split, as our loop draws them."""
    views, train_ids, _ = prepare_views([ASPECT], None, load_corpus(corpus), val_split="validation")
    rng = random.Random(seed)
    return [sample_batch(views[ASPECT], train_ids, batch, rng) for _ in range(n_batches)]


def time_ours(batches, config: TrainConfig, warmup: int) -> tuple[float, list[float]]:
    """(steps per second after warm-up, losses) of workbench.embed.aspect_training.train_step."""
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


def machine_line(load_before: tuple[float, float, float]) -> str:
    """Date, CPU, torch and the 1-minute load average before and now."""
    return (f"date: {datetime.date.today()}  machine: {platform.machine()}, {os.cpu_count()} CPUs, "
            f"torch {torch.__version__} ({torch.get_num_threads()} threads); load average (1 min) "
            f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")


def steps_per_second(args) -> None:
    """Part 1: steps per second of our loop and of sentence-transformers' fit, alternated for args.rounds."""
    config = TrainConfig(batch_size=args.batch, max_length=args.max_length, device="cpu")
    batches = make_batches(args.warmup + args.steps, args.batch, corpus=args.corpus)
    systems = {
        "ours (workbench.embed.aspect_training.train_step: Accelerate, fused AdamW)":
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
    print(machine_line(load_before))
    print(f"setup: packaged MiniLM-L6, {args.batch} pairs/step of ACLSum '{ASPECT}' views "
          f"(~{tokens:.0f} characters per step), max_length {args.max_length}, {args.steps} timed steps after "
          f"{args.warmup} warm-up, {args.rounds} rounds, median")
    print()
    print("| system | steps/s (median) | all rounds | ratio to ours |")
    print("|---|---|---|---|")
    for name, m in medians.items():
        print(f"| {name} | {m:.3f} | {', '.join(f'{x:.3f}' for x in rates[name])} | {m / ours_m:.2f} |")


# --------------------------------------------------------------------------- part 2: the two modes


MODES = ("frozen", "finetune")


def forget_loaded_backbones() -> None:
    """Drop the frozen backbones `workbench.embed.features` keeps loaded, so each frozen run loads its encoder again."""
    features.LOADED.clear()


def timeline(rows: list[dict], best_step: int, wall: float, loop_seconds: float) -> dict:
    """Seconds to the best evaluation on the stage's wall clock.

    rows: the stage's evaluations ({"step", "seconds", ...}; "seconds" on the training loop's
    own clock, which starts just before the step-0 evaluation). `setup` = the wall time of the
    whole call minus the loop's clock: everything before the loop (loading, views, feature
    encoding, targets) plus the few milliseconds of writing files after it.
    """
    setup = wall - loop_seconds
    best = next(r for r in rows if r["step"] == best_step)
    return {"rows": rows, "best": best, "step0": rows[0], "setup": setup,
            "to_best": setup + best["seconds"], "total": wall, "steps": rows[-1]["step"]}


def stage02_config(mode: str, args) -> TrainConfig:
    """The aspect model's settings: the frozen head's step budget, or the demo's fine-tuning recipe."""
    common = {"base_model": "minilm", "pooling": "mean", "device": "cpu", "mode": mode}
    if mode == "frozen":
        return TrainConfig(**common, head_steps=args.head_steps, eval_every=args.head_eval_every)
    return TrainConfig(**common, lr=5e-5, batch_size=16, max_length=64, max_steps=args.finetune_steps,
                       eval_every=args.eval_every)


def run_stage02(mode: str, run_dir: Path, corpus, args) -> dict:
    """Stage 02 for ASPECT in a fresh run directory; the timeline of its validation MRR."""
    config = stage02_config(mode, args)
    forget_loaded_backbones()
    start = time.perf_counter()
    result = train_aspect_models([ASPECT], run_dir, corpus, config, val_split="validation", progress=False)[ASPECT]
    wall = time.perf_counter() - start
    rows = [{"step": h["step"], "score": h["val_mrr"], "mrr": h["val_mrr"], "seconds": h["seconds"]}
            for h in result.history]
    return timeline(rows, result.best_step, wall, result.seconds)


def stage03_config(mode: str, args) -> DistillConfig:
    """The unified model's settings: frozen heads (defaults) or the encoder distilled at --distill-max-length."""
    if mode == "frozen":
        return DistillConfig(mode="frozen", base_model="minilm", pooling="mean", device="cpu",
                             head_steps=args.unified_head_steps)
    return DistillConfig(mode="finetune", base_model="minilm", pooling="mean", max_length=args.distill_max_length,
                         batch_size=16, max_steps=args.distill_steps, eval_every=args.eval_every, device="cpu")


def run_stage03(mode: str, run_dir: Path, corpus, args) -> dict:
    """Stage 03 (targets from the run's stage-02 teacher, then training); the timeline of its selection score.

    The score is the mode's own selection metric: agreement (frozen, higher is better) or
    the mean rank of the true target (finetune, lower is better); "mrr" is the true
    target's MRR, which both report.
    """
    config = stage03_config(mode, args)
    forget_loaded_backbones()
    start = time.perf_counter()
    views = collect_views([ASPECT], run_dir, corpus)
    targets = compute_targets(run_dir, views, [ASPECT], progress=False)
    train_ids, val_ids = split_documents(sorted(documents_with_targets(targets)), corpus, "validation")
    labels = sentence_supervision(corpus, [ASPECT], run_dir) if mode == "frozen" else None
    before_call = time.perf_counter() - start
    result = train_unified_model(corpus, targets, (train_ids, val_ids), RunDir(run_dir).unified_model, config,
                                 progress=False, run_dir=run_dir, sentence_labels=labels)
    wall = time.perf_counter() - start
    metric = "agreement" if mode == "frozen" else "mean_rank"
    rows = [{"step": h["step"], "score": h[metric], "mrr": h["mrr"], "seconds": h["seconds"]}
            for h in result.history["eval"]]
    out = timeline(rows, result.best_step, wall, result.seconds)
    out.update(metric=metric, targets=before_call)
    return out


def run_mode(mode: str, corpus, args) -> dict:
    """Stages 02 and 03 of one mode in a fresh temporary run directory (removed afterwards)."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"bench-train-{mode}-"))
    try:
        s02 = run_stage02(mode, run_dir, corpus, args)
        print(f"{mode} stage 02: best MRR {s02['best']['score']:.3f} at step {s02['best']['step']}, "
              f"{s02['to_best']:.1f} s to best, {s02['total']:.1f} s in all", flush=True)
        s03 = run_stage03(mode, run_dir, corpus, args)
        print(f"{mode} stage 03: best {s03['metric']} {s03['best']['score']:.3f} at step {s03['best']['step']}, "
              f"{s03['to_best']:.1f} s to best, {s03['total']:.1f} s in all", flush=True)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return {"02": s02, "03": s03}


def ratio_line(results: dict, stage: str) -> str:
    """finetune / frozen seconds to the best, and in all."""
    fine, frozen = results["finetune"][stage], results["frozen"][stage]
    return (f"finetune / frozen: seconds to best {fine['to_best'] / frozen['to_best']:.1f}x, "
            f"total seconds {fine['total'] / frozen['total']:.1f}x")


def print_stage02(results: dict, args) -> None:
    """The stage-02 table: validation MRR at step 0 and best, when the best came, and the ratio."""
    print(f"\nstage 02, aspect model ('{ASPECT}'): validation MRR (first view -> second view of each held-out paper)")
    print(f"budgets: frozen {args.head_steps} head steps, validation every {args.head_eval_every}; "
          f"finetune {args.finetune_steps} steps (lr 5e-5, batch 16, max length 64), validation every "
          f"{args.eval_every}; early stopping after 5 evaluations without improvement")
    print()
    print("| mode | MRR step 0 | best MRR | best step | steps run | set-up s (before step 0) | s to best | total s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for mode, r in results.items():
        s = r["02"]
        print(f"| {mode} | {s['step0']['score']:.3f} | {s['best']['score']:.3f} | {s['best']['step']} | "
              f"{s['steps']} | {s['setup']:.1f} | {s['to_best']:.1f} | {s['total']:.1f} |")
    print(ratio_line(results, "02"))
    frozen = results["frozen"]["02"]
    if frozen["best"]["step"] == 0:
        print(f"(the frozen run's best is step 0, the frozen encoder itself: it is reached as soon as the views "
              f"are encoded, {frozen['setup']:.1f} s; training the head did not beat it on validation)")


def print_stage03(results: dict) -> None:
    """The stage-03 table: each mode's selection metric and the true target's MRR, and when the best came."""
    print("\nstage 03, unified model from the run's own teachers: selection metric (frozen: agreement with the "
          "teacher's similarities, higher is better; finetune: mean rank of the true target, lower is better) "
          "and the true target's MRR")
    print()
    print("| mode | selected by | at step 0 | at best | target MRR step 0 | target MRR at best | best step | "
          "steps run | set-up s (targets, encoding) | s to best | total s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode, r in results.items():
        s = r["03"]
        print(f"| {mode} | {s['metric']} | {s['step0']['score']:.3f} | {s['best']['score']:.3f} | "
              f"{s['step0']['mrr']:.3f} | {s['best']['mrr']:.3f} | {s['best']['step']} | {s['steps']} | "
              f"{s['setup']:.1f} | {s['to_best']:.1f} | {s['total']:.1f} |")
    print(ratio_line(results, "03"))
    print("(targets differ between the modes: each distils its own teachers, so the scores compare the "
          "students with their teachers, not the modes with each other)")


def compare_modes(args) -> None:
    """Part 2: stages 02 and 03 in each mode, seconds to the best validation score."""
    load_before = os.getloadavg()
    corpus = load_corpus(args.corpus)
    results = {mode: run_mode(mode, corpus, args) for mode in MODES}
    print()
    print(machine_line(load_before))
    print("clock: wall time from calling the stage in a fresh run directory (model loading, view collection, "
          "feature-cache encoding in frozen mode, stage 03's targets included)")
    print_stage02(results, args)
    print_stage03(results)
    for mode, r in results.items():
        print(f"{mode}: stages 02 + 03 in {r['02']['total'] + r['03']['total']:.1f} s")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16, help="pairs per step (part 1)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps (part 1)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (part 1)")
    parser.add_argument("--max-length", type=int, default=128, help="part 1")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the systems (part 1)")
    parser.add_argument("--skip-steps-per-second", action="store_true", help="skip part 1")
    parser.add_argument("--modes", action=argparse.BooleanOptionalAction, default=True,
                        help="part 2: seconds to the best validation score, frozen against finetune")
    parser.add_argument("--head-steps", type=int, default=300, help="frozen stage 02 head steps")
    parser.add_argument("--head-eval-every", type=int, default=10, help="frozen stage 02 validation interval")
    parser.add_argument("--finetune-steps", type=int, default=60, help="finetune stage 02 steps")
    parser.add_argument("--eval-every", type=int, default=10, help="finetune stages 02 and 03 validation interval")
    parser.add_argument("--unified-head-steps", type=int, default=400, help="frozen stage 03 head steps")
    parser.add_argument("--distill-steps", type=int, default=40, help="finetune stage 03 steps")
    parser.add_argument("--distill-max-length", type=int, default=256, help="finetune stage 03 max length")
    parser.add_argument("--corpus", default="aclsum", help="ACLSum (default), or a part of it: aclsum:train[:50],...")
    add_smoke(parser, argv, batch=2, steps=1, warmup=1, max_length=16, rounds=1, head_steps=2, head_eval_every=1,
              finetune_steps=2, eval_every=1, unified_head_steps=2, distill_steps=2,
              distill_max_length=32, corpus="aclsum:train[:4],validation[:4]")
    args = parser.parse_args(argv)

    if not args.skip_steps_per_second:
        steps_per_second(args)
    if args.modes:
        compare_modes(args)


if __name__ == "__main__":
    main()
