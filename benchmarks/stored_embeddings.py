"""Peak memory of stage 03's embedding pass and stage 05's feature read at two corpus sizes: embeddings kept on
disk (written part by part, read as memory maps and blocks) against the whole corpus in memory, as before.

Synthetic abstracts of four sentences that share no sentence (`abstracts`); a unified model of three untrained
pooling heads (`PooledAspectModel`, MiniLM's 384 dimensions); in place of MiniLM a hashed stand-in backbone (a
word's vector is a fixed random one, a text's the unit sum of its words'): a real encoder reads a few dozen
abstracts a second on 2 cores, far too slow for 100,000, and the encoder's own memory does not grow with the
corpus. Each size and way runs in a fresh process, which reports its peak resident memory (VmHWM, reset by
/proc/self/clear_refs between the two stages) and its peak anonymous memory (RssAnon, sampled every 10 ms:
VmHWM also counts the pages of a memory-mapped file the process touched, which the kernel may drop):

* "on disk": `stored_embeddings` with the in-process engine (a part per 2,048 papers, the entry written from
  the parts by blocks); then stage 05's read as `Explorer` does it: the memory maps into `AspectMap` (its checks)
  and `pca_init` over `AspectMap.feature_rows` (the fit's first pass over the features), and one pass of
  `StoredEmbeddings.blocks`;
* "in memory": as before, every paper through the model at once (one part of the whole corpus), the entry read
  whole (`embed_corpus`), the Explorer's unit copy of it, then the same `AspectMap` and `pca_init`.

    .venv/bin/python benchmarks/stored_embeddings.py [--sizes 20000 100000] [--smoke]

`--smoke`: 300 and 600 papers, 32 dimensions, each in this process.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from _machine import matmul_gflops  # noqa: E402
from _smoke import add_smoke  # noqa: E402

ASPECTS = ["challenge", "approach", "outcome"]
VOCABULARY = 2000  # words of the synthetic abstracts: the stand-in backbone's table stays this size
WAYS = ("on disk", "in memory")
BAR_RATIO, BAR_GB = 1.3, 6.0  # the bar: the larger corpus's peak at most 1.3 times the smaller's, and 6 GB


def abstracts(n: int) -> list[str]:
    """n abstracts of four sentences; sentence j of paper i names i and j in words, so no two are the same."""
    rng = np.random.default_rng(0)
    topics = rng.integers(0, VOCABULARY, size=(n, 4, 3))
    return [" ".join(f"Paper w{i // VOCABULARY} w{i % VOCABULARY} part w{j} studies w{a} with w{b} and w{c}."
                     for j, (a, b, c) in enumerate(topics[i])) for i in range(n)]


class HashedWords:
    """The stand-in frozen backbone: a fixed random vector per word (a table of VOCABULARY + a few), a text's
    vector the unit sum of its words'."""

    name, pooling, max_length, key = "hashed-words", "mean", 256, "hashed-words"

    def __init__(self, dim: int):
        self.hidden_size, self.ids, self.table = dim, {}, np.random.default_rng(1).standard_normal((4096, dim))

    def embed(self, texts, batch_size: int = 32, progress: bool = False) -> np.ndarray:
        out = np.empty((len(texts), self.hidden_size), np.float32)
        for i, text in enumerate(texts):
            ids = [self.ids.setdefault(w, len(self.ids) % len(self.table)) for w in text.lower().split()]
            v = self.table[ids].sum(axis=0)
            out[i] = v / max(float(np.linalg.norm(v)), 1e-12)
        return out


class Peaks:
    """This process's peak resident memory (VmHWM) and a sampled peak of its anonymous memory (RssAnon), in MB."""

    def __init__(self):
        self.anon, self.stop = 0.0, threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    @staticmethod
    def status(field: str) -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field + ":"))

    def _sample(self) -> None:
        while not self.stop.wait(0.01):
            self.anon = max(self.anon, self.status("RssAnon"))

    def take(self) -> dict:
        """The peaks since the last take, then both reset."""
        out = {"hwm": self.status("VmHWM"), "anon": max(self.anon, self.status("RssAnon"))}
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        self.anon = self.status("RssAnon")
        return out


def child(n: int, way: str, dim: int, folder: str) -> dict:
    """One size and way in this (fresh) process: seconds and peaks of each stage."""
    from workbench.embed import embeddings as embeddings_module
    from workbench.embed.engine import LocalEngine
    from workbench.embed.features import FeatureCache
    from workbench.embed.heads import PooledAspectModel
    from workbench.core.rundir import RunDir

    run = RunDir(folder)
    PooledAspectModel("hashed-words", ASPECTS, hidden=dim, pool=True).save_pretrained(run.unified_model)
    load = embeddings_module.load_model

    def stand_in(*args, **kwargs):  # the model reads the run's feature cache through the stand-in backbone
        model = load(*args, **kwargs)
        model.cache = FeatureCache.for_run(run, HashedWords(dim))
        return model

    embeddings_module.load_model = stand_in
    try:
        return _stages(n, way, dim, run, embeddings_module, LocalEngine)
    finally:
        embeddings_module.load_model = load


