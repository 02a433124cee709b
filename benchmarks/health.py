"""Health check of a run's aspect heads (issue 13): geometry, shared variance, hard-negative probe, and its time.

Loads what notebook 06 has at hand (the held-out ACLSum test papers, the unified model's
embeddings of them, the base encoder's whole-abstract embedding), runs
`workbench.measures.health` on them and prints the report, the reading and the seconds each part
took. The goal: the whole check under ~30 s on 2 cores for the 100 test papers, so that it
can live in notebook 06.

The probe's swapped abstracts are new texts. A frozen-backbone model would add their
vectors to the run's feature cache; this script keeps them in memory, so it writes
nothing into the run directory and every run pays the full encoding cost (the first-run
time a notebook would see).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/health.py [--run runs/aclsum-demo] [--pairs 50] [--json out.json]
        [--smoke]

--smoke (or WORKBENCH_BENCH_SMOKE=1): a tiny run with untrained heads built in a temporary folder
(10 test papers), 2 probe pairs per aspect, to check that it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from workbench.embed.checkpoints import load_model  # noqa: E402
from workbench.data.corpus import load_corpus  # noqa: E402
from workbench.embed.embeddings import embed_corpus  # noqa: E402
from workbench.measures.health import (corpus_sentence_aspects, hard_negative_probe, health_reading,  # noqa: E402
                                       health_report)
from workbench.evaluate.report import backbone_of, evaluation_corpus, probe_encoder  # noqa: E402

from _smoke import SMOKE_CORPUS, add_smoke, tiny_run  # noqa: E402
from workbench.core.rundir import RunDir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default=str(Path(__file__).resolve().parents[1] / "runs" / "aclsum-demo"),
                        help="a finished run (smoke mode: a tiny run made in a temporary folder)")
    parser.add_argument("--corpus", default="aclsum")
    parser.add_argument("--pairs", type=int, default=50, help="probe pairs per aspect")
    parser.add_argument("--json", help="also write the report here")
    add_smoke(parser, run=None, corpus=SMOKE_CORPUS, pairs=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-health-") as tmp:
        if args.run is None:  # smoke mode
            args.run = str(tiny_run(Path(tmp) / "run", args.corpus))
        check(args)


def check(args) -> None:
    run_dir = Path(args.run)
    print(f"load average at start: {os.getloadavg()}")

    t0 = time.perf_counter()
    docs, _ = load_corpus(args.corpus).drop_invalid()
    held = evaluation_corpus(docs, run_dir, "test")
    model = load_model(RunDir(run_dir).unified_model, run_dir=run_dir)
    names = model.aspects
    embeddings = embed_corpus(RunDir(run_dir).unified_model, held, run_dir, progress=False)
    backbone = backbone_of(run_dir)
    if getattr(model, "cache", None) is not None:
        model.cache.folder = None  # keep the probe's new texts in memory: write nothing into the run
    encode = probe_encoder(model, backbone)
    # The base encoder's whole-abstract vectors (notebook 06's section 4 backbone, max_length 256): for a
    # frozen-backbone model they sit in the feature cache; otherwise this encodes the abstracts.
    base = encode(held.texts())["base"]
    t1 = time.perf_counter()
    if hasattr(model, "backbone") and callable(model.backbone):
        model.backbone().encoder()  # load the transformer now, so the probe's time is the probe's
    t1b = time.perf_counter()

    labels = corpus_sentence_aspects(held, names, run_dir)
    t2 = time.perf_counter()
    probe = hard_negative_probe(held.texts(), labels, encode, n_pairs=args.pairs)
    t3 = time.perf_counter()
    report = health_report(embeddings, base=base, probe=probe)
    reading = health_reading(report)
    t4 = time.perf_counter()

    shown = {k: v for k, v in report.items() if k != "probe"}
    shown["probe"] = {k: v for k, v in probe.items() if k != "pairs"}
    print(json.dumps(shown, indent=1))
    print("\nreading:")
    for line in reading:
        print(" -", line)
    print(f"\n{len(held)} papers, {sum(probe['n_pairs'].values())} probe pairs {probe['n_pairs']}")
    print(f"load (corpus, model, cached embeddings, base vectors): {t1 - t0:.1f} s; backbone load {t1b - t1:.1f} s")
    print(f"health check: {t4 - t1b:.1f} s  (sentence labels {t2 - t1b:.1f} s, probe {t3 - t2:.1f} s, "
          f"report + reading {t4 - t3:.1f} s)")
    print(f"load average at end: {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps({**report, "reading": reading}, indent=1, allow_nan=False) + "\n")


if __name__ == "__main__":
    main()
