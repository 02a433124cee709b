"""Stage 03's feature pass (every abstract and sentence through the frozen MiniLM) in process and on Ray Data.

The first `--docs` CSAbstruct abstracts (text only) go through `LocalEngine` into one run's feature cache and
through `RayEngine` (a local `ray.init()`, or the cluster at `--address`; `--workers` actors) into another; the
script prints the seconds of each (Ray's start or join included, and apart), the texts a second, and the largest
difference between the vectors:

    .venv/bin/python benchmarks/ray_engine.py [--docs 2000] [--workers 2] [--address HOST:PORT] [--smoke]

`--recombined`: `--docs` abstracts made of CSAbstruct's sentences drawn at random, for sizes past its 2,155 (the
bar's 10,000). `--smoke`: 4 abstracts, 1 worker (Ray's start is most of its 30 s). The test suite runs the smoke against the
head its Ray tests start (tests/test_ray_engine.py), so that it pays for one Ray start, not two.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only (../shared/OFFLINE_ASSETS.md)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import numpy as np  # noqa: E402

from workbench.embed.engine import LocalEngine  # noqa: E402
from workbench.embed.engine_parts import document_texts  # noqa: E402
from workbench.embed.features import FeatureCache, frozen_backbone  # noqa: E402
from workbench.embed.ray_engine import RayEngine, ray_session  # noqa: E402

from _smoke import add_smoke  # noqa: E402


def recombined(rows: list[dict], n: int, seed: int = 0) -> list[str]:
    """n abstracts of as many sentences as a real one, each drawn at random from every CSAbstruct sentence: no
    10,000 real abstracts ship offline. The abstracts are new texts; their sentences repeat across them, so a
    pass encodes n abstracts and at most CSAbstruct's own sentences (about 15,000)."""
    rng = np.random.default_rng(seed)
    pool = [s for r in rows for s in r["sentences"]]
    lengths = rng.choice([len(r["sentences"]) for r in rows], size=n)
    return [" ".join(pool[i] for i in rng.choice(len(pool), size=k, replace=False)) for k in lengths]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--address", default=None, help="a running Ray head to join (default: a local ray.init())")
    parser.add_argument("--recombined", action="store_true",
                        help="--docs abstracts made of CSAbstruct's sentences drawn at random (past its 2,155)")
    add_smoke(parser, docs=4, workers=1)
    args = parser.parse_args()
    rows = [json.loads(line) for line in (ROOT / "data" / "csabstruct" / "csabstruct.jsonl").open()]
    texts = recombined(rows, args.docs) if args.recombined else [" ".join(r["sentences"]) for r in rows[:args.docs]]
    every = document_texts(texts)
    print(f"date {datetime.date.today()}, load {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs; "
          f"{len(texts)} abstracts, {len(set(every))} texts")
    backbone = frozen_backbone("minilm")
    runs = [tempfile.mkdtemp(prefix="bench-local-"), tempfile.mkdtemp(prefix="bench-ray-")]
    t0 = time.perf_counter()
    LocalEngine().encode_documents(FeatureCache.for_run(runs[0], backbone), texts)
    local = time.perf_counter() - t0
    t0 = time.perf_counter()
    ray_session(args.address, args.workers)
    start = time.perf_counter() - t0
    engine = RayEngine(args.address, workers=args.workers)
    t0 = time.perf_counter()
    engine.encode_documents(FeatureCache.for_run(runs[1], backbone), texts)
    remote = time.perf_counter() - t0
    a = FeatureCache.for_run(runs[0], backbone).vectors(every)
    b = FeatureCache.for_run(runs[1], backbone).vectors(every)
    n = len(set(every))
    diff = float(np.abs(a - b).max())
    print("| engine | seconds | texts/s | max abs diff |\n|---|---:|---:|---:|")
    print(f"| in process | {local:.1f} | {n / local:.1f} | |")
    print(f"| Ray, {args.workers} workers, pass | {remote:.1f} | {n / remote:.1f} | {diff:.2e} |")
    print(f"| Ray, with its {'join' if args.address else 'start'} ({start:.1f} s) | {remote + start:.1f} | {n / (remote + start):.1f} | |")
    print(f"every text once: {engine.computed == n}; throughput ratio Ray / in process {local / remote:.2f}x")

if __name__ == "__main__":
    main()