def _stages(n: int, way: str, dim: int, run, embeddings_module, LocalEngine) -> dict:
    """Stage 03's pass and stage 05's read of n synthetic papers in `run`, timed, with the peaks of each."""
    import pandas as pd

    from workbench.data.corpus import Corpus
    from workbench.maps.tsne import AspectMap
    from workbench.maps.tsne_math import pca_init, unit32
    from workbench.core.vectors import unit_rows

    texts = abstracts(n)
    corpus = Corpus(pd.DataFrame({"doc_id": [f"p{i}" for i in range(n)], "title": [""] * n, "abstract": texts}),
                    name="synthetic")
    del texts
    peaks, t0 = Peaks(), time.perf_counter()
    peaks.take()
    engine = LocalEngine(part_rows=n) if way == "in memory" else LocalEngine()
    stored = embeddings_module.stored_embeddings(run.unified_model, corpus, run, progress=False, engine=engine)
    stage03, t1 = peaks.take(), time.perf_counter()
    if way == "in memory":
        emb = {a: unit_rows(v) for a, v in embeddings_module.embed_corpus(run.unified_model, corpus, run,
                                                                         progress=False).items()}
    else:
        stored = embeddings_module.stored_embeddings(run.unified_model, corpus, run, progress=False)
        emb = {a: unit32(np.asarray(stored[a])) for a in ASPECTS}
        check = sum(float(block[ASPECTS[0]].sum()) for _, block in stored.blocks())
        assert np.isfinite(check)
    amap = AspectMap(emb, None, np.zeros((n, 2)), method="sampled")
    y0 = pca_init(amap.feature_rows(), 0)
    stage05, t2 = peaks.take(), time.perf_counter()
    peaks.stop.set()
    return {"n": n, "way": way, "s03": t1 - t0, "s05": t2 - t1, "hwm03": stage03["hwm"], "anon03": stage03["anon"],
            "hwm05": stage05["hwm"], "anon05": stage05["anon"], "y0": float(np.abs(y0).sum())}


def run_child(n: int, way: str, dim: int, fresh: bool = True) -> dict:
    """`child` in a fresh interpreter (its peaks are its own), in a temporary run directory; in this process
    where not `fresh` (smoke mode: seconds, not one interpreter start per row; its peaks mean nothing)."""
    with tempfile.TemporaryDirectory(prefix="stored-emb-") as folder:
        if not fresh:
            return child(n, way, dim, folder)
        out = subprocess.run([sys.executable, __file__, "--child", str(n), way, str(dim), folder],
                             capture_output=True, text=True, check=False,
                             env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if out.returncode:
        raise RuntimeError(f"child {n} {way} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        n, way, dim, folder = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
        print(json.dumps(child(n, way, dim, folder)))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs=2, default=[20_000, 100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    add_smoke(parser, sizes=[300, 600], dim=32)
    args = parser.parse_args()
    load = open("/proc/loadavg").read().split()[:3]
    print(f"{datetime.date.today()}, load {' '.join(load)}, the 1600 x 768 x 3072 fp32 product "
          f"{matmul_gflops():.0f} GFLOP/s (`benchmarks/_machine.py`); {len(ASPECTS)} aspects x {args.dim} dims, "
          f"hashed stand-in backbone")
    print("\n| papers | embeddings | stage 03 s | 03 peak MB (VmHWM / anon) | 05 read s | 05 peak MB (VmHWM / anon) |")
    print("|---:|---|---:|---:|---:|---:|")
    results = {}
    for way in args.ways:
        for n in args.sizes:
            r = results[way, n] = run_child(n, way, args.dim, fresh=not args.smoke)
            print(f"| {n:,} | {way} | {r['s03']:.1f} | {r['hwm03']:.0f} / {r['anon03']:.0f} | {r['s05']:.1f} | "
                  f"{r['hwm05']:.0f} / {r['anon05']:.0f} |", flush=True)
    small, large = args.sizes
    print()
    for way in args.ways:
        a, b = results[way, small], results[way, large]
        stages = "; ".join(f"{name}: {a['hwm' + k]:.0f} -> {b['hwm' + k]:.0f} MB ({b['hwm' + k] / a['hwm' + k]:.2f}x; "
                           f"anonymous {b['anon' + k] / a['anon' + k]:.2f}x)"
                           for name, k in (("stage 03", "03"), ("stage 05's read", "05")))
        peak = {r["n"]: max(r["hwm03"], r["hwm05"]) for r in (a, b)}
        ratio = peak[large] / peak[small]
        met = ratio <= BAR_RATIO and peak[large] <= BAR_GB * 1024
        print(f"{way}, {small:,} -> {large:,} papers: {stages}; peak {ratio:.2f}x, {peak[large]:.0f} MB; bar (<= "
              f"{BAR_RATIO}x, <= {BAR_GB:.0f} GB): {'met' if met else 'not met'}")

if __name__ == "__main__":
    main()
