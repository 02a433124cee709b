"""Train one aspect model from the command line, in one or several processes.

The same `workbench.embed.aspect_training.train_aspect_model` as notebook 02, started by a launcher:

    # two CPU processes (gloo) on one machine
    torchrun --nproc_per_node 2 scripts/train_ddp.py --run-dir runs/aclsum-demo --aspect challenge
    # or through Accelerate's launcher (e.g. several GPUs)
    accelerate launch --num_processes 2 scripts/train_ddp.py --run-dir runs/aclsum-demo --aspect challenge
    # or plainly, one process
    python scripts/train_ddp.py --run-dir runs/aclsum-demo --aspect challenge

Views are the run's LLM summaries plus (unless --no-human) the corpus's human views of
its non-test splits. The model goes to --out (default <run-dir>/aspect_models/<aspect>).
Every process also writes `<out>/rank<k>.json` with a checksum of the weights it holds
at the end (float64 sum of all parameters and a hash of a few tensors): after DDP
training all processes must hold identical weights, which the test suite checks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def weight_checksum(model) -> dict:
    """Float64 sum and absolute sum of all parameters, and a SHA-256 of the heads and a few backbone tensors."""
    import torch

    params = list(model.named_parameters())
    total = sum(float(p.detach().double().sum()) for _, p in params)
    absolute = sum(float(p.detach().double().abs().sum()) for _, p in params)
    picked = [(n, p) for n, p in params if n.startswith("heads.")] + params[:2] + params[-4:]
    digest = hashlib.sha256()
    for name, p in picked:
        digest.update(name.encode())
        digest.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return {"param_sum": total, "param_abs_sum": absolute, "sha256": digest.hexdigest(),
            "hashed": [n for n, _ in picked]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True, help="run directory whose summaries.jsonl feeds the views")
    parser.add_argument("--aspect", required=True)
    parser.add_argument("--corpus", default="aclsum", help="corpus for human views and the split; 'none' for none")
    parser.add_argument("--out", default=None, help="model folder (default <run-dir>/aspect_models/<aspect>)")
    parser.add_argument("--val-split", default="validation", help="corpus split held out for validation")
    parser.add_argument("--val-docs", type=float, default=0.2, help="held-out share when the corpus has no split")
    parser.add_argument("--no-human", action="store_true", help="LLM summaries only")
    parser.add_argument("--max-train-docs", type=int, default=None, help="keep only the first N training documents")
    parser.add_argument("--max-val-docs", type=int, default=None, help="keep only the first N validation documents")
    parser.add_argument("--config", default=None, help="a JSON file of TrainConfig fields; flags below override it")
    for name, kind in [("base-model", str), ("pooling", str), ("dim", int), ("max-length", int),
                       ("temperature", float), ("lr", float), ("weight-decay", float), ("batch-size", int),
                       ("max-steps", int), ("eval-every", int), ("patience", int), ("seed", int),
                       ("device", str), ("mixed-precision", str)]:
        parser.add_argument(f"--{name}", type=kind, default=None)
    args = parser.parse_args(argv)

    from workbench.core.rundir import RunDir
    from workbench.embed.aspect_training import TrainConfig, prepare_views, train_aspect_model

    settings = json.loads(Path(args.config).read_text()) if args.config else {}
    for key, value in vars(args).items():
        if value is not None and key in TrainConfig.__dataclass_fields__:
            settings[key] = value
    config = TrainConfig.from_dict(settings)
    corpus = None if args.corpus.lower() == "none" else args.corpus
    views, train_ids, val_ids = prepare_views([args.aspect], args.run_dir, corpus, val_split=args.val_split,
                                              val_docs=args.val_docs, include_human=not args.no_human,
                                              seed=config.seed)
    train_ids = train_ids[:args.max_train_docs] if args.max_train_docs else train_ids
    val_ids = val_ids[:args.max_val_docs] if args.max_val_docs else val_ids
    out = Path(args.out or RunDir(args.run_dir).aspect_model(args.aspect))

    result = train_aspect_model(views[args.aspect], train_ids, val_ids, out, config, keep_model=True)

    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    out.mkdir(parents=True, exist_ok=True)
    report = {"rank": rank, "world_size": world, **weight_checksum(result.model),
              "best_step": result.best_step, "best_mrr": result.best_mrr, "history": result.history}
    (out / f"rank{rank}.json").write_text(json.dumps(report, indent=2) + "\n")
    if rank == 0:
        print(f"{args.aspect}: MRR {result.baseline['val_mrr']:.3f} at step 0 -> best {result.best_mrr:.3f} "
              f"at step {result.best_step}; {world} process(es); model in {out}")
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
